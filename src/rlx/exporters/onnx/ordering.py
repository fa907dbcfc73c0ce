"""Ordering and scans: ArgSort and ArgTopK through TopK (ties keep the lower index first, as the
ONNX standard requires), CumReduce through CumSum or, for the scans ONNX lacks (prod, max, min,
logsumexp), a reduction over a lower-triangular window of each lane (quadratic in the lane length)."""

from __future__ import annotations

import numpy as np

from rlx.exporters.onnx.registry import EmitError, OnnxGraph, T, emits, unsupported
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr
from rlx.ir.symbolic import Sym
from rlx.kernels.precision import highest, lowest

# A key of the unstable sort stays below this: OpenVINO computes int64 in int32.
KEY_LIMIT = 2**31
# Shorter lanes sort in one stable TopK even where that is slow (it is quadratic in the lane).
UNIQUE_KEYS_FROM = 128


def _sortable(g: OnnxGraph, x: T) -> T:
    """x in a type every runtime's TopK takes (exactly)."""
    return g.cast(x, "f32") if x.dtype in ("f16", "bf16", "bool", "u8", "i8", "i16") else x


def _top_k(g: OnnxGraph, x: T, k: T, axis: int, largest: bool, *, any_tie_order: bool = False) -> T:
    """``any_tie_order``: equal values may come in any order (a top-k's, as in PyTorch; a sort's
    keep the lower index first)."""
    work = _sortable(g, x)
    if dtypes.is_float(work.dtype) and not g.options.top_k_orders_nan:
        return _top_k_nan_above(g, work, k, axis, largest, any_tie_order)
    _, idx = g.node("TopK", [work, k], 2, axis=axis, largest=int(largest), sorted=1)
    if any_tie_order:
        g.unordered_ties.add(idx)
    return T(idx, "i64")


def _top_k_nan_above(g: OnnxGraph, x: T, k: T, axis: int, largest: bool, any_tie_order: bool) -> T:
    """Top-k positions with NaN above every number (PyTorch's order), from TopKs that see no NaN.

    The first TopK reads NaN as +inf, which ties it with +inf (ties keep the lower index first),
    and takes k' candidates: k, plus the most +infs of any lane when the largest are wanted (so
    that every NaN of the top k is among them), or the most NaNs when the smallest are (so that
    every +inf is). The second orders the candidates by is-NaN, keeping their order, and takes k:
    a stable TopK, or (``unique_sort_keys``) an unstable one on the key is-NaN × k' + place. With
    no NaN or inf, k' is k: a top-k of a few over a long lane stays a short TopK, not a full sort."""
    assert x.shape is not None
    nan, key = _nan_as_inf(g, x)
    tied = nan if not largest else g.op("Equal", [x, g.const(np.inf, x.dtype)], "bool", x.shape)  # what may need room
    most = g.op("ReduceMax", [g.op("ReduceSum", [g.cast(tied, "i64"), g.ints([axis])], "i64", keepdims=1)], "i64",
                keepdims=0)  # fmt: skip
    wider = g.op("Min", [g.op("Add", [k, most], "i64"), g.dim(x.shape[axis])], "i64")
    _, candidates = g.node("TopK", [key, wider], 2, axis=axis, largest=int(largest), sorted=1)
    if any_tie_order:  # (the second TopK keeps the candidates' order: it must stay stable)
        g.unordered_ties.add(candidates)
    if g.options.unique_sort_keys:
        # is-NaN, then the candidate's place, as one unique key
        nan_digit = _nan_digit(g, nan, T(candidates, "i64"), axis, first=largest)
        count = g.op("Squeeze", [wider], "i64", ())
        place = g.op("Range", [g.ints(0), count, g.ints(1)], "i64")
        place = g.op("Reshape", [place, g.ints([1] * axis + [-1] + [1] * (x.rank - axis - 1))], "i64")
        key = g.op("Add", [g.op("Mul", [nan_digit, wider], "i64"), place], "i64")
        _, by_nan = g.node("TopK", [key, k], 2, axis=axis, largest=0, sorted=1)
        g.unordered_ties.add(by_nan)
    else:
        nan_in_order = g.op("GatherElements", [g.cast(nan, "f32"), candidates], "f32", axis=axis)
        _, by_nan = g.node("TopK", [nan_in_order, k], 2, axis=axis, largest=int(largest), sorted=1)
    return g.op("GatherElements", [candidates, by_nan], "i64", axis=axis)


