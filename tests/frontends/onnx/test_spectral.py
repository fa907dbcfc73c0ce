"""DFT, STFT and MelWeightMatrix, against onnxruntime (and numpy.fft)."""

from __future__ import annotations

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import assert_matches_ort, helper, model

R = np.random.default_rng(4)


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize(("inverse", "onesided"), [(0, 0), (0, 1), (1, 0)])
@pytest.mark.parametrize("length", [None, 6, 10])
def test_dft_matches_onnxruntime(channels, inverse, onesided, length):
    if (inverse and channels == 1) or (onesided and channels == 2):
        pytest.skip("onnxruntime supports one-sided transforms of real signals and inverse ones of complex signals")
    x = R.standard_normal((2, 8, 3, channels)).astype(np.float32)
    inits = {"axis": np.array(1, np.int64)}
    ins = ["x", "n" if length else "", "axis"]
    if length:
        inits["n"] = np.array(length, np.int64)
    node = helper.make_node("DFT", ins, ["y"], inverse=inverse, onesided=onesided)
    m = model([node], {"x": x}, ["y"], inits, opset=20)
    got = assert_matches_ort(m, {"x": x}, rtol=1e-4, atol=1e-4)
    n = length or 8
    signal = x[..., 0] + (1j * x[..., 1] if channels == 2 else 0)
    want = np.fft.ifft(signal, n=n, axis=1) if inverse else np.fft.fft(signal, n=n, axis=1)
    if onesided:
        want = want[:, : n // 2 + 1]
    np.testing.assert_allclose(got[0][..., 0], want.real, rtol=1e-4, atol=1e-4)


def test_stft_matches_onnxruntime():
    x = R.standard_normal((2, 32, 1)).astype(np.float32)
    inits = {"step": np.array(4, np.int64), "window": np.hanning(8).astype(np.float32)}
    m = model([helper.make_node("STFT", ["x", "step", "window"], ["y"])], {"x": x}, ["y"], inits, opset=17)
    got = assert_matches_ort(m, {"x": x}, rtol=1e-4, atol=1e-4)
    assert got[0].shape == (2, 7, 5, 2)


def test_mel_weight_matrix_is_a_constant():
    inits = {"bins": np.array(8, np.int64), "dft": np.array(16, np.int64), "rate": np.array(8000, np.int64),
             "lo": np.array(0.0, np.float32), "hi": np.array(4000.0, np.float32)}  # fmt: skip
    node = helper.make_node("MelWeightMatrix", ["bins", "dft", "rate", "lo", "hi"], ["y"])
    m = model(
        [node, helper.make_node("Mul", ["y", "x"], ["z"])], {"x": np.ones((9, 8), np.float32)}, ["z"], inits, opset=17
    )
    assert_matches_ort(m, {"x": R.standard_normal((9, 8)).astype(np.float32)})
