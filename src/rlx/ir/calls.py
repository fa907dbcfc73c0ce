"""The Call vocabulary: everything an engine or the code generator needs, nothing about aten.

Conventions shared by every Call:
- operands are already in the dtype the computation happens in (lowering inserts ``Cast``),
  so engines never re-derive PyTorch's promotion rules;
- elementwise Calls broadcast like numpy/PyTorch;
- axes are non-negative.
"""

from __future__ import annotations

from rlx.ir.program import Call, Operand, Ref
from rlx.ir.symbolic import Dim

# Elementwise function names understood by Unary / Binary. Engines implement each one.
UNARY_FNS = (
    "neg", "abs", "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "reciprocal",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "sigmoid", "relu", "silu", "gelu", "gelu_tanh", "erf", "floor", "ceil", "round", "trunc",
    "sign", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite", "identity", "square",
    "hardsigmoid", "hardswish", "mish", "softplus", "relu6", "elu", "selu", "exp2", "signbit", "angle",
    "real", "imag", "frexp_mantissa", "frexp_exponent",
)  # fmt: skip
BINARY_FNS = (
    "add", "sub", "mul", "div", "floor_divide", "trunc_divide", "remainder", "fmod", "pow",
    "maximum", "minimum", "fmax", "fmin", "atan2", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "left_shift", "right_shift", "copysign", "hypot", "nextafter", "gcd", "lcm", "complex",
)  # fmt: skip
# Special functions understood by Special (one operand, then two).
SPECIAL_UNARY_FNS = (
    "lgamma", "digamma", "trigamma", "erfc", "erfcx", "erfinv", "ndtri", "log_ndtr", "i0", "i0e", "i1", "i1e",
    "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
    "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "airy_ai",
)  # fmt: skip
SPECIAL_BINARY_FNS = (
    "polygamma", "zeta", "igamma", "igammac",
    "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
    "laguerre_polynomial_l", "legendre_polynomial_p",
)  # fmt: skip
REDUCE_FNS = ("sum", "mean", "prod", "amax", "amin", "any", "all", "var", "std", "xor")
# The Call families, one per section of this file and in its order. Every per-family tree names its
# modules by them (frontends/aten, frontends/onnx, exporters/onnx, kernels: ``<family>.py`` or
# ``<family>_<topic>.py``), so a Call's lowering, import, emitter and kernel are found under one name
# (tests/test_families.py checks both the trees and these headers).
FAMILIES: tuple[str, ...] = (
    "elementwise", "special", "creation", "random", "movement", "linalg", "reduce", "nn", "resample",
    "ordering", "selection", "scatter", "spectral",
)  # fmt: skip


# ── elementwise: per-element functions, broadcasting ──────────────────────────
class Unary(Call):
    """``fn(x)`` elementwise for ``fn`` in ``UNARY_FNS``, with PyTorch's value at every edge (NaN, ±inf, ±0, integer overflow)."""

    fn: str
    x: Operand


class Binary(Call):
    """``fn(x, y)`` elementwise and broadcasting for ``fn`` in ``BINARY_FNS``; integer division and remainder follow PyTorch's signs."""

    fn: str
    x: Operand
    y: Operand


class Where(Call):
    """``x`` where ``cond`` holds, else ``y``, all three broadcast together."""

    cond: Operand
    x: Operand
    y: Operand


class Clamp(Call):
    """``min(max(x, lo), hi)`` with NaN propagated like ``torch.clamp``; ``None`` bounds are open."""

    x: Operand
    lo: Operand | None
    hi: Operand | None


class LeakyRelu(Call):
    """``x`` where ``x > 0``, else ``slope * x`` (NaN stays NaN)."""

    x: Operand
    slope: float


class Cast(Call):
    """``x`` converted to ``dtype`` as ``Tensor.to`` does: floats to integers truncate toward zero, to bool is ``!= 0``."""

    x: Operand
    dtype: str


class Bitcast(Call):
    """The bits of ``x`` reinterpreted as ``dtype``, which has the same width (float32 ↔ int32, int8 → uint8)."""

    x: Ref
    dtype: str


