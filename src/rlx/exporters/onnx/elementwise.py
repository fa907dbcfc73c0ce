"""Elementwise Calls: Unary, Binary, Where, Clamp, LeakyRelu, Cast.

ONNX's operators differ from PyTorch's at the edges, so each function is spelled so that it gives
PyTorch's values: integer floor division and remainder take the divisor's sign, float ``//`` and
``%`` follow numpy's (= PyTorch's) fmod-based rounding, maximum/minimum/clamp propagate NaN, sign
of NaN is 0, expm1/log1p keep their precision near 0, and integer pow follows PyTorch's rule for
negative exponents. Half-precision floats compute in float32 and round once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlx.exporters.onnx.registry import (
    HALF,
    ONNX_TYPES,
    EmitError,
    OnnxGraph,
    T,
    emits,
    emits_functions,
    no_function_form,
)
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr, Lit, Ref

Fn = Callable[[OnnxGraph, T], T]
Fn2 = Callable[[OnnxGraph, T, T], T]


def _is_float(x: T) -> bool:
    return dtypes.is_float(x.dtype)


def _op(g: OnnxGraph, op: str, *xs: T, dtype: str | None = None, **attrs: Any) -> T:
    return g.op(op, list(xs), dtype or xs[0].dtype, **attrs)


def _k(g: OnnxGraph, value: float, like: T) -> T:
    return g.const(value, like.dtype)


def _where(g: OnnxGraph, cond: T, a: T, b: T) -> T:
    return g.op("Where", [cond, a, b], a.dtype)


def _bool(g: OnnxGraph, op: str, *xs: T) -> T:
    return g.op(op, list(xs), "bool")


# ── unary ────────────────────────────────────────────────────────────────────
def _expm1(g: OnnxGraph, x: T) -> T:
    # Kahan's trick: (e^x − 1)·x / log(e^x) keeps full precision near 0, where exp(x) − 1 loses it.
    u = _op(g, "Exp", x)
    um1 = _op(g, "Sub", u, _k(g, 1, x))
    kahan = _op(g, "Div", _op(g, "Mul", um1, x), _op(g, "Log", u))
    out = _where(g, _bool(g, "Equal", um1, _k(g, -1, x)), _k(g, -1, x), kahan)
    out = _where(g, _bool(g, "IsInf", u), u, out)
    return _where(g, _bool(g, "Equal", u, _k(g, 1, x)), x, out)


def _log1p(g: OnnxGraph, x: T) -> T:
    # log(u)·x / (u − 1) with u = 1 + x: exact where 1 + x rounds (Goldberg), x itself where u == 1.
    # u is x + ½ + ½: OpenVINO fuses log(exp(y) + 1) into its own SoftPlus, 7× off near y = −16
    # (softplus, mish and logsigmoid write that), and does not recognise it added in halves.
    u = _op(g, "Add", _op(g, "Add", x, _k(g, 0.5, x)), _k(g, 0.5, x))
    ratio = _op(g, "Div", _op(g, "Mul", _op(g, "Log", u), x), _op(g, "Sub", u, _k(g, 1, x)))
    out = _where(g, _bool(g, "IsInf", x), _op(g, "Log", u), ratio)
    return _where(g, _bool(g, "Equal", u, _k(g, 1, x)), x, out)


def _trunc(g: OnnxGraph, x: T) -> T:
    return _where(g, _bool(g, "Less", x, _k(g, 0, x)), _op(g, "Ceil", x), _op(g, "Floor", x))


def _sign(g: OnnxGraph, x: T) -> T:
    if x.dtype == "bool":
        return x
    pos = g.cast(_bool(g, "Greater", x, _k(g, 0, x)), x.dtype)
    neg = g.cast(_bool(g, "Less", x, _k(g, 0, x)), x.dtype)
    return _op(g, "Sub", pos, neg)  # NaN → 0, as (0 < x) − (x < 0) gives in PyTorch


def _softplus(g: OnnxGraph, x: T) -> T:
    small = _log1p(g, _op(g, "Exp", _op(g, "Min", x, _k(g, 20, x))))
    return _where(g, _bool(g, "Greater", x, _k(g, 20, x)), x, small)


def _hard(g: OnnxGraph, x: T) -> T:
    return _op(g, "Min", _op(g, "Max", _op(g, "Add", x, _k(g, 3, x)), _k(g, 0, x)), _k(g, 6, x))


def _hardswish(g: OnnxGraph, x: T) -> T:
    # (onnxruntime fuses HardSwish into the convolution before it, in its blocked layout; the
    # spelled-out form leaves that layout for four elementwise nodes. Its NaN stays NaN: x is a factor.)
    if x.dtype == "f32":
        return _op(g, "HardSwish", x)
    return _op(g, "Div", _op(g, "Mul", x, _hard(g, x)), _k(g, 6, x))


def _elu_neg(g: OnnxGraph, x: T) -> T:
    return _expm1(g, _op(g, "Min", x, _k(g, 0, x)))


def _isnan(g: OnnxGraph, x: T) -> T:
    return _bool(g, "IsNaN", x) if _is_float(x) else _not_const(g, x, False)


def _not_const(g: OnnxGraph, x: T, value: bool) -> T:
    # A predicate that is constant for integer and bool inputs, with x's shape.
    wide = g.cast(x, "i32")
    eq = _bool(g, "Equal", wide, wide)
    return eq if value else _bool(g, "Not", eq)


def _isinf(g: OnnxGraph, x: T) -> T:
    return _bool(g, "IsInf", x) if _is_float(x) else _not_const(g, x, False)


def _isfinite(g: OnnxGraph, x: T) -> T:
    if not _is_float(x):
        return _not_const(g, x, True)
    return _bool(g, "Not", _bool(g, "Or", _bool(g, "IsNaN", x), _bool(g, "IsInf", x)))


# onnxruntime's Relu, Max, Min and Clip propagate NaN (from either side), as PyTorch's do
# (tests/runtime/test_ort_engine.py holds them to it on inputs with NaN planted in them).
def _relu(g: OnnxGraph, x: T) -> T:
    return _op(g, "Relu", x) if _is_float(x) else _op(g, "Max", x, _k(g, 0, x))


def _neg(g: OnnxGraph, x: T) -> T:
    if x.dtype in ("u8", "bool"):
        return _op(g, "Sub", _k(g, 0, x), x)
    return _op(g, "Neg", x)


def _abs(g: OnnxGraph, x: T) -> T:
    return x if x.dtype == "bool" else _op(g, "Abs", x)


def _bitwise_not(g: OnnxGraph, x: T) -> T:
    return _op(g, "Not", x) if x.dtype == "bool" else _op(g, "BitwiseNot", x)


def _angle(g: OnnxGraph, x: T) -> T:
    """The angle of a real number: π below 0, else 0 (−0 included); NaN stays NaN."""
    positive = _where(g, _bool(g, "Less", x, _k(g, 0, x)), _k(g, math.pi, x), _k(g, 0, x))
    return _where(g, _bool(g, "IsNaN", x), x, positive)


def _recip(g: OnnxGraph, x: T) -> T:
    return _op(g, "Div", _k(g, 1, x), x)


def _sigmoid(g: OnnxGraph, x: T) -> T:
    return _op(g, "Sigmoid", x)


UNARY: dict[str, Fn] = {
    "neg": _neg,
    "abs": _abs,
    "exp": lambda g, x: _op(g, "Exp", x),
    "expm1": _expm1,
    "exp2": lambda g, x: _op(g, "Pow", _k(g, 2, x), x),
    "log": lambda g, x: _op(g, "Log", x),
    "log1p": _log1p,
    "log2": lambda g, x: _op(g, "Div", _op(g, "Log", x), _k(g, math.log(2), x)),
    "log10": lambda g, x: _op(g, "Div", _op(g, "Log", x), _k(g, math.log(10), x)),
    "sqrt": lambda g, x: _op(g, "Sqrt", x),
    "rsqrt": lambda g, x: _recip(g, _op(g, "Sqrt", x)),
    "reciprocal": _recip,
    **{n: (lambda op: lambda g, x: _op(g, op, x))(n.capitalize()) for n in ("sin", "cos", "tan", "sinh", "cosh")},
    **{n: (lambda op: lambda g, x: _op(g, op, x))(n.capitalize()) for n in ("asin", "acos", "atan")},
    **{n: (lambda op: lambda g, x: _op(g, op, x))(n.capitalize()) for n in ("asinh", "acosh", "atanh", "tanh")},
    "sigmoid": _sigmoid,
    "silu": lambda g, x: _op(g, "Mul", x, _sigmoid(g, x)),
    "relu": _relu,
    "relu6": lambda g, x: _op(g, "Clip", x, _k(g, 0, x), _k(g, 6, x)),
    "hardsigmoid": lambda g, x: _op(g, "Div", _hard(g, x), _k(g, 6, x)),
    "hardswish": _hardswish,
    "elu": lambda g, x: _where(g, _bool(g, "Greater", x, _k(g, 0, x)), x, _elu_neg(g, x)),
    "selu": lambda g, x: _op(
        g,
        "Mul",
        _k(g, 1.0507009873554805, x),
        _where(g, _bool(g, "Greater", x, _k(g, 0, x)), x, _op(g, "Mul", _k(g, 1.6732632423543772, x), _elu_neg(g, x))),
    ),
    "softplus": _softplus,
    "mish": lambda g, x: _op(g, "Mul", x, _op(g, "Tanh", _softplus(g, x))),
    "gelu": lambda g, x: _op(g, "Gelu", x, approximate="none"),
    "gelu_tanh": lambda g, x: _op(g, "Gelu", x, approximate="tanh"),
    "erf": lambda g, x: _op(g, "Erf", x),
    "floor": lambda g, x: _op(g, "Floor", x) if _is_float(x) else x,
    "ceil": lambda g, x: _op(g, "Ceil", x) if _is_float(x) else x,
    "round": lambda g, x: _op(g, "Round", x) if _is_float(x) else x,  # half to even, as torch.round
    "trunc": lambda g, x: _trunc(g, x) if _is_float(x) else x,
    "sign": _sign,
    "logical_not": lambda g, x: _bool(g, "Not", g.cast(x, "bool")),
    "bitwise_not": _bitwise_not,
    "isnan": _isnan,
    "isinf": _isinf,
    "isfinite": _isfinite,
    "identity": lambda g, x: _op(g, "Identity", x),
    # Pow(x, 2) is x·x in onnxruntime, and the spelling its RMSNorm fusion looks for.
    "square": lambda g, x: _op(g, "Pow", x, _k(g, 2, x)) if _is_float(x) else _op(g, "Mul", x, x),
    "angle": _angle,
}

# Functions onnxruntime's CPU kernels compute in float32 only: float64 goes through float32 there
# (a documented precision limit of onnxruntime for these transcendental functions).
F32_ONLY = {"tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "gelu", "gelu_tanh"}
# Functions whose result is exact in the operand's own dtype (no widening of half precision).
EXACT = {"neg", "abs", "sign", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite", "identity"}


@emits(C.Unary)
def unary(g: OnnxGraph, c: C.Unary, out: Instr, x: T) -> T:
    fn = UNARY.get(c.fn)
    if fn is None:
        raise no_function_form(C.Unary, c.fn)
    if c.fn in EXACT and x.dtype not in HALF:
        return fn(g, x)
    if x.dtype in HALF or (x.dtype == "f64" and c.fn in F32_ONLY):
        return g.cast(fn(g, g.cast(x, "f32")), x.dtype)
    if not _is_float(x) and c.fn not in ("square", "floor", "ceil", "round", "trunc", "relu"):
        return fn(g, g.cast(x, out.dtype if dtypes.is_float(out.dtype) else "f32"))
    return fn(g, x)


# ── binary ───────────────────────────────────────────────────────────────────
def _fmod(g: OnnxGraph, x: T, y: T) -> T:
    m = _op(g, "Mod", x, y, fmod=1)  # C's fmod: the dividend's sign (integers and floats)
    if g.options.fmod_by_infinity or not _is_float(x):
        return m
    finite_by_infinity = _bool(g, "And", _bool(g, "IsInf", y), _bool(g, "Not", _bool(g, "IsInf", x)))
    return _where(g, finite_by_infinity, x, m)


def _float_mod(g: OnnxGraph, x: T, y: T) -> T:
    """numpy's / PyTorch's float remainder: fmod, moved by y where the signs differ."""
    m = _fmod(g, x, y)
    zero = _k(g, 0, x)
    differ = _bool(g, "Xor", _bool(g, "Less", m, zero), _bool(g, "Less", y, zero))
    move = _bool(g, "And", _bool(g, "Not", _bool(g, "Equal", m, zero)), differ)
    return _where(g, move, _op(g, "Add", m, y), m)


def _remainder(g: OnnxGraph, x: T, y: T) -> T:
    return _float_mod(g, x, y) if _is_float(x) else _op(g, "Mod", x, y, fmod=0)


def _floor_divide(g: OnnxGraph, x: T, y: T) -> T:
    if not _is_float(x):
        # Python's remainder makes x − r an exact multiple of y: the division is exact.
        return _op(g, "Div", _op(g, "Sub", x, _op(g, "Mod", x, y, fmod=0)), y)
    # numpy's npy_divmod (what PyTorch's div(rounding_mode='floor') computes on CPU).
    zero = _k(g, 0, x)
    m = _fmod(g, x, y)
    div = _op(g, "Div", _op(g, "Sub", x, m), y)
    differ = _bool(g, "Xor", _bool(g, "Less", m, zero), _bool(g, "Less", y, zero))
    shift = _bool(g, "And", _bool(g, "Not", _bool(g, "Equal", m, zero)), differ)
    div = _where(g, shift, _op(g, "Sub", div, _k(g, 1, x)), div)
    floor = _op(g, "Floor", div)
    floor = _where(
        g, _bool(g, "Greater", _op(g, "Sub", div, floor), _k(g, 0.5, x)), _op(g, "Add", floor, _k(g, 1, x)), floor
    )
    quotient = _op(g, "Div", x, y)
    signed_zero = _op(g, "Mul", zero, quotient)  # ±0 with the sign of x / y
    floor = _where(g, _bool(g, "Equal", div, zero), signed_zero, floor)
    return _where(g, _bool(g, "Equal", y, zero), quotient, floor)


def trunc_divide(g: OnnxGraph, x: T, y: T) -> T:
    """PyTorch's division rounded toward zero; for integers without an inexact ONNX Div (whose
    rounding ONNX leaves open: OpenVINO rounds to nearest, onnxruntime truncates)."""
    if _is_float(x):
        return _trunc(g, _op(g, "Div", x, y))
    q = _floor_divide(g, x, y)
    inexact = _bool(g, "Not", _bool(g, "Equal", _op(g, "Mul", q, y), x))
    bump = _bool(g, "And", _bool(g, "Less", q, _k(g, 0, x)), inexact)
    return _where(g, bump, _op(g, "Add", q, _k(g, 1, x)), q)


def _pow(g: OnnxGraph, x: T, y: T) -> T:
    y = g.cast(y, x.dtype)
    if _is_float(x):
        return _op(g, "Pow", x, y)
    # PyTorch's integer pow: a negative exponent gives 0, except for bases 1 and -1.
    zero, one = _k(g, 0, x), _k(g, 1, x)
    negative = _bool(g, "Less", y, zero)
    power = _op(g, "Pow", x, _where(g, negative, zero, y))
    if x.dtype in ("i8", "i16", "u8"):  # onnxruntime's Pow has no 8/16-bit kernels
        power = g.cast(_op(g, "Pow", g.cast(x, "i32"), g.cast(_where(g, negative, zero, y), "i32")), x.dtype)
    even = _bool(g, "Equal", _op(g, "Mod", y, _k(g, 2, x), fmod=0), zero)
    minus_one_pow = _where(g, even, one, _k(g, -1 if x.dtype != "u8" else 1, x))
    at_negative = _where(
        g,
        _bool(g, "Equal", x, one),
        one,
        _where(g, _bool(g, "Equal", x, _k(g, -1 if x.dtype != "u8" else 1, x)), minus_one_pow, zero),
    )
    return _where(g, negative, at_negative, power)


def _extreme(op: str) -> Fn2:
    def run(g: OnnxGraph, x: T, y: T) -> T:
        if x.dtype == "bool":
            return _bool(g, "Or" if op == "Max" else "And", x, y)
        return _op(g, op, x, y)

    return run


def _fextreme(op: str) -> Fn2:
    def run(g: OnnxGraph, x: T, y: T) -> T:
        if not _is_float(x):
            return _extreme(op)(g, x, y)
        both = _op(g, op, x, y)
        return _where(g, _bool(g, "IsNaN", x), y, _where(g, _bool(g, "IsNaN", y), x, both))

    return run


def _atan2(g: OnnxGraph, y: T, x: T) -> T:
    """IEEE atan2(y, x) from Atan, with every signed-zero and infinite case of C's atan2."""
    zero, pi, half_pi = _k(g, 0, y), _k(g, math.pi, y), _k(g, math.pi / 2, y)
    one = _k(g, 1, y)
    # copysign(v, y): the sign of y including -0 (1/-0 = -inf).
    y_neg = _bool(g, "Less", _op(g, "Div", one, y), zero)
    y_neg = _bool(g, "Or", y_neg, _bool(g, "Less", y, zero))
    x_neg = _bool(g, "Or", _bool(g, "Less", _op(g, "Div", one, x), zero), _bool(g, "Less", x, zero))

    def copysign(v: T) -> T:
        return _where(g, y_neg, _op(g, "Neg", v), v)

    # (Atan is F32_ONLY: float64 goes through float32, onnxruntime has no float64 kernel for it.)
    base = g.cast(_op(g, "Atan", g.cast(_op(g, "Div", y, x), "f32")), y.dtype)
    general = _where(g, x_neg, _op(g, "Add", base, copysign(pi)), base)
    y_inf, x_inf = _bool(g, "IsInf", y), _bool(g, "IsInf", x)
    both_inf = copysign(_where(g, x_neg, _k(g, 3 * math.pi / 4, y), _k(g, math.pi / 4, y)))
    out = _where(g, _bool(g, "And", y_inf, x_inf), both_inf, general)
    out = _where(g, _bool(g, "And", y_inf, _bool(g, "Not", x_inf)), copysign(half_pi), out)
    x_inf_only = _bool(g, "And", x_inf, _bool(g, "Not", y_inf))
    out = _where(
        g, x_inf_only, _where(g, x_neg, copysign(pi), _op(g, "Mul", zero, _where(g, y_neg, _k(g, -1, y), one))), out
    )
    y_zero = _bool(g, "Equal", y, zero)
    at_zero = _where(g, x_neg, copysign(pi), y)  # y is ±0: atan2(±0, x ≥ +0) = ±0
    out = _where(g, _bool(g, "And", y_zero, _bool(g, "Not", _bool(g, "IsNaN", x))), at_zero, out)
    x_zero_only = _bool(g, "And", _bool(g, "Equal", x, zero), _bool(g, "Not", y_zero))
    out = _where(g, _bool(g, "And", x_zero_only, _bool(g, "Not", _bool(g, "IsNaN", y))), copysign(half_pi), out)
    out = _where(g, _bool(g, "Or", _bool(g, "IsNaN", x), _bool(g, "IsNaN", y)), _op(g, "Add", x, y), out)
    # The sign is y's, -0 included: set once at the end by a product, as onnxruntime's Where turns
    # a -0 it takes from its first choice into +0 (and its optimizer swaps the choices of a Not).
    return _op(g, "Mul", _op(g, "Abs", out), _where(g, y_neg, _k(g, -1, y), one))


