"""Resampling: Resize (every mode, coordinate transform, nearest rounding, antialias, roi), Upsample
and GridSample (one ``GridSample`` Call).

ONNX resizing is separable and linear in the data, so each resized axis is one matrix fixed while
converting: ``y = W @ x`` along the axis, ``W[out, in]`` taken from the onnx reference
implementation applied to the identity (so every coordinate mode and rounding rule agrees with
the spec bit for bit). A ``W`` whose rows pick one input each (nearest) becomes an
``IndexSelect``; others a ``MatMul``.

An axis whose extent is only known at run time cannot have its matrix built while converting: its
source coordinates are computed in the program instead (``Arange`` over the output extent, the
coordinate transform with the scale as a symbolic literal, the rounding or the 2 / 4 taps of linear /
cubic interpolation), and the taps are ``IndexSelect``s weighted and summed, in float32 as
onnxruntime computes them. Antialiasing and ``tf_crop_and_resize`` need static extents.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.onnx.elementwise import emit_binary
from rlx.frontends.onnx.movement import permute
from rlx.frontends.onnx.nn import matmul
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, onnx_op
from rlx.ir import dtypes, symbolic
from rlx.ir.calls import Arange, Clamp, GridSample, IndexSelect, Unary
from rlx.ir.program import Lit, Operand, Ref
from rlx.ir.symbolic import Dim, Sym


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


def _dynamic_axis(
    b: OnnxBuilder, node: OnnxNode, x: Ref, axis: int, n_out: Dim, scale: float | Sym, opts: dict[str, Any]
) -> Ref:
    """Resize one axis whose extent is symbolic, with the source coordinates computed at run time."""
    n_in = b.shape(x)[axis]
    ctm = opts.get("coordinate_transformation_mode", "half_pixel")
    mode = opts["mode"]
    if opts.get("antialias", 0) or ctm == "tf_crop_and_resize" or mode not in ("nearest", "linear", "cubic"):
        raise LoweringError(
            f"node {node.name} (Resize): {mode} resizing with {ctm}{' and antialias' if opts.get('antialias') else ''} "
            "needs static extents on the resized axes; fix the input's size with input_shapes / --input-shape"
        )
    c = _source_coords(b, node, n_in, n_out, scale, ctm)
    last = Lit(symbolic.sub(n_in, 1), "i64")

    def index(pos: Ref) -> Ref:  # a whole float position → an i64 index clamped to the axis
        k = b.cast(pos, "i64")
        return b.emit(Clamp(k, Lit(0, "i64"), last), b.shape(k), "i64")

    out_shape = tuple(n_out if k == axis else d for k, d in enumerate(b.shape(x)))
    if mode == "nearest":
        rounding = opts.get("nearest_mode", "round_prefer_floor")
        shifted = {"round_prefer_floor": ("ceil", -0.5), "round_prefer_ceil": ("floor", 0.5), "floor": ("floor", 0.0),
                   "ceil": ("ceil", 0.0)}.get(rounding)  # fmt: skip
        if shifted is None:
            raise LoweringError(f"node {node.name} (Resize): nearest_mode {rounding!r} is not supported")
        fn, shift = shifted
        pos = b.emit(Unary(fn, _op(b, "add", c, _lit(shift)) if shift else c), (n_out,), F32)
        return b.emit(IndexSelect(x, axis, index(pos)), out_shape, b.dtype(x))
    # linear / cubic: taps around floor(c), weighted by the distance t = c − floor(c)
    dt = b.dtype(x)
    compute = dt if dtypes.is_float(dt) else F32
    xs = b.cast(x, compute)
    if mode == "linear":  # onnxruntime clamps the coordinate to the axis first
        c = b.emit(Clamp(c, Lit(0.0, F32), _lit(symbolic.sub(n_in, 1))), (n_out,), F32)
    base = b.emit(Unary("floor", c), (n_out,), F32)
    view = tuple(n_out if k == axis else 1 for k in range(b.rank(x)))
    y: Ref | None = None
    for off, w in _taps(b, mode, base, _op(b, "sub", c, base), n_in, opts):
        k = index(_op(b, "add", base, _lit(off)) if off else base)
        picked = b.emit(IndexSelect(xs, axis, k), out_shape, compute)
        term = emit_binary(b, "mul", picked, b.reshape(b.cast(w, compute), view))
        y = term if y is None else emit_binary(b, "add", y, term)
    assert y is not None
    return b.cast(y, dt)


F32 = "f32"  # the coordinates and weights are computed in float32, as onnxruntime does


def _lit(v: float | Dim) -> Lit:
    return Lit(v, F32) if isinstance(v, Sym) else Lit(float(v), F32)


def _op(b: OnnxBuilder, fn: str, a: Operand, c: Operand) -> Ref:
    return emit_binary(b, fn, b.as_ref(a), c)


def _source_coords(b: OnnxBuilder, node: OnnxNode, n_in: Dim, n_out: Dim, scale: float | Sym, ctm: str) -> Ref:
    """The input coordinate each output element samples, by ``coordinate_transformation_mode``."""

    def op(fn: str, a: Operand, c: Operand) -> Ref:
        return _op(b, fn, a, c)

    lit = _lit
    i = b.cast(b.emit(Arange(0, n_out, 1, "i64"), (n_out,), "i64"), F32)
    if ctm in ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric"):
        c = op("sub", op("div", op("add", i, lit(0.5)), lit(scale)), lit(0.5))
        if ctm == "pytorch_half_pixel":  # a single output element samples coordinate 0
            c = op("mul", c, lit(symbolic.minimum(symbolic.sub(n_out, 1), 1)))
        if ctm == "half_pixel_symmetric":  # centre the sampled span: offset = in/2·(1 − out / (scale·in))
            c = op("add", c, lit(Sym(f"({n_in})/2*(1 - ({n_out})/(({scale})*({n_in})))")))
    elif ctm == "align_corners":
        c = op("mul", i, lit(Sym(f"({symbolic.sub(n_in, 1)})/Max({symbolic.sub(n_out, 1)}, 1)")))
    elif ctm == "asymmetric":
        c = op("div", i, lit(scale))
    elif ctm == "tf_half_pixel_for_nn":
        c = op("div", op("add", i, lit(0.5)), lit(scale))
    else:
        raise LoweringError(f"node {node.name} (Resize): coordinate_transformation_mode {ctm!r} is not supported")
    return c


def _taps(b: OnnxBuilder, mode: str, base: Ref, t: Ref, n_in: Dim, opts: dict[str, Any]) -> list[tuple[float, Ref]]:
    """(offset from floor(c), weight) of each linear / cubic tap (onnx's Keys kernel with ``cubic_coeff_a``)."""

    def op(fn: str, a: Operand, c: Operand) -> Ref:
        return _op(b, fn, a, c)

    lit = _lit
    f = F32
    if mode == "linear":
        return [(0.0, op("sub", Lit(1.0, f), t)), (1.0, t)]
    a = float(opts.get("cubic_coeff_a", -0.75))

    def outer(d: Ref) -> Ref:  # |d| in [1, 2]: ((A·d − 5A)·d + 8A)·d − 4A
        return op("sub", op("mul", op("add", op("mul", op("sub", op("mul", d, lit(a)), lit(5 * a)), d),
                                          lit(8 * a)), d), lit(4 * a))  # fmt: skip

    def inner(d: Ref) -> Ref:  # |d| in [0, 1]: ((A + 2)·d − (A + 3))·d·d + 1
        return op("add", op("mul", op("mul", op("sub", op("mul", d, lit(a + 2)), lit(a + 3)), d), d), lit(1.0))

    one_minus = op("sub", Lit(1.0, f), t)
    taps = [(-1.0, outer(op("add", t, lit(1.0)))), (0.0, inner(t)), (1.0, inner(one_minus)),
            (2.0, outer(op("add", one_minus, lit(1.0))))]  # fmt: skip
    if opts.get("exclude_outside", 0):  # taps outside the axis weigh 0, the others are renormalised
        kept = []
        for off, w in taps:
            pos = op("add", base, lit(off)) if off else base
            inside = emit_binary(b, "logical_and", op("ge", pos, lit(0.0)), op("le", pos, lit(symbolic.sub(n_in, 1))))
            kept.append((off, op("mul", w, b.cast(inside, f))))
        total = kept[0][1]
        for _, w in kept[1:]:
            total = op("add", total, w)
        taps = [(off, op("div", w, total)) for off, w in kept]
    return taps


def resize(
    b: OnnxBuilder,
    node: OnnxNode,
    x: Ref,
    scales: list[float] | None,
    sizes: list[Dim] | None,
    axes: list[int] | None,
    roi: list[float] | None,
    opts: dict[str, Any],
) -> Ref:
    shape = b.shape(x)
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    policy = opts.get("keep_aspect_ratio_policy", "stretch")
    in_sizes = {a: shape[a] for a in axes}
    out: dict[int, Dim]
    scale: dict[int, float | Sym]
    if sizes is not None:
        out = dict(zip(axes, sizes))
        ins, outs = (symbolic.static_shape([d[a] for a in axes]) for d in (in_sizes, out))
        if ins is not None and outs is not None:
            ratios = [o / i for i, o in zip(ins, outs)]
            if policy != "stretch":
                r = min(ratios) if policy == "not_larger" else max(ratios)
                ratios = [r] * len(axes)
                out = {a: int(r * i + 0.5) for a, i in zip(axes, ins)}
            scale = dict(zip(axes, ratios))
        elif policy != "stretch":
            raise LoweringError(
                f"node {node.name} ({node.op_type}): keep_aspect_ratio_policy {policy!r} over dynamic extents is not "
                "supported; fix the input's size with input_shapes / --input-shape"
            )
        else:  # out / in, a float known once the sizes are (1 where they are the same extent)
            scale = {a: 1.0 if out[a] == in_sizes[a] else Sym(f"({out[a]})/({in_sizes[a]})") for a in axes}
            scale.update({a: o / i for a, i, o in zip(axes, (in_sizes[a] for a in axes), (out[a] for a in axes))
                          if isinstance(i, int) and isinstance(o, int) and i})  # fmt: skip
    elif scales is not None:
        scale = {a: float(v) for a, v in zip(axes, scales)}
        out = {a: symbolic.scale_floor(in_sizes[a], float(v)) for a, v in zip(axes, scales)}
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
        sa, n_in, n_out = scale[a], in_sizes[a], out[a]
        if n_out == n_in and isinstance(sa, float) and np.isclose(sa, 1.0) and axis_roi in (None, [0.0, 1.0]):
            continue
        if not isinstance(n_in, int) or not isinstance(n_out, int) or isinstance(sa, Sym):
            y = _dynamic_axis(b, node, y, a, n_out, sa, opts)
            continue
        w, e = axis_matrix(n_in, n_out, sa, coeffs, axis_roi, opts.get("coordinate_transformation_mode", "half_pixel"),
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
    z = [v if isinstance(v, Sym) else int(v) for v in np.asarray(sizes_v).reshape(-1).tolist()] if use_sizes else None
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
