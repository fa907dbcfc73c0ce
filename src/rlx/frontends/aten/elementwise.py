"""Elementwise lowerings: arithmetic, comparisons, unary math, activations, casts, where.

All of them go through ``binary`` / ``unary``: operands are promoted once, with PyTorch's
``result_type`` rules, to the dtype the computation happens in; the recorded output dtype decides
the final cast. Broadcasting is left to the engines, which broadcast like PyTorch. Python-number
arguments are converted the way PyTorch converts them (``scalar_as``).
"""

from __future__ import annotations

import math
from typing import TypeGuard

import numpy as np

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import broadcast
from rlx.ir import dtypes
from rlx.ir.calls import Binary, Clamp, Concat, LeakyRelu, Reshape, Slice, Unary, Where
from rlx.ir.program import Operand, Ref

_HALF = ("f16", "bf16")


def scalar_as(value: bool | int | float, dtype: str) -> bool | int | float:
    """A Python number converted to ``dtype`` as PyTorch converts scalar arguments (C++
    ``static_cast``): toward zero for a float into an integer type, wrapping for an integer that
    does not fit (``uint8_tensor >= -1`` compares with 255)."""
    if dtype == "bool":
        return bool(value)
    if dtypes.is_float(dtype):
        return float(value)
    value = math.trunc(value)
    np_dtype = dtypes.to_numpy(dtype)
    bits = 8 * np_dtype.itemsize
    lo = 0 if np_dtype.kind == "u" else -(1 << (bits - 1))
    return (value - lo) % (1 << bits) + lo


def operand_as(b: Builder, arg: object, dtype: str) -> Operand:
    """Argument ``arg`` (a tensor or a Python number) as an operand of ``dtype``."""
    if isinstance(arg, (bool, int, float)):
        return b.lit(scalar_as(arg, dtype), dtype)
    return b.cast(b.operand(arg, None), dtype)


def emit_binary(b: Builder, fn: str, x: Operand, y: Operand, dtype: str | None = None) -> Ref:
    """``Binary(fn, x, y)`` at the broadcast shape, in ``dtype`` (``x``'s unless told): operands
    already in the computation dtype (no promotion here)."""
    return b.emit(Binary(fn, x, y), broadcast(b.shape(x), b.shape(y)), dtype or b.dtype(x))


def _is_number(a: object) -> TypeGuard[int | float]:
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def _rounds_exactly(value: float, dtype: str) -> bool:
    with np.errstate(over="ignore"):
        return float(dtypes.to_numpy(dtype).type(value)) == value


def promoted_dtype(b: Builder, *args: object) -> str:
    """``torch.result_type`` over node arguments (tensors, 0-dim tensors and Python numbers)."""
    tensors: list[str] = []
    zero_dim: list[str] = []
    scalars: list[str] = []
    for a in args:
        if a is None:
            continue
        if isinstance(a, Ref):
            val = b.operand(a, None)
            (tensors if b.rank(val) > 0 else zero_dim).append(b.dtype(val))
        elif isinstance(a, (bool, int, float)):
            scalars.append(dtypes.scalar_dtype(a))
    return dtypes.result_type(tensors, zero_dim, scalars)


def binary(b: Builder, node: Node, fn: str, x_arg: object, y_arg: object, compute: str | None = None) -> Operand:
    """Emit ``fn(x, y)`` computed in ``compute`` (default: the promoted dtype), cast to the node's dtype."""
    out = node.meta
    compute = compute or promoted_dtype(b, x_arg, y_arg)
    if (
        fn in ("mul", "div")
        and compute in _HALF
        and any(_is_number(a) and not _rounds_exactly(a, compute) for a in (x_arg, y_arg))
    ):
        # PyTorch multiplies/divides a half tensor by a Python number in float32, never rounding
        # the number to half first (x * 1e5 in f16 is inf, not NaN, where x == 0).
        compute = "f32"
    x = operand_as(b, x_arg, compute)
    y = operand_as(b, y_arg, compute)
    result_dtype = "bool" if fn in _PREDICATES else compute
    r = b.emit(Binary(fn, x, y), out.shape, result_dtype)
    return b.cast(r, out.dtype)


_PREDICATES = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}

# aten base name → Binary fn. Each takes (self, other) in args 0 and 1.
_BINARY = {
    "mul": "mul", "maximum": "maximum", "minimum": "minimum", "fmax": "fmax", "fmin": "fmin",
    "remainder": "remainder", "fmod": "fmod", "floor_divide": "floor_divide",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "__and__": "bitwise_and", "__or__": "bitwise_or", "__xor__": "bitwise_xor",
}  # fmt: skip


