"""Resampling tables: source indices and filter weights as PyTorch's CPU kernels compute them.

They depend only on extents, scale factors and dtypes (Call fields), so every engine builds them
with numpy — the numpy engine per call, the JAX engine once at trace time, entering the compiled
graph as constants — and no two engines can pick different pixels or weights. The kernels that
apply them are ``rlx.kernels.resample``; ``fma`` and the cubic kernel (``keys_near``, ``keys_far``,
``cubic_coefficients``) also run on grid_sample's data there, so they take the engine's namespace
(the tables pass ``TABLES``, numpy's).


They follow PyTorch's CPU kernels step by step, because a coordinate that lands a rounding error
away from a pixel boundary picks a different pixel (nearest) or moves a weight by far more than
the output's own rounding (linear, cubic):

- upsampling computes coordinates and weights in PyTorch's "opmath" type (float32 for float32 and
  the half types, float64 for float64), with C's float32 ``floorf`` even on doubles; the generic
  kernel interpolates the last axis first, keeps partial sums in opmath and stores weights in the
  tensor dtype (rounding them for half types); small 2-d outputs take PyTorch's channels-last
  kernels instead, whose nearest index rule differs (see ``nearest_index``);
- grid_sample computes in the tensor dtype itself, as PyTorch does, half types included;
- where PyTorch's x86-64 build fuses a multiply and an add into one rounding (an FMA), the
  kernels do too in float32 (``fma``). With all this, float32 and half-precision results match
  PyTorch 2.13's x86-64 (AVX-512) CPU kernels bit for bit in the tests; float64 ones, which are
  not fused here, agree to a few ulps. Elsewhere only the last bit or two may differ.

Everything is vectorised over pixels; the only Python loops run over spatial axes and filter taps.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def opmath(dtype: np.dtype) -> np.dtype:
    return _F64 if dtype == _F64 else _F32


def _as_computed(a: Any) -> Any:
    return a


# numpy rounds every operation on its own, in the order written: its rounding hooks are the plain
# operations. An engine whose compiler contracts or reorders arithmetic (XLA) brings its own
# (``rlx.kernels.jax.namespace``); the shared resampling kernels call only these three.
NUMPY_ROUNDING: dict[str, Any] = {"unfused_mul": np.multiply, "exact_div": np.true_divide, "barrier": _as_computed}
# The tables are numpy at every engine (trace-time constants under JAX).
TABLES = SimpleNamespace(asarray=np.asarray, **NUMPY_ROUNDING)


def fma(a: Any, b: Any, c: Any, xp: Any) -> Any:
    """``a·b + c`` rounded once for float32 (through float64, which holds the product exactly, so
    a compiler fusing it there changes nothing), as the compiled kernels compute it; other dtypes
    round the product and the sum."""
    a = xp.asarray(a)
    if a.dtype == _F32:
        return (a.astype(_F64) * xp.asarray(b).astype(_F64) + xp.asarray(c).astype(_F64)).astype(_F32)
    return xp.unfused_mul(a, b) + c


# ── Upsample ─────────────────────────────────────────────────────────────────
def area_scale(size_in: int, size_out: int, align_corners: bool, scale: float | None, dt: np.dtype) -> np.floating[Any]:
    """``area_pixel_compute_scale``: output → input coordinate ratio, in ``dt``."""
    t = dt.type
    if align_corners:
        return t(size_in - 1) / t(size_out - 1) if size_out > 1 else t(0)
    if scale is not None and scale > 0:
        return t(1.0 / scale)
    return t(size_in) / t(size_out)


def source_index(scale: np.floating[Any], size_out: int, align_corners: bool, cubic: bool) -> np.ndarray:
    """``area_pixel_compute_source_index`` for every output index, in the dtype of ``scale``."""
    t = type(scale)
    i = np.arange(size_out).astype(t)
    if align_corners:
        return scale * i
    src = fma(i + t(0.5), scale, t(-0.5), TABLES)
    return src if cubic else np.where(src < 0, t(0), src)


def floorf(x: np.ndarray) -> np.ndarray:
    """C's ``floorf``: the argument is rounded to float32 first (PyTorch calls it on doubles too)."""
    return np.floor(x.astype(_F32)).astype(np.int64)


def nearest_index(
    size_in: int, size_out: int, scale: float | None, exact: bool, legacy: bool, dt: np.dtype
) -> np.ndarray:
    """Source index of every output index along one axis.

    ``legacy`` is the channels-last kernel's ``nearest_idx`` (PyTorch uses it for small 2-d outputs):
    it copies when the extent is unchanged and halves indices when it exactly doubles, whatever
    the scale factor; the generic kernel always applies the scale.
    """
    i = np.arange(size_out)
    if legacy:
        s = area_scale(size_in, size_out, False, scale, _F32)
        if exact:
            idx = floorf((i + 0.5) * np.float64(s))
        elif size_out == size_in:
            idx = i
        elif size_out == 2 * size_in:
            idx = i >> 1
        else:
            idx = floorf(i.astype(_F32) * s)
    else:
        s = area_scale(size_in, size_out, False, scale, dt)
        if exact:
            idx = floorf(source_index(s, size_out, False, False).astype(_F64) + 0.5)
        else:
            idx = floorf(source_index(s, size_out, True, False))
    return np.minimum(idx, size_in - 1)


