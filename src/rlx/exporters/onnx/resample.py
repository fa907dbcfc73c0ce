"""Resampling: Upsample through Resize (PyTorch's coordinate rules spelled as Resize's attributes)
and GridSample through GridSample-20."""

from __future__ import annotations

import numpy as np

from rlx.exporters.onnx.registry import OnnxGraph, T, emits, unsupported
from rlx.ir import calls as C
from rlx.ir.program import Instr

# mode → (Resize mode, coordinate transform without align_corners, nearest rounding)
_MODES = {
    "nearest": ("nearest", "asymmetric", "floor"),  # src = floor(dst · in/out)
    "nearest_exact": ("nearest", "half_pixel", "round_prefer_ceil"),  # src = floor((dst + ½) · in/out)
    "linear": ("linear", "half_pixel", None),  # clamped at 0, as PyTorch's linear source index is
    "bicubic": ("cubic", "half_pixel", None),
}


@emits(C.Upsample, widen=True)
def upsample(g: OnnxGraph, c: C.Upsample, out: Instr, x: T) -> T:
    if c.mode not in _MODES:
        raise unsupported(c, f"in mode {c.mode!r}")
    mode, transform, nearest = _MODES[c.mode]
    if c.align_corners and mode != "nearest":
        transform = "align_corners"
    lead = x.rank - len(c.size)
    attrs: dict[str, object] = dict(mode=mode, coordinate_transformation_mode=transform, nearest_mode=nearest)
    if mode == "cubic":
        # PyTorch's bicubic uses a = -0.75; its antialiased bicubic (PIL's filter) a = -0.5.
        attrs["cubic_coeff_a"] = -0.5 if c.antialias else -0.75
    if c.antialias:
        attrs["antialias"] = 1
    if all(s is not None for s in c.scales):  # PyTorch maps coordinates with the user's factors
        scales = g.const(np.asarray([1.0] * lead + [float(s) for s in c.scales]), "f32")  # type: ignore[arg-type]
        return g.op("Resize", [x, None, scales], x.dtype, out.shape, **attrs)
    assert x.shape is not None
    sizes = g.dims(list(x.shape[:lead]) + list(c.size))
    return g.op("Resize", [x, None, None, sizes], x.dtype, out.shape, **attrs)


@emits(C.GridSample, widen=True)
def grid_sample(g: OnnxGraph, c: C.GridSample, out: Instr, x: T, grid: T) -> T:
    mode = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}.get(c.mode)
    if mode is None:
        raise unsupported(c, f"in mode {c.mode!r}")
    return g.op("GridSample", [x, g.cast(grid, x.dtype)], x.dtype, out.shape, mode=mode,
                padding_mode=c.padding, align_corners=int(c.align_corners))  # fmt: skip
