"""What the aten and the ONNX front-ends share, in one copy: the start of one builder base.

A helper here takes the node it lowers last and optional (``static_dim(d, what, node)``), the same
way in both front-ends; a node names itself in errors by its ``label``."""

from __future__ import annotations

from typing import Protocol

from rlx.errors import LoweringError
from rlx.ir.calls import FAMILIES
from rlx.ir.symbolic import Dim, Sym


class SourceNode(Protocol):
    """A front-end's node (a torch-ir.json node, an ONNX node) as errors name it."""

    @property
    def label(self) -> str: ...  # "node <name> (<op>)"


def static_dim(d: Dim, what: str, node: SourceNode | None = None) -> int:
    """``d`` as an int, for lowerings whose arithmetic needs a concrete extent (or a concrete shape
    value): a symbolic one is reported (against ``node`` when given) instead of failing later inside
    the arithmetic."""
    if isinstance(d, Sym):
        where = f"{node.label}: " if node is not None else ""
        raise LoweringError(f"{where}{what} must be static, found the symbolic value {d.expr}")
    return int(d)


def family_of(module: str) -> str:
    """The Call family a handler's module lowers to (``rlx.ir.calls.FAMILIES``), which the op tables
    group by: ``…aten.movement`` → movement, ``…onnx.nn_recurrent`` → nn; a front-end's own op group
    outside the families (ONNX's ``control``) is named by its module."""
    name = module.rsplit(".", 1)[-1]
    family = name.split("_", 1)[0]
    return family if family in FAMILIES else name
