"""Selection lowerings: nonzero / argwhere / nonzero_static, masked_select, unique (sorted, by dim,
consecutive), bincount, histc, histogram / histogramdd, and the grouped matmul of mixture-of-experts
layers.

The lengths of most of these results depend on the data: torch.export names them with unbacked
symbols (``u0``), which the program keeps; the numpy engine binds them as the run produces them.
"""

from __future__ import annotations

import math

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node, TensorMeta
from rlx.frontends.aten.elementwise import emit_binary
from rlx.frontends.aten.movement import reshape_to, take_slice
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import norm_axis
from rlx.frontends.common import static_dim
from rlx.ir import symbolic
from rlx.ir.calls import (
    Arange,
    Bincount,
    Full,
    GroupedMatMul,
    Histc,
    MaskedSelect,
    Nonzero,
    NonzeroStatic,
    Reduce,
    Reshape,
    Scatter,
    SearchSorted,
    Unique,
    Where,
)
from rlx.ir.program import Operand, Ref
from rlx.ir.symbolic import Dim, static_shape


@lowers("aten.nonzero.default", "aten.argwhere.default")
def nonzero(node: Node, b: Builder) -> Operand:
    return b.emit_like(Nonzero(b.input(node, 0)), node.meta)


@lowers("aten.nonzero_static.default")
def nonzero_static(node: Node, b: Builder) -> Operand:
    size = b.scalar(node, 1, "size")
    if not isinstance(size, int):
        raise LoweringError(f"node {node.id} ({node.op}): size must be a static int, found {size!r}")
    fill = node.arg(2, "fill_value", -1)
    return b.emit_like(NonzeroStatic(b.input(node, 0), size, int(fill)), node.meta)


@lowers("aten.masked_select.default")
def masked_select(node: Node, b: Builder) -> Operand:
    x, mask = b.input(node, 0), b.input(node, 1, "mask")
    return b.emit_like(MaskedSelect(x, b.cast(mask, "bool")), node.meta)


_UNIQUE_PARTS = ("values", "inverse", "counts")


def _unique_parts(
    node: Node, b: Builder, consecutive: bool, axis: int | None, wanted: tuple[bool, ...]
) -> tuple[Operand, ...]:
    """One ``Unique`` per requested result; a result not asked for is the empty tensor torch records."""
    x = b.input(node, 0)
    out: list[Operand] = []
    for k, want in enumerate(wanted):
        meta = node.out[k] if k < len(node.out) else None
        if not isinstance(meta, TensorMeta):
            raise LoweringError(f"node {node.id} ({node.op}): result {k} has no tensor shape recorded")
        if want or k == 0:
            out.append(b.emit_like(Unique(x, _UNIQUE_PARTS[k], consecutive, axis), meta))
        else:
            shape = static_shape(meta.shape)
            if shape is None:
                raise LoweringError(f"node {node.id} ({node.op}): unrequested result {k} has a symbolic shape")
            out.append(b.emit(Full(0, shape, meta.dtype), shape, meta.dtype))
    return tuple(out)


# op → (consecutive, and the positions of its `dim` (None: the flattened tensor), `return_inverse`
# and `return_counts` (None: the op has no counts result)).
_UNIQUE_OPS = {
    "aten._unique2.default": (False, None, 2, 3),
    "aten._unique.default": (False, None, 2, None),
    "aten.unique_dim.default": (False, 1, 3, 4),
    "aten.unique_consecutive.default": (True, 3, 1, 2),
    "aten.unique_dim_consecutive.default": (True, 1, 2, 3),
}


@lowers(*_UNIQUE_OPS)
def unique(node: Node, b: Builder) -> tuple[Operand, ...]:
    # `sorted=False` is served sorted: one of the orders PyTorch allows (its CPU kernel sorts too).
    consecutive, dim_at, inverse_at, counts_at = _UNIQUE_OPS[node.op]
    dim = None if dim_at is None else node.arg(dim_at, "dim", None)
    axis = None if dim is None else norm_axis(dim, b.rank(b.input(node, 0)))
    wanted: tuple[bool, ...] = (True, bool(node.arg(inverse_at, "return_inverse", False)))
    if counts_at is not None:
        wanted += (bool(node.arg(counts_at, "return_counts", False)),)
    return _unique_parts(node, b, consecutive, axis, wanted)


