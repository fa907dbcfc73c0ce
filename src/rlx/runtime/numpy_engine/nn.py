"""The numpy engine's own algorithms for the neural-network Calls (same contracts as the shared
definitions, planned for numpy's speed):

- convolution as im2col over a strided view of a zero-padded buffer plus one batched GEMM (a
  multiply-add per tap for depthwise), its geometry worked out once (``conv_plan``);
- max pooling one spatial axis at a time over strided views (``max_pool_plan``), average pooling
  over sliding windows;
- LayerNorm / RmsNorm statistics as BLAS matrix-vector products with a 1/n column (``norm_plan``):
  numpy's reductions over short trailing axes are slow;
- attention with the scores held transposed, softmax'ed in place.

``conv_plan``, ``max_pool_plan`` and ``norm_plan`` are also what the executor binds at load
(``rlx.runtime.numpy_engine.fused``), so the generic kernel and the bound path are one code.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...kernels import geometry
from ...kernels.precision import lowest, widen
from ...kernels.registry import Kernel
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import Attention, AvgPool, Conv, LayerNorm, MaxPool, RmsNorm


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

        def rms_norm_run(x: np.ndarray, w: np.ndarray | None) -> np.ndarray:
            rows = x.reshape(rows_shape)
            y = (rows * (1 / np.sqrt((rows * rows) @ column + eps))).reshape(shape)
            return y if w is None else y * w

        return rms_norm_run

    def layer(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
        rows = x.reshape(rows_shape)
        centered = rows - rows @ column
        y = (centered * (1 / np.sqrt((centered * centered) @ column + eps))).reshape(shape)
        if w is not None:
            y = y * w
        return y if b is None else y + b

    return layer


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


def conv_plan(c: Conv, x_shape: tuple[int, ...], w_shape: tuple[int, ...], dtype: np.dtype) -> Kernel:
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
    # xp[.., o·stride + κ·dilation], inside xp because out_sp comes from geometry.conv_out_size.
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
    offsets = list(np.ndindex(*ksp))

    def tap(flat: int) -> tuple[np.ndarray, np.ndarray]:
        return win[(slice(None), slice(None)) + offsets[flat]], taps[:, flat].reshape((-1,) + (1,) * nd)

    out = np.multiply(*tap(0))
    tmp = np.empty_like(out)
    for flat in range(1, len(offsets)):
        np.multiply(*tap(flat), out=tmp)
        np.add(out, tmp, out=out)
    return out


def _conv_transpose(c: Conv, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
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


@override("MaxPool")
def max_pool(c: MaxPool, x: np.ndarray) -> np.ndarray:
    if not c.indices:
        xw = widen(x)
        return max_pool_plan(c, x.shape, xw.dtype)(xw).astype(x.dtype, copy=False)
    nd = len(c.kernel)
    out, pads = geometry.pool_geometry(x.shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    xw = widen(x)
    padded = _pad_spatial(xw, pads, lowest(xw.dtype))
    win = _windows(padded, c.kernel, c.stride, c.dilation, out)
    flat: np.ndarray = win.reshape(win.shape[: x.ndim] + (-1,))
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
    picked: np.ndarray = np.take_along_axis(pos_flat, arg[..., None], axis=-1)
    return picked[..., 0]


def max_pool_plan(c: MaxPool, x_shape: tuple[int, ...], dtype: np.dtype) -> Kernel:
    """Max pooling (values only) of this input shape as ``run(x)``, its geometry worked out once.

    The window maximum is separable: one spatial axis at a time, a running maximum over one
    strided view per tap of that axis (Σk views instead of Πk). NaN propagates as in max()."""
    nd, rank = len(c.kernel), len(x_shape)
    out, pads = geometry.pool_geometry(x_shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    sizes = x_shape[rank - nd :]
    padded_shape = x_shape[: rank - nd] + tuple(n + lo + hi for n, (lo, hi) in zip(sizes, pads))
    interior = (Ellipsis,) + tuple(slice(lo, lo + n) for n, (lo, _) in zip(sizes, pads))
    padded = any(lo or hi for lo, hi in pads)
    fill = lowest(dtype)
    taps_per_axis = []
    for i in range(nd):
        lead = (slice(None),) * (rank - nd + i)
        k, s, d, n = c.kernel[i], c.stride[i], c.dilation[i], out[i]
        taps_per_axis.append([lead + (slice(t * d, t * d + (n - 1) * s + 1, s),) for t in range(k)])

    def run(x: np.ndarray) -> np.ndarray:
        best = x
        if padded:
            best = np.full(padded_shape, fill, x.dtype)
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


@override("AvgPool")
def avg_pool(c: AvgPool, x: np.ndarray) -> np.ndarray:
    nd = len(c.kernel)
    ones = (1,) * nd
    out, pads = geometry.pool_geometry(x.shape, c.kernel, c.stride, c.padding, ones, c.ceil_mode)
    xw = widen(x)
    win = _windows(_pad_spatial(xw, pads, 0), c.kernel, c.stride, ones, out)
    total = win.sum(axis=tuple(range(x.ndim, x.ndim + nd)))
    if c.divisor_override:
        return (total / c.divisor_override).astype(x.dtype, copy=False)
    sizes = x.shape[x.ndim - nd :]
    counted = geometry.avg_pool_counts(sizes, c.padding, pads, c.count_include_pad)
    divisor = _windows(counted, c.kernel, c.stride, ones, out).sum(axis=tuple(range(nd, 2 * nd)))
    return (total / divisor).astype(x.dtype, copy=False)


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