def _simple_binary(fn: str):  # noqa: ANN202 - a tiny closure factory
    def handler(node: Node, b: Builder) -> Operand:
        return binary(b, node, fn, node.arg(0), node.arg(1))

    return handler


for _base, _fn in _BINARY.items():
    lowers(f"aten.{_base}")(_simple_binary(_fn))


@lowers("aten.atan2")
def atan2(node: Node, b: Builder) -> Operand:
    # Integer and bool inputs give a float result: the math happens in the output dtype.
    return binary(b, node, "atan2", node.arg(0), node.arg(1), compute=node.meta.dtype)


@lowers("aten.logical_and", "aten.logical_or", "aten.logical_xor")
def logical(node: Node, b: Builder) -> Operand:
    # logical ops look only at truthiness: compute on bools, whatever the input dtypes.
    return binary(b, node, node.base, node.arg(0), node.arg(1), compute="bool")


@lowers("aten.add", "aten.sub", "aten.rsub")
def add_sub(node: Node, b: Builder) -> Operand:
    x_arg, y_arg = node.arg(0), node.arg(1)
    if node.base == "rsub":
        x_arg, y_arg = y_arg, x_arg
    alpha = node.arg(2, "alpha", 1)
    compute = promoted_dtype(b, x_arg, y_arg)
    x = operand_as(b, x_arg, compute)
    y = operand_as(b, y_arg, compute)
    if alpha != 1:
        y = b.emit(Binary("mul", y, b.lit(scalar_as(alpha, compute), compute)), b.shape(y), compute)
    fn = "add" if node.base == "add" else "sub"
    return b.cast(b.emit(Binary(fn, x, y), node.meta.shape, compute), node.meta.dtype)


@lowers("aten.div")
def div(node: Node, b: Builder) -> Operand:
    mode = node.arg(2, "rounding_mode")
    x, y = node.arg(0), node.arg(1)
    if mode is None:  # true division always happens in floating point
        return binary(b, node, "div", x, y, compute=node.meta.dtype)
    fn = {"floor": "floor_divide", "trunc": "trunc_divide"}.get(mode)
    if fn is None:
        raise LoweringError(f"node {node.id}: unknown rounding_mode {mode!r}")
    return binary(b, node, fn, x, y)


@lowers("aten.true_divide")
def true_divide(node: Node, b: Builder) -> Operand:
    return binary(b, node, "div", node.arg(0), node.arg(1), compute=node.meta.dtype)


# PyTorch's CPU pow with a Python-number exponent takes these shortcuts for every floating dtype
# but float16 (which calls std::pow): they differ from pow on -0 and -inf.
_POW_SHORTCUTS = {0.5: "sqrt", -0.5: "rsqrt"}


@lowers("aten.pow")
def pow_(node: Node, b: Builder) -> Operand:
    out = node.meta
    base, exponent = node.arg(0), node.arg(1)  # pow.Scalar(self: Scalar, exponent: Tensor) too
    if _is_number(exponent) and exponent == 2:
        x = operand_as(b, base, out.dtype)
        return b.emit(Unary("square", x), out.shape, out.dtype)
    if _is_number(exponent) and exponent in _POW_SHORTCUTS and out.dtype in ("f32", "f64", "bf16"):
        x = operand_as(b, base, out.dtype)
        return b.emit(Unary(_POW_SHORTCUTS[exponent], x), out.shape, out.dtype)
    if _is_number(exponent) and exponent in (3, -2) and out.dtype in ("f32", "f64", "bf16"):
        # PyTorch multiplies these out (x*x*x, 1/(x*x)), rounding after each step; also far
        # cheaper than pow (GPT-2's GELU cubes every activation).
        x = operand_as(b, base, out.dtype)
        square = b.emit(Binary("mul", x, x), out.shape, out.dtype)
        if exponent == 3:
            return b.emit(Binary("mul", square, x), out.shape, out.dtype)
        return b.emit(Unary("reciprocal", square), out.shape, out.dtype)
    return binary(b, node, "pow", base, exponent, compute=out.dtype)