def _compare(op: str, negate: bool = False) -> Fn2:
    def run(g: OnnxGraph, x: T, y: T) -> T:
        if x.dtype == "bool" and op != "Equal":  # order bools as 0 < 1
            x, y = g.cast(x, "i32"), g.cast(y, "i32")
        out = _bool(g, op, x, y)
        return _bool(g, "Not", out) if negate else out

    return run


def _logical(op: str) -> Fn2:
    return lambda g, x, y: _bool(g, op, g.cast(x, "bool"), g.cast(y, "bool"))


def _bitwise(op: str) -> Fn2:
    return lambda g, x, y: _bool(g, op, x, y) if x.dtype == "bool" else _op(g, "Bitwise" + op, x, y)


def _hypot(g: OnnxGraph, x: T, y: T) -> T:
    """C's hypot: +inf where either is infinite (a NaN beside it too), else NaN where either is NaN,
    else sqrt(x² + y²) without overflow or underflow: the larger magnitude times sqrt(1 + r²), r the
    ratio of the smaller to it, within two roundings of the exact value. (Not squared in float64:
    OpenVINO computes float64 in float32, where 1e30² overflows.)"""
    a, b = _op(g, "Abs", x), _op(g, "Abs", y)
    big, small = _op(g, "Max", a, b), _op(g, "Min", a, b)
    zero, one = _k(g, 0, big), _k(g, 1, big)
    ratio = _op(g, "Div", small, _where(g, _bool(g, "Equal", big, zero), one, big))
    r = _op(g, "Mul", big, _op(g, "Sqrt", _op(g, "Add", one, _op(g, "Mul", ratio, ratio))))
    r = _where(g, _bool(g, "Or", _bool(g, "IsNaN", x), _bool(g, "IsNaN", y)), _k(g, math.nan, r), r)
    return _where(g, _bool(g, "Or", _bool(g, "IsInf", x), _bool(g, "IsInf", y)), _k(g, math.inf, r), r)


