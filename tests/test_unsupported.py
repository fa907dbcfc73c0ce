"""Unsupported ops are reported all at once, before lowering: exact names, counts, node ids."""

from __future__ import annotations

import pytest
import torch

import rlx
from rlx.errors import UnsupportedOpError
from rlx.frontends.aten import registry


class TwoGaps(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x) + torch.cos(x) * torch.sin(x * 2)


def test_two_missing_ops_are_named_in_one_error(monkeypatch, tmp_path):
    # Take two real ops out of the registry so the test does not depend on what is unsupported today.
    monkeypatch.delitem(registry.REGISTRY, "aten.sin")
    monkeypatch.delitem(registry.REGISTRY, "aten.cos")
    with pytest.raises(UnsupportedOpError) as info:
        rlx.from_torch(TwoGaps(), (torch.randn(3),), tmp_path / "out")
    msg = str(info.value)
    assert "unsupported ops (2)" in msg
    assert "aten.sin.default ×2" in msg and "aten.cos.default ×1" in msg
    assert set(info.value.ops) == {"aten.sin.default", "aten.cos.default"}
    assert len(info.value.ops["aten.sin.default"]) == 2
    assert "\n" not in msg
    assert not (tmp_path / "out").exists(), "a failed conversion must not leave output behind"


class UsesHardswish(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.hardswish(x) * 2


def test_auto_decompose_fills_a_gap_torch_can_decompose(monkeypatch, tmp_path):
    monkeypatch.delitem(registry.REGISTRY, "aten.hardswish")
    x = torch.linspace(-5, 5, 24).reshape(4, 6)
    report = rlx.from_torch(UsesHardswish(), (x,), tmp_path / "auto", decomposition="aten")
    assert report.parity.passed
    assert any("auto-decomposed" in n and "aten.hardswish.default" in n for n in report.notes)
    assert "aten.hardswish.default" not in report.op_histogram
    with pytest.raises(UnsupportedOpError, match="aten.hardswish.default"):
        rlx.from_torch(UsesHardswish(), (x,), tmp_path / "off", decomposition="aten", auto_decompose=False)


# Custom ops: one whose Python implementation torch.library knows (custom_op) is decomposed through
# it; one whose only kernel is opaque to tracing is reported by its qualified name.
@torch.library.custom_op("rlxtest::scaled_tanh", mutates_args=())
def _scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@_scaled_tanh.register_fake
def _scaled_tanh_fake(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


_OPAQUE = torch.library.Library("rlxtest_opaque", "DEF")
_OPAQUE.define("double(Tensor x) -> Tensor")
_OPAQUE.impl("double", lambda x: x * 2, "CPU")
_OPAQUE.impl("double", lambda x: torch.empty_like(x), "Meta")


class UsesCustomOps(torch.nn.Module):
    def __init__(self, opaque: bool) -> None:
        super().__init__()
        self.opaque = opaque

    def forward(self, x):
        y = torch.ops.rlxtest.scaled_tanh(x, 2.5) + 1
        return torch.ops.rlxtest_opaque.double(y) if self.opaque else y


def test_custom_op_decomposes_through_its_python_implementation(tmp_path):
    x = torch.linspace(-3, 3, 12)
    report = rlx.from_torch(UsesCustomOps(opaque=False), (x,), tmp_path / "custom")
    assert report.parity.passed
    assert any("rlxtest.scaled_tanh.default" in n for n in report.notes)
    got = rlx.load(tmp_path / "custom")(x.numpy())
    torch.testing.assert_close(torch.from_numpy(got), torch.tanh(x) * 2.5 + 1)


def test_unknown_custom_op_is_reported_by_its_qualified_name(tmp_path):
    with pytest.raises(UnsupportedOpError) as info:
        rlx.from_torch(UsesCustomOps(opaque=True), (torch.randn(3),), tmp_path / "out")
    msg = str(info.value)
    assert set(info.value.ops) == {"rlxtest_opaque.double.default"}
    assert "rlxtest_opaque.double.default ×1" in msg and "torch.library" in msg and "\n" not in msg
