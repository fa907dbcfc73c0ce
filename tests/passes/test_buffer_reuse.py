"""Buffer reuse: large results are written into the storage of dead values — never into a value
that is still live (directly or through a view), an input, a weight or an output."""

from __future__ import annotations

import numpy as np
import torch
from pass_cases import lower
from torch import nn

from rlx.ir.program import Program
from rlx.runtime.numpy_engine.executor import Executor
from rlx.runtime.numpy_engine.passes import optimize as pipeline
from rlx.runtime.numpy_engine.passes.buffers import MIN_BYTES, reuse_buffers

from helpers import rand


class Wide(nn.Module):
    """Large activations (64 × 512 float32 = 128 KiB) that die one after another, one of them
    still read through a view after its last direct use."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(512, 512), nn.Linear(512, 512), nn.Linear(512, 512)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.a(x)
        view = h.reshape(128, 256)  # shares h's storage
        g = torch.tanh(self.b(torch.relu(h)))  # h's last direct reader
        k = self.c(g) * 2 + g  # new large results while `view` is still live
        return k, view.sum(0)  # `view` read last, here


def reuses(program: Program) -> dict[str, str]:
    """Instruction result → the value whose storage it reuses."""
    return {i.result: i.call.reuse.name for i in program.instrs if getattr(i.call, "reuse", None) is not None}


def test_reuse_is_set_and_safe():
    torch.manual_seed(0)
    case = lower(Wide(), (rand((64, 512), seed=1),))
    program, weights = pipeline.optimize(case.program, case.weights, ("buffer_reuse",))
    rewritten = reuse_buffers(program)
    plan = reuses(rewritten)
    assert plan, "some large result reuses a dead buffer"
    # Never the storage of h while its view is live, an input, a weight or an output.
    position = {i.result: k for k, i in enumerate(rewritten.instrs)}
    view_read = max(k for k, i in enumerate(rewritten.instrs) if any(r.name == "view" for r in i.call.refs()))
    h = next(i.call.x.name for i in rewritten.instrs if i.result == "view")
    pinned = {v.name for v in program.inputs} | {w.name for w in program.weights} | {o.name for o in program.outputs}
    for result, buffer in plan.items():
        assert buffer not in pinned
        assert not (buffer == h and position[result] < view_read)
    executor = Executor(rewritten, dict(weights))
    for _ in range(2):  # buffers are per run: a second run sees no stale data
        case.check(executor.run(list(case.inputs)))


def test_small_results_are_left_alone():
    case = lower(lambda x: torch.tanh(x * 2) + 1, (rand((4, 8), seed=2),))
    assert 4 * 8 * 4 < MIN_BYTES
    program, _ = pipeline.optimize(case.program, case.weights)
    assert not reuses(program)


def test_chain_overwrites_its_own_dying_input():
    """``relu(conv(x))``-like: the chain's input dies in it, so the chain writes over it."""
    x = rand((64, 512), low=-0.1, high=0.1, seed=3)
    case = lower(lambda x: torch.sigmoid((x @ x.T) @ x) * 3 - 1, (x,))
    program, weights = pipeline.optimize(case.program, case.weights)
    (chain,) = [i for i in program.instrs if i.call.op == "Fused"]
    assert chain.call.reuse is not None and chain.call.reuse in chain.call.inputs
    np.testing.assert_equal(reuses(program)[chain.result], chain.call.reuse.name)
    case.check(case.run_program(program, dict(weights)))