def _bits(x: T) -> int:
    return 8 * dtypes.to_numpy(x.dtype).itemsize


def _unsigned(g: OnnxGraph, x: T) -> T:
    """``x``'s bits as the unsigned type of its width (ONNX's BitShift takes unsigned types only)."""
    return x if x.dtype.startswith("u") else g.cast(x, f"u{_bits(x)}")


def _bit_shift(g: OnnxGraph, x: T, y: T, direction: str, scalar: bool) -> T:
    """ONNX's BitShift of unsigned ``x`` by ``y``; a ``scalar`` shift (0-d operands) stays 0-d
    (OpenVINO's reader builds it as a product with a [1]-shaped power of two: it came back [1])."""
    shifted = g.op("BitShift", [x, y], x.dtype, direction=direction)
    return g.op("Squeeze", [shifted], x.dtype) if scalar else shifted


def _scalar(*xs: T) -> bool:
    return all(x.shape == () for x in xs)


def _left_shift(g: OnnxGraph, x: T, y: T) -> T:
    """PyTorch's ``x << y``: the bits shifted in the unsigned type of x's width (the same bits as
    signed wrap-around), and 0 where y is negative or reaches the width (C leaves both undefined)."""
    zero = _k(g, 0, y)
    ok = _bool(g, "And", _bool(g, "GreaterOrEqual", y, zero), _bool(g, "Less", y, _k(g, _bits(x), y)))
    shifted = _bit_shift(g, _unsigned(g, x), _unsigned(g, _where(g, ok, y, zero)), "LEFT", _scalar(x, y))
    return _where(g, ok, g.cast(shifted, x.dtype), _k(g, 0, x))