@lowers("aten.bincount.default")
def bincount(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    weights = b.optional_input(node, 1, "weights")
    minlength = b.scalar(node, 2, "minlength", 0)
    if not isinstance(minlength, int):
        raise LoweringError(f"node {node.id} ({node.op}): minlength must be a static int, found {minlength!r}")
    if weights is not None:
        weights = b.cast(weights, "f64")  # counted in double, as PyTorch does, then rounded once
    counts = b.emit(Bincount(b.cast(x, "i64"), weights, minlength), node.meta.shape, "f64" if weights else "i64")
    return b.cast(counts, node.meta.dtype)


@lowers("aten.histc.default")
def histc(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    bins, lo, hi = b.scalar(node, 1, "bins", 100), b.scalar(node, 2, "min", 0), b.scalar(node, 3, "max", 0)
    if not isinstance(bins, int) or not all(isinstance(v, (int, float)) for v in (lo, hi)):
        raise LoweringError(f"node {node.id} ({node.op}): bins, min and max must be static numbers")
    if lo > hi:
        raise LoweringError(f"node {node.id} ({node.op}): min {lo} is greater than max {hi}")
    return b.emit_like(Histc(x, bins, float(lo), float(hi)), node.meta)


@lowers("aten._grouped_mm.default", "transformers.grouped_mm_fallback.default")
def grouped_mm(node: Node, b: Builder) -> Operand:
    """The 2-d × 3-d form MoE layers use: rows of ``x`` sorted by expert, ``offs`` their cumulative counts."""
    x, w = b.input(node, 0), b.input(node, 1)
    offsets = b.input(node, 2, "offs")
    if b.rank(x) != 2 or b.rank(w) != 3 or b.rank(offsets) != 1:
        raise LoweringError(
            f"node {node.id} ({node.op}): only the 2-d input × 3-d weight form with 1-d offsets is supported"
        )
    if len(node.args) > 3 and node.args[3] is not None or node.kwargs.get("bias") is not None:
        raise LoweringError(f"node {node.id} ({node.op}): a bias is not supported")
    dt = node.meta.dtype
    x, w = b.cast(x, dt), b.cast(w, dt)
    return b.emit_like(GroupedMatMul(x, w, offsets), node.meta)


@lowers("aten._local_scalar_dense.default")
def local_scalar_dense(node: Node, b: Builder) -> Operand:
    """``x.item()``: the one entry of ``x`` as a 0-d tensor of its dtype. Its value stays data: a
    size computed from it (``u0``) is not bound at run time, and lowering reports the node that reads it."""
    x = b.input(node, 0)
    if static_shape(b.shape(x)) is None or any(d != 1 for d in b.shape(x)):
        raise LoweringError(
            f"node {node.id} ({node.op}): item() needs a tensor of one element, found {list(b.shape(x))}"
        )
    return b.emit(Reshape(x, ()), (), b.dtype(x))


# ── histogram / histogramdd ──────────────────────────────────────────────────
def _linspace(b: Builder, lo: Operand, hi: Operand, steps: int, dtype: str) -> Ref:
    """``torch.linspace(lo, hi, steps)`` in ``dtype`` as PyTorch's CPU kernel computes it: the
    first half ``lo + step·i``, the second ``hi - step·(steps - 1 - i)`` (so both ends are exact)."""
    index = b.emit(Arange(0, steps, 1, dtype), (steps,), dtype)
    step = emit_binary(b, "div", emit_binary(b, "sub", hi, lo), b.lit(max(steps - 1, 1), dtype))
    rising = emit_binary(b, "add", lo, emit_binary(b, "mul", step, index))
    back = emit_binary(b, "sub", b.lit(steps - 1, dtype), index)
    falling = emit_binary(b, "sub", hi, emit_binary(b, "mul", step, back))
    first_half = emit_binary(b, "lt", index, b.lit(steps // 2, dtype), "bool")
    return b.emit(Where(first_half, rising, falling), (steps,), dtype)


def _outer_edges(b: Builder, x: Ref, dim: int, span: tuple[float, float] | None) -> tuple[Operand, Operand]:
    """The first and last edge along column ``dim`` of ``x`` [N, D]: ``span`` when given, else the
    data's min and max (0 and 1 for no data), widened by 0.5 each way when they are equal; in
    float64, then rounded to ``x``'s dtype as PyTorch's edges are."""
    dt = b.dtype(x)
    if span is not None:
        first, last = span
        first, last = (first - 0.5, last + 0.5) if first == last else (first, last)
        return b.lit(first, dt), b.lit(last, dt)
    rows = b.shape(x)[0]
    if rows == 0:
        return b.lit(0.0, dt), b.lit(1.0, dt)
    column = b.cast(take_slice(b, x, 1, dim, 1), "f64")
    lo, hi = (b.emit(Reduce(fn, column, (0, 1), False), (), "f64") for fn in ("amin", "amax"))
    point = emit_binary(b, "eq", lo, hi, "bool")
    lo = b.emit(Where(point, emit_binary(b, "sub", lo, b.lit(0.5, "f64")), lo), (), "f64")
    hi = b.emit(Where(point, emit_binary(b, "add", hi, b.lit(0.5, "f64")), hi), (), "f64")
    return b.cast(lo, dt), b.cast(hi, dt)


def _bin_edges(b: Builder, node: Node, x: Ref, bins: tuple[int, ...]) -> list[Ref]:
    span = node.kwargs.get("range")
    if span is not None and len(span) != 2 * len(bins):
        raise LoweringError(f"node {node.id} ({node.op}): range needs two numbers per dimension, found {span!r}")
    edges = []
    for dim, count in enumerate(bins):
        pair = None if span is None else (float(span[2 * dim]), float(span[2 * dim + 1]))
        lo, hi = _outer_edges(b, x, dim, pair)
        edges.append(_linspace(b, lo, hi, count + 1, b.dtype(x)))
    return edges


def _histogram(b: Builder, node: Node, x: Ref, edges: list[Ref], shape: tuple[Dim, ...]) -> Ref:
    """PyTorch's histogramdd kernel: an entry outside [first, last edge] in some dimension (or NaN)
    is skipped; otherwise its bin is the last edge at or below it (the last bin closed on the
    right); it adds its ``weight`` (else 1). ``density`` divides by the total and the bin widths."""
    dt = b.dtype(x)
    rows = b.shape(x)[0]
    flat: Operand = b.lit(0, "i64")
    valid: Operand = b.lit(True, "bool")
    for dim, edge in enumerate(edges):
        count = static_dim(b.shape(edge)[0], "bin edges", node) - 1
        column = reshape_to(b, take_slice(b, x, 1, dim, 1), (rows,))
        first, last = (reshape_to(b, take_slice(b, edge, 0, k, 1), ()) for k in (0, count))
        inside = emit_binary(
            b, "logical_and", emit_binary(b, "ge", column, first, "bool"), emit_binary(b, "le", column, last, "bool")
        )
        valid = emit_binary(b, "logical_and", valid, inside, "bool")
        found = b.emit(SearchSorted(edge, column, True), (rows,), "i64")
        position = emit_binary(b, "minimum", emit_binary(b, "sub", found, b.lit(1, "i64")), b.lit(count - 1, "i64"))
        flat = emit_binary(b, "add", emit_binary(b, "mul", flat, b.lit(count, "i64")), position, "i64")
    total = math.prod(static_dim(d, "histogram bins", node) for d in shape)
    target = b.emit(Where(valid, flat, b.lit(total, "i64")), (rows,), "i64")
    weight = b.optional_input(node, 3, "weight")
    amounts = b.lit(1, dt) if weight is None else reshape_to(b, b.cast(weight, dt), (rows,))
    zeros = b.emit(Full(0, (total + 1,), dt), (total + 1,), dt)
    hist = reshape_to(
        b, take_slice(b, b.emit(Scatter(zeros, 0, target, amounts, "sum", True), (total + 1,), dt), 0, 0, total), shape
    )
    if node.kwargs.get("density", False):
        hist = emit_binary(b, "div", hist, b.emit(Reduce("sum", hist, tuple(range(len(shape))), False), (), dt))
        for dim, edge in enumerate(edges):
            count = static_dim(b.shape(edge)[0], "bin edges", node) - 1
            widths = emit_binary(b, "sub", take_slice(b, edge, 0, 1, count), take_slice(b, edge, 0, 0, count))
            along = tuple(count if k == dim else 1 for k in range(len(shape)))
            hist = emit_binary(b, "div", hist, reshape_to(b, widths, along))
    return hist


def _rows(b: Builder, x: Ref, width: int) -> Ref:
    """``x`` as [N, width]: the last axis holds the coordinates (a 1-d histogram flattens)."""
    return reshape_to(b, x, (symbolic.numel(b.shape(x)) if width == 1 else symbolic.numel(b.shape(x)[:-1]), width))


@lowers("aten.histogram.bin_ct", "aten.histogram.bins_tensor")
def histogram(node: Node, b: Builder) -> tuple[Operand, Operand]:
    """``histogram(x, bins, *, range, weight, density)``: (hist, bin_edges) of the flattened input;
    ``bins`` a count (equal-width edges over the range or the data's) or the edges themselves."""
    x = _rows(b, b.input(node, 0), 1)
    bins = node.arg(1, "bins", 100)
    if isinstance(bins, int):
        edges = _bin_edges(b, node, x, (bins,))
    else:
        edges = [b.cast(b.input(node, 1, "bins"), b.dtype(x))]
    return _histogram(b, node, x, edges, node.meta.shape), edges[0]


@lowers("aten._histogramdd_bin_edges")
def histogramdd_bin_edges(node: Node, b: Builder) -> tuple[Operand, ...]:
    x = b.input(node, 0)
    bins = tuple(node.arg(1, "bin_ct"))
    return tuple(_bin_edges(b, node, _rows(b, x, len(bins)), bins))


@lowers("aten._histogramdd_from_bin_cts", "aten._histogramdd_from_bin_tensors")
def histogramdd(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    bins = node.arg(1, "bins")
    x = _rows(b, x, len(bins))
    if node.base == "_histogramdd_from_bin_cts":
        edges = _bin_edges(b, node, x, tuple(bins))
    else:
        edges = [b.cast(b.tensor(node, e), b.dtype(x)) for e in bins]
    return _histogram(b, node, x, edges, node.meta.shape)
