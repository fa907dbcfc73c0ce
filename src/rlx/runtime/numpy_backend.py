"""The numpy backend: one kernel per Call. Kernels know Calls and arrays, never aten.

A kernel receives the Call and its operands resolved to arrays, in the order of
``Call.operand_fields()`` (literals as 0-d arrays, absent optionals as None, tuples as lists).
Operands already carry the computation dtype; half-precision floats are widened to float32 inside
a kernel and rounded once at the end, which is what PyTorch's CPU kernels do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Call

Kernel = Callable[..., np.ndarray]
KERNELS: dict[type[Call], Kernel] = {}

_F32 = np.dtype(np.float32)
_LOW_PRECISION = (np.dtype(np.float16), dtypes.to_numpy("bf16"))


def kernel(*call_types: type[Call]) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        for t in call_types:
            KERNELS[t] = fn
        return fn

    return register


def widen(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 → float32 for the arithmetic; other dtypes unchanged."""
    return x.astype(_F32) if x.dtype in _LOW_PRECISION else x


def _compute_dtype(x: np.ndarray) -> np.dtype:
    return _F32 if x.dtype in _LOW_PRECISION else x.dtype


# ── elementwise ──────────────────────────────────────────────────────────────
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


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


# GELU in float32: torch's formula x·½·(1 + erf(x/√2)) with erf(v) = ±(1 − erfc|v|), and
# erfc(a) = exp(−a²)·R(t), where R = exp(a²)·erfc(a) is smooth in t = 1/(1 + a/2) ∈ (0, 1] and is
# one polynomial there. Everything runs in float32 numpy calls (no per-element Python, no gathers):
# about 4× faster than an erf computed in float64, and within about an ulp of the exact GELU, as
# PyTorch's own vectorised float32 GELU is. Only erf's absolute error reaches the result (1 + erf
# absorbs it), which is why one polynomial over the whole line is enough.
_GELU_FIT_DEGREE = 6
_GELU_T_SCALE = 0.5 / math.sqrt(2)  # t = 1 / (1 + |x|·_GELU_T_SCALE): a = |x|/√2, t = 1/(1 + a/2)
_GELU_SMALL = 256  # fewer elements: math.erf one by one costs less than the ~30 numpy calls


@lru_cache(maxsize=1)
def _erfc_scaled_fit() -> tuple[np.float32, ...]:
    """Coefficients (highest power first) of R(t) = exp(a²)·erfc(a), t = 1/(1 + a/2), fitted at
    first use against ``math.erfc`` (no coefficient table to trust), weighted by exp(−a²) because
    the caller needs erfc(a) = exp(−a²)·R to an absolute 2e-8 (a quarter of an ulp of 1), not R itself."""
    nodes = (np.cos(np.pi * (np.arange(1000) + 0.5) / 1000) + 1) / 2  # Chebyshev nodes on (0, 1)
    a = (1 / nodes - 1) * 2
    scaled = [
        math.erfc(v) * math.exp(v * v) if v < 25 else 1 / (v * math.sqrt(math.pi)) * (1 - 0.5 / (v * v)) for v in a
    ]
    weight = np.exp(-np.minimum(a * a, 700.0)) + 1e-12
    return tuple(np.float32(c) for c in np.polyfit(nodes, scaled, _GELU_FIT_DEGREE, w=weight))


