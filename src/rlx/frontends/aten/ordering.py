"""Ordering and scan lowerings: topk, sort, argsort, cumulative reductions, flip, roll, tril/triu, repeat.

Sorting is stable everywhere: equal values keep their input order (descending too), and topk,
kthvalue and the medians pick the lowest index among equal values. NaN is the largest value, as in
PyTorch. That is PyTorch's contract for ``sort(stable=True)``; for the unstable forms (``sort``,
``topk``, ``kthvalue``, ``median``, ``mode``) CPU PyTorch's index among ties comes out of its
introsort / ``nth_element`` and is not specified, so there only the values are guaranteed equal.
``topk(sorted=False)`` returns the sorted order, which is one of the orders PyTorch allows.
"""

from __future__ import annotations

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node, TensorMeta
from rlx.frontends.aten.creation import fill_value
from rlx.frontends.aten.movement import reshape_to, take_slice
from rlx.frontends.aten.reduce import reduce_value
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import norm_axis
from rlx.ir import dtypes, symbolic
from rlx.ir.calls import (
    Arange,
    ArgReduce,
    ArgSort,
    ArgTopK,
    Binary,
    CumReduce,
    Expand,
    Flip,
    Full,
    Gather,
    IndexSelect,
    Permute,
    Roll,
    SearchSorted,
    Unary,
    Where,
)
from rlx.ir.program import Lit, Operand, Ref
from rlx.ir.symbolic import Dim, Sym


# ── helpers ──────────────────────────────────────────────────────────────────
def _lane(b: Builder, x: Ref, dim: int) -> tuple[Ref, int]:
    """``x`` and the axis to work along; a 0-d tensor becomes ``[1]`` (PyTorch accepts dim 0/-1)."""
    axis = norm_axis(dim, b.rank(x))
    return (reshape_to(b, x, (1,)), 0) if b.rank(x) == 0 else (x, axis)


def _with(shape: tuple[Dim, ...], axis: int, size: Dim) -> tuple[Dim, ...]:
    return shape[:axis] + (size,) + shape[axis + 1 :]


def _index_meta(node: Node, k: int) -> TensorMeta:
    m = node.out[k] if len(node.out) > k else None
    if not isinstance(m, TensorMeta):
        raise LoweringError(f"node {node.id} ({node.op}): result {k} has no tensor shape recorded")
    return m


def _arange(b: Builder, n: Dim, axis: int, rank: int) -> Ref:
    """int64 ``0..n-1`` laid along ``axis`` of a rank-``rank`` tensor (1 on the other axes)."""
    r = b.emit(Arange(0, n, 1, "i64"), (n,), "i64")
    return reshape_to(b, r, (1,) * axis + (n,) + (1,) * (rank - axis - 1))


