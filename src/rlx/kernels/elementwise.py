"""Elementwise functions and Calls: one table that the engines, the fuser and the code generator read.

Each function is defined once. Where it is one array expression, the expression *is* the
definition: ``spelling`` is what generated code prints (``{xp}`` becomes ``np`` or ``jnp``,
``{0}``/``{1}`` the operands) and the engines run the same text compiled once, so the generated
package and the runtime cannot drift apart. The rest are functions over an array namespace and
appear in generated code as kernel calls. An engine may replace a function with its own algorithm
(numpy's float32 GELU, its ReLU against cached zeros); ``bind`` applies those overrides, and tests
hold every override to the shared definition.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ir import dtypes as ir_dtypes
from .precision import HALF, widen
from .registry import kernel

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace


@dataclass(frozen=True)
class Elementwise:
    """One elementwise function: ``spelling`` (an expression) or ``define`` (``fn(xp, *arrays)``).

    ``exact``: computes integers, bools and half-precision floats exactly in their own dtype, so it
    is never widened (``nextafter`` of float16 steps by a float16 ulp); ``predicate``: a Binary whose
    result is bool (never widened either)."""

    name: str
    arity: int
    spelling: str = ""
    define: Callable[..., Any] | None = None
    exact: bool = False
    predicate: bool = False

    def on(self, xp: ArrayNamespace) -> Callable[..., Any]:
        """The definition on namespace ``xp``, a function of the arrays alone."""
        define = self.define
        if define is not None:
            return (lambda x: define(xp, x)) if self.arity == 1 else (lambda x, y: define(xp, x, y))
        args = [f"a{i}" for i in range(self.arity)]
        operands = re.escape(", ".join(f"{{{i}}}" for i in range(self.arity)))  # {0}, {1}
        bare = re.fullmatch(r"\{xp\}\.(\w+)\(" + operands + r"\)", self.spelling)
        if bare:  # one function of the namespace: the function itself (a bare ufunc on numpy)
            return getattr(xp, bare.group(1))
        # The spelling is a constant of this module, not input: compiling it is what makes the
        # generated code's expression and the engines' computation one and the same.
        return eval(f"lambda {', '.join(args)}: {self.spelling.format(*args, xp='xp')}", {"xp": xp})  # noqa: S307


def _sign(xp: ArrayNamespace, x: Any) -> Any:
    # PyTorch's sign is (0 < x) - (x < 0): NaN maps to 0, unlike numpy.sign.
    if x.dtype == np.bool_:
        return x.copy()
    return ((x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)).astype(x.dtype)


def _integral(fn: str) -> Callable[..., Any]:
    """floor/ceil/round/trunc: integers and bools are already integral and stay as they are."""

    def run(xp: ArrayNamespace, x: Any) -> Any:
        return getattr(xp, fn)(x) if x.dtype.kind in "fc" else x

    run.__name__ = fn
    return run


def _gelu(xp: ArrayNamespace, x: Any) -> Any:
    """Exact GELU, x·½·(1 + erf(x/√2)), with erf rounded to x's dtype as PyTorch's formula does."""
    return x * 0.5 * (1 + xp.erf(x * (1 / math.sqrt(2))).astype(x.dtype))


def _erf(xp: ArrayNamespace, x: Any) -> Any:
    return xp.erf(x).astype(x.dtype)


def _mish(xp: ArrayNamespace, x: Any) -> Any:
    return x * xp.tanh(xp.unary["softplus"](x))


def _trunc_divide(xp: ArrayNamespace, x: Any, y: Any) -> Any:
    if x.dtype.kind == "f":
        return xp.trunc(x / y)
    q = xp.floor_divide(x, y)
    return xp.where((q < 0) & (q * y != x), q + 1, q).astype(q.dtype)


def _pow(xp: ArrayNamespace, x: Any, y: Any) -> Any:
    x, y = xp.asarray(x), xp.asarray(y)
    if x.dtype.kind in "iu":
        # PyTorch's integer pow: a negative exponent gives 0, except for bases 1 and -1.
        negative = y < 0
        out = xp.power(x, xp.where(negative, 0, y).astype(y.dtype))
        one = xp.ones((), out.dtype)
        signed = xp.where(y % 2 == 0, one, -one) if out.dtype.kind == "i" else one
        return xp.where(negative, xp.where(x == 1, one, xp.where(x == -1, signed, 0)), out).astype(out.dtype)
    out = xp.power(x, y)
    if x.dtype.kind == "f":
        # numpy computes x ** 0.5 as sqrt; C's pow (PyTorch's) has pow(-inf, 0.5) = +inf, pow(-0, 0.5) = +0.
        out = xp.where(y == 0.5, xp.where(xp.isneginf(x), np.inf, out + 0), out).astype(out.dtype)
    return out


def _signbit(xp: ArrayNamespace, x: Any) -> Any:
    # Integers: x < 0 (numpy's signbit takes floats only); bools are never negative.
    # float16/bfloat16 through float32, which keeps the sign of −0 and NaN (ml_dtypes' own loses it).
    if x.dtype.kind == "f" or x.dtype in HALF:
        return xp.signbit(widen(x))
    return x < 0


def _angle(xp: ArrayNamespace, x: Any) -> Any:
    """PyTorch's angle: atan2(imag, real) of a complex number; of a real one π below 0, else 0
    (−0 included), NaN kept."""
    if x.dtype.kind == "c":
        return xp.angle(x)
    return xp.where(xp.isnan(x), x, xp.where(x < 0, np.array(math.pi, x.dtype), np.array(0, x.dtype)))


def _shift_bits(x: Any) -> int:
    return 8 * x.dtype.itemsize


def _left_shift(xp: ArrayNamespace, x: Any, y: Any) -> Any:
    """PyTorch's ``a << b``: 0 once b reaches the type's width, or is negative (C leaves both undefined)."""
    ok = (y >= 0) & (y < _shift_bits(x))
    return xp.where(ok, xp.left_shift(x, xp.where(ok, y, 0).astype(x.dtype)), 0).astype(x.dtype)


def _right_shift(xp: ArrayNamespace, x: Any, y: Any) -> Any:
    """PyTorch's ``a >> b``: past the type's width (or negative b), a signed value keeps only its
    sign (−1 or 0) and an unsigned one becomes 0."""
    top = _shift_bits(x) - (1 if x.dtype.kind == "i" else 0)
    ok = (y >= 0) & (y < top)
    far = xp.right_shift(x, np.array(top, x.dtype)) if x.dtype.kind == "i" else xp.zeros_like(x)
    return xp.where(ok, xp.right_shift(x, xp.where(ok, y, 0).astype(x.dtype)), far).astype(x.dtype)


def _magnitude(xp: ArrayNamespace, x: Any) -> Any:
    """|x| in the unsigned type of x's width, where |INT_MIN| still fits."""
    if x.dtype.kind != "i":
        return x
    u = x.astype(np.dtype(f"u{x.dtype.itemsize}"))
    return xp.where(x < 0, -u, u)


