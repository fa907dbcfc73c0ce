"""Random ops: every distribution from the generator's raw words (``Builder.random_bits``).

The values cannot equal PyTorch's (another generator), but follow its distributions and its
parameter and dtype rules: ``rand`` in [0, 1) from the top 24 bits of a word for float32 (53 bits
of two words for float64, 11 for float16, 8 for bfloat16, so rounding never reaches 1), ``randn``
by Box-Muller, ``randint`` in [low, high) from 63 bits modulo the range (bias < range / 2⁶³),
``bernoulli`` as ``u < p``, ``exponential``/``cauchy``/``geometric``/``log_normal`` by inverting
their CDFs, ``multinomial`` by exponential races (without replacement: the k smallest ``E / p``
win, ``E ~ Exp(1)``; Gumbel-top-k in another form) or the inverse CDF (with replacement). The
arithmetic happens in float32 (float64 for float64 results) and is rounded once to the result;
turning words into uniforms and integers is exact (float64 and int64 arithmetic), so those draws
are the same on every engine, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.elementwise import operand_as
from rlx.frontends.aten.reduce import window_argmax
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.common import static_dim
from rlx.ir import dtypes, symbolic
from rlx.ir.calls import (
    Arange,
    ArgTopK,
    Binary,
    Cast,
    Clamp,
    CumReduce,
    Full,
    Gather,
    LeakyRelu,
    Reshape,
    SearchSorted,
    Slice,
    Unary,
    Where,
)
from rlx.ir.program import Lit, Operand, Ref
from rlx.ir.rules import broadcast
from rlx.ir.symbolic import Dim

# Mantissa bits of a uniform draw in [0, 1) for each float dtype: as many as the dtype holds
# below 1, so u < 1 after rounding (PyTorch's rule too).
_UNIFORM_BITS = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}


def compute_dtype(dtype: str) -> str:
    """The dtype a distribution is computed in for a result of ``dtype``."""
    return "f64" if dtype == "f64" else "f32"


def op(b: Builder, fn: str, x: Operand, y: Operand | float | None, shape: Sequence[Dim], dtype: str) -> Ref:
    """``fn(x)`` or ``fn(x, y)`` of ``dtype`` (a Python number ``y`` becomes a literal of it)."""
    if y is None:
        return b.emit(Unary(fn, x), shape, dtype)
    other = b.lit(y, dtype) if isinstance(y, (int, float)) else y
    result = "bool" if fn in ("lt", "le", "gt", "ge", "eq") else dtype
    return b.emit(Binary(fn, x, other), shape, result)


def _word(b: Builder, shape: Sequence[Dim]) -> Ref:
    """One fresh random 32-bit word per element, as an exact float64."""
    return b.emit(Cast(b.random_bits(shape), "f64"), shape, "f64")


def uniform(b: Builder, shape: Sequence[Dim], dtype: str, bits: int | None = None, open_: bool = False) -> Ref:
    """u ~ U[0, 1) of ``dtype`` (f32 or f64) on a grid of ``2**-bits`` (default: the dtype's mantissa):
    the top ``bits`` of a word (of two words above 32), every step exact in float64, so each engine
    computes the same value (plain arithmetic: no bit shifts for the ONNX emitter to lack).
    ``open_``: u ~ U(0, 1), the grid's midpoints ``(k + ½)·2**-bits`` one bit coarser, still exact in
    ``dtype``, so ``log(u)`` and ``log(1 - u)`` are finite and never 0 (inverse CDFs need that)."""
    bits = (bits or _UNIFORM_BITS[dtype]) - (1 if open_ else 0)
    if bits <= 32:
        top = op(b, "floor", op(b, "mul", _word(b, shape), 2.0 ** (bits - 32), shape, "f64"), None, shape, "f64")
    else:  # all 32 bits of one word above the top bits of another
        high = op(b, "mul", _word(b, shape), 2.0 ** (bits - 32), shape, "f64")
        low = op(b, "floor", op(b, "mul", _word(b, shape), 2.0 ** (bits - 64), shape, "f64"), None, shape, "f64")
        top = op(b, "add", high, low, shape, "f64")
    if open_:
        top = op(b, "add", top, 0.5, shape, "f64")
    return b.cast(op(b, "mul", top, 2.0**-bits, shape, "f64"), dtype)


def standard_normal(b: Builder, shape: Sequence[Dim], dtype: str) -> Ref:
    """z ~ N(0, 1) by Box-Muller: ``sqrt(-2 log u1) cos(2π u2)``, u1 ∈ (0, 1), u2 ∈ [0, 1) (float32:
    |z| < 5.7, whose tail beyond holds 1e-8 of the law's mass)."""
    u1 = uniform(b, shape, dtype, open_=True)
    radius = op(b, "sqrt", op(b, "mul", op(b, "log", u1, None, shape, dtype), -2.0, shape, dtype), None, shape, dtype)
    angle = op(b, "mul", uniform(b, shape, dtype), 2 * math.pi, shape, dtype)
    return op(b, "mul", radius, op(b, "cos", angle, None, shape, dtype), shape, dtype)


def standard_exponential(b: Builder, shape: Sequence[Dim], dtype: str) -> Ref:
    """e ~ Exp(1): ``-log(u)``, u ∈ (0, 1), so e is positive and finite."""
    return op(b, "neg", op(b, "log", uniform(b, shape, dtype, open_=True), None, shape, dtype), None, shape, dtype)


def _param(b: Builder, arg: object, dtype: str) -> Operand:
    """A distribution parameter (number or tensor) in the compute dtype."""
    return operand_as(b, arg, dtype)


def _affine(b: Builder, z: Ref, scale: object, shift: object, shape: Sequence[Dim], dtype: str) -> Ref:
    """``shift + scale · z`` with numbers or tensors for the parameters."""
    scaled = op(b, "mul", z, _param(b, scale, dtype), shape, dtype)
    return op(b, "add", scaled, _param(b, shift, dtype), shape, dtype)


# ── fresh tensors: rand, randn, randint and their _like forms ───────────────
@lowers("aten.rand", "aten.rand_like", "aten.randn", "aten.randn_like")
def rand(node: Node, b: Builder) -> Operand:
    out = node.meta
    if not dtypes.is_float(out.dtype):
        raise LoweringError(f"node {node.id} ({node.op}): PyTorch draws {node.base} only as floats, not {out.dtype}")
    ct = compute_dtype(out.dtype)
    if node.base.startswith("randn"):
        return b.cast(standard_normal(b, out.shape, ct), out.dtype)
    return b.cast(uniform(b, out.shape, ct, _UNIFORM_BITS[out.dtype]), out.dtype)


def random_integers(b: Builder, shape: Sequence[Dim], low: int, high: int) -> Ref:
    """int64 uniform on [low, high): 63 random bits (31 of one word above 32 of another) modulo the range."""
    if high <= low:
        raise LoweringError(f"random integers need low < high, found [{low}, {high})")
    high_word = b.emit(Cast(b.random_bits(shape), "i64"), shape, "i64")
    top = op(b, "mul", op(b, "floor_divide", high_word, Lit(2, "i64"), shape, "i64"), Lit(1 << 32, "i64"), shape, "i64")
    joined = op(b, "add", top, b.emit(Cast(b.random_bits(shape), "i64"), shape, "i64"), shape, "i64")
    picked = op(b, "remainder", joined, Lit(high - low, "i64"), shape, "i64")
    return op(b, "add", picked, Lit(low, "i64"), shape, "i64") if low else picked


_RANDINT_BOUNDS = {
    # overload → positions of (low, high); None: low is 0
    "aten.randint.default": (None, 0),
    "aten.randint.generator": (None, 0),
    "aten.randint.low": (0, 1),
    "aten.randint.low_generator": (0, 1),
    "aten.randint_like.default": (None, 1),
    "aten.randint_like.low_dtype": (1, 2),
}


@lowers("aten.randint", "aten.randint_like")
def randint(node: Node, b: Builder) -> Operand:
    out = node.meta
    if node.op not in _RANDINT_BOUNDS:
        raise LoweringError(f"node {node.id}: {node.op} (bounds read from a tensor) is not supported")
    at_low, at_high = _RANDINT_BOUNDS[node.op]
    low = 0 if at_low is None else b.scalar(node, at_low, "low")
    high = b.scalar(node, at_high, "high")
    if not all(isinstance(v, int) for v in (low, high)):
        raise LoweringError(f"node {node.id} ({node.op}): bounds must be integers, found {low!r}, {high!r}")
    return b.cast(random_integers(b, out.shape, low, high), out.dtype)


# ── in-place fills, functionalised: x's shape and dtype, fresh values ───────
def _number(node: Node, b: Builder, index: int, name: str, default: float) -> float:
    value = b.scalar(node, index, name, default)
    if not isinstance(value, (int, float)):
        raise LoweringError(f"node {node.id} ({node.op}): {name} must be a number, found {value!r}")
    return float(value)


@lowers("aten.uniform")
def uniform_fill(node: Node, b: Builder) -> Operand:
    out = node.meta
    lo, hi = _number(node, b, 1, "from", 0.0), _number(node, b, 2, "to", 1.0)
    ct = compute_dtype(out.dtype)
    u = uniform(b, out.shape, ct, _UNIFORM_BITS.get(out.dtype))
    return b.cast(_affine(b, u, hi - lo, lo, out.shape, ct), out.dtype)


@lowers("aten.normal_functional", "aten.normal")
def normal(node: Node, b: Builder) -> Operand:
    """``normal_functional(x, mean, std)``; ``normal(mean, std[, size])`` with either a tensor."""
    out = node.meta
    ct = compute_dtype(out.dtype)
    if node.base == "normal_functional":
        mean, std = node.arg(1, "mean", 0.0), node.arg(2, "std", 1.0)
    else:
        mean, std = node.arg(0, "mean", 0.0), node.arg(1, "std", 1.0)
    z = standard_normal(b, out.shape, ct)
    return b.cast(_affine(b, z, std, mean, out.shape, ct), out.dtype)


@lowers("aten.log_normal")
def log_normal(node: Node, b: Builder) -> Operand:
    out = node.meta
    ct = compute_dtype(out.dtype)
    mean, std = _number(node, b, 1, "mean", 1.0), _number(node, b, 2, "std", 2.0)
    z = _affine(b, standard_normal(b, out.shape, ct), std, mean, out.shape, ct)
    return b.cast(op(b, "exp", z, None, out.shape, ct), out.dtype)


@lowers("aten.exponential")
def exponential(node: Node, b: Builder) -> Operand:
    out = node.meta
    ct = compute_dtype(out.dtype)
    rate = _number(node, b, 1, "lambd", 1.0)
    e = standard_exponential(b, out.shape, ct)
    return b.cast(op(b, "mul", e, 1.0 / rate, out.shape, ct), out.dtype)


@lowers("aten.cauchy")
def cauchy(node: Node, b: Builder) -> Operand:
    """``median + sigma · tan(π (u - ½))``."""
    out = node.meta
    ct = compute_dtype(out.dtype)
    median, sigma = _number(node, b, 1, "median", 0.0), _number(node, b, 2, "sigma", 1.0)
    angle = op(b, "mul", op(b, "sub", uniform(b, out.shape, ct), 0.5, out.shape, ct), math.pi, out.shape, ct)
    t = op(b, "tan", angle, None, out.shape, ct)
    return b.cast(_affine(b, t, sigma, median, out.shape, ct), out.dtype)


@lowers("aten.geometric")
def geometric(node: Node, b: Builder) -> Operand:
    """Trials until the first success: ``ceil(log u / log(1 - p))``, ≥ 1 as u < 1 (integer dtypes too)."""
    out = node.meta
    p = _number(node, b, 1, "p", 0.5)
    if not 0 < p < 1:
        raise LoweringError(f"node {node.id} ({node.op}): p must be in (0, 1), found {p}")
    ct = "f64"  # large counts for small p stay exact
    log_u = op(b, "log", uniform(b, out.shape, ct, open_=True), None, out.shape, ct)
    k = op(b, "ceil", op(b, "div", log_u, math.log1p(-p), out.shape, ct), None, out.shape, ct)
    return b.cast(k, out.dtype)


@lowers("aten.bernoulli")
def bernoulli(node: Node, b: Builder) -> Operand:
    """``bernoulli(x)``: x holds the probabilities; ``.p``: one probability; ``.Tensor``: a tensor of them."""
    out = node.meta
    p_arg = node.arg(0) if node.overload == "default" else node.arg(1, "p", 0.5)
    u = uniform(b, out.shape, "f64" if out.dtype == "f64" else "f32")
    p = _param(b, p_arg, b.dtype(u))
    return b.cast(op(b, "lt", u, p, out.shape, b.dtype(u)), out.dtype)


# ── sampling indices ─────────────────────────────────────────────────────────
@lowers("aten.multinomial")
def multinomial(node: Node, b: Builder) -> Operand:
    """``num_samples`` category indices per row of (unnormalised) probabilities ``x``."""
    out = node.meta
    x = b.input(node, 0)
    n = b.scalar(node, 1, "num_samples")
    replacement = node.arg(2, "replacement", False)
    ct = compute_dtype(b.dtype(x))
    p = b.cast(x, ct)
    axis = b.rank(x) - 1
    if not replacement:
        # Exponential races: category i finishes at E_i / p_i; the first n to finish are drawn,
        # in order (p = 0 never finishes). Equivalent to Gumbel-top-k on log p.
        times = op(b, "div", standard_exponential(b, b.shape(x), ct), p, b.shape(x), ct)
        return b.emit(ArgTopK(times, n, axis, largest=False, sorted=True), out.shape, "i64")
    cdf = b.emit(CumReduce("sum", p, axis), b.shape(x), ct)
    k = b.shape(x)[axis]
    total = b.emit(Slice(cdf, axis, symbolic.add(k, -1), k, 1), (*b.shape(x)[:-1], 1), ct)
    targets = op(b, "mul", uniform(b, out.shape, ct), total, out.shape, ct)
    index = b.emit(SearchSorted(cdf, targets, right=True), out.shape, "i64")
    # rounding can put a target at the total itself: the last category is meant
    return b.emit(Clamp(index, None, Lit(symbolic.add(k, -1), "i64")), out.shape, "i64")


# ── random ops inside layers: dropout, rrelu ─────────────────────────────────
def keep_mask(b: Builder, shape: Sequence[Dim], p: float) -> Ref:
    """True with probability ``1 - p``."""
    return op(b, "lt", uniform(b, shape, "f32"), 1.0 - p, shape, "f32")


def dropout_weights(b: Builder, x: Ref, p: float) -> Ref:
    """``x`` with each entry dropped with probability ``p`` and the rest scaled by ``1 / (1 - p)``."""
    return dropped(b, x, keep_mask(b, b.shape(x), p), p)


def dropped(b: Builder, x: Ref, mask: Ref, p: float) -> Ref:
    """``x · mask / (1 - p)`` in x's dtype, as PyTorch computes it (zeros when p = 1)."""
    shape, dtype = b.shape(x), b.dtype(x)
    if p == 1:
        return op(b, "mul", x, 0.0, shape, dtype) if dtypes.is_float(dtype) else x
    kept = op(b, "mul", x, b.cast(mask, dtype), shape, dtype)  # a feature mask keeps its own shape
    return op(b, "mul", kept, 1.0 / (1.0 - p), shape, dtype)


@lowers("aten.native_dropout")
def native_dropout(node: Node, b: Builder) -> tuple[Operand, Operand]:
    return dropout_pair(node, b)


def dropout_pair(node: Node, b: Builder) -> tuple[Operand, Operand]:
    """``native_dropout(x, p, train)`` → (output, keep-mask). In training each entry is kept with
    probability ``1 - p`` and scaled by ``1 / (1 - p)``; otherwise (or with p = 0) nothing is
    dropped: ``x`` itself and an all-True mask, exactly what PyTorch returns."""
    x, p = b.input(node, 0), _number(node, b, 1, "p", 0.5)
    if not 0 <= p <= 1:
        raise LoweringError(f"node {node.id} ({node.op}): dropout probability must be in [0, 1], found {p}")
    if node.arg(2, "train") is False or p == 0:
        return x, b.emit(Full(True, b.shape(x), "bool"), b.shape(x), "bool")
    mask = keep_mask(b, b.shape(x), p)
    return dropped(b, x, mask, p), mask


@lowers("aten.dropout")
def dropout(node: Node, b: Builder) -> Operand:
    if not node.arg(2, "train", False):
        return b.input(node, 0)
    return dropout_pair(node, b)[0]


_SELU_ALPHA = -1.0507009873554804934193349852946 * 1.6732632423543772848170429916717  # α' = -λα of SELU


@lowers("aten.feature_dropout", "aten.alpha_dropout", "aten.feature_alpha_dropout")
def dropout_variants(node: Node, b: Builder) -> Operand:
    """``feature_*``: whole channels (axes 0 and 1 drawn, the rest shared) are dropped together;
    ``alpha``: dropped entries become SELU's saturation α' and the result is scaled back to the
    input's mean and variance, ``a·(x·m + α'·(1 - m)) + b`` (PyTorch's ``_dropout_impl``)."""
    x, p = b.input(node, 0), _number(node, b, 1, "p", 0.5)
    if not node.arg(2, "train", False) or p == 0:
        return x
    shape, dtype = b.shape(x), b.dtype(x)
    noise = (*shape[:2], *(1,) * (len(shape) - 2)) if node.base.startswith("feature") else shape
    if not node.base.endswith("alpha_dropout"):
        return dropped(b, x, keep_mask(b, noise, p), p)
    if p == 1:
        return op(b, "mul", x, 0.0, shape, dtype)
    a = ((1 - p) * (1 + p * _SELU_ALPHA**2)) ** -0.5
    kept = b.emit(Cast(keep_mask(b, noise, p), dtype), noise, dtype)
    # a·(x·m + α'(1 - m)) + b  =  a·x·m + (a·α' + b) - a·α'·m
    scaled = op(b, "mul", op(b, "mul", x, kept, shape, dtype), a, shape, dtype)
    shift = op(b, "mul", kept, -a * _SELU_ALPHA, noise, dtype)
    return op(b, "add", op(b, "add", scaled, shift, shape, dtype), a * _SELU_ALPHA - a * _SELU_ALPHA * p, shape, dtype)


@lowers("aten.rrelu_with_noise_functional", "aten.rrelu_with_noise", "aten.rrelu")
def rrelu(node: Node, b: Builder) -> Operand | tuple[Operand, Operand]:
    """Randomized leaky ReLU: in training, each negative entry gets its own slope ~ U[lower, upper]
    (the noise output holds the slopes, 1 where x ≥ 0); otherwise the mean slope."""
    x = b.input(node, 0)
    at = 0 if node.base == "rrelu" else 1  # rrelu has no noise argument
    lower = _number(node, b, at + 1, "lower", 1 / 8)
    upper = _number(node, b, at + 2, "upper", 1 / 3)
    training = node.arg(at + 3, "training", False)
    shape, dtype = b.shape(x), b.dtype(x)
    if not training:
        y: Operand = b.emit(LeakyRelu(x, (lower + upper) / 2), shape, dtype)
        noise = b.input(node, 1) if at else None
    else:
        ct = compute_dtype(dtype)
        slopes = b.cast(_affine(b, uniform(b, shape, ct), upper - lower, lower, shape, ct), dtype)
        negative = op(b, "le", x, b.lit(0, dtype), shape, dtype)
        y = b.emit(Where(negative, op(b, "mul", x, slopes, shape, dtype), x), shape, dtype)
        noise = b.emit(Where(negative, slopes, b.lit(1.0, dtype)), shape, dtype)
    if node.base == "rrelu_with_noise_functional":
        assert noise is not None
        return y, noise
    return y


# ── fractional max pooling: pseudo-random windows from drawn samples ────────
@lowers("aten.fractional_max_pool2d", "aten.fractional_max_pool3d")
def fractional_max_pool(node: Node, b: Builder) -> tuple[Operand, Operand]:
    """``(x, kernel_size, output_size, random_samples)`` → (values, flat spatial indices). PyTorch
    draws ``random_samples`` (N, C, nd) with ``rand`` in the graph; given them the pooling is
    deterministic: along a spatial axis of size ``n`` pooled to ``o`` windows of ``k``, window ``i``
    starts at ``⌊(i + u)·α⌋ - ⌊u·α⌋`` with ``α = (n - k) / (o - 1)``, the last one at ``n - k``.
    The sample for W comes first (2-d: W, H; 3-d: T, H, W, as PyTorch's kernels read them)."""
    x, samples = b.input(node, 0), b.input(node, 3, "random_samples")
    nd = 2 if node.base.endswith("2d") else 3
    kernel = [int(k) for k in b.scalar(node, 1, "kernel_size")]
    outs = [int(o) for o in b.scalar(node, 2, "output_size")]
    shape, dt = b.shape(x), b.dtype(x)
    batched = len(shape) == nd + 2
    lead = tuple(shape[: len(shape) - nd]) if batched else (1, *shape[:1])
    sizes = [static_dim(d, "fractional_max_pool input", node) for d in shape[-nd:]]
    column = (1, 0) if nd == 2 else (0, 1, 2)  # the sample column of each spatial axis
    ct = compute_dtype(dt)
    u = b.cast(samples, ct)
    flat: Ref | None = None
    for axis in range(nd):
        pos = _window_rows(b, u, column[axis], sizes[axis], outs[axis], kernel[axis], lead, ct)  # (*lead, o, k)
        laid = tuple(outs[axis] if j == axis else kernel[axis] if j == nd + axis else 1 for j in range(2 * nd))
        pos = b.emit(Reshape(pos, (*lead, *laid)), (*lead, *laid), "i64")
        stride = math.prod(sizes[axis + 1 :])
        if stride != 1:
            pos = op(b, "mul", pos, Lit(stride, "i64"), (*lead, *laid), "i64")
        # The axes so far broadcast against this one (the full grid only once every axis is in).
        flat = pos if flat is None else op(b, "add", flat, pos, broadcast(b.shape(flat), b.shape(pos)), "i64")
    assert flat is not None
    n_in, n_out, kk = math.prod(sizes), math.prod(outs), math.prod(kernel)
    flat = b.emit(Reshape(flat, (*lead, n_out * kk)), (*lead, n_out * kk), "i64")
    plane = b.emit(Reshape(x, (*lead, n_in)), (*lead, n_in), dt)
    win = b.emit(Gather(plane, 2, flat), (*lead, n_out * kk), dt)
    win = b.emit(Reshape(win, (*lead, n_out, kk)), (*lead, n_out, kk), dt)
    flat = b.emit(Reshape(flat, (*lead, n_out, kk)), (*lead, n_out, kk), "i64")
    pick = window_argmax(b, win)
    values = b.emit(Gather(win, 3, pick), (*lead, n_out, 1), dt)
    index = b.emit(Gather(flat, 3, pick), (*lead, n_out, 1), "i64")
    return (
        b.emit(Reshape(values, node.meta.shape), node.meta.shape, dt),
        b.emit(Reshape(index, node.meta_at(1).shape), node.meta_at(1).shape, "i64"),
    )


def _window_rows(b: Builder, u: Ref, column: int, n: int, o: int, k: int, lead: Sequence[Dim], ct: str) -> Ref:
    """Positions ``[*lead, o, k]`` of the rows each window covers along one spatial axis."""
    sample = b.emit(Slice(u, 2, column, column + 1, 1), (*lead, 1), ct)
    if b.shape(u)[:2] != tuple(lead):
        sample = b.emit(Reshape(sample, (*lead, 1)), (*lead, 1), ct)
    if o > 1:
        alpha = (n - k) / (o - 1)
        i = b.emit(Cast(b.emit(Arange(0, o, 1, "i64"), (o,), "i64"), ct), (o,), ct)
        moved = op(b, "mul", op(b, "add", i, sample, (*lead, o), ct), alpha, (*lead, o), ct)
        base = op(b, "mul", sample, alpha, (*lead, 1), ct)
        start = op(b, "sub", b.emit(Cast(moved, "i64"), (*lead, o), "i64"), b.emit(Cast(base, "i64"), (*lead, 1), "i64"),
                   (*lead, o), "i64")  # fmt: skip
        is_last = op(b, "eq", b.emit(Arange(0, o, 1, "i64"), (o,), "i64"), Lit(o - 1, "i64"), (o,), "i64")
        start = b.emit(Where(is_last, Lit(n - k, "i64"), start), (*lead, o), "i64")
    else:
        start = b.emit(Full(n - k, (*lead, o), "i64"), (*lead, o), "i64")
    steps = b.emit(Reshape(b.emit(Arange(0, k, 1, "i64"), (k,), "i64"), (1, k)), (1, k), "i64")
    start = b.emit(Reshape(start, (*lead, o, 1)), (*lead, o, 1), "i64")
    return op(b, "add", start, steps, (*lead, o, k), "i64")
