"""numpy kernels for ordering and scan Calls (ArgTopK, ArgSort, CumReduce, Flip, Roll).

Sorting is stable and puts NaN after +inf (numpy's order, which is PyTorch's: NaN is the largest
value); descending keeps equal entries in input order too, so ties resolve to the lowest index.
Scans accumulate in PyTorch's CPU accumulation type (``acc_type<T, false>``): float32 for the half
types, float64 for float32 and float64, int64 for integers; each output is rounded once.
"""

from __future__ import annotations

import numpy as np

from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.runtime.numpy_backend import kernel, widen

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_HALF = (np.dtype(np.float16), dtypes.to_numpy("bf16"))


def _sort_key(x: np.ndarray) -> np.ndarray:
    # float32 holds float16 / bfloat16 exactly, and numpy's NaN-last sort is native there.
    return widen(x)


def argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable int64 argsort along ``axis``; equal entries keep their input order either way."""
    key = _sort_key(x)
    if not descending:
        return np.argsort(key, axis=axis, kind="stable").astype(np.int64, copy=False)
    # Sort the reversed lane ascending (stable), reverse the result: descending order with equal
    # entries back in input order, and NaN (largest) first.
    order = np.flip(np.argsort(np.flip(key, axis), axis=axis, kind="stable"), axis)
    return (x.shape[axis] - 1 - order).astype(np.int64, copy=False)


@kernel(C.ArgSort)
def arg_sort(c: C.ArgSort, x: np.ndarray) -> np.ndarray:
    # A stable sort is a valid answer for an unstable one: `stable` needs no separate path.
    return argsort(x, c.axis, c.descending)


@kernel(C.ArgTopK)
def arg_top_k(c: C.ArgTopK, x: np.ndarray) -> np.ndarray:
    # Unsorted top-k is returned sorted too (one of the orders PyTorch allows).
    order = argsort(x, c.axis, c.largest)
    return np.ascontiguousarray(order[(slice(None),) * c.axis + (slice(0, c.k),)])


def _accumulator(dtype: np.dtype) -> np.dtype:
    if dtype in _HALF:
        return _F32
    if dtype.kind == "f":
        return _F64
    return np.dtype(np.int64) if dtype.kind in "iub" else dtype


def _scan_index(x: np.ndarray, axis: int, fn: str) -> np.ndarray:
    """Where the running max/min was last attained (PyTorch's ``>=`` / ``<=`` update rule; a NaN
    takes over, and every later NaN moves the index)."""
    xw = widen(x)
    running = (np.maximum if fn == "max" else np.minimum).accumulate(xw, axis=axis)
    hit = xw == running
    if xw.dtype.kind == "f":
        hit |= np.isnan(xw)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    positions = np.arange(x.shape[axis], dtype=np.int64).reshape(shape)
    # The last position ≤ i where the running value was attained is the last "hit" so far.
    return np.maximum.accumulate(np.where(hit, positions, 0), axis=axis)


@kernel(C.CumReduce)
def cum_reduce(c: C.CumReduce, x: np.ndarray) -> np.ndarray:
    if x.shape[c.axis] == 0:
        return np.zeros(x.shape, np.int64 if c.indices else x.dtype)
    if c.fn in ("max", "min"):
        idx = _scan_index(x, c.axis, c.fn)
        # The values are the entries at those positions: exactly what PyTorch stores, signed zeros too.
        return idx if c.indices else np.take_along_axis(x, idx, axis=c.axis)
    acc = x.astype(_accumulator(x.dtype), copy=False)
    if c.fn == "sum":
        out = np.cumsum(acc, axis=c.axis)
    elif c.fn == "prod":
        out = np.cumprod(acc, axis=c.axis)
    elif c.fn == "logsumexp":
        out = np.logaddexp.accumulate(acc, axis=c.axis)
    else:
        raise ValueError(f"unknown scan {c.fn!r}")
    if c.fn != "prod" and out.dtype.kind == "f":
        # PyTorch's additive scans start from +0, so a lane opening with -0 gives +0; numpy keeps -0.
        out += 0.0
    return out.astype(x.dtype, copy=False)


@kernel(C.Flip)
def flip(c: C.Flip, x: np.ndarray) -> np.ndarray:
    return np.flip(x, axis=c.axes) if c.axes else x


@kernel(C.Roll)
def roll(c: C.Roll, x: np.ndarray) -> np.ndarray:
    if not c.axes:  # the flattened tensor, shape kept
        return np.roll(x, c.shifts[0])
    return np.roll(x, c.shifts, axis=c.axes)