def _right_shift(g: OnnxGraph, x: T, y: T) -> T:
    """PyTorch's ``x >> y``: arithmetic for signed x (a negative x is shifted as its complement
    ~x ≥ 0, whose logical and arithmetic shifts agree, and complemented back); past the width, or
    for a negative y, a signed x keeps only its sign (as a shift by width − 1 does) and an unsigned
    one becomes 0."""
    bits = _bits(x)
    if x.dtype.startswith("u"):
        ok = _bool(g, "Less", y, _k(g, bits, y))
        shifted = _bit_shift(g, x, _where(g, ok, y, _k(g, 0, y)), "RIGHT", _scalar(x, y))
        return _where(g, ok, shifted, _k(g, 0, x))
    top = _k(g, bits - 1, y)
    amount = _where(g, _bool(g, "Less", y, _k(g, 0, y)), top, _op(g, "Min", y, top))
    negative = _bool(g, "Less", x, _k(g, 0, x))
    magnitude = _where(g, negative, _op(g, "BitwiseNot", x), x)
    shifted = g.cast(_bit_shift(g, _unsigned(g, magnitude), _unsigned(g, amount), "RIGHT", _scalar(x, y)), x.dtype)
    return _where(g, negative, _op(g, "BitwiseNot", shifted), shifted)


