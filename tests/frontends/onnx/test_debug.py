"""`rlx debug` on an ONNX import: each ONNX node's output against onnxruntime's, first divergent named."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

import rlx
from frontends.onnx.onnx_helpers import TensorProto, helper, model
from rlx.app.onnx_debug import compare_onnx_nodes, onnxruntime_node_values
from rlx.cli import main
from rlx.ir.calls import Unary
from rlx.runtime.model import load

R = np.random.default_rng(7)
W = R.standard_normal((4, 6)).astype(np.float32)


def _model():  # noqa: ANN202
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("LayerNormalization", ["r", "g"], ["n"], name="ln", axis=-1),
        helper.make_node("Attention", ["q", "q", "q"], ["a"], name="attn"),  # lowered through its function body
        helper.make_node("Add", ["n", "a2"], ["y"], name="add"),
        helper.make_node("Reshape", ["a", "s"], ["a2"], name="flat"),
    ]
    inits = {"w": W, "g": np.ones(6, np.float32), "s": np.array([2, 6], np.int64)}
    return model(
        [*nodes[:3], helper.make_node("Reshape", ["n", "s4"], ["q"], name="heads"), *nodes[3:]],
        {"x": (TensorProto.FLOAT, ["batch", 4])},
        ["y"],
        {**inits, "s4": np.array([1, 1, 2, 6], np.int64)},
        opset=23,
    )


def test_debug_compares_every_onnx_node_and_passes(tmp_path, capsys):
    out = tmp_path / "out"
    rlx.from_onnx(_model(), out, example_inputs={"x": R.standard_normal((2, 4)).astype(np.float32)})
    assert (out / "model.onnx").is_file()
    assert main(["debug", str(out)]) == 0
    assert "no node diverges" in capsys.readouterr().out
    report = json.loads((out / "debug.json").read_text())
    assert report["first_divergent"] is None
    compared = {n["id"] for n in report["nodes"]}
    assert {"mm", "relu", "ln", "heads", "attn", "flat", "add"} <= compared
    assert all(n["local"]["passed"] and n["accumulated"]["passed"] for n in report["nodes"])


def test_debug_names_the_first_node_that_diverges(tmp_path):
    out = tmp_path / "out"
    x = R.standard_normal((2, 4)).astype(np.float32)
    m = _model()
    rlx.from_onnx(m, out, example_inputs={"x": x})
    loaded = load(out / "bundle")
    program = loaded.program
    # plant a wrong op where the Relu was lowered: that node, not the ones after it, is blamed
    relu_value = program.value_map["r"]
    for k, ins in enumerate(program.instrs):
        if ins.result == relu_value:
            assert isinstance(ins.call, Unary) and ins.call.fn == "relu"
            program.instrs[k] = dataclasses.replace(ins, call=Unary("sigmoid", ins.call.x))
    values = onnxruntime_node_values(m, {"x": x})
    nodes = [(n.name, n.op_type, list(n.output)) for n in m.graph.node]
    report = compare_onnx_nodes(nodes, program, loaded.weights, {"x": x}, values)
    first = report.first_divergent
    assert first is not None and (first.id, first.op) == ("relu", "Relu")
    later = {n.id: n for n in report.nodes}
    assert later["ln"].local.passed and not later["ln"].accumulated.passed  # downstream: only accumulated
