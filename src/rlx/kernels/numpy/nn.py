"""The numpy engine's own algorithms for the neural-network Calls (same contracts as the shared
definitions, planned for numpy's speed):

- convolution as im2col over a strided view of a zero-padded buffer plus one batched GEMM (for
  depthwise: a dense matrix per channel on small maps, banded GEMMs or a multiply-add per tap on
  larger ones), its geometry worked out once (``conv_plan``);
- max pooling one spatial axis at a time over strided views (``max_pool_plan``), average pooling
  over sliding windows;
- LayerNorm / RmsNorm statistics as BLAS matrix-vector products with a 1/n column (``norm_plan``):
  numpy's reductions over short trailing axes are slow;
- attention with the scores held transposed, softmax'ed in place, the output normalised after the
  product with V.

``conv_plan``, ``max_pool_plan`` and ``norm_plan`` are also what the executor binds at load
(``rlx.runtime.numpy_engine.fused``), so the generic kernel and the bound path are one code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ...kernels import geometry
from ...kernels.precision import lowest, widen
from ...kernels.registry import Kernel
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import Attention, AvgPool, Conv, LayerNorm, MaxPool, RmsNorm


# Below this many bytes a fresh array costs less than passing ``out=`` (numpy's allocation cache).
INPLACE_MIN_BYTES = 64 * 1024


@override("LayerNorm")
def layer_norm(c: LayerNorm, x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
    xw = widen(x)
    run = norm_plan(xw.shape, xw.dtype, c.ndim, c.eps)
    return run(xw, None if w is None else widen(w), None if b is None else widen(b)).astype(x.dtype, copy=False)


@override("RmsNorm")
def rms_norm(c: RmsNorm, x: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    xw = widen(x)
    return norm_plan(xw.shape, xw.dtype, c.ndim, c.eps, rms=True)(xw, None if w is None else widen(w)).astype(
        x.dtype, copy=False
    )


# Rows at least this long are copied row-major out of a transposed view before a norm (``norm_plan``).
LONG_ROWS = 64


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
    rows_shape, flat_rows = lead + (n,), (math.prod(lead), n)
    column = _mean_column(n, np.dtype(dtype))

    def rows_of(x: np.ndarray) -> np.ndarray:
        """``x`` as rows: a view, batched like ``x``'s leading axes; copied into one C-ordered
        ``[rows, n]`` matrix when ``x`` is a transposed view (a channels-first LayerNorm exports
        as permute → LayerNorm → permute) over rows of ``LONG_ROWS`` or more. The row products
        then are one matrix-vector product, not one per leading index, and the result comes out
        row-major, as the Linear after a channels-last LayerNorm reads it (measured on ConvNeXt's
        LayerNorm + reshape at batch 8: [8,8,8,64] 62 → 54 µs, [8,4,4,128] 51 → 30, [8,2,2,256]
        61 → 20; shorter rows stay views: [8,16,16,32] took 107 → 121)."""
        if n >= LONG_ROWS and not x.flags.c_contiguous:
            return x.reshape(flat_rows)
        return x.reshape(rows_shape)

    # Large rows: every pass after the first writes into the first one's buffer (the same values,
    # in the same order, as fresh arrays: what it saves is the allocations and their page faults).
    inplace = math.prod(shape) * np.dtype(dtype).itemsize >= INPLACE_MIN_BYTES

    if rms:

        def rms_norm_run(x: np.ndarray, w: np.ndarray | None) -> np.ndarray:
            rows = rows_of(x)
            y = (rows * _rsqrt_plus((rows * rows) @ column, eps)).reshape(shape)
            if w is None:
                return y
            return np.multiply(y, w, out=y) if inplace else y * w

        return rms_norm_run

    def layer(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
        rows = rows_of(x)
        centered = rows - rows @ column
        inv = _rsqrt_plus((centered * centered) @ column, eps)
        if not inplace:
            y = (centered * inv).reshape(shape)
            y = y if w is None else y * w
            return y if b is None else y + b
        y = np.multiply(centered, inv, out=centered).reshape(shape)
        if w is not None:
            np.multiply(y, w, out=y)
        if b is not None:
            np.add(y, b, out=y)
        return y

    return layer


def _rsqrt_plus(var: np.ndarray, eps: float) -> np.ndarray:
    """``1 / sqrt(var + eps)`` of a column of row statistics, overwriting it."""
    np.add(var, eps, out=var)
    np.sqrt(var, out=var)
    return np.divide(1, var, out=var)


def _buffer_plan(
    x_shape: tuple[int, ...], windows: tuple[geometry.AxisWindows, ...], fill: float | int | bool, dtype: np.dtype
) -> Kernel:
    """``x`` → the buffer its clipped windows read: each spatial axis cropped to ``[start, stop)`` and
    padded with ``fill`` (a view of ``x`` itself when nothing is padded)."""
    nd = len(windows)
    lead = x_shape[: len(x_shape) - nd]
    crop = (Ellipsis,) + tuple(slice(w.start, w.stop) for w in windows)
    if not any(w.pad_lo or w.pad_hi for w in windows):
        if all(w.start == 0 and w.stop == size for w, size in zip(windows, x_shape[len(x_shape) - nd :])):
            return lambda x: x
        return lambda x: x[crop]
    shape = lead + tuple(w.extent for w in windows)
    interior = (Ellipsis,) + tuple(slice(w.pad_lo, w.pad_lo + w.stop - w.start) for w in windows)
    # np.full + one assignment: np.pad's generality costs several times more on small tensors.
    if fill == 0:

        def zero_padded(x: np.ndarray) -> np.ndarray:
            buf = np.zeros(shape, dtype)
            buf[interior] = x[crop]
            return buf

        return zero_padded

    def padded(x: np.ndarray) -> np.ndarray:
        buf = np.full(shape, fill, dtype)
        buf[interior] = x[crop]
        return buf

    return padded


def _window_view(buf: np.ndarray, windows: tuple[geometry.AxisWindows, ...], taps_first: bool) -> np.ndarray:
    """The windows over the trailing spatial axes of ``buf`` as a strided view: ``[..., *taps, *out]``
    (``taps_first``) or ``[..., *out, *taps]``; entry ``(o, t)`` is ``buf[o·stride + t·dilation]``,
    inside ``buf`` by construction of the clipped windows."""
    nd = len(windows)
    lead = buf.shape[: buf.ndim - nd]
    taps = tuple(w.kernel for w in windows)
    out = tuple(w.out for w in windows)
    sp = buf.strides[buf.ndim - nd :]
    tap_strides = tuple(w.dilation * st for w, st in zip(windows, sp))
    out_strides = tuple(w.stride * st for w, st in zip(windows, sp))
    if taps_first:
        return np.lib.stride_tricks.as_strided(
            buf, lead + taps + out, buf.strides[: buf.ndim - nd] + tap_strides + out_strides
        )
    return np.lib.stride_tricks.as_strided(
        buf, lead + out + taps, buf.strides[: buf.ndim - nd] + out_strides + tap_strides
    )


@override("Conv")
def conv(c: Conv, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if c.transposed:
        return _conv_transpose(c, x, w, b)
    xw = widen(x)
    out = conv_plan(c, x.shape, w.shape, xw.dtype)(xw, widen(w), None if b is None else widen(b))
    return out.astype(x.dtype, copy=False)


def conv_output_shape(c: Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The result shape of a forward convolution ``c``."""
    return geometry.conv_output_shape(x_shape, w_shape, c.stride, c.padding, c.dilation)


