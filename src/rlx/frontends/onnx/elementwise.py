"""Elementwise ONNX ops: arithmetic, comparisons, logic, unary math, activations, casts, where.

ONNX has no implicit type promotion: both operands of a binary op share a dtype, and the result
keeps it (comparisons give bool). The ONNX-specific rules live here: integer ``Div`` truncates,
``Mod`` follows the divisor's sign unless ``fmod=1``, ``Pow`` keeps the base's type. Known inputs
(initializers, shape arithmetic) are folded while converting, symbolic extents included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.onnx.reader import ELEM_TYPES, elem_dtype
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, Out, broadcast, dim_op, np_cast, onnx_op
from rlx.ir import dtypes
from rlx.ir.calls import Binary, Bitcast, Clamp, LeakyRelu, Unary, Where
from rlx.ir.program import Lit, Operand, Ref
from rlx.ir.symbolic import Sym, static_shape

_PREDICATES = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}

# Folding known arrays: numpy for numbers, dim_op for symbolic extents (object arrays); ``fold``
# computes trunc_divide itself.
_FOLD: dict[str, Callable[..., Any]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "remainder": np.remainder, "fmod": np.fmod, "maximum": np.maximum, "minimum": np.minimum,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}  # fmt: skip
_DIM_FNS = {"add": "add", "sub": "sub", "mul": "mul", "trunc_divide": "truncdiv", "remainder": "mod",
            "maximum": "max", "minimum": "min"}  # fmt: skip


_SYM_PREDICATES = {"eq": "Eq({}, {})", "ne": "Ne({}, {})", "lt": "({}) < ({})", "le": "({}) <= ({})",
                   "gt": "({}) > ({})", "ge": "({}) >= ({})"}  # fmt: skip


def _dims_equal(a: Any, b: Any) -> bool | None:
    """Whether two extents are equal, None when only the sizes can tell. An input's size is never
    negative, so it differs from -1 (the "keep this axis" of a Reshape or Expand shape)."""
    if (isinstance(a, int) and isinstance(b, int)) or a == b:
        return bool(a == b)
    for size, other in ((a, b), (b, a)):
        if isinstance(size, Sym) and size.expr.isidentifier() and isinstance(other, int) and other < 0:
            return False
    return None


def fold(fn: str, x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """``fn(x, y)`` on two known arrays, or None when it is not worth folding."""
    if x.dtype == object or y.dtype == object:
        if fn not in _DIM_FNS and fn != "eq":
            return None
        if fn == "eq":
            vals = np.frompyfunc(_dims_equal, 2, 1)(x, y)
            if any(v is None for v in np.asarray(vals).reshape(-1)):
                return None
            return np.asarray(vals).astype(bool)
        return np.asarray(np.frompyfunc(lambda a, b: dim_op(_DIM_FNS[fn], a, b), 2, 1)(x, y), dtype=object)
    if x.size > 4096 or y.size > 4096:
        return None
    with np.errstate(all="ignore"):
        if fn == "trunc_divide":
            if x.dtype.kind in "iu":
                q = np.floor_divide(x, np.where(y == 0, 1, y))
                return np.where((q < 0) & (q * y != x), q + 1, q).astype(x.dtype)
            return np.trunc(x / y).astype(x.dtype)
        out = _FOLD[fn](x, y)
    return np.asarray(out if fn in _PREDICATES else np.asarray(out).astype(x.dtype))


def binary(b: OnnxBuilder, fn: str, xv: Env, yv: Env, x_name: str = "x", y_name: str = "y") -> Env:
    """``fn(x, y)`` with numpy broadcasting; folded when both are known."""
    if isinstance(xv, np.ndarray) and isinstance(yv, np.ndarray):
        folded = fold(fn, xv, yv)
        if folded is not None:
            return folded
        if fn in _SYM_PREDICATES and (xv.dtype == object or yv.dtype == object) and max(xv.size, yv.size) <= 16:
            # a comparison of sizes: a boolean expression over the symbols (an If over it picks its branch
            # at the example's sizes and guards the choice)
            form = _SYM_PREDICATES[fn]
            sym = np.frompyfunc(lambda p, q: Sym(form.format(p, q)), 2, 1)(xv, yv)
            return b.tag_ints(np.asarray(sym, dtype=object), "bool")
    x, y = b.operand(xv, x_name), b.operand(yv, y_name)
    return emit_binary(b, fn, x, y)


def emit_binary(b: OnnxBuilder, fn: str, x: Operand, y: Operand) -> Ref:
    shape = broadcast(b.shape(x), b.shape(y))
    if isinstance(x, Lit) and isinstance(y, Lit):
        x = b.as_ref(x)
    return b.emit(Binary(fn, x, y), shape, "bool" if fn in _PREDICATES else b.dtype(x))


def unary(b: OnnxBuilder, fn: str, x: Operand) -> Ref:
    x = b.as_ref(x)
    return b.emit(Unary(fn, x), b.shape(x), "bool" if fn in ("isnan", "isinf", "isfinite") else b.dtype(x))


def scalar(b: OnnxBuilder, value: float, like: Operand) -> Lit:
    return b.lit(value, b.dtype(like))


def _ins(node: OnnxNode, b: OnnxBuilder) -> tuple[Env, Env]:
    x, y = b.get(node, 0), b.get(node, 1)
    if x is None or y is None:
        raise LoweringError(f"node {node.name} ({node.op_type}): two inputs are required")
    return x, y


# ── binary arithmetic and comparisons ────────────────────────────────────────
_BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Equal": "eq", "Less": "lt", "LessOrEqual": "le",
    "Greater": "gt", "GreaterOrEqual": "ge", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
    "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
}  # fmt: skip


def _simple_binary(fn: str):  # noqa: ANN202 - a tiny closure factory
    def handler(node: OnnxNode, b: OnnxBuilder) -> Env:
        x, y = _ins(node, b)
        return binary(b, fn, x, y, node.inputs[0], node.inputs[1])

    return handler


for _op, _fn in _BINARY.items():
    onnx_op(_op)(_simple_binary(_fn))


@onnx_op("Div")
def div(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, y = _ins(node, b)
    fn = "div" if dtypes.is_float(b.dtype(x)) or dtypes.is_complex(b.dtype(x)) else "trunc_divide"
    return binary(b, fn, x, y, node.inputs[0], node.inputs[1])


@onnx_op("Mod")
def mod(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, y = _ins(node, b)
    fn = "fmod" if node.attr("fmod", 0) else "remainder"
    return binary(b, fn, x, y, node.inputs[0], node.inputs[1])


@onnx_op("Pow")
def pow_(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, y = b.input(node, 0), b.input(node, 1)
    out = b.dtype(x)
    if b.dtype(y) == out:
        return emit_binary(b, "pow", x, y)
    compute = "f64" if not dtypes.is_float(out) or b.dtype(y) == "f64" else out
    r = emit_binary(b, "pow", b.cast(x, compute), b.cast(y, compute))
    return b.cast(r, out)


@onnx_op("BitShift")
def bit_shift(node: OnnxNode, b: OnnxBuilder) -> Env:
    # ONNX shifts unsigned integers only; a shift by the bit width or more gives 0, which is also
    # PyTorch's rule that the shared left_shift / right_shift functions follow.
    fn = "left_shift" if node.attr("direction") == "LEFT" else "right_shift"
    return emit_binary(b, fn, b.input(node, 0), b.input(node, 1))


def _variadic(fn: str, mean: bool = False):  # noqa: ANN202
    def handler(node: OnnxNode, b: OnnxBuilder) -> Env:
        vals = [b.required(node, k) for k in range(len(node.inputs)) if node.has_input(k)]
        acc = vals[0]
        for v in vals[1:]:
            acc = binary(b, fn, acc, v)
        if len(vals) == 1:
            acc = b.as_ref(b.operand(acc)) if isinstance(acc, np.ndarray) else acc
        if mean:
            acc = binary(b, "div", acc, np.asarray(len(vals), dtypes.to_numpy(b.dtype(acc))))
        return acc

    return handler


onnx_op("Sum")(_variadic("add"))
onnx_op("Max")(_variadic("maximum"))
onnx_op("Min")(_variadic("minimum"))
onnx_op("Mean")(_variadic("add", mean=True))


# ── unary math ───────────────────────────────────────────────────────────────
_UNARY = {
    "Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh",
    "Cosh": "cosh", "Tanh": "tanh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "Sigmoid": "sigmoid",
    "Relu": "relu", "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign",
    "IsNaN": "isnan", "Not": "logical_not", "BitwiseNot": "bitwise_not", "Softplus": "softplus", "Mish": "mish",
    "HardSwish": "hardswish",
}  # fmt: skip


def _simple_unary(fn: str):  # noqa: ANN202
    def handler(node: OnnxNode, b: OnnxBuilder) -> Env:
        return unary(b, fn, b.input(node, 0))

    return handler


for _op, _fn in _UNARY.items():
    onnx_op(_op)(_simple_unary(_fn))


@onnx_op("Identity")
def identity(node: OnnxNode, b: OnnxBuilder) -> Env | None:
    v = b.get(node, 0)
    return v


@onnx_op("Dropout")
def dropout(node: OnnxNode, b: OnnxBuilder) -> tuple[Env, Env | None]:
    x = b.required(node, 0)
    training = node.has_input(2) and bool(np.asarray(b.const(node, 2)).item())
    ratio = b.const(node, 1) if node.opset >= 12 else np.asarray(node.attr("ratio", 0.5))
    if training and (ratio is None or float(np.asarray(ratio).item()) != 0.0):  # ratio 0 drops nothing
        raise LoweringError(f"node {node.name} (Dropout): training_mode=1 is not supported (inference only)")
    if len(node.outputs) <= 1:
        return x, None
    shape = static_shape(b.shape(x))
    if shape is None:
        raise LoweringError(f"node {node.name} (Dropout): the mask output of a dynamic shape is not supported")
    return x, np.ones(shape, dtype=bool)


@onnx_op("IsInf")
def is_inf(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.input(node, 0)
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    if pos and neg:
        return unary(b, "isinf", x)
    inf = scalar(b, float("inf") if pos else float("-inf"), x)
    if not pos and not neg:
        return b.as_ref(Lit(False, "bool"), b.shape(x))
    return emit_binary(b, "eq", x, inf)


# ── activations with parameters ──────────────────────────────────────────────
def _where_positive(b: OnnxBuilder, x: Operand, neg: Operand) -> Ref:
    cond = emit_binary(b, "gt", x, scalar(b, 0.0, x))
    return b.emit(Where(cond, x, neg), b.shape(x), b.dtype(x))


def _scaled_expm1(b: OnnxBuilder, x: Operand, alpha: float) -> Ref:
    return emit_binary(b, "mul", unary(b, "expm1", x), scalar(b, alpha, x))


@onnx_op("Elu")
def elu(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, alpha = b.input(node, 0), node.attr("alpha", 1.0)
    return unary(b, "elu", x) if alpha == 1.0 else _where_positive(b, x, _scaled_expm1(b, x, alpha))


@onnx_op("Selu")
def selu(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.input(node, 0)
    alpha, gamma = node.attr("alpha", 1.67326319217681884765625), node.attr("gamma", 1.05070102214813232421875)
    r = _where_positive(b, x, _scaled_expm1(b, x, alpha))
    return emit_binary(b, "mul", r, scalar(b, gamma, x))


@onnx_op("Celu")
def celu(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, alpha = b.input(node, 0), node.attr("alpha", 1.0)
    neg = _scaled_expm1(b, emit_binary(b, "div", x, scalar(b, alpha, x)), alpha)
    return _where_positive(b, x, neg)


@onnx_op("LeakyRelu")
def leaky_relu(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.as_ref(b.input(node, 0))
    return b.emit(LeakyRelu(x, float(node.attr("alpha", 0.01))), b.shape(x), b.dtype(x))


@onnx_op("ThresholdedRelu")
def thresholded_relu(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.input(node, 0)
    cond = emit_binary(b, "gt", x, scalar(b, node.attr("alpha", 1.0), x))
    return b.emit(Where(cond, x, scalar(b, 0.0, x)), b.shape(x), b.dtype(x))


@onnx_op("HardSigmoid")
def hard_sigmoid(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.input(node, 0)
    y = emit_binary(b, "mul", x, scalar(b, node.attr("alpha", 0.2), x))
    y = emit_binary(b, "add", y, scalar(b, node.attr("beta", 0.5), x))
    return b.emit(Clamp(y, scalar(b, 0.0, x), scalar(b, 1.0, x)), b.shape(x), b.dtype(x))


@onnx_op("Softsign")
def softsign(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.input(node, 0)
    return emit_binary(b, "div", x, emit_binary(b, "add", unary(b, "abs", x), scalar(b, 1.0, x)))


@onnx_op("Gelu")
def gelu(node: OnnxNode, b: OnnxBuilder) -> Env:
    return unary(b, "gelu_tanh" if node.attr("approximate", "none") == "tanh" else "gelu", b.input(node, 0))


@onnx_op("Swish")
def swish(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, alpha = b.input(node, 0), node.attr("alpha", 1.0)
    if alpha == 1.0:
        return unary(b, "silu", x)
    return emit_binary(b, "mul", x, unary(b, "sigmoid", emit_binary(b, "mul", x, scalar(b, alpha, x))))


@onnx_op("PRelu")
def prelu(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, slope = b.input(node, 0), b.input(node, 1)
    neg = emit_binary(b, "mul", x, slope)
    cond = emit_binary(b, "lt", x, scalar(b, 0, x))
    return b.emit(Where(cond, neg, x), b.shape(neg), b.dtype(x))


@onnx_op("Shrink")
def shrink(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.input(node, 0)
    bias, lambd = node.attr("bias", 0.0), node.attr("lambd", 0.5)
    lo = emit_binary(b, "lt", x, scalar(b, -lambd, x))
    hi = emit_binary(b, "gt", x, scalar(b, lambd, x))
    if dtypes.is_float(b.dtype(x)):
        plus, minus = emit_binary(b, "add", x, scalar(b, bias, x)), emit_binary(b, "sub", x, scalar(b, bias, x))
    else:
        plus = emit_binary(b, "add", x, b.lit(int(bias), b.dtype(x)))
        minus = emit_binary(b, "sub", x, b.lit(int(bias), b.dtype(x)))
    inner = b.emit(Where(hi, minus, b.lit(0, b.dtype(x))), b.shape(x), b.dtype(x))
    return b.emit(Where(lo, plus, inner), b.shape(x), b.dtype(x))


@onnx_op("Clip")
def clip(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.as_ref(b.input(node, 0))
    lo_op: Operand | None
    hi_op: Operand | None
    if node.opset < 11:
        lo = node.attr("min")
        hi = node.attr("max")
        lo_op = None if lo is None else scalar(b, lo, x)
        hi_op = None if hi is None else scalar(b, hi, x)
    else:
        lo_op, hi_op = b.optional(node, 1), b.optional(node, 2)
    if lo_op is None and hi_op is None:
        return x
    return b.emit(Clamp(x, lo_op, hi_op), b.shape(x), b.dtype(x))


@onnx_op("Where")
def where(node: OnnxNode, b: OnnxBuilder) -> Env:
    c, xv, yv = b.get(node, 0), b.get(node, 1), b.get(node, 2)
    if isinstance(c, np.ndarray) and isinstance(xv, np.ndarray) and isinstance(yv, np.ndarray):
        if c.dtype == object:  # a condition on sizes: decided at the example's, each choice guarded (as If)
            c = np.frompyfunc(b.decide_at_hints, 1, 1)(c).astype(bool)
        picked = np.where(c, xv, yv)
        return b.tag_ints(picked, b.dtype(xv)) if picked.dtype == object else picked
    cond, x, y = b.input(node, 0), b.input(node, 1), b.input(node, 2)
    shape = broadcast(b.shape(cond), b.shape(x), b.shape(y))
    if isinstance(cond, Lit):
        cond = b.as_ref(cond)
    return b.emit(Where(cond, x, y), shape, b.dtype(x))


# ── casts ────────────────────────────────────────────────────────────────────
def cast_to(b: OnnxBuilder, v: Env | Lit, dtype: str, name: str = "x") -> Out:
    if isinstance(v, np.ndarray):
        if v.dtype == object:
            if dtypes.is_int(dtype):
                return b.tag_ints(v, dtype)  # symbolic extents stay integers, of the width asked for
            return cast_to(b, b.operand(v, name), dtype)
        with np.errstate(all="ignore"):
            return v.astype(dtypes.to_numpy(dtype))
    return b.cast(v, dtype)


FLOAT8 = ("f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz")


def onnx_cast(
    b: OnnxBuilder, v: Env | Lit, dtype: str, name: str = "x", saturate: bool = True, round_mode: str = "up"
) -> Out:
    """ONNX's Cast: numpy's, except that float8 saturates to its largest finite value when asked
    (``saturate``, NaN stays NaN) and float8e8m0 rounds the exponent by ``round_mode``."""
    if dtype == "f8e8m0":
        return _to_e8m0(b, v, name, saturate, round_mode)
    if dtype not in FLOAT8 or not saturate:
        return cast_to(b, v, dtype, name)
    import ml_dtypes

    top = float(ml_dtypes.finfo(dtypes.to_numpy(dtype)).max)
    if isinstance(v, np.ndarray) and v.dtype != object:
        return np.clip(v, -top, top).astype(dtypes.to_numpy(dtype))  # the reference's saturate_cast
    x = b.as_ref(b.operand(v, name) if isinstance(v, np.ndarray) else v)
    if not dtypes.is_float(b.dtype(x)):
        x = b.cast(x, "f64")
    dt = b.dtype(x)
    return b.cast(b.emit(Clamp(x, b.lit(-top, dt), b.lit(top, dt)), b.shape(x), dt), dtype)


def _to_e8m0(b: OnnxBuilder, v: Env | Lit, name: str, saturate: bool, round_mode: str) -> Out:
    """float → float8e8m0 as ``onnx.numpy_helper.to_float8e8m0``: the float32 exponent bits, raised
    by one when the dropped mantissa says so (``up``: any bit; ``nearest``: to nearest, ties
    away), NaN/inf → NaN, never past the largest finite value when saturating."""
    if round_mode not in ("up", "down", "nearest"):
        raise LoweringError(f"Cast: round_mode {round_mode!r} is not one of up, down, nearest")
    if isinstance(v, np.ndarray) and v.dtype != object:
        from onnx import numpy_helper

        return numpy_helper.to_float8e8m0(v, saturate, round_mode)
    bits = b.as_ref(b.cast(b.as_ref(b.operand(v, name) if isinstance(v, np.ndarray) else v), "f32"))
    bits = b.emit(Bitcast(bits, "u32"), b.shape(bits), "u32")

    def lit(n: int) -> Lit:
        return b.lit(n, "u32")

    def bit_set(mask: int) -> Ref:
        return emit_binary(b, "ne", emit_binary(b, "bitwise_and", bits, lit(mask)), lit(0))

    exponent = emit_binary(b, "bitwise_and", emit_binary(b, "right_shift", bits, lit(23)), lit(0xFF))
    if round_mode != "down":
        if round_mode == "up":
            up = bit_set(0x7FFFFF)
        else:  # guard bit, and any of round, sticky or a non-zero exponent
            rest = emit_binary(b, "logical_or", bit_set(0x1FFFFF), emit_binary(b, "gt", exponent, lit(0)))
            up = emit_binary(b, "logical_and", bit_set(0x400000), rest)
        up = emit_binary(b, "logical_and", up, emit_binary(b, "ne", exponent, lit(0xFF)))
        if saturate:
            up = emit_binary(b, "logical_and", up, emit_binary(b, "ne", exponent, lit(0xFE)))
        exponent = emit_binary(b, "add", exponent, b.cast(up, "u32"))
    byte = b.cast(exponent, "u8")
    return b.emit(Bitcast(byte, "f8e8m0"), b.shape(byte), "f8e8m0")


@onnx_op("Cast")
def cast(node: OnnxNode, b: OnnxBuilder) -> Out:
    to = node.attr("to")
    if to not in ELEM_TYPES:
        raise LoweringError(f"node {node.name} (Cast): cast to ONNX type {to} is not supported by rlx")
    return _cast_node(node, b, ELEM_TYPES[to])


@onnx_op("CastLike")
def cast_like(node: OnnxNode, b: OnnxBuilder) -> Out:
    return _cast_node(node, b, b.in_dtype(node, 1))


def _cast_node(node: OnnxNode, b: OnnxBuilder, to: str) -> Out:
    saturate, round_mode = bool(node.attr("saturate", 1)), str(node.attr("round_mode", "up"))
    return onnx_cast(b, b.required(node, 0), to, node.inputs[0], saturate, round_mode)


__all__ = ["binary", "cast_to", "emit_binary", "fold", "np_cast", "onnx_cast", "unary"]


@onnx_op("BitCast")
def bit_cast(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    to = elem_dtype(int(node.attr("to")), f"node {node.name} (BitCast) to")
    if dtypes.to_numpy(to).itemsize != dtypes.to_numpy(b.dtype(x)).itemsize:
        raise LoweringError(f"node {node.name} (BitCast): {b.dtype(x)} and {to} differ in width")
    return b.emit(Bitcast(x, to), b.shape(x), to)
