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


class AtenLevelKeeps(torch.nn.Module):
    """Ops the ``aten`` level keeps as exported: CompositeImplicitAutograd ones (einsum, meshgrid,
    the alias multiply) and an in-place copy_ into a fresh tensor (Mamba's cache update)."""

    def forward(self, a, b):
        rows, cols = torch.meshgrid(a[0], b[0], indexing="ij")
        state = torch.zeros(a.shape[0], b.shape[1])
        state.copy_(torch.einsum("ij,jk->ik", a, b))
        return torch.multiply(state, 2) + rows.sum() - cols.sum()


def test_aten_level_decomposes_composite_and_in_place_ops(tmp_path):
    a, b = torch.randn(4, 3, generator=torch.Generator().manual_seed(0)), torch.randn(3, 5)
    report = rlx.from_torch(AtenLevelKeeps(), (a, b), tmp_path / "out", decomposition="aten")
    assert report.parity.passed
    note = next(n for n in report.notes if "auto-decomposed" in n)
    for op in ("aten.einsum.default", "aten.meshgrid.indexing", "aten.multiply.Tensor", "aten.copy_.default"):
        assert op not in report.op_histogram and op in note
    got = rlx.load(tmp_path / "out")(a.numpy(), b.numpy())
    torch.testing.assert_close(torch.from_numpy(got), AtenLevelKeeps()(a, b))


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


class RescalesOnFirstCall(torch.nn.Module):
    """RWKV's pattern: in eval mode the first forward rescales the weights in place."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)
        self.rescaled = False

    def forward(self, x):
        if not self.rescaled:
            with torch.no_grad():
                self.linear.weight.div_(2)
            self.rescaled = True
        return self.linear(x)


def test_a_forward_that_writes_its_weights_is_refused_in_one_line_naming_them(tmp_path):
    model = RescalesOnFirstCall().eval()
    with pytest.raises(rlx.errors.ExportError) as info:
        rlx.from_torch(model, (torch.randn(2, 3),), tmp_path / "out")
    msg = str(info.value)
    assert "linear.weight" in msg and "call it once before converting" in msg and "\n" not in msg
    assert not (tmp_path / "out").exists()
    assert model.rescaled is False  # tracing ran the forward's Python; its flag is put back
    model(torch.randn(2, 3))  # the advice works: after the first call the forward leaves its weights alone
    assert model.rescaled is True
    assert rlx.from_torch(model, (torch.randn(2, 3),), tmp_path / "out").passed
