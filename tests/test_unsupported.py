"""Unsupported ops are reported all at once, before lowering: exact names, counts, node ids."""

from __future__ import annotations

import pytest
import torch

import rlx
from rlx.errors import UnsupportedOpError
from rlx.lower import registry


class TwoGaps(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x) + torch.cos(x) * torch.sin(x * 2)


def test_two_missing_ops_are_named_in_one_error(monkeypatch, tmp_path):
    registry._load_families()
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
    registry._load_families()
    monkeypatch.delitem(registry.REGISTRY, "aten.hardswish")
    x = torch.linspace(-5, 5, 24).reshape(4, 6)
    report = rlx.from_torch(UsesHardswish(), (x,), tmp_path / "auto", decomposition="aten")
    assert report.parity.passed
    assert any("auto-decomposed" in n and "aten.hardswish.default" in n for n in report.notes)
    assert "aten.hardswish.default" not in report.op_histogram
    with pytest.raises(UnsupportedOpError, match="aten.hardswish.default"):
        rlx.from_torch(UsesHardswish(), (x,), tmp_path / "off", decomposition="aten", auto_decompose=False)
