"""torch.onnx exports of the examples import with parity against onnxruntime and against PyTorch."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import warnings

import numpy as np
import pytest

import rlx

from helpers import load_example

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

EXPORTERS = ["torchscript"] + (["dynamo"] if importlib.util.find_spec("onnxscript") else [])


@pytest.mark.slow
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", ["mlp", "transformer", "cnn", "decoder_lm"])
def test_example_export_imports_with_parity(name, exporter, tmp_path):
    model, inputs = load_example(name).get_model()
    model.eval()
    path = tmp_path / f"{name}.onnx"
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        dynamo = exporter == "dynamo"
        torch.onnx.export(model, inputs, str(path), dynamo=dynamo, **({} if dynamo else {"opset_version": 18}))
    arrays = [t.numpy() for t in inputs]
    report = rlx.from_onnx(path, tmp_path / "out", example_inputs=arrays, verify="onnxruntime")
    assert report.passed and report.parity is not None and report.parity.passed
    with torch.no_grad():
        want = model(*inputs).numpy()
    got = rlx.load(tmp_path / "out" / "bundle")(*arrays)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
