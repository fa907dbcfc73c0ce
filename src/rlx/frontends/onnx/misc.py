"""Resampling: Resize (every mode, coordinate transform, nearest rounding, antialias, roi) and Upsample.

ONNX resizing is separable and linear in the data, so each resized axis is one matrix fixed while
converting: ``y = W @ x`` along the axis, ``W[out, in]`` taken from the onnx reference
implementation applied to the identity (so every coordinate mode and rounding rule agrees with
the spec bit for bit). A ``W`` whose rows pick one input each (nearest) becomes an
``IndexSelect``; others a ``MatMul``. Spatial extents must be static.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.onnx.elementwise import emit_binary
from rlx.frontends.onnx.nn import matmul
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, onnx_op
from rlx.frontends.onnx.shape import permute
from rlx.ir import dtypes
from rlx.ir.calls import GridSample, IndexSelect
from rlx.ir.program import Ref
from rlx.ir.symbolic import Shape


def _coeff_fn(mode: str, nearest_mode: str, cubic_a: float, antialias: bool) -> Any:
    from onnx.reference.ops import op_resize as R

    if mode == "nearest":
        return lambda ratio, scale: R._nearest_coeffs(ratio, mode=nearest_mode)
    if mode == "cubic":
        fn = R._cubic_coeffs_antialias if antialias else R._cubic_coeffs
        return lambda ratio, scale: fn(ratio, scale, A=cubic_a)
    if mode == "linear":
        return R._linear_coeffs_antialias if antialias else R._linear_coeffs
    raise LoweringError(f"Resize mode {mode!r} is not supported")


def axis_matrix(
    n_in: int, n_out: int, scale: float, coeffs: Any, roi: list[float] | None, ctm: str, exclude: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(W[out, in], E[out]): resizing one axis is ``W @ x + E * extrapolation_value``."""
    from onnx.reference.ops import op_resize as R

    kw: dict[str, Any] = {"roi": roi, "coordinate_transformation_mode": ctm, "exclude_outside": exclude}
    w = R._interpolate_1d_along_axis(np.eye(n_in), 0, scale, n_out, coeffs, extrapolation_value=0.0, **kw)
    e = R._interpolate_1d_along_axis(np.zeros((n_in, 1)), 0, scale, n_out, coeffs, extrapolation_value=1.0, **kw)
    return np.asarray(w, np.float64).reshape(n_out, n_in), np.asarray(e, np.float64).reshape(n_out)


def resize_axis(
    b: OnnxBuilder, x: Ref, axis: int, w: np.ndarray, e: np.ndarray, extrapolation: float, name: str
) -> Ref:
    shape = list(b.shape(x))
    n_out = w.shape[0]
    shape[axis] = n_out
    one_hot = np.all((w == 0) | (w == 1)) and np.all(w.sum(axis=1) == 1) and not np.any(e)
    if one_hot:
        index = b.as_ref(b.operand(w.argmax(axis=1).astype(np.int64), f"{name}_index{axis}"))
        return b.emit(IndexSelect(x, axis, index), tuple(shape), b.dtype(x))
    dt = b.dtype(x)
    compute = dt if dtypes.is_float(dt) else "f32"
    rank = len(shape)
    perm = tuple(a for a in range(rank) if a != axis) + (axis,)
    moved = permute(b, b.cast(x, compute), perm)
    wt = b.as_ref(b.operand(np.ascontiguousarray(w.T).astype(dtypes.to_numpy(compute)), f"{name}_weights{axis}"))
    y = matmul(b, moved, wt)
    if np.any(e) and extrapolation != 0:
        y = emit_binary(
            b, "add", y, b.operand((e * extrapolation).astype(dtypes.to_numpy(compute)), f"{name}_extrapolation{axis}")
        )
    inverse = tuple(int(i) for i in np.argsort(perm))
    y = permute(b, y, inverse)
    if compute != dt:
        y = b.cast(y, dt)
    return y


def _static_sizes(node: OnnxNode, shape: Shape, axes: list[int]) -> dict[int, int]:
    """The extent of each resized axis, which must be static."""
    in_sizes: dict[int, int] = {}
    for a in axes:
        size = shape[a]
        if not isinstance(size, int):
            raise LoweringError(f"node {node.name} ({node.op_type}): resized axes must have static extents")
        in_sizes[a] = size
    return in_sizes


