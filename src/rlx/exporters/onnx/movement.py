"""Producers and data movement: Full, Arange, Reshape, Permute, Expand, Slice, Concat, Pad,
IndexSelect, Gather, Index, Diagonal, Flip, Roll.

Extents may be symbolic: they become int64 tensors computed from the inputs' shapes
(``OnnxGraph.dims``). A static Full or Arange is a constant.
"""

from __future__ import annotations

import numpy as np

from rlx.exporters.onnx.registry import OnnxGraph, T, emits, new_graph_value, unsupported
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr, Ref
from rlx.ir.symbolic import Sym, is_static
from rlx.kernels import KERNELS
from rlx.kernels.numpy.namespace import NUMPY

INT64_MAX = np.iinfo(np.int64).max


@emits(C.Full)
def full(g: OnnxGraph, c: C.Full, out: Instr) -> T:
    value = g.const(np.asarray(c.value), c.dtype)
    static = tuple(d for d in c.shape if isinstance(d, int))
    if len(static) == len(c.shape) and np.prod(static, dtype=np.int64) <= 16:
        return g.const(np.full(static, c.value), c.dtype)
    return _expand(g, value, g.dims(c.shape))


def _expand(g: OnnxGraph, x: T, shape: T) -> T:
    if x.dtype == "bf16":  # onnxruntime's Expand has no bfloat16 kernel: move the (exact) float32 values
        return g.cast(g.op("Expand", [g.cast(x, "f32"), shape], "f32"), "bf16")
    return g.op("Expand", [x, shape], x.dtype)


@emits(C.Arange)
def arange(g: OnnxGraph, c: C.Arange, out: Instr) -> T:
    if not any(isinstance(v, Sym) for v in (c.start, c.end, c.step)):
        return g.const(np.asarray(KERNELS["Arange"](c, xp=NUMPY)), c.dtype)  # the shared definition, folded
    wide = "i64" if not dtypes.is_float(c.dtype) else "f64"

    def bound(v: int | float | Sym) -> T:
        if isinstance(v, Sym):
            return g.cast(g.op("Squeeze", [g.dim(v), g.ints([0])], "i64", ()), wide)
        return g.const(v, wide)

    start, end, step = bound(c.start), bound(c.end), bound(c.step)
    return g.op("Range", [start, end, step], wide, out.shape)


@emits(C.Reshape)
def reshape(g: OnnxGraph, c: C.Reshape, out: Instr, x: T) -> T:
    if x.name in g.units_dropped:  # (the reduction before it has this shape already: no node)
        return T(x.name, x.dtype, c.shape)
    inner = g.producer(x.name)
    if x.name in g.reshaped:  # a reshape of a reshape (or of a product run N-d) is one reshape
        x = g.reshaped[x.name]
    elif inner is not None and isinstance(inner.call, C.Reshape) and isinstance(inner.call.x, Ref):
        x = new_graph_value(g, inner.call.x)  # (symbolic shapes: one node less)
    if is_static(c.shape) and x.shape is not None and is_static(x.shape):
        g.reshaped[out.result] = x
        if tuple(x.shape) == tuple(c.shape):  # back to the original: no node (the driver aliases it)
            return x
    # allowzero: a 0 in the target is an empty axis, not "copy the input's extent".
    return g.op("Reshape", [x, g.dims(c.shape)], x.dtype, c.shape, allowzero=1)


@emits(C.Permute)
def permute(g: OnnxGraph, c: C.Permute, out: Instr, x: T) -> T:
    return g.op("Transpose", [x], x.dtype, out.shape, perm=list(c.perm))


@emits(C.Expand)
def expand(g: OnnxGraph, c: C.Expand, out: Instr, x: T) -> T:
    return _expand(g, x, g.dims(c.shape))


def slice_axis(g: OnnxGraph, x: T, axis: int, start: int | Sym | T, stop: int | Sym | T, step: int = 1) -> T:
    return g.op("Slice", [x, g.dim(start), g.dim(stop), g.ints([axis]), g.ints([step])], x.dtype)


