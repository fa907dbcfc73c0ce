"""Reductions: sum, mean, prod, amax/amin, max/min (with indices), any/all, var/std, argmax/argmin."""

from __future__ import annotations

from rlx.errors import LoweringError
from rlx.ir.calls import ArgReduce, Reduce
from rlx.ir.program import Operand, Ref
from rlx.ir.torch_ir import Node, TensorMeta
from rlx.lower.elementwise import binary
from rlx.lower.registry import Builder, lowers
from rlx.lower.shapes import norm_axes, norm_axis


def reduce_value(b: Builder, fn: str, x: Ref, axes: tuple[int, ...], keepdim: bool, dtype: str,
                 correction: float = 0.0) -> Ref:  # fmt: skip
    """Reduce ``x`` (cast to ``dtype`` first) over ``axes`` — all axes when empty."""
    x = b.cast(x, dtype)
    shape = b.shape(x)
    axes = axes or tuple(range(len(shape)))
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdim or i not in axes)
    return b.emit(Reduce(fn, x, axes, keepdim, correction), out_shape, dtype)


def _axes_and_keepdim(node: Node, b: Builder, x: Ref) -> tuple[tuple[int, ...], bool]:
    # Every reduction overload with dims has them at 1 and keepdim at 2 (sum.dim_IntList,
    # amax.default, any.dims, prod.dim_int …); the ones without (sum.default) have neither.
    dims = node.arg(1, "dim")
    return norm_axes(dims, b.rank(x)) or norm_axes(None, b.rank(x)), bool(node.arg(2, "keepdim", False))


@lowers("aten.sum", "aten.mean", "aten.prod", "aten.amax", "aten.amin", "aten.any", "aten.all", "aten.nansum")
def reduce(node: Node, b: Builder) -> Operand:
    out = node.meta
    x = b.input(node, 0)
    fn = node.base
    if fn == "nansum":
        raise LoweringError(f"node {node.id}: nansum is not supported yet")
    axes, keepdim = _axes_and_keepdim(node, b, x)
    if fn in ("any", "all"):  # bool, except uint8 in → uint8 out
        return b.cast(reduce_value(b, fn, b.cast(x, "bool"), axes, keepdim, "bool"), out.dtype)
    return reduce_value(b, fn, x, axes, keepdim, out.dtype)


@lowers("aten.var", "aten.std", "aten.var_mean", "aten.std_mean")
def var_std(node: Node, b: Builder) -> Operand | tuple[Operand, Operand]:
    out = node.meta
    x = b.input(node, 0)
    if node.overload in ("correction", "correction_names"):  # (self, dim=None, *, correction=None, keepdim=False)
        dims = node.arg(1, "dim")
        correction = node.kwargs.get("correction", 1)
        correction = 1 if correction is None else correction
        keepdim = bool(node.kwargs.get("keepdim", False))
    elif node.overload == "dim":  # (self, dim, unbiased=True, keepdim=False)
        dims = node.arg(1, "dim")
        correction = 1 if node.arg(2, "unbiased", True) else 0
        keepdim = bool(node.arg(3, "keepdim", False))
    else:  # default: (self, unbiased=True), over every axis
        dims = None
        correction = 1 if node.arg(1, "unbiased", True) else 0
        keepdim = False
    axes = norm_axes(dims, b.rank(x)) or norm_axes(None, b.rank(x))
    fn = node.base.removesuffix("_mean")
    spread = reduce_value(b, fn, x, axes, keepdim, out.dtype, float(correction))
    if fn == node.base:
        return spread
    return spread, reduce_value(b, "mean", x, axes, keepdim, out.dtype)


@lowers("aten.max", "aten.min")
def max_min(node: Node, b: Builder) -> Operand | tuple[Operand, Operand]:
    x = b.input(node, 0)
    fn = "amax" if node.base == "max" else "amin"
    if node.overload in ("default", ""):
        return reduce_value(b, fn, x, (), False, node.meta.dtype)
    if node.overload != "dim":  # max.other / min.other are the elementwise forms
        return binary(b, node, "maximum" if node.base == "max" else "minimum", node.arg(0), node.arg(1))
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    keepdim = bool(node.arg(2, "keepdim", False))
    values = reduce_value(b, fn, x, (axis,), keepdim, b.dtype(x))
    idx_meta = node.out[1] if len(node.out) > 1 and isinstance(node.out[1], TensorMeta) else None
    shape = idx_meta.shape if idx_meta else b.shape(values)
    indices = b.emit(ArgReduce("argmax" if node.base == "max" else "argmin", x, axis, keepdim), shape, "i64")
    return values, indices


@lowers("aten.argmax", "aten.argmin")
def argmax(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    dim = node.arg(1, "dim")
    axis = None if dim is None else norm_axis(dim, b.rank(x))
    return b.emit_like(ArgReduce(node.base, x, axis, bool(node.arg(2, "keepdim", False))), node.meta)