# ── special: torch.special's functions ────────────────────────────────────────
class Special(Call):
    """A special function of PyTorch's ``torch.special`` family (``SPECIAL_FNS``), elementwise and
    broadcasting: ``fn(x)``, or ``fn(x, y)`` where ``y`` is the second argument (``zeta``'s q,
    ``igamma``'s x, a polynomial's degree n, ``polygamma``'s order). Operands come in the float
    dtype the result has; PyTorch's own edge cases (poles, NaN, integer degrees) are part of ``fn``."""

    fn: str
    x: Operand
    y: Operand | None


# ── creation: tensors made from a Call's fields alone ─────────────────────────
class Full(Call):
    """A tensor of ``shape`` and ``dtype`` holding ``value`` everywhere."""

    value: bool | int | float
    shape: tuple[Dim, ...]
    dtype: str


class Arange(Call):
    """``start, start + step, …`` up to but excluding ``end``, in ``dtype`` (``torch.arange``'s length rule)."""

    start: Dim | float
    end: Dim | float
    step: Dim | float
    dtype: str


# ── random: counter-based random words ────────────────────────────────────────
class RandomBits(Call):
    """Independent, uniformly distributed 32-bit words (``u32``) of ``shape``, drawn from the
    generator ``state`` (an ``i64[2]`` of key and counter, one per program, advanced once per call):
    Threefry-2x32-20 of the element indices under the key folded with the counter and ``stream``,
    the draw's own number within the program (``rlx.kernels.random``). Same state, same words, on
    every engine."""

    state: Ref
    shape: tuple[Dim, ...]
    stream: int


# ── movement: shape and data movement ─────────────────────────────────────────
class Reshape(Call):
    """The elements of ``x`` in row-major order, viewed as ``shape`` (same element count)."""

    x: Ref
    shape: tuple[Dim, ...]


class Permute(Call):
    """``x`` with its axes reordered: result axis ``i`` is input axis ``perm[i]``."""

    x: Ref
    perm: tuple[int, ...]


class Expand(Call):
    """``x`` broadcast to ``shape`` (size-1 axes repeated, leading axes added)."""

    x: Operand
    shape: tuple[Dim, ...]


class Slice(Call):
    """``x[start:stop:step]`` along ``axis``; bounds already clamped to the axis, step ≥ 1."""

    x: Ref
    axis: int
    start: Dim
    stop: Dim
    step: int


class Concat(Call):
    """The operands joined along ``axis``; every other extent agrees."""

    xs: tuple[Ref, ...]
    axis: int


class Pad(Call):
    """Constant padding; ``pads[i] = (before, after)`` for axis ``i`` (negative crops)."""

    x: Ref
    pads: tuple[tuple[Dim, Dim], ...]
    value: bool | int | float


class IndexSelect(Call):
    """``x.index_select(axis, index)`` generalised to an index of any shape (embedding)."""

    x: Ref
    axis: int
    index: Ref


class Gather(Call):
    """``torch.gather``: ``out[i][j] = x[index[i][j]][j]`` along ``axis``."""

    x: Ref
    axis: int
    index: Ref


class Index(Call):
    """Advanced indexing ``x[indices]``, one entry per leading axis (``None`` = take all)."""

    x: Ref
    indices: tuple[Ref | None, ...]


# ── linalg: linear algebra ────────────────────────────────────────────────────
class MatMul(Call):
    """``numpy.matmul`` semantics (batched, broadcasting batch dims)."""

    x: Ref
    y: Ref


class Linear(Call):
    """``x @ weight.T + bias`` with ``weight`` stored as ``[out, in]`` like ``nn.Linear``."""

    x: Ref
    weight: Ref
    bias: Operand | None


class Svd(Call):
    """One part of the singular value decomposition ``x = U·diag(S)·Vh`` of the matrices in the
    last two axes: ``part`` is u / s / vh; S is in descending order. ``full_matrices``: U and Vh
    are square (else ``k = min(m, n)`` columns of U and rows of Vh). The parts of one ``x`` come
    from the same deterministic factorisation, so their signs agree with each other."""

    x: Ref
    part: str
    full_matrices: bool


class Det(Call):
    """Of the square matrices in the last two axes: ``part`` det (the determinant), sign or
    logabsdet (``slogdet``: sign 0 and logabsdet -inf for a singular matrix)."""

    x: Ref
    part: str


