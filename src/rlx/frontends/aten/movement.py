"""Shape and data-movement lowerings: views, permutes, slicing, concatenation, indexing, ``diff``,
``copy`` and ``as_strided``."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import chunk_sizes, norm_axis, slice_bounds, split_sizes, tensor_split_bounds
from rlx.frontends.common import static_dim
from rlx.ir import symbolic
from rlx.ir.calls import Arange, Binary, Concat, Expand, Full, Gather, Index, IndexSelect, Pad, Permute, Reshape, Slice
from rlx.ir.program import Operand, Ref
from rlx.ir.symbolic import Dim, static_shape


def reshape_to(b: Builder, x: Ref, shape: Sequence[Dim]) -> Ref:
    return x if b.shape(x) == tuple(shape) else b.emit(Reshape(x, tuple(shape)), shape, b.dtype(x))


@lowers(
    "aten.view",
    "aten._unsafe_view",
    "aten.reshape",
    "aten.flatten",
    "aten.unflatten",
    "aten.unsqueeze",
    "aten.squeeze",
    "aten.view_as",
    "aten.reshape_as",
    "aten.squeeze_copy",
    "aten.unsqueeze_copy",
    "aten.view_copy",
    "aten._reshape_alias",
)
def view(node: Node, b: Builder) -> Operand:
    # Every view-like op is a reshape to the shape torch recorded for the result.
    return reshape_to(b, b.input(node, 0), node.meta.shape)


@lowers("aten.resize", "aten.resize_", "aten.resize_as", "aten.resize_as_")
def resize(node: Node, b: Builder) -> Operand:
    # A resize to another shape re-reads x's storage in its memory order, which torch-ir.json
    # does not record (a transposed clone keeps its strides): only the no-op resize is certain.
    x = b.input(node, 0)
    if b.shape(x) != tuple(node.meta.shape):
        raise LoweringError(
            f"node {node.id} ({node.op}): resizing {list(b.shape(x))} to {list(node.meta.shape)} depends on "
            "the tensor's memory layout; use reshape, a slice or a pad instead"
        )
    return x


def permute_value(b: Builder, x: Ref, perm: tuple[int, ...]) -> Ref:
    if perm == tuple(range(len(perm))):
        return x
    shape = tuple(b.shape(x)[p] for p in perm)
    return b.emit(Permute(x, perm), shape, b.dtype(x))


@lowers("aten.permute", "aten.permute_copy")
def permute(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    rank = b.rank(x)
    return permute_value(b, x, tuple(norm_axis(d, rank) for d in node.arg(1, "dims")))


@lowers("aten.transpose", "aten.swapaxes", "aten.swapdims", "aten.transpose_copy")  # two given axes
@lowers("aten.t", "aten.numpy_T", "aten.mT", "aten.mH", "aten.adjoint")  # fixed axes: all, or the last two
def transpose(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    rank = b.rank(x)
    if node.base in ("t", "numpy_T"):
        perm = tuple(reversed(range(rank)))
    elif node.base in ("mT", "mH", "adjoint"):  # the last two axes
        if node.base != "mT" and b.dtype(x) == "c64":
            raise LoweringError(f"node {node.id}: {node.base} of a complex tensor conjugates; not supported")
        perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    else:
        d0, d1 = norm_axis(node.arg(1), rank), norm_axis(node.arg(2), rank)
        order = list(range(rank))
        order[d0], order[d1] = order[d1], order[d0]
        perm = tuple(order)
    return permute_value(b, x, perm)


@lowers("aten.movedim", "aten.moveaxis")
def movedim(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    rank = b.rank(x)
    src, dst = node.arg(1, "source"), node.arg(2, "destination")
    src = [norm_axis(a, rank) for a in ((src,) if isinstance(src, int) else src)]
    dst = [norm_axis(a, rank) for a in ((dst,) if isinstance(dst, int) else dst)]
    rest = iter(a for a in range(rank) if a not in src)
    placed = dict(zip(dst, src))
    return permute_value(b, x, tuple(placed[i] if i in placed else next(rest) for i in range(rank)))


@lowers("aten.expand", "aten.expand_as", "aten.expand_copy", "aten.broadcast_to")
def expand(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    shape = node.meta.shape
    return x if b.shape(x) == shape else b.emit_like(Expand(x, shape), node.meta)


@lowers("aten.slice", "aten.slice_copy")
def slice_(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    axis = norm_axis(node.arg(1, "dim", 0), b.rank(x))
    size = b.shape(x)[axis]
    start, end, step = b.scalar(node, 2, "start"), b.scalar(node, 3, "end"), b.scalar(node, 4, "step", 1)
    if not (isinstance(size, int) and all(isinstance(v, (int, type(None))) for v in (start, end))):
        # Symbolic bounds keep Python's slice semantics (negative wrap, clamping), which are
        # PyTorch's; they are evaluated once the input symbols are bound.
        start = 0 if start is None else start
        end = SLICE_END if end is None else end
        return b.emit_like(Slice(x, axis, start, end, step), node.meta)
    start, stop, step = slice_bounds(size, start, end, step)
    if (start, stop, step) == (0, size, 1):
        return x
    return b.emit_like(Slice(x, axis, start, stop, step), node.meta)


SLICE_END = 2**63 - 1  # "to the end", as torch.export records an open slice


def take_slice(b: Builder, x: Ref, axis: int, start: Dim, length: Dim) -> Ref:
    shape = list(b.shape(x))
    shape[axis] = length
    return b.emit(Slice(x, axis, start, symbolic.add(start, length), 1), shape, b.dtype(x))


@lowers("aten.select", "aten.select_copy")
def select(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    size = b.shape(x)[axis]
    index = b.scalar(node, 2, "index")
    if isinstance(size, int) and isinstance(index, int) and not -size <= index < size:
        raise LoweringError(f"node {node.id}: index {index} is out of range for axis {axis} of size {size}")
    return reshape_to(b, take_slice(b, x, axis, symbolic.mod(index, size), 1), node.meta.shape)


def _split(b: Builder, x: Ref, axis: int, sizes: Sequence[Dim]) -> tuple[Ref, ...]:
    parts: list[Ref] = []
    start: Dim = 0
    for size in sizes:
        parts.append(take_slice(b, x, axis, start, size))
        start = symbolic.add(start, size)
    return tuple(parts)


@lowers(
    "aten.split",
    "aten.split_with_sizes",
    "aten.chunk",
    "aten.unsafe_split",
    "aten.split_copy",
    "aten.split_with_sizes_copy",
    "aten.unsafe_split_with_sizes",
)
def split(node: Node, b: Builder) -> tuple[Ref, ...]:
    x = b.input(node, 0)
    axis = norm_axis(node.arg(2, "dim", 0), b.rank(x))
    size = b.shape(x)[axis]
    how = b.scalar(node, 1)
    if not isinstance(size, int) or not all(isinstance(h, int) for h in (how if isinstance(how, tuple) else (how,))):
        # On a symbolic axis the piece extents are the ones torch recorded for the results.
        return _split(b, x, axis, _recorded_extents(node, axis))
    if node.base == "chunk":
        sizes = chunk_sizes(size, how)
    elif isinstance(how, int):
        sizes = split_sizes(size, how)
    else:
        sizes = list(how)
    if sum(sizes) != size:
        raise LoweringError(f"node {node.id}: split sizes {sizes} do not add up to {size}")
    return _split(b, x, axis, sizes)


def _recorded_extents(node: Node, axis: int) -> list[Dim]:
    """The extent along ``axis`` that torch recorded for each result of a multi-output node."""
    return [node.meta_at(k).shape[axis] for k in range(len(node.out))]


@lowers("aten.tensor_split")
def tensor_split(node: Node, b: Builder) -> tuple[Ref, ...]:
    """``tensor_split(x, sections | indices, dim)``: unlike ``split``, an int is a number of pieces."""
    x = b.input(node, 0)
    axis = norm_axis(node.arg(2, "dim", 0), b.rank(x))
    how = node.arg(1)
    if isinstance(how, Ref):
        raise LoweringError(f"node {node.id}: tensor_split with a tensor of indices has a data-dependent shape")
    bounds = tensor_split_bounds(static_dim(b.shape(x)[axis], "the split axis", node), how)
    return tuple(take_slice(b, x, axis, start, stop - start) for start, stop in bounds)


@lowers("aten.narrow", "aten.narrow_copy")
def narrow(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    size, start, length = b.shape(x)[axis], b.scalar(node, 2, "start"), b.scalar(node, 3, "length")
    if not all(isinstance(v, int) for v in (size, start, length)):
        return take_slice(b, x, axis, symbolic.mod(start, size) if start != 0 else 0, length)
    start = start + size if start < 0 else start
    if not (0 <= start and 0 <= length and start + length <= size):
        raise LoweringError(f"node {node.id}: narrow({start}, {length}) is out of range for axis {axis} of size {size}")
    return x if length == size else take_slice(b, x, axis, start, length)


@lowers("aten.unbind")
def unbind(node: Node, b: Builder) -> tuple[Ref, ...]:
    x = b.input(node, 0)
    axis = norm_axis(node.arg(1, "dim", 0), b.rank(x))
    shape = b.shape(x)[:axis] + b.shape(x)[axis + 1 :]
    return tuple(reshape_to(b, part, shape) for part in _split(b, x, axis, [1] * len(node.out)))


@lowers("aten.cat", "aten.concat", "aten.concatenate")
def cat(node: Node, b: Builder) -> Operand:
    out = node.meta
    parts = [b.tensor(node, a) for a in node.arg(0, "tensors")]
    rank = len(out.shape)
    # Legacy rule: 1-d empty tensors are skipped whatever the rank of the others.
    parts = [p for p in parts if not (b.shape(p) == (0,) and rank != 1)]
    axis = norm_axis(node.arg(1, "dim", 0), rank)
    parts = [b.cast(p, out.dtype) for p in parts]
    if len(parts) == 1:
        return parts[0]
    return b.emit_like(Concat(tuple(parts), axis), out)


@lowers("aten.stack")
def stack(node: Node, b: Builder) -> Operand:
    out = node.meta
    axis = norm_axis(node.arg(1, "dim", 0), len(out.shape))
    parts = []
    for a in node.arg(0, "tensors"):
        p = b.cast(b.tensor(node, a), out.dtype)
        shape = b.shape(p)
        parts.append(reshape_to(b, p, shape[:axis] + (1,) + shape[axis:]))
    return parts[0] if len(parts) == 1 else b.emit_like(Concat(tuple(parts), axis), out)


@lowers("aten.constant_pad_nd", "aten.pad")
def constant_pad(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    if node.base == "pad" and node.arg(2, "mode", "constant") != "constant":
        raise LoweringError(f"node {node.id}: pad mode {node.arg(2, 'mode')!r} is not supported yet")
    pad = list(b.scalar(node, 1, "pad"))
    value = node.arg(2 if node.base == "constant_pad_nd" else 3, "value", 0) or 0
    rank = b.rank(x)
    pads = [(0, 0)] * rank
    # `pad` lists (before, after) pairs starting from the last axis.
    for i in range(len(pad) // 2):
        pads[rank - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if b.dtype(x) == "bool":
        value = bool(value)
    elif b.dtype(x) not in ("f16", "bf16", "f32", "f64"):
        value = int(value)
    return b.emit_like(Pad(x, tuple(pads), value), node.meta)


@lowers("aten.index_select")
def index_select(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    index = b.input(node, 2, "index")
    if b.rank(index) == 0:  # a 0-d index selects one element but keeps the axis
        index = reshape_to(b, index, (1,))
    if b.rank(x) == 0:  # a 0-d input behaves as a 1-element vector, and the result stays 0-d
        picked = b.emit(IndexSelect(reshape_to(b, x, (1,)), 0, index), b.shape(index), b.dtype(x))
        return reshape_to(b, picked, node.meta.shape)
    return b.emit_like(IndexSelect(x, axis, index), node.meta)


@lowers("aten.gather")
def gather(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    return b.emit_like(Gather(x, axis, b.input(node, 2, "index")), node.meta)


@lowers("aten.index.Tensor", "aten._unsafe_index.Tensor")
def index(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    indices: list[Ref | None] = []
    for a in node.arg(1, "indices"):
        if a is None:
            indices.append(None)
            continue
        # A boolean mask selects its True positions: the result length is a data-dependent size.
        indices.append(b.tensor(node, a))
    return b.emit_like(Index(x, tuple(indices)), node.meta)


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
