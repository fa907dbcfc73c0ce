"""Special functions (``torch.special``): one definition each, over an array namespace and its
library of special functions, with PyTorch's answers.

Most are one function of the engine's special-function library — ``scipy.special`` on the numpy
engine, ``jax.scipy.special`` on JAX, which share their names — followed by PyTorch's own answers
where the library gives another (lgamma(-inf), zeta with q = inf, igamma at a NaN it ignores …).
Where PyTorch computes something no library does, its formula is written here over the namespace
(``aten/src/ATen/native/Math.h``): the orthogonal polynomials with their integer-degree rules,
trigamma, the spherical Bessel j0. A function whose library name the engine's library lacks
(JAX has no Bessel Y or K, no Airy) is refused up front by that engine, naming it.

scipy is an optional extra (``rlx[special]``): only programs that use these functions need it, and
it is imported the first time one runs (or when such a program is loaded, to fail early).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError
from .precision import widen
from .registry import kernel

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace

SCIPY_MISSING = "{what} need scipy on the numpy engine: pip install 'rlx[special]' (or scipy)"


def scipy_module(name: str, what: str) -> Any:
    """The scipy module ``name``, imported at first use; a UsageError naming the extra (and
    ``what`` needs it) when scipy is missing."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise UsageError(SCIPY_MISSING.format(what=what)) from None


def scipy_special(*fns: str) -> Any:
    """``scipy.special`` (the special functions ``fns`` need it)."""
    return scipy_module("scipy.special", f"special functions ({', '.join(fns) or 'torch.special'})")


@dataclass(frozen=True)
class SpecialFunction:
    """``define(xp, lib, *arrays)`` on arrays of one float dtype (float32 or float64); ``library``:
    the functions of the special-function library ``lib`` it calls."""

    name: str
    define: Callable[..., Any]
    library: tuple[str, ...] = ()