class LuFactor(Call):
    """LU factorisation with partial pivoting of the matrices in the last two axes, as LAPACK's
    ``getrf`` (the pivot of a column is its first entry of largest magnitude): ``part`` lu (L
    below the diagonal, unit diagonal implied, U on and above it), pivots (int32, 1-based: row
    ``j`` was swapped with row ``pivots[j]`` at step ``j``) or info (int32: 1 + the first step
    whose pivot is zero, 0 when there is none)."""

    x: Ref
    part: str


class LuPermutation(Call):
    """LAPACK pivots (int32, 1-based, ``[..., k]``) as the int64 permutation ``perm`` (``[..., size]``)
    they apply: ``x[perm]`` is ``x`` with the row swaps done in order, so ``A[perm] = L·U``."""

    pivots: Ref
    size: int


class TriangularSolve(Call):
    """``x`` with ``a @ x = b`` for triangular ``a`` (the lower triangle, or the upper one with
    ``upper``; the other triangle is never read; ``unitriangular``: the diagonal is taken as ones),
    by substitution as BLAS ``trsm`` (a zero on the diagonal gives inf/NaN). Batch axes broadcast."""

    a: Ref
    b: Ref
    upper: bool
    unitriangular: bool


class Cholesky(Call):
    """The Cholesky factor of the symmetric positive definite matrices in the last two axes: lower
    ``L`` with ``A = L·Lᵀ`` (``upper``: ``Lᵀ``); only the lower triangle of ``A`` is read."""

    x: Ref
    upper: bool


class Qr(Call):
    """One part (q / r) of the Householder QR of the matrices in the last two axes, with LAPACK's
    signs (``geqrf``: R's diagonal may be negative). ``complete``: Q is square (else ``[m, k]``)."""

    x: Ref
    part: str
    complete: bool


class Eigh(Call):
    """One part of the eigendecomposition of the symmetric matrices in the last two axes (only
    the ``lower`` — else upper — triangle is read): ``part`` values (ascending) or vectors (columns)."""

    x: Ref
    part: str
    lower: bool


class Geqrf(Call):
    """LAPACK's Householder QR (``geqrf``) of the matrices in the last two axes, in its packed
    form: ``part`` a (R on and above the diagonal, the reflectors' vectors below it, their leading
    1 implied) or tau (``[..., min(m, n)]``: ``Hᵢ = I - τᵢ·vᵢ·vᵢᴴ``, and ``Q = H₀·H₁·…``)."""

    x: Ref
    part: str


class Eig(Call):
    """One part of the eigendecomposition of the (general, real or complex) square matrices in the
    last two axes, as LAPACK's ``geev``: ``part`` values (complex, in LAPACK's order) or vectors
    (complex columns of unit norm whose largest entry is real; each is defined only up to its sign,
    which LAPACK builds choose differently)."""

    x: Ref
    part: str


class LdlFactor(Call):
    """LAPACK's Bunch-Kaufman LDLᵀ (``sytrf``; LDLᴴ, ``hetrf``, for a complex ``hermitian`` one)
    of the symmetric matrices in the last two axes, reading their lower triangle: ``part`` ld (the
    compact L and block-diagonal D, zero above the diagonal), pivots (int32, LAPACK's 1-based
    ``ipiv``: negative for the rows of a 2×2 block) or info (int32: 1 + the first zero pivot, else 0)."""

    x: Ref
    part: str
    hermitian: bool


class LdlSolve(Call):
    """``x`` with ``A·x = b`` for ``A`` given as an ``LdlFactor`` (ld, pivots), as LAPACK's
    ``sytrs`` (``hetrs`` for a complex ``hermitian`` one). Batch axes broadcast."""

    ld: Ref
    pivots: Ref
    b: Ref
    hermitian: bool


class MatrixExp(Call):
    """The matrix exponential of the square matrices in the last two axes."""

    x: Ref


# ── reduce: reductions ────────────────────────────────────────────────────────
class Reduce(Call):
    """Reduce over ``axes`` (all axes when empty). ``correction`` is used by var/std only; ``xor``
    (integers only) folds the bit patterns with exclusive or (0 over an empty slice)."""

    fn: str
    x: Ref
    axes: tuple[int, ...]
    keepdim: bool
    correction: float = 0.0


