"""Scatter lowerings: index_put, index_copy/index_add/index_fill, slice/select_scatter, scatter,
scatter_add, scatter_reduce, masked_scatter, diagonal/diag.

Writes to one position from several sources: accumulating forms (``accumulate=True``,
``scatter_add``, ``scatter_reduce``, ``index_add``) combine them all; for plain writes PyTorch leaves
the survivor unspecified and rlx keeps the last.
"""

from __future__ import annotations

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.creation import fill_value
from rlx.frontends.aten.movement import reshape_to
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import norm_axis, slice_bounds
from rlx.ir import symbolic
from rlx.ir.calls import (
    Arange,
    Binary,
    Cast,
    CumReduce,
    Diagonal,
    Expand,
    Full,
    IndexPut,
    IndexSelect,
    Scatter,
    Where,
)
from rlx.ir.program import Operand, Ref
from rlx.ir.symbolic import Sym


def _along(axis: int, index: Ref) -> tuple[Ref | None, ...]:
    """Indices that put ``index`` on ``axis`` and take every other leading axis whole."""
    return (None,) * axis + (index,)


def _values(b: Builder, node: Node, index: int, name: str, dtype: str) -> Operand:
    """A tensor or number argument in ``dtype`` (the tensor being written to); numbers convert
    as PyTorch fills them in (2.5 → 2 in an integer tensor)."""
    arg = node.arg(index, name)
    if isinstance(arg, (bool, int, float)):
        return b.lit(fill_value(arg, dtype), dtype)
    return b.cast(b.operand(arg, dtype), dtype)


def _put(b: Builder, node: Node, x: Ref, indices: tuple[Ref | None, ...], values: Operand, accumulate: bool) -> Ref:
    return b.emit_like(IndexPut(x, indices, values, accumulate), node.meta)


