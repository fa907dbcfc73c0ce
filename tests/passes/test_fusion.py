"""Fusion: BatchNorm into Conv, matmul + bias + activation into Gemm, sibling projections into one
Gemm, elementwise chains (with a closing softmax) into one Fused step — each checked for what it
rewrites and for parity with PyTorch, on float32 and on dtypes the fast paths leave to the generic
kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pass_cases import lower, only, ops
from torch import nn

from rlx.runtime.numpy_engine.passes import optimize as pipeline

from helpers import rand, with_specials


def fused(case, *passes: str):
    """The program after folding, packing, alias removal and ``passes`` (fusion by default)."""
    keep = passes or ("fusion",)
    return pipeline.optimize(
        case.program, case.weights, only("constant_folding", "weight_packing", "alias", "dead_code", *keep)
    )


class ConvBnRelu(nn.Module):
    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(8)
        self.bn.running_mean.uniform_(-0.5, 0.5)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.bn.weight.data.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("bias", [True, False])
def test_batchnorm_folds_into_conv(bias):
    torch.manual_seed(0)
    case = lower(ConvBnRelu(bias), (torch.randn(2, 3, 10, 10),))
    assert ops(case.program)["BatchNorm"] == 1
    program, weights = fused(case)
    assert "BatchNorm" not in ops(program) and ops(program)["Conv"] == 1
    (conv,) = [i for i in program.instrs if i.call.op == "Conv"]
    assert conv.call.bias is not None and conv.call.bias.name in weights  # folded at load
    case.check(case.run_program(program, dict(weights)))


class Mlp(nn.Module):
    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(16, 32), act, nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


@pytest.mark.parametrize("level", ["aten", "core"])
@pytest.mark.parametrize("act", [nn.GELU(), nn.GELU(approximate="tanh"), nn.SiLU(), nn.ReLU(), nn.Tanh()], ids=str)
def test_bias_and_activation_fold_into_gemm(act, level):
    torch.manual_seed(0)
    case = lower(Mlp(act), (torch.randn(2, 3, 16),), level)  # 3-D: addmm sees a reshaped input
    program, weights = fused(case)
    hist = ops(program)
    assert hist.get("Gemm") == 2 and "MatMul" not in hist and "Unary" not in hist and "Binary" not in hist
    assert "Reshape" not in hist  # the product runs on the 3-D input directly
    gemms = [i.call for i in program.instrs if i.call.op == "Gemm"]
    assert gemms[0].activation != "" and gemms[0].bias is not None
    case.check(case.run_program(program, dict(weights)))


class Qkv(nn.Module):
    def __init__(self, biases: tuple[bool, bool, bool]) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(16, n, bias=b) for n, b in zip((16, 8, 8), biases))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.q(x), self.k(x), self.v(x)], -1)


# Whisper's attention: query and value projections with a bias, the key one without.
@pytest.mark.parametrize("biases", [(True, True, True), (True, False, True), (False, False, False)], ids=str)
def test_sibling_projections_become_one_gemm(biases):
    torch.manual_seed(0)
    case = lower(Qkv(biases), (with_specials(torch.randn(2, 5, 16)),))
    program, weights = fused(case)
    (gemm,) = [i for i in program.instrs if i.call.op == "Gemm"]
    assert gemm.shape == (2, 5, 32) and weights[gemm.call.w.name].shape == (16, 32)
    assert (gemm.call.bias is None) == (not any(biases))
    case.check(case.run_program(program, dict(weights)))


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.where(x > y, torch.sigmoid(x) * y + 2, (x - y).abs().clamp(max=1.5)) / 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_elementwise_chain_is_one_step(dtype):
    x, y = with_specials(rand((4, 6), dtype, seed=1)), rand((6,), dtype, seed=2)
    case = lower(chain, (x, y), "core")
    program, weights = fused(case)
    assert ops(program) == {"Fused": 1}
    case.check(case.run_program(program, dict(weights)), rtol=None, atol=None)


def test_integer_chain_keeps_integer_semantics():
    x, y = rand((5, 7), torch.int64, low=-20, high=20, seed=3), rand((7,), torch.int64, low=1, high=6, seed=4)
    case = lower(lambda x, y: torch.where(x % y == 0, x // y, -x) * 3 - (x & 5), (x, y), "core")
    program, weights = fused(case)
    assert ops(program) == {"Fused": 1}
    case.check(case.run_program(program, dict(weights)))


def test_large_chain_runs_in_place():
    """Results of 64 KiB and more are written into buffers the chain owns (``out=``)."""
    x, y = rand((64, 512), seed=5), rand((512,), seed=6)
    case = lower(lambda x, y: torch.tanh(x * y + 1).exp() - x.square() / 2, (x, y), "core")
    program, weights = fused(case)
    assert ops(program) == {"Fused": 1}
    case.check(case.run_program(program, dict(weights)))


@pytest.mark.parametrize("log", [False, True])
def test_scale_mask_softmax_is_one_step(log):
    """The attention pattern written out: scores * scale + additive mask (with -inf), softmax."""
    q, k = rand((2, 4, 8, 16), seed=7), rand((2, 4, 8, 16), seed=8)
    mask = torch.zeros(8, 8).masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))

    def attention_weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = q @ k.transpose(-1, -2) * 0.25 + mask
        return scores.log_softmax(-1) if log else scores.softmax(-1)

    case = lower(attention_weights, (q, k), "core")
    program, weights = fused(case)
    (step,) = [i.call for i in program.instrs if i.call.op == "Fused"]
    assert (step.steps[-1].fn, step.steps[-1].param) == ("log_softmax" if log else "softmax", 3)
    assert "Softmax" not in ops(program)
    case.check(case.run_program(program, dict(weights)))


def test_values_read_twice_are_not_fused_away():
    """An intermediate with two readers stays a value of its own (a chain never recomputes)."""
    case = lower(lambda x: (torch.exp(x) + 1, torch.exp(x) * 2), (rand((3, 4), seed=9),), "core")
    program, weights = fused(case)
    assert ops(program).get("Unary", 0) + ops(program).get("Fused", 0) >= 2
    case.check(case.run_program(program, dict(weights)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("size", [100, 4096])  # either side of the erf table's threshold
def test_gelu_in_a_gemm_at_every_size(size, dtype):
    """GELU fused into a Gemm (float32/float64) or run as a Unary (bfloat16), on arrays small
    enough for erf element by element and large enough for the interval table."""
    torch.manual_seed(0)
    x = with_specials(rand((size // 32, 16), dtype, low=-8, high=8, seed=10))
    layer = nn.Sequential(nn.Linear(16, 32), nn.GELU()).to(dtype)
    case = lower(layer, (x,))
    program, weights = fused(case)
    if dtype != torch.bfloat16:
        assert ops(program) == {"Gemm": 1}
    case.check(case.run_program(program, dict(weights)), rtol=None, atol=None)


def repeat_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GQA as Hugging Face's Llama writes it: K and V repeated per query head, then SDPA."""

    def repeat(t: torch.Tensor) -> torch.Tensor:
        b, h, s, d = t.shape
        return t[:, :, None, :, :].expand(b, h, 3, s, d).reshape(b, h * 3, s, d)

    return F.scaled_dot_product_attention(q, repeat(k), repeat(v), attn_mask=mask)


def test_repeated_keys_and_values_become_gqa():
    q, k, v = rand((2, 6, 5, 8), seed=11), rand((2, 2, 5, 8), seed=12), rand((2, 2, 5, 8), seed=13)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    case = lower(repeat_kv_attention, (q, k, v, mask))
    assert "Expand" in ops(case.program)
    program, weights = fused(case)
    (attention,) = [i.call for i in program.instrs if i.call.op == "Attention"]
    assert attention.gqa and "Expand" not in ops(program)
    assert program.values()[attention.k.name].shape == (2, 2, 5, 8)  # the unrepeated keys
    case.check(case.run_program(program, dict(weights)))


class QkNoBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(16, 8, bias=False), nn.Linear(16, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x) * self.k(x)


def test_projections_without_bias_merge_too():
    torch.manual_seed(0)
    case = lower(QkNoBias(), (torch.randn(2, 4, 16),))
    program, weights = fused(case)
    assert ops(program).get("Gemm") == 1 and "MatMul" not in ops(program)
    case.check(case.run_program(program, dict(weights)))