@emits(C.Slice)
def slice_(g: OnnxGraph, c: C.Slice, out: Instr, x: T) -> T:
    if c.start == 0 and c.step == 1 and isinstance(c.stop, int) and _gathered_across(g, out.result, c.axis):
        # the leading positions by a Gather: OpenVINO 2026.4 drops a Slice from 0 that feeds a
        # GatherElements along another axis, then refuses the GatherElements' shapes
        return g.op("Gather", [x, g.ints(list(range(c.stop)))], x.dtype, out.shape, axis=c.axis)
    return slice_axis(g, x, c.axis, c.start, c.stop, c.step)


def _gathered_across(g: OnnxGraph, name: str, axis: int) -> bool:
    return any(
        isinstance(i.call, C.Gather) and i.call.x.name == name and i.call.axis != axis for i in g.consumers(name)
    )


@emits(C.Concat)
def concat(g: OnnxGraph, c: C.Concat, out: Instr, xs: list[T]) -> T:
    return g.op("Concat", [g.cast(x, out.dtype) for x in xs], out.dtype, out.shape, axis=c.axis)


@emits(C.Pad)
def pad(g: OnnxGraph, c: C.Pad, out: Instr, x: T) -> T:
    # ONNX pads: all befores, then all afters; a negative width crops, as in the Call.
    pads = g.dims([lo for lo, _ in c.pads] + [hi for _, hi in c.pads])
    value = g.const(np.asarray(c.value), x.dtype)
    wider = {"bf16": "f32", "i16": "i32"}.get(x.dtype)  # onnxruntime's Pad has no kernel for these
    if wider:
        wide = g.op("Pad", [g.cast(x, wider), pads, g.const(np.asarray(c.value), wider)], wider, mode="constant")
        return g.cast(wide, x.dtype)
    return g.op("Pad", [x, pads, value], x.dtype, out.shape, mode="constant")


def normalize_index(g: OnnxGraph, index: T, extent: int | Sym | T) -> T:
    """Negative positions counted from the end, as PyTorch's indexing does."""
    index = g.cast(index, "i64")
    size = g.op("Squeeze", [g.dim(extent), g.ints([0])], "i64", ())
    negative = g.op("Less", [index, g.ints(0)], "bool")
    return g.op("Where", [negative, g.op("Add", [index, size], "i64"), index], "i64", index.shape)


@emits(C.IndexSelect)
def index_select(g: OnnxGraph, c: C.IndexSelect, out: Instr, x: T, index: T) -> T:
    # Gather counts negative positions from the end itself (opset 11+): no Less/Add/Where per
    # lookup (three nodes an embedding of a small model pays on every run).
    return g.op("Gather", [x, g.cast(index, "i64")], x.dtype, out.shape, axis=c.axis)


@emits(C.Gather)
def gather(g: OnnxGraph, c: C.Gather, out: Instr, x: T, index: T) -> T:
    # torch.gather lets the index be smaller than x on the other axes: crop x to it, at a static
    # size by a Gather of the leading positions (OpenVINO 2026.4's CPU plugin drops a Slice there,
    # then refuses the GatherElements' shapes).
    assert x.shape is not None and index.shape is not None
    for axis, (nx, ni) in enumerate(zip(x.shape, index.shape)):
        if axis != c.axis and nx != ni:
            if isinstance(ni, int):
                x = g.op("Gather", [x, g.ints(list(range(ni)))], x.dtype, axis=axis)
            else:
                x = slice_axis(g, x, axis, 0, ni)
    index = g.cast(index, "i64")  # (negative positions: GatherElements counts them from the end)
    return g.op("GatherElements", [x, index], x.dtype, out.shape, axis=c.axis)


def bool_mask_to_indices(g: OnnxGraph, mask: T) -> list[T]:
    """A boolean mask over ``mask.rank`` axes as that many int64 index vectors (NonZero)."""
    nz = g.op("NonZero", [mask], "i64")
    return [g.op("Squeeze", [g.op("Gather", [nz, g.ints([k])], "i64", axis=0), g.ints([0])], "i64")
            for k in range(mask.rank)]  # fmt: skip


