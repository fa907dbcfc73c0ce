"""Every example converts end to end at every decomposition level, and parity passes.

The same model classes written with other widths, depths, head counts and batch sizes pass too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlx

from helpers import load_example

NAMES = ("mlp", "transformer", "cnn", "decoder_lm")


@pytest.mark.parametrize("level", ["aten", "high", "core"])
@pytest.mark.parametrize("name", NAMES)
def test_example_converts_with_parity(name, level, tmp_path):
    model, inputs = load_example(name).get_model()
    report = rlx.from_torch(model, inputs, tmp_path / "out", decomposition=level)
    assert report.parity is not None and report.parity.passed, report.parity.table()
    assert report.n_instructions > 0
    # The bundle on disk gives the same numbers as the in-memory check.
    loaded = rlx.load(tmp_path / "out" / "bundle")
    with torch.no_grad():
        want = model(*inputs).numpy()
    got = loaded(*[t.numpy() for t in inputs])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert got.dtype == want.dtype


def _variants():
    mlp, tr, cnn, lm = (load_example(n) for n in NAMES)
    torch.manual_seed(1)
    yield "mlp-wide", mlp.MLP(d_in=7, d_hidden=129, d_out=3), (torch.randn(9, 7),)
    yield (
        "transformer-8heads",
        tr.Transformer(dim=48, n_heads=8, hidden=40),
        (
            torch.randn(3, 5, 48),
            torch.tensor([[True] * 5, [True, True, False, False, False], [True] * 4 + [False]]),
        ),
    )
    cnn_model = cnn.CNN(n_classes=4)
    yield "cnn-odd-size", cnn_model, (torch.randn(1, 3, 23, 17),)
    yield (
        "decoder-lm-deep",
        lm.DecoderLM(vocab=37, dim=24, n_heads=2, n_layers=3, max_len=20),
        (torch.randint(0, 37, (3, 20)),),
    )
    yield "decoder-lm-batch1", lm.DecoderLM(vocab=50, dim=64, n_heads=8, n_layers=1), (torch.randint(0, 50, (1, 1)),)


@pytest.mark.parametrize("name,model,inputs", list(_variants()), ids=lambda v: v if isinstance(v, str) else "")
def test_model_classes_written_differently(name, model, inputs, tmp_path):
    report = rlx.from_torch(model.eval(), inputs, tmp_path / name)
    assert report.parity.passed, report.parity.table()
