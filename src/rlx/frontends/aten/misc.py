"""Ops real models use that fit no other family: ``diff``, weight norm, ``as_strided``, ``copy``.

Each one is composed from existing Calls, so engines need nothing new.
"""

from __future__ import annotations

import math

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.movement import reshape_to, take_slice
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import broadcast, norm_axis
from rlx.ir import symbolic
from rlx.ir.calls import Arange, Binary, Concat, Expand, Full, IndexSelect, Permute, Reduce, Reshape, Slice, Unary
from rlx.ir.program import Operand, Ref
from rlx.ir.symbolic import static_shape


# ── diff ─────────────────────────────────────────────────────────────────────
@lowers("aten.diff")
def diff(node: Node, b: Builder) -> Operand:
    """``diff(self, n=1, dim=-1, prepend=None, append=None)``: ``n`` times ``x[1:] - x[:-1]`` along
    ``dim`` after concatenating ``prepend``/``append``; bool tensors use ``logical_xor``, as torch does."""
    out = node.meta
    x = b.input(node, 0)
    n = node.arg(1, "n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise LoweringError(f"node {node.id}: diff order n must be a non-negative int, found {n!r}")
    axis = norm_axis(node.arg(2, "dim", -1), b.rank(x))
    pre, app = b.optional_input(node, 3, "prepend"), b.optional_input(node, 4, "append")
    parts = [b.cast(p, out.dtype) for p in (pre, x, app) if p is not None]
    if len(parts) > 1:
        shape = list(b.shape(parts[0]))
        for p in parts[1:]:
            shape[axis] = symbolic.add(shape[axis], b.shape(p)[axis])
        x = b.emit(Concat(tuple(parts), axis), tuple(shape), out.dtype)
    else:
        x = parts[0]
    fn = "logical_xor" if out.dtype == "bool" else "sub"
    for _ in range(n):
        size = b.shape(x)[axis]
        if isinstance(size, int) and size == 0:
            break
        length = symbolic.add(size, -1)
        hi, lo = take_slice(b, x, axis, 1, length), take_slice(b, x, axis, 0, length)
        x = b.emit(Binary(fn, hi, lo), b.shape(hi), out.dtype)
    return x


# ── copy ─────────────────────────────────────────────────────────────────────
@lowers("aten.copy")
def copy(node: Node, b: Builder) -> Operand:
    """``copy(self, src)``, the functional ``self.copy_(src)``: ``src`` in ``self``'s dtype, broadcast
    to ``self``'s shape (decompositions write ``clone`` as ``empty`` + ``copy``)."""
    out = node.meta
    src = b.cast(b.operand(node.arg(1, "src"), None), out.dtype)
    return src if b.shape(src) == out.shape else b.emit_like(Expand(src, out.shape), out)


# ── weight norm ──────────────────────────────────────────────────────────────
def _norm_except_dim(b: Builder, v: Ref, p: float, dim: int) -> Ref:
    """The ``p``-norm of ``v`` over every axis but ``dim`` (every axis when ``dim`` is -1), kept as
    a broadcastable ``[1, …, size, …, 1]`` tensor (``[1, …, 1]`` for ``dim`` -1, where torch's
    ``norm_except_dim`` returns a 0-d tensor)."""
    shape, dtype = b.shape(v), b.dtype(v)
    axes = tuple(range(len(shape))) if dim == -1 else tuple(a for a in range(len(shape)) if a != dim)
    kept = tuple(1 if a in axes else d for a, d in enumerate(shape))
    if p == 2:
        powered = b.emit(Binary("mul", v, v), shape, dtype)
    else:
        absolute = b.emit(Unary("abs", v), shape, dtype)
        powered = b.emit(Binary("pow", absolute, b.lit(p, dtype)), shape, dtype)
    total = b.emit(Reduce("sum", powered, axes, True), kept, dtype) if axes else powered
    if p == 2:
        return b.emit(Unary("sqrt", total), kept, dtype)
    return b.emit(Binary("pow", total, b.lit(1.0 / p, dtype)), kept, dtype)


def _weight_norm_dim(node: Node, b: Builder, v: Ref, index: int, name: str, default: int) -> int:
    dim = node.arg(index, name, default)
    return -1 if dim == -1 else norm_axis(dim, b.rank(v))


@lowers("aten.norm_except_dim")
def norm_except_dim(node: Node, b: Builder) -> Operand:
    v = b.input(node, 0)
    p = node.arg(1, "pow", 2)
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 < p < math.inf:
        raise LoweringError(f"node {node.id}: norm_except_dim supports a finite positive pow, found {p!r}")
    norm = _norm_except_dim(b, b.cast(v, node.meta.dtype), float(p), _weight_norm_dim(node, b, v, 2, "dim", 0))
    return reshape_to(b, norm, node.meta.shape)  # dim -1: a 0-d norm


@lowers("aten._weight_norm")
def weight_norm(node: Node, b: Builder) -> Operand:
    """``_weight_norm(v, g, dim=0)`` = ``v * (g / norm_except_dim(v, 2, dim))`` (``dim`` -1: one
    norm over the whole tensor), the weight ``nn.utils.weight_norm`` recomputes on every call."""
    out = node.meta
    v, g = b.cast(b.input(node, 0), out.dtype), b.cast(b.input(node, 1, "g"), out.dtype)
    norm = _norm_except_dim(b, v, 2.0, _weight_norm_dim(node, b, v, 2, "dim", 0))
    scale = b.emit(Binary("div", g, norm), broadcast(b.shape(g), b.shape(norm)), out.dtype)
    return b.emit_like(Binary("mul", v, scale), out)


# ── as_strided ───────────────────────────────────────────────────────────────
def _contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(size):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def _same_layout(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether ``stride`` lays ``size`` out row-major (strides of extent-1 axes do not matter)."""
    return all(d == 1 or s == c for d, s, c in zip(size, stride, _contiguous_strides(size)))


@lowers("aten.as_strided", "aten.as_strided_copy")
def as_strided(node: Node, b: Builder) -> Operand:
    """``as_strided(self, size, stride, storage_offset=None)`` over the row-major elements of ``self``.

    rlx values have no strides: element ``i`` of the result reads ``flat(self)[offset + Σ i_k·stride_k]``,
    which is what torch reads when ``self`` is contiguous — the case of the graphs torch's own
    decompositions produce (a freshly computed tensor given its memory format back). Where torch
    would read the storage under a view (``self`` made by a permute, expand or slice, reshaped or
    not) the lowering refuses; it cannot see a ``.contiguous()`` in between (a copy lowers to the
    same value), nor the strides torch gives the result of an elementwise op on a permuted tensor:
    parity catches those. A re-layout of the same elements is a reshape; anything else gathers from
    the flattened input.
    """
    x = b.input(node, 0)
    view = _view_call(b, x)
    if view is not None:
        raise LoweringError(
            f"node {node.id}: as_strided of a {view} result reads the storage under the view in torch, "
            "and rlx values have no strides: not supported"
        )
    size, stride = b.scalar(node, 1, "size"), b.scalar(node, 2, "stride")
    offset = b.scalar(node, 3, "storage_offset", 0) or 0
    x_shape = static_shape(b.shape(x))
    if x_shape is None or not all(isinstance(v, int) for v in (*size, *stride, offset)):
        raise LoweringError(f"node {node.id}: as_strided needs static sizes, strides and offset")
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride) or any(d < 0 for d in size) or any(s < 0 for s in stride) or offset < 0:
        raise LoweringError(f"node {node.id}: as_strided size {list(size)} / stride {list(stride)} are invalid")
    n, count = math.prod(x_shape), math.prod(size)
    last = offset + sum((d - 1) * s for d, s in zip(size, stride)) if count else offset
    if count and last >= n:
        raise LoweringError(f"node {node.id}: as_strided reads element {last} of a tensor with {n} elements")
    if count == 0:
        return b.emit_like(Full(0, size, node.meta.dtype), node.meta)
    flat = reshape_to(b, x, (n,))
    if _same_layout(size, stride):  # one contiguous run of elements: a slice, re-shaped
        return reshape_to(b, take_slice(b, flat, 0, offset, count) if count != n else flat, size)
    return b.emit_like(IndexSelect(flat, 0, _strided_index(b, size, stride, offset)), node.meta)


def _view_call(b: Builder, x: Ref) -> str | None:
    """The name of the Call that made ``x`` (through reshapes) when torch may have made it a strided
    view of another tensor's storage; ``None`` for anything else, graph inputs and weights included."""
    producers = {ins.result: ins.call for ins in b.program.instrs}
    call = producers.get(x.name)
    while isinstance(call, Reshape):
        call = producers.get(call.x.name)
    return type(call).__name__ if isinstance(call, (Permute, Expand, Slice)) else None


def _strided_index(b: Builder, size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> Ref:
    """The int64 tensor ``offset + Σ_k arange(size_k)·stride_k`` of shape ``size`` (no extent is 0)."""
    rank = len(size)
    index: Operand = b.lit(offset, "i64")
    shape = (1,) * rank
    for k, (d, s) in enumerate(zip(size, stride)):
        axis = reshape_to(b, b.emit(Arange(0, d, 1, "i64"), (d,), "i64"), (1,) * k + (d,) + (1,) * (rank - k - 1))
        term = axis if s == 1 else b.emit(Binary("mul", axis, b.lit(s, "i64")), b.shape(axis), "i64")
        shape = shape[:k] + (d,) + shape[k + 1 :]
        index = b.emit(Binary("add", index, term), shape, "i64")
    if not isinstance(index, Ref):  # only a 0-d size leaves the literal, and that is a contiguous run
        raise LoweringError("as_strided: a 0-d result has no strided index")
    return index