def _gcd(xp: ArrayNamespace, x: Any, y: Any) -> Any:
    # On magnitudes: abs(INT_MIN) overflows to a negative value, and Euclid's loop on it never ends
    # on JAX (a while_loop); numpy's answer for every other value is unchanged.
    return xp.gcd(_magnitude(xp, x), _magnitude(xp, y)).astype(x.dtype)


def _lcm(xp: ArrayNamespace, x: Any, y: Any) -> Any:
    return xp.lcm(_magnitude(xp, x), _magnitude(xp, y)).astype(x.dtype)


def _complex(xp: ArrayNamespace, re: Any, im: Any) -> Any:
    """real + i·imag, part by part (arithmetic would turn inf·i into NaN + inf·i)."""
    return xp.make_complex(re, im)


_SELU = "1.0507009873554805 * {xp}.where({0} > 0, {0}, 1.6732632423543772 * {xp}.expm1({xp}.minimum({0}, 0)))"
_SOFTPLUS = "{xp}.where({0} > 20, {0}, {xp}.log1p({xp}.exp({xp}.minimum({0}, 20))))"
_HARD = "{xp}.minimum({xp}.maximum({0} + 3, 0), 6)"
_GELU_TANH = "0.5 * {0} * (1 + {xp}.tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0})))"


