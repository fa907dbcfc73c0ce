"""Generated packages (numpy and JAX styles) with the long-tail ops: hash_tensor (xor Reduce),
segment_reduce, embedding_bag, histogram/histogramdd: standalone (no torch, no rlx), equal to PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from standalone import run_model_package

from rlx.frontends.torch.tensors import tensor_to_numpy

from helpers import assert_arrays_match


class Tail(torch.nn.Module):
    def forward(self, x, lengths, weight, indices, offsets):
        return (
            torch.hash_tensor(x, 1),
            torch.hash_tensor(indices),
            torch.segment_reduce(x, "max", lengths=lengths, axis=0, unsafe=True),
            torch.segment_reduce(x, "mean", lengths=lengths, axis=0, initial=1.5, unsafe=True),
            F.embedding_bag(indices, weight, offsets, mode="max", padding_idx=2),
            F.embedding_bag(indices, weight, offsets, mode="mean"),
            *torch.histogram(x, 4, weight=x.abs()),
            torch.histogramdd(x[:, :2], [3, 2], density=True).hist,
        )


INPUTS = [
    torch.tensor([[0.5, -2.5, 3.0], [0.0, 1.25, -0.3], [2.0, 0.75, 1.0], [-1.0, 4.0, 0.25]]),
    torch.tensor([1, 0, 2]),
    torch.randn(6, 3, generator=torch.Generator().manual_seed(0)),
    torch.tensor([0, 2, 5, 2, 1, 3]),
    torch.tensor([0, 1, 1, 4]),
]


@pytest.mark.parametrize("style", ["numpy", "jax"])
def test_package_runs_the_long_tail(tmp_path, style):
    if style == "jax":
        pytest.importorskip("jax")
    got, _ = run_model_package(tmp_path, Tail(), INPUTS, style)
    with torch.no_grad():
        want = Tail()(*INPUTS)
    assert len(got) == len(want)
    for k, w in enumerate(want):
        assert_arrays_match(got[k], tensor_to_numpy(w), f"[{style}] output {k}")
