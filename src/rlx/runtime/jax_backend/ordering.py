"""JAX kernels for ordering and scan Calls (ArgTopK, ArgSort, CumReduce, Flip, Roll).

The same semantics as the numpy kernels (``rlx.runtime.ordering_kernels``): sorting is stable, NaN
is the largest value and equal entries keep their input order in both directions; scans accumulate
in PyTorch's CPU accumulation type (float32 for the half types, float64 for float32/float64, int64
for integers) and round once. ``lax.sort`` already treats -0 as +0 and every NaN alike, so a stable
sort of the (widened) values is PyTorch's order (``lax.top_k`` is not: it orders ±0 and NaN its
own way, so top-k is a sort too).

XLA computes cumulative sums, products and log-sum-exps as parallel scans, not in PyTorch's
sequential order: exact for integers, within a few units in the last place for floats (float32
accumulates in float64, so its results rarely differ at all). A lane starting with -0 sums to +0
there, as in PyTorch. Needs ``jax_enable_x64`` for int64 and float64.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.runtime.jax_backend.registry import kernel

_F32, _F64, _I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)
_HALF = (np.dtype(np.float16), dtypes.to_numpy("bf16"))


def _widen(x: jnp.ndarray) -> jnp.ndarray:
    """float16/bfloat16 → float32 (exact), other dtypes unchanged."""
    return x.astype(_F32) if x.dtype in _HALF else x


def argsort(x: jnp.ndarray, axis: int, descending: bool) -> jnp.ndarray:
    """Stable int64 argsort along ``axis``; equal entries keep their input order either way."""
    key = _widen(x)
    iota = lax.broadcasted_iota(_I64, key.shape, axis)
    if not descending:
        return lax.sort_key_val(key, iota, dimension=axis, is_stable=True)[1]
    # Sort the reversed lane ascending (stable) and reverse the result: descending order with equal
    # entries back in input order, and NaN (largest) first.
    _, order = lax.sort_key_val(lax.rev(key, (axis,)), lax.rev(iota, (axis,)), dimension=axis, is_stable=True)
    return lax.rev(order, (axis,))


@kernel(C.ArgSort)
def arg_sort(c: C.ArgSort, x: jnp.ndarray) -> jnp.ndarray:
    # A stable sort is a valid answer for an unstable one: `stable` needs no separate path.
    return argsort(x, c.axis, c.descending)


@kernel(C.ArgTopK)
def arg_top_k(c: C.ArgTopK, x: jnp.ndarray) -> jnp.ndarray:
    # Unsorted top-k is returned sorted too (one of the orders PyTorch allows). A full sort rather
    # than lax.top_k: top_k has no stable tie rule and works on the last axis only.
    order = argsort(x, c.axis, c.largest)
    return lax.slice_in_dim(order, 0, c.k, axis=c.axis)


def _accumulator(dtype: np.dtype) -> np.dtype:
    if dtype in _HALF:
        return _F32
    if dtype.kind == "f":
        return _F64
    return _I64 if dtype.kind in "iub" else dtype


def _scan_index(x: jnp.ndarray, axis: int, fn: str) -> jnp.ndarray:
    """Where the running max/min was last attained (PyTorch's ``>=`` / ``<=`` update rule; a NaN
    takes over, and every later NaN moves the index)."""
    xw = _widen(x)
    if xw.dtype == np.bool_:  # lax's cumulative max/min take numbers only
        xw = xw.astype(np.uint8)
    # lax.max/min propagate NaN, as numpy's maximum/minimum do.
    running = (lax.cummax if fn == "max" else lax.cummin)(xw, axis=axis)
    hit = xw == running
    if jnp.issubdtype(xw.dtype, jnp.floating):
        hit = hit | jnp.isnan(xw)
    positions = lax.broadcasted_iota(_I64, x.shape, axis)
    # The last position ≤ i where the running value was attained is the last "hit" so far.
    return lax.cummax(jnp.where(hit, positions, 0), axis=axis)


@kernel(C.CumReduce)
def cum_reduce(c: C.CumReduce, x: jnp.ndarray) -> jnp.ndarray:
    if x.shape[c.axis] == 0:
        return jnp.zeros(x.shape, _I64 if c.indices else x.dtype)
    if c.fn in ("max", "min"):
        idx = _scan_index(x, c.axis, c.fn)
        # The values are the entries at those positions: exactly what PyTorch stores, signed zeros too.
        return idx if c.indices else jnp.take_along_axis(x, idx, axis=c.axis)
    acc = x.astype(_accumulator(np.dtype(x.dtype)))
    if c.fn == "sum":
        out = lax.cumsum(acc, axis=c.axis)
    elif c.fn == "prod":
        out = lax.cumprod(acc, axis=c.axis)
    elif c.fn == "logsumexp":
        out = lax.cumlogsumexp(acc, axis=c.axis)
    else:
        raise ValueError(f"unknown scan {c.fn!r}")
    return out.astype(x.dtype)


@kernel(C.Flip)
def flip(c: C.Flip, x: jnp.ndarray) -> jnp.ndarray:
    return lax.rev(x, tuple(c.axes)) if c.axes else x


@kernel(C.Roll)
def roll(c: C.Roll, x: jnp.ndarray) -> jnp.ndarray:
    if not c.axes:  # the flattened tensor, shape kept
        return jnp.roll(x, c.shifts[0])
    return jnp.roll(x, tuple(c.shifts), axis=tuple(c.axes))