# ── index_put and its relatives ──────────────────────────────────────────────
@lowers("aten.index_put", "aten.index_put_", "aten._unsafe_index_put")
def index_put(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    indices = tuple(None if a is None else b.tensor(node, a) for a in node.arg(1, "indices"))
    values = _values(b, node, 2, "values", b.dtype(x))
    return _put(b, node, x, indices, values, bool(node.arg(3, "accumulate", False)))


def _index_along(node: Node, b: Builder, source: Operand, accumulate: bool) -> Ref:
    """``index_copy/add/fill(x, dim, index, …)`` as ``x[(:,) * dim + (index,)] (+)= source``;
    a 0-d x, index or source acts as a 1-element vector."""
    x = b.input(node, 0)
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    index = b.input(node, 2, "index")
    if b.rank(index) == 0:
        index = reshape_to(b, index, (1,))
    if b.rank(x) > 0:
        return _put(b, node, x, _along(axis, index), source, accumulate)
    if isinstance(source, Ref):
        source = reshape_to(b, source, (1,))
    out = b.emit(IndexPut(reshape_to(b, x, (1,)), (index,), source, accumulate), (1,), b.dtype(x))
    return reshape_to(b, out, ())


@lowers("aten.index_copy", "aten.index_copy_")
def index_copy(node: Node, b: Builder) -> Operand:
    return _index_along(node, b, b.cast(b.input(node, 3, "source"), b.dtype(b.input(node, 0))), False)


@lowers("aten.index_add", "aten.index_add_")
def index_add(node: Node, b: Builder) -> Operand:
    dt = b.dtype(b.input(node, 0))
    source = b.cast(b.input(node, 3, "source"), dt)
    alpha = node.arg(4, "alpha", 1)
    if alpha != 1:
        source = b.emit(Binary("mul", source, b.lit(fill_value(alpha, dt), dt)), b.shape(source), dt)
    return _index_along(node, b, source, True)


@lowers("aten.index_fill", "aten.index_fill_")
def index_fill(node: Node, b: Builder) -> Operand:
    return _index_along(node, b, _values(b, node, 3, "value", b.dtype(b.input(node, 0))), False)


@lowers("aten.slice_scatter")
def slice_scatter(node: Node, b: Builder) -> Operand:
    """``src`` written over ``x[start:end:step]`` along ``dim``: an IndexPut at an Arange."""
    x, src = b.input(node, 0), b.input(node, 1, "src")
    axis = norm_axis(node.arg(2, "dim", 0), b.rank(x))
    size = b.shape(x)[axis]
    start, end, step = b.scalar(node, 3, "start"), b.scalar(node, 4, "end"), b.scalar(node, 5, "step", 1)
    n = b.shape(src)[axis]  # the slice's length, as torch recorded it
    if isinstance(size, int) and isinstance(start, (int, type(None))) and isinstance(end, (int, type(None))):
        start = slice_bounds(size, start, end, step)[0]
    elif start is None:
        start = 0
    elif isinstance(start, int) and start < 0:  # symbolic extent: wrap now, clamp at 0
        start = symbolic.maximum(symbolic.add(size, start), 0)
    elif not isinstance(start, (int, Sym)):
        raise LoweringError(f"node {node.id}: slice_scatter start {start!r} is not supported")
    if not isinstance(step, int):
        raise LoweringError(f"node {node.id}: slice_scatter step must be a static int, found {step!r}")
    rows = b.emit(Arange(start, symbolic.add(start, symbolic.mul(n, step)), step, "i64"), (n,), "i64")
    return _put(b, node, x, _along(axis, rows), b.cast(src, b.dtype(x)), False)


@lowers("aten.select_scatter")
def select_scatter(node: Node, b: Builder) -> Operand:
    x, src = b.input(node, 0), b.input(node, 1, "src")
    axis = norm_axis(node.arg(2, "dim"), b.rank(x))
    size, index = b.shape(x)[axis], b.scalar(node, 3, "index")
    if isinstance(size, int) and isinstance(index, int) and not -size <= index < size:
        raise LoweringError(f"node {node.id}: index {index} is out of range for axis {axis} of size {size}")
    at = symbolic.mod(index, size)
    one = b.emit(Arange(at, symbolic.add(at, 1), 1, "i64"), (1,), "i64")
    # A 0-d index drops the axis, as select does: src has x's shape without it.
    return _put(b, node, x, _along(axis, reshape_to(b, one, ())), b.cast(src, b.dtype(x)), False)


# ── scatter ──────────────────────────────────────────────────────────────────
_REDUCE = {None: "none", "add": "sum", "multiply": "prod", "sum": "sum", "prod": "prod", "mean": "mean",
           "amax": "amax", "amin": "amin"}  # fmt: skip


@lowers("aten.scatter", "aten.scatter_add", "aten.scatter_reduce")
@lowers("aten.scatter_", "aten.scatter_add_", "aten.scatter_reduce_")  # in-place forms
def scatter(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    dt = b.dtype(x)
    axis = norm_axis(node.arg(1, "dim"), max(b.rank(x), 1))
    index = b.input(node, 2, "index")
    src = _values(b, node, 3, "value" if node.overload.startswith("value") else "src", dt)
    base = node.base.rstrip("_")
    if base == "scatter_add":
        reduce, include_self = "sum", True
    elif base == "scatter_reduce":
        reduce, include_self = node.arg(4, "reduce"), bool(node.arg(5, "include_self", True))
    else:
        reduce, include_self = node.arg(4, "reduce", None), True
    if reduce not in _REDUCE:
        raise LoweringError(f"node {node.id}: unknown scatter reduction {reduce!r}")
    if b.rank(x) == 0:  # a 0-d tensor scatters as a 1-element vector
        x1 = reshape_to(b, x, (1,))
        index = reshape_to(b, index, (1,))
        src = reshape_to(b, src, (1,)) if isinstance(src, Ref) else src
        out = b.emit(Scatter(x1, 0, index, src, _REDUCE[reduce], include_self), (1,), dt)
        return reshape_to(b, out, ())
    return b.emit_like(Scatter(x, axis, index, src, _REDUCE[reduce], include_self), node.meta)


@lowers("aten.masked_scatter", "aten.masked_scatter_")
def masked_scatter(node: Node, b: Builder) -> Operand:
    """The k-th ``True`` of the (broadcast) mask, in row-major order, takes ``source.flatten()[k]``:
    its position in ``source`` is the running count of the mask minus one."""
    out = node.meta
    x, mask, source = b.input(node, 0), b.input(node, 1, "mask"), b.input(node, 2, "source")
    shape, n = tuple(out.shape), symbolic.numel(out.shape)
    if symbolic.numel(b.shape(source)) == 0:  # nothing to take: torch requires an all-False mask then
        return b.emit_like(Expand(x, shape), out) if tuple(b.shape(x)) != shape else x
    if tuple(b.shape(x)) != shape:
        x = b.emit(Expand(x, shape), shape, b.dtype(x))
    if tuple(b.shape(mask)) != shape:
        mask = b.emit(Expand(mask, shape), shape, "bool")
    counts = b.emit(CumReduce("sum", b.emit(Cast(reshape_to(b, mask, (n,)), "i64"), (n,), "i64"), 0), (n,), "i64")
    pos = b.emit(
        Binary("maximum", b.emit(Binary("sub", counts, b.lit(1, "i64")), (n,), "i64"), b.lit(0, "i64")), (n,), "i64"
    )
    flat = reshape_to(b, source, (symbolic.numel(b.shape(source)),))
    taken = reshape_to(b, b.emit(IndexSelect(flat, 0, pos), (n,), b.dtype(source)), shape)
    return b.emit_like(Where(mask, b.cast(taken, out.dtype), x), out)


# ── diagonals ────────────────────────────────────────────────────────────────
@lowers("aten.diagonal", "aten.diagonal_copy")
def diagonal(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    rank = b.rank(x)
    offset = node.arg(1, "offset", 0)
    a1, a2 = norm_axis(node.arg(2, "dim1", 0), rank), norm_axis(node.arg(3, "dim2", 1), rank)
    if a1 == a2:
        raise LoweringError(f"node {node.id}: diagonal dims must differ, found {a1} twice")
    return b.emit_like(Diagonal(x, offset, a1, a2), node.meta)


@lowers("aten.diag")
def diag(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    k = node.arg(1, "diagonal", 0)
    if b.rank(x) == 2:
        return b.emit_like(Diagonal(x, k, 0, 1), node.meta)
    if b.rank(x) != 1:
        raise LoweringError(f"node {node.id}: diag takes a 1-d or 2-d tensor, found {b.rank(x)}-d")
    (n,) = b.shape(x)
    out = node.meta
    zeros = b.emit(Full(0, tuple(out.shape), out.dtype), out.shape, out.dtype)
    steps = b.emit(Arange(0, n, 1, "i64"), (n,), "i64")
    rows = b.emit(Binary("add", steps, b.lit(max(-k, 0), "i64")), (n,), "i64")
    cols = b.emit(Binary("add", steps, b.lit(max(k, 0), "i64")), (n,), "i64")
    return _put(b, node, zeros, (rows, cols), x, False)


@lowers("aten.index_reduce", "aten.index_reduce_")
def index_reduce(node: Node, b: Builder) -> Operand:
    """``index_reduce(x, dim, index, source, reduce, include_self)``: ``source[.., i, ..]`` combined
    into ``x[.., index[i], ..]`` — a scatter_reduce along ``dim`` whose index is ``index`` laid
    along that axis of ``source`` (prod / mean / amax / amin; mean floors for integers, as both do)."""
    x = b.input(node, 0)
    dt = b.dtype(x)
    reduce = node.arg(4, "reduce")
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise LoweringError(f"node {node.id}: unknown index_reduce reduction {reduce!r}")
    include_self = bool(node.arg(5, "include_self", True))
    index = b.input(node, 2, "index")
    source = b.cast(b.input(node, 3, "source"), dt)
    if b.rank(x) == 0:  # a 0-d tensor reduces as a 1-element vector
        x1, index, source = (reshape_to(b, v, (1,)) for v in (x, index, source))
        out = b.emit(Scatter(x1, 0, index, source, reduce, include_self), (1,), dt)
        return reshape_to(b, out, ())
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    shape = b.shape(source)
    if b.rank(index) == 0:
        index = reshape_to(b, index, (1,))
    laid = reshape_to(b, index, tuple(shape[axis] if k == axis else 1 for k in range(len(shape))))
    spread = b.emit(Expand(laid, shape), shape, b.dtype(index))
    return b.emit_like(Scatter(x, axis, spread, source, reduce, include_self), node.meta)


# ── writes through a view: diagonal_scatter, as_strided_scatter, put ─────────
def _flat_positions(b: Builder, x: Ref) -> Ref:
    """``arange(x.numel()).view(x.shape)``: each entry's row-major position in ``x``."""
    shape = b.shape(x)
    n = symbolic.numel(shape)
    return reshape_to(b, b.emit(Arange(0, n, 1, "i64"), (n,), "i64"), tuple(shape))


def _put_flat(b: Builder, node: Node, x: Ref, positions: Ref, values: Operand, accumulate: bool) -> Ref:
    """``x.flatten()[positions] (+)= values``, back in ``x``'s shape."""
    n = symbolic.numel(b.shape(x))
    k = symbolic.numel(b.shape(positions))
    flat_pos = reshape_to(b, positions, (k,))
    if isinstance(values, Ref):
        values = reshape_to(b, values, (symbolic.numel(b.shape(values)),))
    out = b.emit(IndexPut(reshape_to(b, x, (n,)), (flat_pos,), values, accumulate), (n,), b.dtype(x))
    return reshape_to(b, out, tuple(b.shape(x)))


@lowers("aten.diagonal_scatter")
def diagonal_scatter(node: Node, b: Builder) -> Operand:
    """``src`` written over ``x.diagonal(offset, dim1, dim2)``: the diagonal of ``x``'s flat
    positions says where each entry of ``src`` goes."""
    x, src = b.input(node, 0), b.input(node, 1, "src")
    rank = b.rank(x)
    offset = node.arg(2, "offset", 0)
    a1, a2 = norm_axis(node.arg(3, "dim1", 0), rank), norm_axis(node.arg(4, "dim2", 1), rank)
    if a1 == a2:
        raise LoweringError(f"node {node.id}: diagonal_scatter dims must differ, found {a1} twice")
    where = b.emit(Diagonal(_flat_positions(b, x), offset, a1, a2), b.shape(src), "i64")
    return _put_flat(b, node, x, where, b.cast(src, b.dtype(x)), False)


@lowers("aten.as_strided_scatter")
def as_strided_scatter(node: Node, b: Builder) -> Operand:
    """``src`` written over ``x.as_strided(size, stride, storage_offset)`` of a contiguous ``x``:
    entry ``i`` of the view sits at ``storage_offset + Σ i_k · stride_k`` of the flat tensor."""
    x, src = b.input(node, 0), b.input(node, 1, "src")
    size, stride = list(node.arg(2, "size")), list(node.arg(3, "stride"))
    start = node.arg(4, "storage_offset", None) or 0
    if not all(isinstance(v, int) for v in (*size, *stride, start)):
        raise LoweringError(f"node {node.id}: as_strided_scatter needs static size, stride and offset")
    shape = tuple(size)
    where: Ref = b.emit(Full(start, shape, "i64"), shape, "i64")
    for k, (n, s) in enumerate(zip(size, stride)):
        steps = b.emit(Arange(0, n * s, s, "i64") if s else Full(0, (n,), "i64"), (n,), "i64")
        laid = reshape_to(b, steps, tuple(n if j == k else 1 for j in range(len(size))))
        where = b.emit(Binary("add", where, laid), shape, "i64")
    return _put_flat(b, node, x, where, b.cast(src, b.dtype(x)), False)


@lowers("aten.put", "aten.put_")
def put(node: Node, b: Builder) -> Operand:
    """``x.flatten()[index.flatten()] (+)= source.flatten()``; negative indices count from the end."""
    x, index = b.input(node, 0), b.input(node, 1, "index")
    source = b.cast(b.input(node, 2, "source"), b.dtype(x))
    return _put_flat(b, node, x, index, source, bool(node.arg(3, "accumulate", False)))
