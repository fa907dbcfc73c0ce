"""Quantization ONNX ops: QuantizeLinear, DequantizeLinear, QLinearMatMul, QLinearConv, MatMulInteger,
ConvInteger — as float arithmetic around the existing Calls, exactly as the ONNX reference does it.

Scales and zero points are per tensor, per axis (1-D along ``axis``) or blocked (``block_size``
along ``axis``). Integer products (MatMulInteger, ConvInteger, the QLinear ops) are computed in
float64, where sums of 8/16-bit products are exact. Output types rlx has no dtype for (uint16,
int4, float8 …) are refused by the reader with one line.
"""

from __future__ import annotations

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.elementwise import FLOAT8, emit_binary, onnx_cast, unary
from rlx.frontends.onnx.nn import conv, matmul
from rlx.frontends.onnx.reader import elem_dtype
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, norm_axis, onnx_op
from rlx.ir import dtypes
from rlx.ir.calls import Clamp, IndexSelect
from rlx.ir.program import Operand, Ref
from rlx.ir.symbolic import Dim

_RANGES = {
    "u8": (0, 255), "i8": (-128, 127), "i16": (-32768, 32767), "i32": (-(2**31), 2**31 - 1), "u16": (0, 65535),
    "u4": (0, 15), "i4": (-8, 7), "u2": (0, 3), "i2": (-2, 1),
}  # fmt: skip
# Float targets: x / scale cast (float8: saturating when asked; their zero point is ignored, as the
# reference does; float4e2m1's is added).
_FLOAT_TARGETS = (*FLOAT8, "f4e2m1")


