"""Alias and no-op removal: instructions that return their operand unchanged disappear."""

from __future__ import annotations

import pytest
import torch
from pass_cases import lower, ops

from rlx.passes.alias import remove_aliases
from rlx.passes.dce import dead_code_elimination


def no_ops(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = x.reshape(x.shape) + x.permute(0, 1, 2)  # a reshape and a permute that change nothing
    b = a.to(torch.float32) * x.expand(2, 3, 4)  # a cast to the same dtype, an expand to the same shape
    c = b[:, :, 0:4] + b.contiguous().clone()  # a slice of the whole axis
    d = c.view(6, 4).view(4, 6).view(24)  # a chain of reshapes: one is enough
    e = y.transpose(0, 1).transpose(0, 1)  # permutes that cancel
    return d, e + 1


@pytest.fixture(scope="module")
def case():
    return lower(no_ops, (torch.randn(2, 3, 4), torch.randn(3, 5)), "core")


def test_no_ops_are_removed(case):
    before = ops(case.program)
    program = dead_code_elimination(remove_aliases(case.program))
    after = ops(program)
    assert sum(after.values()) < sum(before.values())
    assert after.get("Cast", 0) == 0 and after.get("Expand", 0) == 0 and after.get("Slice", 0) == 0
    assert after.get("Permute", 0) == 0  # identity permutes gone, the cancelling pair collapsed into one
    assert after.get("Reshape", 0) <= 1  # view(6, 4).view(4, 6).view(24): one reshape of the source
    case.check(case.run_program(program))


def test_an_output_that_aliases_an_input_keeps_its_values():
    case = lower(lambda x: (x.reshape(x.shape), x * 2), (torch.randn(3, 4),), "core")
    program = dead_code_elimination(remove_aliases(case.program))
    assert program.outputs[0].name == program.inputs[0].name
    case.check(case.run_program(program))


def test_real_shape_changes_stay():
    case = lower(lambda x: x.reshape(4, 3).t().float(), (torch.randn(3, 4, dtype=torch.float64),), "core")
    program = remove_aliases(case.program)
    assert ops(program) == ops(case.program)
    case.check(case.run_program(program))
