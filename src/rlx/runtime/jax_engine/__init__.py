"""The JAX engine: a whole Program becomes one ``jax.jit`` function, compiled by XLA.

jax is an optional extra. This package's ``__init__`` does not import it: ``import rlx`` and the
numpy engine never pull it in, and asking for this engine without jax installed raises one
``UsageError`` saying how to install it.
"""

from __future__ import annotations

from rlx.errors import UsageError

JAX_MISSING = "the JAX backend needs jax: pip install 'rlx[jax]'"


def require_jax() -> None:
    try:
        import jax  # noqa: F401
    except ImportError:
        raise UsageError(JAX_MISSING) from None


__all__ = ["JAX_MISSING", "require_jax"]
