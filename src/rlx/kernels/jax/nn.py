"""The JAX engine's convolution and windowed pooling: XLA's ``conv_general_dilated`` and
``reduce_window``, with the windows counted by the shared geometry (``rlx.kernels.geometry``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...kernels import geometry
from ...kernels.precision import lowest, widen
from .namespace import HIGHEST
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import AvgPool, Conv, MaxPool

Array = Any


def _conv_dims(nd: int) -> lax.ConvDimensionNumbers:
    """NC… input and output, OI… weight: the PyTorch layout, for any number of spatial axes."""
    spec = tuple(range(nd + 2))
    return lax.ConvDimensionNumbers(lhs_spec=spec, rhs_spec=spec, out_spec=spec)


def _kept_taps(w: Array, windows: tuple[geometry.AxisWindows, ...]) -> Array:
    """The kernel taps that ever read the input (``geometry.clip_axis``)."""
    if all(a.first_tap == 0 and a.kernel == k for a, k in zip(windows, w.shape[2:])):
        return w
    return w[(slice(None), slice(None)) + tuple(slice(a.first_tap, a.first_tap + a.kernel) for a in windows)]


def _crop(x: Array, windows: tuple[geometry.AxisWindows, ...]) -> Array:
    """The input elements the clipped windows read (``x[start:stop]`` on each spatial axis)."""
    nd = len(windows)
    if all(a.start == 0 and a.stop == n for a, n in zip(windows, x.shape[x.ndim - nd :])):
        return x
    return x[(Ellipsis,) + tuple(slice(a.start, a.stop) for a in windows)]


@override("Conv")
def conv(c: Conv, x: Array, w: Array, b: Array | None) -> Array:
    xw, ww = widen(x), widen(w)
    nd = w.ndim - 2
    if c.transposed:
        out = _conv_transpose(c, xw, ww)
    else:
        # Windows clipped to the taps that read the input: a kernel far larger than the input
        # costs what the input does, padding no tap reads is never built.
        out_sp = geometry.conv_output_shape(x.shape, w.shape, c.stride, c.padding, c.dilation)[2:]
        windows = geometry.clip_windows(x.shape[2:], w.shape[2:], c.stride, c.padding, c.dilation, out_sp)
        out = lax.conv_general_dilated(
            _crop(xw, windows),
            _kept_taps(ww, windows),
            tuple(c.stride),
            [(a.pad_lo, a.pad_hi) for a in windows],
            rhs_dilation=tuple(c.dilation),
            dimension_numbers=_conv_dims(nd),
            feature_group_count=c.groups,
            precision=HIGHEST,
        )
    if b is not None:
        out = out + widen(b).reshape((-1,) + (1,) * nd)
    return out.astype(x.dtype)


def _conv_transpose(c: Conv, xw: Array, ww: Array) -> Array:
    """A transposed convolution is a plain one over the input dilated by the stride, with the
    kernel flipped and its in/out channels swapped (per group), padded by d·(k−1) − p. Only the
    taps that write inside the (cropped) output are kept, as forward windows clip theirs."""
    nd = ww.ndim - 2
    g = c.groups
    in_sp = xw.shape[2:]
    out_sp = tuple(
        (i - 1) * s - 2 * p + d * (k - 1) + 1 + op
        for i, s, p, d, k, op in zip(in_sp, c.stride, c.padding, c.dilation, ww.shape[2:], c.output_padding)
    )
    # Input element i, tap t writes output i·s + t·d − p: forward windows with output and input swapped.
    windows = geometry.clip_windows(out_sp, ww.shape[2:], c.stride, c.padding, c.dilation, in_sp)
    ww = _kept_taps(ww, windows)
    cin_g, cout_g, ksp = ww.shape[0] // g, ww.shape[1], ww.shape[2:]
    ww = ww.reshape((g, cin_g, cout_g) + ksp).swapaxes(1, 2).reshape((g * cout_g, cin_g) + ksp)
    ww = jnp.flip(ww, axis=tuple(range(2, 2 + nd)))
    pads = []
    for a, k, p, d, i, s, n in zip(windows, ksp, c.padding, c.dilation, in_sp, c.stride, out_sp):
        lo = d * (k - 1) - (p - a.first_tap * d)  # the kept taps start first_tap·d later
        pads.append((lo, n - (i - 1) * s - 1 - lo + d * (k - 1)))
    return lax.conv_general_dilated(
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


def _reduce_window(x: Array, init: Any, op: Callable[..., Array], windows: tuple[geometry.AxisWindows, ...]) -> Array:
    """``op`` over the clipped windows of the trailing spatial axes, padding with ``init``."""
    lead = x.ndim - len(windows)
    one = (1,) * lead
    return lax.reduce_window(
        _crop(x, windows),
        jnp.asarray(init, x.dtype),
        op,
        one + tuple(a.kernel for a in windows),
        one + tuple(a.stride for a in windows),
        [(0, 0)] * lead + [(a.pad_lo, a.pad_hi) for a in windows],
        window_dilation=one + tuple(a.dilation for a in windows),
    )


@override("MaxPool")
def max_pool(c: MaxPool, x: Array) -> Array:
    nd = len(c.kernel)
    windows = geometry.pool_windows(x.shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    xw = widen(x)
    if not c.indices:
        return _reduce_window(xw, lowest(xw.dtype), lax.max, windows).astype(x.dtype)
    # Indices: gather every window ([..., *out, K]) through a static table of flat positions
    # (−1 in the padding), then pick like PyTorch's scan: the first in-bounds maximum wins ties (a
    # window of only -inf picks its first in-bounds element, never the padding), and a NaN wins over
    # everything — the last NaN seen.
    sizes = x.shape[x.ndim - nd :]
    out = tuple(a.out for a in windows)
    positions = geometry.window_positions(sizes, windows)  # [*out, K]
    k = positions.shape[-1]
    lead = x.shape[: x.ndim - nd]
    flat = jnp.take(xw.reshape(lead + (-1,)), jnp.asarray(np.maximum(positions, 0).reshape(-1)), axis=-1)
    flat = flat.reshape(lead + out + (k,))
    inside = jnp.asarray(positions >= 0)
    flat = jnp.where(inside, flat, jnp.asarray(lowest(xw.dtype), xw.dtype))
    best = (flat == jnp.max(flat, axis=-1, keepdims=True)) & inside
    arg = jnp.argmax(best, axis=-1)
    if xw.dtype.kind == "f":
        nan = jnp.isnan(flat)
        arg = jnp.where(nan.any(axis=-1), k - 1 - jnp.argmax(nan[..., ::-1], axis=-1), arg)
    table = jnp.broadcast_to(jnp.asarray(positions), arg.shape + (k,))
    return jnp.take_along_axis(table, arg[..., None], axis=-1)[..., 0]


@override("AvgPool")
def avg_pool(c: AvgPool, x: Array) -> Array:
    nd = len(c.kernel)
    ones = (1,) * nd
    windows = geometry.pool_windows(x.shape, c.kernel, c.stride, c.padding, ones, c.ceil_mode)
    xw = widen(x)
    total = _reduce_window(xw, 0, lax.add, windows)
    if c.divisor_override:
        return (total / c.divisor_override).astype(x.dtype)
    sizes = x.shape[x.ndim - nd :]
    out = tuple(a.out for a in windows)
    divisor = geometry.avg_pool_divisor(sizes, c.kernel, c.stride, c.padding, out, c.count_include_pad)
    return (total / jnp.asarray(divisor, xw.dtype)).astype(x.dtype)