def _static_int(node: Node, value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise LoweringError(f"node {node.id} ({node.op}): {what} must be a static int, found {value!r}")
    return value


# ── sorting and selection ────────────────────────────────────────────────────
@lowers("aten.topk")
def topk(node: Node, b: Builder) -> tuple[Operand, Operand]:
    x = b.input(node, 0)
    k = _static_int(node, b.scalar(node, 1, "k"), "k")
    dim, largest, sorted_ = node.arg(2, "dim", -1), node.arg(3, "largest", True), node.arg(4, "sorted", True)
    values_meta, idx_meta = node.meta, _index_meta(node, 1)
    if b.rank(x) == 0:  # torch accepts k = 0 or 1 and returns the element itself
        norm_axis(dim, 0)
        return x, b.emit(Full(0, (), "i64"), (), "i64")
    axis = norm_axis(dim, b.rank(x))
    size = b.shape(x)[axis]
    if isinstance(size, int) and not 0 <= k <= size:
        raise LoweringError(f"node {node.id}: topk k={k} is out of range for axis {axis} of size {size}")
    idx = b.emit(ArgTopK(x, k, axis, bool(largest), bool(sorted_)), idx_meta.shape, "i64")
    return b.emit(Gather(x, axis, idx), values_meta.shape, values_meta.dtype), idx


@lowers("aten.sort", "aten.argsort", "aten.msort")
def sort(node: Node, b: Builder) -> Operand | tuple[Operand, Operand]:
    x = b.input(node, 0)
    if node.base == "msort":
        dim, descending, stable = 0, False, False
    elif node.overload == "stable":  # sort.stable(self, *, stable, dim=-1, descending=False)
        stable, dim, descending = node.arg(1, "stable"), node.arg(2, "dim", -1), node.arg(3, "descending", False)
    else:
        dim, descending, stable = node.arg(1, "dim", -1), node.arg(2, "descending", False), False
    axis = norm_axis(dim, b.rank(x))
    if b.rank(x) == 0:
        idx = b.emit(Full(0, (), "i64"), (), "i64")
        values: Operand | None = x
    else:
        idx = b.emit(ArgSort(x, axis, bool(descending), bool(stable)), b.shape(x), "i64")
        values = None if node.base == "argsort" else b.emit(Gather(x, axis, idx), b.shape(x), b.dtype(x))
    if values is None or node.base == "argsort":  # values is None exactly for argsort: said for the checker
        return idx
    return values if node.base == "msort" else (values, idx)


def _lower_middle(n: Dim) -> Dim:
    """``(n - 1) // 2``: the 0-based rank of the lower median."""
    return symbolic.floordiv(symbolic.sub(n, 1), 2)


def _kth_index(b: Builder, x: Ref, axis: int, rank: Dim) -> Ref:
    """Position (keepdim shape) of the entry of 0-based ``rank`` in ascending stable order."""
    if isinstance(rank, int):  # only the rank + 1 smallest need ordering
        order = b.emit(ArgTopK(x, rank + 1, axis, False, True), _with(b.shape(x), axis, rank + 1), "i64")
    else:
        order = b.emit(ArgSort(x, axis, False, True), b.shape(x), "i64")
    return take_slice(b, order, axis, rank, 1)


def _first_nan_wins(b: Builder, x: Ref, axis: int, idx: Ref) -> Ref:
    """``idx``, except on lanes holding a NaN: the first NaN's position (median's rule)."""
    if not dtypes.is_float(b.dtype(x)):
        return idx
    keep = b.shape(idx)
    nan = b.emit(Unary("isnan", x), b.shape(x), "bool")
    has_nan = reduce_value(b, "any", nan, (axis,), True, "bool")
    first = b.emit(ArgReduce("argmax", nan, axis, True), keep, "i64")
    return b.emit(Where(has_nan, first, idx), keep, "i64")


@lowers("aten.kthvalue", "aten.median", "aten.nanmedian")
def kthvalue(node: Node, b: Builder) -> Operand | tuple[Operand, Operand]:
    x = b.input(node, 0)
    whole = node.overload == "default" and node.base != "kthvalue"  # median(x): over every element
    if whole:
        x, axis = reshape_to(b, x, (symbolic.numel(b.shape(x)),)), 0
    else:
        x, axis = _lane(b, x, node.arg(2 if node.base == "kthvalue" else 1, "dim", -1))
    n = b.shape(x)[axis]
    if node.base == "kthvalue":
        k = _static_int(node, b.scalar(node, 1, "k"), "k")
        if k < 1 or (isinstance(n, int) and k > n):
            raise LoweringError(f"node {node.id}: kthvalue k={k} is out of range for an axis of size {n}")
        idx = _kth_index(b, x, axis, k - 1)
    elif n == 0:
        raise LoweringError(f"node {node.id}: {node.base} of an empty axis is undefined")
    elif node.base == "median":
        idx = _first_nan_wins(b, x, axis, _kth_index(b, x, axis, _lower_middle(n)))
    else:
        idx = _nanmedian_index(b, x, axis)
    values = b.emit(Gather(x, axis, idx), b.shape(idx), b.dtype(x))
    if whole:
        return reshape_to(b, values, node.meta.shape)
    return reshape_to(b, values, node.meta.shape), reshape_to(b, idx, _index_meta(node, 1).shape)


def _nanmedian_index(b: Builder, x: Ref, axis: int) -> Ref:
    """The lower median of the non-NaN entries: position ``(count - 1) // 2`` of the ascending
    stable order, where NaNs sort last (an all-NaN lane gives its first NaN)."""
    order = b.emit(ArgSort(x, axis, False, True), b.shape(x), "i64")
    if not dtypes.is_float(b.dtype(x)):
        return take_slice(b, order, axis, _lower_middle(b.shape(x)[axis]), 1)
    keep = _with(b.shape(x), axis, 1)
    nan = b.emit(Unary("isnan", x), b.shape(x), "bool")
    finite = b.emit(Unary("logical_not", nan), b.shape(x), "bool")
    count = reduce_value(b, "sum", finite, (axis,), True, "i64")
    below = b.emit(Binary("sub", count, Lit(1, "i64")), keep, "i64")
    pos = b.emit(
        Binary("floor_divide", b.emit(Binary("maximum", below, Lit(0, "i64")), keep, "i64"), Lit(2, "i64")), keep, "i64"
    )
    return b.emit(Gather(order, axis, pos), keep, "i64")


@lowers("aten.mode")
def mode(node: Node, b: Builder) -> tuple[Operand, Operand]:
    """The most frequent value (the smallest among equally frequent ones) and its last position.

    PyTorch sorts each lane and scans runs of equal values; its index is the last of the run in
    ``std::sort`` order, which is the last occurrence for lanes of up to 16 entries (insertion sort)
    and unspecified beyond. NaNs are never equal to each other, so each counts once.
    """
    x, axis = _lane(b, b.input(node, 0), node.arg(1, "dim", -1))
    shape, dt = b.shape(x), b.dtype(x)
    n = shape[axis]
    rank = len(shape)
    # counts[i] = #{j : x_j == x_i}, from the [.., n, n, ..] table of pairwise equalities.
    pair = shape[: axis + 1] + (n,) + shape[axis + 1 :]
    xi = reshape_to(b, x, shape[: axis + 1] + (1,) + shape[axis + 1 :])
    xj = reshape_to(b, x, shape[:axis] + (1,) + shape[axis:])
    same = b.emit(Binary("eq", xi, xj), pair, "bool")
    counts = reduce_value(b, "sum", same, (axis + 1,), False, "i64")
    best = reduce_value(b, "amax", counts, (axis,), True, "i64")
    top = b.emit(Binary("eq", counts, best), shape, "bool")
    if dtypes.is_float(dt) or dt == "bool":
        big: Operand = b.lit(float("inf") if dt != "bool" else True, dt)
    else:  # (the lane's own largest, not the type's: OpenVINO turned int32's largest into its smallest)
        big = reduce_value(b, "amax", x, (axis,), True, dt)
    candidates = b.emit(Where(top, x, big), shape, dt)
    value = reduce_value(b, "amin", candidates, (axis,), True, dt)
    hit = b.emit(Binary("eq", x, value), shape, "bool")
    where = b.emit(Where(hit, _arange(b, n, axis, rank), Lit(-1, "i64")), shape, "i64")
    idx = reduce_value(b, "amax", where, (axis,), True, "i64")
    return reshape_to(b, value, node.meta.shape), reshape_to(b, idx, _index_meta(node, 1).shape)


# ── scans ────────────────────────────────────────────────────────────────────
_SCANS = {"cumsum": "sum", "cumprod": "prod", "logcumsumexp": "logsumexp"}


@lowers("aten.cumsum", "aten.cumsum_", "aten.cumprod", "aten.cumprod_", "aten.logcumsumexp")
def cumulative(node: Node, b: Builder) -> Operand:
    # The recorded dtype already folds in dtype= and PyTorch's integer → int64 promotion; the scan
    # runs in it, as PyTorch casts the input before accumulating.
    out = node.meta
    x = b.cast(b.input(node, 0), out.dtype)
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    if b.rank(x) == 0:
        return x
    return b.emit_like(CumReduce(_SCANS[node.base.rstrip("_")], x, axis), out)


@lowers("aten.cummax", "aten.cummin")
def cummax(node: Node, b: Builder) -> tuple[Operand, Operand]:
    """Running max/min and where it was last attained: PyTorch moves the index on every entry
    ``>=`` (``<=``) the running value, and a NaN, once seen, wins and moves it on every later NaN."""
    x = b.input(node, 0)
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    if b.rank(x) == 0:
        return x, b.emit(Full(0, (), "i64"), (), "i64")
    fn = node.base.removeprefix("cum")
    values = b.emit(CumReduce(fn, x, axis), b.shape(x), b.dtype(x))
    return values, b.emit(CumReduce(fn, x, axis, indices=True), b.shape(x), "i64")


# ── data movement ────────────────────────────────────────────────────────────
def _flip(b: Builder, x: Ref, axes: tuple[int, ...]) -> Ref:
    return b.emit(Flip(x, tuple(sorted(axes))), b.shape(x), b.dtype(x)) if axes and b.rank(x) else x


@lowers("aten.flip", "aten.fliplr", "aten.flipud")
def flip(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    rank = b.rank(x)
    dims = {"fliplr": (1,), "flipud": (0,)}.get(node.base) or node.arg(1, "dims", ())
    axes = [norm_axis(d, rank) for d in ((dims,) if isinstance(dims, int) else dims)]
    if len(set(axes)) != len(axes):
        raise LoweringError(f"node {node.id}: flip dims {list(dims)} repeat an axis")
    return _flip(b, x, tuple(axes))


@lowers("aten.rot90")
def rot90(node: Node, b: Builder) -> Operand:
    # PyTorch: k=1 flips dims[1] then swaps; k=2 flips both; k=3 flips dims[0] then swaps.
    x = b.input(node, 0)
    rank = b.rank(x)
    k = node.arg(1, "k", 1) % 4
    d0, d1 = (norm_axis(d, rank) for d in node.arg(2, "dims", (0, 1)))
    if k == 2:
        return _flip(b, x, (d0, d1))
    if k == 0:
        return x
    y = _flip(b, x, (d1,) if k == 1 else (d0,))
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.emit_like(Permute(y, tuple(perm)), node.meta)


@lowers("aten.roll")
def roll(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    shape = b.shape(x)
    shifts = b.scalar(node, 1, "shifts")
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = node.arg(2, "dims", ())
    dims = (dims,) if isinstance(dims, int) else tuple(dims or ())
    if not dims:  # no dims: roll the flattened tensor, keep the shape
        if len(shifts) != 1:
            raise LoweringError(f"node {node.id}: roll without dims takes one shift, found {list(shifts)}")
        sizes: tuple[Dim, ...] = (symbolic.numel(shape),)
    elif len(dims) != len(shifts):
        raise LoweringError(f"node {node.id}: roll has {len(shifts)} shifts for {len(dims)} dims")
    else:
        dims = tuple(norm_axis(d, len(shape)) for d in dims)
        sizes = tuple(shape[d] for d in dims)
    keep = [
        (s % n if isinstance(n, int) else s, d)
        for s, n, d in zip(shifts, sizes, dims or (None,))
        if not (isinstance(n, int) and (n == 0 or s % n == 0))
    ]
    if not keep or not shape:
        return x
    return b.emit_like(Roll(x, tuple(s for s, _ in keep), tuple(d for _, d in keep if d is not None)), node.meta)


@lowers("aten.tril", "aten.triu", "aten.tril_", "aten.triu_")
def tril(node: Node, b: Builder) -> Operand:
    """Keep entries with ``col - row <= diagonal`` (tril) / ``>= diagonal`` (triu) of the last two
    axes, zero elsewhere: a select, so inf/NaN outside the triangle never leak."""
    x = b.input(node, 0)
    if b.rank(x) < 2:
        raise LoweringError(f"node {node.id}: {node.base} needs at least 2 dimensions, found {b.rank(x)}")
    diagonal = _static_int(node, b.scalar(node, 1, "diagonal", 0), "diagonal")
    rows, cols = b.shape(x)[-2:]
    offset = b.emit(Binary("sub", _arange(b, cols, 1, 2), _arange(b, rows, 0, 2)), (rows, cols), "i64")
    fn = "le" if node.base.startswith("tril") else "ge"
    keep = b.emit(Binary(fn, offset, Lit(diagonal, "i64")), (rows, cols), "bool")
    return b.emit_like(Where(keep, x, b.lit(0, b.dtype(x))), node.meta)


def repeat_value(b: Builder, x: Ref, repeats: tuple[int, ...], out_shape: tuple[Dim, ...]) -> Ref:
    """``x.repeat(*repeats)``: each axis ``s`` becomes ``[r, s]`` by broadcasting, then ``r·s``."""
    shape = b.shape(x)
    if len(repeats) < len(shape):
        raise LoweringError(f"repeat needs at least {len(shape)} repeats, found {list(repeats)}")
    shape = (1,) * (len(repeats) - len(shape)) + tuple(shape)
    split: list[Dim] = []
    wide: list[Dim] = []
    for r, s in zip(repeats, shape):
        split += [s] if r == 1 else [1, s]
        wide += [s] if r == 1 else [r, s]
    y = reshape_to(b, x, tuple(split))
    if tuple(wide) != tuple(split):
        y = b.emit(Expand(y, tuple(wide)), tuple(wide), b.dtype(x))
    return reshape_to(b, y, tuple(out_shape))


@lowers("aten.repeat", "aten.tile")
def repeat(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    reps = tuple(
        _static_int(node, r, "a repeat count")
        for r in b.scalar(node, 1, "repeats" if node.base == "repeat" else "dims")
    )
    if node.base == "tile":  # tile pads the repeats with leading 1s; repeat requires them all
        reps = (1,) * (b.rank(x) - len(reps)) + reps
    return repeat_value(b, x, reps, node.meta.shape)


@lowers("aten.repeat_interleave")
def repeat_interleave(node: Node, b: Builder) -> Operand:
    """``self_int``: broadcast a new axis after ``dim`` and merge it. ``self_Tensor`` / ``Tensor``:
    per-entry counts give positions through a cumulative sum, which needs ``output_size=``."""
    if node.overload == "Tensor":
        reps = b.input(node, 0)
        idx = _interleave_index(b, node, reps, b.shape(reps)[0] if b.rank(reps) else 1)
        return b.cast(idx, node.meta.dtype)
    x = b.input(node, 0)
    dim = node.arg(2, "dim")
    if dim is None:
        x, axis = reshape_to(b, x, (symbolic.numel(b.shape(x)),)), 0
    else:
        x, axis = _lane(b, x, dim)
    if node.overload == "self_Tensor":
        idx = _interleave_index(b, node, b.input(node, 1, "repeats"), b.shape(x)[axis])
        return b.emit_like(IndexSelect(x, axis, idx), node.meta)
    r = _static_int(node, b.scalar(node, 1, "repeats"), "repeats")
    shape = b.shape(x)
    y = reshape_to(b, x, shape[: axis + 1] + (1,) + shape[axis + 1 :])
    if r != 1:
        y = b.emit(
            Expand(y, shape[: axis + 1] + (r,) + shape[axis + 1 :]),
            shape[: axis + 1] + (r,) + shape[axis + 1 :],
            b.dtype(x),
        )
    return reshape_to(b, y, node.meta.shape)


def _interleave_index(b: Builder, node: Node, reps: Ref, n: Dim) -> Ref:
    """int64 source position of every output entry: the count of cumulative repeat ends ≤ it."""
    size = node.kwargs.get("output_size", node.arg(3 if node.overload == "self_Tensor" else 1))
    if size is None:
        raise LoweringError(
            f"node {node.id}: repeat_interleave with a tensor of repeats has a data-dependent size; "
            "pass output_size= so the export records it"
        )
    size = b.env.get(size.name) if isinstance(size, Ref) else size
    if not isinstance(size, (int, Sym)):
        raise LoweringError(f"node {node.id}: repeat_interleave output_size must be an int, found {size!r}")
    reps = reshape_to(b, b.cast(reps, "i64"), (1,)) if b.rank(reps) == 0 else b.cast(reps, "i64")
    if b.shape(reps) == (1,) and n != 1:  # one count for every entry
        reps = b.emit(Expand(reps, (n,)), (n,), "i64")
    ends = b.emit(CumReduce("sum", reps, 0), (n,), "i64")
    covered = b.emit(Binary("le", reshape_to(b, ends, (1, n)), _arange(b, size, 0, 2)), (size, n), "bool")
    return reduce_value(b, "sum", covered, (1,), False, "i64")


@lowers("aten.fill.Scalar", "aten.fill_.Scalar", "aten.fill.Tensor", "aten.fill_.Tensor")
def fill(node: Node, b: Builder) -> Operand:
    out = node.meta
    value = node.arg(1, "value")
    if isinstance(value, Ref):
        v = b.cast(b.input(node, 1, "value"), out.dtype)
        return v if b.shape(v) == out.shape else b.emit_like(Expand(v, out.shape), out)
    if not isinstance(value, (bool, int, float)):
        raise LoweringError(f"node {node.id}: fill value must be a number, found {value!r}")
    return b.emit_like(Full(fill_value(value, out.dtype), out.shape, out.dtype), out)


# ── searchsorted, bucketize ──────────────────────────────────────────────────
@lowers("aten.searchsorted", "aten.bucketize")
def searchsorted(node: Node, b: Builder) -> Operand:
    """``searchsorted(sorted, values, out_int32, right, side, sorter)`` and ``bucketize(values,
    boundaries, out_int32, right)``: insertion points, int64 (int32 with ``out_int32``)."""
    out = node.meta
    seq_at, val_at = (1, 0) if node.base == "bucketize" else (0, 1)
    seq = b.input(node, seq_at)
    raw = node.arg(val_at)
    values = b.operand(raw, None)
    common = _common_dtype(b.dtype(seq), b.dtype(values))
    seq = b.cast(seq, common)
    values = b.cast(values, common)
    if isinstance(values, Lit):  # the Scalar overloads: one query
        values = b.emit(Full(values.value, (), common), (), common)  # type: ignore[arg-type]
    right = bool(node.kwargs.get("right", False)) or node.kwargs.get("side") == "right"
    sorter = node.kwargs.get("sorter")
    if sorter is not None:  # the sequence in its sorted order
        sorter_ref = b.cast(b.tensor(node, sorter), "i64")
        seq = b.emit(Gather(seq, b.rank(seq) - 1, sorter_ref), b.shape(seq), common)
    found = b.emit(SearchSorted(seq, values, right), out.shape, "i64")
    return b.cast(found, out.dtype)


def _common_dtype(a: str, c: str) -> str:
    """The dtype both sides are compared in: the float one if either is (the wider), else int64."""
    floats = [d for d in (a, c) if d.startswith(("f", "bf"))]
    if not floats:
        return "i64"
    return "f64" if "f64" in floats else floats[0]