def _kept_taps(
    windows: tuple[geometry.AxisWindows, ...], w_shape: tuple[int, ...]
) -> Callable[[np.ndarray], np.ndarray]:
    """``w`` → its kernel taps that ever read the input (all of them, unclipped, in the common case)."""
    ksp = w_shape[2:]
    if all(a.first_tap == 0 and a.kernel == k for a, k in zip(windows, ksp)):
        return lambda w: w
    kept = (slice(None), slice(None)) + tuple(slice(a.first_tap, a.first_tap + a.kernel) for a in windows)
    return lambda w: np.ascontiguousarray(w[kept])


def conv_path(c: Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...], allow_fft: bool = True) -> str:
    """Which way ``conv_plan`` computes a forward conv of these shapes: ``fft`` (long 1-d kernels),
    ``dense`` (depthwise on a small map, a dense matrix per channel), ``banded`` (2-d depthwise as
    banded GEMMs), ``by_tap`` (depthwise, a multiply-add per tap) or
    ``im2col`` (one batched GEMM). Threaded chunks of a conv must take the whole conv's path."""
    nd = len(w_shape) - 2
    cg, og = x_shape[1] // c.groups, w_shape[0] // c.groups
    out_sp = conv_output_shape(c, x_shape, w_shape)[2:]
    windows = geometry.clip_windows(x_shape[2:], w_shape[2:], c.stride, c.padding, c.dilation, out_sp)
    k, p = math.prod(a.kernel for a in windows), math.prod(out_sp)
    if allow_fft and nd == 1 and c.stride == (1,) and c.dilation == (1,) and k >= FFT_MIN_TAPS:
        return "fft"
    if _dense_fits(cg, k, math.prod(x_shape[2:]), p, w_shape[0]):
        return "dense"
    if len(windows) == 2 and cg == 1 and k > 1 and _banded_fits(windows[1]):
        return "banded"
    if _tap_by_tap(cg, og, k, x_shape[0] * x_shape[1] * k * p):
        return "by_tap"
    return "im2col"


