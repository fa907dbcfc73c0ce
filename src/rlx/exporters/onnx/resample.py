"""Resampling: Upsample as one Resize where that is exact, else as Gathers of PyTorch's own source
indices, weighted and summed; GridSample through GridSample-20.

Resize is exact for float32 enlarged by whole factors (nearest: index ⌊i / k⌋; linear: factors that
are powers of two, whose coordinates and weights are dyadic): the common ×2 of decoders and feature
pyramids, where onnxruntime's kernel runs 6-30x faster than the Gathers. Elsewhere Upsample does
not use Resize: onnxruntime's Resize rounds its linear weights coarsely (1e-5 off in
float32), applies no scale factor the way PyTorch does for nearest (PyTorch's small 2-d kernel
copies an unchanged extent and halves a doubled one whatever the factor), reads a filter's unused
taps (NaN · 0) and has no kernel for float64 or the half types. With static extents the indices
and weights are the numpy kernels' own tables (``rlx.kernels.resample_tables``), constants of the
graph, so every engine picks the same pixels and weights. Symbolic extents (only in the portable
export of a dynamic program: the engines emit each specialisation with static extents) compute
the same formulas in the graph for nearest and linear (``_Axis``); bicubic and antialiased
resizes, whose number of taps follows the extents, are refused there. Only rounding differs from
PyTorch: products and sums round one at a time, where its compiled kernel fuses some multiply-adds.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from rlx.exporters.onnx.registry import OnnxGraph, T, emits, unsupported
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr
from rlx.ir.symbolic import Dim
from rlx.kernels.resample_tables import aa_taps, cubic_taps, linear_taps, nearest_index, opmath

_F32 = np.dtype(np.float32)


@emits(C.Upsample, widen=True)
def upsample(g: OnnxGraph, c: C.Upsample, out: Instr, x: T) -> T:
    if c.mode not in ("nearest", "nearest_exact", "linear", "bicubic"):
        raise unsupported(c, f"in mode {c.mode!r}")
    assert x.shape is not None
    nd = len(c.size)
    lead = x.rank - nd
    sizes_in, sizes = tuple(x.shape[lead:]), tuple(c.size)
    xdt = dtypes.to_numpy(out.dtype)  # the declared dtype: half-precision weights are rounded to it
    if all(isinstance(d, int) for d in sizes_in + sizes):
        return _static(g, c, x, lead, sizes_in, sizes, xdt)  # type: ignore[arg-type]
    if c.antialias or c.mode == "bicubic":
        raise unsupported(c, f"{'antialiased' if c.antialias else 'bicubic'} with symbolic extents "
                             f"(its filter taps follow the extents: specialise the program)")  # fmt: skip
    return _symbolic(g, c, x, lead, sizes_in, sizes, xdt)


# ── shared by both: reading and weighting taps along one axis ────────────────
def _along(x: T, axis: int, extent: Dim) -> tuple[Dim, ...] | None:
    """``x``'s shape with ``axis`` resized to ``extent``."""
    return None if x.shape is None else tuple(x.shape[:axis]) + (extent,) + tuple(x.shape[axis + 1 :])


def _take(g: OnnxGraph, x: T, axis: int, idx: T, extent: Dim) -> T:
    return g.op("Gather", [x, idx], x.dtype, _along(x, axis, extent), axis=axis)


def _weighted_sum(g: OnnxGraph, terms: Sequence[tuple[T, T]], used: Sequence[np.ndarray | None] = ()) -> T:
    """``Σ t_k·w_k`` in tap order. ``used[k]``: where tap ``k`` counts (an antialiasing filter's
    unused taps read a clamped index: skipped, not weighted by 0, which would spread NaN/inf)."""
    acc: T | None = None
    for k, (t, w) in enumerate(terms):
        term = g.op("Mul", [t, w], t.dtype, t.shape)
        summed = term if acc is None else g.op("Add", [acc, term], t.dtype, t.shape)
        mask = used[k] if k < len(used) else None
        if acc is not None and mask is not None and not mask.all():
            summed = g.op("Where", [g.const(mask, "bool"), summed, acc], t.dtype, t.shape)
        acc = summed
    assert acc is not None
    return acc


def _column(a: np.ndarray, trailing: int) -> np.ndarray:
    """A per-output-index table shaped to broadcast along an axis with ``trailing`` axes after it."""
    return a.reshape(a.shape + (1,) * trailing)