# ── unary ────────────────────────────────────────────────────────────────────
def unary(b: Builder, node: Node, fn: str, x_arg: object) -> Operand:
    """Emit ``fn(x)``. Math runs in the output dtype (int → float for ``exp`` etc.), except
    predicates (``isnan`` …), which read the input in its own dtype."""
    out = node.meta
    x = b.operand(x_arg, None)
    # A complex input to a real result (abs) is read as it is: a cast first would drop the imaginary part.
    keep = out.dtype == "bool" or (dtypes.is_complex(b.dtype(x)) and not dtypes.is_complex(out.dtype))
    compute = b.dtype(x) if keep else out.dtype
    return b.emit(Unary(fn, b.cast(x, compute)), out.shape, out.dtype)


_UNARY = {
    "neg": "neg", "abs": "abs", "exp": "exp", "expm1": "expm1", "exp2": "exp2", "log": "log",
    "log1p": "log1p", "log2": "log2", "log10": "log10", "sqrt": "sqrt", "rsqrt": "rsqrt",
    "reciprocal": "reciprocal", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin",
    "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "asinh",
    "acosh": "acosh", "atanh": "atanh", "sigmoid": "sigmoid", "relu": "relu", "silu": "silu",
    "erf": "erf", "floor": "floor", "ceil": "ceil", "trunc": "trunc", "fix": "trunc", "sign": "sign",
    "sgn": "sign", "logical_not": "logical_not", "isnan": "isnan", "isinf": "isinf",
    "isfinite": "isfinite", "square": "square", "hardsigmoid": "hardsigmoid",
    "hardswish": "hardswish", "mish": "mish", "relu6": "relu6", "selu": "selu",
    "positive": "identity",
}  # fmt: skip


def _simple_unary(fn: str):  # noqa: ANN202
    def handler(node: Node, b: Builder) -> Operand:
        return unary(b, node, fn, node.arg(0))

    return handler


for _base, _fn in _UNARY.items():
    lowers(f"aten.{_base}")(_simple_unary(_fn))


@lowers("aten.bitwise_not")
def bitwise_not(node: Node, b: Builder) -> Operand:
    return unary(b, node, "logical_not" if node.meta.dtype == "bool" else "bitwise_not", node.arg(0))


class _Float:
    """Builds a small float computation on one tensor: half precision works in float32 and is
    rounded once at the end, as PyTorch's CPU kernels do."""

    def __init__(self, b: Builder, node: Node) -> None:
        self.b, self.out = b, node.meta
        self.dtype = "f32" if self.out.dtype in _HALF else self.out.dtype
        self.shape = self.out.shape

    def input(self, arg: object) -> Operand:
        return operand_as(self.b, arg, self.dtype)

    def unary(self, fn: str, x: Operand) -> Ref:
        return self.b.emit(Unary(fn, x), self.shape, self.dtype)

    def binary(self, fn: str, x: Operand, y: float) -> Ref:
        """``fn(x, y)`` with a number ``y``; predicates give bools."""
        dtype = "bool" if fn in _PREDICATES else self.dtype
        return self.b.emit(Binary(fn, x, self.b.lit(y, self.dtype)), self.shape, dtype)

    def where(self, cond: Operand, x: Operand, y: Operand) -> Ref:
        return self.b.emit(Where(cond, x, y), self.shape, self.dtype)

    def result(self, r: Operand) -> Operand:
        return self.b.cast(r, self.out.dtype)


@lowers("aten.round")
def round_(node: Node, b: Builder) -> Operand:
    decimals = node.arg(1, "decimals", 0)
    if decimals == 0 or not dtypes.is_float(node.meta.dtype):
        return unary(b, node, "round", node.arg(0))
    # PyTorch: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for negative d.
    f = _Float(b, node)
    scale, (there, back) = float(10 ** abs(decimals)), (("mul", "div") if decimals > 0 else ("div", "mul"))
    return f.result(f.binary(back, f.unary("round", f.binary(there, f.input(node.arg(0)), scale)), scale))


@lowers("aten.gelu")
def gelu(node: Node, b: Builder) -> Operand:
    approximate = node.arg(1, "approximate", "none")
    return unary(b, node, "gelu_tanh" if approximate == "tanh" else "gelu", node.arg(0))


