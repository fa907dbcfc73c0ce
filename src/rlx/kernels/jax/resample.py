"""The JAX engine's resampling kernels (Upsample, GridSample).

They compute what the numpy kernels (``rlx.kernels.numpy.resample``) compute, operation for
operation, so both backends follow PyTorch's CPU kernels to the bit (see that module for why the
order of roundings matters). Upsample's source indices and filter weights depend only on extents
and scale factors, which are Call fields: they are built once, at trace time, by the numpy
backend's own helpers and enter the jitted graph as constants; only the gathers and weighted sums
run on the data. grid_sample's coordinates come from the grid, so its arithmetic is written out
here in jax.numpy, in the tensor dtype as PyTorch computes it.

Under ``jax.jit`` XLA's CPU compiler rounds differently from numpy in three ways, all undone here:
it fuses every product with the sum it feeds into one FMA, divides by a constant as a
multiplication by its reciprocal, and folds two constants applied in a row (``(x + a) - b`` becomes
``x + (a - b)``). ``_mul`` and ``_div`` keep the product or the divisor behind a select it cannot
see through, and ``_keep`` (an optimization barrier) ends a chain of constant operations, so each
operation rounds on its own, as in PyTorch's kernel. A multiply-add PyTorch does fuse is computed
in float64 and rounded to float32 (``_fma``): the product of two float32 numbers is exact in
float64, so fusing it there changes nothing. Tests hold the two backends to the same bits.
Needs ``jax_enable_x64``.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np
from jax import lax

# The trace-time tables: pure functions of extents, scales and dtypes, shared with the numpy
# engine so the two cannot pick different pixels or weights.
from ...kernels.registry import static
from ...kernels.resample_tables import aa_taps, cubic_taps, linear_taps, nearest_index, opmath
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import GridSample, Upsample

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
Array = Any  # jax arrays and the numpy constants the tables make: one type to XLA


def _sizes(c: Upsample) -> tuple[int, ...]:
    """The output extents (ints once the program is specialised)."""
    return tuple(static(d) for d in c.size)


def _mul(a: Array, b: Array | np.ndarray | np.generic) -> Array:
    """``a·b`` rounded on its own, never fused into an add or subtract that uses it, however far
    down (NaN·b is NaN either way). Every product on data here goes through it."""
    return jnp.where(jnp.isnan(a), a, a * b)


def _keep(a: Array) -> Array:
    """``a`` as computed: later operations with constants are not folded into the ones before."""
    return lax.optimization_barrier(a)


def _div(a: Array, b: Array) -> Array:
    """``a / b`` for a constant ``b``, correctly rounded (not ``a · (1/b)``)."""
    return a / jnp.where(jnp.isnan(a), a, b)


def _fma(a: Array, b: Array | np.ndarray | np.generic, c: Array | np.ndarray | np.generic) -> Array:
    """``a·b + c`` rounded once for float32 (through float64, which holds the product exactly);
    other dtypes round the product and the sum."""
    if a.dtype == _F32:
        return (a.astype(_F64) * jnp.asarray(b).astype(_F64) + jnp.asarray(c).astype(_F64)).astype(_F32)
    return _mul(a, b) + c


def _fused_sum(ts: list[Array], ws: list[Array | np.ndarray]) -> Array:
    """``Σ t_k·w_k`` as ``fma(t0, w0, t1·w1)``, then ``fma(t_k, w_k, acc)``."""
    acc = _fma(ts[0], ws[0], _mul(ts[1], ws[1]))
    for t, w in zip(ts[2:], ws[2:]):
        acc = _fma(t, w, acc)
    return acc


def _plain_sum(ts: list[Array], ws: list[Array]) -> Array:
    """``Σ t_k·w_k`` in order, every product and sum rounded."""
    acc = _mul(ts[0], ws[0])
    for t, w in zip(ts[1:], ws[1:]):
        acc = acc + _mul(t, w)
    return acc


def _first_fused_sum(ts: list[Array], ws: list[Array]) -> Array:
    """``Σ t_k·w_k`` as ``fma(t0, w0, t1·w1)``, then rounded products and sums."""
    acc = _fma(ts[0], ws[0], _mul(ts[1], ws[1]))
    for t, w in zip(ts[2:], ws[2:]):
        acc = acc + _mul(t, w)
    return acc


def _chain_sum(ts: list[Array], ws: list[Array | np.ndarray]) -> Array:
    """``Σ t_k·w_k`` as ``t0·w0``, then ``fma(t_k, w_k, acc)``."""
    acc = _mul(ts[0], ws[0])
    for t, w in zip(ts[1:], ws[1:]):
        acc = _fma(t, w, acc)
    return acc


# ── Upsample ─────────────────────────────────────────────────────────────────
def _apply_taps(x: Array, axis: int, idx: np.ndarray, w: np.ndarray, count: np.ndarray | None = None) -> Array:
    """``out[..., o, ...] = Σ_k x[..., idx[o, k], ...] · w[o, k]`` along ``axis``, in tap order
    (``idx``, ``w`` and ``count`` are trace-time constants).

    The fixed-size filters sum like ``_fused_sum``. The antialiasing filters use the first
    ``count[o]`` taps in a loop ``acc += t·w`` that PyTorch's compiler unrolls by four: the
    unrolled body rounds each product and sum, the remainder fuses them."""
    bshape = (-1,) + (1,) * (x.ndim - 1 - axis)
    n_out, n_taps = idx.shape
    # One gather for all taps (a smaller graph to compile than one per tap), then a slice per tap.
    gathered = jnp.take(x, idx.reshape(-1), axis=axis).reshape(x.shape[:axis] + (n_out, n_taps) + x.shape[axis + 1 :])
    ts = [lax.index_in_dim(gathered, k, axis + 1, keepdims=False) for k in range(n_taps)]
    ws = [w[:, k].reshape(bshape) for k in range(n_taps)]
    if count is None:
        return _fused_sum(ts, ws)
    unrolled = (count - 1) // 4 * 4
    acc = _mul(ts[0], ws[0])
    for k in range(1, len(ts)):
        step = jnp.where((k <= unrolled).reshape(bshape), acc + _mul(ts[k], ws[k]), _fma(ts[k], ws[k], acc))
        acc = jnp.where((k < count).reshape(bshape), step, acc)
    return acc


@override("Upsample")
def upsample(c: Upsample, x: Array) -> Array:
    nd = len(_sizes(c))
    lead = x.ndim - nd
    sizes_in = x.shape[lead:]
    xdt = np.dtype(x.dtype)
    dt = opmath(xdt)
    if c.mode in ("nearest", "nearest_exact"):
        # PyTorch's 2-d kernel switches to its channels-last implementation for small outputs.
        legacy = nd == 2 and sum(_sizes(c)) <= 128
        out = x
        for a, (n_in, n_out, s) in enumerate(zip(sizes_in, _sizes(c), c.scales)):
            index = nearest_index(n_in, n_out, s, c.mode == "nearest_exact", legacy, dt)
            out = jnp.take(out, index, axis=lead + a)  # one axis at a time: no broadcast index grid
        return out
    if c.antialias:
        return _upsample_aa(c, x, nd, lead, dt)
    if c.mode == "linear" and nd == 2 and sum(_sizes(c)) <= 128:
        return _bilinear_small(c, x, dt)
    # The generic kernel: separable passes, the last axis first, partial sums kept in opmath and
    # weights stored in the tensor dtype (so rounded for half types).
    taps = linear_taps if c.mode == "linear" else cubic_taps
    out = x.astype(dt)
    for a in reversed(range(nd)):
        idx, w = taps(sizes_in[a], _sizes(c)[a], c.scales[a], c.align_corners, dt, xdt)
        out = _apply_taps(out, lead + a, idx, w)
    return out.astype(xdt)


def _bilinear_small(c: Upsample, x: Array, dt: np.dtype) -> Array:
    """PyTorch's 2-d kernel for small outputs: four corner weights ``w_h·w_w`` kept in opmath and
    summed in corner order (its float16 build fuses the multiply-adds differently)."""
    (hi, hw), (wi, ww) = (
        linear_taps(n_in, n_out, s, c.align_corners, dt, dt)
        for n_in, n_out, s in zip(x.shape[-2:], _sizes(c), c.scales)
    )
    xw = x.astype(dt)
    lead = x.shape[:-2]
    rows = jnp.take(xw, hi.reshape(-1), axis=-2).reshape(lead + (hi.shape[0], 2, x.shape[-1]))
    both = jnp.take(rows, wi.reshape(-1), axis=-1).reshape(lead + (hi.shape[0], 2, wi.shape[0], 2))
    corners = list(itertools.product((0, 1), repeat=2))
    values = [both[..., :, a, :, b] for a, b in corners]
    weights = [hw[:, a][:, None] * ww[:, b][None, :] for a, b in corners]  # trace-time, in opmath
    total = _chain_sum if x.dtype == np.float16 else _fused_sum
    return total(values, weights).astype(x.dtype)


def _upsample_aa(c: Upsample, x: Array, nd: int, lead: int, dt: np.dtype) -> Array:
    # Separable passes, the last axis first; an axis whose extent does not change is left alone.
    out = x.astype(dt)
    for a in reversed(range(nd)):
        n_in, n_out = x.shape[lead + a], _sizes(c)[a]
        if n_in == n_out:
            continue
        idx, w, count = aa_taps(n_in, n_out, c.scales[a], c.align_corners, c.mode == "bicubic", dt)
        out = _apply_taps(out, lead + a, idx, w, count)
    return out.astype(x.dtype)


# ── GridSample ───────────────────────────────────────────────────────────────
# PyTorch samples 2-d grids with a vectorised kernel and 3-d grids with a scalar one; the two
# spell unnormalisation, reflection and the corner weights differently, and both are followed.
# Constants are numpy scalars of the tensor dtype, so every operation stays in that dtype.


def _unnormalize(g: Array, size: int, align_corners: bool, nd: int) -> Array:
    """Grid value → pixel coordinate (kept: padding subtracts constants from it)."""
    t = g.dtype.type
    if nd == 2:
        if align_corners:
            return _keep(_mul(g + t(1), t(size - 1) / t(2)))
        return _keep(_fma(g + t(1), t(size) / t(2), t(-0.5)))
    if align_corners:
        return _keep(_mul(_keep((g + t(1)) / t(2)), t(size - 1)))
    return _keep((_mul(g + t(1), t(size)) - t(1)) / t(2))


def _clip(x: Array, size: int) -> Array:
    t = x.dtype.type
    # NaN goes to 0 as in PyTorch.
    return jnp.where(jnp.isnan(x), t(0), jnp.minimum(jnp.maximum(x, t(0)), t(size - 1)))


def _reflect(x: Array, size: int, align_corners: bool, nd: int) -> Array:
    t = x.dtype.type
    if nd == 2:
        if align_corners and size <= 1:
            return jnp.zeros_like(x)
        low = t(0) if align_corners else t(-0.5)
        span2 = t(size - 1) * t(2) if align_corners else t(size) * t(2)
        ax = jnp.abs(x - low)
        extra = ax - _mul(jnp.trunc(_div(ax, span2)), span2)
        return jnp.minimum(extra, span2 - extra) + low
    lo2, hi2 = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
    if lo2 == hi2:
        return jnp.zeros_like(x)
    low, span = t(lo2) / t(2), t(hi2 - lo2) / t(2)
    ax = jnp.abs(x - low)
    extra = jnp.fmod(ax, span)
    odd = jnp.floor(_div(ax, span)) % t(2) == t(1)
    return jnp.where(odd, _keep(span - extra) + low, extra + low)


def _pad_coords(x: Array, size: int, padding: str, align_corners: bool, nd: int) -> Array:
    if padding == "border":
        return _clip(x, size)
    if padding == "reflection":
        return _clip(_reflect(x, size, align_corners, nd), size)
    return x


class _Gather:
    """Reads ``x[n, :, i_0, …, i_k]`` for integer-valued coordinates of shape ``[N, P, *taps]``
    (broadcasting together) → ``[N, P, *taps, C]``, with 0 wherever a coordinate falls outside
    the input. Every tap of a filter is read by one gather: a far smaller graph to compile."""

    def __init__(self, x: Array) -> None:
        self.sizes = x.shape[2:]
        self.n = x.shape[0]
        # [N, C, *S] → [N, S_flat, C]
        self.flat = jnp.moveaxis(x.reshape(x.shape[0], x.shape[1], int(np.prod(self.sizes))), 1, 2)

    def __call__(self, coords: list[Array]) -> Array:
        shape = tuple(np.broadcast_shapes(*(tuple(c.shape) for c in coords)))
        valid = jnp.ones(shape, bool)
        lin = jnp.zeros(shape, np.int64)
        for c, n in zip(coords, self.sizes):
            ok = jnp.isfinite(c) & (c > -1) & (c < n)
            valid = valid & ok
            lin = lin * n + jnp.where(ok, c, 0).astype(np.int64)
        batch = np.arange(self.n).reshape((self.n,) + (1,) * (len(shape) - 1))
        vals = self.flat[batch, lin]
        return jnp.where(valid[..., None], vals, self.flat.dtype.type(0))


@override("GridSample")
def grid_sample(c: GridSample, x: Array, grid: Array) -> Array:
    # PyTorch's grid_sample kernels compute in the tensor dtype itself, half types included (every
    # operation rounds to float16/bfloat16); the coordinates even pick pixels in that precision.
    dt = np.dtype(x.dtype)
    n, channels = x.shape[:2]
    nd = x.ndim - 2
    sizes = x.shape[2:]
    out_sp = grid.shape[1:-1]
    g = grid.astype(dt).reshape(n, int(np.prod(out_sp)), nd)
    # grid[..., 0] is x (the last axis), grid[..., 1] is y, …
    raw = [_unnormalize(g[..., nd - 1 - a], sizes[a], c.align_corners, nd) for a in range(nd)]
    gather = _Gather(x)
    t = dt.type
    if c.mode == "bicubic":
        out = _bicubic(raw, sizes, c, gather)
    else:
        pos = [_pad_coords(r, s, c.padding, c.align_corners, nd) for r, s in zip(raw, sizes)]
        if c.mode == "nearest":
            out = gather([jnp.rint(p) for p in pos])  # half to even, as PyTorch's nearbyint
        else:
            base = [jnp.floor(p) for p in pos]
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
                    (b[..., None] + pair).reshape(b.shape + tuple(2 if k == a else 1 for k in range(nd)))
                    for a, b in enumerate(base)
                ]
            )
            values, weights = [], []
            for corner in itertools.product((0, 1), repeat=nd):
                w = ws[order[0]][corner[order[0]]]
                for a in order[1:]:
                    w = _mul(w, ws[a][corner[a]])
                values.append(near[(slice(None), slice(None)) + corner])
                weights.append(w[..., None])
            out = _chain_sum(values, weights) if nd == 2 else _plain_sum(values, weights)
    # [N, P, C] → [N, C, *out]
    return jnp.moveaxis(out, 2, 1).reshape((n, channels) + tuple(out_sp)).astype(dt)


def _keys_near(x: Array, a: float, fused: tuple[bool, bool]) -> Array:
    """Keys' cubic convolution kernel for |x| <= 1: ``u·x·x + 1`` with ``u = (a + 2)·x - (a + 3)``."""
    t = x.dtype.type
    u = _fma(x, t(a) + t(2), -(t(a) + t(3))) if fused[0] else _mul(x, t(a) + t(2)) - (t(a) + t(3))
    return _fma(_mul(u, x), x, t(1)) if fused[1] else _mul(_mul(u, x), x) + t(1)


