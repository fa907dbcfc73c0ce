"""Models that take kwargs, return tuples/lists/dicts/nested structures or constants, and use
multi-output ops (``_getitem``) convert and return the same structure."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlx

from helpers import assert_arrays_match, convert


class Structured(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, *, scale, bias=None):
        y = self.proj(x) * scale
        if bias is not None:
            y = y + bias
        top, bottom = y.split(2, dim=-1)
        return {"sum": top + bottom, "parts": [top, (bottom, y.max(dim=-1))]}


def test_kwargs_and_nested_outputs(tmp_path):
    torch.manual_seed(0)
    model = Structured().eval()
    x, scale, bias = torch.randn(3, 4), torch.tensor(2.0), torch.randn(4)
    report = rlx.from_torch(model, (x,), tmp_path / "o", example_kwargs={"scale": scale, "bias": bias})
    assert report.parity.passed
    loaded = rlx.load(tmp_path / "o")
    assert loaded.input_names == ["x", "scale", "bias"]
    got = loaded(x.numpy(), scale=scale.numpy(), bias=bias.numpy())
    with torch.no_grad():
        want = model(x, scale=scale, bias=bias)
    assert set(got) == {"sum", "parts"}
    assert isinstance(got["parts"], list) and isinstance(got["parts"][1], tuple)
    assert_arrays_match(got["sum"], want["sum"].numpy())
    assert_arrays_match(got["parts"][0], want["parts"][0].numpy())
    assert_arrays_match(got["parts"][1][0], want["parts"][1][0].numpy())
    values, indices = got["parts"][1][1]  # torch.return_types.max flattens like a tuple
    assert_arrays_match(values, want["parts"][1][1].values.numpy())
    assert_arrays_match(indices, want["parts"][1][1].indices.numpy())


class WithConstant(torch.nn.Module):
    def forward(self, x):
        return x * 2, 7


def test_constant_output_leaf():
    model, _, exported = convert(WithConstant(), (torch.ones(2),))
    out = model(np.ones(2, np.float32))
    assert out[1] == 7
    assert_arrays_match(out[0], np.full(2, 2.0, np.float32))
    assert exported.ir.outputs[1].ref is None


class ReturnsInput(torch.nn.Module):
    def forward(self, x, y):
        return y, x + 1


def test_output_that_is_an_input():
    model, _, _ = convert(ReturnsInput(), (torch.ones(2), torch.zeros(3)))
    y, x1 = model(np.ones(2, np.float32), np.zeros(3, np.float32))
    assert_arrays_match(y, np.zeros(3, np.float32))
    assert_arrays_match(x1, np.full(2, 2.0, np.float32))


class Masked(torch.nn.Module):
    def forward(self, tokens, mask, scale):
        return tokens * mask + scale


@pytest.mark.parametrize("example", ["same", "view", "kwarg"])
def test_aliased_example_inputs_stay_distinct_inputs(example):
    """torch.export reads an input given twice (or a view of one) as one; rlx exports from clones."""
    t = torch.randn(2, 3)
    args = {"same": (t, t, t), "view": (t, t.view(2, 3), t[0]), "kwarg": (t, t)}[example]
    kwargs = {"scale": t} if example == "kwarg" else None
    model, _, _ = convert(Masked(), args, kwargs=kwargs)
    rng = np.random.default_rng(0)
    a, m = (rng.standard_normal((2, 3), dtype=np.float32) for _ in range(2))
    s = rng.standard_normal(3 if example == "view" else (2, 3), dtype=np.float32)
    got = model(a, m, s) if kwargs is None else model(a, m, scale=s)
    want = Masked()(*(torch.from_numpy(v) for v in (a, m, s)))
    assert_arrays_match(got, want.numpy())


@pytest.mark.parametrize("level", ["aten", "high", "core"])
def test_multi_output_ops_through_getitem(level):
    class M(torch.nn.Module):
        def forward(self, x):
            a, b, c = torch.chunk(x, 3, dim=1)
            v, i = torch.max(x, dim=0)
            return a * c, b, v, i

    x = torch.randn(4, 6)
    model, _, _ = convert(M(), (x,), decomposition=level)
    got = model(x.numpy())
    with torch.no_grad():
        want = M()(x)
    for g, w in zip(got, want):
        assert_arrays_match(g, w.numpy())