def gelu_float32(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Exact (erf) GELU of a float32 array, in float32; ``out`` may be ``x`` itself."""
    if x.size < _GELU_SMALL:
        res = _gelu_erf64(x)
        if out is None:
            return res
        out[...] = res
        return out
    coef = _erfc_scaled_fit()
    t = np.abs(x)
    np.multiply(t, np.float32(_GELU_T_SCALE), out=t)
    np.add(t, np.float32(1), out=t)
    np.divide(np.float32(1), t, out=t)
    r = np.multiply(t, coef[0])
    for c in coef[1:-1]:
        np.add(r, c, out=r)
        np.multiply(r, t, out=r)
    np.add(r, coef[-1], out=r)
    e = np.multiply(x, x, out=t)  # exp(−x²/2) = exp(−a²)
    np.multiply(e, np.float32(-0.5), out=e)
    np.exp(e, out=e)
    np.multiply(r, e, out=r)  # erfc(|x|/√2)
    # 1 + erf(x/√2) is 2 − erfc for x ≥ 0 and erfc for x < 0: base − ±erfc, rounded once.
    base = np.copysign(np.float32(1), x, out=e)
    np.add(base, np.float32(1), out=base)
    np.copysign(r, x, out=r)
    np.subtract(base, r, out=r)
    out = np.multiply(x, np.float32(0.5), out=out)
    return np.multiply(out, r, out=out)


def _gelu_erf64(x: np.ndarray) -> np.ndarray:
    """GELU with erf from ``erf64``, rounded to x's dtype, then PyTorch's formula in that dtype."""
    return x * 0.5 * (1 + erf64(x * (1 / math.sqrt(2))).astype(x.dtype))


def _gelu(x: np.ndarray) -> np.ndarray:
    return gelu_float32(x) if x.dtype == _F32 else _gelu_erf64(x)


@lru_cache(maxsize=64)
def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    zeros = np.zeros(shape, dtype)  # untouched pages: reading them costs no memory
    zeros.flags.writeable = False
    return zeros


def relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(x, 0) against an array of zeros of x's shape: numpy's maximum with a scalar operand
    skips its vectorised loop and is about 3× slower. Same values (NaN stays NaN)."""
    return np.maximum(x, _zeros(x.shape, x.dtype), out=out)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1 + np.tanh(inner))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def _sign(x: np.ndarray) -> np.ndarray:
    # PyTorch's sign is (0 < x) - (x < 0): NaN maps to 0, unlike numpy.sign.
    if x.dtype == np.bool_:
        return x.copy()
    return ((x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)).astype(x.dtype)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "expm1": np.expm1, "exp2": np.exp2,
    "log": np.log, "log1p": np.log1p, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "reciprocal": lambda x: 1 / x,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "sigmoid": _sigmoid,
    "relu": relu, "silu": lambda x: x * _sigmoid(x),
    "gelu": _gelu, "gelu_tanh": _gelu_tanh, "erf": lambda x: erf64(x).astype(x.dtype),
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc, "sign": _sign,
    "logical_not": np.logical_not, "bitwise_not": np.invert, "isnan": np.isnan, "isinf": np.isinf,
    "isfinite": np.isfinite, "identity": lambda x: x, "square": lambda x: x * x,
    "hardsigmoid": lambda x: np.minimum(np.maximum(x + 3, 0), 6) / 6,
    "hardswish": lambda x: x * np.minimum(np.maximum(x + 3, 0), 6) / 6,
    "mish": lambda x: x * np.tanh(_softplus(x)), "softplus": _softplus,
    "relu6": lambda x: np.minimum(np.maximum(x, 0), 6),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "selu": lambda x: _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(np.minimum(x, 0))),
}  # fmt: skip
# Exact for integers, so never widened; the rest work in float32 for half precision.
_EXACT_UNARY = {"neg", "abs", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite", "identity", "sign"}


@kernel(C.Unary)
def unary(c: C.Unary, x: np.ndarray) -> np.ndarray:
    fn = UNARY[c.fn]
    if c.fn in _EXACT_UNARY or x.dtype not in _LOW_PRECISION:
        return np.asarray(fn(x))
    return np.asarray(fn(widen(x))).astype(x.dtype)


def _trunc_divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        return np.trunc(x / y)
    q = np.floor_divide(x, y)
    return np.where((q < 0) & (q * y != x), q + 1, q).astype(q.dtype)


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        # PyTorch's integer pow: a negative exponent gives 0, except for bases 1 and -1.
        negative = y < 0
        out = np.power(x, np.where(negative, 0, y).astype(y.dtype, copy=False))
        if np.any(negative):
            one = np.ones((), out.dtype)
            signed = np.where(y % 2 == 0, one, -one) if out.dtype.kind == "i" else one
            out = np.where(negative, np.where(x == 1, one, np.where(x == -1, signed, 0)), out).astype(out.dtype)
        return out
    out = np.power(x, y)
    if x.dtype.kind == "f":
        # numpy computes x ** 0.5 as sqrt; C's pow (PyTorch's) has pow(-inf, 0.5) = +inf, pow(-0, 0.5) = +0.
        half = y == 0.5
        if np.any(half):
            out = np.where(half, np.where(np.isneginf(x), np.inf, out + 0), out).astype(out.dtype, copy=False)
    return out


BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "floor_divide": np.floor_divide, "trunc_divide": _trunc_divide, "remainder": np.remainder,
    "fmod": np.fmod, "pow": _pow, "maximum": np.maximum, "minimum": np.minimum,
    "fmax": np.fmax, "fmin": np.fmin, "atan2": np.arctan2,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}  # fmt: skip
_PREDICATES = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}


