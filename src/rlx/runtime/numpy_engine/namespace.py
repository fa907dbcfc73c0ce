"""The numpy engine's array namespace: numpy, an erf, and the elementwise functions it computes its own way.

Four elementwise overrides, all held to the shared definitions by tests:
- GELU on float32 runs in float32 through a fitted erfc (``gelu_float32``), about 5× faster than
  an erf computed in float64 element by element, and within a few ulps of the exact GELU;
- ReLU takes the maximum against cached zeros: numpy's maximum with a scalar operand skips its
  vectorised loop and is about 3× slower (same values);
- sigmoid and SiLU on float32 run in place in four passes (``sigmoid_float32``, ``silu_float32``;
  SiLU as x / (1 + exp(−x)), PyTorch's formula, one pass fewer than x · sigmoid), within a few ulps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from ...kernels import elementwise
from ...kernels.namespace import ArrayNamespace
from ...kernels.precision import F32
from ...kernels.special import scipy_special

_ERF_CHUNK = 1 << 16


def erf64(x: np.ndarray) -> np.ndarray:
    """Elementwise erf in float64 through C's ``erf`` (``math.erf``), chunked to bound memory.

    One element at a time: correctly rounded where C's erf is, and what the float64 results and
    the ``erf`` op use. Float32 GELU has a faster path of its own (``gelu_float32``)."""
    flat = np.asarray(x, dtype=np.float64).ravel()
    out = np.empty(flat.size, np.float64)
    for start in range(0, flat.size, _ERF_CHUNK):
        part = flat[start : start + _ERF_CHUNK]
        out[start : start + part.size] = np.fromiter(map(math.erf, part.tolist()), np.float64, part.size)
    return out.reshape(np.shape(x))


# GELU in float32: torch's formula x·½·(1 + erf(x/√2)), i.e. x·Φ(x) with Φ(x) = 1 − Q(x) for
# x ≥ 0 and Q(|x|) for x < 0, where Q(a) = ½·erfc(a/√2) = exp(−a²/2)·R(s): R is smooth in
# s = 1/(2√2 + a) ∈ (0, 1/(2√2)] and is one polynomial there. Everything runs in float32 numpy
# calls (no per-element Python, no gathers), 23 passes over memory with the exponential as an exp2
# (numpy's float32 exp2 is about twice as fast as its exp, and rounds better, while its result is
# a normal float: |x| ≤ 13; beyond, it is right but several times slower): about 5× faster than
# an erf computed in float64, and within a few ulps of the exact GELU, as PyTorch's own vectorised
# float32 GELU is. Only erf's absolute error reaches the result (1 + erf absorbs it),
# which is why one polynomial over the whole line is enough.
_GELU_FIT_DEGREE = 6
_GELU_SHIFT = 2 * math.sqrt(2)  # s = 1 / (_GELU_SHIFT + |x|): t = 1/(1 + a/2) for a = |x|/√2, over 2√2
_GELU_EXP2 = -0.5 / math.log(2)  # exp(−x²/2) = 2^(x·_GELU_EXP2·x)
GELU_SMALL_SIZE = 256  # fewer elements: math.erf one by one costs less than the ~25 numpy calls


@lru_cache(maxsize=1)
def _erfc_scaled_fit() -> tuple[np.float32, ...]:
    """Coefficients (highest power first) of R(s) = ½·exp(a²)·erfc(a) at s = 1/(2√2 + a·√2),
    fitted at first use against ``math.erfc`` (no coefficient table to trust), weighted by
    exp(−a²) because the caller needs ½·erfc(a) = exp(−a²)·R to an absolute 1.5e-8 (a quarter of an
    ulp of ½), not R itself."""
    t = (np.cos(np.pi * (np.arange(1000) + 0.5) / 1000) + 1) / 2  # Chebyshev nodes on (0, 1)
    a = (1 / t - 1) * 2  # t = 1/(1 + a/2), s = t / (2√2)
    scaled = [
        math.erfc(v) * math.exp(v * v) if v < 25 else 1 / (v * math.sqrt(math.pi)) * (1 - 0.5 / (v * v)) for v in a
    ]
    weight = np.exp(-np.minimum(a * a, 700.0)) + 1e-12
    fit = np.polyfit(t / _GELU_SHIFT, np.multiply(scaled, 0.5), _GELU_FIT_DEGREE, w=weight)
    return tuple(np.float32(c) for c in fit)


def gelu_float32(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Exact (erf) GELU of a float32 array, in float32; ``out`` may be ``x`` itself."""
    if x.size < GELU_SMALL_SIZE:
        res = gelu_erf64(x)
        if out is None:
            return res
        out[...] = res
        return out
    coef = _erfc_scaled_fit()
    s = np.abs(x)
    np.add(s, np.float32(_GELU_SHIFT), out=s)
    np.divide(np.float32(1), s, out=s)
    r = np.multiply(s, coef[0])
    for c in coef[1:-1]:
        np.add(r, c, out=r)
        np.multiply(r, s, out=r)
    np.add(r, coef[-1], out=r)
    e = np.multiply(x, np.float32(_GELU_EXP2), out=s)
    np.multiply(e, x, out=e)
    np.exp2(e, out=e)
    np.multiply(r, e, out=r)  # Q(|x|) = ½·erfc(|x|/√2)
    # Φ(x) = |[x ≥ 0] − Q|: 1 − Q for x ≥ 0 (−0 included), Q below (Q ≤ ½), NaN for NaN.
    np.subtract(np.greater_equal(x, np.float32(0)), r, out=r)
    np.absolute(r, out=r)
    return np.multiply(x, r, out=out)


