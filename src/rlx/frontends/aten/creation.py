"""Constant producers: full/zeros/ones/empty (and their _like / new_ forms), scalar_tensor, arange."""

from __future__ import annotations

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.elementwise import scalar_as
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.common import static_dim
from rlx.ir import dtypes
from rlx.ir.calls import Arange, Full
from rlx.ir.program import Operand
from rlx.ir.symbolic import Sym

_FILL_ARG = {"full": 1, "full_like": 1, "new_full": 2}


def fill_value(value: bool | int | float, dtype: str) -> bool | int | float:
    # As PyTorch converts it: full((3,), -1, dtype=uint8) is 255, full((3,), 2.7, dtype=int64) is 2.
    return scalar_as(value, dtype)


@lowers(
    "aten.full",
    "aten.full_like",
    "aten.new_full",
    "aten.zeros",
    "aten.zeros_like",
    "aten.new_zeros",
    "aten.ones",
    "aten.ones_like",
    "aten.new_ones",
    "aten.empty",
    "aten.empty_like",
    "aten.new_empty",
    "aten.empty_strided",
    "aten.new_empty_strided",
    "aten.empty_permuted",
)
def full(node: Node, b: Builder) -> Operand:
    out = node.meta
    if node.base in _FILL_ARG:
        value = node.arg(_FILL_ARG[node.base], "fill_value")
        if not isinstance(value, (bool, int, float)):
            raise LoweringError(f"node {node.id}: fill value must be a number, found {value!r}")
    else:
        # `empty` is uninitialised in PyTorch; zeros is a valid (and deterministic) choice.
        value = 1 if node.base.startswith(("ones", "new_ones")) else 0
    return b.emit_like(Full(fill_value(value, out.dtype), out.shape, out.dtype), out)


@lowers("aten.scalar_tensor")
def scalar_tensor(node: Node, b: Builder) -> Operand:
    out = node.meta
    return b.emit_like(Full(fill_value(node.arg(0), out.dtype), (), out.dtype), out)


@lowers("aten.arange")
def arange(node: Node, b: Builder) -> Operand:
    out = node.meta
    # Bounds may be shape arithmetic (arange(seq)): b.scalar resolves them to ints or Sym.
    if node.overload == "default":
        start, end, step = 0, b.scalar(node, 0, "end"), 1
    elif node.overload == "start":
        start, end, step = b.scalar(node, 0, "start"), b.scalar(node, 1, "end"), 1
    else:
        start, end, step = b.scalar(node, 0, "start", 0), b.scalar(node, 1, "end"), b.scalar(node, 2, "step", 1)
    if not all(isinstance(v, (int, float, Sym)) for v in (start, end, step)) or step == 0:
        raise LoweringError(f"node {node.id}: arange needs numeric start/end/step, found {(start, end, step)}")
    if dtypes.is_int(out.dtype) and any(isinstance(v, float) for v in (start, end, step)):
        # PyTorch truncates start and step to the integer type, while the length comes from the
        # float bounds (arange(-2.5, 3.5, 1.5, dtype=int64) is [-2, -1, 0, 1, 2]): keep torch's
        # length and give the kernel integer bounds that reproduce it.
        if any(isinstance(v, Sym) for v in (start, end, step)):
            raise LoweringError(f"node {node.id}: integer arange with float and symbolic bounds is not supported")
        start, step = int(start), int(step)
        end = start + step * static_dim(out.shape[0], "the length of an integer arange with float bounds", node)
    return b.emit_like(Arange(start, end, step, out.dtype), out)