def _unary(name: str, spelling: str = "", define: Callable[..., Any] | None = None, exact: bool = False) -> Elementwise:
    return Elementwise(name, 1, spelling, define, exact)


def _binary(
    name: str,
    spelling: str = "",
    define: Callable[..., Any] | None = None,
    predicate: bool = False,
    exact: bool = False,
) -> Elementwise:
    return Elementwise(name, 2, spelling, define, exact=exact, predicate=predicate)


def _call(fn: str) -> str:
    return "{xp}." + fn + "({0})"


UNARY: dict[str, Elementwise] = {
    e.name: e
    for e in [
        _unary("neg", "-{0}", exact=True),
        _unary("abs", _call("abs"), exact=True),
        *(_unary(n, _call(n)) for n in ("exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "sqrt")),
        *(_unary(n, _call(n)) for n in ("sin", "cos", "tan", "sinh", "cosh", "tanh")),
        *(_unary(n, _call("arc" + n[1:])) for n in ("asin", "acos", "atan", "asinh", "acosh", "atanh")),
        _unary("rsqrt", "1 / {xp}.sqrt({0})"),
        _unary("reciprocal", "1 / {0}"),
        _unary("square", "{0} * {0}"),
        _unary("sigmoid", "1 / (1 + {xp}.exp(-{0}))"),
        _unary("silu", "{0} * (1 / (1 + {xp}.exp(-{0})))"),
        # PyTorch's clamp_min(x, 0): −0 and NaN pass through (a max may return +0 for −0).
        _unary("relu", "{xp}.where({0} < 0, 0, {0})"),
        _unary("relu6", "{xp}.minimum(6, {xp}.where({0} < 0, 0, {0}))"),
        _unary("hardsigmoid", _HARD + " / 6"),
        _unary("hardswish", "{0} * " + _HARD + " / 6"),
        _unary("elu", "{xp}.where({0} > 0, {0}, {xp}.expm1({xp}.minimum({0}, 0)))"),
        _unary("selu", _SELU),
        _unary("softplus", _SOFTPLUS),
        _unary("mish", define=_mish),
        _unary("gelu", define=_gelu),
        _unary("gelu_tanh", _GELU_TANH),
        _unary("erf", define=_erf),
        *(_unary(n, define=_integral(n)) for n in ("floor", "ceil", "round", "trunc")),
        _unary("sign", define=_sign, exact=True),
        _unary("logical_not", _call("logical_not"), exact=True),
        _unary("bitwise_not", "~{0}", exact=True),
        *(_unary(n, _call(n), exact=True) for n in ("isnan", "isinf", "isfinite")),
        _unary("signbit", define=_signbit, exact=True),
        _unary("angle", define=_angle),
        _unary("real", _call("real"), exact=True),
        _unary("imag", _call("imag"), exact=True),
        _unary("frexp_mantissa", "{xp}.frexp({0})[0]", exact=True),
        _unary("frexp_exponent", "{xp}.frexp({0})[1]", exact=True),
        _unary("identity", "{0}", exact=True),
    ]
}

BINARY: dict[str, Elementwise] = {
    e.name: e
    for e in [
        _binary("add", "{0} + {1}"),
        _binary("sub", "{0} - {1}"),
        _binary("mul", "{0} * {1}"),
        _binary("div", "{0} / {1}"),
        _binary("floor_divide", "{0} // {1}"),
        _binary("trunc_divide", define=_trunc_divide),
        _binary("remainder", "{0} % {1}"),
        _binary("pow", define=_pow),
        *(_binary(n, "{xp}." + n + "({0}, {1})") for n in ("fmod", "maximum", "minimum", "fmax", "fmin")),
        _binary("atan2", "{xp}.arctan2({0}, {1})"),
        *(_binary(n, "{0} " + op + " {1}", predicate=True) for n, op in [("eq", "=="), ("ne", "!="), ("lt", "<")]),
        *(_binary(n, "{0} " + op + " {1}", predicate=True) for n, op in [("le", "<="), ("gt", ">"), ("ge", ">=")]),
        *(_binary(n, "{xp}." + n + "({0}, {1})", predicate=True) for n in ("logical_and", "logical_or", "logical_xor")),
        _binary("bitwise_and", "{0} & {1}"),
        _binary("bitwise_or", "{0} | {1}"),
        _binary("bitwise_xor", "{0} ^ {1}"),
        _binary("left_shift", define=_left_shift),
        _binary("right_shift", define=_right_shift),
        _binary("copysign", "{xp}.copysign({0}, {1})"),
        _binary("hypot", "{xp}.hypot({0}, {1})"),
        _binary("nextafter", "{xp}.nextafter({0}, {1})", exact=True),
        _binary("gcd", define=_gcd),
        _binary("lcm", define=_lcm),
        _binary("complex", define=_complex, exact=True),
    ]
}


def bind(xp: ArrayNamespace, overrides: Mapping[str, Callable[..., Any]] = {}) -> None:  # noqa: B006
    """Give ``xp`` its elementwise functions as ``xp.unary[name](x)`` / ``xp.binary[name](x, y)``:
    the shared definitions, except where the engine brings its own (``fn(x)`` / ``fn(x, y)``)."""

    xp.unary = {name: overrides.get(name) or e.on(xp) for name, e in UNARY.items()}
    xp.binary = {name: overrides.get(name) or e.on(xp) for name, e in BINARY.items()}


# ── the Calls ────────────────────────────────────────────────────────────────
@kernel("Unary")
def unary(c: C.Unary, x: Any, *, xp: ArrayNamespace) -> Any:
    x = xp.asarray(x)
    fn = xp.unary[c.fn]
    if UNARY[c.fn].exact or x.dtype not in HALF:
        return xp.asarray(fn(x))
    return xp.asarray(fn(widen(x))).astype(x.dtype)


@kernel("Binary")
def binary(c: C.Binary, x: Any, y: Any, *, xp: ArrayNamespace) -> Any:
    fn = xp.binary[c.fn]
    if x.dtype in HALF and not (BINARY[c.fn].predicate or BINARY[c.fn].exact):
        return xp.asarray(fn(widen(x), widen(y))).astype(x.dtype)
    return xp.asarray(fn(x, y))


@kernel("Where")
def where(c: C.Where, cond: Any, x: Any, y: Any, *, xp: ArrayNamespace) -> Any:
    return xp.where(cond, x, y)


@kernel("Clamp")
def clamp(c: C.Clamp, x: Any, lo: Any | None, hi: Any | None, *, xp: ArrayNamespace) -> Any:
    # maximum/minimum propagate NaN from either side, as torch.clamp does; lo > hi gives hi. The
    # bound first: on a tie numpy returns the second operand, so x's −0 survives clamp(−0, min=0)
    # as in PyTorch (XLA's max gives +0 either way).
    out = xp.asarray(x) if lo is None else xp.maximum(lo, x)
    return xp.asarray(out if hi is None else xp.minimum(hi, out))  # 0-d in, 0-d array out


@kernel("LeakyRelu")
def leaky_relu(c: C.LeakyRelu, x: Any, *, xp: ArrayNamespace) -> Any:
    xw = widen(xp.asarray(x))
    return xp.where(xw > 0, xw, xw * c.slope).astype(x.dtype)


@kernel("Cast")
def cast(c: C.Cast, x: Any, *, xp: ArrayNamespace) -> Any:
    x, dt = xp.asarray(x), ir_dtypes.to_numpy(c.dtype)
    if dt.kind in "iu" and x.dtype in HALF:
        # PyTorch converts a half float to an integer through float (C's cast: out-of-range values
        # wrap through int32); ml_dtypes' own half → integer cast does something else.
        x = x.astype(np.float32)
    return x.astype(dt)


@kernel("Bitcast")
def bitcast(c: C.Bitcast, x: Any, *, xp: ArrayNamespace) -> Any:
    # numpy's view and jax's (a bitcast_convert_type) reinterpret the bytes element by element
    return xp.asarray(x).view(ir_dtypes.to_numpy(c.dtype))