def _keys_far(x: Array, a: float) -> Array:
    """… and for 1 < |x| < 2: ``((a·x - 5a)·x + 8a)·x - 4a`` (grid_sample's kernel fuses none)."""
    t = x.dtype.type
    a = t(a)
    return _mul(_mul(_mul(x, a) - t(5) * a, x) + t(8) * a, x) - t(4) * a


def _grid_cubic_coefficients(f: Array) -> list[Array]:
    """grid_sample's weights (A = -0.75) of the taps at offsets -1, 0, 1, 2 from ``floor(x)``,
    ``f = x - floor(x)``; its last distance is ``2 - f`` (upsampling spells it ``(1 - f) + 1``)."""
    t = f.dtype.type
    near = (False, True)
    return [
        _keys_far(f + t(1), -0.75),
        _keys_near(f, -0.75, near),
        _keys_near(t(1) - f, -0.75, near),
        _keys_far(t(2) - f, -0.75),
    ]


def _bicubic(raw: list[Array], sizes: tuple[int, ...], c: GridSample, gather: _Gather) -> Array:
    if len(sizes) != 2:
        raise ValueError("bicubic grid sampling needs a 4-d input")
    (y, x), (h, w) = raw, sizes
    iy, ix = jnp.floor(y), jnp.floor(x)
    cy, cx = _grid_cubic_coefficients(y - iy), _grid_cubic_coefficients(x - ix)

    # Every tap goes through the padding mode on its own (reflection may fold it back in); the 4 × 4
    # taps are read by one gather, [N, P, 4, 4, C].
    offsets = np.arange(-1, 3).astype(raw[0].dtype)
    yy = _pad_coords(_keep(iy[..., None] + offsets), h, c.padding, c.align_corners, 2)
    xx = _pad_coords(_keep(ix[..., None] + offsets), w, c.padding, c.align_corners, 2)
    taps = gather([jnp.rint(yy)[..., :, None], jnp.rint(xx)[..., None, :]])

    wx, wy = [k[..., None] for k in cx], [k[..., None] for k in cy]
    # The compiled kernel fuses only the first multiply-add of each row, and every one of the column.
    rows = [_first_fused_sum([taps[:, :, r, k] for k in range(4)], wx) for r in range(4)]
    return _chain_sum(rows, wy)
