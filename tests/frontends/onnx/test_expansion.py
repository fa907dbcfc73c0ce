"""Ops without a handler that ONNX defines by a function body (Attention, the loss ops,
RotaryEmbedding …) are lowered through that body; against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import assert_matches_ort, helper, model, run_rlx
from rlx.frontends.onnx import reader

R = np.random.default_rng(6)


def _attention_case(kind: str) -> tuple[list, dict, dict, list]:
    q = R.standard_normal((2, 4, 3, 8)).astype(np.float32)
    kv_heads = 2 if kind == "gqa" else 4
    k = R.standard_normal((2, kv_heads, 5, 8)).astype(np.float32)
    v = R.standard_normal((2, kv_heads, 5, 6)).astype(np.float32)
    feed = {"q": q, "k": k, "v": v}
    ins, attrs, outs = ["q", "k", "v"], {}, ["y"]
    if kind == "causal":
        attrs["is_causal"] = 1
    if kind == "mask":
        feed["m"] = R.random((3, 5)) < 0.7
        ins.append("m")
    if kind == "past":
        feed["m"] = R.standard_normal((3, 9)).astype(np.float32)
        feed["pk"] = R.standard_normal((2, 4, 4, 8)).astype(np.float32)
        feed["pv"] = R.standard_normal((2, 4, 4, 6)).astype(np.float32)
        ins += ["m", "pk", "pv"]
        outs += ["pk_out", "pv_out"]
    if kind == "softcap":
        attrs.update(softcap=2.0, scale=0.3)
    return [helper.make_node("Attention", ins, outs, **attrs)], feed, {}, outs


@pytest.mark.parametrize("kind", ["plain", "causal", "gqa", "mask", "past", "softcap"])
def test_attention_through_its_function_body(kind):
    nodes, feed, inits, outs = _attention_case(kind)
    m = model(nodes, feed, outs, inits, opset=23)
    got = assert_matches_ort(m, feed, rtol=1e-5, atol=1e-5)
    assert got[0].dtype == np.float32


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_softmax_cross_entropy_loss(reduction, weighted):
    scores = R.standard_normal((3, 5, 2)).astype(np.float32)
    labels = R.integers(0, 5, (3, 2)).astype(np.int64)
    labels[0, 0] = -1  # ignored
    ins, inits = ["x", "t"], {}
    if weighted:
        ins.append("w")
        inits["w"] = R.random(5).astype(np.float32)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ins, ["y", "logp"], reduction=reduction, ignore_index=-1)
    m = model([node], {"x": scores, "t": labels}, ["y", "logp"], inits, opset=13)
    assert_matches_ort(m, {"x": scores, "t": labels}, rtol=1e-5, atol=1e-6)


def test_rotary_embedding():
    x = R.standard_normal((1, 2, 3, 8)).astype(np.float32)
    cos, sin = R.standard_normal((1, 3, 4)).astype(np.float32), R.standard_normal((1, 3, 4)).astype(np.float32)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"])
    m = model([node], {"x": x}, ["y"], {"cos": cos, "sin": sin}, opset=23)
    assert_matches_ort(m, {"x": x})


def test_expansion_leaves_registered_ops_alone():
    x = R.standard_normal((2, 3)).astype(np.float32)
    m = model([helper.make_node("Softmax", ["x"], ["y"])], {"x": x}, ["y"], opset=18)  # has a body too
    graph = reader.read(m, {"x": x.shape})
    assert [n.op_type for n in graph.nodes] == ["Softmax"]
    np.testing.assert_allclose(run_rlx(m, {"x": x})[0], np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-6)
