"""JAX kernels for the core Calls: elementwise, producers, data movement, linear algebra,
reductions and neural-network blocks. Kernels know Calls and arrays, never aten.

Each kernel is the jnp/lax twin of the numpy kernel of the same Call (``rlx.runtime.numpy_backend``)
with the same PyTorch semantics: half-precision floats are computed in float32 and rounded once at
the end, integer division and remainder floor or truncate as the Call says, ``maximum``/``minimum``
and reductions propagate NaN. Every shape comes from the Call's fields or from the operands' static
shapes, so each kernel traces under ``jax.jit``. int64 and float64 need 64-bit mode: run them inside
``x64()`` (the executor and the generated package do).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.runtime.jax_backend.registry import kernel
from rlx.runtime.numpy_backend import pool_geometry

Array = Any  # a jax.Array (or a traced one); literal operands arrive as 0-d numpy arrays

_F32 = np.dtype(np.float32)
_LOW_PRECISION = (np.dtype(np.float16), dtypes.to_numpy("bf16"))
# XLA's default matmul/conv precision may drop to TF32/bf16 passes on GPUs and TPUs; PyTorch keeps
# float32 exact (torch.backends.cuda.matmul.allow_tf32 is off by default), so do we.
HIGHEST = lax.Precision.HIGHEST


def x64() -> AbstractContextManager[Any]:
    """A scope in which JAX keeps int64 and float64 (thread-local; the caller's setting comes back).

    rlx programs carry int64 indices and may compute in float64; without 64-bit mode JAX silently
    truncates both to 32 bits. Setting ``jax_enable_x64`` globally when the backend is imported would
    change the defaults of the user's own JAX code (``jnp.arange`` → int64, Python floats → float64),
    so it is switched on only around rlx's own tracing, compiling and running.
    """
    enable = getattr(jax, "enable_x64", None)  # jax >= 0.5: jax.enable_x64(True) is the scope
    if enable is not None:
        return enable(True)
    from jax.experimental import enable_x64  # older jax

    return enable_x64()


def widen(x: Array) -> Array:
    """float16/bfloat16 → float32 for the arithmetic; other dtypes unchanged."""
    return x.astype(_F32) if x.dtype in _LOW_PRECISION else x


def _is_float(x: Array) -> bool:
    return jnp.issubdtype(x.dtype, jnp.floating)


# ── elementwise ──────────────────────────────────────────────────────────────
def _gelu(x: Array) -> Array:
    return x * 0.5 * (1 + lax.erf(x * (1 / math.sqrt(2))))


def _gelu_tanh(x: Array) -> Array:
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1 + jnp.tanh(inner))


def _softplus(x: Array) -> Array:
    return jnp.where(x > 20, x, jnp.log1p(jnp.exp(jnp.minimum(x, 20))))


def _sign(x: Array) -> Array:
    # PyTorch's sign is (0 < x) - (x < 0): NaN maps to 0, unlike jnp.sign.
    if x.dtype == np.bool_:
        return x
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _integral_or(fn: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """floor/ceil/round/trunc leave integers (and bools) as they are."""
    return lambda x: fn(x) if _is_float(x) else x


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

UNARY: dict[str, Callable[[Array], Array]] = {
    "neg": jnp.negative, "abs": jnp.abs, "exp": jnp.exp, "expm1": jnp.expm1, "exp2": jnp.exp2,
    "log": jnp.log, "log1p": jnp.log1p, "log2": jnp.log2, "log10": jnp.log10, "sqrt": jnp.sqrt,
    "rsqrt": lambda x: 1 / jnp.sqrt(x), "reciprocal": lambda x: 1 / x,
    "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "asin": jnp.arcsin, "acos": jnp.arccos,
    "atan": jnp.arctan, "sinh": jnp.sinh, "cosh": jnp.cosh, "tanh": jnp.tanh, "asinh": jnp.arcsinh,
    "acosh": jnp.arccosh, "atanh": jnp.arctanh, "sigmoid": jax.nn.sigmoid,
    "relu": lambda x: jnp.maximum(x, 0), "silu": lambda x: x * jax.nn.sigmoid(x),
    "gelu": _gelu, "gelu_tanh": _gelu_tanh, "erf": lax.erf,
    "floor": _integral_or(jnp.floor), "ceil": _integral_or(jnp.ceil), "round": _integral_or(jnp.round),
    "trunc": _integral_or(jnp.trunc), "sign": _sign,
    "logical_not": jnp.logical_not, "bitwise_not": jnp.invert, "isnan": jnp.isnan, "isinf": jnp.isinf,
    "isfinite": jnp.isfinite, "identity": lambda x: x, "square": lambda x: x * x,
    "hardsigmoid": lambda x: jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6,
    "hardswish": lambda x: x * jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6,
    "mish": lambda x: x * jnp.tanh(_softplus(x)), "softplus": _softplus,
    "relu6": lambda x: jnp.minimum(jnp.maximum(x, 0), 6),
    "elu": lambda x: jnp.where(x > 0, x, jnp.expm1(jnp.minimum(x, 0))),
    "selu": lambda x: _SELU_SCALE * jnp.where(x > 0, x, _SELU_ALPHA * jnp.expm1(jnp.minimum(x, 0))),
}  # fmt: skip
# Exact for integers, so never widened; the rest work in float32 for half precision.
_EXACT_UNARY = {"neg", "abs", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite", "identity", "sign"}


@kernel(C.Unary)
def unary(c: C.Unary, x: Array) -> Array:
    fn = UNARY[c.fn]
    x = jnp.asarray(x)
    if c.fn in _EXACT_UNARY or x.dtype not in _LOW_PRECISION:
        return fn(x)
    return fn(widen(x)).astype(x.dtype)


def _trunc_divide(x: Array, y: Array) -> Array:
    if _is_float(jnp.asarray(x)):
        return jnp.trunc(x / y)
    return lax.div(*jnp.broadcast_arrays(x, y))  # XLA's integer division truncates toward zero


def _pow(x: Array, y: Array) -> Array:
    x, y = jnp.asarray(x), jnp.asarray(y)
    if jnp.issubdtype(x.dtype, jnp.integer):
        # PyTorch's integer pow: a negative exponent gives 0, except for bases 1 and -1.
        negative = y < 0
        out = jnp.power(x, jnp.where(negative, 0, y))
        one = jnp.ones((), out.dtype)
        signed = jnp.where(y % 2 == 0, one, -one) if jnp.issubdtype(out.dtype, jnp.signedinteger) else one
        return jnp.where(negative, jnp.where(x == 1, one, jnp.where(x == -1, signed, 0)), out).astype(out.dtype)
    out = jnp.power(x, y)
    if _is_float(x):
        # C's pow (PyTorch's): pow(-inf, 0.5) = +inf and pow(-0, 0.5) = +0, which a sqrt would not give.
        out = jnp.where(y == 0.5, jnp.where(jnp.isneginf(x), jnp.inf, out + 0), out).astype(out.dtype)
    return out


BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.true_divide,
    "floor_divide": jnp.floor_divide, "trunc_divide": _trunc_divide, "remainder": jnp.remainder,
    "fmod": jnp.fmod, "pow": _pow, "maximum": jnp.maximum, "minimum": jnp.minimum,
    "fmax": jnp.fmax, "fmin": jnp.fmin, "atan2": jnp.arctan2,
    "eq": jnp.equal, "ne": jnp.not_equal, "lt": jnp.less, "le": jnp.less_equal, "gt": jnp.greater,
    "ge": jnp.greater_equal, "logical_and": jnp.logical_and, "logical_or": jnp.logical_or,
    "logical_xor": jnp.logical_xor, "bitwise_and": jnp.bitwise_and, "bitwise_or": jnp.bitwise_or,
    "bitwise_xor": jnp.bitwise_xor,
}  # fmt: skip
_PREDICATES = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}


@kernel(C.Binary)
def binary(c: C.Binary, x: Array, y: Array) -> Array:
    fn = BINARY[c.fn]
    if x.dtype in _LOW_PRECISION and c.fn not in _PREDICATES:
        return fn(widen(x), widen(y)).astype(x.dtype)
    return fn(x, y)


@kernel(C.Where)
def where(c: C.Where, cond: Array, x: Array, y: Array) -> Array:
    return jnp.where(cond, x, y)


@kernel(C.Clamp)
def clamp(c: C.Clamp, x: Array, lo: Array | None, hi: Array | None) -> Array:
    # maximum/minimum propagate NaN from either side, as torch.clamp does; lo > hi gives hi.
    out = jnp.asarray(x) if lo is None else jnp.maximum(x, lo)
    return out if hi is None else jnp.minimum(out, hi)


@kernel(C.LeakyRelu)
def leaky_relu(c: C.LeakyRelu, x: Array) -> Array:
    xw = widen(jnp.asarray(x))
    return jnp.where(xw > 0, xw, xw * c.slope).astype(x.dtype)


@kernel(C.Cast)
def cast(c: C.Cast, x: Array) -> Array:
    x, dt = jnp.asarray(x), dtypes.to_numpy(c.dtype)
    if _is_float(x) and dt.kind in "iu":
        return _float_to_int(x, dt)
    return x.astype(dt)


def _float_to_int(x: Array, dt: np.dtype) -> Array:
    """Float → integer as PyTorch's CPU cast (C's, numpy's) behaves on x86: truncate toward zero;
    NaN, ±inf and values out of range give the "integer indefinite" INT_MIN of a 32- or 64-bit
    conversion; narrower types go through int32 and keep its low bits. XLA would saturate instead."""
    wide = np.dtype(np.int64) if dt.itemsize == 8 else np.dtype(np.int32)
    low = np.iinfo(wide).min
    xw = widen(x)
    inside = (xw >= low) & (xw < -float(low))  # False for NaN
    out = jnp.where(inside, jnp.where(inside, xw, 0).astype(wide), low)
    return out.astype(dt)


# ── producers ────────────────────────────────────────────────────────────────
@kernel(C.Full)
def full(c: C.Full, *_: Any) -> Array:
    return jnp.full(tuple(c.shape), c.value, dtype=dtypes.to_numpy(c.dtype))


@kernel(C.Arange)
def arange(c: C.Arange, *_: Any) -> Array:
    dt = dtypes.to_numpy(c.dtype)
    n = max(0, math.ceil((c.end - c.start) / c.step))
    # The same arithmetic as the numpy kernel: int64 steps for integer results, float64 otherwise.
    base = jnp.arange(n, dtype=np.int64 if dt.kind in "iub" else np.float64)
    return (c.start + c.step * base).astype(dt)


# ── shape and data movement ──────────────────────────────────────────────────
@kernel(C.Reshape)
def reshape(c: C.Reshape, x: Array) -> Array:
    return jnp.reshape(x, tuple(c.shape))


@kernel(C.Permute)
def permute(c: C.Permute, x: Array) -> Array:
    return jnp.transpose(x, tuple(c.perm))


@kernel(C.Expand)
def expand(c: C.Expand, x: Array) -> Array:
    return jnp.broadcast_to(x, tuple(c.shape))


@kernel(C.Slice)
def slice_(c: C.Slice, x: Array) -> Array:
    return jnp.asarray(x)[(slice(None),) * c.axis + (slice(c.start, c.stop, c.step),)]


@kernel(C.Concat)
def concat(c: C.Concat, xs: list[Array]) -> Array:
    return jnp.concatenate(xs, axis=c.axis)


@kernel(C.Pad)
def pad(c: C.Pad, x: Array) -> Array:
    x = jnp.asarray(x)
    value = jnp.asarray(np.asarray(c.value).astype(x.dtype))
    return lax.pad(x, value, [(lo, hi, 0) for lo, hi in c.pads])  # negative widths crop


def _wrap(index: Array, n: int) -> Array:
    """Negative indices count from the end (as numpy's take does). An index out of range cannot
    raise inside a compiled function; it is clamped to the axis instead."""
    index = jnp.asarray(index)
    return jnp.where(index < 0, index + n, index)


@kernel(C.IndexSelect)
def index_select(c: C.IndexSelect, x: Array, index: Array) -> Array:
    return jnp.take(x, _wrap(index, x.shape[c.axis]), axis=c.axis, mode="clip")


@kernel(C.Gather)
def gather(c: C.Gather, x: Array, index: Array) -> Array:
    # torch.gather lets the index be smaller than x on the other axes: crop x to match.
    crop = tuple(slice(None) if a == c.axis else slice(0, n) for a, n in enumerate(index.shape))
    return jnp.take_along_axis(x[crop], _wrap(index, x.shape[c.axis]), axis=c.axis, mode="clip")


@kernel(C.Index)
def index(c: C.Index, x: Array, indices: list[Array | None]) -> Array:
    # jnp indexing counts negative indices from the end and clamps out-of-range ones.
    return jnp.asarray(x)[tuple(slice(None) if i is None else i for i in indices)]


# ── linear algebra ───────────────────────────────────────────────────────────
@kernel(C.MatMul)
def matmul(c: C.MatMul, x: Array, y: Array) -> Array:
    return jnp.matmul(widen(x), widen(y), precision=HIGHEST).astype(x.dtype)


@kernel(C.Linear)
def linear(c: C.Linear, x: Array, w: Array, b: Array | None) -> Array:
    out = jnp.matmul(widen(x), widen(w).T, precision=HIGHEST)
    if b is not None:
        out = out + widen(jnp.asarray(b))
    return out.astype(x.dtype)


# ── reductions ───────────────────────────────────────────────────────────────
_REDUCERS: dict[str, Callable[..., Array]] = {
    "sum": jnp.sum, "prod": jnp.prod, "amax": jnp.max, "amin": jnp.min, "any": jnp.any, "all": jnp.all,
}  # fmt: skip


@kernel(C.Reduce)
def reduce(c: C.Reduce, x: Array) -> Array:
    x = jnp.asarray(x)
    axes = tuple(c.axes) if c.axes and x.ndim else None  # a 0-d tensor reduces over its dim 0 / -1 to itself
    xw = widen(x)
    if c.fn in ("any", "all"):
        return _REDUCERS[c.fn](xw, axis=axes, keepdims=c.keepdim)
    if c.fn in ("mean", "var", "std"):
        # An empty slice is NaN and a correction ≥ n divides by zero, as in PyTorch.
        n = xw.size if axes is None else math.prod(xw.shape[a] for a in axes)
        mean = jnp.sum(xw, axis=axes, keepdims=True) / n
        if c.fn == "mean":
            out = mean if c.keepdim else jnp.squeeze(mean, axis=axes)
        else:
            centered = xw - mean
            out = jnp.sum(centered * centered, axis=axes, keepdims=c.keepdim) / max(n - c.correction, 0)
            out = jnp.sqrt(out) if c.fn == "std" else out
    else:
        out = _REDUCERS[c.fn](xw, axis=axes, keepdims=c.keepdim)
    return out.astype(x.dtype)


@kernel(C.ArgReduce)
def arg_reduce(c: C.ArgReduce, x: Array) -> Array:
    # jnp.argmax/argmin, like PyTorch, pick the first NaN, else the first extreme.
    fn = jnp.argmax if c.fn == "argmax" else jnp.argmin
    x = jnp.asarray(x)
    if c.axis is None or x.ndim == 0:
        return fn(x.reshape(-1)).astype(np.int64).reshape((1,) * x.ndim if c.keepdim else ())
    return fn(x, axis=c.axis, keepdims=c.keepdim).astype(np.int64)


# ── neural-network blocks ────────────────────────────────────────────────────
def softmax_array(x: Array, axis: int, log: bool = False) -> Array:
    shifted = x - jnp.max(x, axis=axis, keepdims=True)
    if log:
        return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))
    e = jnp.exp(shifted)
    return e / jnp.sum(e, axis=axis, keepdims=True)


@kernel(C.Softmax)
def softmax(c: C.Softmax, x: Array) -> Array:
    x = jnp.asarray(x)
    if x.ndim == 0:  # PyTorch treats a 0-d tensor as one element along its only dim
        return softmax_array(widen(x).reshape(1), 0, c.log).reshape(()).astype(x.dtype)
    return softmax_array(widen(x), c.axis, c.log).astype(x.dtype)


def _affine(y: Array, w: Array | None, b: Array | None, shape: tuple[int, ...]) -> Array:
    if w is not None:
        y = y * widen(w).reshape(shape)
    if b is not None:
        y = y + widen(b).reshape(shape)
    return y


@kernel(C.LayerNorm)
def layer_norm(c: C.LayerNorm, x: Array, w: Array | None, b: Array | None) -> Array:
    xw = widen(x)
    axes = tuple(range(x.ndim - c.ndim, x.ndim))
    centered = xw - jnp.mean(xw, axis=axes, keepdims=True)
    var = jnp.mean(centered * centered, axis=axes, keepdims=True)
    y = centered * (1 / jnp.sqrt(var + c.eps))
    return _affine(y, w, b, x.shape[x.ndim - c.ndim :]).astype(x.dtype)


@kernel(C.RmsNorm)
def rms_norm(c: C.RmsNorm, x: Array, w: Array | None) -> Array:
    xw = widen(x)
    axes = tuple(range(x.ndim - c.ndim, x.ndim))
    y = xw * (1 / jnp.sqrt(jnp.mean(xw * xw, axis=axes, keepdims=True) + c.eps))
    return _affine(y, w, None, x.shape[x.ndim - c.ndim :]).astype(x.dtype)


@kernel(C.BatchNorm)
def batch_norm(c: C.BatchNorm, x: Array, mean: Array, var: Array, w: Array | None, b: Array | None) -> Array:
    shape = (-1,) + (1,) * (x.ndim - 2)
    y = (widen(x) - widen(mean).reshape(shape)) * (1 / jnp.sqrt(widen(var).reshape(shape) + c.eps))
    return _affine(y, w, b, shape).astype(x.dtype)


@kernel(C.GroupNorm)
def group_norm(c: C.GroupNorm, x: Array, w: Array | None, b: Array | None) -> Array:
    grouped = widen(x).reshape(x.shape[0], c.groups, -1)
    centered = grouped - jnp.mean(grouped, axis=2, keepdims=True)
    var = jnp.mean(centered * centered, axis=2, keepdims=True)
    y = (centered * (1 / jnp.sqrt(var + c.eps))).reshape(x.shape)
    return _affine(y, w, b, (-1,) + (1,) * (x.ndim - 2)).astype(x.dtype)


def _conv_dims(nd: int) -> lax.ConvDimensionNumbers:
    """NC… input and output, OI… weight: the PyTorch layout, for any number of spatial axes."""
    spec = tuple(range(nd + 2))
    return lax.ConvDimensionNumbers(lhs_spec=spec, rhs_spec=spec, out_spec=spec)


@kernel(C.Conv)
def conv(c: C.Conv, x: Array, w: Array, b: Array | None) -> Array:
    xw, ww = widen(x), widen(w)
    nd = w.ndim - 2
    if c.transposed:
        # A transposed convolution is a plain one over the input dilated by the stride, with the
        # kernel flipped and its in/out channels swapped (per group), padded by d·(k−1) − p.
        g = c.groups
        cin_g, cout_g, ksp = w.shape[0] // g, w.shape[1], w.shape[2:]
        ww = ww.reshape((g, cin_g, cout_g) + ksp).swapaxes(1, 2).reshape((g * cout_g, cin_g) + ksp)
        ww = jnp.flip(ww, axis=tuple(range(2, 2 + nd)))
        pads = [
            (d * (k - 1) - p, d * (k - 1) - p + op) for k, p, d, op in zip(ksp, c.padding, c.dilation, c.output_padding)
        ]
        out = lax.conv_general_dilated(
            xw,
            ww,
            (1,) * nd,
            pads,
            lhs_dilation=c.stride,
            rhs_dilation=c.dilation,
            dimension_numbers=_conv_dims(nd),
            feature_group_count=g,
            precision=HIGHEST,
        )
    else:
        out = lax.conv_general_dilated(
            xw,
            ww,
            tuple(c.stride),
            [(p, p) for p in c.padding],
            rhs_dilation=tuple(c.dilation),
            dimension_numbers=_conv_dims(nd),
            feature_group_count=c.groups,
            precision=HIGHEST,
        )
    if b is not None:
        out = out + widen(b).reshape((-1,) + (1,) * nd)
    return out.astype(x.dtype)


def _reduce_window(
    x: Array,
    init: Any,
    op: Callable[..., Array],
    kernel_: tuple[int, ...],
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
    pads: list[tuple[int, int]],
    out: tuple[int, ...],
) -> Array:
    """``op`` over windows of the trailing spatial axes, padding with ``init``; exactly ``out`` windows."""
    lead = x.ndim - len(kernel_)
    one = (1,) * lead
    y = lax.reduce_window(
        x,
        jnp.asarray(init, x.dtype),
        op,
        one + tuple(kernel_),
        one + tuple(stride),
        [(0, 0)] * lead + list(pads),
        window_dilation=one + tuple(dilation),
    )
    return y[(slice(None),) * lead + tuple(slice(0, o) for o in out)]


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else (np.iinfo(dtype).min if dtype.kind in "iu" else False)


@kernel(C.MaxPool)
def max_pool(c: C.MaxPool, x: Array) -> Array:
    nd = len(c.kernel)
    out, pads = pool_geometry(x.shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    xw = widen(x)
    if not c.indices:
        return _reduce_window(xw, _lowest(xw.dtype), lax.max, c.kernel, c.stride, c.dilation, pads, out).astype(x.dtype)
    # Indices: gather every window ([..., *out, K]) through a static table of flat positions
    # (−1 in the padding), then pick like PyTorch's scan: the first in-bounds maximum wins ties (a
    # window of only -inf picks its first in-bounds element, never the padding), and a NaN wins over
    # everything — the last NaN seen.
    sizes = x.shape[x.ndim - nd :]
    positions = _window_positions(sizes, c.kernel, c.stride, c.dilation, pads, out)  # [*out, K]
    k = positions.shape[-1]
    lead = x.shape[: x.ndim - nd]
    flat = jnp.take(xw.reshape(lead + (-1,)), jnp.asarray(np.maximum(positions, 0).reshape(-1)), axis=-1)
    flat = flat.reshape(lead + out + (k,))
    inside = jnp.asarray(positions >= 0)
    flat = jnp.where(inside, flat, jnp.asarray(_lowest(xw.dtype), xw.dtype))
    best = (flat == jnp.max(flat, axis=-1, keepdims=True)) & inside
    arg = jnp.argmax(best, axis=-1)
    if xw.dtype.kind == "f":
        nan = jnp.isnan(flat)
        arg = jnp.where(nan.any(axis=-1), k - 1 - jnp.argmax(nan[..., ::-1], axis=-1), arg)
    table = jnp.broadcast_to(jnp.asarray(positions), arg.shape + (k,))
    return jnp.take_along_axis(table, arg[..., None], axis=-1)[..., 0]


def _window_positions(
    sizes: tuple[int, ...],
    kernel_: tuple[int, ...],
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
    pads: list[tuple[int, int]],
    out: tuple[int, ...],
) -> np.ndarray:
    """For each output window, the flat positions in the unpadded plane of its elements (−1 in the
    padding): a static table ``[*out, prod(kernel)]`` computed with numpy while tracing."""
    nd = len(sizes)
    coords = []  # per axis: [out_i, k_i] input coordinate, −1 outside
    for i in range(nd):
        pos = np.arange(out[i])[:, None] * stride[i] + np.arange(kernel_[i])[None, :] * dilation[i] - pads[i][0]
        coords.append(np.where((pos >= 0) & (pos < sizes[i]), pos, -1))
    table = np.zeros(out + kernel_, dtype=np.int64)
    valid = np.ones(out + kernel_, dtype=bool)
    for i in range(nd):
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = out[i], kernel_[i]
        ci = coords[i].reshape(shape)
        table = table * sizes[i] + np.maximum(ci, 0)
        valid &= ci >= 0
    return np.where(valid, table, -1).reshape(out + (-1,))


@kernel(C.AvgPool)
def avg_pool(c: C.AvgPool, x: Array) -> Array:
    nd = len(c.kernel)
    ones = (1,) * nd
    out, pads = pool_geometry(x.shape, c.kernel, c.stride, c.padding, ones, c.ceil_mode)
    xw = widen(x)
    total = _reduce_window(xw, 0, lax.add, c.kernel, c.stride, ones, pads, out)
    if c.divisor_override:
        return (total / c.divisor_override).astype(x.dtype)
    # Divisor per window: real elements, plus the zero padding when count_include_pad — but never
    # the extra right margin ceil_mode adds (PyTorch clips windows to input + padding). Static: numpy.
    sizes = x.shape[x.ndim - nd :]
    counted = np.ones(sizes, dtype=np.float64)
    if c.count_include_pad:
        counted = np.pad(counted, [(p, p) for p in c.padding], constant_values=1)
        counted = np.pad(counted, [(0, hi - p) for (_lo, hi), p in zip(pads, c.padding)], constant_values=0)
    else:
        counted = np.pad(counted, pads, constant_values=0)
    divisor = np.zeros(out)
    for offs in np.ndindex(*c.kernel):
        divisor += counted[tuple(slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offs, out, c.stride))]
    return (total / jnp.asarray(divisor, xw.dtype)).astype(x.dtype)


@kernel(C.AdaptiveAvgPool)
def adaptive_avg_pool(c: C.AdaptiveAvgPool, x: Array) -> Array:
    # Averaging over a box is separable: pool one spatial axis at a time (static bounds).
    out = widen(x)
    nd = len(c.output_size)
    for i, size_out in enumerate(c.output_size):
        axis = x.ndim - nd + i
        size_in = out.shape[axis]
        pieces = []
        for j in range(size_out):
            start, end = (j * size_in) // size_out, -((-(j + 1) * size_in) // size_out)
            piece = lax.slice_in_dim(out, start, end, axis=axis)
            pieces.append(jnp.mean(piece, axis=axis, keepdims=True))
        out = jnp.concatenate(pieces, axis=axis)
    return out.astype(x.dtype)


@kernel(C.Attention)
def attention(c: C.Attention, q: Array, k: Array, v: Array, mask: Array | None) -> Array:
    qw, kw, vw = widen(q), widen(k), widen(v)
    if c.gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        kw, vw = jnp.repeat(kw, rep, axis=-3), jnp.repeat(vw, rep, axis=-3)
    scores = jnp.matmul(qw, jnp.swapaxes(kw, -1, -2), precision=HIGHEST) * jnp.asarray(c.scale, qw.dtype)
    big_l, big_s = q.shape[-2], k.shape[-2]
    if c.causal:
        scores = jnp.where(jnp.asarray(np.tril(np.ones((big_l, big_s), dtype=bool))), scores, -jnp.inf)
    if mask is not None:
        scores = jnp.where(mask, scores, -jnp.inf) if mask.dtype == np.bool_ else scores + widen(mask)
    # A query that may attend nowhere (its scores all -inf) gets zeros, like PyTorch's safe softmax.
    dead = jnp.all(scores == -jnp.inf, axis=-1, keepdims=True)
    probs = jnp.where(dead, jnp.zeros((), scores.dtype), softmax_array(scores, -1))
    return jnp.matmul(probs, vw, precision=HIGHEST).astype(q.dtype)
