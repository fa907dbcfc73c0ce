"""Selection lowerings: nonzero / argwhere / nonzero_static, masked_select, unique (sorted, by dim,
consecutive), bincount, histc, and the grouped matmul of mixture-of-experts layers.

The lengths of most of these results depend on the data: torch.export names them with unbacked
symbols (``u0``), which the program keeps; the numpy engine binds them as the run produces them.
"""

from __future__ import annotations

from rlx.errors import LoweringError
from rlx.ir.calls import Bincount, Full, GroupedMatMul, Histc, MaskedSelect, Nonzero, NonzeroStatic, Reshape, Unique
from rlx.ir.program import Operand
from rlx.ir.symbolic import static_shape
from rlx.ir.torch_ir import Node, TensorMeta
from rlx.lower.registry import Builder, lowers
from rlx.lower.shapes import norm_axis


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


@lowers("aten._unique2.default")
def unique2(node: Node, b: Builder) -> tuple[Operand, ...]:
    # `sorted=False` is served sorted: one of the orders PyTorch allows (its CPU kernel sorts too).
    wanted = (True, bool(node.arg(2, "return_inverse", False)), bool(node.arg(3, "return_counts", False)))
    return _unique_parts(node, b, False, None, wanted)


@lowers("aten._unique.default")
def unique_(node: Node, b: Builder) -> tuple[Operand, ...]:
    return _unique_parts(node, b, False, None, (True, bool(node.arg(2, "return_inverse", False))))


@lowers("aten.unique_dim.default")
def unique_dim(node: Node, b: Builder) -> tuple[Operand, ...]:
    axis = norm_axis(node.arg(1, "dim"), b.rank(b.input(node, 0)))
    wanted = (True, bool(node.arg(3, "return_inverse", False)), bool(node.arg(4, "return_counts", False)))
    return _unique_parts(node, b, False, axis, wanted)


@lowers("aten.unique_consecutive.default")
def unique_consecutive(node: Node, b: Builder) -> tuple[Operand, ...]:
    dim = node.arg(3, "dim", None)
    axis = None if dim is None else norm_axis(dim, b.rank(b.input(node, 0)))
    wanted = (True, bool(node.arg(1, "return_inverse", False)), bool(node.arg(2, "return_counts", False)))
    return _unique_parts(node, b, True, axis, wanted)


@lowers("aten.unique_dim_consecutive.default")
def unique_dim_consecutive(node: Node, b: Builder) -> tuple[Operand, ...]:
    axis = norm_axis(node.arg(1, "dim"), b.rank(b.input(node, 0)))
    wanted = (True, bool(node.arg(2, "return_inverse", False)), bool(node.arg(3, "return_counts", False)))
    return _unique_parts(node, b, True, axis, wanted)


@lowers("aten.bincount.default")
def bincount(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    weights = b.optional_input(node, 1, "weights")
    minlength = b.scalar(node, 2, "minlength", 0)
    if not isinstance(minlength, int):
        raise LoweringError(f"node {node.id} ({node.op}): minlength must be a static int, found {minlength!r}")
    if weights is not None:
        weights = b.cast(weights, "f64")  # counted in double, as PyTorch does, then rounded once
    return b.emit_like(Bincount(b.cast(x, "i64"), weights, minlength), node.meta)


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
