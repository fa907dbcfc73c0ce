"""``rlx.runtime.model``: the output structure a model returns, rebuilt from the flat outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlx.runtime.model import structurer, unflatten

from helpers import convert

TREES = {
    "one": {"out": 1},
    "pair": {"tuple": [{"out": 1}, {"out": 0}]},
    "triple-with-repeat": {"tuple": [{"out": 2}, {"out": 0}, {"out": 2}]},
    "one-tuple": {"tuple": [{"out": 0}]},
    "nested": {"tuple": [{"out": 0}, {"tuple": [{"out": 1}, {"out": 2}]}]},
    "with-constant": {"tuple": [{"out": 0}, {"const": 3}]},
    "list": {"list": [{"out": 0}, {"out": 1}]},
    "dict": {"dict": [["a", {"out": 2}], ["b", {"out": 0}]]},
    "none": None,
}


@pytest.mark.parametrize("name", sorted(TREES))
def test_the_bound_structurer_rebuilds_what_unflatten_does(name):
    flat = [np.zeros(1), np.ones(2), np.full(3, 2.0)]
    tree = TREES[name]
    got, want = structurer(tree)(flat), unflatten(tree, flat)
    assert type(got) is type(want) and repr(got) == repr(want)
    if isinstance(want, (tuple, list)):  # (the arrays themselves, not copies)
        assert all(g is w for g, w in zip(got, want) if isinstance(w, np.ndarray))


OUTPUTS = {
    "tensor": lambda x: x * 2,
    "pair": lambda x: (x * 2, x + 1),
    "triple": lambda x: (x, x * 2, x.sum(1)),
    "nested": lambda x: (x * 2, (x + 1, x.sum())),
    "dict": lambda x: {"double": x * 2, "total": x.sum()},
}


@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_a_model_returns_pytorchs_output_structure(name, engine):
    if engine == "onnxruntime":
        pytest.importorskip("onnxruntime")
    fn = OUTPUTS[name]

    class Outputs(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    x = torch.randn(2, 3)
    model, *_ = convert(Outputs(), (x,), engine=engine)
    assert_same_structure(model(x.numpy()), fn(x))


def assert_same_structure(got, want):
    """``got`` has ``want``'s containers (tuple, list, dict with its keys) and its tensors' values,
    dtypes and shapes as numpy arrays."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, np.ndarray) and got.dtype == want.numpy().dtype and got.shape == tuple(want.shape)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want)
        for k in want:
            assert_same_structure(got[k], want[k])
    else:
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_structure(g, w)
