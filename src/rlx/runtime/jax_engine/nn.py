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


@override("Conv")
def conv(c: Conv, x: Array, w: Array, b: Array | None) -> Array:
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


@override("MaxPool")
def max_pool(c: MaxPool, x: Array) -> Array:
    nd = len(c.kernel)
    out, pads = geometry.pool_geometry(x.shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    xw = widen(x)
    if not c.indices:
        return _reduce_window(xw, lowest(xw.dtype), lax.max, c.kernel, c.stride, c.dilation, pads, out).astype(x.dtype)
    # Indices: gather every window ([..., *out, K]) through a static table of flat positions
    # (−1 in the padding), then pick like PyTorch's scan: the first in-bounds maximum wins ties (a
    # window of only -inf picks its first in-bounds element, never the padding), and a NaN wins over
    # everything — the last NaN seen.
    sizes = x.shape[x.ndim - nd :]
    positions = geometry.window_positions(sizes, c.kernel, c.stride, c.dilation, pads, out)  # [*out, K]
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
    out, pads = geometry.pool_geometry(x.shape, c.kernel, c.stride, c.padding, ones, c.ceil_mode)
    xw = widen(x)
    total = _reduce_window(xw, 0, lax.add, c.kernel, c.stride, ones, pads, out)
    if c.divisor_override:
        return (total / c.divisor_override).astype(x.dtype)
    sizes = x.shape[x.ndim - nd :]
    divisor = geometry.avg_pool_divisor(sizes, c.kernel, c.stride, c.padding, pads, out, c.count_include_pad)
    return (total / jnp.asarray(divisor, xw.dtype)).astype(x.dtype)