def _from(name: str, fix: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """The library function ``name``, then PyTorch's answers ``fix(xp, result, *arrays)``."""

    def define(xp: ArrayNamespace, lib: Any, *arrays: Any) -> Any:
        out = getattr(lib, name)(*arrays)
        return out if fix is None else fix(xp, out, *arrays)

    return define


def _nan(x: Any) -> Any:
    return np.array(np.nan, x.dtype)


def _lgamma_fix(xp: ArrayNamespace, out: Any, x: Any) -> Any:
    return xp.where(xp.isneginf(x), np.inf, out)  # Γ grows without bound toward -inf as well


def _digamma_fix(xp: ArrayNamespace, out: Any, x: Any) -> Any:
    return xp.where(x == 0, xp.copysign(np.inf, -x), out).astype(x.dtype)  # ψ(±0) = ∓inf (JAX: NaN)


def _erfinv_fix(xp: ArrayNamespace, out: Any, x: Any) -> Any:
    return xp.where(x == 0, x, out)  # erfinv(-0) = -0


def _airy_fix(xp: ArrayNamespace, out: Any, x: Any) -> Any:
    # PyTorch: NaN at ±inf, and exactly 0 beyond x = 103.892, where Ai underflows.
    return xp.where(xp.isinf(x), _nan(x), xp.where(x > 103.892, 0, out))


def _zeta(xp: ArrayNamespace, lib: Any, x: Any, q: Any) -> Any:
    """Hurwitz ζ(x, q) with PyTorch's rules, first test first: x = 1 → inf, x < 1 → NaN, q a
    non-positive integer (−inf included) → inf; and its series gives NaN at q = +inf."""
    out = lib.zeta(x, q)
    out = xp.where(xp.isposinf(q), np.nan, out)
    out = xp.where((q <= 0) & (q == xp.floor(q)), np.inf, out)
    return xp.where(x == 1, np.inf, xp.where(x < 1, np.nan, out)).astype(out.dtype)


def _igamma_rules(xp: ArrayNamespace, out: Any, a: Any, x: Any, *, upper: bool) -> Any:
    """PyTorch's edge cases of the regularised incomplete gamma P(a, x) (``upper``: Q = 1 − P),
    applied in the reverse of its order of tests, so the first test that holds wins."""
    one, zero, nan = (0.0, 1.0, np.nan) if upper else (1.0, 0.0, np.nan)
    out = xp.where(xp.isinf(x), one, out)
    out = xp.where(xp.isinf(a), xp.where(xp.isinf(x), nan, zero), out)
    out = xp.where(x == 0, zero, out)
    out = xp.where(a == 0, xp.where(x > 0, one, nan), out)
    return xp.where((x < 0) | (a < 0), nan, out).astype(a.dtype)


def _igamma(xp: ArrayNamespace, lib: Any, a: Any, x: Any) -> Any:
    return _igamma_rules(xp, lib.gammainc(a, x), a, x, upper=False)


def _igammac(xp: ArrayNamespace, lib: Any, a: Any, x: Any) -> Any:
    return _igamma_rules(xp, lib.gammaincc(a, x), a, x, upper=True)


def _trigamma(xp: ArrayNamespace, lib: Any, x: Any) -> Any:
    """PyTorch's trigamma (``calc_trigamma``): reflection below ½, six recurrence steps, then its
    asymptotic series. Its own approximation (about 1e-9 relative), so written out, not scipy's."""
    dtype = x.dtype
    reflect = x < 0.5
    sin_pi_x = xp.sin(np.array(np.pi, dtype) * x)
    result = xp.where(reflect, -(np.array(np.pi * np.pi, dtype)) / (sin_pi_x * sin_pi_x), np.array(0, dtype))
    x = xp.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    series = (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / x
    return xp.where(reflect, -1, 1).astype(dtype) * (result + series).astype(dtype)


def _polygamma(xp: ArrayNamespace, lib: Any, x: Any, n: Any) -> Any:
    """ψ⁽ⁿ⁾(x) for n ≥ 2, as PyTorch computes it: (−1)ⁿ⁺¹ n! ζ(n + 1, x)."""
    n = xp.asarray(n).astype(x.dtype)
    sign = xp.where(n % 2 == 1, 1, -1).astype(x.dtype)
    return sign * xp.exp(lib.gammaln(n + 1)).astype(x.dtype) * _zeta(xp, lib, n + 1, x).astype(x.dtype)


def _spherical_j0(xp: ArrayNamespace, lib: Any, x: Any) -> Any:
    """sin(x)/x, with PyTorch's Taylor series below |x| = ½ and 0 at ±inf."""
    x2 = x * x
    coefficients = (1 / 6227020800, -1 / 39916800, 1 / 362880, -1 / 5040, 1 / 120, -1 / 6)
    series = np.array(coefficients[0], x.dtype)
    for c in coefficients[1:]:
        series = c + x2 * series
    series = 1 + x2 * series
    with np.errstate(invalid="ignore", divide="ignore"):
        far = xp.sin(x) / x
    return xp.where(xp.isinf(x), 0, xp.where(xp.abs(x) < 0.5, series, far)).astype(x.dtype)


# ── orthogonal polynomials ───────────────────────────────────────────────────
# PyTorch's formulas, with the degree n an integer: a float degree is truncated toward zero (its
# static_cast), a NaN/inf/out-of-range one reads as negative (what that cast gives), and a negative
# degree gives 0. Each polynomial is its three-term recurrence p, q → r run n − 1 times (all
# elements in step, each keeping the value of its own degree), after PyTorch's shortcuts: closed
# forms at the ends of the interval, a trigonometric form for high degrees inside it.


def _degree(xp: ArrayNamespace, n: Any) -> Any:
    valid = xp.isfinite(n) & (xp.abs(n) < 2.0**63)
    return xp.where(valid, xp.trunc(xp.where(valid, n, 0)), -1).astype(np.int64)


def _recurrence(
    xp: ArrayNamespace, n: Any, first: Any, step: Callable[[Any, Any, Any], Any], active: Any | None = None
) -> Any:
    """The value at degree n of p₀ = 1, p₁ = ``first``, p_{k+1} = ``step(k, p_{k-1}, p_k)``
    (k = 1 … n − 1); for n ≤ 0 it is 1. ``active``: the elements that need it (the loop runs to
    the highest degree among them)."""
    dtype = first.dtype
    first = xp.broadcast_to(first, xp.broadcast_shapes(first.shape, n.shape))  # a loop carries one shape
    wanted = n if active is None else xp.where(active, n, 0)
    top = xp.max(wanted, initial=1)

    def body(k: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        p, q = carry
        r = step(xp.asarray(k).astype(dtype), p, q)
        going = k < n
        return xp.where(going, q, p), xp.where(going, r, q)

    ones = xp.ones_like(first)
    _, q = xp.fori_loop(1, top, body, (ones, first))
    return xp.where(n <= 0, ones, q)


def _chebyshev(kind: str, shifted: bool) -> Callable[..., Any]:
    """Chebyshev T/U/V/W (``shifted``: of 2x − 1), PyTorch's formulas."""
    trig_above = 4 if (shifted and kind == "w") else (6 if shifted or kind == "t" else 8)

    def define(xp: ArrayNamespace, lib: Any, x: Any, n_float: Any) -> Any:
        dtype = x.dtype
        n = _degree(xp, n_float)
        t = (x + x - 1) if shifted else x
        nf = n.astype(dtype)
        odd = n % 2 == 1
        first = {"t": t, "u": t + t, "v": t + t - 1, "w": t + t + 1}[kind]
        # The ends: t = 1 and t = −1 (for the shifted forms x = 1 and x = 0, tested on x itself).
        at_one = x == 1
        at_minus_one = (x == 0) if shifted else (x == -1)
        high, low = {"t": (1, 1), "u": (nf + 1, nf + 1), "v": (1, nf + nf + 1), "w": (nf + nf + 1, 1)}[kind]
        low = xp.where(odd, -xp.asarray(low), low)  # (−1)ⁿ at t = −1
        theta = xp.arccos(xp.where(xp.abs(t) < 1, t, 0))
        trig = _chebyshev_trig(xp, kind, t, theta, nf, high, low)
        inside = (n > trig_above) & (xp.abs(t) < 1)
        ends = at_one | at_minus_one
        recur = _recurrence(xp, n, first, lambda k, p, q: (t + t) * q - p, active=~ends & ~inside)
        out = xp.where(inside, trig, recur)
        out = xp.where(ends, xp.where(at_one, high, low), out)
        return xp.where(n < 0, 0, out).astype(dtype)

    return define


def _chebyshev_trig(xp: ArrayNamespace, kind: str, t: Any, theta: Any, nf: Any, high: Any, low: Any) -> Any:
    """The trigonometric forms PyTorch uses for high degrees inside (−1, 1), t = cos θ."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == "t":
            return xp.cos(nf * theta)
        if kind == "u":
            s = xp.sin(theta)
            return xp.where(s != 0, xp.sin((nf + 1) * theta) / s, (nf + 1) * xp.cos((nf + 1) * theta) / t)
        if kind == "v":
            return xp.where(xp.sin(theta / 2) != 1, xp.cos((nf + 0.5) * theta) / xp.cos(theta / 2), low)
        return xp.where(xp.cos(theta / 2) != 1, xp.sin((nf + 0.5) * theta) / xp.sin(theta / 2), high)


def _hermite_h(xp: ArrayNamespace, lib: Any, x: Any, n_float: Any) -> Any:
    n = _degree(xp, n_float)
    limit = 512 if x.dtype == np.float64 else 128  # PyTorch's getHermitianLimit: NaN above it
    out = _recurrence(xp, n, x + x, lambda k, p, q: (x + x) * q - (k + k) * p, active=n <= limit)
    return xp.where(n < 0, 0, xp.where(n > limit, _nan(x), out)).astype(x.dtype)


def _hermite_he(xp: ArrayNamespace, lib: Any, x: Any, n_float: Any) -> Any:
    n = _degree(xp, n_float)
    limit = 512 if x.dtype == np.float64 else 128
    out = _recurrence(xp, n, x, lambda k, p, q: x * q - k * p, active=n <= limit)
    return xp.where(n < 0, 0, xp.where(n > limit, _nan(x), out)).astype(x.dtype)


def _laguerre_l(xp: ArrayNamespace, lib: Any, x: Any, n_float: Any) -> Any:
    n = _degree(xp, n_float)
    out = _recurrence(xp, n, 1 - x, lambda k, p, q: (((k + k) + (1 - x)) * q - k * p) / (k + 1), active=x != 0)
    return xp.where(n < 0, 0, xp.where(x == 0, 1, out)).astype(x.dtype)


def _legendre_p(xp: ArrayNamespace, lib: Any, x: Any, n_float: Any) -> Any:
    n = _degree(xp, n_float)
    ends = xp.abs(x) == 1
    out = _recurrence(xp, n, x, lambda k, p, q: ((k + k + 1) * x * q - k * p) / (k + 1), active=~ends)
    end = xp.where((x > 0) | (n % 2 == 0), 1, -1)
    return xp.where(n < 0, 0, xp.where(ends, end, out)).astype(x.dtype)


def _table() -> dict[str, SpecialFunction]:
    fns = [
        SpecialFunction("lgamma", _from("gammaln", _lgamma_fix), ("gammaln",)),
        SpecialFunction("digamma", _from("digamma", _digamma_fix), ("digamma",)),
        SpecialFunction("trigamma", _trigamma),
        SpecialFunction("polygamma", _polygamma, ("gammaln", "zeta")),
        SpecialFunction("erfinv", _from("erfinv", _erfinv_fix), ("erfinv",)),
        SpecialFunction("airy_ai", lambda xp, lib, x: _airy_fix(xp, lib.airy(x)[0], x), ("airy",)),
        SpecialFunction("spherical_bessel_j0", _spherical_j0),
        SpecialFunction("zeta", _zeta, ("zeta",)),
        SpecialFunction("igamma", _igamma, ("gammainc",)),
        SpecialFunction("igammac", _igammac, ("gammaincc",)),
        SpecialFunction("hermite_polynomial_h", _hermite_h),
        SpecialFunction("hermite_polynomial_he", _hermite_he),
        SpecialFunction("laguerre_polynomial_l", _laguerre_l),
        SpecialFunction("legendre_polynomial_p", _legendre_p),
    ]
    # One library function each, with the library's answer being PyTorch's.
    same = {
        "erfc": "erfc", "erfcx": "erfcx", "ndtri": "ndtri", "log_ndtr": "log_ndtr", "i0": "i0", "i0e": "i0e",
        "i1": "i1", "i1e": "i1e", "bessel_j0": "j0", "bessel_j1": "j1", "bessel_y0": "y0", "bessel_y1": "y1",
        "modified_bessel_k0": "k0", "modified_bessel_k1": "k1", "scaled_modified_bessel_k0": "k0e",
        "scaled_modified_bessel_k1": "k1e",
    }  # fmt: skip
    fns += [SpecialFunction(name, _from(lib_name), (lib_name,)) for name, lib_name in same.items()]
    for kind in "tuvw":
        fns.append(SpecialFunction(f"chebyshev_polynomial_{kind}", _chebyshev(kind, shifted=False)))
        fns.append(SpecialFunction(f"shifted_chebyshev_polynomial_{kind}", _chebyshev(kind, shifted=True)))
    return {f.name: f for f in fns}


SPECIAL: dict[str, SpecialFunction] = _table()


def library_functions(fns: Any) -> list[str]:
    """The special functions among ``fns`` that need the engine's library (sorted, no repeats)."""
    return sorted({fn for fn in fns if fn in SPECIAL and SPECIAL[fn].library})


def missing(xp: ArrayNamespace, fn: str) -> bool:
    """Whether engine ``xp``'s library lacks a function ``fn`` needs (JAX has no Bessel Y/K, no Airy)."""
    needed = SPECIAL[fn].library
    return bool(needed) and any(not hasattr(xp.special_library(fn), name) for name in needed)


@kernel("Special")
def special(c: C.Special, x: Any, y: Any | None, *, xp: ArrayNamespace) -> Any:
    definition = SPECIAL[c.fn]
    lib = xp.special_library(c.fn) if definition.library else None
    x = xp.asarray(x)
    arrays = (x,) if y is None else (x, xp.asarray(y))
    with np.errstate(all="ignore"):  # poles and overflow give inf/NaN, as in PyTorch, silently
        out = definition.define(xp, lib, *(widen(a) for a in arrays))
    return xp.asarray(out).astype(x.dtype)


__all__ = ["SPECIAL", "SpecialFunction", "library_functions", "missing", "scipy_special", "special"]