def sigmoid_float32(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 / (1 + exp(−x)) of a float32 array, in place in ``out`` (which may be ``x``). Not through
    exp2, though numpy's float32 exp2 is twice as fast: its rounded argument x·log2 e costs a
    relative |x|·6e-8, tens of ulps on the tail."""
    e = np.negative(x, out=out)
    np.exp(e, out=e)
    np.add(e, np.float32(1), out=e)
    return np.divide(np.float32(1), e, out=e)


def silu_float32(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x / (1 + exp(−x)) of a float32 array (PyTorch's formula, one pass fewer than x · sigmoid).
    ``out`` may be ``x``."""
    e = np.negative(x)
    np.exp(e, out=e)
    np.add(e, np.float32(1), out=e)
    return np.divide(x, e, out=e if out is None else out)


def gelu_erf64(x: np.ndarray) -> np.ndarray:
    """The shared GELU definition on the numpy namespace (erf from ``erf64``), called directly."""
    return x * 0.5 * (1 + erf64(x * (1 / math.sqrt(2))).astype(x.dtype))


def gelu(x: np.ndarray) -> np.ndarray:
    return gelu_float32(x) if x.dtype == F32 else gelu_erf64(x)


def _float32_override(fast: Callable[[np.ndarray], np.ndarray], name: str) -> Callable[[np.ndarray], np.ndarray]:
    """``fast`` on float32 arrays of rank ≥ 1, the shared definition of ``name`` (bound at first
    use) otherwise."""
    shared: list[Callable[[np.ndarray], np.ndarray]] = []

    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype == F32 and x.ndim:  # 0-d: ufuncs return numpy scalars, which cannot take ``out=``
            return fast(x)
        if not shared:
            shared.append(elementwise.UNARY[name].on(NUMPY))
        return shared[0](x)

    run.__name__ = name
    return run


@lru_cache(maxsize=64)
def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    zeros = np.zeros(shape, dtype)  # untouched pages: reading them costs no memory
    zeros.flags.writeable = False
    return zeros


def relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(x, 0) against an array of zeros of x's shape (same values, NaN stays NaN)."""
    return np.maximum(x, _zeros(x.shape, x.dtype), out=out)


def fori_loop(lower: int, upper: Any, body: Callable[[int, Any], Any], init: Any) -> Any:
    """``jax.lax.fori_loop`` on numpy: ``body(i, carry)`` for i in [lower, upper)."""
    carry = init
    for i in range(lower, int(upper)):
        carry = body(i, carry)
    return carry


def make_complex(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    """real + i·imag, written part by part (complex128 from float64, else complex64)."""
    re, im = np.broadcast_arrays(re, im)
    out = np.empty(re.shape, np.complex128 if re.dtype == np.float64 else np.complex64)
    out.real, out.imag = re, im
    return out


NUMPY = ArrayNamespace(
    "numpy",
    np,
    erf=erf64,
    fft=np.fft,
    cummax=np.maximum.accumulate,
    cummin=np.minimum.accumulate,
    cumlogsumexp=np.logaddexp.accumulate,
    fori_loop=fori_loop,
    make_complex=make_complex,
    special_library=scipy_special,  # imports scipy at first use: only special-function programs need it
)
elementwise.bind(
    NUMPY,
    {
        "gelu": gelu,
        "relu": relu,
        "sigmoid": _float32_override(sigmoid_float32, "sigmoid"),
        "silu": _float32_override(silu_float32, "silu"),
    },
)
