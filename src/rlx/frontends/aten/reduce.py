"""Reductions: sum, mean, prod, amax/amin, max/min (with indices), any/all, var/std, argmax/argmin,
and the composite ones the ``aten`` level keeps whole (nansum, nanmean, logsumexp, count_nonzero,
aminmax, linalg_vector_norm), lowered the way PyTorch's own decompositions write them."""

from __future__ import annotations

import math

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node, TensorMeta
from rlx.frontends.aten.elementwise import binary, emit_binary
from rlx.frontends.aten.movement import reshape_to, take_slice
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import broadcast, norm_axes, norm_axis
from rlx.ir import dtypes, symbolic
from rlx.ir.calls import Arange, ArgReduce, Binary, Bitcast, Cast, CumReduce, Flip, Reduce, Unary, Where
from rlx.ir.program import Operand, Ref


def reduce_value(
    b: Builder, fn: str, x: Ref, axes: tuple[int, ...], keepdim: bool, dtype: str, correction: float = 0.0
) -> Ref:
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


@lowers("aten.sum", "aten.mean", "aten.prod", "aten.amax", "aten.amin", "aten.any", "aten.all")
def reduce(node: Node, b: Builder) -> Operand:
    out = node.meta
    x = b.input(node, 0)
    fn = node.base
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


# ── composite reductions ─────────────────────────────────────────────────────
def _nan_to_zero(b: Builder, x: Ref) -> Ref:
    """``where(isnan(x), 0, x)``; integer and bool tensors hold no NaN and pass through."""
    if not dtypes.is_float(b.dtype(x)):
        return x
    nan = b.emit(Unary("isnan", x), b.shape(x), "bool")
    return b.emit(Where(nan, b.lit(0, b.dtype(x)), x), b.shape(x), b.dtype(x))


@lowers("aten.nansum", "aten.nanmean")
def nansum(node: Node, b: Builder) -> Operand:
    """``nansum`` = sum with NaNs as 0; ``nanmean`` = that sum / the count of non-NaN entries
    (0/0 = NaN for an all-NaN slice), each rounded to the output dtype as PyTorch rounds them."""
    out = node.meta
    x = b.input(node, 0)
    axes, keepdim = _axes_and_keepdim(node, b, x)
    total = reduce_value(b, "sum", _nan_to_zero(b, x), axes, keepdim, out.dtype)
    if node.base == "nansum":
        return total
    kept = b.emit(Unary("logical_not", b.emit(Unary("isnan", x), b.shape(x), "bool")), b.shape(x), "bool")
    count = b.cast(reduce_value(b, "sum", kept, axes, keepdim, "i64"), out.dtype)
    return b.emit_like(Binary("div", total, count), out)


@lowers("aten.logsumexp")
def logsumexp(node: Node, b: Builder) -> Operand:
    """``log(sum(exp(x - m))) + m`` with ``m`` the max (0 where it is ±inf), as PyTorch computes it;
    integer inputs are computed in the (float) output dtype."""
    out = node.meta
    x = b.cast(b.input(node, 0), out.dtype)
    axes, keepdim = _axes_and_keepdim(node, b, x)
    shape = b.shape(x)
    if 0 in shape:  # PyTorch: sum(exp(x)).log(), which is -inf over an empty axis
        return b.emit_like(
            Unary("log", reduce_value(b, "sum", b.emit(Unary("exp", x), shape, out.dtype), axes, keepdim, out.dtype)),
            out,
        )
    maxes = reduce_value(b, "amax", x, axes, True, out.dtype)
    kept = b.shape(maxes)
    infinite = b.emit(Unary("isinf", maxes), kept, "bool")
    maxes = b.emit(Where(infinite, b.lit(0, out.dtype), maxes), kept, out.dtype)
    shifted = b.emit(Unary("exp", b.emit(Binary("sub", x, maxes), shape, out.dtype)), shape, out.dtype)
    logs = b.emit(Unary("log", reduce_value(b, "sum", shifted, axes, keepdim, out.dtype)), out.shape, out.dtype)
    return b.emit_like(Binary("add", logs, maxes if keepdim else reshape_to(b, maxes, out.shape)), out)


