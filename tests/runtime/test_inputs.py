"""The runtime validates inputs (count, names, shapes, dtypes) with one clear error each."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlx.errors import InputError

from helpers import convert


class Two(torch.nn.Module):
    def forward(self, tokens, mask):
        return tokens * mask


@pytest.fixture(scope="module")
def model():
    m, _, _ = convert(Two(), (torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64)))
    return m


def ok():
    return np.ones((2, 3), np.int64)


@pytest.mark.parametrize(
    "args,kwargs,message",
    [
        ((ok(),), {}, "missing input(s) mask"),
        ((ok(), ok(), ok()), {}, "takes 2 inputs (tokens, mask), got 3 positional"),
        ((ok(),), {"masks": ok()}, "has no input named 'masks'"),
        ((ok(),), {"tokens": ok()}, "given both by position and by name"),
        ((ok(), np.ones((2, 4), np.int64)), {}, "input 'mask' has shape [2, 4], expected [2, 3]"),
        ((ok(), np.ones((2, 3), np.float32)), {}, "input 'mask' has dtype float32, expected int64"),
    ],
)
def test_bad_inputs(model, args, kwargs, message):
    with pytest.raises(InputError) as info:
        model(*args, **kwargs)
    assert message in str(info.value)


def test_lists_are_converted_and_names_work(model):
    out = model([[1, 2, 3], [4, 5, 6]], mask=np.full((2, 3), 2, np.int64))
    np.testing.assert_array_equal(out, np.array([[2, 4, 6], [8, 10, 12]]))
    assert out.dtype == np.int64


def _exact_and_other_forms():
    tokens = np.arange(6, dtype=np.int64).reshape(2, 3)
    wide = np.arange(12, dtype=np.int64).reshape(2, 6)
    yield "exact arrays (the short path)", tokens
    yield "non-contiguous view", wide[:, ::2]
    yield "other byte order", tokens.astype(">i8")
    yield "array subclass", np.ma.masked_array(tokens)
    yield "list", tokens.tolist()


@pytest.mark.parametrize("case,tokens", list(_exact_and_other_forms()))
@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
def test_every_input_form_gives_the_same_outputs(case, tokens, engine):
    if engine == "onnxruntime":
        pytest.importorskip("onnxruntime")
    m, _, _ = convert(Two(), (torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64)), engine=engine)
    mask = np.full((2, 3), 3, np.int64)
    want = np.asarray(tokens, dtype=np.int64) * 3
    out = m(tokens, mask)
    assert out.dtype == np.int64 and out.shape == (2, 3), case
    np.testing.assert_array_equal(out, want, err_msg=case)
    with pytest.raises(InputError, match="dtype float32"):  # the short path still rejects the rest
        m(tokens, mask.astype(np.float32))


def test_constant_folding_preserves_outputs_and_removes_steps(tmp_path):
    import rlx

    from helpers import load_example

    model, inputs = load_example("transformer").get_model()
    rlx.from_torch(model, inputs, tmp_path / "t", decomposition="core")
    folded, plain = rlx.load(tmp_path / "t"), rlx.load(tmp_path / "t", optimize=False)
    args = [t.numpy() for t in inputs]
    # Close, not bit-identical: folded weight transposes are stored packed (C-contiguous), and BLAS
    # rounds a product of a packed matrix differently from one of a transposed view.
    np.testing.assert_allclose(folded(*args), plain(*args), rtol=1e-5, atol=1e-6)
    # Weight transposes (addmm/mm at core) and constant masks are computed once, at load.
    assert folded._static.n_steps < plain._static.n_steps
