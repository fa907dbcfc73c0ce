"""RNN / GRU / LSTM unrolled over the sequence, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import assert_matches_ort, helper, model

R = np.random.default_rng(2)
SEQ, BATCH, IN, HID = 5, 3, 4, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _weights(op: str, dirs: int, dtype: type = np.float32) -> dict[str, np.ndarray]:
    g = GATES[op]
    w = {
        "W": R.standard_normal((dirs, g * HID, IN)).astype(dtype) * 0.5,
        "R": R.standard_normal((dirs, g * HID, HID)).astype(dtype) * 0.5,
        "B": R.standard_normal((dirs, 2 * g * HID)).astype(dtype) * 0.5,
        "h0": R.standard_normal((dirs, BATCH, HID)).astype(dtype),
    }
    if op == "LSTM":
        w["c0"] = R.standard_normal((dirs, BATCH, HID)).astype(dtype)
        w["P"] = R.standard_normal((dirs, 3 * HID)).astype(dtype) * 0.5
    return w


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_matches_onnxruntime(op, direction):
    dirs = 2 if direction == "bidirectional" else 1
    w = _weights(op, dirs)
    ins = ["x", "W", "R", "B", "", "h0"] + (["c0", "P"] if op == "LSTM" else [])
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ins, outs, hidden_size=HID, direction=direction)
    x = R.standard_normal((SEQ, BATCH, IN)).astype(np.float32)
    m = model([node], {"x": x}, outs, w, opset=14)
    got = assert_matches_ort(m, {"x": x}, rtol=1e-4, atol=1e-5)
    assert got[0].shape == (SEQ, dirs, BATCH, HID)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("GRU", {"linear_before_reset": 1}),
        ("LSTM", {"input_forget": 1, "clip": 0.5}),
        ("RNN", {"activations": ["Relu"]}),
        ("GRU", {"activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3], "activation_beta": [0.4]}),
        # alphas go in order to the activations that take one: 0.2 is LeakyRelu's, not Sigmoid's
        ("GRU", {"activations": ["Sigmoid", "LeakyRelu"], "activation_alpha": [0.2]}),
        (
            "LSTM",
            {"activations": ["Sigmoid", "Tanh", "ScaledTanh"], "activation_alpha": [0.7], "activation_beta": [1.5]},
        ),
        ("LSTM", {"layout": 1}),
    ],
    ids=str,
)
def test_recurrent_variants(op, attrs):
    w = _weights(op, 1)
    w.pop("P", None)
    ins = ["x", "W", "R", "B"]
    outs = ["y", "y_h"]
    node = helper.make_node(op, ins, outs, hidden_size=HID, **attrs)
    shape = (BATCH, SEQ, IN) if attrs.get("layout") else (SEQ, BATCH, IN)
    x = R.standard_normal(shape).astype(np.float32)
    m = model([node], {"x": x}, outs, {k: w[k] for k in ("W", "R", "B")}, opset=14)
    # onnxruntime has no batch-major (layout=1) kernels: that one is checked against the ONNX reference
    assert_matches_ort(m, {"x": x}, rtol=1e-4, atol=1e-5, reference=bool(attrs.get("layout")))
