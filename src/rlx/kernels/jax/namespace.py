"""The JAX engine's array namespace: jax.numpy, with XLA's differences from numpy made explicit.

- ``matmul`` asks for ``Precision.HIGHEST``: XLA's default may drop to TF32/bf16 passes on GPUs
  and TPUs, while PyTorch keeps float32 exact (``allow_tf32`` is off by default), and so do we;
- ``take`` / ``take_along_axis`` count negative indices from the end (as numpy does) and clamp
  an index out of range, which cannot raise inside a compiled function;
- scans are XLA's own (``lax.cummax`` …), which accept what numpy's ``ufunc.accumulate`` does;
- ``unfused_mul``, ``exact_div`` and ``barrier`` undo three ways XLA's CPU compiler rounds otherwise
  than the order written (the resampling kernels, which follow PyTorch's roundings, call them): it
  fuses a product into the sum it feeds (an FMA), divides by a constant as a multiplication by its
  reciprocal, and folds two constants applied in a row (``(x + a) - b`` becomes ``x + (a - b)``).

int64 and float64 need 64-bit mode: run inside ``x64()`` (the executor and the generated package do).
"""

from __future__ import annotations

import functools
import importlib
from contextlib import AbstractContextManager
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.special as jax_special
from jax import lax

from ...kernels import elementwise
from ...kernels.namespace import ArrayNamespace

HIGHEST = lax.Precision.HIGHEST


def x64() -> AbstractContextManager[Any]:
    """A scope in which JAX keeps int64 and float64 (thread-local; the caller's setting comes back).

    rlx programs carry int64 indices and may compute in float64; without 64-bit mode JAX silently
    truncates both to 32 bits. Setting ``jax_enable_x64`` globally when the engine is imported would
    change the defaults of the user's own JAX code (``jnp.arange`` → int64, Python floats → float64),
    so it is switched on only around rlx's own tracing, compiling and running.
    """
    enable = getattr(jax, "enable_x64", None)  # jax >= 0.5: jax.enable_x64(True) is the scope
    if enable is not None:
        return enable(True)
    experimental: Any = importlib.import_module("jax.experimental")  # older jax
    return experimental.enable_x64()


def _wrap(index: Any, n: int) -> Any:
    """Negative indices count from the end (as numpy's take does). An index out of range cannot
    raise inside a compiled function; it is clamped to the axis instead."""
    index = jnp.asarray(index)
    return jnp.where(index < 0, index + n, index)


def _take(x: Any, index: Any, axis: int) -> Any:
    return jnp.take(x, _wrap(index, x.shape[axis]), axis=axis, mode="clip")


def _take_along_axis(x: Any, index: Any, axis: int) -> Any:
    return jnp.take_along_axis(x, _wrap(index, x.shape[axis]), axis=axis, mode="clip")


def _unfused_mul(a: Any, b: Any) -> Any:
    """``a·b`` rounded on its own, never fused into an add or subtract that uses it, however far
    down: the product hides behind a select XLA cannot see through (NaN·b is NaN either way)."""
    return jnp.where(jnp.isnan(a), a, a * b)


def _exact_div(a: Any, b: Any) -> Any:
    """``a / b`` for a constant ``b``, correctly rounded (not ``a · (1/b)``)."""
    return a / jnp.where(jnp.isnan(a), a, b)


JAX = ArrayNamespace(
    "jax",
    jnp,
    erf=lax.erf,
    matmul=functools.partial(jnp.matmul, precision=HIGHEST),
    take=_take,
    take_along_axis=_take_along_axis,
    ascontiguousarray=jnp.asarray,  # XLA chooses layouts itself
    cummax=lax.cummax,
    cummin=lax.cummin,
    cumlogsumexp=lax.cumlogsumexp,
    fori_loop=lax.fori_loop,
    make_complex=lambda re, im: lax.complex(
        *jnp.broadcast_arrays(re, im)
    ),  # a traced trip count is fine: XLA makes it a while loop
    special_library=lambda *fns: jax_special,
    unfused_mul=_unfused_mul,
    exact_div=_exact_div,
    barrier=lax.optimization_barrier,  # later operations with constants are not folded into earlier ones
)
elementwise.bind(JAX)
