"""Scatter: IndexPut through ScatterND and Scatter through ScatterElements, with PyTorch's
``include_self`` and ``mean`` built from the reductions ONNX has."""

from __future__ import annotations

from rlx.exporters.onnx.elementwise import BINARY
from rlx.exporters.onnx.movement import bool_mask_to_indices, normalize_index, slice_axis
from rlx.exporters.onnx.registry import HALF, OnnxGraph, T, emits, unsupported
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr
from rlx.kernels.precision import highest, lowest


@emits(C.IndexPut, widen=True)
def index_put(g: OnnxGraph, c: C.IndexPut, out: Instr, x: T, indices: list[T | None], values: T) -> T:
    """``x[:, …, i0, i1, …] = values``: one block of index tensors (after any whole leading axes,
    as a KV cache's ``index_copy_`` along the sequence axis) through ScatterND, with the block's
    axes moved to the front of ``x`` and of the values and moved back after."""
    if c.accumulate and out.dtype in HALF:
        # The sum of a repeated position depends on that rounding: one rounding of a float32 sum
        # (all onnxruntime can do) differs, silently, by many units of the last place.
        raise unsupported(c, f"accumulating in {out.dtype} (PyTorch rounds to {out.dtype} after every add, "
                             f"onnxruntime's ScatterND cannot)")  # fmt: skip
    lead = next((k for k, i in enumerate(indices) if i is not None), len(indices))
    block_end = next((k for k in range(lead, len(indices)) if indices[k] is None), len(indices))
    if any(i is not None for i in indices[block_end:]):
        raise unsupported(c, "with whole axes between its index tensors (x[i, :, j] = v)")
    assert x.shape is not None
    entries: list[T] = []
    index_rank = 0
    for idx in indices[lead:block_end]:
        assert idx is not None
        entries += bool_mask_to_indices(g, idx) if idx.dtype == "bool" else [idx]
        index_rank = max(index_rank, 1 if idx.dtype == "bool" else idx.rank)
    entries = [normalize_index(g, t, x.shape[lead + a]) for a, t in enumerate(entries)]
    joint = entries[0]
    for t in entries[1:]:  # broadcast the index tensors together
        joint = g.op("Add", [g.op("Mul", [joint, g.ints(0)], "i64"), g.op("Mul", [t, g.ints(0)], "i64")], "i64")
    joint_shape = g.op("Shape", [joint], "i64")
    stacked = [g.op("Unsqueeze", [g.op("Expand", [t, joint_shape], "i64"), g.ints([-1])], "i64") for t in entries]
    nd_index = g.op("Concat", stacked, "i64", axis=-1)
    indexed = lead + len(entries)  # x's axes up to here are whole (lead) or indexed
    parts = [g.dims(list(x.shape[:lead])), joint_shape, g.dims(list(x.shape[indexed:]))] if lead else [
        joint_shape, g.dims(list(x.shape[indexed:]))]  # fmt: skip
    updates = g.op("Expand", [g.cast(values, x.dtype), g.op("Concat", parts, "i64", axis=0)], x.dtype)
    reduction = "add" if c.accumulate else "none"
    if not lead:
        return g.op("ScatterND", [x, nd_index, updates], x.dtype, out.shape, reduction=reduction)
    rank = len(x.shape)
    to_front = [*range(lead, indexed), *range(lead), *range(indexed, rank)]
    update_rank = lead + index_rank + rank - indexed
    updates_to_front = [*range(lead, lead + index_rank), *range(lead), *range(lead + index_rank, update_rank)]
    xt = g.op("Transpose", [x], x.dtype, perm=to_front)
    ut = g.op("Transpose", [updates], x.dtype, perm=updates_to_front)
    scattered = g.op("ScatterND", [xt, nd_index, ut], x.dtype, reduction=reduction)
    back = [to_front.index(a) for a in range(rank)]
    return g.op("Transpose", [scattered], x.dtype, out.shape, perm=back)


_REDUCTIONS = {"none": "none", "sum": "add", "prod": "mul", "amax": "max", "amin": "min", "mean": "add"}


def _identity(reduce: str, dtype: str) -> bool | int | float:
    np_dtype = dtypes.to_numpy(dtype)
    return {"sum": 0, "mean": 0, "prod": 1, "amax": lowest(np_dtype), "amin": highest(np_dtype)}[reduce]


@emits(C.Scatter, widen=True)
def scatter(g: OnnxGraph, c: C.Scatter, out: Instr, x: T, index: T, src: T) -> T:
    assert index.shape is not None
    if src.rank == 0:
        src = g.op("Expand", [src, g.op("Shape", [index], "i64")], src.dtype)
    else:  # src may be larger than index on any axis: its leading corner is what is scattered
        assert src.shape is not None
        for axis, (ns, ni) in enumerate(zip(src.shape, index.shape)):
            if ns != ni:
                src = slice_axis(g, src, axis, 0, ni)
    src = g.cast(src, x.dtype)
    index = normalize_index(g, index, x.shape[c.axis] if x.shape else 0)
    work = x.dtype
    if work in ("bool", "u8", "i8", "i16"):  # onnxruntime reduces these in int32
        x, src, work = g.cast(x, "i32"), g.cast(src, "i32"), "i32"
    base = x
    if not c.include_self and c.reduce != "none":
        fill = g.op("Expand", [g.const(_identity(c.reduce, work), work), g.op("Shape", [index], "i64")], work)
        base = g.op("ScatterElements", [x, index, fill], work, axis=c.axis)
    y = g.op("ScatterElements", [base, index, src], work, axis=c.axis, reduction=_REDUCTIONS[c.reduce])
    if c.reduce == "mean":
        ones = g.op("Expand", [g.const(1, work), g.op("Shape", [index], "i64")], work)
        start = g.op("Expand", [g.const(1 if c.include_self else 0, work), g.op("Shape", [x], "i64")], work)
        counts = g.op("ScatterElements", [start, index, ones], work, axis=c.axis, reduction="add")
        touched = g.op("Greater", [counts, g.const(0, work)], "bool")
        safe = g.op("Where", [touched, counts, g.const(1, work)], work)
        divide = BINARY["div"] if dtypes.is_float(work) else BINARY["floor_divide"]
        y = g.op("Where", [touched, divide(g, T(y.name, work), safe), x], work)
    return g.cast(y, out.dtype)