class ReduceAxes(Call):
    """``Reduce`` over the axes a run-time int64 tensor names (ONNX's Reduce* whose ``axes`` input
    is a model input or computed from one). Negative axes count from the end; ``fn`` is sum, mean,
    prod, amax or amin. The result's rank is known (the input's with ``keepdim``, else less the
    static length of ``axes``); which extents it has depends on the values, so they are sizes
    bound when it runs, as a data-dependent result's are."""

    fn: str
    x: Ref
    dims: Ref  # the axes (named apart from the static ``axes`` fields the validator range-checks)
    keepdim: bool


class ArgReduce(Call):
    """``argmax`` / ``argmin`` along ``axis`` (``None`` = over the flattened tensor)."""

    fn: str
    x: Ref
    axis: int | None
    keepdim: bool


# ── nn: neural-network blocks ─────────────────────────────────────────────────
class Softmax(Call):
    """Softmax (``log``: log-softmax) along ``axis``, computed stably in the operand's float dtype."""

    x: Ref
    axis: int
    log: bool


class LayerNorm(Call):
    """Normalise over the trailing ``ndim`` axes, then scale and shift."""

    x: Ref
    weight: Ref | None
    bias: Ref | None
    ndim: int
    eps: float


class RmsNorm(Call):
    """``x / sqrt(mean(x², trailing ndim axes) + eps)``, then scaled by ``weight`` (``torch.nn.functional.rms_norm``)."""

    x: Ref
    weight: Ref | None
    ndim: int
    eps: float


class BatchNorm(Call):
    """Inference batch norm with running statistics over channel axis 1."""

    x: Ref
    mean: Ref
    var: Ref
    weight: Ref | None
    bias: Ref | None
    eps: float


class GroupNorm(Call):
    """Normalise each of ``groups`` channel groups of axis 1 over its channels and spatial axes, then scale and shift per channel."""

    x: Ref
    weight: Ref | None
    bias: Ref | None
    groups: int
    eps: float


class Conv(Call):
    """N-d convolution (N = weight rank − 2), NC… layout, weight ``[out, in/groups, *k]``."""

    x: Ref
    weight: Ref
    bias: Ref | None
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    transposed: bool
    output_padding: tuple[int, ...]


class MaxPool(Call):
    """Max pooling over the trailing spatial axes; ``indices`` returns flat argmax positions instead."""

    x: Ref
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    ceil_mode: bool
    indices: bool = False


class AvgPool(Call):
    """Average pooling over the trailing spatial axes with ``torch.nn.functional.avg_pool*``'s padding, ``ceil_mode`` window and divisor rules."""

    x: Ref
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    ceil_mode: bool
    count_include_pad: bool
    divisor_override: int | None


class AdaptiveAvgPool(Call):
    """Average pooling to ``output_size`` over the trailing axes, with PyTorch's adaptive window bounds (floor start, ceil end)."""

    x: Ref
    output_size: tuple[Dim, ...]


class Attention(Call):
    """Scaled dot-product attention over ``[..., L, E]`` queries and ``[..., S, E]`` keys.

    ``mask`` is boolean (True = attend) or additive float; ``causal`` applies a lower-triangular
    mask aligned to the top-left, as PyTorch does; ``gqa`` repeats key/value heads to match queries.
    """

    q: Ref
    k: Ref
    v: Ref
    mask: Ref | None
    causal: bool
    scale: float
    gqa: bool


class Recurrent(Call):
    """A recurrent layer (ONNX's ``RNN``, ``GRU`` or ``LSTM``, ``layout`` 0) run step by step over a
    sequence whose length is known only when the model runs.

    ``x`` is ``[T, B, I]``; ``w`` ``[D, G·H, I]``, ``r`` ``[D, G·H, H]``, ``bias`` ``[D, 2·G·H]``
    (input then recurrent biases), ``h0`` / ``c0`` ``[D, B, H]``, ``peep`` ``[D, 3·H]``, with ONNX's
    gate orders (LSTM: i o f c; GRU: z r h). ``activations`` names ``len(per cell) · D`` functions
    (lower case: relu tanh sigmoid softplus softsign affine scaledtanh hardsigmoid leakyrelu) with
    ``alphas`` / ``betas`` one per function, defaults filled in. The result packs every output into
    one ``[T + 2, D, B, H]`` tensor: rows ``:T`` are Y, row ``T`` the final hidden state, row
    ``T + 1`` the final cell state (zeros for RNN and GRU), so one run of the recurrence gives all three.
    """

    cell: str  # rnn | gru | lstm
    x: Ref
    w: Ref
    r: Ref
    bias: Ref | None
    h0: Ref | None
    c0: Ref | None
    peep: Ref | None
    hidden: int
    direction: str  # forward | reverse | bidirectional
    activations: tuple[str, ...]
    alphas: tuple[float, ...]
    betas: tuple[float, ...]
    clip: float | None
    linear_before_reset: bool
    input_forget: bool


