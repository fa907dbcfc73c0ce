"""If / Loop / Scan lowered by inlining their bodies, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import TensorProto, assert_matches_ort, helper, model, run_rlx
from rlx.errors import LoweringError

R = np.random.default_rng(1)
X = R.standard_normal((3, 4)).astype(np.float32)


def _vi(name: str, elem: int = TensorProto.FLOAT, shape: list | None = None):  # noqa: ANN202
    return helper.make_tensor_value_info(name, elem, shape)


def _branch(name: str, op: str) -> object:
    return helper.make_graph(
        [helper.make_node(op, ["x"], [f"{name}_out"])], name, [], [_vi(f"{name}_out", shape=[3, 4])]
    )


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_known_condition_takes_one_branch(cond):
    nodes = [
        helper.make_node("If", ["c"], ["y"], then_branch=_branch("then", "Relu"), else_branch=_branch("else", "Neg"))
    ]
    m = model(nodes, {"x": X}, ["y"], {"c": np.array(cond)})
    got = assert_matches_ort(m, {"x": X})
    np.testing.assert_array_equal(got[0], np.maximum(X, 0) if cond else -X)


def test_if_on_a_runtime_condition_selects_per_output():
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=_branch("then", "Relu"), else_branch=_branch("else", "Neg")),
    ]
    m = model(nodes, {"x": X}, ["y"], {"zero": np.array(0.0, np.float32)})
    for feed in (X, -np.abs(X), np.abs(X)):
        assert_matches_ort(m, {"x": feed})


def _loop_body() -> object:
    # carried: acc = acc * 2 + i (as float); scan output: acc
    nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["acc_in", "two"], ["dbl"]),
        helper.make_node("Add", ["dbl", "fi"], ["acc_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Identity", ["acc_out"], ["scan_out"]),
    ]
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return helper.make_graph(
        nodes, "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc_in", shape=[3, 4])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", shape=[3, 4]), _vi("scan_out", shape=[3, 4])],
        [two],
    )  # fmt: skip


def test_loop_with_known_trip_count_is_unrolled():
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["acc", "all"], body=_loop_body())]
    m = model(nodes, {"x": X}, ["acc", "all"], {"n": np.array(4, np.int64)})
    got = assert_matches_ort(m, {"x": X})
    assert got[1].shape == (4, 3, 4) and got[1].dtype == np.float32


def test_loop_whose_trip_count_depends_on_inputs_is_refused_in_one_line():
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
        helper.make_node("Cast", ["mx"], ["n"], to=TensorProto.INT64),
        helper.make_node("Loop", ["n", "", "x"], ["acc", "all"], body=_loop_body()),
    ]
    m = model(nodes, {"x": X}, ["acc", "all"])
    with pytest.raises(LoweringError, match="must be known while converting"):
        run_rlx(m, {"x": X})


@pytest.mark.parametrize("reverse", [0, 1])
def test_scan_running_sum_with_directions_and_axes(reverse):
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])],
        "body", [_vi("s_in", shape=[3]), _vi("x_t", shape=[3])], [_vi("s_out", shape=[3]), _vi("y_t", shape=[3])],
    )  # fmt: skip
    nodes = [
        helper.make_node(
            "Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
            scan_input_axes=[1], scan_input_directions=[reverse], scan_output_axes=[-1], scan_output_directions=[reverse],
        )
    ]  # fmt: skip
    s0 = np.zeros(3, np.float32)
    m = model(nodes, {"s0": s0, "xs": X}, ["s", "ys"])
    got = assert_matches_ort(m, {"s0": s0, "xs": X})
    assert got[1].shape == (3, 4)