def linear_taps(
    size_in: int, size_out: int, scale: float | None, align_corners: bool, dt: np.dtype, store: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each ``[size_out, 2]`` (``compute_source_index_and_lambda``); the
    weights are rounded to ``store``, the second one before the first is derived from it."""
    if size_in == size_out:  # PyTorch copies whatever the scale factor or align_corners
        i = np.arange(size_out)
        return np.stack([i, i], 1), np.stack([np.ones(size_out, dt), np.zeros(size_out, dt)], 1)
    real = source_index(area_scale(size_in, size_out, align_corners, scale, dt), size_out, align_corners, False)
    i0 = np.minimum(floorf(real), size_in - 1)
    lam1 = np.clip(real - i0.astype(dt), 0, 1).astype(store).astype(dt)
    lam0 = (dt.type(1) - lam1).astype(store).astype(dt)
    i1 = i0 + (i0 < size_in - 1)
    return np.stack([i0, i1], 1), np.stack([lam0, lam1], 1)


def keys_near(x: Any, a: float, fused: tuple[bool, bool], xp: Any) -> Any:
    """Keys' cubic convolution kernel for |x| <= 1: ``u·x·x + 1`` with ``u = (a + 2)·x - (a + 3)``.
    ``fused`` says which of the two multiply-adds PyTorch's compiled kernel rounds once."""
    t = x.dtype.type
    mul = xp.unfused_mul
    u = fma(x, t(a) + t(2), -(t(a) + t(3)), xp) if fused[0] else mul(x, t(a) + t(2)) - (t(a) + t(3))
    return fma(mul(u, x), x, t(1), xp) if fused[1] else mul(mul(u, x), x) + t(1)


def keys_far(x: Any, a: float, fused: tuple[bool, bool, bool], xp: Any) -> Any:
    """… and for 1 < |x| < 2: ``((a·x - 5a)·x + 8a)·x - 4a`` (``fused``: per multiply-add)."""
    t = x.dtype.type
    a = t(a)
    mul = xp.unfused_mul
    u = fma(x, a, -(t(5) * a), xp) if fused[0] else mul(x, a) - t(5) * a
    u = fma(u, x, t(8) * a, xp) if fused[1] else mul(u, x) + t(8) * a
    return fma(u, x, -(t(4) * a), xp) if fused[2] else mul(u, x) - t(4) * a


def cubic_coefficients(f: Any, xp: Any, grid: bool = False) -> list[Any]:
    """Weights (A = -0.75) of the taps at offsets -1, 0, 1, 2 from ``floor(x)``, ``f = x - floor(x)``.
    The two kernels spell them differently: grid_sample takes ``2 - f`` for the last distance where
    upsampling takes ``(1 - f) + 1``, and their compiled forms fuse different multiply-adds."""
    t = f.dtype.type
    g = t(1) - f
    if grid:
        near, far, last = (False, True), (False, False, False), t(2) - f
    else:
        near, far, last = (True, False), (True, True, False), g + t(1)
    return [
        keys_far(f + t(1), -0.75, far, xp),
        keys_near(f, -0.75, near, xp),
        keys_near(g, -0.75, near, xp),
        keys_far(last, -0.75, far, xp),
    ]


def cubic_taps(
    size_in: int, size_out: int, scale: float | None, align_corners: bool, dt: np.dtype, store: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each ``[size_out, 4]``; taps beyond the border repeat the edge pixel."""
    real = source_index(area_scale(size_in, size_out, align_corners, scale, dt), size_out, align_corners, True)
    i0 = np.minimum(floorf(real), size_in - 1)
    f = np.clip(real - i0.astype(dt), 0, 1).astype(dt)
    idx = np.clip(i0[:, None] + np.arange(-1, 3), 0, size_in - 1)
    return idx, np.stack(cubic_coefficients(f, TABLES), 1).astype(store).astype(dt)


def aa_taps(
    size_in: int, size_out: int, scale: float | None, align_corners: bool, cubic: bool, dt: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Antialiased (PIL-style) filter: (indices, weights) ``[size_out, taps]`` and the number of
    taps each output uses. The filter widens by the downscaling factor and sums to one."""
    t = dt.type
    s = area_scale(size_in, size_out, align_corners, scale, dt)
    half = 2.0 if cubic else 1.0
    support = t(half * float(s)) if s >= 1 else t(half)
    # No output reads more than the whole input: a filter wider than the input (a user's tiny
    # scale factor) keeps size_in taps, so the cost follows the sizes, never the scale.
    taps = min(int(np.ceil(support)) * 2 + 1, max(size_in, 1))
    center = (np.float64(s) * (np.arange(size_out) + 0.5)).astype(dt)
    invscale = t(1.0 / float(s)) if s >= 1 else t(1.0)
    lo = np.maximum(np.trunc((center - support).astype(_F64) + 0.5).astype(np.int64), 0)
    hi = np.minimum(np.trunc((center + support).astype(_F64) + 0.5).astype(np.int64), size_in)
    count = np.clip(hi - lo, 0, taps)
    j = np.arange(taps)
    pos = (lo[:, None] + j).astype(dt)
    x = np.abs(((pos - center[:, None]).astype(_F64) + 0.5) * np.float64(invscale)).astype(dt)
    if cubic:  # Keys with a = -0.5 (PIL's bicubic), not the -0.75 of the plain kernel
        near, far = keys_near(x, -0.5, (True, True), TABLES), keys_far(x, -0.5, (True, True, True), TABLES)
        w = np.where(x < 1, near, np.where(x < 2, far, t(0)))
    else:
        w = np.where(x < 1, t(1) - x, t(0))
    w = np.where(j < count[:, None], w, t(0)).astype(dt)
    total = np.zeros(size_out, dt)
    for k in range(taps):  # sequential sum, as PyTorch accumulates it
        total = total + w[:, k]
    w = np.where(total[:, None] != 0, w / np.where(total == 0, t(1), total)[:, None], w)
    return np.minimum(lo[:, None] + j, size_in - 1), w, count
