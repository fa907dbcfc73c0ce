"""Resampling lowerings: upsampling (nearest, linear, bicubic, antialiased), pixel (un)shuffle, grid_sample."""

from __future__ import annotations

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.registry import Builder, lowers
from rlx.ir import dtypes
from rlx.ir.calls import GridSample, Permute, Reshape, Upsample
from rlx.ir.program import Operand

# ── upsampling ───────────────────────────────────────────────────────────────
# op → (Upsample mode, spatial rank, antialias). Every op has a `.vec` overload
# (input, output_size, [align_corners,] scale_factors) and a `.default` one
# (input, output_size, [align_corners,] scales_d?, scales_h?, scales_w?).
_LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}
_UPSAMPLE = {
    **{f"upsample_nearest{nd}d": ("nearest", nd, False) for nd in (1, 2, 3)},
    **{f"_upsample_nearest_exact{nd}d": ("nearest_exact", nd, False) for nd in (1, 2, 3)},
    **{f"upsample_{name}{nd}d": ("linear", nd, False) for nd, name in _LINEAR.items()},
    "upsample_bicubic2d": ("bicubic", 2, False),
    "_upsample_bilinear2d_aa": ("linear", 2, True),
    "_upsample_bicubic2d_aa": ("bicubic", 2, True),
}
_SCALE_NAMES = {1: ("scales",), 2: ("scales_h", "scales_w"), 3: ("scales_d", "scales_h", "scales_w")}


@lowers(*(f"aten.{op}" for op in _UPSAMPLE))
def upsample(node: Node, b: Builder) -> Operand:
    mode, nd, antialias = _UPSAMPLE[node.base]
    x = b.input(node, 0)
    if b.rank(x) != nd + 2:
        raise LoweringError(f"node {node.id} ({node.op}): expected a {nd + 2}-d input, found {b.rank(x)}-d")
    nearest = mode.startswith("nearest")
    if not nearest and not dtypes.is_float(b.dtype(x)):
        raise LoweringError(
            f"node {node.id} ({node.op}): {mode} upsampling of {b.dtype(x)} tensors (PyTorch's fixed-point "
            "uint8 path) is not supported; convert the input to float first"
        )
    align_corners = False if nearest else bool(node.arg(2, "align_corners"))
    first_scale = 2 if nearest else 3
    if node.overload == "vec":
        factors = node.arg(first_scale, "scale_factors")
        scales: tuple[float | None, ...] = (None,) * nd if factors is None else tuple(float(s) for s in factors)
    else:
        scales = tuple(node.arg(first_scale + k, name) for k, name in enumerate(_SCALE_NAMES[nd]))
        scales = tuple(None if s is None else float(s) for s in scales)
    size = tuple(node.meta.shape[2:])  # torch recorded the output extents (from size or scale factors)
    return b.emit_like(Upsample(x, mode, size, scales, align_corners, antialias), node.meta)


# ── pixel (un)shuffle ────────────────────────────────────────────────────────
@lowers("aten.pixel_shuffle", "aten.pixel_unshuffle")
def pixel_shuffle(node: Node, b: Builder) -> Operand:
    """``[*, C·r², H, W] ↔ [*, C, H·r, W·r]`` as reshape → permute → reshape."""
    x = b.input(node, 0)
    if b.rank(x) < 3:
        raise LoweringError(f"node {node.id} ({node.op}): expected at least 3 dims, found {b.rank(x)}")
    r = int(node.arg(1))
    out = node.meta
    lead = tuple(b.shape(x)[:-3])
    k = len(lead)
    if node.base == "pixel_shuffle":  # [*, C, r, r, H, W] → [*, C, H, r, W, r]
        c, (h, w) = out.shape[-3], b.shape(x)[-2:]
        split = lead + (c, r, r, h, w)
        perm: tuple[int, ...] = (0, 3, 1, 4, 2)
    else:  # [*, C, H/r, r, W/r, r] → [*, C, r, r, H/r, W/r]
        c, (h, w) = b.shape(x)[-3], out.shape[-2:]
        split = lead + (c, h, r, w, r)
        perm = (0, 2, 4, 1, 3)
    y = b.emit(Reshape(x, split), split, b.dtype(x))
    perm = tuple(range(k)) + tuple(k + p for p in perm)
    y = b.emit(Permute(y, perm), tuple(split[p] for p in perm), b.dtype(x))
    return b.emit_like(Reshape(y, tuple(out.shape)), out)


# ── grid_sample ──────────────────────────────────────────────────────────────
_GRID_MODES = ("bilinear", "nearest", "bicubic")
_GRID_PADDINGS = ("zeros", "border", "reflection")


@lowers("aten.grid_sampler", "aten.grid_sampler_2d", "aten.grid_sampler_3d")
def grid_sampler(node: Node, b: Builder) -> Operand:
    # (input, grid, interpolation_mode, padding_mode, align_corners)
    x, grid = b.input(node, 0), b.input(node, 1)
    mode, padding = int(node.arg(2)), int(node.arg(3))
    if not (0 <= mode < 3 and 0 <= padding < 3):
        raise LoweringError(f"node {node.id} ({node.op}): unknown interpolation {mode} or padding {padding}")
    nd = b.rank(x) - 2
    if nd not in (2, 3) or b.rank(grid) != nd + 2:
        raise LoweringError(f"node {node.id} ({node.op}): expected a 4-d or 5-d input with a matching grid")
    if nd == 3 and _GRID_MODES[mode] == "bicubic":
        raise LoweringError(f"node {node.id} ({node.op}): bicubic grid sampling needs a 4-d input")
    # PyTorch requires the grid in the input's dtype.
    call = GridSample(x, grid, _GRID_MODES[mode], _GRID_PADDINGS[padding], bool(node.arg(4)))
    return b.emit_like(call, node.meta)
