"""What both front-ends share: ``static_dim(d, what, node)``, one argument order, one message."""

from __future__ import annotations

import re

import pytest

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.registry import OnnxNode
from rlx.ir.symbolic import Sym

ATEN = Node("conv_3", "aten.convolution.default", (), {}, (None,), False)
ONNX = OnnxNode("Conv_7", "Conv", "", 21, ["x", "w"], ["y"])


@pytest.mark.parametrize(
    "node, label", [(ATEN, "node conv_3 (aten.convolution.default)"), (ONNX, "node Conv_7 (Conv)")]
)
def test_a_symbolic_extent_is_refused_naming_the_node(node, label) -> None:
    with pytest.raises(
        LoweringError, match=rf"^{re.escape(label)}: the kernel size must be static, found the symbolic value s0 \+ 1$"
    ):
        static_dim(Sym("s0 + 1"), "the kernel size", node)


def test_without_a_node_the_message_names_what() -> None:
    with pytest.raises(LoweringError, match=r"^the LU row count must be static, found the symbolic value n$"):
        static_dim(Sym("n"), "the LU row count")


@pytest.mark.parametrize("node", [ATEN, ONNX, None])
def test_a_static_extent_is_returned_as_an_int(node) -> None:
    got = static_dim(7, "the kernel size", node)
    assert got == 7 and type(got) is int
