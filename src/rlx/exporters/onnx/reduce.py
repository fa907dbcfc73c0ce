"""Reductions: Reduce and ArgReduce, with PyTorch's NaN rules (amax/amin and argmax/argmin
propagate NaN; argmax picks the first NaN) and half precision reduced in float32."""

from __future__ import annotations

import math

from rlx.exporters.onnx.registry import FUNCTIONS, OnnxGraph, T, emits, emits_functions, no_function_form
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr
from rlx.ir.symbolic import static_shape

_OPS = {"sum": "ReduceSum", "prod": "ReduceProd", "amax": "ReduceMax", "amin": "ReduceMin", "mean": "ReduceMean"}
emits_functions(C.Reduce, [*_OPS, "any", "all", "var", "std"],
                {"xor": "ONNX has no exclusive-or reduction (torch.hash_tensor)"})  # fmt: skip


def _reduce(g: OnnxGraph, op: str, x: T, axes: list[int] | T | None, keepdim: bool) -> T:
    inputs = [x] if axes is None else [x, axes if isinstance(axes, T) else g.ints(axes)]
    return g.op(op, inputs, x.dtype, keepdims=int(keepdim))


def _any_nan(g: OnnxGraph, x: T, axes: list[int] | T | None, keepdim: bool) -> T:
    nan = g.cast(g.op("IsNaN", [x], "bool"), "i32")
    return g.cast(_reduce(g, "ReduceMax", nan, axes, keepdim), "bool")


def _extreme(g: OnnxGraph, fn: str, x: T, y: T, axes: list[int] | T | None, keepdim: bool) -> T:
    """PyTorch's amax/amin ``y`` of float ``x``: NaN where a lane holds one (the runtime's may skip
    it); where the runtime's ReduceMax/Min of a lane of only -inf/+inf misses the infinity
    (``GraphOptions.extremes_of_infinities`` off), that infinity too, from the same one reduction
    of a code per element: 2 for NaN, 1 for a value past the infinity, 0 for the infinity."""
    if g.options.extremes_of_infinities:
        return g.op("Where", [_any_nan(g, x, axes, keepdim), g.const(math.nan, x.dtype), y], x.dtype)
    infinity = -math.inf if fn == "amax" else math.inf
    lane = lane_code(g, x, g.op("IsNaN", [x], "bool"), infinity, axes, keepdim)
    y = g.op("Where", [g.op("Equal", [lane, g.const(0, "i32")], "bool"), g.const(infinity, x.dtype), y], x.dtype)
    return g.op("Where", [g.op("Greater", [lane, g.const(1, "i32")], "bool"), g.const(math.nan, x.dtype), y], x.dtype)


def lane_code(g: OnnxGraph, x: T, special: T, infinity: float, axes: list[int] | T | None, keepdim: bool) -> T:
    """Per lane of ``x``, the largest of a code per element (i32): 2 where ``special`` (NaN …),
    0 at ``infinity`` (±inf), 1 elsewhere: 0 for a lane of only that infinity, 2 for one holding
    a special value."""
    past = g.op("Greater" if infinity < 0 else "Less", [x, g.const(infinity, x.dtype)], "bool")
    code = g.op("Where", [special, g.const(2, "i32"), g.cast(past, "i32")], "i32")
    return _reduce(g, "ReduceMax", code, axes, keepdim)


def _drops_units_for_its_reader(g: OnnxGraph, c: C.Reduce, out: Instr) -> bool:
    """Whether this keepdim reduction's only reader is a reshape that drops exactly the unit axes
    it keeps, as a classifier head's global average pool before flatten and Linear does
    (``mean(x, (2, 3), keepdim=True).view(n, c)``). The reduction then drops them itself and the
    reshape is no node: one node less a call, about a microsecond on onnxruntime at small sizes."""
    readers = g.consumers(out.result)
    if not c.keepdim or not c.axes or len(readers) != 1 or g.is_output(out.result):
        return False
    shape, target = static_shape(out.shape), static_shape(readers[0].shape)
    if not isinstance(readers[0].call, C.Reshape) or shape is None or target is None:
        return False
    kept = {a % len(shape) for a in c.axes}
    return target == tuple(d for k, d in enumerate(shape) if k not in kept)


def _is_spatial_mean(g: OnnxGraph, c: C.Reduce, x: T) -> bool:
    """Whether this is a mean over every axis after batch and channel of a float32 image
    (``mean(x, (2, 3))``: a global average pool, as squeeze-excitation blocks and classifier heads
    write it; not of a 3-d tensor, whose last axis is a transformer's hidden one as often, where
    onnxruntime's RMSNorm fusion reads a ReduceMean, and its blocked layout is 4-d only). onnxruntime runs it as GlobalAveragePool in its blocked channel
    layout, so the convolutions around it need no layout change back and forth: 2-5% of ResNet and
    EfficientNet at batch 1. Not where the pooled tensor is a model output too (as a backbone's
    last hidden state is): that one is changed back to the plain layout anyway, and pooling it
    there saves the pooled result's own change of layout (a node). (onnxruntime's
    GlobalAveragePool is float32 only.)"""
    rank = x.rank or 0
    return (
        c.fn == "mean"
        and x.dtype == "f32"
        and rank >= 4
        and sorted(a % rank for a in c.axes or ()) == list(range(2, rank))
        and not g.is_output(c.x.name)
    )


