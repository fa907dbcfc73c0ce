"""Resampling (Upsample, GridSample), written once for every engine.

They follow PyTorch's CPU kernels step by step, with the tables of ``resample_tables`` (which say
why the order of roundings matters): upsampling interpolates the last axis first, keeps partial
sums in opmath and stores weights in the tensor dtype; grid_sample computes in the tensor dtype
itself, half types included. Upsample's source indices and filter weights depend only on extents
and scale factors (Call fields): they are numpy constants, built per call on numpy and once at
trace time under JAX; only the gathers and weighted sums run on the data. grid_sample's
coordinates come from the grid, so its arithmetic runs on ``xp``.

An engine's compiler may round differently from the order written: XLA fuses a product into the
sum it feeds (an FMA), divides by a constant as a multiplication by its reciprocal and folds two
constants applied in a row. So every product on data goes through ``xp.unfused_mul``, every
division by a constant through ``xp.exact_div``, and ``xp.barrier`` ends a chain of constant
operations: on numpy they are the plain operations (``resample_tables.NUMPY_ROUNDING``), on JAX
they keep each operation rounding on its own (``rlx.kernels.jax.namespace``). A multiply-add
PyTorch does fuse is ``resample_tables.fma``. Tests hold the engines to the same bits.

Everything is vectorised over pixels; the only Python loops run over spatial axes and filter taps.
Each filter reads all its taps with one gather (under JAX, a far smaller graph to compile).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from .registry import kernel, static
from .resample_tables import aa_taps, cubic_coefficients, cubic_taps, fma, linear_taps, nearest_index, opmath

if TYPE_CHECKING:
    from ..ir.calls import GridSample, Upsample
    from .namespace import ArrayNamespace


def weighted_sum(ts: list[Any], ws: list[Any], xp: ArrayNamespace, first: bool, rest: bool) -> Any:
    """``Σ t_k·w_k`` in order, rounded as PyTorch's compiled kernel rounds it. ``first``: it starts
    ``fma(t0, w0, t1·w1)`` (else ``t0·w0``, the second term then summed like the rest); ``rest``:
    each later term is fused into the sum, ``fma(t_k, w_k, acc)`` (else product and sum rounded)."""
    if first:
        acc, start = fma(ts[0], ws[0], xp.unfused_mul(ts[1], ws[1]), xp), 2
    else:
        acc, start = xp.unfused_mul(ts[0], ws[0]), 1
    for t, w in zip(ts[start:], ws[start:]):
        acc = fma(t, w, acc, xp) if rest else acc + xp.unfused_mul(t, w)
    return acc


# ── Upsample ─────────────────────────────────────────────────────────────────
def _take_taps(x: Any, axis: int, idx: np.ndarray, xp: ArrayNamespace) -> list[Any]:
    """``x[..., idx[:, k], ...]`` along ``axis`` for every tap ``k``: one gather a tap, each
    contiguous (numpy sums contiguous arrays fastest; XLA compiles a few more gathers)."""
    return [xp.take(x, idx[:, k], axis=axis) for k in range(idx.shape[1])]


def _take_grid(x: Any, index: list[np.ndarray], xp: ArrayNamespace) -> Any:
    """``x[..., index[0][:, None, …], index[1][None, :, …], …]`` over its trailing ``len(index)`` axes,
    as one gather of a flat index from those axes flattened (no broadcast index grid for XLA)."""
    lead, sizes_in = x.shape[: x.ndim - len(index)], x.shape[x.ndim - len(index) :]
    flat = np.zeros((), np.int64)
    for n_in, idx in zip(sizes_in, index):
        flat = flat[..., None] * n_in + idx
    picked = xp.take(xp.reshape(x, lead + (int(np.prod(sizes_in)),)), flat.reshape(-1), axis=len(lead))
    return xp.reshape(picked, lead + flat.shape)


def _apply_taps(
    x: Any, axis: int, idx: np.ndarray, w: np.ndarray, xp: ArrayNamespace, count: np.ndarray | None = None
) -> Any:
    """``out[..., o, ...] = Σ_k x[..., idx[o, k], ...] · w[o, k]`` along ``axis``, in tap order.

    The fixed-size filters sum like ``weighted_sum(first=True, rest=True)``. The antialiasing
    filters use the first ``count[o]`` taps in a loop ``acc += t·w`` that PyTorch's compiler unrolls
    by four: the unrolled body rounds each product and sum, the remainder fuses them."""
    bshape = (-1,) + (1,) * (x.ndim - 1 - axis)
    ts = _take_taps(x, axis, idx, xp)
    ws = [w[:, k].reshape(bshape) for k in range(idx.shape[1])]
    if count is None:
        return weighted_sum(ts, ws, xp, first=True, rest=True)
    unrolled = (count - 1) // 4 * 4
    acc = xp.unfused_mul(ts[0], ws[0])
    for k in range(1, len(ts)):
        step = xp.where((k <= unrolled).reshape(bshape), acc + xp.unfused_mul(ts[k], ws[k]), fma(ts[k], ws[k], acc, xp))
        acc = xp.where((k < count).reshape(bshape), step, acc)
    return acc


@kernel("Upsample")
def upsample(c: Upsample, x: Any, *, xp: ArrayNamespace) -> Any:
    sizes = tuple(static(d) for d in c.size)
    nd = len(sizes)
    lead = x.ndim - nd
    sizes_in = x.shape[lead:]
    xdt = np.dtype(x.dtype)
    dt = opmath(xdt)
    if c.mode in ("nearest", "nearest_exact"):
        # PyTorch's 2-d kernel switches to its channels-last implementation for small outputs.
        legacy = nd == 2 and sum(sizes) <= 128
        exact = c.mode == "nearest_exact"
        index = [nearest_index(n_in, n_out, s, exact, legacy, dt) for n_in, n_out, s in zip(sizes_in, sizes, c.scales)]
        return _take_grid(x, index, xp)
    out = x.astype(dt)
    if c.antialias:
        # Separable passes, the last axis first; an axis whose extent does not change is left alone.
        for a in reversed(range(nd)):
            if sizes_in[a] != sizes[a]:
                idx, w, count = aa_taps(sizes_in[a], sizes[a], c.scales[a], c.align_corners, c.mode == "bicubic", dt)
                out = _apply_taps(out, lead + a, idx, w, xp, count)
    elif c.mode == "linear" and nd == 2 and sum(sizes) <= 128:
        out = _bilinear_small(c, out, sizes, xdt, xp)
    else:
        # The generic kernel: separable passes, the last axis first, partial sums kept in opmath
        # and weights stored in the tensor dtype (so rounded for half types).
        taps = linear_taps if c.mode == "linear" else cubic_taps
        for a in reversed(range(nd)):
            idx, w = taps(sizes_in[a], sizes[a], c.scales[a], c.align_corners, dt, xdt)
            out = _apply_taps(out, lead + a, idx, w, xp)
    return out.astype(xdt, copy=False)


def _bilinear_small(c: Upsample, xw: Any, sizes: tuple[int, ...], xdt: np.dtype, xp: ArrayNamespace) -> Any:
    """PyTorch's 2-d kernel for small outputs: four corner weights ``w_h·w_w`` kept in opmath (``xw``'s
    dtype) and summed in corner order (its float16 build fuses the multiply-adds differently)."""
    dt = np.dtype(xw.dtype)
    (hi, hw), (wi, ww) = (
        linear_taps(n_in, n_out, s, c.align_corners, dt, dt) for n_in, n_out, s in zip(xw.shape[-2:], sizes, c.scales)
    )
    corners = list(itertools.product((0, 1), repeat=2))
    values = [_take_grid(xw, [hi[:, a], wi[:, b]], xp) for a, b in corners]
    weights = [hw[:, a][:, None] * ww[:, b][None, :] for a, b in corners]  # numpy constants, in opmath
    return weighted_sum(values, weights, xp, first=xdt != np.float16, rest=True)


# ── GridSample ───────────────────────────────────────────────────────────────
# PyTorch samples 2-d grids with a vectorised kernel and 3-d grids with a scalar one; the two
# spell unnormalisation, reflection and the corner weights differently, and both are followed.
# Constants are numpy scalars of the tensor dtype, so every operation stays in that dtype.


def _unnormalize(g: Any, size: int, align_corners: bool, nd: int, xp: ArrayNamespace) -> Any:
    """Grid value → pixel coordinate (kept: padding subtracts constants from it)."""
    t, mul, keep = g.dtype.type, xp.unfused_mul, xp.barrier
    if nd == 2:
        if align_corners:
            return keep(mul(g + t(1), t(size - 1) / t(2)))
        return keep(fma(g + t(1), t(size) / t(2), t(-0.5), xp))
    if align_corners:
        return keep(mul(keep((g + t(1)) / t(2)), t(size - 1)))
    return keep((mul(g + t(1), t(size)) - t(1)) / t(2))


def _clip(x: Any, size: int, xp: ArrayNamespace) -> Any:
    t = x.dtype.type
    # Not clip, which would promote bfloat16 to float32 on numpy; NaN goes to 0 as in PyTorch.
    return xp.where(xp.isnan(x), t(0), xp.minimum(xp.maximum(x, t(0)), t(size - 1)))


def _reflect(x: Any, size: int, align_corners: bool, nd: int, xp: ArrayNamespace) -> Any:
    t = x.dtype.type
    if nd == 2:
        if align_corners and size <= 1:
            return xp.zeros_like(x)
        low = t(0) if align_corners else t(-0.5)
        span2 = t(size - 1) * t(2) if align_corners else t(size) * t(2)
        ax = xp.abs(x - low)
        extra = ax - xp.unfused_mul(xp.trunc(xp.exact_div(ax, span2)), span2)
        return xp.minimum(extra, span2 - extra) + low
    lo2, hi2 = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
    if lo2 == hi2:
        return xp.zeros_like(x)
    low, span = t(lo2) / t(2), t(hi2 - lo2) / t(2)
    ax = xp.abs(x - low)
    extra = xp.fmod(ax, span)
    odd = xp.floor(xp.exact_div(ax, span)) % t(2) == t(1)
    return xp.where(odd, xp.barrier(span - extra) + low, extra + low)


def _pad_coords(x: Any, size: int, padding: str, align_corners: bool, nd: int, xp: ArrayNamespace) -> Any:
    if padding == "border":
        return _clip(x, size, xp)
    if padding == "reflection":
        return _clip(_reflect(x, size, align_corners, nd, xp), size, xp)
    return x


class _Gather:
    """Reads ``x[n, :, i_0, …, i_k]`` for integer-valued coordinates of shape ``[N, P, *taps]``
    (broadcasting together) → ``[N, P, *taps, C]``, with 0 wherever a coordinate falls outside
    the input. Every tap of a filter is read by one gather."""

    def __init__(self, x: Any, xp: ArrayNamespace) -> None:
        self.sizes, self.n, self.xp = x.shape[2:], x.shape[0], xp
        # [N, C, *S] → [N, S_flat, C]
        self.flat = xp.moveaxis(xp.reshape(x, (x.shape[0], x.shape[1], int(np.prod(self.sizes)))), 1, 2)

    def __call__(self, coords: list[Any]) -> Any:
        xp = self.xp
        shape = tuple(np.broadcast_shapes(*(tuple(c.shape) for c in coords)))
        valid = xp.ones(shape, bool)
        lin = xp.zeros(shape, np.int64)
        for c, n in zip(coords, self.sizes):
            ok = xp.isfinite(c) & (c > -1) & (c < n)
            valid = valid & ok
            lin = lin * n + xp.where(ok, c, 0).astype(np.int64)
        batch = np.arange(self.n).reshape((self.n,) + (1,) * (len(shape) - 1))
        return xp.where(valid[..., None], self.flat[batch, lin], self.flat.dtype.type(0))


@kernel("GridSample")
def grid_sample(c: GridSample, x: Any, grid: Any, *, xp: ArrayNamespace) -> Any:
    # PyTorch's grid_sample kernels compute in the tensor dtype itself, half types included (every
    # operation rounds to float16/bfloat16); the coordinates even pick pixels in that precision.
    dt = np.dtype(x.dtype)
    n, channels = x.shape[:2]
    nd = x.ndim - 2
    sizes = x.shape[2:]
    out_sp = grid.shape[1:-1]
    g = xp.reshape(grid.astype(dt), (n, int(np.prod(out_sp)), nd))
    # grid[..., 0] is x (the last axis), grid[..., 1] is y, …
    raw = [_unnormalize(g[..., nd - 1 - a], sizes[a], c.align_corners, nd, xp) for a in range(nd)]
    gather = _Gather(x, xp)
    t = dt.type
    if c.mode == "bicubic":
        out = _bicubic(raw, sizes, c, gather, xp)
    else:
        pos = [_pad_coords(r, s, c.padding, c.align_corners, nd, xp) for r, s in zip(raw, sizes)]
        if c.mode == "nearest":
            out = gather([xp.rint(p) for p in pos])  # half to even, as PyTorch's nearbyint
        else:
            base = [xp.floor(p) for p in pos]
            if nd == 2:  # weights (1 - f, f) with f = x - floor(x), corner weight w_y · w_x
                ws = [(t(1) - (p - b), p - b) for p, b in zip(pos, base)]
                order = [0, 1]
            else:  # weights ((x0 + 1) - x, x - x0), corner weight w_x · w_y · w_z
                ws = [((b + t(1)) - p, p - b) for p, b in zip(pos, base)]
                order = list(reversed(range(nd)))
            # Both neighbours along every axis, [N, P, 2, …, 2] together: one gather for all corners.
            pair = np.array([0, 1], dt)
            near = gather(
                [
                    xp.reshape(b[..., None] + pair, b.shape + tuple(2 if k == a else 1 for k in range(nd)))
                    for a, b in enumerate(base)
                ]
            )
            values, weights = [], []
            for corner in itertools.product((0, 1), repeat=nd):
                w = ws[order[0]][corner[order[0]]]
                for a in order[1:]:
                    w = xp.unfused_mul(w, ws[a][corner[a]])
                values.append(near[(slice(None), slice(None)) + corner])
                weights.append(w[..., None])
            out = weighted_sum(values, weights, xp, first=False, rest=nd == 2)
    # [N, P, C] → [N, C, *out]
    return xp.reshape(xp.moveaxis(out, 2, 1), (n, channels) + tuple(out_sp)).astype(dt, copy=False)


def _bicubic(raw: list[Any], sizes: tuple[int, ...], c: GridSample, gather: _Gather, xp: ArrayNamespace) -> Any:
    if len(sizes) != 2:
        raise ValueError("bicubic grid sampling needs a 4-d input")
    (y, x), (h, w) = raw, sizes
    iy, ix = xp.floor(y), xp.floor(x)
    cy, cx = cubic_coefficients(y - iy, xp, grid=True), cubic_coefficients(x - ix, xp, grid=True)
    # Every tap goes through the padding mode on its own (reflection may fold it back in); the 4 × 4
    # taps are read by one gather, [N, P, 4, 4, C].
    offsets = np.arange(-1, 3).astype(raw[0].dtype)
    yy = _pad_coords(xp.barrier(iy[..., None] + offsets), h, c.padding, c.align_corners, 2, xp)
    xx = _pad_coords(xp.barrier(ix[..., None] + offsets), w, c.padding, c.align_corners, 2, xp)
    taps = gather([xp.rint(yy)[..., :, None], xp.rint(xx)[..., None, :]])
    wx, wy = [k[..., None] for k in cx], [k[..., None] for k in cy]
    # The compiled kernel fuses only the first multiply-add of each row, and every one of the column.
    rows = [weighted_sum([taps[:, :, r, k] for k in range(4)], wx, xp, first=True, rest=False) for r in range(4)]
    return weighted_sum(rows, wy, xp, first=False, rest=True)