@lowers("aten.count_nonzero")
def count_nonzero(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    axes = norm_axes(node.arg(1, "dim"), b.rank(x)) or norm_axes(None, b.rank(x))
    nonzero = b.emit(Binary("ne", x, b.lit(0, b.dtype(x))), b.shape(x), "bool")
    return reduce_value(b, "sum", nonzero, axes, False, node.meta.dtype)


@lowers("aten.aminmax")
def aminmax(node: Node, b: Builder) -> tuple[Operand, Operand]:
    # aminmax(self, *, dim=None, keepdim=False): (min, max) over one axis or the whole tensor.
    x = b.input(node, 0)
    dim = node.arg(1, "dim")
    axes = norm_axes(None, b.rank(x)) if dim is None else (norm_axis(dim, b.rank(x)),)
    keepdim = bool(node.arg(2, "keepdim", False))
    lo = reduce_value(b, "amin", x, axes, keepdim, b.dtype(x))
    hi = reduce_value(b, "amax", x, axes, keepdim, b.dtype(x))
    return reshape_to(b, lo, node.meta.shape), reshape_to(b, hi, node.meta_at(1).shape)


@lowers("aten.hash_tensor")
def hash_tensor(node: Node, b: Builder) -> Operand:
    """``hash_tensor(x, dim=[], keepdim=False, mode=0)``: every entry widened to its 64-bit kind
    (float64, int64; bool as 0/1), its bits read as uint64, folded with xor over ``dim`` (all
    axes when empty)."""
    x = b.input(node, 0)
    mode = node.arg(3, "mode", 0)
    if mode != 0:
        raise LoweringError(f"node {node.id} ({node.op}): only mode 0 (xor) exists, found {mode!r}")
    wide = b.cast(x, "f64" if dtypes.is_float(b.dtype(x)) else "i64")
    bits = b.emit(Bitcast(wide, "u64"), b.shape(wide), "u64")
    axes, keepdim = _axes_and_keepdim(node, b, bits)
    return reshape_to(b, reduce_value(b, "xor", bits, axes, keepdim, "u64"), node.meta.shape)


@lowers("aten.linalg_vector_norm")
def vector_norm(node: Node, b: Builder) -> Operand:
    """``linalg_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None)``, written as
    ``torch._refs.linalg.vector_norm``: ord 0 counts non-zeros, ±inf is the max/min of ``|x|``,
    any other ord is ``sum(|x|^ord)^(1/ord)`` in the computation dtype (float32 for halves)."""
    out = node.meta
    x = b.input(node, 0)
    ord_ = node.arg(1, "ord", 2)
    ord_ = 2.0 if ord_ is None else float(ord_)
    axes = norm_axes(node.arg(2, "dim"), b.rank(x)) or norm_axes(None, b.rank(x))
    keepdim = bool(node.arg(3, "keepdim", False))
    if not dtypes.is_float(b.dtype(x)):
        raise LoweringError(f"node {node.id}: linalg_vector_norm needs a floating-point input, found {b.dtype(x)}")
    return b.cast(p_norm(b, x, ord_, axes, keepdim, out.dtype), out.dtype)


def p_norm(b: Builder, x: Ref, p: float, axes: tuple[int, ...], keepdim: bool, dtype: str) -> Ref:
    """The ``p``-norm of ``x`` over ``axes`` as ``torch.linalg.vector_norm`` computes it (result in
    ``dtype``; sums run in float32 for half inputs). NaN propagates for every ``p``."""
    shape = b.shape(x)
    if p == 0:
        nonzero = b.emit(Binary("ne", x, b.lit(0, b.dtype(x))), shape, "bool")
        return reduce_value(b, "sum", nonzero, axes, keepdim, dtype)
    if math.isinf(p):
        absolute = b.emit(Unary("abs", x), shape, b.dtype(x))
        return b.cast(reduce_value(b, "amax" if p > 0 else "amin", absolute, axes, keepdim, b.dtype(x)), dtype)
    compute = "f32" if dtype in ("f16", "bf16") else dtype
    x = b.cast(x, compute)
    if all(shape[a] == 1 for a in axes):
        # Every reduced axis (or a 0-d tensor) has one entry: PyTorch returns |x| itself, with no
        # pow/root rounding.
        absolute = b.emit(Unary("abs", x), shape, compute)
        kept = tuple(d for i, d in enumerate(shape) if keepdim or i not in axes)
        return reshape_to(b, absolute, kept)
    even = p % 2 == 0
    base = x if even else b.emit(Unary("abs", x), shape, compute)
    powered = (
        b.emit(Unary("square", base), shape, compute)
        if p == 2
        else (base if p == 1 else b.emit(Binary("pow", base, b.lit(p, compute)), shape, compute))
    )
    total = reduce_value(b, "sum", powered, axes, keepdim, compute)
    if p == 1:
        return total
    if p == 2:
        return b.emit(Unary("sqrt", total), b.shape(total), compute)
    return b.emit(Binary("pow", total, b.lit(1.0 / p, compute)), b.shape(total), compute)


def window_argmax(b: Builder, win: Ref) -> Ref:
    """Where each window (``win``'s last axis) has its max, keeping that axis (size 1): the first max,
    or the last NaN when the window holds NaN (PyTorch's max-pooling kernels' rule)."""
    wshape, dt = b.shape(win), b.dtype(win)
    axis, kk = len(wshape) - 1, wshape[-1]
    one = (*wshape[:-1], 1)
    pick = b.emit(ArgReduce("argmax", win, axis, True), one, "i64")
    if dtypes.is_float(dt):
        nan = b.emit(Unary("isnan", win), wshape, "bool")
        any_nan = b.emit(Reduce("any", nan, (axis,), True), one, "bool")
        back = b.emit(Flip(b.emit(Cast(nan, "i64"), wshape, "i64"), (axis,)), wshape, "i64")
        last_from_end = b.emit(ArgReduce("argmax", back, axis, True), one, "i64")
        last = b.emit(Binary("sub", b.lit(symbolic.add(kk, -1), "i64"), last_from_end), one, "i64")
        pick = b.emit(Where(any_nan, last, pick), one, "i64")
    return pick


# ── segment reductions ───────────────────────────────────────────────────────
_SEGMENT_FN = {"sum": "sum", "mean": "sum", "prod": "prod", "max": "amax", "min": "amin"}
_SEGMENT_START = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}


