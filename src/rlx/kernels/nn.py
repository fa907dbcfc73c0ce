"""Neural-network blocks: Softmax, the norms, AdaptiveAvgPool, Attention and Recurrent.

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


# ── Recurrent: RNN / GRU / LSTM, one step at a time ──────────────────────────
def _activation(name: str, alpha: float, beta: float, xp: ArrayNamespace) -> Any:
    """ONNX's recurrent activation ``name`` (lower case) with its alpha / beta."""
    if name in ("relu", "tanh", "sigmoid", "softplus"):
        return xp.unary[name]
    table = {
        "softsign": lambda v: v / (1 + xp.abs(v)),
        "affine": lambda v: v * alpha + beta,
        "scaledtanh": lambda v: xp.tanh(v * beta) * alpha,
        "hardsigmoid": lambda v: xp.clip(v * alpha + beta, 0, 1),
        "leakyrelu": lambda v: xp.maximum(v, v * alpha),
    }
    if name not in table:
        raise ValueError(f"recurrent activation {name!r} is not supported")
    return table[name]


def _recurrent_direction(
    c: C.Recurrent, xw: Any, r: Any, rb: Any | None, peep: Any | None, h: Any, cs: Any | None, acts: list[Any],
    reverse: bool, xp: ArrayNamespace,
) -> tuple[list[Any], Any, Any | None]:  # fmt: skip
    """One direction over every step: Y's rows (in time order), the final h and c. ``xw`` is the
    input projection with the biases that add before the gates ([T, B, G·H])."""
    hid, steps = c.hidden, xw.shape[0]
    f, g = acts[0], acts[1] if len(acts) > 1 else acts[0]
    h_act = acts[2] if len(acts) > 2 else g

    def clip(v: Any) -> Any:
        return v if c.clip is None else xp.clip(v, -c.clip, c.clip)

    ys: list[Any] = [None] * steps
    rt = xp.swapaxes(r, 0, 1)  # [H, G·H]
    for step in range(steps):
        t = steps - 1 - step if reverse else step
        if c.cell == "rnn":
            h = f(clip(xw[t] + xp.matmul(h, rt)))
        elif c.cell == "gru":
            rz = xp.matmul(h, rt[:, : 2 * hid])
            z = f(clip(xw[t][:, :hid] + rz[:, :hid]))
            rr = f(clip(xw[t][:, hid : 2 * hid] + rz[:, hid:]))
            rh = rt[:, 2 * hid :]
            if c.linear_before_reset:
                hr = xp.matmul(h, rh) + (0 if rb is None else rb)
                pre = xw[t][:, 2 * hid :] + rr * hr
            else:
                pre = xw[t][:, 2 * hid :] + xp.matmul(rr * h, rh) + (0 if rb is None else rb)
            h = (1 - z) * g(clip(pre)) + z * h
        else:
            gates = xw[t] + xp.matmul(h, rt)
            gi, go, gf, gc = (gates[:, k * hid : (k + 1) * hid] for k in range(4))
            if peep is not None:
                gi, gf = gi + peep[:hid] * cs, gf + peep[2 * hid :] * cs
            i = f(clip(gi))
            fg = 1 - i if c.input_forget else f(clip(gf))
            cs = fg * cs + i * g(clip(gc))
            o = f(clip(go if peep is None else go + peep[hid : 2 * hid] * cs))
            h = o * h_act(cs)
        ys[t] = h
    return ys, h, cs


@kernel("Recurrent")
def recurrent(
    c: C.Recurrent, x: Any, w: Any, r: Any, bias: Any | None, h0: Any | None, c0: Any | None, peep: Any | None,
    *, xp: ArrayNamespace,
) -> Any:  # fmt: skip
    # A loop over the steps the input has: the length is a run-time size (XLA traces one program
    # per input shape, so its loop unrolls at the length it is compiled for).
    xs = widen(x)
    batch, hid = xs.shape[1], c.hidden
    per = {"rnn": 1, "gru": 2, "lstm": 3}[c.cell]
    gates = {"rnn": 1, "gru": 3, "lstm": 4}[c.cell]
    zeros = xp.zeros((batch, hid), dtype=xs.dtype)
    ys, hs, cs = [], [], []
    for d in range(w.shape[0]):
        xw = xp.matmul(xs, xp.swapaxes(widen(w[d]), 0, 1))
        rb = None
        if bias is not None:
            bd = widen(bias[d])
            wb, rbias = bd[: gates * hid], bd[gates * hid :]
            if c.cell == "gru":  # the hidden gate's recurrent bias goes inside the reset product
                rb = rbias[2 * hid :]
                rbias = xp.concatenate([rbias[: 2 * hid], xp.zeros((hid,), dtype=xs.dtype)])
            xw = xw + (wb + rbias)
        acts = [_activation(c.activations[k], c.alphas[k], c.betas[k], xp) for k in range(d * per, (d + 1) * per)]
        h = zeros if h0 is None else widen(h0[d])
        cell = None if c.cell != "lstm" else zeros if c0 is None else widen(c0[d])
        p = None if peep is None else widen(peep[d])
        reverse = c.direction == "reverse" or d == 1
        rows, h, cell = _recurrent_direction(c, xw, widen(r[d]), rb, p, h, cell, acts, reverse, xp)
        ys.append(xp.stack(rows) if rows else xp.zeros((0, batch, hid), dtype=xs.dtype))
        hs.append(h)
        cs.append(zeros if cell is None else cell)
    y = xp.stack(ys, axis=1)  # [T, D, B, H]
    return xp.concatenate([y, xp.stack(hs)[None], xp.stack(cs)[None]]).astype(x.dtype)