BINARY: dict[str, Fn2] = {
    "add": lambda g, x, y: _op(g, "Add", x, y) if x.dtype != "bool" else _bool(g, "Or", x, y),
    "sub": lambda g, x, y: _op(g, "Sub", x, y),
    "mul": lambda g, x, y: _op(g, "Mul", x, y) if x.dtype != "bool" else _bool(g, "And", x, y),
    "div": lambda g, x, y: _op(g, "Div", x, y),
    "floor_divide": _floor_divide,
    "trunc_divide": trunc_divide,
    "remainder": _remainder,
    "fmod": _fmod,
    "pow": _pow,
    "maximum": _extreme("Max"),
    "minimum": _extreme("Min"),
    "fmax": _fextreme("Max"),
    "fmin": _fextreme("Min"),
    "atan2": _atan2,
    "eq": _compare("Equal"),
    "ne": _compare("Equal", negate=True),
    "lt": _compare("Less"),
    "le": _compare("LessOrEqual"),
    "gt": _compare("Greater"),
    "ge": _compare("GreaterOrEqual"),
    "logical_and": _logical("And"),
    "logical_or": _logical("Or"),
    "logical_xor": _logical("Xor"),
    "bitwise_and": _bitwise("And"),
    "bitwise_or": _bitwise("Or"),
    "bitwise_xor": _bitwise("Xor"),
    "left_shift": _left_shift,
    "right_shift": _right_shift,
    "hypot": _hypot,
}
PREDICATES = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}

