"""Constant folding: weight/constant-only instructions run once, at load, and become weights."""

from __future__ import annotations

import pytest
import torch
from pass_cases import lower
from torch import nn

from rlx.ir.program import specialize
from rlx.passes import fold
from rlx.passes.dce import dead_code_elimination
from rlx.passes.fold import FOLDED_KEY, constant_folding

from helpers import convert


class WeightMath(nn.Module):
    """Transposes, casts and masks computed from weights and constants only."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5))
        self.register_buffer("bias", torch.randn(5, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.arange(5) % 2 == 0
        return (x @ (self.w * 2)).masked_fill(mask, 0.0) + self.bias.float().expand(3, 5)


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    return lower(WeightMath(), (torch.randn(3, 6),), "core")


def test_folds_weight_only_instructions(case):
    program, weights = constant_folding(case.program, case.weights)
    program = dead_code_elimination(program)
    folded = [w for w in program.weights if w.key.startswith(FOLDED_KEY)]
    assert folded and len(program.instrs) < len(case.program.instrs)
    # What is left reads the input: every instruction depends on x.
    consts = {w.name for w in program.weights}
    assert all(any(r.name not in consts for r in i.call.refs()) for i in program.instrs)
    for w in folded:
        arr = weights[w.name]
        assert arr.shape == w.shape and not arr.flags.writeable  # shared by every run: read-only
        assert arr.flags.c_contiguous or 0 in arr.strides  # packed, or a broadcast view kept as one
    case.check(case.run_program(program, dict(weights)))


def test_broadcast_results_stay_views(case):
    _, weights = constant_folding(case.program, case.weights)
    views = [a for a in weights.values() if 0 in a.strides]
    assert views, "the expanded bias is folded as a broadcast view, not materialised"


def test_results_larger_than_their_inputs_stay_at_run_time(monkeypatch):
    monkeypatch.setattr(fold, "MAX_GROWTH_BYTES", 1024)
    case = lower(lambda x: x + torch.ones(64, 64), (torch.randn(64, 64),))
    program, _ = constant_folding(case.program, case.weights)
    assert any(i.call.op == "Full" for i in program.instrs)  # 16 KiB from nothing: not kept
    case.check(case.run_program(program))


def test_symbolic_instructions_wait_for_their_binding():
    def model(ids: torch.Tensor) -> torch.Tensor:
        return ids + torch.arange(ids.shape[1])

    dims = ({1: torch.export.Dim("seq", min=2, max=16)},)
    _, program, _ = convert(model, (torch.zeros(1, 4, dtype=torch.int64),), dynamic_shapes=(dims,))
    folded, _ = constant_folding(program, {})
    assert any(i.call.op == "Arange" for i in folded.instrs)  # its length is the symbol seq
    specialised, _ = constant_folding(specialize(folded, {"seq": 7}), {})
    assert not any(i.call.op == "Arange" for i in specialised.instrs)


def test_failing_instruction_is_left_for_run_time(case, monkeypatch):
    """A kernel that fails at load is not an error there: the instruction stays, and fails (with
    its usual message) when the program runs."""
    from rlx.kernels.numpy.kernels import KERNELS

    def broken(c, *args):
        raise ValueError("boom")

    monkeypatch.setitem(KERNELS, "Arange", broken)
    program, _ = constant_folding(case.program, case.weights)
    kept = {i.call.op for i in program.instrs}
    assert "Arange" in kept and "Cast" not in kept  # the rest still folds
