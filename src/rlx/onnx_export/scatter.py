"""Scatter: IndexPut through ScatterND and Scatter through ScatterElements, with PyTorch's
``include_self`` and ``mean`` built from the reductions ONNX has."""

from __future__ import annotations

from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr
from rlx.kernels.precision import highest, lowest
from rlx.onnx_export.elementwise import BINARY
from rlx.onnx_export.movement import _bool_to_ints, normalize_index, slice_axis
from rlx.onnx_export.registry import OnnxGraph, T, emits, unsupported


@emits(C.IndexPut, widen=True)
def index_put(g: OnnxGraph, c: C.IndexPut, out: Instr, x: T, indices: list[T | None], values: T) -> T:
    """``x[i0, i1, …] = values`` for index tensors on the leading axes (trailing axes whole)."""
    first_none = next((k for k, i in enumerate(indices) if i is None), len(indices))
    if any(i is not None for i in indices[first_none:]):
        raise unsupported(c, "with an index after a whole axis (x[:, i] = v); index the leading axes")
    assert x.shape is not None
    entries: list[T] = []
    for idx in indices[:first_none]:
        assert idx is not None
        entries += _bool_to_ints(g, idx) if idx.dtype == "bool" else [idx]
    entries = [normalize_index(g, t, x.shape[a]) for a, t in enumerate(entries)]
    joint = entries[0]
    for t in entries[1:]:  # broadcast the index tensors together
        joint = g.op("Add", [g.op("Mul", [joint, g.ints(0)], "i64"), g.op("Mul", [t, g.ints(0)], "i64")], "i64")
    joint_shape = g.op("Shape", [joint], "i64")
    stacked = [g.op("Unsqueeze", [g.op("Expand", [t, joint_shape], "i64"), g.ints([-1])], "i64") for t in entries]
    nd_index = g.op("Concat", stacked, "i64", axis=-1)
    rest = g.dims(list(x.shape[len(entries) :]))
    update_shape = g.op("Concat", [joint_shape, rest], "i64", axis=0)
    updates = g.op("Expand", [g.cast(values, x.dtype), update_shape], x.dtype)
    reduction = "add" if c.accumulate else "none"
    return g.op("ScatterND", [x, nd_index, updates], x.dtype, out.shape, reduction=reduction)


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