# ── static extents: the numpy kernels' tables as constants ───────────────────
def _static(g: OnnxGraph, c: C.Upsample, x: T, lead: int, sizes_in: tuple[int, ...], sizes: tuple[int, ...],
            xdt: np.dtype) -> T:  # fmt: skip
    nd = len(sizes)
    dt = opmath(xdt)
    factors = _exact_resize_factors(c, x, sizes_in, sizes, xdt)
    if factors is not None:  # (onnxruntime's Resize kernel: 6-30x faster than the Gathers below)
        mode, transform, nearest = (
            ("nearest", "asymmetric", "floor") if c.mode == "nearest" else ("linear", "half_pixel", None)
        )
        scales = g.const(np.asarray([1.0] * lead + factors), "f32")
        return g.op("Resize", [x, None, scales], x.dtype, _resized(x, lead, sizes), mode=mode,
                    coordinate_transformation_mode=transform, nearest_mode=nearest)  # fmt: skip
    if c.mode in ("nearest", "nearest_exact"):
        legacy = _small_2d(sizes)
        for a in range(nd):
            idx = nearest_index(sizes_in[a], sizes[a], c.scales[a], c.mode == "nearest_exact", legacy, dt)
            if not np.array_equal(idx, np.arange(sizes_in[a])):
                x = _take(g, x, lead + a, g.const(idx, "i64"), sizes[a])
        return x
    if c.antialias:  # separable passes, the last axis first; an unchanged extent is left alone
        for a in reversed(range(nd)):
            if sizes_in[a] != sizes[a]:
                idx, w, count = aa_taps(sizes_in[a], sizes[a], c.scales[a], c.align_corners, c.mode == "bicubic", dt)
                used = [_column(k < count, nd - 1 - a) for k in range(idx.shape[1])]
                x = _taps(g, x, lead + a, idx, _column(w, nd - 1 - a), sizes[a], used)
        return x
    if c.mode == "linear" and _small_2d(sizes):
        return _bilinear_small(g, c, x, sizes_in, sizes, dt)
    # The generic kernel: separable passes, the last axis first, weights stored in the tensor dtype.
    taps = linear_taps if c.mode == "linear" else cubic_taps
    for a in reversed(range(nd)):
        idx, w = taps(sizes_in[a], sizes[a], c.scales[a], c.align_corners, dt, xdt)
        x = _taps(g, x, lead + a, idx, _column(w, nd - 1 - a), sizes[a])
    return x