# ── resample: resampling ──────────────────────────────────────────────────────
class Upsample(Call):
    """Resize the trailing ``len(size)`` spatial axes to ``size``.

    ``mode`` is nearest / nearest_exact / linear (1-d: linear, 2-d: bilinear, 3-d: trilinear) /
    bicubic. ``scales`` are the user's scale factors when PyTorch uses them to map output to input
    coordinates (``None`` per axis = use in/out extents). ``antialias`` widens the filter when
    downsampling, as ``_upsample_bilinear2d_aa`` / ``_upsample_bicubic2d_aa`` do.
    """

    x: Ref
    mode: str
    size: tuple[Dim, ...]
    scales: tuple[float | None, ...]
    align_corners: bool
    antialias: bool


class GridSample(Call):
    """``F.grid_sample`` on ``[N, C, *spatial]`` input (2 or 3 spatial axes) with an
    ``[N, *out, nd]`` grid of (x, y[, z]) in [-1, 1] (x indexes the last axis).

    ``mode``: bilinear / nearest / bicubic (2-d only); ``padding``: zeros / border / reflection.
    """

    x: Ref
    grid: Ref
    mode: str
    padding: str
    align_corners: bool


# ── ordering: ordering and scans ──────────────────────────────────────────────
class ArgTopK(Call):
    """Indices (int64) of the ``k`` largest (or smallest) entries along ``axis``; values are a Gather."""

    x: Ref
    k: Dim
    axis: int
    largest: bool
    sorted: bool


class ArgSort(Call):
    """Indices (int64) that sort ``x`` along ``axis``; ``stable`` keeps the order of equal entries."""

    x: Ref
    axis: int
    descending: bool
    stable: bool


class SearchSorted(Call):
    """int64 insertion points of ``values`` in ``sorted`` (ascending along its last axis): the
    number of entries ``< v`` (``right``: ``<= v``). A 1-d ``sorted`` serves values of any shape;
    otherwise both share their leading axes and ``values`` lists its queries on the last one."""

    sorted: Ref
    values: Ref
    right: bool


class CumReduce(Call):
    """Inclusive scan along ``axis``: ``fn`` is sum / prod / max / min / logsumexp;
    ``indices`` returns the int64 position of the running max/min instead of its value."""

    fn: str
    x: Ref
    axis: int
    indices: bool = False


class Flip(Call):
    """``x`` reversed along each of ``axes``."""

    x: Ref
    axes: tuple[int, ...]


class Roll(Call):
    """``torch.roll`` with one shift per axis (already normalised; empty axes = flattened roll)."""

    x: Ref
    shifts: tuple[int, ...]
    axes: tuple[int, ...]


# ── selection: results whose size depends on the data ─────────────────────────
# A result extent that is a bare data symbol (``u0``) is bound at run time from the result itself;
# the JAX engine, which compiles fixed shapes, refuses programs that have any.
class Nonzero(Call):
    """``torch.nonzero``: the int64 coordinates ``[n, rank]`` of the non-zero entries, row-major order."""

    x: Ref


class NonzeroStatic(Call):
    """``torch.nonzero_static``: ``Nonzero`` cut or padded with ``fill`` to ``size`` rows (a static shape)."""

    x: Ref
    size: int
    fill: int


class MaskedSelect(Call):
    """``torch.masked_select``: the entries of ``x`` where ``mask`` is true (both broadcast), as a vector."""

    x: Ref
    mask: Ref


class Unique(Call):
    """One result of ``torch.unique`` / ``unique_consecutive`` / ``unique_dim`` / ONNX ``Unique``
    (``part``: values, indices (of each value's first occurrence), inverse or counts). Values come
    sorted, or with ``sorted`` False in the order they first occur (``consecutive``: runs of equal
    entries collapse, in order); ``axis`` None works on the flattened tensor, else on the slices
    along ``axis``."""

    x: Ref
    part: str
    consecutive: bool
    axis: int | None
    sorted: bool = True