def resize(
    b: OnnxBuilder,
    node: OnnxNode,
    x: Ref,
    scales: list[float] | None,
    sizes: list[int] | None,
    axes: list[int] | None,
    roi: list[float] | None,
    opts: dict[str, Any],
) -> Ref:
    shape = b.shape(x)
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    policy = opts.get("keep_aspect_ratio_policy", "stretch")
    in_sizes = _static_sizes(node, shape, axes)
    if sizes is not None:
        out = dict(zip(axes, sizes))
        scale = {a: out[a] / in_sizes[a] for a in axes}
        if policy != "stretch":
            s = min(scale.values()) if policy == "not_larger" else max(scale.values())
            scale = dict.fromkeys(axes, s)
            out = {a: int(s * in_sizes[a] + 0.5) for a in axes}
    elif scales is not None:
        scale = dict(zip(axes, scales))
        out = {a: int(np.floor(scale[a] * in_sizes[a])) for a in axes}
    else:
        raise LoweringError(f"node {node.name} ({node.op_type}): needs scales or sizes")
    coeffs = _coeff_fn(opts["mode"], opts.get("nearest_mode", "round_prefer_floor"), opts.get("cubic_coeff_a", -0.75),
                       bool(opts.get("antialias", 0)))  # fmt: skip
    full_roi = None
    if roi is not None and len(roi):
        n = len(axes)
        full_roi = {a: [float(roi[k]), float(roi[k + n])] for k, a in enumerate(axes)}
    y = x
    for a in axes:
        axis_roi = full_roi[a] if full_roi else None
        if out[a] == in_sizes[a] and np.isclose(scale[a], 1.0) and (axis_roi is None or axis_roi == [0.0, 1.0]):
            continue
        w, e = axis_matrix(in_sizes[a], out[a], float(scale[a]), coeffs, axis_roi, opts.get("coordinate_transformation_mode", "half_pixel"),
                           bool(opts.get("exclude_outside", 0)))  # fmt: skip
        y = resize_axis(b, y, a, w, e, float(opts.get("extrapolation_value", 0.0)), node.name)
    return y


@onnx_op("Resize")
def resize_(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    opts = dict(node.attrs)
    opts.setdefault("mode", "nearest")
    if node.opset < 11:  # Resize-10 is Upsample-9: asymmetric coordinates, floor rounding
        opts.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        scales = [float(s) for s in np.asarray(b.const(node, 1)).reshape(-1)]
        return resize(b, node, x, scales, None, None, None, opts)
    roi = b.const(node, 1)
    scales_v = b.const(node, 2)
    sizes_v = b.const(node, 3)
    axes = node.attr("axes")
    use_sizes = sizes_v is not None and np.asarray(sizes_v).size > 0
    s = None if use_sizes else [float(v) for v in np.asarray(scales_v).reshape(-1)]
    z = [int(v) for v in np.asarray(sizes_v).reshape(-1)] if use_sizes else None
    r = None if roi is None or np.asarray(roi).size == 0 else [float(v) for v in np.asarray(roi).reshape(-1)]
    if opts.get("coordinate_transformation_mode") != "tf_crop_and_resize":
        r = None
    return resize(b, node, x, s, z, axes, r, opts)


@onnx_op("Upsample")
def upsample(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    scales = node.attr("scales") if node.opset < 9 else [float(v) for v in np.asarray(b.const(node, 1)).reshape(-1)]
    mode = node.attr("mode", "nearest")
    opts = {"mode": "linear" if mode in ("linear", "bilinear") else mode, "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor"}  # fmt: skip
    return resize(b, node, x, [float(s) for s in scales], None, None, None, opts)


# ── grid sampling ────────────────────────────────────────────────────────────
_GRID_MODES = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest", "cubic": "bicubic",
               "bicubic": "bicubic"}  # fmt: skip


@onnx_op("GridSample")
def grid_sample(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, grid = b.ref(node, 0), b.ref(node, 1)
    mode = _GRID_MODES.get(node.attr("mode", "bilinear"))
    padding = node.attr("padding_mode", "zeros")
    spatial = b.rank(x) - 2
    if mode is None or padding not in ("zeros", "border", "reflection") or spatial not in (2, 3):
        raise LoweringError(
            f"node {node.name} (GridSample): mode {node.attr('mode')!r} / padding {padding!r} on {spatial} spatial "
            "axes is not supported (2-d or 3-d; linear, nearest, cubic (2-d))"
        )
    if mode == "bicubic" and spatial != 2:
        raise LoweringError(f"node {node.name} (GridSample): cubic sampling is supported on 2 spatial axes only")
    grid = b.cast(grid, b.dtype(x))
    shape = (*b.shape(x)[:2], *b.shape(grid)[1:-1])
    call = GridSample(x, grid, mode, padding, bool(node.attr("align_corners", 0)))
    return b.emit(call, shape, b.dtype(x))