@emits(C.Reduce, widen=True)
def reduce(g: OnnxGraph, c: C.Reduce, out: Instr, x: T) -> T:
    axes = list(c.axes) if c.axes and x.rank else None
    if c.fn not in FUNCTIONS[C.Reduce]:
        raise no_function_form(C.Reduce, c.fn)
    if x.rank == 0:
        return g.op("Identity", [x], x.dtype) if c.fn not in ("var", "std") else _variance(g, c, x, axes)
    if c.fn in ("any", "all"):
        # As uint8, whose ReduceMax/Min over no elements (0 / 255) are any's False and all's True.
        flags = g.cast(g.cast(x, "bool"), "u8")
        return g.cast(_reduce(g, "ReduceMax" if c.fn == "any" else "ReduceMin", flags, axes, c.keepdim), "bool")
    if c.fn in ("var", "std"):
        return _variance(g, c, x, axes)
    if c.fn == "mean" and _count(x, axes) == 0:  # 0 / 0: NaN, where onnxruntime's ReduceMean gives 0
        return g.op("Div", [_reduce(g, "ReduceSum", x, axes, c.keepdim), g.const(0, x.dtype)], x.dtype)
    keepdim = c.keepdim
    if _drops_units_for_its_reader(g, c, out):
        keepdim = False
        g.units_dropped.add(out.result)
    if _is_spatial_mean(g, c, x):
        pooled = g.op("GlobalAveragePool", [x], x.dtype)
        return pooled if keepdim else g.op("Flatten", [pooled], x.dtype, axis=1)
    work = g.cast(x, "i32") if x.dtype in ("i8", "i16", "u8", "bool") else x
    y = g.cast(_reduce(g, _OPS[c.fn], work, axes, keepdim), x.dtype)
    if c.fn in ("amax", "amin") and dtypes.is_float(x.dtype):
        y = _extreme(g, c.fn, x, y, axes, keepdim)
    return y


def _count(x: T, axes: list[int] | None) -> int | None:
    """How many elements each result reduces (None: a symbolic extent)."""
    assert x.shape is not None
    extents = x.shape if axes is None else [x.shape[a] for a in axes]
    return math.prod(extents) if all(isinstance(d, int) for d in extents) else None  # type: ignore[arg-type]


def _variance(g: OnnxGraph, c: C.Reduce, x: T, axes: list[int] | None) -> T:
    x.static_shape("var/std")
    n = _count(x, axes)
    assert n is not None
    mean = _reduce(g, "ReduceMean", x, axes, True)
    centered = g.op("Sub", [x, mean], x.dtype)
    squares = g.op("Mul", [centered, centered], x.dtype)
    total = _reduce(g, "ReduceSum", squares, axes, c.keepdim) if x.rank else squares
    denom = max(n - c.correction, 0)
    var = g.op("Div", [total, g.const(denom, x.dtype)], x.dtype)
    return g.op("Sqrt", [var], x.dtype) if c.fn == "std" else var


@emits(C.ArgReduce, widen=True)
def arg_reduce(g: OnnxGraph, c: C.ArgReduce, out: Instr, x: T) -> T:
    op = "ArgMax" if c.fn == "argmax" else "ArgMin"
    work = g.cast(x, "i32") if x.dtype in ("bool", "i8", "i16", "u8") else x
    flat = c.axis is None or x.rank == 0
    if flat:
        work = g.op("Reshape", [work, g.ints([-1])], work.dtype)
    axis = 0 if flat or c.axis is None else c.axis
    keep = int(c.keepdim and not flat)
    idx = g.op(op, [work], "i64", axis=axis, keepdims=keep, select_last_index=0)
    if dtypes.is_float(work.dtype):  # the first NaN wins, as in PyTorch
        nan = g.cast(g.op("IsNaN", [work], "bool"), "i32")
        first_nan = g.op("ArgMax", [nan], "i64", axis=axis, keepdims=keep)
        has_nan = g.cast(g.op("ReduceMax", [nan, g.ints([axis])], "i32", keepdims=keep), "bool")
        idx = g.op("Where", [has_nan, first_nan, idx], "i64")
    if flat:
        idx = g.op("Reshape", [idx, g.ints([1] * x.rank if c.keepdim else [])], "i64", out.shape)
    return idx


@emits(C.ReduceAxes, widen=True)
def reduce_axes(g: OnnxGraph, c: C.ReduceAxes, out: Instr, x: T, axes: T) -> T:
    # ONNX's Reduce* take their axes as an input from opset 18: the run-time tensor goes straight in.
    # (ReduceAxes comes from an ONNX graph only, whose ReduceMax/Min over nothing give the identity.)
    given = g.cast(axes, "i64")
    work = g.cast(x, "i32") if x.dtype in ("i8", "i16", "u8", "bool") else x
    y = g.cast(_reduce(g, _OPS[c.fn], work, given, c.keepdim), x.dtype)
    if c.fn in ("amax", "amin") and dtypes.is_float(x.dtype):
        y = _extreme(g, c.fn, x, y, given, c.keepdim)
    return y
