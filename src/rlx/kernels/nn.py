"""Neural-network blocks: Softmax, the norms, AdaptiveAvgPool and Attention.

Convolution and windowed pooling have no shared definition: each engine plans its own windows
(numpy: strided views planned at load; XLA: ``conv_general_dilated`` / ``reduce_window``) from
the same geometry (``rlx.kernels.geometry``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .precision import widen
from .registry import kernel, static

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace


def softmax_values(x: Any, axis: int, log: bool, xp: ArrayNamespace) -> Any:
    """(log-)softmax of a float32/float64 array along ``axis``, shifted by the maximum."""
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    if log:
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))
    e = xp.exp(shifted)
    return e / xp.sum(e, axis=axis, keepdims=True)


@kernel("Softmax")
def softmax(c: C.Softmax, x: Any, *, xp: ArrayNamespace) -> Any:
    x = xp.asarray(x)
    if x.ndim == 0:  # PyTorch treats a 0-d tensor as one element along its only dim
        return xp.reshape(softmax(c, xp.reshape(x, (1,)), xp=xp), ())
    if x.size == 0:
        return x.copy()
    return xp.asarray(softmax_values(widen(x), c.axis, c.log, xp)).astype(x.dtype, copy=False)


def affine(y: Any, w: Any | None, b: Any | None, shape: tuple[int, ...]) -> Any:
    """``y · w + b`` with the parameters reshaped to broadcast (either may be absent)."""
    if w is not None:
        y = y * widen(w).reshape(shape)
    if b is not None:
        y = y + widen(b).reshape(shape)
    return y


@kernel("LayerNorm")
def layer_norm(c: C.LayerNorm, x: Any, w: Any | None, b: Any | None, *, xp: ArrayNamespace) -> Any:
    xw = widen(x)
    axes = tuple(range(x.ndim - c.ndim, x.ndim))
    centered = xw - xp.mean(xw, axis=axes, keepdims=True)
    var = xp.mean(centered * centered, axis=axes, keepdims=True)
    y = centered * (1 / xp.sqrt(var + c.eps))
    return affine(y, w, b, x.shape[x.ndim - c.ndim :]).astype(x.dtype)


@kernel("RmsNorm")
def rms_norm(c: C.RmsNorm, x: Any, w: Any | None, *, xp: ArrayNamespace) -> Any:
    xw = widen(x)
    axes = tuple(range(x.ndim - c.ndim, x.ndim))
    y = xw * (1 / xp.sqrt(xp.mean(xw * xw, axis=axes, keepdims=True) + c.eps))
    return affine(y, w, None, x.shape[x.ndim - c.ndim :]).astype(x.dtype)


@kernel("BatchNorm")
def batch_norm(c: C.BatchNorm, x: Any, mean: Any, var: Any, w: Any | None, b: Any | None, *, xp: ArrayNamespace) -> Any:
    shape = (-1,) + (1,) * (x.ndim - 2)
    y = (widen(x) - widen(mean).reshape(shape)) * (1 / xp.sqrt(widen(var).reshape(shape) + c.eps))
    return affine(y, w, b, shape).astype(x.dtype, copy=False)


@kernel("GroupNorm")
def group_norm(c: C.GroupNorm, x: Any, w: Any | None, b: Any | None, *, xp: ArrayNamespace) -> Any:
    grouped = widen(x).reshape(x.shape[0], c.groups, -1)
    centered = grouped - xp.mean(grouped, axis=2, keepdims=True)
    var = xp.mean(centered * centered, axis=2, keepdims=True)
    y = (centered * (1 / xp.sqrt(var + c.eps))).reshape(x.shape)
    return affine(y, w, b, (-1,) + (1,) * (x.ndim - 2)).astype(x.dtype, copy=False)


@kernel("AdaptiveAvgPool")
def adaptive_avg_pool(c: C.AdaptiveAvgPool, x: Any, *, xp: ArrayNamespace) -> Any:
    # Averaging over a box is separable: pool one spatial axis at a time.
    out = widen(x)
    nd = len(c.output_size)
    for i, size_out in enumerate(static(d) for d in c.output_size):
        axis = x.ndim - nd + i
        size_in = out.shape[axis]
        if size_out and size_in % size_out == 0:  # equal bins: one reshape and one mean
            split = out.shape[:axis] + (size_out, size_in // size_out) + out.shape[axis + 1 :]
            out = xp.mean(xp.reshape(out, split), axis=axis + 1)
            continue
        pieces = []
        for j in range(size_out):
            start, end = (j * size_in) // size_out, -((-(j + 1) * size_in) // size_out)
            piece = out[(slice(None),) * axis + (slice(start, end),)]
            pieces.append(xp.mean(piece, axis=axis, keepdims=True))
        out = xp.concatenate(pieces, axis=axis)
    return out.astype(x.dtype, copy=False)


@kernel("Attention")
def attention(c: C.Attention, q: Any, k: Any, v: Any, mask: Any | None, *, xp: ArrayNamespace) -> Any:
    qw, kw, vw = widen(q), widen(k), widen(v)
    if c.gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        # Query head h reads key/value head h // rep, as repeat_interleave gives.
        rep = q.shape[-3] // k.shape[-3]
        kw, vw = xp.repeat(kw, rep, axis=-3), xp.repeat(vw, rep, axis=-3)
    scores = xp.matmul(qw, xp.swapaxes(kw, -1, -2)) * xp.asarray(c.scale, dtype=qw.dtype)
    big_l, big_s = q.shape[-2], k.shape[-2]
    if c.causal:  # lower-triangular, aligned to the top-left as PyTorch does
        scores = xp.where(xp.asarray(np.tril(np.ones((big_l, big_s), dtype=bool))), scores, -np.inf)
    if mask is not None:
        scores = xp.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + widen(mask)
    # A query that may attend nowhere (its scores all -inf) gets zeros, like PyTorch's safe softmax.
    dead = xp.all(scores == -np.inf, axis=-1, keepdims=True)
    probs = xp.where(dead, xp.zeros((), scores.dtype), softmax_values(scores, -1, False, xp))
    return xp.matmul(probs, vw).astype(q.dtype)