@emits(C.Index)
def index(g: OnnxGraph, c: C.Index, out: Instr, x: T, indices: list[T | None]) -> T:
    """``x[i0, i1, …]``: the index tensors broadcast together; their axes go where numpy puts them
    (in place when adjacent, in front otherwise). GatherND over the indexed axes moved to the front."""
    entries: list[tuple[int, T]] = []  # (axis of x, int64 index)
    axis = 0
    for idx in indices:
        if idx is None:
            axis += 1
        elif idx.dtype == "bool":
            entries += [(axis + k, v) for k, v in enumerate(bool_mask_to_indices(g, idx))]
            axis += idx.rank
        else:
            entries.append((axis, idx))
            axis += 1
    assert x.shape is not None
    axes = [a for a, _ in entries]
    idx_t = [normalize_index(g, i, x.shape[a]) for a, i in entries]
    if len(entries) == 1:
        return g.op("Gather", [x, idx_t[0]], x.dtype, out.shape, axis=axes[0])
    rest = [a for a in range(x.rank) if a not in axes]
    moved = x if axes == list(range(len(axes))) else g.op("Transpose", [x], x.dtype, perm=axes + rest)
    # Broadcast the index tensors together and stack them along a new last axis.
    joint = idx_t[0]
    for t in idx_t[1:]:
        joint = g.op("Add", [g.op("Mul", [joint, g.ints(0)], "i64"), g.op("Mul", [t, g.ints(0)], "i64")], "i64")
    shape = g.op("Shape", [joint], "i64")
    stacked = [g.op("Unsqueeze", [g.op("Expand", [t, shape], "i64"), g.ints([-1])], "i64") for t in idx_t]
    nd_index = g.op("Concat", stacked, "i64", axis=-1)
    result = g.op("GatherND", [moved, nd_index], x.dtype)
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    if not adjacent or axes[0] == 0:
        return result
    # numpy keeps adjacent index axes in place: move the broadcast axes back after the leading ones.
    n_idx = len(out.shape) - len(rest)
    lead = axes[0]
    perm = list(range(n_idx, n_idx + lead)) + list(range(n_idx)) + list(range(n_idx + lead, len(out.shape)))
    return g.op("Transpose", [result], x.dtype, out.shape, perm=perm)


@emits(C.Diagonal)
def diagonal(g: OnnxGraph, c: C.Diagonal, out: Instr, x: T) -> T:
    shape = x.static_shape("Diagonal")
    rest = [a for a in range(len(shape)) if a not in (c.axis1, c.axis2)]
    moved = g.op("Transpose", [x], x.dtype, perm=rest + [c.axis1, c.axis2])
    n1, n2 = shape[c.axis1], shape[c.axis2]
    rows = np.arange(n1)
    cols = rows + c.offset
    keep = (cols >= 0) & (cols < n2)
    positions = (rows * n2 + cols)[keep]
    lead = [shape[a] for a in rest]
    flat = g.op("Reshape", [moved, g.ints(lead + [n1 * n2])], x.dtype)
    return g.op("Gather", [flat, g.ints(positions.tolist())], x.dtype, out.shape, axis=len(lead))


@emits(C.Flip)
def flip(g: OnnxGraph, c: C.Flip, out: Instr, x: T) -> T:
    if not c.axes:
        return g.op("Identity", [x], x.dtype)
    n = len(c.axes)
    starts, ends = g.ints([-1] * n), g.ints([-INT64_MAX] * n)
    return g.op("Slice", [x, starts, ends, g.ints(list(c.axes)), g.ints([-1] * n)], x.dtype, out.shape)


@emits(C.Roll)
def roll(g: OnnxGraph, c: C.Roll, out: Instr, x: T) -> T:
    if not c.axes:  # the flattened tensor, shape kept
        flat = g.op("Reshape", [x, g.ints([-1])], x.dtype)
        size = int(np.prod(x.static_shape("Roll")))
        rolled = _roll_axis(g, flat, 0, c.shifts[0], size)
        return g.op("Reshape", [rolled, g.dims(out.shape)], x.dtype, out.shape)
    for shift, axis in zip(c.shifts, c.axes):
        assert x.shape is not None
        extent = x.shape[axis]
        if not isinstance(extent, int):
            raise unsupported(c, "along a symbolic axis")
        x = _roll_axis(g, x, axis, shift, extent)
    return x


def _roll_axis(g: OnnxGraph, x: T, axis: int, shift: int, extent: int) -> T:
    if extent == 0 or shift % extent == 0:
        return x
    k = shift % extent
    tail = slice_axis(g, x, axis, extent - k, extent)
    head = slice_axis(g, x, axis, 0, extent - k)
    return g.op("Concat", [tail, head], x.dtype, x.shape, axis=axis)