def _segment_bounds(node: Node, b: Builder, axis: int) -> tuple[Ref, Ref]:
    """Each segment's [start, end) along the data axis, int64 ``[*outer, segments]``: from
    ``lengths`` (a running sum) or from ``offsets`` (consecutive pairs)."""
    lengths, offsets = b.optional_input(node, 2, "lengths"), b.optional_input(node, 4, "offsets")
    if b.optional_input(node, 3, "indices") is not None or (lengths is None) == (offsets is None):
        raise LoweringError(f"node {node.id} ({node.op}): give exactly one of lengths and offsets (not indices)")
    if lengths is not None:
        lengths = b.cast(lengths, "i64")
        ends = b.emit(CumReduce("sum", lengths, axis), b.shape(lengths), "i64")
        return emit_binary(b, "sub", ends, lengths), ends
    assert offsets is not None
    offsets = b.cast(offsets, "i64")
    count = symbolic.add(b.shape(offsets)[axis], -1)
    return take_slice(b, offsets, axis, 0, count), take_slice(b, offsets, axis, 1, count)


@lowers("aten.segment_reduce")
def segment_reduce(node: Node, b: Builder) -> Operand:
    """``segment_reduce(data, reduce, *, lengths, indices, offsets, axis=0, unsafe, initial)``, as
    PyTorch's CPU kernel: each segment starts from ``initial`` (else 0 / 1 / -inf / +inf) and takes
    in its entries (max/min propagate NaN); a mean divides that total by the length, and an empty
    segment's mean is ``initial``, else NaN. Every segment is a masked reduction over the axis."""
    out = node.meta
    data = b.input(node, 0)
    reduce = node.arg(1, "reduce")
    if reduce not in _SEGMENT_FN or not dtypes.is_float(out.dtype):
        raise LoweringError(f"node {node.id} ({node.op}): reduce {reduce!r} on {out.dtype} is not supported")
    axis = norm_axis(node.arg(5, "axis", 0), b.rank(data))
    initial = node.arg(7, "initial")
    compute = "f32" if out.dtype in ("f16", "bf16") else out.dtype
    data = b.cast(data, compute)
    starts, ends = _segment_bounds(node, b, axis)
    shape, segments = b.shape(data), b.shape(starts)[axis]
    trailing = (1,) * (len(shape) - axis - 1)
    positions = b.emit(Arange(0, shape[axis], 1, "i64"), (shape[axis],), "i64")
    inside = emit_binary(
        b,
        "logical_and",
        emit_binary(b, "ge", positions, reshape_to(b, starts, (*shape[:axis], segments, 1)), "bool"),
        emit_binary(b, "lt", positions, reshape_to(b, ends, (*shape[:axis], segments, 1)), "bool"),
    )
    inside = reshape_to(b, inside, (*shape[:axis], segments, shape[axis], *trailing))
    spread = reshape_to(b, data, (*shape[:axis], 1, *shape[axis:]))
    kept = b.emit(
        Where(inside, spread, b.lit(_SEGMENT_START[reduce], compute)),
        broadcast(b.shape(inside), b.shape(spread)),
        compute,
    )
    total = reduce_value(b, _SEGMENT_FN[reduce], kept, (axis + 1,), False, compute)
    if initial is not None:
        fold = {"sum": "add", "mean": "add", "prod": "mul", "max": "maximum", "min": "minimum"}[reduce]
        total = emit_binary(b, fold, total, b.lit(initial, compute))
    if reduce == "mean":
        count = reshape_to(b, emit_binary(b, "sub", ends, starts), (*shape[:axis], segments, *trailing))
        mean = emit_binary(b, "div", total, b.cast(count, compute))
        empty = emit_binary(b, "eq", count, b.lit(0, "i64"), "bool")
        total = b.emit(
            Where(empty, b.lit(math.nan if initial is None else initial, compute), mean), b.shape(mean), compute
        )
    return b.cast(total, out.dtype)
