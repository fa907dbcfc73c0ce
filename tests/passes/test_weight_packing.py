"""Weight packing: weights consumed transposed are read, at load, as GEMM-ready views (no copy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pass_cases import lower, only, ops
from torch import nn

from rlx.passes.fold import constant_folding
from rlx.runtime.numpy_engine.passes import optimize as pipeline
from rlx.runtime.numpy_engine.passes.packing import pack_weights


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 6)
        self.b = nn.Linear(8, 6, bias=False)
        self.b.weight = self.a.weight  # two Linears, one weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) * self.b(x)


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    return lower(Tied(), (torch.randn(2, 5, 8),), "aten")


def test_linear_becomes_gemm_on_one_packed_weight(case):
    assert ops(case.program).get("Linear") == 2
    program, weights = constant_folding(*pack_weights(case.program, case.weights))
    assert ops(program).get("Gemm") == 2 and "Linear" not in ops(program)
    packed = {i.call.w.name for i in program.instrs if i.call.op == "Gemm"}
    assert len(packed) == 1  # shared by both
    (name,) = packed
    w = weights[name]
    assert w.shape == (8, 6) and w.flags.c_contiguous and not w.flags.writeable  # small: a copy
    (source,) = [v for k, v in case.weights.items() if v.shape == (6, 8)]
    np.testing.assert_array_equal(w, source.T)
    case.check(case.run_program(program, dict(weights)))


def test_transposed_matmul_weight_is_packed_by_folding():
    """At core level a Linear is ``mm(x, permute(W))``: folding stores a small transpose contiguous;
    a large one (over 1 MiB) the product reads as a view of the weight, not a copy."""
    torch.manual_seed(0)
    for width, out, view in ((8, 6, False), (1024, 512, True)):
        case = lower(nn.Linear(width, out), (torch.randn(3, width),), "core")
        program, weights = pipeline.optimize(case.program, case.weights, only("constant_folding", "weight_packing"))
        assert "Permute" not in ops(program)
        (mm,) = [i for i in program.instrs if i.call.op == "MatMul"]
        (source,) = [v for k, v in case.weights.items() if v.shape == (out, width)]
        packed = weights[mm.call.y.name]
        assert np.shares_memory(packed, source) == view and packed.flags.c_contiguous != view
        case.check(case.run_program(program, dict(weights)))


def test_large_linear_weight_is_a_view():
    torch.manual_seed(0)
    case = lower(nn.Linear(1024, 512), (torch.randn(3, 1024),), "aten")
    program, weights = pack_weights(case.program, case.weights)
    (gemm,) = [i for i in program.instrs if i.call.op == "Gemm"]
    (source,) = [v for k, v in case.weights.items() if v.shape == (512, 1024)]
    assert np.shares_memory(weights[gemm.call.w.name], source) and not weights[gemm.call.w.name].flags.writeable
    case.check(case.run_program(program, dict(weights)))


def test_half_precision_linear_is_left_alone():
    torch.manual_seed(0)
    case = lower(nn.Linear(8, 6).half(), (torch.randn(3, 8).half(),), "aten")
    assert ops(pack_weights(case.program, case.weights)[0]) == ops(case.program)


class Experts(nn.Module):
    """An MoE layer's weights as transformers stores them, ``[experts, out, in]``, multiplied through
    their transpose by the grouped product (rows sorted by expert, ``offs`` their cumulative counts)."""

    def __init__(self, experts: int, width: int, out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(experts, out, width) / width**0.5)

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.ops.transformers.grouped_mm_fallback(x, self.weight.transpose(1, 2), offs)


def test_experts_weights_read_transposed_by_the_grouped_product_are_views():
    pytest.importorskip("transformers")
    import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    torch.manual_seed(0)
    # a view once one expert's matrix is past the copy threshold (1 MiB), as for a 2-d weight
    for experts, width, out, counts, view in ((4, 256, 512, [3, 5, 5, 9], False), (2, 512, 1024, [3, 9], True)):
        offs = torch.tensor(counts, dtype=torch.int32)  # (an expert with no row among them)
        case = lower(Experts(experts, width, out), (torch.randn(9, width), offs), "aten")
        program, weights = pipeline.optimize(case.program, case.weights, only("constant_folding", "weight_packing"))
        assert "Permute" not in ops(program)
        (grouped,) = [i for i in program.instrs if i.call.op == "GroupedMatMul"]
        (source,) = [v for v in case.weights.values() if v.shape == (experts, out, width)]
        packed = weights[grouped.call.w.name]
        assert packed.shape == (experts, width, out) and np.shares_memory(packed, source) == view
        case.check(case.run_program(program, dict(weights)))