@lowers("aten.leaky_relu")
def leaky_relu(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    return b.emit_like(LeakyRelu(x, float(node.arg(1, "negative_slope", 0.01))), node.meta)


_SELU = (1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1)


@lowers("aten.elu", "aten.celu")
def elu(node: Node, b: Builder) -> Operand:
    if node.base == "celu":  # celu(x, α) = elu(x, α, scale=1, input_scale=1/α)
        alpha = node.arg(1, "alpha", 1.0)
        scale, input_scale = 1, 1 / alpha
    else:
        alpha, scale, input_scale = node.arg(1, "alpha", 1), node.arg(2, "scale", 1), node.arg(3, "input_scale", 1)
    if (alpha, scale, input_scale) == (1, 1, 1):
        return unary(b, node, "elu", node.arg(0))
    if (alpha, scale, input_scale) == _SELU:  # what selu decomposes to
        return unary(b, node, "selu", node.arg(0))
    # PyTorch: x > 0 ? scale·x : scale·α·(exp(input_scale·x) − 1)
    f = _Float(b, node)
    x = f.input(node.arg(0))
    negative = f.binary("mul", f.unary("expm1", f.binary("mul", x, float(input_scale))), float(alpha * scale))
    return f.result(f.where(f.binary("gt", x, 0.0), f.binary("mul", x, float(scale)), negative))


@lowers("aten.softplus")
def softplus(node: Node, b: Builder) -> Operand:
    beta, threshold = node.arg(1, "beta", 1), node.arg(2, "threshold", 20)
    if (beta, threshold) == (1, 20):
        return unary(b, node, "softplus", node.arg(0))
    # PyTorch: β·x > threshold ? x : log1p(exp(β·x)) / β
    f = _Float(b, node)
    x = f.input(node.arg(0))
    bx = f.binary("mul", x, float(beta))
    soft = f.binary("div", f.unary("log1p", f.unary("exp", bx)), float(beta))
    return f.result(f.where(f.binary("gt", bx, float(threshold)), x, soft))


@lowers("aten.clamp", "aten.clip", "aten.clamp_min", "aten.clamp_max", "aten.hardtanh")
def clamp(node: Node, b: Builder) -> Operand:
    out = node.meta
    if node.base == "hardtanh":
        lo_arg, hi_arg = node.arg(1, "min_val", -1.0), node.arg(2, "max_val", 1.0)
    elif node.base == "clamp_min":
        lo_arg, hi_arg = node.arg(1, "min"), None
    elif node.base == "clamp_max":
        lo_arg, hi_arg = None, node.arg(1, "max")
    else:
        lo_arg, hi_arg = node.arg(1, "min"), node.arg(2, "max")
    compute = out.dtype
    x = operand_as(b, node.arg(0), compute)
    lo = None if lo_arg is None else operand_as(b, lo_arg, compute)
    hi = None if hi_arg is None else operand_as(b, hi_arg, compute)
    return b.emit_like(Clamp(x, lo, hi), out)


@lowers("aten.where")
def where(node: Node, b: Builder) -> Operand:
    out = node.meta
    if node.overload not in ("self", "ScalarSelf", "ScalarOther", "Scalar", ""):
        raise LoweringError(f"node {node.id}: where with only a condition has a data-dependent shape")
    cond = b.cast(b.input(node, 0), "bool")
    x = operand_as(b, node.arg(1), out.dtype)
    y = operand_as(b, node.arg(2), out.dtype)
    return b.emit_like(Where(cond, x, y), out)


@lowers("aten.masked_fill")
def masked_fill(node: Node, b: Builder) -> Operand:
    # A select, never arithmetic: fill values of ±inf (attention masks) must stay exact.
    out = node.meta
    x = b.input(node, 0)
    mask = b.cast(b.input(node, 1), "bool")
    value = operand_as(b, node.arg(2), out.dtype)
    return b.emit_like(Where(mask, value, x), out)


@lowers(
    "aten._to_copy", "aten.to", "aten._to_dtype", "aten.type_as", "aten._to_dtype_layout", "prims.convert_element_type"
)
def to_dtype(node: Node, b: Builder) -> Operand:
    # Devices, layouts and memory formats mean nothing here; only the dtype change matters.
    return b.cast(b.input(node, 0), node.meta.dtype)


@lowers(
    "aten.clone",
    "aten.contiguous",
    "aten.detach",
    "aten.detach_",
    "aten.alias",
    "aten.lift_fresh_copy",
    "aten.lift_fresh",
)
def identity(node: Node, b: Builder) -> Operand:
    # detach_ shows up at the aten level after lift_fresh_copy, for tensors built in forward().
    return b.input(node, 0)


# ── math on floats' bits, integers' divisors, and complex numbers ───────────
@lowers("aten.copysign", "aten.hypot", "aten.nextafter")
def float_binary(node: Node, b: Builder) -> Operand:
    # Integer and bool inputs give a float result (copysign): the math happens in the output dtype.
    return binary(b, node, node.base, node.arg(0), node.arg(1), compute=node.meta.dtype)


@lowers("aten.gcd", "aten.lcm")
def divisors(node: Node, b: Builder) -> Operand:
    return binary(b, node, node.base, node.arg(0), node.arg(1))


_SHIFTS = {
    "bitwise_left_shift": "left_shift", "__lshift__": "left_shift",
    "bitwise_right_shift": "right_shift", "__rshift__": "right_shift",
}  # fmt: skip


@lowers(*(f"aten.{name}" for name in _SHIFTS))
def shift(node: Node, b: Builder) -> Operand:
    compute = promoted_dtype(b, node.arg(0), node.arg(1))
    if not dtypes.is_int(compute):
        raise LoweringError(f"node {node.id}: {node.base} of {compute} values; rlx shifts integers only")
    return binary(b, node, _SHIFTS[node.base], node.arg(0), node.arg(1), compute=compute)


@lowers("aten.signbit")
def signbit(node: Node, b: Builder) -> Operand:
    return unary(b, node, "signbit", node.arg(0))


@lowers("aten.angle")
def angle(node: Node, b: Builder) -> Operand:
    """π below 0 and 0 elsewhere for real numbers (integers promoted to float); the argument of a complex one."""
    out = node.meta
    x = b.operand(node.arg(0), None)
    if not dtypes.is_complex(b.dtype(x)):
        x = b.cast(x, out.dtype)
    return b.emit(Unary("angle", x), out.shape, out.dtype)


@lowers("aten.frexp")
def frexp(node: Node, b: Builder) -> tuple[Operand, Operand]:
    """(mantissa in [0.5, 1) with x's sign, int32 exponent): x = mantissa · 2^exponent."""
    x = b.input(node, 0)
    mantissa, exponent = node.meta_at(0), node.meta_at(1)
    return (
        b.emit(Unary("frexp_mantissa", x), mantissa.shape, mantissa.dtype),
        b.emit(Unary("frexp_exponent", x), exponent.shape, exponent.dtype),
    )


@lowers("aten.complex")
def complex_(node: Node, b: Builder) -> Operand:
    out = node.meta
    part = dtypes.real_of(out.dtype)
    return b.emit(
        Binary("complex", b.cast(b.input(node, 0), part), b.cast(b.input(node, 1), part)), out.shape, out.dtype
    )


@lowers("aten.polar")
def polar(node: Node, b: Builder) -> Operand:
    """abs·cos(angle) + i·abs·sin(angle), as PyTorch computes it (inf · 0 gives NaN there too)."""
    out = node.meta
    part = dtypes.real_of(out.dtype)
    r, theta = b.cast(b.input(node, 0), part), b.cast(b.input(node, 1), part)
    parts = [
        b.emit(Binary("mul", r, b.emit(Unary(fn, theta), b.shape(theta), part)), out.shape, part)
        for fn in ("cos", "sin")
    ]
    return b.emit(Binary("complex", *parts), out.shape, out.dtype)


@lowers("aten.view_as_complex")
def view_as_complex(node: Node, b: Builder) -> Operand:
    """``x[..., 0] + i·x[..., 1]`` of a float tensor whose last axis has 2 entries."""
    out = node.meta
    x = b.input(node, 0)
    axis = b.rank(x) - 1
    part = b.dtype(x)
    re, im = (
        b.emit(Reshape(b.emit(Slice(x, axis, k, k + 1, 1), (*out.shape, 1), part), tuple(out.shape)), out.shape, part)
        for k in (0, 1)
    )
    return b.emit(Binary("complex", re, im), out.shape, out.dtype)


@lowers("aten.view_as_real")
def view_as_real(node: Node, b: Builder) -> Operand:
    """A complex tensor as floats with a trailing (real, imag) axis."""
    out = node.meta
    z = b.input(node, 0)
    shape = (*b.shape(z), 1)
    parts = [
        b.emit(Reshape(b.emit(Unary(fn, z), b.shape(z), out.dtype), shape), shape, out.dtype) for fn in ("real", "imag")
    ]
    return b.emit(Concat(tuple(parts), len(shape) - 1), out.shape, out.dtype)


@lowers("aten.real", "aten.imag")
def real_imag(node: Node, b: Builder) -> Operand:
    out = node.meta
    z = b.input(node, 0)
    if not dtypes.is_complex(b.dtype(z)):  # real of a real tensor is itself (imag of one is an error in PyTorch)
        return z
    return b.emit(Unary(node.base, z), out.shape, out.dtype)