_BITCAST = "ONNX's BitCast, which reads a float's bits, is opset 26 and the emitter writes opset 21"
_COMPLEX = "ONNX has no complex numbers"
_EUCLID = "Euclid's algorithm takes a data-dependent number of steps per element"
emits_functions(C.Unary, UNARY, {
    "signbit": f"the sign of NaN is in its bits ({_BITCAST})",
    "frexp_mantissa": f"it splits a float's bits ({_BITCAST})",
    "frexp_exponent": f"it splits a float's bits ({_BITCAST})",
    "real": _COMPLEX,
    "imag": _COMPLEX,
})  # fmt: skip
emits_functions(C.Binary, BINARY, {
    "copysign": f"the sign of NaN is in its bits ({_BITCAST})",
    "nextafter": f"it steps a float's bits ({_BITCAST})",
    "gcd": _EUCLID,
    "lcm": _EUCLID,
    "complex": _COMPLEX,
})  # fmt: skip
# onnxruntime has no 8/16-bit integer kernels for these: they run in int32 (exact) and narrow back.
_NARROW_INTS = ("i8", "i16", "u8")


@emits(C.Binary)
def binary(g: OnnxGraph, c: C.Binary, out: Instr, x: T, y: T) -> T:
    fn = BINARY.get(c.fn)
    if fn is None:
        raise no_function_form(C.Binary, c.fn)
    if x.dtype != y.dtype and c.fn != "pow":
        y = g.cast(y, x.dtype)
    if c.fn == "mul" and "gelu" in g.contrib and x.dtype == "f32":
        base = _cube_base(g, x, y)
        if base is not None:  # the spelling of x³ that onnxruntime's FastGelu fusion looks for
            return _op(g, "Pow", base, _k(g, 3, base))
    if c.fn == "mul" and g.blocked_layout and x.dtype == "f32":
        scaled = _channel_scaled(g, x, y)
        if scaled is not None:
            return scaled
    if c.fn == "div" and x.dtype == "f32":
        swish = _hardswish_base(g, c)
        if swish is not None:  # PyTorch's decomposition of hardswish, as the node it decomposed
            return _op(g, "HardSwish", T(swish, "f32"))
        gate = _hardsigmoid_base(g, c)
        if gate is not None and g.check_finite(gate):  # (HardSigmoid's NaN: as Clip's)
            return _op(g, "HardSigmoid", T(gate, "f32"), alpha=1 / 6, beta=0.5)
    if x.dtype in HALF:  # exact for predicates, rounded once otherwise
        result = fn(g, g.cast(x, "f32"), g.cast(y, "f32"))
        return result if c.fn in PREDICATES else g.cast(result, x.dtype)
    if x.dtype in _NARROW_INTS and c.fn not in ("bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne"):
        # Wrap-around arithmetic in int32 then narrowed: the same bits as 8/16-bit arithmetic.
        result = fn(g, g.cast(x, "i32"), g.cast(y, "i32"))
        return result if c.fn in PREDICATES else g.cast(result, x.dtype)
    return fn(g, x, y)