class NonMaxSuppression(Call):
    """ONNX ``NonMaxSuppression``: per batch and class, boxes in descending score order (ties: lower
    index first), each kept unless its IoU with a box already kept exceeds ``iou_threshold``; at
    most ``max_per_class`` per class, only scores above ``score_threshold`` when it is given. The
    result is [n, 3] int64 rows (batch, class, box); n depends on the data. ``boxes`` [B, N, 4] are
    corners (y1, x1, y2, x2, either order) or, with ``center_point_box``, (x, y, width, height);
    ``scores`` [B, C, N]; the three limits are scalars (or one-element tensors)."""

    boxes: Ref
    scores: Ref
    max_per_class: Operand
    iou_threshold: Operand
    score_threshold: Operand | None
    center_point_box: bool


class Bincount(Call):
    """``torch.bincount``: occurrences (or summed ``weights``) of each value of the int vector
    ``x``; ``max(x) + 1`` entries, at least ``minlength``."""

    x: Ref
    weights: Ref | None
    minlength: int


class Histc(Call):
    """``torch.histc``: ``bins`` equal-width bins over ``[lo, hi]`` (the data's own range when
    ``lo == hi``); entries outside are ignored, ``hi`` itself falls in the last bin."""

    x: Ref
    bins: int
    lo: float
    hi: float


class GroupedMatMul(Call):
    """``out[r] = x[r] @ w[g(r)]`` where the rows of ``x`` are sorted by group and ``offsets[g]``
    is the cumulative row count through group ``g`` (``torch._grouped_mm`` with 2-d ``x``,
    transformers' ``grouped_mm_fallback``); rows past the last offset are zero."""

    x: Ref
    w: Ref
    offsets: Ref


# ── scatter: scatter and diagonals ────────────────────────────────────────────
class IndexPut(Call):
    """``out = x.copy(); out[indices] = values``: one entry per leading axis (``None`` = the whole
    axis; integer indices broadcast, bool masks select their ``True`` positions). ``values``
    broadcasts to ``x[indices]``; ``accumulate`` adds instead, summing repeated positions."""

    x: Ref
    indices: tuple[Ref | None, ...]
    values: Operand
    accumulate: bool


class Scatter(Call):
    """``torch.scatter_reduce`` along ``axis``: for every position ``p`` of ``index``, the output
    entry at ``p`` with ``p[axis] = index[p]`` combines ``src[p]`` (a 0-d ``src`` broadcasts).
    ``reduce``: none (overwrite) / sum / prod / amax / amin / mean (floor division for integers);
    without ``include_self`` the entries written to start from the first value scattered there."""

    x: Ref
    axis: int
    index: Ref
    src: Operand
    reduce: str
    include_self: bool = True


class Diagonal(Call):
    """``torch.diagonal``: the entries ``(i, i + offset)`` of axes ``axis1``/``axis2``, which are
    removed, laid along a new last axis."""

    x: Ref
    offset: int
    axis1: int
    axis2: int


# ── spectral: Fourier transforms ──────────────────────────────────────────────
class Fft(Call):
    """Discrete Fourier transform over ``axes`` (``torch.fft``'s ``_fft_r2c`` / ``_fft_c2r`` / ``_fft_c2c``).

    ``kind``: r2c (real in, complex out; ``onesided`` keeps only the ``n // 2 + 1`` non-negative
    frequencies of the last axis), c2r (a onesided spectrum in, real out with ``last_size``
    entries on the last axis; the spectrum is taken as Hermitian, so the imaginary parts it cannot
    have are ignored), c2c. ``forward`` is the direction (``e^{-2πi·}`` forward, ``e^{+2πi·}``
    inverse): rfft is a forward r2c and ihfft an inverse one, irfft an inverse c2r and hfft a
    forward one. ``norm`` scales the sum, whatever the direction: none (1), ortho (1/√n) or by_n
    (1/n), with ``n`` the product of the signal sizes along ``axes`` — PyTorch's ``fft_norm_mode``.
    """

    x: Ref
    kind: str
    axes: tuple[int, ...]
    norm: str
    forward: bool
    onesided: bool = True
    last_size: int | None = None


class Conj(Call):
    """The complex conjugate (``torch.conj_physical``); a real tensor is returned unchanged."""

    x: Ref