def _sort_by_unique_keys(g: OnnxGraph, x: T, axis: int, descending: bool) -> T | None:
    """Stable sort positions from unstable TopKs (``GraphOptions.unique_sort_keys``): one by value,
    NaN read as +inf; then each pass orders the groups of equal keys by the next digits of
    (is-NaN, position) with the key group × base + digits, where the group is the number of key
    changes before it in the order so far (below n). The last pass's keys are unique. A key must
    stay below ``KEY_LIMIT``, so the position takes two passes (high digit, low digit) on a lane
    longer than about 33 000 values. None (sort in one stable TopK) on a short lane, one that is
    not static, or one too long for two passes (about 1.3 million values)."""
    assert x.shape is not None
    n = x.shape[axis]
    if not isinstance(n, int) or n < UNIQUE_KEYS_FROM:
        return None
    floats = dtypes.is_float(x.dtype)
    room = KEY_LIMIT // n  # a pass's base: group × base + digit ≤ n·base − 1
    high = room // 2 if floats else room  # (the first pass also holds the is-NaN digit)
    low = 1 if high >= n else -(-n // high)  # position = high digit × low + low digit
    if low > room:
        return None
    nan, key = _nan_as_inf(g, x) if floats else (None, x)
    order = _unstable_order(g, key, n, axis, descending)
    groups = _group_ids(g, g.op("GatherElements", [key, order], key.dtype, x.shape, axis=axis), n, axis)
    passes = [(n, None)] if low == 1 else [(high, "Div"), (low, "Mod")]  # (base, digit of the position)
    for i, (base, op) in enumerate(passes):
        digit = order if op is None else g.op(op, [order, g.ints(low)], "i64", x.shape)
        if i == 0 and nan is not None:
            nan_digit = _nan_digit(g, nan, order, axis, first=descending)
            digit = g.op("Add", [g.op("Mul", [nan_digit, g.ints(base)], "i64"), digit], "i64", x.shape)
            base *= 2
        key = g.op("Add", [g.op("Mul", [groups, g.ints(base)], "i64"), digit], "i64", x.shape)
        by_key = _unstable_order(g, key, n, axis, False)
        order = g.op("GatherElements", [order, by_key], "i64", x.shape, axis=axis)
        if i + 1 < len(passes):
            groups = _group_ids(g, g.op("GatherElements", [key, by_key], "i64", x.shape, axis=axis), n, axis)
    return order


def _nan_as_inf(g: OnnxGraph, x: T) -> tuple[T, T]:
    """x's is-NaN, and x with NaN read as +inf (a key no TopK misplaces)."""
    nan = g.op("IsNaN", [x], "bool", x.shape)
    return nan, g.where(nan, g.const(np.inf, x.dtype), x)


def _nan_digit(g: OnnxGraph, nan: T, order: T, axis: int, *, first: bool) -> T:
    """0/1 per place of ``order`` that puts NaN last in an ascending key (``first``: first)."""
    digit = g.op("GatherElements", [g.cast(nan, "i64"), order], "i64", order.shape, axis=axis)
    return g.op("Sub", [g.ints(1), digit], "i64", order.shape) if first else digit


def _unstable_order(g: OnnxGraph, key: T, n: int, axis: int, descending: bool) -> T:
    _, order = g.node("TopK", [key, g.ints([n])], 2, axis=axis, largest=int(descending), sorted=1)
    g.unordered_ties.add(order)
    return T(order, "i64", key.shape)


def _group_ids(g: OnnxGraph, ordered: T, n: int, axis: int) -> T:
    """For each place of a lane in order, how many times the value changed before it."""
    later = g.op("Slice", [ordered, g.ints([1]), g.ints([n]), g.ints([axis])], ordered.dtype)
    earlier = g.op("Slice", [ordered, g.ints([0]), g.ints([n - 1]), g.ints([axis])], ordered.dtype)
    changed = g.cast(g.op("Not", [g.op("Equal", [later, earlier], "bool")], "bool"), "i64")
    pads = [0] * (2 * ordered.rank)
    pads[axis] = 1  # the first place: no change before it
    changed = g.op("Pad", [changed, g.ints(pads)], "i64", mode="constant")
    return g.op("CumSum", [changed, g.ints(axis)], "i64", ordered.shape)


@emits(C.ArgSort)
def arg_sort(g: OnnxGraph, c: C.ArgSort, out: Instr, x: T) -> T:
    assert x.shape is not None
    if x.rank == 0:
        return g.const(0, "i64")
    if g.options.unique_sort_keys:
        order = _sort_by_unique_keys(g, _sortable(g, x), c.axis, c.descending)
        if order is not None:
            return order
    return _top_k(g, x, g.dim(x.shape[c.axis]), c.axis, c.descending)


@emits(C.ArgTopK)
def arg_top_k(g: OnnxGraph, c: C.ArgTopK, out: Instr, x: T) -> T:
    return _top_k(g, x, g.dim(c.k), c.axis, c.largest, any_tie_order=True)


def _lanes(g: OnnxGraph, x: T, axis: int, fill: float | int | bool) -> T:
    """``[..., n(i), n(j), ...]``: x along the axis at position j where j ≤ i, ``fill`` elsewhere."""
    assert x.shape is not None
    n = x.shape[axis]
    if isinstance(n, Sym):
        raise EmitError(f"the ONNX emitter cannot scan along the symbolic axis {axis} of {x.name}; specialise it first")
    above = np.triu(np.ones((n, n), dtype=bool), 1).reshape((n, n) + (1,) * (x.rank - axis - 1))
    lanes = g.op("Unsqueeze", [x, g.ints([axis])], x.dtype)  # x[..., None(i), j, ...]
    # x as Where's second choice: onnxruntime's Where turns a -0 it takes from its first into +0
    # (a cumprod of -0 would lose its sign).
    return g.op("Where", [g.const(above, "bool"), g.const(fill, x.dtype), lanes], x.dtype)


@emits(C.CumReduce)
def cum_reduce(g: OnnxGraph, c: C.CumReduce, out: Instr, x: T) -> T:
    acc = {"f16": "f32", "bf16": "f32", "f32": "f64", "f64": "f64"}.get(x.dtype, "i64")
    if c.fn == "sum":
        # CumSum in PyTorch's accumulation type, which starts from +0.
        total = g.op("CumSum", [g.cast(x, acc), g.ints(c.axis)], acc)
        return g.cast(_plus_zero(g, total) if dtypes.is_float(acc) else total, out.dtype)
    if c.fn in ("prod", "logsumexp"):
        wide = g.cast(x, acc)
        fill = 1 if c.fn == "prod" else -np.inf
        op = "ReduceProd" if c.fn == "prod" else "ReduceLogSumExp"
        y = g.op(op, [_lanes(g, wide, c.axis, fill), g.ints([c.axis + 1])], acc, keepdims=0)
        return g.cast(y, out.dtype)
    if c.fn not in ("max", "min"):
        raise unsupported(c, f"with scan {c.fn!r}")
    return _cum_extreme(g, c, x)


def _plus_zero(g: OnnxGraph, x: T) -> T:
    """``x + 0``: -0 becomes +0. Spelled as a selection, as onnxruntime's optimizer drops an Add of
    zero (and the -0 of a lane of -0s with it)."""
    zero = g.const(0.0, x.dtype)
    return g.op("Where", [g.op("Equal", [x, zero], "bool", x.shape), zero, x], x.dtype, x.shape)


def _cum_extreme(g: OnnxGraph, c: C.CumReduce, x: T) -> T:
    # The shared definition: the running extreme, and the last position where it was attained
    # (PyTorch's >= / <= update). A NaN takes over: from the first NaN of a lane on, only a NaN
    # moves the position (onnxruntime's ReduceMax/Min skip NaNs, so the running extreme of the
    # other values must not). The values are x at those positions.
    work = (
        g.cast(x, "f32")
        if x.dtype in ("f16", "bf16")
        else g.cast(x, "i32")
        if x.dtype in ("bool", "u8", "i8", "i16")
        else x
    )
    fill = lowest(np.dtype(dtypes.to_numpy(work.dtype))) if c.fn == "max" else highest(dtypes.to_numpy(work.dtype))
    op = "ReduceMax" if c.fn == "max" else "ReduceMin"
    running = g.op(op, [_lanes(g, work, c.axis, fill), g.ints([c.axis + 1])], work.dtype, keepdims=0)
    hit = g.op("Equal", [work, running], "bool", x.shape)
    if dtypes.is_float(work.dtype):
        nan = g.op("IsNaN", [work], "bool", work.shape)
        seen = g.op("ReduceMax", [_lanes(g, g.cast(nan, "i32"), c.axis, 0), g.ints([c.axis + 1])], "i32", keepdims=0)
        # nan or (not seen and hit), in And/Or: onnxruntime has no boolean Where (x NaN: seen).
        unseen = g.op("Not", [g.cast(seen, "bool")], "bool", x.shape)
        hit = g.op("Or", [nan, g.op("And", [unseen, hit], "bool", x.shape)], "bool", x.shape)
    assert x.shape is not None
    n = x.static_shape("CumReduce max/min")[c.axis]
    shape = [1] * x.rank
    shape[c.axis] = n
    positions = g.const(np.arange(n, dtype=np.int64).reshape(shape), "i64")
    marked = g.op("Where", [hit, positions, g.const(0, "i64")], "i64", x.shape)
    idx = g.op("ReduceMax", [_lanes(g, marked, c.axis, 0), g.ints([c.axis + 1])], "i64", keepdims=0)
    if c.indices:
        return idx
    return g.op("GatherElements", [x, idx], x.dtype, axis=c.axis)
