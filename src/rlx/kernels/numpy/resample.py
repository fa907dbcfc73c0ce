"""The numpy engine's resampling kernels (Upsample, GridSample).

They follow PyTorch's CPU kernels step by step, with the tables of ``rlx.kernels.resample_tables``
(which say why the order of roundings matters): upsampling interpolates the last axis first,
keeps partial sums in opmath and stores weights in the tensor dtype; grid_sample computes in the
tensor dtype itself, half types included. Everything is vectorised over pixels; the only Python
loops run over spatial axes and filter taps.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from ...kernels.registry import static
from ...kernels.resample_tables import aa_taps, cubic_coefficients, cubic_taps, fma, linear_taps, nearest_index, opmath
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import GridSample, Upsample

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def _sizes(c: Upsample) -> tuple[int, ...]:
    """The output extents (ints once the program is specialised)."""
    return tuple(static(d) for d in c.size)


def _fused_sum(ts: list[np.ndarray], ws: list[np.ndarray]) -> np.ndarray:
    """``Σ t_k·w_k`` as ``fma(t0, w0, t1·w1)``, then ``fma(t_k, w_k, acc)``."""
    acc = fma(ts[0], ws[0], ts[1] * ws[1])
    for t, w in zip(ts[2:], ws[2:]):
        acc = fma(t, w, acc)
    return acc


def _plain_sum(ts: list[np.ndarray], ws: list[np.ndarray]) -> np.ndarray:
    """``Σ t_k·w_k`` in order, every product and sum rounded."""
    acc = ts[0] * ws[0]
    for t, w in zip(ts[1:], ws[1:]):
        acc = acc + t * w
    return acc


def _first_fused_sum(ts: list[np.ndarray], ws: list[np.ndarray]) -> np.ndarray:
    """``Σ t_k·w_k`` as ``fma(t0, w0, t1·w1)``, then rounded products and sums."""
    acc = fma(ts[0], ws[0], ts[1] * ws[1])
    for t, w in zip(ts[2:], ws[2:]):
        acc = acc + t * w
    return acc


def _chain_sum(ts: list[np.ndarray], ws: list[np.ndarray]) -> np.ndarray:
    """``Σ t_k·w_k`` as ``t0·w0``, then ``fma(t_k, w_k, acc)``."""
    acc = ts[0] * ws[0]
    for t, w in zip(ts[1:], ws[1:]):
        acc = fma(t, w, acc)
    return acc


def _apply_taps(
    x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray, count: np.ndarray | None = None
) -> np.ndarray:
    """``out[..., o, ...] = Σ_k x[..., idx[o, k], ...] · w[o, k]`` along ``axis``, in tap order.

    The fixed-size filters sum like ``_fused_sum``. The antialiasing filters use the first
    ``count[o]`` taps in a loop ``acc += t·w`` that the compiler unrolls by four: the unrolled
    body rounds each product and sum, the remainder fuses them."""
    bshape = (-1,) + (1,) * (x.ndim - 1 - axis)
    ts = [np.take(x, idx[:, k], axis=axis) for k in range(idx.shape[1])]
    ws = [w[:, k].reshape(bshape) for k in range(idx.shape[1])]
    if count is None:
        return _fused_sum(ts, ws)
    unrolled = (count - 1) // 4 * 4
    acc = ts[0] * ws[0]
    for k in range(1, len(ts)):
        step = np.where((k <= unrolled).reshape(bshape), acc + ts[k] * ws[k], fma(ts[k], ws[k], acc))
        acc = np.where((k < count).reshape(bshape), step, acc)
    return acc


@override("Upsample")
def upsample(c: Upsample, x: np.ndarray) -> np.ndarray:
    nd = len(_sizes(c))
    lead = x.ndim - nd
    sizes_in = x.shape[lead:]
    dt = opmath(x.dtype)
    if c.mode in ("nearest", "nearest_exact"):
        # PyTorch's 2-d kernel switches to its channels-last implementation for small outputs.
        legacy = nd == 2 and sum(_sizes(c)) <= 128
        index = tuple(
            nearest_index(n_in, n_out, s, c.mode == "nearest_exact", legacy, dt).reshape((-1,) + (1,) * (nd - 1 - a))
            for a, (n_in, n_out, s) in enumerate(zip(sizes_in, _sizes(c), c.scales))
        )
        return x[(Ellipsis,) + index]
    if c.antialias:
        return _upsample_aa(c, x, nd, lead, dt)
    if c.mode == "linear" and nd == 2 and sum(_sizes(c)) <= 128:
        return _bilinear_small(c, x, dt)
    # The generic kernel: separable passes, the last axis first, partial sums kept in opmath and
    # weights stored in the tensor dtype (so rounded for half types).
    taps = linear_taps if c.mode == "linear" else cubic_taps
    out = x.astype(dt)
    for a in reversed(range(nd)):
        idx, w = taps(sizes_in[a], _sizes(c)[a], c.scales[a], c.align_corners, dt, x.dtype)
        out = _apply_taps(out, lead + a, idx, w)
    return out.astype(x.dtype, copy=False)


def _bilinear_small(c: Upsample, x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """PyTorch's 2-d kernel for small outputs: four corner weights ``w_h·w_w`` kept in opmath and
    summed in corner order (its float16 build fuses the multiply-adds differently)."""
    (hi, hw), (wi, ww) = (
        linear_taps(n_in, n_out, s, c.align_corners, dt, dt)
        for n_in, n_out, s in zip(x.shape[-2:], _sizes(c), c.scales)
    )
    xw = x.astype(dt)
    corners = list(itertools.product((0, 1), repeat=2))
    values = [xw[..., hi[:, a][:, None], wi[:, b][None, :]] for a, b in corners]
    weights = [hw[:, a][:, None] * ww[:, b][None, :] for a, b in corners]
    total = _chain_sum if x.dtype == np.float16 else _fused_sum
    return total(values, weights).astype(x.dtype, copy=False)


def _upsample_aa(c: Upsample, x: np.ndarray, nd: int, lead: int, dt: np.dtype) -> np.ndarray:
    # Separable passes, the last axis first; an axis whose extent does not change is left alone.
    out = x.astype(dt)
    for a in reversed(range(nd)):
        n_in, n_out = x.shape[lead + a], _sizes(c)[a]
        if n_in == n_out:
            continue
        idx, w, count = aa_taps(n_in, n_out, c.scales[a], c.align_corners, c.mode == "bicubic", dt)
        out = _apply_taps(out, lead + a, idx, w, count)
    return out.astype(x.dtype, copy=False)


# ── GridSample ───────────────────────────────────────────────────────────────
# PyTorch samples 2-d grids with a vectorised kernel and 3-d grids with a scalar one; the two
# spell unnormalisation, reflection and the corner weights differently, and both are followed.


def _unnormalize(g: np.ndarray, size: int, align_corners: bool, nd: int) -> np.ndarray:
    t = g.dtype.type
    if nd == 2:
        if align_corners:
            return (g + t(1)) * (t(size - 1) / t(2))
        return fma(g + t(1), t(size) / t(2), t(-0.5))
    if align_corners:
        return ((g + t(1)) / t(2)) * t(size - 1)
    return ((g + t(1)) * t(size) - t(1)) / t(2)


def _clip(x: np.ndarray, size: int) -> np.ndarray:
    t = x.dtype.type
    # np.clip would promote bfloat16 to float32; NaN goes to 0 as in PyTorch.
    return np.where(np.isnan(x), t(0), np.minimum(np.maximum(x, t(0)), t(size - 1)))


def _reflect(x: np.ndarray, size: int, align_corners: bool, nd: int) -> np.ndarray:
    t = x.dtype.type
    if nd == 2:
        if align_corners and size <= 1:
            return np.zeros_like(x)
        low = t(0) if align_corners else t(-0.5)
        span2 = t(size - 1) * t(2) if align_corners else t(size) * t(2)
        ax = np.abs(x - low)
        extra = ax - np.trunc(ax / span2) * span2
        return np.minimum(extra, span2 - extra) + low
    lo2, hi2 = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
    if lo2 == hi2:
        return np.zeros_like(x)
    low, span = t(lo2) / t(2), t(hi2 - lo2) / t(2)
    ax = np.abs(x - low)
    extra = np.fmod(ax, span)
    odd = np.floor(ax / span) % 2 == 1
    return np.where(odd, span - extra + low, extra + low)


def _pad_coords(x: np.ndarray, size: int, padding: str, align_corners: bool, nd: int) -> np.ndarray:
    if padding == "border":
        return _clip(x, size)
    if padding == "reflection":
        return _clip(_reflect(x, size, align_corners, nd), size)
    return x


class _Gather:
    """Reads ``x[n, :, i_0, …, i_k]`` for integer coordinates of shape ``[N, P]`` → ``[N, P, C]``,
    with 0 wherever a coordinate falls outside the input."""

    def __init__(self, x: np.ndarray) -> None:
        self.sizes = x.shape[2:]
        # [N, C, *S] → [N, S_flat, C]
        self.flat = np.moveaxis(x.reshape(x.shape[0], x.shape[1], int(np.prod(self.sizes))), 1, 2)

    def __call__(self, coords: list[np.ndarray]) -> np.ndarray:
        valid = np.ones(coords[0].shape, bool)
        lin = np.zeros(coords[0].shape, np.int64)
        for c, n in zip(coords, self.sizes):
            ok = np.isfinite(c) & (c > -1) & (c < n)
            valid &= ok
            lin = lin * n + np.where(ok, c, 0).astype(np.int64)
        vals = np.take_along_axis(self.flat, lin[..., None], axis=1)
        return np.where(valid[..., None], vals, self.flat.dtype.type(0))


@override("GridSample")
def grid_sample(c: GridSample, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    # PyTorch's grid_sample kernels compute in the tensor dtype itself, half types included (every
    # operation rounds to float16/bfloat16); the coordinates even pick pixels in that precision.
    dt = x.dtype
    n, channels = x.shape[:2]
    nd = x.ndim - 2
    sizes = x.shape[2:]
    out_sp = grid.shape[1:-1]
    g = grid.astype(dt).reshape(n, int(np.prod(out_sp)), nd)
    # grid[..., 0] is x (the last axis), grid[..., 1] is y, …
    raw = [_unnormalize(g[..., nd - 1 - a], sizes[a], c.align_corners, nd) for a in range(nd)]
    gather = _Gather(x.astype(dt))
    t = dt.type
    if c.mode == "bicubic":
        out = _bicubic(raw, sizes, c, gather)
    else:
        pos = [_pad_coords(r, s, c.padding, c.align_corners, nd) for r, s in zip(raw, sizes)]
        if c.mode == "nearest":
            out = gather([np.rint(p) for p in pos])
        else:
            base = [np.floor(p) for p in pos]
            if nd == 2:  # weights (1 - f, f) with f = x - floor(x), corner weight w_y · w_x
                ws = [(t(1) - (p - b), p - b) for p, b in zip(pos, base)]
                order = [0, 1]
            else:  # weights ((x0 + 1) - x, x - x0), corner weight w_x · w_y · w_z
                ws = [((b + t(1)) - p, p - b) for p, b in zip(pos, base)]
                order = list(reversed(range(nd)))
            values, weights = [], []
            for corner in itertools.product((0, 1), repeat=nd):
                w = ws[order[0]][corner[order[0]]]
                for a in order[1:]:
                    w = w * ws[a][corner[a]]
                values.append(gather([b + t(k) for b, k in zip(base, corner)]))
                weights.append(w[..., None])
            out = _chain_sum(values, weights) if nd == 2 else _plain_sum(values, weights)
    # [N, P, C] → [N, C, *out]
    return np.moveaxis(out, 2, 1).reshape((n, channels) + tuple(out_sp)).astype(x.dtype, copy=False)


def _bicubic(raw: list[np.ndarray], sizes: tuple[int, ...], c: GridSample, gather: _Gather) -> np.ndarray:
    if len(sizes) != 2:
        raise ValueError("bicubic grid sampling needs a 4-d input")
    t = raw[0].dtype.type
    (y, x), (h, w) = raw, sizes
    iy, ix = np.floor(y), np.floor(x)
    cy, cx = cubic_coefficients(y - iy, grid=True), cubic_coefficients(x - ix, grid=True)

    def tap(dy: int, dx: int) -> np.ndarray:
        # Every tap goes through the padding mode on its own (reflection may fold it back in).
        yy = _pad_coords(iy + t(dy), h, c.padding, c.align_corners, 2)
        xx = _pad_coords(ix + t(dx), w, c.padding, c.align_corners, 2)
        return gather([np.rint(yy), np.rint(xx)])

    wx, wy = [k[..., None] for k in cx], [k[..., None] for k in cy]
    # The compiled kernel fuses only the first multiply-add of each row, and every one of the column.
    rows = [_first_fused_sum([tap(dy, dx) for dx in range(-1, 3)], wx) for dy in range(-1, 3)]
    return _chain_sum(rows, wy)
