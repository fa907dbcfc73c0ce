"""The JAX engine: a whole Program becomes one ``jax.jit`` function, compiled by XLA.

jax is an optional extra. This package's ``__init__`` does not import it: ``import rlx`` and the
numpy engine never pull it in, and asking for this engine without jax installed raises one
``UsageError`` saying how to install it.
"""

from __future__ import annotations

from rlx.optional import require


def require_jax() -> None:
    require("jax", extra="jax", feature="the JAX engine")


__all__ = ["require_jax"]