def _cube_base(g: OnnxGraph, x: T, y: T) -> T | None:
    """``b`` when ``x · y`` is ``(b · b) · b`` (how rlx lowers ``b ** 3``, GPT-2's tanh GELU)."""
    for square, base in ((x, y), (y, x)):
        ins = g.producer(square.name)
        if (ins is not None and isinstance(ins.call, C.Binary) and ins.call.fn == "mul"
                and ins.call.x == ins.call.y == Ref(base.name)):  # fmt: skip
            return base
    return None


def _channel_scaled(g: OnnxGraph, x: T, y: T) -> T | None:
    """``x · s`` for an image ``x`` [N, C, H, W] and a scale per channel ``s`` [N, C, 1, 1] (a
    squeeze-excitation block's), with ``s`` first upsampled to [N, C, H, W]: onnxruntime runs that
    upsampling (nearest, integer scales: an exact copy) and a product of equal shapes in its
    blocked channel layout, where the broadcast product leaves it (a layout change of the image
    each way, every block)."""
    for image, scale in ((x, y), (y, x)):
        shape, small = image.shape, scale.shape
        if shape is None or small is None or len(shape) != 4 or len(small) != 4:
            continue
        if not all(isinstance(d, int) for d in (*shape, *small)) or small != (*shape[:2], 1, 1) or shape[2:] == (1, 1):
            continue
        scales = g.const(np.array([1, 1, shape[2], shape[3]], np.float32), "f32")
        up = g.op("Resize", [scale, None, scales], "f32", shape, mode="nearest",
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")  # fmt: skip
        return _op(g, "Mul", image, up)
    return None


def _hardswish_base(g: OnnxGraph, c: C.Binary) -> str | None:
    """``x`` where ``c`` is ``x · clamp(x + 3, 0, 6) / 6`` (how PyTorch decomposes hardswish),
    float32 throughout. onnxruntime fuses HardSwish into the convolution before it, in its blocked
    layout, where the five nodes of the decomposition leave that layout; x is a factor of both, so
    a NaN stays NaN, and −inf gives NaN in both (−inf · 0)."""
    mul = g.producer(c.x.name) if isinstance(c.x, Ref) and _is_lit(c.y, 6.0) else None
    if mul is None or not isinstance(mul.call, C.Binary) or mul.call.fn != "mul":
        return None
    for base, factor in ((mul.call.x, mul.call.y), (mul.call.y, mul.call.x)):
        if isinstance(base, Ref) and isinstance(factor, Ref) and _hard_gate_input(g, factor.name) == base.name:
            return base.name
    return None


def _hardsigmoid_base(g: OnnxGraph, c: C.Binary) -> str | None:
    """``x`` where ``c`` is ``clamp(x + 3, 0, 6) / 6`` (how PyTorch decomposes hardsigmoid),
    float32 throughout: one HardSigmoid, which onnxruntime fuses into the convolution before it."""
    return _hard_gate_input(g, c.x.name) if isinstance(c.x, Ref) and _is_lit(c.y, 6.0) else None


def _hard_gate_input(g: OnnxGraph, name: str) -> str | None:
    """Float32 ``x`` where value ``name`` is ``clamp(x + 3, 0, 6)``, the gate both of PyTorch's
    decompositions above share."""
    add = g.producer(_clamped(g, name, 0.0, 6.0) or "")
    if add is None or not isinstance(add.call, C.Binary) or add.call.fn != "add" or 3.0 not in _lits(add.call):
        return None
    base = _ref_name(add.call.x) or _ref_name(add.call.y)
    return base if base is not None and g.values[base].dtype == "f32" else None


def _clamped(g: OnnxGraph, name: str, lo: float, hi: float) -> str | None:
    """The value that ``name`` clamps between exactly ``lo`` and ``hi`` (one Clamp or two)."""
    bounds: list[tuple[Any, Any]] = []
    while len(bounds) < 2:
        ins = g.producer(name)
        if ins is None or not isinstance(ins.call, C.Clamp) or not isinstance(ins.call.x, Ref):
            break
        bounds.append((ins.call.lo, ins.call.hi))
        name = ins.call.x.name
        los = [b for b, _ in bounds if b is not None]
        his = [b for _, b in bounds if b is not None]
        if len(los) == len(his) == 1 and _is_lit(los[0], lo) and _is_lit(his[0], hi):
            return name
    return None


def _is_lit(v: Any, value: float) -> bool:
    return isinstance(v, Lit) and isinstance(v.value, (int, float)) and float(v.value) == value


def _ref_name(v: Any) -> str | None:
    return v.name if isinstance(v, Ref) else None


def _lits(call: C.Binary) -> list[float]:
    return [float(v.value) for v in (call.x, call.y) if isinstance(v, Lit) and isinstance(v.value, (int, float))]


# ── select, clamp, cast ──────────────────────────────────────────────────────
@emits(C.Where)
def where(g: OnnxGraph, c: C.Where, out: Instr, cond: T, x: T, y: T) -> T:
    return g.where(cond, x, y)


@emits(C.Clamp, widen=True)
def clamp(g: OnnxGraph, c: C.Clamp, out: Instr, x: T, lo: T | None, hi: T | None) -> T:
    if _clip_keeps_nan(g, c, out, x):
        bounds = [b if b is None else g.const(b.value, "f32") for b in (c.lo, c.hi)]  # type: ignore[union-attr]
        return g.op("Clip", [x, *bounds], "f32")
    narrow = x.dtype in _NARROW_INTS or x.dtype == "bool"
    work = g.cast(x, "i32") if narrow else x
    if lo is not None:
        work = _extreme("Max")(g, work, g.cast(lo, work.dtype))
    if hi is not None:
        work = _extreme("Min")(g, work, g.cast(hi, work.dtype))
    return g.cast(work, x.dtype)


def _clip_keeps_nan(g: OnnxGraph, c: C.Clamp, out: Instr, x: T) -> bool:
    """Whether a float32 clamp between constants may be onnxruntime's Clip, which it fuses into a
    convolution in its blocked layout (Max and Min leave that layout). Clip's NaN is not PyTorch's
    on every kernel (a vector max of NaN and a bound gives the bound), so only where the engine
    checks before each run that ``x`` holds none (``OnnxGraph.check_finite``; otherwise the exact
    graph runs). Not for a clamp that a HardSwish or HardSigmoid replaces: its input needs no
    check of its own."""
    bounds = [b for b in (c.lo, c.hi) if b is not None]
    if x.dtype != "f32" or not isinstance(c.x, Ref) or not bounds:
        return False
    if not all(isinstance(b, Lit) and isinstance(b.value, (int, float)) and math.isfinite(b.value) for b in bounds):
        return False
    return not _replaced_by_hard_node(g, out.result) and g.check_finite(c.x.name)


def _replaced_by_hard_node(g: OnnxGraph, name: str) -> bool:
    """Whether value ``name`` is a clamp of PyTorch's hardswish or hardsigmoid that the division
    at its end becomes one node of (so it gets no Clip, and its input no check, of its own)."""
    for ins in g.consumers(name):
        call = ins.call
        if isinstance(call, C.Clamp) and _replaced_by_hard_node(g, ins.result):
            return True
        divisions = [ins] if isinstance(call, C.Binary) and call.fn == "div" else []
        if isinstance(call, C.Binary) and call.fn == "mul":
            divisions = [d for d in g.consumers(ins.result) if isinstance(d.call, C.Binary) and d.call.fn == "div"]
        if any(_hardswish_base(g, d.call) or _hardsigmoid_base(g, d.call) for d in divisions):  # type: ignore[arg-type]
            return True
    return False


@emits(C.LeakyRelu, widen=True)
def leaky_relu(g: OnnxGraph, c: C.LeakyRelu, out: Instr, x: T) -> T:
    if x.dtype == "f32":  # (fused into a convolution like HardSwish; NaN · slope is NaN)
        return _op(g, "LeakyRelu", x, alpha=c.slope)
    return _where(g, _bool(g, "Greater", x, _k(g, 0, x)), x, _op(g, "Mul", x, _k(g, c.slope, x)))


@emits(C.Cast)
def cast(g: OnnxGraph, c: C.Cast, out: Instr, x: T) -> T:
    if x.dtype == c.dtype:
        return g.op("Identity", [x], x.dtype)
    if c.dtype not in ONNX_TYPES:
        raise EmitError(f"the ONNX emitter cannot cast to {c.dtype}")
    if x.dtype in HALF and c.dtype in HALF:
        return g.cast(g.cast(x, "f32"), c.dtype)
    return g.cast(x, c.dtype)
