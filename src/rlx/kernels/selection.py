"""Selection: Nonzero, NonzeroStatic, MaskedSelect, Unique, NonMaxSuppression, Bincount, Histc,
GroupedMatMul.

Most of these produce a result whose length depends on the data (a bare data symbol ``u0`` in the
program); the numpy engine binds it from the result. ``NonzeroStatic``, ``Histc`` and
``GroupedMatMul`` have fixed shapes and trace under JAX as well.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .precision import widen
from .registry import kernel

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace


@kernel("Nonzero")
def nonzero(c: C.Nonzero, x: Any, *, xp: ArrayNamespace) -> Any:
    found = xp.argwhere(x).astype(np.int64)
    return found.reshape(found.shape[0], x.ndim)  # a 0-d input has [n, 0] coordinates, n = 0 or 1


@kernel("NonzeroStatic")
def nonzero_static(c: C.NonzeroStatic, x: Any, *, xp: ArrayNamespace) -> Any:
    # The first `size` non-zero positions in row-major order, padded with `fill`: every position's
    # rank among the non-zero ones is a running count, and each row picks the position of its rank.
    flat = xp.reshape(x, (-1,)) != 0
    rank = xp.cumsum(flat.astype(np.int64)) - 1
    slots = xp.arange(c.size, dtype=np.int64)
    hit = flat[None, :] & (rank[None, :] == slots[:, None])  # [size, numel]: row s marks the s-th non-zero
    found = xp.any(hit, axis=1) if flat.shape[0] else xp.zeros((c.size,), dtype=bool)
    position = xp.argmax(hit, axis=1) if flat.shape[0] else xp.zeros((c.size,), dtype=np.int64)
    coords = []
    for extent in reversed(x.shape):  # unravel the flat position, last axis fastest
        coords.append(position % extent)
        position = position // extent
    out = xp.stack(coords[::-1], axis=1).astype(np.int64) if coords else xp.zeros((c.size, 0), np.int64)
    return xp.where(found[:, None], out, np.int64(c.fill))


@kernel("MaskedSelect")
def masked_select(c: C.MaskedSelect, x: Any, mask: Any, *, xp: ArrayNamespace) -> Any:
    shape = xp.broadcast_shapes(x.shape, mask.shape)
    return xp.broadcast_to(x, shape)[xp.broadcast_to(mask, shape)]


def _runs(x: Any, xp: ArrayNamespace) -> tuple[Any, Any, Any, Any]:
    """``unique_consecutive`` of a vector (or of the rows of a matrix): values, inverse, counts and
    the position where each run starts."""
    if x.shape[0] == 0:
        empty = xp.zeros((0,), np.int64)
        return x, empty, empty, empty
    differs = x[1:] != x[:-1]
    if differs.ndim > 1:
        differs = differs.reshape(differs.shape[0], -1).any(axis=1)
    starts = xp.concatenate([xp.ones((1,), bool), differs])
    inverse = xp.cumsum(starts.astype(np.int64)) - 1
    first = xp.flatnonzero(starts).astype(np.int64)
    counts = xp.diff(xp.concatenate([first, xp.asarray([x.shape[0]])])).astype(np.int64)
    return x[first], inverse, counts, first


@kernel("Unique")
def unique(c: C.Unique, x: Any, *, xp: ArrayNamespace) -> Any:
    axis = c.axis
    lanes = xp.reshape(x, (-1,)) if axis is None else xp.moveaxis(x, axis, 0)
    if not c.consecutive:
        # Sorted order first (stable, lexicographic over the slices), then runs of equal entries.
        if lanes.ndim == 1:
            order = xp.argsort(lanes, stable=True)
        else:
            flat = lanes.reshape(lanes.shape[0], -1)
            order = xp.lexsort(flat.T[::-1]) if flat.shape[1] else xp.arange(flat.shape[0])
        values, inverse_sorted, counts, starts = _runs(lanes[order], xp)
        first = order[starts].astype(np.int64)  # stable sort: a run starts at its first occurrence
        if not c.sorted:  # the values in the order they first occur
            by_first = xp.argsort(first, stable=True)
            rank = xp.zeros(by_first.shape, np.int64)
            rank[by_first] = xp.arange(by_first.shape[0], dtype=np.int64)
            values, counts, first, inverse_sorted = (
                values[by_first],
                counts[by_first],
                first[by_first],
                rank[inverse_sorted],
            )
        inverse = xp.zeros(inverse_sorted.shape, np.int64)
        inverse[order] = inverse_sorted
    else:
        values, inverse, counts, first = _runs(lanes, xp)
    if c.part == "values":
        return values if axis is None else xp.moveaxis(values, 0, axis)
    if c.part == "inverse":
        return inverse.reshape(x.shape) if axis is None else inverse
    if c.part == "indices":
        return first
    return counts


def _first(v: Any) -> Any:
    return np.asarray(v).reshape(-1)[0]


def _iou_suppresses(boxes: Any, center: bool, threshold: Any) -> Any:
    """[N, N]: whether box i and box j overlap by more than ``threshold`` (IoU), computed in the
    boxes' precision term by term as ONNX's reference does (no overlap, empty boxes: never)."""
    if center:
        half_w, half_h = boxes[:, 2] / 2, boxes[:, 3] / 2
        x_lo, x_hi = boxes[:, 0] - half_w, boxes[:, 0] + half_w
        y_lo, y_hi = boxes[:, 1] - half_h, boxes[:, 1] + half_h
    else:
        x_lo, x_hi = np.minimum(boxes[:, 1], boxes[:, 3]), np.maximum(boxes[:, 1], boxes[:, 3])
        y_lo, y_hi = np.minimum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 0], boxes[:, 2])
    ix_lo, ix_hi = np.maximum(x_lo[:, None], x_lo[None, :]), np.minimum(x_hi[:, None], x_hi[None, :])
    iy_lo, iy_hi = np.maximum(y_lo[:, None], y_lo[None, :]), np.minimum(y_hi[:, None], y_hi[None, :])
    inter = (ix_hi - ix_lo) * (iy_hi - iy_lo)
    area = (x_hi - x_lo) * (y_hi - y_lo)
    union = area[:, None] + area[None, :] - inter
    valid = (ix_hi > ix_lo) & (iy_hi > iy_lo) & (inter > 0) & (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return valid & (inter / np.where(valid, union, 1) > threshold)


@kernel("NonMaxSuppression")
def non_max_suppression(
    c: C.NonMaxSuppression, boxes: Any, scores: Any, max_per_class: Any, iou: Any, score_threshold: Any, *, xp: Any
) -> Any:
    # A greedy loop over the data (numpy only: its result size is data-dependent, which the JAX
    # engine refuses up front).
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    limit = max(int(_first(max_per_class)), 0)
    threshold = _first(iou).astype(boxes.dtype)
    rows: list[tuple[int, int, int]] = []
    for batch in range(boxes.shape[0]):
        suppresses = _iou_suppresses(boxes[batch], c.center_point_box, threshold)
        for cls in range(scores.shape[1]):
            s = scores[batch, cls]
            order = np.argsort(-s, kind="stable")  # descending score, ties by lower index
            if score_threshold is not None:
                order = order[s[order] > _first(score_threshold)]
            kept: list[int] = []
            for box in order.tolist():
                if len(kept) >= limit:
                    break
                if not suppresses[box, kept].any():
                    kept.append(box)
                    rows.append((batch, cls, box))
    return np.asarray(rows, np.int64).reshape(-1, 3)


@kernel("Bincount")
def bincount(c: C.Bincount, x: Any, weights: Any, *, xp: ArrayNamespace) -> Any:
    if x.shape[0] and x.min() < 0:
        raise ValueError("bincount only counts non-negative values")
    return xp.bincount(x, weights=weights, minlength=c.minlength)


@kernel("Histc")
def histc(c: C.Histc, x: Any, *, xp: ArrayNamespace) -> Any:
    hits = histc_bins(c, x, xp)[:, None] == xp.arange(c.bins, dtype=np.int64)[None, :]
    return hits.sum(axis=0).astype(x.dtype)


def histc_bins(c: C.Histc, x: Any, xp: ArrayNamespace) -> Any:
    """Each value's bin, ``c.bins`` for values outside the range and NaN."""
    flat = xp.reshape(x, (-1,))
    lo, hi = xp.asarray(c.lo, x.dtype), xp.asarray(c.hi, x.dtype)
    if c.lo == c.hi and flat.shape[0]:  # PyTorch takes the data's range, widened by 1 if it is a point
        lo, hi = flat.min(), flat.max()
        point = lo == hi
        lo, hi = xp.where(point, lo - 1, lo), xp.where(point, hi + 1, hi)
    inside = (flat >= lo) & (flat <= hi)
    # PyTorch's CPU formula, in the input's precision: bin = (x - lo) * bins / (hi - lo), hi → last bin.
    position = ((flat - lo) * c.bins / (hi - lo)).astype(np.int64)
    return xp.where(inside, xp.minimum(position, c.bins - 1), c.bins)


@kernel("GroupedMatMul")
def grouped_mat_mul(c: C.GroupedMatMul, x: Any, w: Any, offsets: Any, *, xp: ArrayNamespace) -> Any:
    rows = xp.arange(x.shape[0], dtype=np.int64)
    group = xp.searchsorted(offsets.astype(np.int64), rows, side="right")
    valid = group < w.shape[0]
    picked = w[xp.minimum(group, w.shape[0] - 1)]  # [rows, K, N]
    out = xp.matmul(widen(x)[:, None, :], widen(picked))[:, 0, :]
    return xp.where(valid[:, None], out, xp.zeros((), out.dtype)).astype(x.dtype)
