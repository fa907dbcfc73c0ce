"""Ordering and scans: ArgSort, ArgTopK, CumReduce, Flip, Roll.

Sorting is stable and puts NaN after +inf (PyTorch's order: NaN is the largest value);
descending keeps equal entries in input order too, so ties resolve to the lowest index. Scans
accumulate in PyTorch's CPU accumulation type (``scan_accumulator``) and round once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .precision import scan_accumulator, widen
from .registry import kernel

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace


def argsort(x: Any, axis: int, descending: bool, xp: ArrayNamespace) -> Any:
    """Stable int64 argsort along ``axis``; equal entries keep their input order either way."""
    key = widen(x)  # float32 holds float16 / bfloat16 exactly, and sorts NaN last natively
    if not descending:
        return xp.argsort(key, axis=axis, stable=True).astype(np.int64, copy=False)
    # Sort the reversed lane ascending (stable), reverse the result: descending order with equal
    # entries back in input order, and NaN (largest) first.
    order = xp.flip(xp.argsort(xp.flip(key, axis), axis=axis, stable=True), axis)
    return (x.shape[axis] - 1 - order).astype(np.int64, copy=False)


@kernel("ArgSort")
def arg_sort(c: C.ArgSort, x: Any, *, xp: ArrayNamespace) -> Any:
    # A stable sort is a valid answer for an unstable one: `stable` needs no separate path.
    return argsort(x, c.axis, c.descending, xp)


@kernel("ArgTopK")
def arg_top_k(c: C.ArgTopK, x: Any, *, xp: ArrayNamespace) -> Any:
    # Unsorted top-k is returned sorted too (one of the orders PyTorch allows). The partition's
    # dozen steps cost more than sorting a lane of about 1 500 values.
    if xp.name == "numpy" and isinstance(c.k, int) and 0 < c.k and 8 * c.k <= x.shape[c.axis] and x.size >= 2048:
        return _top_k_by_partition(x, c.k, c.axis, c.largest, xp)
    order = argsort(x, c.axis, c.largest, xp)
    return xp.ascontiguousarray(order[(slice(None),) * c.axis + (slice(0, c.k),)])


def _top_k_by_partition(x: np.ndarray, k: int, axis: int, largest: bool, xp: ArrayNamespace) -> np.ndarray:
    """``arg_top_k`` of a few out of a long lane without sorting the lane (a top-50 of 50257 took
    3.9 ms sorted): the k entries an ``argpartition`` puts beyond the k-th value (NaN is the
    largest there too), then those k sorted. Where the k-th value has ties that were not all taken,
    the partition may have taken any of them: then every entry beyond the k-th value and the
    first entries equal to it (the lowest indices)."""
    key = np.moveaxis(widen(x), axis, -1)
    n = key.shape[-1]
    at = n - k if largest else k - 1
    parts = np.argpartition(key, at, axis=-1)
    chosen = parts[..., n - k :] if largest else parts[..., :k]
    kth = np.take_along_axis(key, parts[..., at, None], -1)
    nan, kth_nan = np.isnan(key), np.isnan(kth)
    tied = (key == kth) | (nan & kth_nan)
    taken = np.take_along_axis(tied, chosen, -1).sum(-1)
    if not np.array_equal(taken, tied.sum(-1)):  # some ties left out: take the lowest indices
        # the entries strictly beyond the k-th value (NaN is beyond every number, nothing beyond NaN)
        with np.errstate(invalid="ignore"):
            beyond = ((key > kth) | nan) & ~kth_nan if largest else (key < kth) | (~nan & kth_nan)
        room = k - beyond.sum(-1, keepdims=True)
        keep = beyond | (tied & (np.cumsum(tied, axis=-1) <= room))
        chosen = np.argsort(~keep, axis=-1, stable=True)[..., :k]
    chosen = np.sort(chosen, axis=-1)  # (index order: ties stay so in the sort below)
    order = argsort(np.take_along_axis(key, chosen, -1), -1, largest, xp)
    top = np.take_along_axis(chosen, order, -1)
    return np.ascontiguousarray(np.moveaxis(top, -1, axis))


def _scan_index(x: Any, axis: int, fn: str, xp: ArrayNamespace) -> Any:
    """Where the running max/min was last attained (PyTorch's ``>=`` / ``<=`` update rule; a NaN
    takes over, and every later NaN moves the index)."""
    xw = widen(x)
    if xw.dtype == np.bool_:  # bools as numbers: some engines' running max takes numbers only
        xw = xw.astype(np.uint8)
    running = (xp.cummax if fn == "max" else xp.cummin)(xw, axis=axis)
    hit = xw == running
    if xw.dtype.kind == "f":
        hit = hit | xp.isnan(xw)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    positions = xp.reshape(xp.arange(x.shape[axis], dtype=np.int64), tuple(shape))
    # The last position ≤ i where the running value was attained is the last "hit" so far.
    return xp.cummax(xp.where(hit, positions, 0), axis=axis)


_SCANS = {"sum": "cumsum", "prod": "cumprod", "logsumexp": "cumlogsumexp"}


@kernel("CumReduce")
def cum_reduce(c: C.CumReduce, x: Any, *, xp: ArrayNamespace) -> Any:
    if x.shape[c.axis] == 0:
        return xp.zeros(x.shape, np.int64 if c.indices else x.dtype)
    if c.fn in ("max", "min"):
        idx = _scan_index(x, c.axis, c.fn, xp)
        # The values are the entries at those positions: exactly what PyTorch stores, signed zeros too.
        return idx if c.indices else xp.take_along_axis(x, idx, axis=c.axis)
    if c.fn not in _SCANS:
        raise ValueError(f"unknown scan {c.fn!r}")
    out = getattr(xp, _SCANS[c.fn])(x.astype(scan_accumulator(x.dtype), copy=False), axis=c.axis)
    if c.fn != "prod" and out.dtype.kind == "f":
        # PyTorch's additive scans start from +0, so a lane opening with -0 gives +0.
        out = out + 0.0
    return out.astype(x.dtype, copy=False)


@kernel("Flip")
def flip(c: C.Flip, x: Any, *, xp: ArrayNamespace) -> Any:
    return xp.flip(x, axis=tuple(c.axes)) if c.axes else x


@kernel("Roll")
def roll(c: C.Roll, x: Any, *, xp: ArrayNamespace) -> Any:
    if not c.axes:  # the flattened tensor, shape kept
        return xp.roll(x, c.shifts[0])
    return xp.roll(x, tuple(c.shifts), axis=tuple(c.axes))


@kernel("SearchSorted")
def search_sorted(c: C.SearchSorted, sorted_: Any, values: Any, *, xp: ArrayNamespace) -> Any:
    # Counting comparisons works on every engine and any batch; the sequences are short.
    if sorted_.ndim == 1:
        below = sorted_ <= values[..., None] if c.right else sorted_ < values[..., None]
    else:
        below = (
            sorted_[..., None, :] <= values[..., :, None] if c.right else sorted_[..., None, :] < values[..., :, None]
        )
    return xp.sum(below, axis=-1).astype(np.int64)