def _exact_resize_factors(
    c: C.Upsample, x: T, sizes_in: tuple[int, ...], sizes: tuple[int, ...], xdt: np.dtype
) -> list[float] | None:
    """The factor of each axis where Resize computes exactly PyTorch's answer, else None: float32
    in the graph, and every axis enlarged by an integer factor k whose PyTorch table is the one
    Resize's arithmetic gives exactly. Nearest: index ⌊i / k⌋ (i / k is exact below 2**24 / k).
    Linear (not aligned, not antialiased, float32 weights): k a power of two, where the half-pixel
    coordinate (i + ½) / k − ½ and its weights are dyadic, so both compute them without rounding
    (a source past the last pixel reads that pixel in both)."""
    if (
        x.dtype != "f32"
        or c.antialias
        or c.mode not in ("nearest", "linear")
        or (c.mode == "linear" and c.align_corners)
    ):
        return None
    factors = []
    for a, (n_in, n_out) in enumerate(zip(sizes_in, sizes)):
        k, rest = divmod(n_out, n_in)
        if rest or k < 1:
            return None
        i = np.arange(n_out)
        if c.mode == "nearest":
            legacy = _small_2d(sizes)
            if not np.array_equal(nearest_index(n_in, n_out, c.scales[a], False, legacy, _F32), i // k):
                return None
        else:
            if xdt != _F32 or k & (k - 1):
                return None
            real = np.maximum((i + 0.5) / k - 0.5, 0.0)  # (float64: exact for these dyadic values)
            i0 = np.minimum(np.floor(real).astype(np.int64), n_in - 1)
            w1 = np.clip(real - i0, 0.0, 1.0)
            idx, w = linear_taps(n_in, n_out, c.scales[a], False, _F32, xdt)
            if k > 1 and not (np.array_equal(idx[:, 0], i0) and np.array_equal(w[:, 1].astype(np.float64), w1)):
                return None
        factors.append(float(k))
    return factors


def _small_2d(sizes: tuple[int, ...]) -> bool:
    """Whether PyTorch runs its small-output 2-d kernel (the channels-last one) for these extents."""
    return len(sizes) == 2 and sum(sizes) <= 128


def _resized(x: T, lead: int, sizes: tuple[int, ...]) -> tuple[Dim, ...] | None:
    return None if x.shape is None else tuple(x.shape[:lead]) + sizes


def _taps(g: OnnxGraph, x: T, axis: int, idx: np.ndarray, w: np.ndarray, extent: int,
          used: Sequence[np.ndarray] = ()) -> T:  # fmt: skip
    """``out[…, o, …] = Σ_k x[…, idx[o, k], …] · w[o, k]`` along ``axis`` (``w`` broadcasting there)."""
    terms = [(_take(g, x, axis, g.const(idx[:, k], "i64"), extent), g.const(w[:, k], x.dtype))
             for k in range(idx.shape[1])]  # fmt: skip
    return _weighted_sum(g, terms, used)


def _bilinear_small(g: OnnxGraph, c: C.Upsample, x: T, sizes_in: tuple[int, ...], sizes: tuple[int, ...],
                    dt: np.dtype) -> T:  # fmt: skip
    """PyTorch's 2-d kernel for small outputs: four corner weights ``w_h·w_w`` in opmath, summed in
    corner order (the separable passes would round the row sums to the tensor dtype first)."""
    (hi, hw), (wi, ww) = (linear_taps(n_in, n_out, s, c.align_corners, dt, dt)
                          for n_in, n_out, s in zip(sizes_in, sizes, c.scales))  # fmt: skip
    terms = []
    for a, b in itertools.product((0, 1), repeat=2):
        rows = _take(g, x, x.rank - 2, g.const(hi[:, a], "i64"), sizes[0])
        corner = _take(g, rows, x.rank - 1, g.const(wi[:, b], "i64"), sizes[1])
        terms.append((corner, g.const(hw[:, a][:, None] * ww[:, b][None, :], x.dtype)))
    return _weighted_sum(g, terms)


# ── symbolic extents: nearest and linear indices computed in the graph ──────
class _Axis:
    """One resized axis with extents known only at run time: ``resample_tables``' formulas for it
    as ONNX nodes, in ``dt`` (PyTorch's opmath), each operation rounding as the tables' does."""

    def __init__(self, g: OnnxGraph, n_in: Dim, n_out: Dim, dt: str) -> None:
        self.g, self.dt = g, dt
        self.n_in, self.n_out = self.extent(n_in), self.extent(n_out)
        self.last = self.op("Sub", self.n_in, self.i64(1), dtype="i64")
        ramp = g.op("Range", [self.i64(0), self.n_out, self.i64(1)], "i64", (n_out,))
        self.i, self.fi = ramp, g.cast(ramp, dt)
        self.same = self.op("Equal", self.n_in, self.n_out, dtype="bool")  # an unchanged extent

    def extent(self, d: Dim) -> T:
        return self.g.op("Squeeze", [self.g.dim(d), self.g.ints([0])], "i64", ())

    def op(self, op_type: str, *inputs: T, dtype: str | None = None) -> T:
        return self.g.op(op_type, list(inputs), dtype or self.dt)

    def k(self, value: float) -> T:
        return self.g.const(value, self.dt)

    def i64(self, value: int) -> T:
        return self.g.const(value, "i64")

    def scale(self, scale: float | None, align_corners: bool) -> T:
        """``area_scale``: output → input coordinate ratio."""
        fin, fout = self.g.cast(self.n_in, self.dt), self.g.cast(self.n_out, self.dt)
        if align_corners:  # (n_in - 1) / (n_out - 1), 0 for one output
            spans = self.op("Sub", fin, self.k(1)), self.op("Max", self.op("Sub", fout, self.k(1)), self.k(1))
            more = self.op("Greater", self.n_out, self.i64(1), dtype="bool")
            return self.op("Where", more, self.op("Div", *spans), self.k(0))
        if scale is not None and scale > 0:
            return self.k(1.0 / scale)
        return self.op("Div", fin, fout)

    def source(self, s: T, align_corners: bool) -> T:
        """``source_index`` (linear: clamped at 0): ``s·i``, or ``(i + ½)·s - ½`` rounded once
        (float32 through float64, which holds the product exactly, as ``resample_tables.fma``)."""
        if align_corners:
            return self.op("Mul", s, self.fi)
        half = self.op("Add", self.fi, self.k(0.5))
        wide = "f64"
        product = self.op("Mul", self.g.cast(half, wide), self.g.cast(s, wide), dtype=wide)
        src = self.g.cast(self.op("Sub", product, self.g.const(0.5, wide), dtype=wide), self.dt)
        return self.op("Max", src, self.k(0))

    def floorf(self, v: T) -> T:
        """C's ``floorf`` (the argument rounded to float32 first) as an int64 index."""
        return self.g.cast(self.op("Floor", self.g.cast(v, "f32"), dtype="f32"), "i64")

    def clamped(self, idx: T) -> T:
        return self.op("Min", idx, self.last, dtype="i64")

    def nearest(self, scale: float | None, exact: bool, small: T | None) -> T:
        """``nearest_index``; ``small``: whether PyTorch takes its small 2-d kernel (a run-time
        bool), which copies an unchanged extent and halves a doubled one whatever the factor
        (its other indices are the generic kernel's but for float32 rounding of a float64 scale)."""
        s = self.scale(scale, False)
        if exact:
            wide = self.g.cast(self.source(s, False), "f64")
            idx = self.floorf(self.op("Add", wide, self.g.const(0.5, "f64"), dtype="f64"))
        else:
            idx = self.floorf(self.op("Mul", s, self.fi))
        if small is not None and not exact:
            twice = self.op("Mul", self.n_in, self.i64(2), dtype="i64")
            doubled = self.op("And", small, self.op("Equal", self.n_out, twice, dtype="bool"), dtype="bool")
            # i // 2 by an exact Div (ONNX leaves an inexact integer Div's rounding open: OpenVINO rounds)
            even = self.op("Sub", self.i, self.op("Mod", self.i, self.i64(2), dtype="i64"), dtype="i64")
            half = self.op("Div", even, self.i64(2), dtype="i64")
            idx = self.op("Where", doubled, half, idx, dtype="i64")
            idx = self.op("Where", self.op("And", small, self.same, dtype="bool"), self.i, idx, dtype="i64")
        return self.clamped(idx)

    def linear(self, scale: float | None, align_corners: bool, store: str) -> tuple[T, T, T, T]:
        """``linear_taps``: (i0, i1, w0, w1), weights rounded to ``store``; an unchanged extent
        is copied whatever the scale factor."""
        real = self.source(self.scale(scale, align_corners), align_corners)
        i0 = self.clamped(self.floorf(real))
        frac = self.op("Clip", self.op("Sub", real, self.g.cast(i0, self.dt)), self.k(0), self.k(1))
        w1 = self.stored(self.op("Where", self.same, self.k(0), frac), store)
        w0 = self.stored(self.op("Sub", self.k(1), w1), store)
        i1 = self.op("Add", i0, self.g.cast(self.op("Less", i0, self.last, dtype="bool"), "i64"), dtype="i64")
        copy = [self.op("Where", self.same, self.i, i, dtype="i64") for i in (i0, i1)]
        return copy[0], copy[1], w0, w1

    def stored(self, w: T, store: str) -> T:
        return w if store == self.dt else self.g.cast(self.g.cast(w, store), self.dt)


def _symbolic(g: OnnxGraph, c: C.Upsample, x: T, lead: int, sizes_in: tuple[Dim, ...], sizes: tuple[Dim, ...],
              xdt: np.dtype) -> T:  # fmt: skip
    nd = len(sizes)
    dt = dtypes.from_numpy(opmath(xdt))
    axes = [_Axis(g, n_in, n_out, dt) for n_in, n_out in zip(sizes_in, sizes)]
    if c.mode in ("nearest", "nearest_exact"):
        small = None
        if nd == 2:  # PyTorch's small-output kernel, decided by the extents of this run
            total = g.op("Add", [axes[0].n_out, axes[1].n_out], "i64", ())
            small = g.op("LessOrEqual", [total, g.const(128, "i64")], "bool", ())
        for a, ax in enumerate(axes):
            x = _take(g, x, lead + a, ax.nearest(c.scales[a], c.mode == "nearest_exact", small), sizes[a])
        return x
    # Separable passes, the last axis first (PyTorch's small 2-d kernel differs only in rounding).
    store = dtypes.from_numpy(xdt)
    for a in reversed(range(nd)):
        i0, i1, w0, w1 = axes[a].linear(c.scales[a], c.align_corners, store)
        column = g.ints([-1] + [1] * (nd - 1 - a))
        w0, w1 = (g.op("Reshape", [w, column], dt) for w in (w0, w1))
        x = _weighted_sum(g, [(_take(g, x, lead + a, i0, sizes[a]), w0), (_take(g, x, lead + a, i1, sizes[a]), w1)])
    return x


# ── GridSample ───────────────────────────────────────────────────────────────
@emits(C.GridSample, widen=True)
def grid_sample(g: OnnxGraph, c: C.GridSample, out: Instr, x: T, grid: T) -> T:
    mode = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}.get(c.mode)
    if mode is None:
        raise unsupported(c, f"in mode {c.mode!r}")
    if out.dtype in ("f16", "bf16"):
        # PyTorch's kernel computes coordinates and weights in the half type itself (pixels picked
        # and weighted 1e-3 apart from float32's), which GridSample (float32 here) does not.
        why = f"PyTorch computes it in {out.dtype} itself, GridSample in float32"
        raise unsupported(c, f"in {out.dtype} ({why})")
    return g.op("GridSample", [x, g.cast(grid, x.dtype)], x.dtype, out.shape, mode=mode,
                padding_mode=c.padding, align_corners=int(c.align_corners))  # fmt: skip