def conv_plan(
    c: Conv,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    dtype: np.dtype,
    *,
    allow_fft: bool = True,
    force_path: str = "",
) -> Kernel:
    """A forward (not transposed) convolution of these shapes as ``run(x, w, b)``, its geometry
    worked out once: the executor binds it at load, the generic kernel builds it per call.

    The windows are clipped to the kernel taps that ever read the input (``geometry.clip_axis``:
    padding no tap reads is never built, a kernel larger than the input costs what the input does).
    im2col as ``[C·K, P]`` — one strided copy out of a zero-padded buffer, none for a 1×1 stride-1
    conv — then one batched GEMM with the weight as it is stored, ``[out, in·k]``, so the result
    is NC… already (a 1-d conv over a batch of ``MERGED_BATCH_MIN`` or more: one GEMM over the
    whole batch, ``_batch_gemm``). Depthwise and grouped convs with few channels per group go tap by tap."""
    nd = len(w_shape) - 2
    n, cin, g = x_shape[0], x_shape[1], c.groups
    cout = w_shape[0]
    cg, og = cin // g, cout // g
    out_shape = conv_output_shape(c, x_shape, w_shape)
    out_sp, bias_shape = out_shape[2:], (-1,) + (1,) * nd
    windows = geometry.clip_windows(x_shape[2:], w_shape[2:], c.stride, c.padding, c.dilation, out_sp)
    ksp = tuple(a.kernel for a in windows)
    p, k = math.prod(out_sp), math.prod(ksp)
    buffer = _buffer_plan(x_shape, windows, 0, np.dtype(dtype))
    kept = _kept_taps(windows, w_shape)

    def windows_of(x: np.ndarray) -> np.ndarray:
        return _window_view(np.ascontiguousarray(buffer(x)), windows, taps_first=True)

    path = force_path or conv_path(c, x_shape, w_shape, allow_fft)
    if path == "fft":
        direct = conv_plan(c, x_shape, w_shape, dtype, allow_fft=False)
        return _fft_or_direct(_fft_correlate(g, windows[0], kept), buffer, direct, np.dtype(dtype), bias_shape)
    if path in ("dense", "banded"):
        # 0·inf in the dense matrix would spread one inf or NaN over its plane, in the banded one
        # over its row: such inputs go tap by tap, where each reaches only the windows that read it.
        by_tap_plan = conv_plan(c, x_shape, w_shape, dtype, force_path="by_tap")
        if path == "dense":
            return _finite_or(_depthwise_dense(n, g, og, x_shape[2:], windows), kept, by_tap_plan)
        banded = _depthwise_banded(n, g, og, windows)

        def depthwise(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
            return banded(np.ascontiguousarray(buffer(x)), w, b)

        return _finite_or(depthwise, kept, by_tap_plan)
    if path == "by_tap":
        by_tap = _grouped_by_tap(n, g, cg, og, ksp, out_sp)

        def grouped(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
            out = by_tap(windows_of(x), kept(w))
            return out if b is None else np.add(out, b.reshape(bias_shape), out=out)

        return grouped
    unclipped = all(a.start == 0 and a.stop == size and not a.extent - size for a, size in zip(windows, x_shape[2:]))
    pointwise = k == 1 and all(s == 1 for s in c.stride) and unclipped
    cols_shape, w_mat = (n, g, cg * k, p), (g, og, cg * k)
    if nd == 1 and n >= MERGED_BATCH_MIN and not pointwise:
        return _batch_gemm(windows_of, kept, (n, g, cg, og), ksp, out_sp)

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        cols = (x if pointwise else windows_of(x)).reshape(cols_shape)
        out = np.matmul(kept(w).reshape(w_mat), cols).reshape(out_shape)
        return out if b is None else np.add(out, b.reshape(bias_shape), out=out)

    return run


def _batch_gemm(
    windows_of: Callable[[np.ndarray], np.ndarray],
    kept: Callable[[np.ndarray], np.ndarray],
    sizes: tuple[int, int, int, int],
    ksp: tuple[int, ...],
    out_sp: tuple[int, ...],
) -> Kernel:
    """A 1-d conv's im2col over the whole batch as one GEMM per group, ``[og, cg·k] @ [cg·k, N·P]``
    (``sizes`` = N, groups, cg, og): one large product that OpenBLAS threads well, where N products
    of ``[cg·k, P]`` each are too small to. The Whisper encoder's conv1d pair at batch 8, whole model
    on 2 threads: 0.82–0.96× (five interleaved A/B runs); about even on one thread. The result,
    ``[C_out, N, P]``, is written out as ``[N, C_out, P]`` in the pass that adds the bias (left as a
    strided view, the GELU after it ran 1.7× slower). Not for 2-d convs: ResNet at batch 8 measured
    1.09–1.15× on 2 threads, its 7×7 stem 2.26 → 2.53 ms on one (columns gather slower in this order)."""
    n, g, cg, og = sizes
    nd, k, p = len(ksp), math.prod(ksp), math.prod(out_sp)
    spatial = tuple(range(3, 3 + nd))
    to_cols = (1, 2) + spatial + (0,) + tuple(a + nd for a in spatial)  # [g, cg, *k, N, *out]
    win_shape, cols_shape, w_mat = (n, g, cg) + ksp + out_sp, (g, cg * k, n * p), (g, og, cg * k)
    out_shape = (n, g * og) + out_sp

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        cols = windows_of(x).reshape(win_shape).transpose(to_cols).reshape(cols_shape)
        prod = np.matmul(kept(w).reshape(w_mat), cols).reshape(g * og, n, p).transpose(1, 0, 2)
        out = np.empty(out_shape, prod.dtype)
        if b is None:
            np.copyto(out.reshape(prod.shape), prod)
        else:  # the bias added in the same pass as the transpose
            np.add(prod, b.reshape(1, -1, 1), out=out.reshape(prod.shape))
        return out

    return run


# From this batch size a 1-d im2col conv is one GEMM over the whole batch (``_batch_gemm``).
MERGED_BATCH_MIN = 2


# From this many kept taps a stride-1 1-d conv (wav2vec2's positional conv: 128 taps, 16 groups)
# runs through FFTs: im2col would copy the input once per tap. In float64, so the result is at
# least as exact as the direct sum in float32.
FFT_MIN_TAPS = 48


def _fft_or_direct(
    correlate: Callable[[np.ndarray, np.ndarray], np.ndarray | None],
    buffer: Callable[[np.ndarray], np.ndarray],
    direct: Kernel,
    dtype: np.dtype,
    bias_shape: tuple[int, ...],
) -> Kernel:
    """A long-kernel conv through FFTs, or the ``direct`` plan when an input or weight is inf or
    NaN: an FFT would spread one over the whole output."""

    def long_kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        if not np.isfinite(x).all():
            return direct(x, w, b)
        out = correlate(buffer(x), w)
        if out is None:  # a weight is inf or NaN
            return direct(x, w, b)
        out = out.astype(dtype, copy=False)
        return out if b is None else np.add(out, b.reshape(bias_shape), out=out)

    return long_kernel


def _fft_size(n: int) -> int:
    """The smallest 2^a·3^b·5^c ≥ n: pocketfft is slow on lengths with large prime factors."""
    best = 1 << (n - 1).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            p2 = p35
            while p2 < n:
                p2 *= 2
            best = min(best, p2)
            p35 *= 3
        p5 *= 5
    return best


def _fft_correlate(
    groups: int, a: geometry.AxisWindows, kept: Callable[[np.ndarray], np.ndarray]
) -> Callable[[np.ndarray, np.ndarray], np.ndarray | None]:
    """``out[n, o, p] = Σ_c Σ_t w[o, c, t] · buf[n, c, p + t]`` per group (``w``: the ``kept`` taps
    of the weight), by FFT over the buffer; the weight's spectrum is computed once per weight array
    (None when the weight has an inf or NaN: the caller sums directly)."""
    size, taps, out = _fft_size(a.extent), a.kernel, a.out
    cached: list[tuple[np.ndarray, np.ndarray | None]] = []

    def kernel_spectrum(w: np.ndarray) -> np.ndarray | None:
        if cached and cached[0][0] is w:
            return cached[0][1]
        taps_kept = kept(w)
        spectrum = None
        if np.isfinite(taps_kept).all():
            spectrum = np.fft.rfft(taps_kept[..., ::-1].astype(np.float64), n=size)
            spectrum = spectrum.reshape(groups, w.shape[0] // groups, w.shape[1], -1).transpose(0, 3, 1, 2).copy()
        cached[:] = [(w, spectrum)]
        return spectrum

    def run(buf: np.ndarray, w: np.ndarray) -> np.ndarray | None:
        weights = kernel_spectrum(w)
        if weights is None:
            return None
        n, cout, cg = buf.shape[0], w.shape[0], w.shape[1]
        spectrum = np.fft.rfft(buf.astype(np.float64), n=size).reshape(n, groups, cg, -1)
        # Each group's input channels summed frequency by frequency: [g, F, o, c] @ [n, g, F, c, 1].
        mixed = np.matmul(weights, spectrum.transpose(0, 1, 3, 2)[..., None])[..., 0]
        full = np.fft.irfft(mixed.transpose(0, 1, 3, 2), n=size)  # [n, g, o, size]: valid from taps - 1
        return full[..., taps - 1 : taps - 1 + out].reshape(n, cout, out)

    return run


# Above this many im2col elements (N·C·K·P) a depthwise conv goes tap by tap: the windows copied
# out for the GEMM then cost more memory traffic than a multiply-add per tap over the output.
# Below it the GEMM's few numpy calls beat the tap loop's 2·K (measured on 3×3 to 7×7 depthwise).
TAP_BY_TAP_MIN_COLS = 8 * 2**20


def _tap_by_tap(cg: int, og: int, k: int, cols: int) -> bool:
    """Whether a conv goes tap by tap (a multiply-add per kernel tap) rather than im2col + one
    batched GEMM: only depthwise convs (one input channel per group) with ``cols`` im2col elements
    or more."""
    return k > 1 and cg == 1 and og <= 4 and cols >= TAP_BY_TAP_MIN_COLS


# A banded matrix wastes (buffer width / kernel width) multiply-adds on zeros; BLAS still wins
# while that stays below this factor (measured on 3×3 to 7×7 depthwise convs, maps 2×2 to 56×56).
BANDED_MAX_WASTE = 12


def _banded_fits(a: geometry.AxisWindows) -> bool:
    return a.extent <= BANDED_MAX_WASTE * a.kernel


# A depthwise conv whose input plane has at most this many elements, and at most twice as many as
# its kept taps, is one dense matrix per channel, [H·W, og·Ho·Wo], applied to the unpadded input in
# one batched GEMM: no padded buffer, no window copy, and H·W multiply-adds per output. Measured at
# batch 8 (µs, banded → dense): ConvNeXt's 7×7 on 8×8 maps 195 → 56, 4×4 214 → 33, 2×2 176 → 41;
# SegFormer's 3×3 on 4×4 269 → 134, on 2×2 279 → 119. Slower, hence the limits: 3×3 on 8×8 (64
# elements for 9 taps: 311 → 373, at batch 1 75 → 241) and 7×7 on 16×16 (2.2×). The matrices are
# capped at DENSE_MAX_ELEMENTS in all.
DENSE_MAX_PLANE = 64
DENSE_MAX_PER_TAP = 2
DENSE_MAX_ELEMENTS = 1 << 22


def _dense_fits(cg: int, k: int, plane: int, p: int, cout: int) -> bool:
    """Whether a conv with ``cg`` input channels per group, ``k`` kept taps, a ``plane``-element
    input map, ``p`` outputs per map and ``cout`` output channels goes through dense matrices."""
    small = plane <= DENSE_MAX_PLANE and plane <= DENSE_MAX_PER_TAP * k
    return cg == 1 and k > 1 and small and cout * plane * p <= DENSE_MAX_ELEMENTS


def _finite_or(
    matrix_conv: Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray],
    kept: Callable[[np.ndarray], np.ndarray],
    fallback: Kernel,
) -> Kernel:
    """``matrix_conv`` (a dense or banded depthwise conv, on the kept taps) for finite inputs,
    ``fallback`` for any other."""

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return matrix_conv(x, kept(w), b) if np.isfinite(x).all() else fallback(x, w, b)

    return run


def _depthwise_dense(
    n: int, g: int, og: int, in_sp: tuple[int, ...], windows: tuple[geometry.AxisWindows, ...]
) -> Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]:
    """A depthwise conv (one input channel per group, ``og`` outputs each) as ``x [C, N, H·W]`` times
    a dense matrix per channel ``[C, H·W, og·P]`` that holds each output's kept taps at the input
    positions they read (``geometry.window_positions``: the padding is never built). Called with
    the kept taps of the weight; the matrix is built once per weight array. Only for finite
    inputs: an inf or NaN would reach every output of its plane through the matrix's zeros (the
    caller goes tap by tap then)."""
    out_sp = tuple(a.out for a in windows)
    plane, p = math.prod(in_sp), math.prod(out_sp)
    positions = geometry.window_positions(in_sp, windows).reshape(p, -1)
    out_index, tap_index = np.nonzero(positions >= 0)
    in_index = positions[out_index, tap_index]
    cached: list[tuple[np.ndarray, np.ndarray]] = []

    def matrix(w: np.ndarray) -> np.ndarray:
        if cached and cached[0][0] is w:
            return cached[0][1]
        taps = w.reshape(g, og, -1)[:, :, tap_index]  # [C, og, pairs]
        dense = np.zeros((g, plane, og, p), w.dtype)
        dense[:, in_index, :, out_index] = taps.transpose(2, 0, 1)
        dense = dense.reshape(g, plane, og * p)
        cached[:] = [(w, dense)]
        return dense

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        prod = np.matmul(x.reshape(n, g, plane).transpose(1, 0, 2), matrix(w)).reshape(g, n, og, p)
        if b is not None:
            prod += b.reshape(g, 1, og, 1)
        return np.ascontiguousarray(prod.transpose(1, 0, 2, 3)).reshape((n, g * og) + out_sp)

    return run


def _depthwise_banded(
    n: int, g: int, og: int, windows: tuple[geometry.AxisWindows, ...]
) -> Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]:
    """A 2-d depthwise conv (one input channel per group, ``og`` outputs each) as one batched GEMM
    per channel: the buffer's kernel-height rows side by side, ``[C, N·Ho, kh·Wb]``, times a banded
    matrix ``[C, kh·Wb, og·Wo]`` holding the kernel row at each output column's offset. The copy is
    kh times the input (not kh·kw as im2col), and one BLAS call does every tap; the banded matrix
    is built from the weight once per weight array (the executor passes the same one every run)."""
    rows_a, cols_a = windows
    kh, kw, ho, wo = rows_a.kernel, cols_a.kernel, rows_a.out, cols_a.out
    wb = cols_a.extent
    # Output column o, tap j reads buffer column o·stride + j·dilation.
    out_cols = np.arange(wo)
    band_cols = [out_cols * cols_a.stride + j * cols_a.dilation for j in range(kw)]
    cached: list[tuple[np.ndarray, np.ndarray]] = []

    def band(w: np.ndarray) -> np.ndarray:
        if cached and cached[0][0] is w:
            return cached[0][1]
        taps = w.reshape(g, og, kh, kw).transpose(0, 2, 1, 3)  # [C, kh, og, kw]
        matrix = np.zeros((g, kh, wb, og, wo), w.dtype)
        for j in range(kw):
            matrix[:, :, band_cols[j], :, out_cols] = taps[None, :, :, :, j]
        matrix = matrix.reshape(g, kh * wb, og * wo)
        cached[:] = [(w, matrix)]
        return matrix

    def run(buf: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        sn, sc, sh, sw = buf.strides
        rows = np.lib.stride_tricks.as_strided(
            buf, (g, n, ho, kh, wb), (sc, sn, sh * rows_a.stride, sh * rows_a.dilation, sw)
        ).reshape(g, n * ho, kh * wb)
        prod = np.matmul(rows, band(w)).reshape(g, n, ho, og, wo)
        if b is not None:
            prod += b.reshape(g, 1, 1, og, 1)
        out = prod.transpose(1, 0, 3, 2, 4)
        return np.ascontiguousarray(out).reshape(n, g * og, ho, wo) if n > 1 or og > 1 else out.reshape(n, g, ho, wo)

    return run


def _grouped_by_tap(
    n: int, g: int, cg: int, og: int, ksp: tuple[int, ...], out_sp: tuple[int, ...]
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Depthwise (and channel-multiplier) conv over its windows ``[N, C, *k, *out]``: a multiply-add
    per kernel tap over the whole batch, instead of a GEMM of width one per channel."""
    nd = len(ksp)
    offsets = list(np.ndindex(*ksp))
    spatial = (1,) * nd

    def run(win: np.ndarray, w: np.ndarray) -> np.ndarray:
        # [N, G, 1, *k, *out] against weights [G, og, *k]: output channel g·og + j reads input channel g.
        win = win.reshape((n, g, 1) + ksp + out_sp)
        taps = w.reshape((g, og, -1))
        out = np.empty((n, g, og) + out_sp, dtype=np.result_type(win.dtype, w.dtype))
        tmp = np.empty_like(out)
        for flat, offs in enumerate(offsets):
            src = win[(slice(None), slice(None), slice(None)) + offs]
            wt = taps[:, :, flat].reshape((g, og) + spatial)
            if flat == 0:
                np.multiply(src, wt, out=out)
            else:
                np.multiply(src, wt, out=tmp)
                np.add(out, tmp, out=out)
        return out.reshape((n, g * og) + out_sp)

    return run


def _conv_transpose(c: Conv, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """A transposed convolution: every input element scatters ``x · w`` into the output. The taps
    whose every write falls in the cropped padding are dropped first (the same clipping as forward
    windows, with input and output swapped), so a kernel far larger than the output costs what the
    output does."""
    xw, ww = widen(x), widen(w)
    nd = w.ndim - 2
    n, g = x.shape[0], c.groups
    cg, og = w.shape[0] // g, w.shape[1]
    in_sp = x.shape[2:]
    out_sp = tuple(
        (i - 1) * s - 2 * p + d * (kk - 1) + 1 + op
        for i, s, p, d, kk, op in zip(in_sp, c.stride, c.padding, c.dilation, w.shape[2:], c.output_padding)
    )
    # Input element i, tap t writes output i·s + t·d − p: forward windows with output and input swapped.
    windows = geometry.clip_windows(out_sp, w.shape[2:], c.stride, c.padding, c.dilation, in_sp)
    ww = _kept_taps(windows, w.shape)(ww)
    ksp = ww.shape[2:]
    k = math.prod(ksp)
    # contributions[n, g, og, k, *in] = Σ_c x[n, g, c, *in] · w[g, c, og, k]
    xs = xw.reshape((n, g, cg, -1))
    wk = ww.reshape(g, cg, og * k)
    contrib = np.matmul(wk.transpose(0, 2, 1)[None], xs).reshape((n, g, og, k) + in_sp)
    buf = np.zeros((n, g, og) + tuple(a.extent for a in windows), dtype=contrib.dtype)
    for flat, offs in enumerate(np.ndindex(*ksp)):
        dst = tuple(slice(o * d, o * d + (i - 1) * s + 1, s) for o, d, i, s in zip(offs, c.dilation, in_sp, c.stride))
        buf[(slice(None),) * 3 + dst] += contrib[:, :, :, flat]
    out = np.zeros((n, g, og) + out_sp, dtype=contrib.dtype)
    kept = tuple(slice(a.pad_lo, a.pad_lo + a.stop - a.start) for a in windows)
    out[(slice(None),) * 3 + tuple(slice(a.start, a.stop) for a in windows)] = buf[(slice(None),) * 3 + kept]
    out = out.reshape((n, g * og) + out_sp)
    if b is not None:
        out = out + widen(b).reshape((-1,) + (1,) * nd)
    return out.astype(x.dtype, copy=False)


@override("MaxPool")
def max_pool(c: MaxPool, x: np.ndarray) -> np.ndarray:
    xw = widen(x)
    if not c.indices:
        return max_pool_plan(c, x.shape, xw.dtype)(xw).astype(x.dtype, copy=False)
    nd = len(c.kernel)
    windows = geometry.pool_windows(x.shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    out = tuple(a.out for a in windows)
    buf = np.ascontiguousarray(_buffer_plan(x.shape, windows, lowest(xw.dtype), xw.dtype)(xw))
    win = _window_view(buf, windows, taps_first=False)
    flat: np.ndarray = win.reshape(win.shape[: x.ndim] + (-1,))
    # Positions of each window element in the unpadded spatial plane (−1 in the padding).
    positions = geometry.window_positions(x.shape[x.ndim - nd :], windows)
    pos_flat = np.broadcast_to(positions.reshape(out + (-1,)), flat.shape)
    # PyTorch's scan: the first in-bounds maximum wins ties (a window of only -inf picks its first
    # in-bounds element, never the padding), and a NaN wins over everything — the last NaN seen.
    best = (flat == flat.max(axis=-1, keepdims=True)) & (pos_flat >= 0)
    arg = np.argmax(best, axis=-1)
    if flat.dtype.kind == "f":
        nan = np.isnan(flat)
        arg = np.where(nan.any(axis=-1), flat.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1), arg)
    picked: np.ndarray = np.take_along_axis(pos_flat, arg[..., None], axis=-1)
    return picked[..., 0]


def _separable_plan(
    x_shape: tuple[int, ...], windows: tuple[geometry.AxisWindows, ...], ufunc: np.ufunc, fill: float, dtype: np.dtype
) -> Kernel:
    """``ufunc`` (maximum or add) over the clipped windows, one spatial axis at a time: a running
    result over one strided view per tap of that axis (Σk views instead of Πk). An axis whose one
    window covers every element it reads is one reduction (a global pool). NaN propagates as in max()."""
    nd, rank = len(windows), len(x_shape)
    # An axis with one window of unit dilation reads exactly x[start:stop]: reduce it, unpadded.
    whole = [a.out == 1 and a.dilation == 1 and a.stop > a.start for a in windows]
    buffer = _buffer_plan(
        x_shape,
        tuple(
            geometry.AxisWindows(1, a.stop - a.start, 0, 1, 1, a.start, a.start, a.stop, 0, 0) if w else a
            for a, w in zip(windows, whole)
        ),
        fill,
        dtype,
    )
    passes: list[tuple[int, list[tuple[slice, ...]] | None]] = []
    for i, a in enumerate(windows):
        axis = rank - nd + i
        if whole[i]:
            passes.append((axis, None))
            continue
        lead = (slice(None),) * axis
        span = (a.out - 1) * a.stride + 1
        passes.append(
            (axis, [lead + (slice(t * a.dilation, t * a.dilation + span, a.stride),) for t in range(a.kernel)])
        )

    def run(x: np.ndarray) -> np.ndarray:
        best = buffer(x)
        for axis, taps in passes:
            if taps is None:
                best = ufunc.reduce(best, axis=axis, keepdims=True)
            elif len(taps) == 1:
                best = best[taps[0]]
            else:
                running = ufunc(best[taps[0]], best[taps[1]])
                for tap in taps[2:]:
                    ufunc(running, best[tap], out=running)
                best = running
        return best.copy() if not best.flags.owndata or best is x else best

    return run


def max_pool_plan(c: MaxPool, x_shape: tuple[int, ...], dtype: np.dtype) -> Kernel:
    """Max pooling (values only) of this input shape as ``run(x)``, its geometry worked out once
    (windows clipped to the input, so a kernel larger than the input is a global maximum)."""
    windows = geometry.pool_windows(x_shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    return _separable_plan(x_shape, windows, np.maximum, lowest(dtype), dtype)


def avg_pool_plan(c: AvgPool, x_shape: tuple[int, ...], dtype: np.dtype) -> Kernel:
    """Average pooling of this input shape as ``run(x)``: the window sums separably over the clipped
    windows, then one division by a static divisor table (or ``divisor_override``)."""
    nd = len(c.kernel)
    ones = (1,) * nd
    windows = geometry.pool_windows(x_shape, c.kernel, c.stride, c.padding, ones, c.ceil_mode)
    total = _separable_plan(x_shape, windows, np.add, 0, dtype)
    if c.divisor_override:
        divisor: np.ndarray = np.asarray(c.divisor_override, dtype=dtype)
    else:
        sizes = x_shape[len(x_shape) - nd :]
        out = tuple(a.out for a in windows)
        divisor = geometry.avg_pool_divisor(sizes, c.kernel, c.stride, c.padding, out, c.count_include_pad)
        divisor = divisor.astype(dtype)

    def run(x: np.ndarray) -> np.ndarray:
        summed = total(x)
        if summed.dtype.kind in "iu":  # PyTorch's integer division truncates toward zero
            return (summed / divisor).astype(summed.dtype)
        return np.divide(summed, divisor, out=summed)

    return run


@override("AvgPool")
def avg_pool(c: AvgPool, x: np.ndarray) -> np.ndarray:
    xw = widen(x)
    return avg_pool_plan(c, x.shape, xw.dtype)(xw).astype(x.dtype, copy=False)


# Below this many scores numpy's own reduction, one call, costs less than the 2·log2(S) halving calls;
# sums go pairwise only over rows this short (numpy's add.reduce keeps up with longer ones, its
# maximum.reduce does not).
_PAIRWISE_MIN_SIZE = 16384
_PAIRWISE_SUM_MAX_ROW = 16


def _across_rows(ufunc: np.ufunc, x: np.ndarray) -> np.ndarray:
    """``ufunc`` (maximum or add) of ``x [..., S, L]`` across its rows, ``[..., 1, L]``, in a new
    array: halving the rows pairwise, log2(S) calls over whole rows. numpy's reduction over a
    non-trailing axis walks one short row at a time (3–4× slower on attention-sized scores).
    Sums are added pairwise (a different rounding from a running sum, not a worse one)."""
    n = x.shape[-2]
    if n < 2 or x.size < _PAIRWISE_MIN_SIZE or (ufunc is np.add and x.shape[-1] > _PAIRWISE_SUM_MAX_ROW):
        return ufunc.reduce(x, axis=-2, keepdims=True)
    half = n // 2
    acc = ufunc(x[..., :half, :], x[..., half : 2 * half, :])
    if n % 2:
        ufunc(acc[..., :1, :], x[..., n - 1 :, :], out=acc[..., :1, :])
    while half > 1:
        n, half = half, half // 2
        ufunc(acc[..., :half, :], acc[..., half : 2 * half, :], out=acc[..., :half, :])
        if n % 2:
            ufunc(acc[..., :1, :], acc[..., n - 1 : n, :], out=acc[..., :1, :])
    return acc[..., :1, :]


@lru_cache(maxsize=64)
def _ones_row(n: int, dtype: np.dtype) -> np.ndarray:
    """A read-only ``[1, n]`` row of ones: ``row @ x`` sums ``x [..., n, L]`` across its rows in one BLAS call."""
    row = np.ones((1, n), dtype=dtype)
    row.flags.writeable = False
    return row


@lru_cache(maxsize=64)
def _above_diagonal(big_l: int, big_s: int) -> np.ndarray:
    """The causal mask's excluded positions (above the top-left-aligned diagonal), read-only."""
    mask = ~np.tril(np.ones((big_l, big_s), dtype=bool))
    mask.flags.writeable = False
    return mask


@override("Attention")
def attention(c: Attention, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
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
    # numpy's exp, not its float32 exp2 (faster on normal results): exp2 leaves its vectorised loop
    # for results below 2^-126 (8–60× slower), which a peaked softmax's small weights reach
    # (benchmarks/exp_cliff.py: [8,4,100,32] attention with scores over ±60 took 1.9× as long).
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
    # The softmax in place; a query that may attend nowhere (its scores all -inf, so its maximum
    # is -inf) gets weights of zero, like PyTorch's safe softmax (so a NaN in V still reaches it).
    top = _across_rows(np.maximum, scores)
    scores -= top
    np.exp(scores, out=scores)
    # One reduction of the row maxima, cheaper than a mask per row (its minimum is NaN when a
    # query's scores hold a NaN: that query stays NaN, but others may still attend nowhere).
    nowhere = None if not top.size or top.min() > -np.inf else top == -np.inf
    if nowhere is not None:
        np.copyto(scores, 0, where=nowhere)
    # The normalisation after the product with V, as flash attention does: the sums divide the
    # [..., L, E] output instead of the [..., S, L] weights (S/E times fewer divisions). Each sum is
    # a matrix product with a row of ones (BLAS: several times faster than numpy's reduction across rows).
    total = np.matmul(_ones_row(big_s, scores.dtype), scores)  # [..., 1, L]
    if nowhere is not None:
        np.copyto(total, 1, where=nowhere)
    out = np.matmul(np.swapaxes(scores, -1, -2), vw)
    out /= np.swapaxes(total, -1, -2)
    if grouped:
        out = out.reshape(out.shape[:-4] + (q.shape[-3],) + out.shape[-2:])
    return out.astype(q.dtype, copy=False)
