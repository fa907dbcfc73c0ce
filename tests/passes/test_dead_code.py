"""Dead-code elimination: instructions and weights nothing reads are dropped."""

from __future__ import annotations

import dataclasses

import torch
from pass_cases import lower, ops

from rlx.ir.program import Ref
from rlx.passes.dce import dead_code_elimination

from helpers import rand


def test_unread_results_and_weights_go():
    case = lower(lambda x: (x * 2, torch.exp(x).sum()), (rand((3, 4), seed=1),), "core")
    # Keep only the first output: the exp and the sum are now dead.
    program = dataclasses.replace(case.program, outputs=case.program.outputs[:1], output_tree={"out": 0})
    pruned = dead_code_elimination(program)
    assert ops(pruned) == {"Binary": 1}
    assert all(isinstance(o, Ref) for o in pruned.outputs)
    assert case.run_program(pruned)[0].shape == (3, 4)


def test_weights_read_only_by_folded_instructions_go():
    torch.manual_seed(0)
    case = lower(torch.nn.Linear(4, 3), (rand((2, 4), seed=2),), "core")
    from rlx.passes.fold import constant_folding

    folded, weights = constant_folding(case.program, case.weights)
    pruned = dead_code_elimination(folded)
    assert len(pruned.weights) < len(folded.weights)  # the untransposed weight is no longer read
    case.check(case.run_program(pruned, dict(weights)))
