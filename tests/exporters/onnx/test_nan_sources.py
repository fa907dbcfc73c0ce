"""Where a NaN can come from (``rlx.exporters.onnx.nan_sources``): a value made from the inputs by
steps that keep finite values finite needs only those inputs checked; any step that can make NaN
of finite values (a division by a tensor or by zero, a log, an -inf literal) leaves it unknown.
The engines lean on this: a max pooling (onnxruntime, OpenVINO) or one of OpenVINO's NaN-dropping
kernels whose operand is proven runs plainly, the inputs checked before the run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlx.exporters.onnx.nan_sources import NanSources
from rlx.formats.bundle import bind_weights

from helpers import convert, rand


class _Embedded(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(10, 8)

    def forward(self, x, ids):
        return (self.table(ids) + x).relu()


def _masked(x, keep, value):
    return x.masked_fill(~keep, value).softmax(-1)


PROVEN = {  # the last value's NaN comes from x (and weights) only
    "softmax": lambda x, keep: x.softmax(-1).exp(),
    "scaled_scores": lambda x, keep: (x @ x.transpose(0, 1) / 8.0).softmax(-1),
    "attention": lambda x, keep: F.scaled_dot_product_attention(x[None], x[None], x[None], attn_mask=keep[None]),
    "finite_mask": lambda x, keep: _masked(x, keep, torch.finfo(torch.float32).min),
    "gather": lambda x, keep: x.gather(1, keep.long()).relu(),
    "index": lambda x, keep: x[keep.long()[:, 0]].clamp(-1, 1),
}
UNKNOWN = {  # a step on the way can make NaN of finite values
    "log": lambda x, keep: x.log().relu(),
    "division_by_a_tensor": lambda x, keep: (x / x).exp(),
    "division_by_zero": lambda x, keep: (x / 0.0).softmax(-1),
    "infinite_mask": lambda x, keep: _masked(x, keep, -torch.inf),
    "rsqrt": lambda x, keep: torch.rsqrt(x).clamp(0, 1),
}


def _sources(fn):
    x, keep = rand((8, 8)), rand((8, 8), torch.bool)
    _, program, _ = convert(fn, (x, keep))
    (out,) = program.outputs
    return NanSources(program, lambda name: None).inputs(out.name), {v.name for v in program.inputs if v.dtype == "f32"}


@pytest.mark.parametrize("name", sorted(PROVEN))
def test_steps_that_keep_finite_values_finite_need_their_inputs_checked(name):
    sources, floats = _sources(PROVEN[name])
    assert sources == frozenset(floats)


@pytest.mark.parametrize("name", sorted(UNKNOWN))
def test_steps_that_can_make_nan_leave_it_unknown(name):
    sources, _ = _sources(UNKNOWN[name])
    assert sources is None


def test_weights_must_be_finite():
    module = _Embedded()
    x, ids = rand((3, 8)), torch.tensor([1, 4, 7])
    _, program, exported = convert(module, (x, ids))
    (out,) = program.outputs
    weights = {k: np.asarray(v) for k, v in bind_weights(program, exported.weights, "weights").items()}
    (table,) = [w.name for w in program.weights]
    assert NanSources(program, weights.get).inputs(out.name) == {program.inputs[0].name}
    broken = dict(weights, **{table: np.where(np.arange(80).reshape(10, 8) == 3, np.nan, weights[table])})
    assert NanSources(program, broken.get).inputs(out.name) is None