def _param(b: OnnxBuilder, node: OnnxNode, index: int, shape: tuple, axis: int, block: int) -> Operand | None:
    """Scale or zero point ``index`` laid out to broadcast against an input of ``shape``."""
    v = b.get(node, index)
    if v is None:
        return None
    rank = len(shape)
    scalar = (v.ndim == 0 or v.size == 1) if isinstance(v, np.ndarray) else all(d == 1 for d in b.shape(v))
    if not scalar:
        norm_axis(axis, rank)  # per-axis or blocked: the axis must exist
    if isinstance(v, np.ndarray):
        if scalar:
            return b.operand(v.reshape(()), node.inputs[index])
        if not block:
            dims = [1] * rank
            dims[axis] = v.size
            return b.operand(v.reshape(dims), node.inputs[index])
        rep = np.repeat(v, block, axis=axis).take(range(static_dim(shape[axis], "the blocked axis", node)), axis=axis)
        return b.operand(np.ascontiguousarray(rep), node.inputs[index])
    ref = b.as_ref(v)
    pshape = b.shape(ref)
    if scalar:
        return b.reshape(ref, ())
    if not block:
        view: list[Dim] = [1] * rank
        view[axis] = pshape[0]
        return b.reshape(ref, view)
    size = static_dim(shape[axis], "the blocked axis", node)
    idx = b.as_ref(b.operand(np.arange(size, dtype=np.int64) // block, f"{node.name}_blocks"))
    out = list(pshape)
    out[axis] = size
    return b.emit(IndexSelect(ref, axis, idx), tuple(out), b.dtype(ref))


def _saturate(b: OnnxBuilder, x: Ref, dtype: str) -> Ref:
    lo, hi = _RANGES[dtype]
    dt = b.dtype(x)
    return b.cast(b.emit(Clamp(x, b.lit(lo, dt), b.lit(hi, dt)), b.shape(x), dt), dtype)


def _axis_block(node: OnnxNode, rank: int) -> tuple[int, int]:
    axis = int(node.attr("axis", 1))  # used only by per-axis and blocked parameters, checked there
    return (axis + rank if axis < 0 else axis), int(node.attr("block_size", 0) or 0)


@onnx_op("QuantizeLinear")
def quantize_linear(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    shape = tuple(b.shape(x))
    axis, block = _axis_block(node, len(shape))
    if node.has_input(2):
        out = b.in_dtype(node, 2)
    elif node.attr("output_dtype"):
        out = elem_dtype(int(node.attr("output_dtype")), f"node {node.name} (QuantizeLinear) output_dtype")
    else:
        out = "u8"
    if out not in _RANGES and out not in _FLOAT_TARGETS:
        raise LoweringError(f"node {node.name} (QuantizeLinear): quantizing to {out} is not supported")
    scale = _param(b, node, 1, shape, axis, block)
    assert scale is not None
    dt = b.dtype(x)
    if node.attr("precision"):
        dt = elem_dtype(int(node.attr("precision")), f"node {node.name} (QuantizeLinear) precision")
    y = emit_binary(b, "div", b.cast(x, dt), b.cast(scale, dt))
    if out in _FLOAT_TARGETS:
        zp = _param(b, node, 2, shape, axis, block) if out == "f4e2m1" else None
        if zp is not None:
            y = emit_binary(b, "add", y, b.cast(zp, dt))
        q8 = onnx_cast(b, y, out, node.inputs[0], bool(node.attr("saturate", 1)))
        assert isinstance(q8, Ref)
        return q8
    q = unary(b, "round", y)  # round half to even
    q = b.cast(q, "f64")  # + zero point and saturation on exact integers
    zp = _param(b, node, 2, shape, axis, block)
    if zp is not None:
        q = emit_binary(b, "add", q, b.cast(zp, "f64"))
    return _saturate(b, q, out)


@onnx_op("DequantizeLinear")
def dequantize_linear(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    shape = tuple(b.shape(x))
    axis, block = _axis_block(node, len(shape))
    scale = _param(b, node, 1, shape, axis, block)
    assert scale is not None
    out = b.dtype(scale)
    if node.attr("output_dtype"):
        out = elem_dtype(int(node.attr("output_dtype")), f"node {node.name} (DequantizeLinear) output_dtype")
    y = b.cast(x, "f32")
    zp = _param(b, node, 2, shape, axis, block) if b.dtype(x) not in _FLOAT_TARGETS else None
    if zp is not None:
        y = emit_binary(b, "sub", y, b.cast(zp, "f32"))
    return b.cast(emit_binary(b, "mul", y, b.cast(scale, dtypes.promote_types(b.dtype(scale), "f32"))), out)


def _centered(b: OnnxBuilder, node: OnnxNode, index: int, zp_index: int, per_row: bool = False) -> Ref:
    """Input ``index`` minus its zero point, as float64 (exact for 8/16-bit integers)."""
    x = b.cast(b.ref(node, index), "f64")
    if not node.has_input(zp_index):
        return x
    zp = b.cast(b.as_ref(b.input(node, zp_index)), "f64")
    if per_row and b.rank(zp) == 1 and b.shape(zp)[0] != 1:  # MatMulInteger: a's zero point is per row
        zp = b.reshape(zp, (b.shape(zp)[0], 1))
    return emit_binary(b, "sub", x, zp)


@onnx_op("MatMulInteger")
def matmul_integer(node: OnnxNode, b: OnnxBuilder) -> Env:
    a, w = _centered(b, node, 0, 2, per_row=True), _centered(b, node, 1, 3)
    return b.cast(matmul(b, a, w), "i32")


def _requantize(b: OnnxBuilder, node: OnnxNode, acc: Ref, scales: tuple[int, int, int], y_zp: int) -> Ref:
    """``saturate(round(acc · s_a · s_b / s_y) + zp_y)`` like the reference (scales in their own type)."""
    sa, sb, sy = (b.as_ref(b.input(node, k)) for k in scales)
    ratio = emit_binary(b, "div", emit_binary(b, "mul", sa, sb), sy)
    d = emit_binary(b, "mul", acc, b.cast(ratio, "f64"))
    out = b.in_dtype(node, y_zp) if node.has_input(y_zp) else b.in_dtype(node, 0)
    if node.has_input(y_zp):
        d = emit_binary(b, "add", d, b.cast(b.as_ref(b.input(node, y_zp)), "f64"))
    if out not in _RANGES:
        raise LoweringError(f"node {node.name} ({node.op_type}): output type {out} is not supported")
    return _saturate(b, unary(b, "round", d), out)


@onnx_op("QLinearMatMul")
def qlinear_matmul(node: OnnxNode, b: OnnxBuilder) -> Env:
    a, w = _centered(b, node, 0, 2), _centered(b, node, 3, 5)
    return _requantize(b, node, matmul(b, a, w), (1, 4, 6), 7)


def _conv_on(b: OnnxBuilder, node: OnnxNode, x: Ref, w: Ref, bias: Ref | None) -> Ref:
    """The Conv handler on already prepared operands (attributes as ``node`` has them)."""
    names = [f"{node.name}::{k}" for k in ("x", "w", "bias")]
    b.env[names[0]], b.env[names[1]] = x, w
    if bias is not None:
        b.env[names[2]] = bias
    inner = OnnxNode(node.name, "Conv", "", node.opset, names[: 3 if bias is not None else 2], [], node.attrs)
    out = conv(inner, b)
    assert isinstance(out, Ref)
    return out


def _centered_filters(b: OnnxBuilder, node: OnnxNode, index: int, zp_index: int) -> Ref:
    """Conv weights ``index`` minus their zero point (one per output channel, or one in all), as float64."""
    w = b.cast(b.ref(node, index), "f64")
    if not node.has_input(zp_index):
        return w
    zp = b.cast(b.as_ref(b.input(node, zp_index)), "f64")
    if b.rank(zp) == 1 and b.shape(zp)[0] != 1:  # per output channel: along the weights' first axis
        zp = b.reshape(zp, (b.shape(zp)[0], *([1] * (b.rank(w) - 1))))
    return emit_binary(b, "sub", w, zp)


@onnx_op("ConvInteger")
def conv_integer(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = _centered(b, node, 0, 2)
    w = _centered_filters(b, node, 1, 3)
    return b.cast(_conv_on(b, node, x, w, None), "i32")


@onnx_op("QLinearConv")
def qlinear_conv(node: OnnxNode, b: OnnxBuilder) -> Env:
    # x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias (int32)
    x = _centered(b, node, 0, 2)
    w = _centered_filters(b, node, 3, 5)
    bias = b.cast(b.ref(node, 8), "f64") if node.has_input(8) else None
    acc = _conv_on(b, node, x, w, bias)
    w_scale = b.as_ref(b.input(node, 4))
    if b.rank(w_scale) == 1 and b.shape(w_scale)[0] != 1:  # per output channel
        env_name = f"{node.name}::w_scale"
        b.env[env_name] = b.reshape(w_scale, (1, b.shape(w_scale)[0], *([1] * (b.rank(acc) - 2))))
        node = OnnxNode(node.name, node.op_type, node.domain, node.opset,
                        [*node.inputs[:4], env_name, *node.inputs[5:]], node.outputs, node.attrs)  # fmt: skip
    return _requantize(b, node, acc, (1, 4, 6), 7)