@kernel(C.Binary)
def binary(c: C.Binary, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    fn = BINARY[c.fn]
    if x.dtype in _LOW_PRECISION and c.fn not in _PREDICATES:
        return np.asarray(fn(widen(x), widen(y))).astype(x.dtype)
    return np.asarray(fn(x, y))


@kernel(C.Where)
def where(c: C.Where, cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(cond, x, y)


@kernel(C.Clamp)
def clamp(c: C.Clamp, x: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None) -> np.ndarray:
    # maximum/minimum propagate NaN from either side, as torch.clamp does; lo > hi gives hi.
    out = x if lo is None else np.maximum(x, lo)
    return np.asarray(out if hi is None else np.minimum(out, hi))  # 0-d in, 0-d array out


@kernel(C.LeakyRelu)
def leaky_relu(c: C.LeakyRelu, x: np.ndarray) -> np.ndarray:
    xw = widen(x)
    return np.where(xw > 0, xw, xw * c.slope).astype(x.dtype)


@kernel(C.Cast)
def cast(c: C.Cast, x: np.ndarray) -> np.ndarray:
    return x.astype(dtypes.to_numpy(c.dtype))


# ── producers ────────────────────────────────────────────────────────────────
@kernel(C.Full)
def full(c: C.Full, *_: Any) -> np.ndarray:
    return np.full(c.shape, c.value, dtype=dtypes.to_numpy(c.dtype))


@kernel(C.Arange)
def arange(c: C.Arange, *_: Any) -> np.ndarray:
    dt = dtypes.to_numpy(c.dtype)
    n = max(0, math.ceil((c.end - c.start) / c.step))
    if dt.kind in "iub":
        return (c.start + c.step * np.arange(n, dtype=np.int64)).astype(dt)
    return (c.start + c.step * np.arange(n, dtype=np.float64)).astype(dt)


# ── shape and data movement ──────────────────────────────────────────────────
@kernel(C.Reshape)
def reshape(c: C.Reshape, x: np.ndarray) -> np.ndarray:
    return x.reshape(c.shape)


@kernel(C.Permute)
def permute(c: C.Permute, x: np.ndarray) -> np.ndarray:
    return x.transpose(c.perm)


@kernel(C.Expand)
def expand(c: C.Expand, x: np.ndarray) -> np.ndarray:
    return np.broadcast_to(x, c.shape)


@kernel(C.Slice)
def slice_(c: C.Slice, x: np.ndarray) -> np.ndarray:
    return x[(slice(None),) * c.axis + (slice(c.start, c.stop, c.step),)]


@kernel(C.Concat)
def concat(c: C.Concat, xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs, axis=c.axis)


@kernel(C.Pad)
def pad(c: C.Pad, x: np.ndarray) -> np.ndarray:
    crop = tuple(slice(max(0, -lo), x.shape[i] - max(0, -hi)) for i, (lo, hi) in enumerate(c.pads))
    x = x[crop]
    widths = [(max(0, lo), max(0, hi)) for lo, hi in c.pads]
    if not any(lo or hi for lo, hi in widths):
        return x
    return np.pad(x, widths, mode="constant", constant_values=np.asarray(c.value).astype(x.dtype))


@kernel(C.IndexSelect)
def index_select(c: C.IndexSelect, x: np.ndarray, index: np.ndarray) -> np.ndarray:
    return np.take(x, index, axis=c.axis)


@kernel(C.Gather)
def gather(c: C.Gather, x: np.ndarray, index: np.ndarray) -> np.ndarray:
    # torch.gather lets the index be smaller than x on the other axes: crop x to match.
    crop = tuple(slice(None) if a == c.axis else slice(0, n) for a, n in enumerate(index.shape))
    return np.take_along_axis(x[crop], index, axis=c.axis)


@kernel(C.Index)
def index(c: C.Index, x: np.ndarray, indices: list[np.ndarray | None]) -> np.ndarray:
    return x[tuple(slice(None) if i is None else i for i in indices)]


# ── linear algebra ───────────────────────────────────────────────────────────
@kernel(C.MatMul)
def matmul(c: C.MatMul, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # 1-d · 1-d gives a numpy scalar: keep it a 0-d array.
    return np.asarray(np.matmul(widen(x), widen(y))).astype(x.dtype, copy=False)


@kernel(C.Linear)
def linear(c: C.Linear, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    out = np.matmul(widen(x), widen(w).T)
    if b is not None:
        out += widen(b)
    return out.astype(x.dtype, copy=False)


# ── reductions ───────────────────────────────────────────────────────────────
@kernel(C.Reduce)
def reduce(c: C.Reduce, x: np.ndarray) -> np.ndarray:
    axes = c.axes if c.axes and x.ndim else None  # a 0-d tensor reduces over its dim 0 / -1 to itself
    xw = widen(x)
    if c.fn in ("mean", "var", "std"):
        # By hand rather than np.mean/np.var, which warn: an empty slice is NaN and a correction
        # ≥ n divides by zero, as in PyTorch (the executor silences floating-point errors).
        n = xw.size if axes is None else math.prod(xw.shape[a] for a in axes)
        mean = np.sum(xw, axis=axes, keepdims=True) / n
        if c.fn == "mean":
            out = mean if c.keepdim else np.squeeze(mean, axis=axes)
        else:
            centered = xw - mean
            out = np.sum(centered * centered, axis=axes, keepdims=c.keepdim) / max(n - c.correction, 0)
            out = np.sqrt(out) if c.fn == "std" else out
    else:
        fn = {"sum": np.sum, "prod": np.prod, "amax": np.max, "amin": np.min, "any": np.any, "all": np.all}[c.fn]
        out = fn(xw, axis=axes, keepdims=c.keepdim)
    return np.asarray(out).astype(x.dtype, copy=False)


@kernel(C.ArgReduce)
def arg_reduce(c: C.ArgReduce, x: np.ndarray) -> np.ndarray:
    fn = np.argmax if c.fn == "argmax" else np.argmin
    if c.axis is None or x.ndim == 0:
        out = fn(x)
        return np.asarray(out, dtype=np.int64).reshape((1,) * x.ndim if c.keepdim else ())
    return np.asarray(fn(x, axis=c.axis, keepdims=c.keepdim), dtype=np.int64)


# ── neural-network blocks ────────────────────────────────────────────────────
def softmax_array(x: np.ndarray, axis: int, log: bool = False) -> np.ndarray:
    if x.ndim == 0:  # ufunc reductions need an axis to reduce
        return softmax_array(x.reshape(1), 0, log).reshape(())
    if x.size == 0:
        return x.copy()
    # np.maximum.reduce / np.add.reduce: np.max / np.sum without their Python wrappers.
    shifted = x - np.maximum.reduce(x, axis=axis, keepdims=True)
    if log:
        return shifted - np.log(np.add.reduce(np.exp(shifted), axis=axis, keepdims=True))
    e = np.exp(shifted, out=shifted)  # one temporary, reused in place
    return np.divide(e, np.add.reduce(e, axis=axis, keepdims=True), out=e)


@kernel(C.Softmax)
def softmax(c: C.Softmax, x: np.ndarray) -> np.ndarray:
    # asarray: numpy reduces a 0-d input to a scalar.
    return np.asarray(softmax_array(widen(x), c.axis, c.log)).astype(x.dtype, copy=False)


def _affine(y: np.ndarray, w: np.ndarray | None, b: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    if w is not None:
        y = y * widen(w).reshape(shape)
    if b is not None:
        y = y + widen(b).reshape(shape)
    return y


@kernel(C.LayerNorm)
def layer_norm(c: C.LayerNorm, x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
    xw = widen(x)
    run = norm_plan(xw.shape, xw.dtype, c.ndim, c.eps)
    return run(xw, None if w is None else widen(w), None if b is None else widen(b)).astype(x.dtype, copy=False)


@kernel(C.RmsNorm)
def rms_norm(c: C.RmsNorm, x: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    xw = widen(x)
    return norm_plan(xw.shape, xw.dtype, c.ndim, c.eps, rms=True)(xw, None if w is None else widen(w)).astype(
        x.dtype, copy=False
    )


@lru_cache(maxsize=64)
def _mean_column(n: int, dtype: np.dtype) -> np.ndarray:
    """A read-only ``[n, 1]`` column of 1/n: ``rows @ column`` is the row mean in one BLAS call."""
    column = np.full((n, 1), 1 / max(n, 1), dtype=dtype)
    column.flags.writeable = False
    return column


def norm_plan(shape: tuple[int, ...], dtype: np.dtype, ndim: int, eps: float, rms: bool = False) -> Kernel:
    """LayerNorm (``run(x, w, b)``) or RmsNorm (``rms``: ``run(x, w)``) over the trailing ``ndim`` axes of
    ``shape`` in ``dtype`` (float32/float64: half precision is widened first), bookkeeping done once.

    The row statistics are matrix-vector products with a column of 1/n, one BLAS call each, where a
    mean would be a reduction and a division (reductions over short trailing axes are slow in numpy)."""
    lead = shape[: len(shape) - ndim]
    n = math.prod(shape[len(shape) - ndim :])
    rows_shape = lead + (n,)
    column = _mean_column(n, np.dtype(dtype))

    if rms:

        def rms(x: np.ndarray, w: np.ndarray | None) -> np.ndarray:
            rows = x.reshape(rows_shape)
            y = (rows * (1 / np.sqrt((rows * rows) @ column + eps))).reshape(shape)
            return y if w is None else y * w

        return rms

    def layer(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
        rows = x.reshape(rows_shape)
        centered = rows - rows @ column
        y = (centered * (1 / np.sqrt((centered * centered) @ column + eps))).reshape(shape)
        if w is not None:
            y = y * w
        return y if b is None else y + b

    return layer


@kernel(C.BatchNorm)
def batch_norm(
    c: C.BatchNorm, x: np.ndarray, mean: np.ndarray, var: np.ndarray, w: np.ndarray | None, b: np.ndarray | None
) -> np.ndarray:
    shape = (-1,) + (1,) * (x.ndim - 2)
    y = (widen(x) - widen(mean).reshape(shape)) * (1 / np.sqrt(widen(var).reshape(shape) + c.eps))
    return _affine(y, w, b, shape).astype(x.dtype, copy=False)


@kernel(C.GroupNorm)
def group_norm(c: C.GroupNorm, x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
    xw = widen(x)
    grouped = xw.reshape(x.shape[0], c.groups, -1)
    mean = grouped.mean(axis=2, keepdims=True)
    centered = grouped - mean
    var = np.mean(centered * centered, axis=2, keepdims=True)
    y = (centered * (1 / np.sqrt(var + c.eps))).reshape(x.shape)
    return _affine(y, w, b, (-1,) + (1,) * (x.ndim - 2)).astype(x.dtype, copy=False)


def _pad_spatial(x: np.ndarray, pads: list[tuple[int, int]], value: float | int | bool) -> np.ndarray:
    if not any(lo or hi for lo, hi in pads):
        return x
    nd = len(pads)
    sizes = x.shape[x.ndim - nd :]
    # np.full + one assignment: np.pad's generality costs several times more on small tensors.
    out = np.full(x.shape[: x.ndim - nd] + tuple(n + lo + hi for n, (lo, hi) in zip(sizes, pads)), value, dtype=x.dtype)
    out[(Ellipsis,) + tuple(slice(lo, lo + n) for n, (lo, _) in zip(sizes, pads))] = x
    return out


def _windows(
    x: np.ndarray, kernel_: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...], out: tuple[int, ...]
) -> np.ndarray:
    """Sliding windows over the trailing ``len(kernel_)`` axes: shape ``[..., *out, *kernel]``."""
    nd = len(kernel_)
    extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel_, dilation))
    win = sliding_window_view(x, extent, axis=tuple(range(x.ndim - nd, x.ndim)))
    lead = (slice(None),) * (x.ndim - nd)
    win = win[
        lead
        + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, stride))
        + tuple(slice(None, None, d) for d in dilation)
    ]
    return win


def conv_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> int:
    """PyTorch's output extent for conv/pool windows (with its ceil_mode rule)."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside the input
        out -= 1
    return max(out, 0)


@kernel(C.Conv)
def conv(c: C.Conv, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if c.transposed:
        return _conv_transpose(c, x, w, b)
    xw = widen(x)
    out = conv_plan(c, x.shape, w.shape, xw.dtype)(xw, widen(w), None if b is None else widen(b))
    return out.astype(x.dtype, copy=False)


def conv_output_shape(c: C.Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The result shape of a forward convolution (PyTorch's extent rule per spatial axis)."""
    spatial = zip(x_shape[2:], w_shape[2:], c.stride, c.padding, c.dilation)
    return (x_shape[0], w_shape[0]) + tuple(conv_out_size(*geometry) for geometry in spatial)


def conv_plan(c: C.Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...], dtype: np.dtype) -> Kernel:
    """A forward (not transposed) convolution of these shapes as ``run(x, w, b)``, its geometry
    worked out once: the executor binds it at load, the generic kernel builds it per call.

    im2col as ``[C·K, P]`` — one strided copy out of a zero-padded buffer, none for a 1×1 stride-1
    conv — then one batched GEMM with the weight as it is stored, ``[out, in·k]``, so the result
    is NC… already. A depthwise conv is a multiply-add per kernel tap instead."""
    nd = len(w_shape) - 2
    n, cin, g = x_shape[0], x_shape[1], c.groups
    cout, ksp = w_shape[0], tuple(w_shape[2:])
    cg, og = cin // g, cout // g
    in_sp = tuple(x_shape[2:])
    out_shape = conv_output_shape(c, x_shape, w_shape)
    out_sp, bias_shape = out_shape[2:], (-1,) + (1,) * nd
    p, k = math.prod(out_sp), math.prod(ksp)
    padded_shape = (n, cin) + tuple(d + 2 * pad for d, pad in zip(in_sp, c.padding))
    interior = (Ellipsis,) + tuple(slice(pad, pad + d) for d, pad in zip(in_sp, c.padding))
    # The windows [N, C, *k, *out] as a strided view of the padded buffer: entry (.., κ, o) is
    # xp[.., o·stride + κ·dilation], inside xp because out_sp comes from conv_out_size.
    plane = tuple(np.dtype(dtype).itemsize * math.prod(padded_shape[i + 1 :]) for i in range(len(padded_shape)))
    win_shape = (n, cin) + ksp + out_sp
    win_strides = (
        plane[:2]
        + tuple(d * st for d, st in zip(c.dilation, plane[2:]))
        + tuple(s * st for s, st in zip(c.stride, plane[2:]))
    )
    if any(
        o > 0 and (o - 1) * s + (kk - 1) * d >= e
        for o, s, kk, d, e in zip(out_sp, c.stride, ksp, c.dilation, padded_shape[2:])
    ):
        raise ValueError(f"conv windows {out_sp} x {ksp} do not fit the padded input {padded_shape[2:]}")
    padded = any(c.padding)

    def windows(x: np.ndarray) -> np.ndarray:
        if padded:
            xp = np.zeros(padded_shape, x.dtype)
            xp[interior] = x
        else:
            xp = np.ascontiguousarray(x)
        return np.ndarray(win_shape, x.dtype, xp, 0, win_strides)

    if cg == 1 and og == 1 and k > 1:

        def depthwise(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
            out = _depthwise(windows(x), w)
            return out if b is None else np.add(out, b.reshape(bias_shape), out=out)

        return depthwise
    pointwise = k == 1 and all(s == 1 for s in c.stride) and not any(c.padding)
    cols_shape, w_mat = (n, g, cg * k, p), (g, og, cg * k)

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        cols = (x if pointwise else windows(x)).reshape(cols_shape)
        out = np.matmul(w.reshape(w_mat), cols).reshape(out_shape)
        return out if b is None else np.add(out, b.reshape(bias_shape), out=out)

    return run


def _depthwise(win: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Depthwise conv (one input and one output channel per group) over its windows
    ``[N, C, *k, *out]``: a multiply-add per kernel tap over the whole batch, instead of a GEMM of
    width one per channel."""
    ksp = w.shape[2:]
    nd = len(ksp)
    taps = w.reshape((w.shape[0], -1))  # [C, K]
    out = None
    tmp = None
    for flat, offs in enumerate(np.ndindex(*ksp)):
        view = win[(slice(None), slice(None)) + offs]
        wk = taps[:, flat].reshape((-1,) + (1,) * nd)
        if out is None:
            out = np.multiply(view, wk)
            tmp = np.empty_like(out)
        else:
            np.multiply(view, wk, out=tmp)
            np.add(out, tmp, out=out)
    return out


def _conv_transpose(c: C.Conv, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    xw, ww = widen(x), widen(w)
    nd = w.ndim - 2
    n, g = x.shape[0], c.groups
    cg, og = w.shape[0] // g, w.shape[1]
    ksp, in_sp = w.shape[2:], x.shape[2:]
    k = int(np.prod(ksp))
    full = tuple(
        (i - 1) * s + d * (kk - 1) + 1 + op
        for i, s, d, kk, op in zip(in_sp, c.stride, c.dilation, ksp, c.output_padding)
    )
    # contributions[n, g, og, k, *in] = Σ_c x[n, g, c, *in] · w[g, c, og, k]
    xs = xw.reshape((n, g, cg, -1))
    wk = ww.reshape(g, cg, og * k)
    contrib = np.matmul(wk.transpose(0, 2, 1)[None], xs).reshape((n, g, og, k) + in_sp)
    out = np.zeros((n, g, og) + full, dtype=contrib.dtype)
    for flat, offs in enumerate(np.ndindex(*ksp)):
        dst = tuple(slice(o * d, o * d + (i - 1) * s + 1, s) for o, d, i, s in zip(offs, c.dilation, in_sp, c.stride))
        out[(slice(None),) * 3 + dst] += contrib[:, :, :, flat]
    crop = tuple(slice(p, f - p) for p, f in zip(c.padding, full))
    out = out[(slice(None),) * 3 + crop].reshape((n, g * og) + tuple(f - 2 * p for p, f in zip(c.padding, full)))
    if b is not None:
        out = out + widen(b).reshape((-1,) + (1,) * nd)
    return out.astype(x.dtype, copy=False)


def pool_geometry(
    shape: tuple[int, ...],
    kernel_: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
) -> tuple[tuple[int, ...], list[tuple[int, int]]]:
    """Output extents (PyTorch's rule) and per-axis (left, right) padding; the right padding grows
    so ceil_mode's last partial window fits. Shape arithmetic only: the JAX backend uses it too."""
    nd = len(kernel_)
    sizes = shape[len(shape) - nd :]
    out = tuple(conv_out_size(sizes[i], kernel_[i], stride[i], padding[i], dilation[i], ceil_mode) for i in range(nd))
    pads = [
        (
            padding[i],
            max(padding[i], (out[i] - 1) * stride[i] + dilation[i] * (kernel_[i] - 1) + 1 - sizes[i] - padding[i]),
        )
        for i in range(nd)
    ]
    return out, pads


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else (np.iinfo(dtype).min if dtype.kind in "iu" else False)


@kernel(C.MaxPool)
def max_pool(c: C.MaxPool, x: np.ndarray) -> np.ndarray:
    if not c.indices:
        xw = widen(x)
        return max_pool_plan(c, x.shape, xw.dtype)(xw).astype(x.dtype, copy=False)
    nd = len(c.kernel)
    out, pads = pool_geometry(x.shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    xw = widen(x)
    padded = _pad_spatial(xw, pads, _lowest(xw.dtype))
    win = _windows(padded, c.kernel, c.stride, c.dilation, out)
    flat = win.reshape(win.shape[: x.ndim] + (-1,))
    # Positions of each window element in the unpadded spatial plane (−1 in the padding).
    sizes = x.shape[x.ndim - nd :]
    positions = np.arange(int(np.prod(sizes)), dtype=np.int64).reshape(sizes)
    pos_win = _windows(_pad_spatial(positions, pads, -1), c.kernel, c.stride, c.dilation, out)
    pos_flat = np.broadcast_to(pos_win.reshape(out + (-1,)), flat.shape)
    # PyTorch's scan: the first in-bounds maximum wins ties (a window of only -inf picks its first
    # in-bounds element, never the padding), and a NaN wins over everything — the last NaN seen.
    best = (flat == flat.max(axis=-1, keepdims=True)) & (pos_flat >= 0)
    arg = np.argmax(best, axis=-1)
    if flat.dtype.kind == "f":
        nan = np.isnan(flat)
        arg = np.where(nan.any(axis=-1), flat.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1), arg)
    return np.take_along_axis(pos_flat, arg[..., None], axis=-1)[..., 0]


def max_pool_plan(c: C.MaxPool, x_shape: tuple[int, ...], dtype: np.dtype) -> Kernel:
    """Max pooling (values only) of this input shape as ``run(x)``, its geometry worked out once.

    The window maximum is separable: one spatial axis at a time, a running maximum over one
    strided view per tap of that axis (Σk views instead of Πk). NaN propagates as in max()."""
    nd, rank = len(c.kernel), len(x_shape)
    out, pads = pool_geometry(x_shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    sizes = x_shape[rank - nd :]
    padded_shape = x_shape[: rank - nd] + tuple(n + lo + hi for n, (lo, hi) in zip(sizes, pads))
    interior = (Ellipsis,) + tuple(slice(lo, lo + n) for n, (lo, _) in zip(sizes, pads))
    padded = any(lo or hi for lo, hi in pads)
    lowest = _lowest(np.dtype(dtype))
    taps_per_axis = []
    for i in range(nd):
        lead = (slice(None),) * (rank - nd + i)
        k, s, d, n = c.kernel[i], c.stride[i], c.dilation[i], out[i]
        taps_per_axis.append([lead + (slice(t * d, t * d + (n - 1) * s + 1, s),) for t in range(k)])

    def run(x: np.ndarray) -> np.ndarray:
        best = x
        if padded:
            best = np.full(padded_shape, lowest, x.dtype)
            best[interior] = x
        for taps in taps_per_axis:
            if len(taps) == 1:
                best = best[taps[0]].copy()
                continue
            running = np.maximum(best[taps[0]], best[taps[1]])
            for tap in taps[2:]:
                np.maximum(running, best[tap], out=running)
            best = running
        return best if best is not x else x.copy()

    return run


@kernel(C.AvgPool)
def avg_pool(c: C.AvgPool, x: np.ndarray) -> np.ndarray:
    nd = len(c.kernel)
    ones = (1,) * nd
    out, pads = pool_geometry(x.shape, c.kernel, c.stride, c.padding, ones, c.ceil_mode)
    xw = widen(x)
    win = _windows(_pad_spatial(xw, pads, 0), c.kernel, c.stride, ones, out)
    total = win.sum(axis=tuple(range(x.ndim, x.ndim + nd)))
    if c.divisor_override:
        return (total / c.divisor_override).astype(x.dtype, copy=False)
    # Divisor per window: real elements, plus the zero padding when count_include_pad — but
    # never the extra right margin ceil_mode adds (PyTorch clips windows to input + padding).
    sizes = x.shape[x.ndim - nd :]
    counted = np.ones(sizes, dtype=np.float64)
    if c.count_include_pad:
        counted = np.pad(counted, [(p, p) for p in c.padding], constant_values=1)
        extra = [(0, hi - p) for (_lo, hi), p in zip(pads, c.padding)]
        counted = np.pad(counted, extra, constant_values=0)
    else:
        counted = np.pad(counted, pads, constant_values=0)
    divisor = _windows(counted, c.kernel, c.stride, ones, out).sum(axis=tuple(range(nd, 2 * nd)))
    return (total / divisor).astype(x.dtype, copy=False)


@kernel(C.AdaptiveAvgPool)
def adaptive_avg_pool(c: C.AdaptiveAvgPool, x: np.ndarray) -> np.ndarray:
    # Averaging over a box is separable: pool one spatial axis at a time.
    out = widen(x)
    nd = len(c.output_size)
    for i, size_out in enumerate(c.output_size):
        axis = x.ndim - nd + i
        size_in = out.shape[axis]
        if size_out and size_in % size_out == 0:  # equal bins: one reshape and one mean
            split = out.shape[:axis] + (size_out, size_in // size_out) + out.shape[axis + 1 :]
            out = out.reshape(split).mean(axis=axis + 1)
            continue
        pieces = []
        for j in range(size_out):
            start = (j * size_in) // size_out
            end = -((-(j + 1) * size_in) // size_out)
            pieces.append(np.take(out, range(start, end), axis=axis).mean(axis=axis, keepdims=True))
        out = np.concatenate(pieces, axis=axis)
    return out.astype(x.dtype, copy=False)


@lru_cache(maxsize=64)
def _above_diagonal(big_l: int, big_s: int) -> np.ndarray:
    """The causal mask's excluded positions (above the top-left-aligned diagonal), read-only."""
    mask = ~np.tril(np.ones((big_l, big_s), dtype=bool))
    mask.flags.writeable = False
    return mask


@kernel(C.Attention)
def attention(c: C.Attention, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    qw, kw, vw = widen(q), widen(k), widen(v)
    grouped = c.gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]
    if grouped:
        # GQA without repeating K/V: queries as [..., Hkv, rep, L, E] against keys as [..., Hkv, 1, S, E]
        # (query head h reads key head h // rep, as repeat_interleave gives).
        h_kv, rep = k.shape[-3], q.shape[-3] // k.shape[-3]
        qw = qw.reshape(q.shape[:-3] + (h_kv, rep) + q.shape[-2:])
        kw, vw = kw[..., None, :, :], vw[..., None, :, :]
        if mask is not None:
            mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape)
            mask = mask.reshape(mask.shape[:-3] + ((h_kv, rep) if mask.shape[-3] != 1 else (1, 1)) + mask.shape[-2:])
    # The scores transposed, [..., S, L]: the softmax's max and sum then run across rows, one
    # vectorised pass per key, instead of along each short row (slow in numpy).
    scores = np.matmul(kw, np.swapaxes(qw, -1, -2))
    np.multiply(scores, np.asarray(c.scale, dtype=qw.dtype), out=scores)
    big_l, big_s = q.shape[-2], k.shape[-2]
    if c.causal:
        np.copyto(scores, -np.inf, where=_above_diagonal(big_l, big_s).T)
    if mask is not None:
        mask = np.swapaxes(mask, -1, -2)
        if np.broadcast_shapes(scores.shape, mask.shape) != scores.shape:  # the mask adds batch axes
            scores = np.broadcast_to(scores, np.broadcast_shapes(scores.shape, mask.shape)).copy()
        if mask.dtype == np.bool_:
            np.copyto(scores, -np.inf, where=~mask)
        else:
            np.add(scores, widen(mask), out=scores)
    # softmax_array in place; a query that may attend nowhere (its scores all -inf, so its maximum
    # is -inf) gets zeros, like PyTorch's safe softmax.
    top = np.maximum.reduce(scores, axis=-2, keepdims=True)  # np.max / np.sum minus their wrappers
    scores -= top
    np.exp(scores, out=scores)
    scores /= np.add.reduce(scores, axis=-2, keepdims=True)
    if top.size and top.min() == -np.inf:  # one reduction of the row maxima, cheaper than a mask per row
        np.copyto(scores, 0, where=top == -np.inf)
    out = np.matmul(np.swapaxes(scores, -1, -2), vw)
    if grouped:
        out = out.reshape(out.shape[:-4] + (q.shape[-3],) + out.shape[-2:])
    return out.astype(q.dtype, copy=False)


# Kernel families kept in modules of their own register themselves when imported.
from rlx.runtime import ordering_kernels, resample_kernels, scatter_kernels, spectral_kernels  # noqa: E402, F401
