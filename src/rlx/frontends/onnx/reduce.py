"""Reductions and scans: ReduceSum … ReduceLogSumExp, ArgMax/ArgMin, CumSum, TopK.

Reduction axes are an attribute before opset 13 (18 for all but ReduceSum) and an optional input
after; no axes means every axis unless ``noop_with_empty_axes`` is set.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.elementwise import emit_binary, unary
from rlx.frontends.onnx.movement import flip, slice_axis
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, dim_op, norm_axis, onnx_op
from rlx.ir import dtypes
from rlx.ir.calls import ArgReduce, ArgTopK, CumReduce, Gather, Pad, Reduce, ReduceAxes, Where
from rlx.ir.program import Operand, Ref


def _axes(node: OnnxNode, b: OnnxBuilder, rank: int) -> tuple[int, ...] | None:
    """The axes to reduce, or None for "return the input" (noop_with_empty_axes)."""
    axes = b.ints(node, 1, attr="axes")
    if not axes:
        return None if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({norm_axis(static_dim(a, "axes", node), rank) for a in axes}))


def reduce(b: OnnxBuilder, fn: str, x: Operand, axes: tuple[int, ...], keep: bool) -> Ref:
    x = b.as_ref(x)
    shape = b.shape(x)
    out = (
        tuple(1 if k in axes else d for k, d in enumerate(shape))
        if keep
        else tuple(d for k, d in enumerate(shape) if k not in axes)
    )
    return b.emit(Reduce(fn, x, axes, keep), out, b.dtype(x))


# What a reduction over nothing gives (ONNX: the identity of the reduction).
_EMPTY = {"amax": float("-inf"), "amin": float("inf"), "logsumexp": float("-inf"), "logsum": float("-inf"),
          "sum": 0, "sumsq": 0, "l1": 0, "l2": 0, "prod": 1}  # fmt: skip


def _empty(b: OnnxBuilder, x: Ref, axes: tuple[int, ...], keep: bool, value: float) -> Ref:
    from rlx.ir.calls import Full

    shape = b.shape(x)
    out = (
        tuple(1 if k in axes else d for k, d in enumerate(shape))
        if keep
        else tuple(d for k, d in enumerate(shape) if k not in axes)
    )
    dt = b.dtype(x)
    if dt == "bool":
        value = value > 0
    elif not dtypes.is_float(dt) and abs(value) == float("inf"):
        info = np.iinfo(dtypes.to_numpy(dt))
        value = int(info.min if value < 0 else info.max)
    elif not dtypes.is_float(dt):
        value = int(value)
    return b.emit(Full(value, out, dt), out, dt)


def _float(b: OnnxBuilder, x: Operand) -> tuple[Operand, str]:
    dt = b.dtype(x)
    return (x, dt) if dtypes.is_float(dt) else (b.cast(x, "f64"), dt)


Reducer = Callable[[str, Operand, bool], Ref]  # (fn, x, keepdim) → the reduction over the node's axes


def _reduction(kind: str):  # noqa: ANN202
    def handler(node: OnnxNode, b: OnnxBuilder) -> Env:
        x = b.ref(node, 0)
        keep = bool(node.attr("keepdims", 1))
        given = b.get(node, 1) if "axes" not in node.attrs and len(node.inputs) > 1 else None
        if given is not None and not isinstance(given, np.ndarray) and b.evaluate(given) is None:
            return _run_time_axes(node, b, kind, x, b.as_ref(given), keep)
        axes = _axes(node, b, b.rank(x))
        if axes is None:
            return x
        if any(b.shape(x)[a] == 0 for a in axes) and kind in _EMPTY:
            return _empty(b, x, axes, keep, _EMPTY[kind])
        return _compose(b, kind, x, keep, lambda fn, v, k: reduce(b, fn, v, axes, k))

    return handler


def _run_time_axes(node: OnnxNode, b: OnnxBuilder, kind: str, x: Ref, axes: Ref, keep: bool) -> Env:
    """Axes known only when the model runs: ``ReduceAxes``, whose extents are bound as it runs."""
    shape = b.shape(axes)
    count = shape[0] if len(shape) == 1 else None
    if not isinstance(count, int):
        raise LoweringError(
            f"node {node.name} ({node.op_type}): axes {node.inputs[1]!r} of run-time values need a static "
            f"length (found shape {list(shape)}); freeze it with freeze_inputs"
        )
    if count == 0:  # no axes: every axis, or the input unchanged
        every = tuple(range(b.rank(x)))
        return x if node.attr("noop_with_empty_axes", 0) else _compose(
            b, kind, x, keep, lambda fn, v, k: reduce(b, fn, v, every, k))  # fmt: skip

    def reducer(fn: str, v: Operand, k: bool) -> Ref:
        v = b.as_ref(v)
        dims = b.shape(v)
        if k:
            out = tuple(1 if d == 1 else b.data_dim(d if isinstance(d, int) else 1) for d in dims)
        else:
            out = tuple(b.data_dim(1) for _ in range(len(dims) - count))
        return b.emit(ReduceAxes(fn, v, b.cast(axes, "i64"), k), out, b.dtype(v))

    return _compose(b, kind, x, keep, reducer)


def _compose(b: OnnxBuilder, kind: str, x: Ref, keep: bool, red: Reducer) -> Ref:
    """ONNX's reduction ``kind`` from the five Reduce functions over the node's axes."""
    if kind in ("sum", "mean", "prod", "amax", "amin"):
        return red(kind, x, keep)
    if kind == "l1":
        return red("sum", unary(b, "abs", x), keep)
    if kind == "sumsq":
        return red("sum", emit_binary(b, "mul", x, x), keep)
    xf, dt = _float(b, x)
    if kind == "l2":
        return b.cast(unary(b, "sqrt", red("sum", emit_binary(b, "mul", xf, xf), keep)), dt)
    if kind == "logsum":
        return b.cast(unary(b, "log", red("sum", xf, keep)), dt)
    # logsumexp, stabilised by the maximum (kept as -inf-safe zero where the maximum is infinite)
    m = red("amax", xf, True)
    finite = unary(b, "isfinite", m)
    m = b.emit(Where(finite, m, b.lit(0.0, b.dtype(m))), b.shape(m), b.dtype(m))
    y = emit_binary(b, "add", unary(b, "log", red("sum", unary(b, "exp", emit_binary(b, "sub", xf, m)), True)), m)
    if not keep:  # drop the reduced axes, of extent 1 by now: a sum over one element is that element
        y = red("sum", y, False)
    return b.cast(y, dt)


for _op, _kind in {
    "ReduceSum": "sum", "ReduceMean": "mean", "ReduceProd": "prod", "ReduceMax": "amax", "ReduceMin": "amin",
    "ReduceL1": "l1", "ReduceL2": "l2", "ReduceSumSquare": "sumsq", "ReduceLogSum": "logsum",
    "ReduceLogSumExp": "logsumexp",
}.items():  # fmt: skip
    onnx_op(_op)(_reduction(_kind))


def _arg(fn: str):  # noqa: ANN202
    def handler(node: OnnxNode, b: OnnxBuilder) -> Env:
        x = b.ref(node, 0)
        shape = b.shape(x)
        axis = norm_axis(node.attr("axis", 0), len(shape))
        keep = bool(node.attr("keepdims", 1))
        out = (
            tuple(1 if k == axis else d for k, d in enumerate(shape))
            if keep
            else tuple(d for k, d in enumerate(shape) if k != axis)
        )
        if not node.attr("select_last_index", 0):
            return b.emit(ArgReduce(fn, x, axis, keep), out, "i64")
        # The last index of the extreme: search the flipped axis, then count from the end.
        r = b.emit(ArgReduce(fn, flip(b, x, (axis,)), axis, keep), out, "i64")
        return emit_binary(b, "sub", b.lit(shape[axis], "i64"), emit_binary(b, "add", r, b.lit(1, "i64")))

    return handler


onnx_op("ArgMax")(_arg("argmax"))
onnx_op("ArgMin")(_arg("argmin"))


def _scan(fn: str):  # noqa: ANN202
    def handler(node: OnnxNode, b: OnnxBuilder) -> Env:
        x = b.ref(node, 0)
        rank = b.rank(x)
        given = b.required(node, 1)
        if isinstance(given, np.ndarray):
            return _scan_axis(node, b, fn, x, norm_axis(int(np.asarray(given).reshape(-1)[0]), rank))
        # The axis is a model input: the result has the input's shape whichever axis it names, so
        # scan along each and keep the one it names (onnxruntime requires it in [-rank, rank)).
        axis = b.reshape(b.cast(given, "i64"), ())
        axis = emit_binary(b, "remainder", axis, b.lit(rank, "i64"))
        y: Ref | None = None
        for a in reversed(range(rank)):
            s = _scan_axis(node, b, fn, x, a)
            y = (
                s
                if y is None
                else b.emit(Where(emit_binary(b, "eq", axis, b.lit(a, "i64")), s, y), b.shape(x), b.dtype(x))
            )
        assert y is not None
        return y

    return handler


def _scan_axis(node: OnnxNode, b: OnnxBuilder, fn: str, x: Ref, axis: int) -> Ref:
    reverse, exclusive = node.attr("reverse", 0), node.attr("exclusive", 0)
    y = flip(b, x, (axis,)) if reverse else x
    if exclusive:  # shift by one along the axis, starting from the identity
        size = b.shape(y)[axis]
        pairs = tuple((1, 0) if a == axis else (0, 0) for a in range(b.rank(y)))
        padded = b.emit(Pad(y, pairs, 0 if fn == "sum" else 1), tuple(
            dim_op("add", d, 1) if a == axis else d for a, d in enumerate(b.shape(y))), b.dtype(y))  # fmt: skip
        y = slice_axis(b, padded, axis, 0, size)
    s = b.emit(CumReduce(fn, y, axis), b.shape(y), b.dtype(y))
    return flip(b, s, (axis,)) if reverse else s


onnx_op("CumSum")(_scan("sum"))
onnx_op("CumProd")(_scan("prod"))


@onnx_op("TopK")
def top_k(node: OnnxNode, b: OnnxBuilder) -> tuple[Env, Env]:
    x = b.ref(node, 0)
    shape = list(b.shape(x))
    ks = b.required_ints(node, 1, attr="k") if node.opset < 10 else b.required_ints(node, 1)
    k = static_dim(ks[0], "k", node)
    axis = norm_axis(node.attr("axis", -1), len(shape))
    largest = bool(node.attr("largest", 1))  # results are always sorted: a valid order for sorted=0 too
    shape[axis] = k
    idx = b.emit(ArgTopK(x, k, axis, largest, True), tuple(shape), "i64")
    values = b.emit(Gather(x, axis, idx), tuple(shape), b.dtype(x))
    return values, idx


__all__ = ["reduce", "slice_axis"]
