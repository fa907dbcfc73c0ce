"""ONNX models whose inputs declare dynamic dimensions (``dim_param``): converted once, run at three
sizes on the numpy and onnxruntime engines, at parity with onnxruntime at each size (issue 32)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlx
from frontends.onnx.onnx_helpers import ENGINES, TensorProto, assert_runs_at_sizes, helper, model, onnx, run_onnxruntime
from rlx.cli import main
from rlx.errors import RlxError, UsageError
from rlx.ir.symbolic import Sym

R = np.random.default_rng(32)


def feeds(make: Callable[[int], dict[str, np.ndarray]], sizes: tuple[int, ...] = (5, 8, 13)) -> list[dict[str, Any]]:
    return [make(n) for n in sizes]


def f32(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


# ── 1. Shape → Cast(to=int32): the cast has the type ONNX declares ──────────
def test_shape_cast_int32_keeps_the_declared_type(tmp_path):
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.INT32),
        helper.make_node("Add", ["s32", "one"], ["s32p"]),  # int32 arithmetic on the sizes
        helper.make_node("Cast", ["s32p"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["sf"], ["total"], keepdims=0),
        helper.make_node("Mul", ["x", "total"], ["y"]),
    ]
    m = model(nodes, {"x": (TensorProto.FLOAT, ["n", 3])}, ["y", "s32", "s32p"], {"one": np.array([1], np.int32)})
    assert_runs_at_sizes(tmp_path, m, feeds(lambda n: {"x": f32(n, 3)}))


# ── 2. sizes known at run time: one case per lowering that needed a static extent ──
W3 = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
W5 = R.standard_normal((4, 3, 5, 5)).astype(np.float32)
WT = R.standard_normal((3, 2, 4, 4)).astype(np.float32)


def image(n: int) -> dict[str, np.ndarray]:
    return {"x": f32(1, 3, n, n + 3)}


IMAGE = {"x": (TensorProto.FLOAT, [1, 3, "h", "w"])}
# name → (nodes, initializers)
WINDOW_CASES: dict[str, tuple[list[Any], dict[str, np.ndarray]]] = {
    "conv_same_upper_stride2": ([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])],
                                {"w": W3}),
    "conv_same_lower_stride3": ([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER",
                                                  strides=[3, 2])], {"w": W5}),
    "conv_same_upper_stride1": ([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")], {"w": W5}),
    "maxpool_same_upper": ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                             auto_pad="SAME_UPPER")], {}),
    "avgpool_same_lower": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2],
                                             auto_pad="SAME_LOWER")], {}),
    "avgpool_same_upper_count_pad": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                                                       strides=[2, 3], auto_pad="SAME_UPPER", count_include_pad=1)],
                                     {}),
    "eye_like_k": ([helper.make_node("Reshape", ["x", "hw"], ["x2"]),  # [h·w, 3]
                    helper.make_node("EyeLike", ["x2"], ["e"], k=-1),
                    helper.make_node("Mul", ["x2", "e"], ["y"])], {"hw": np.array([-1, 0], np.int64)}),
    "conv_transpose_same_upper": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], auto_pad="SAME_UPPER",
                                                    strides=[2, 2])], {"w": WT}),
    "conv_transpose_pads": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], pads=[1, 2, 0, 1], strides=[2, 3],
                                              output_padding=[1, 0])], {"w": WT}),
}  # fmt: skip


@pytest.mark.parametrize("name", WINDOW_CASES)
def test_window_ops_over_dynamic_spatial_sizes(tmp_path, name):
    nodes, inits = WINDOW_CASES[name]
    m = model(nodes, IMAGE, ["y"], inits)
    assert_runs_at_sizes(tmp_path, m, feeds(image))


def _pad(mode: str, pads: list[int]) -> list[Any]:
    return [helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)], {"p": np.array(pads, np.int64)}


# Pads (begin of each axis, then end) over [1, 3, h, w]: reflect/edge/wrap on the dynamic axes, crops too.
PAD_CASES = {
    "reflect": ("reflect", [0, 0, 2, 3, 0, 0, 4, 1]),
    "edge": ("edge", [0, 1, 3, 0, 0, 0, 1, 4]),
    "wrap": ("wrap", [0, 0, 1, 2, 0, 0, 3, 0]),
    "reflect_crop": ("reflect", [0, 0, -1, 2, 0, 0, 3, -2]),
}


@pytest.mark.parametrize("name", PAD_CASES)
def test_pad_modes_over_dynamic_axes(tmp_path, name):
    mode, pads = PAD_CASES[name]
    nodes, inits = _pad(mode, pads)
    m = model(nodes, IMAGE, ["y"], inits)
    assert_runs_at_sizes(tmp_path, m, feeds(image))


# ── Resize over dynamic spatial axes: scales, sizes from the graph, every mode and transform ──
def _resize(mode: str, ctm: str, scales: list[float] | None = None, **attrs: Any) -> tuple[list[Any], dict[str, Any]]:
    """Resize x[1, 3, h, w] by ``scales``, or (None) to the sizes of a second input y[1, 3, H, W] read from
    the graph (Shape → Concat), as detector necks do."""
    if scales is not None:
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=ctm,
                                **attrs)  # fmt: skip
        return [node], {"scales": np.array(scales, np.float32)}
    nodes = [
        helper.make_node("Shape", ["like"], ["hw"], start=2),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, coordinate_transformation_mode=ctm,
                         **attrs),
    ]  # fmt: skip
    return nodes, {"nc": np.array([1, 3], np.int64)}


RESIZE_CASES = {
    "nearest_asymmetric_floor_x2": _resize("nearest", "asymmetric", [1, 1, 2, 2], nearest_mode="floor"),
    "nearest_half_pixel_default_x1.5": _resize("nearest", "half_pixel", [1, 1, 1.5, 0.5]),
    "nearest_round_prefer_ceil_x3": _resize("nearest", "half_pixel", [1, 1, 3, 2], nearest_mode="round_prefer_ceil"),
    "nearest_ceil_tf_half_pixel": _resize("nearest", "tf_half_pixel_for_nn", [1, 1, 2, 0.75], nearest_mode="ceil"),
    "linear_half_pixel_x2": _resize("linear", "half_pixel", [1, 1, 2, 2]),
    "linear_pytorch_half_pixel_down": _resize("linear", "pytorch_half_pixel", [1, 1, 0.5, 0.6]),
    "linear_align_corners_x2": _resize("linear", "align_corners", [1, 1, 2, 1.7]),
    "linear_asymmetric": _resize("linear", "asymmetric", [1, 1, 2.5, 2]),
    "linear_half_pixel_symmetric": _resize("linear", "half_pixel_symmetric", [1, 1, 1.6, 2]),
    "cubic_half_pixel_x2": _resize("cubic", "half_pixel", [1, 1, 2, 2]),
    "cubic_exclude_outside_a-0.5": _resize("cubic", "half_pixel", [1, 1, 1.5, 0.8], exclude_outside=1,
                                           cubic_coeff_a=-0.5),
    "nearest_sizes_from_graph": _resize("nearest", "asymmetric", None, nearest_mode="floor"),
    "linear_sizes_from_graph": _resize("linear", "half_pixel", None),
    "cubic_sizes_from_graph_align": _resize("cubic", "align_corners", None),
}  # fmt: skip


@pytest.mark.parametrize("name", RESIZE_CASES)
def test_resize_over_dynamic_spatial_axes(tmp_path, name):
    nodes, inits = RESIZE_CASES[name]
    inputs = dict(IMAGE)
    if "like" in nodes[0].input:
        inputs["like"] = (TensorProto.FLOAT, [1, 3, "H", "W"])
        make = lambda n: {**image(n), "like": f32(1, 3, 2 * n - 3, n + 1)}  # noqa: E731
    else:
        make = image
    m = model(nodes, inputs, ["y"], inits, opset=19)
    assert_runs_at_sizes(tmp_path, m, feeds(make), rtol=1e-4, atol=1e-5)


# ── recurrences: unrolled over a static sequence, over a dynamic batch ───────
@pytest.mark.parametrize(("op", "states"), [("LSTM", True), ("GRU", False), ("RNN", True)])
def test_recurrent_over_a_dynamic_batch(tmp_path, op, states):
    gates, hidden, width, seq = {"RNN": 1, "GRU": 3, "LSTM": 4}[op], 6, 4, 5
    inits = {
        "W": R.standard_normal((2, gates * hidden, width)).astype(np.float32) * 0.5,
        "R": R.standard_normal((2, gates * hidden, hidden)).astype(np.float32) * 0.5,
        "B": R.standard_normal((2, 2 * gates * hidden)).astype(np.float32) * 0.5,
    }
    inputs = {"x": (TensorProto.FLOAT, [seq, "batch", width])}
    names = ["x", "W", "R", "B", ""]
    if states:  # state inputs, as voice-activity detectors carry them between chunks
        inputs["h0"] = (TensorProto.FLOAT, [2, "batch", hidden])
        names.append("h0")
        if op == "LSTM":
            inputs["c0"] = (TensorProto.FLOAT, [2, "batch", hidden])
            names.append("c0")
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=hidden, direction="bidirectional")
    m = model([node], inputs, outs, inits, opset=14)

    def make(n: int) -> dict[str, np.ndarray]:
        feed = {"x": f32(seq, n, width)}
        feed.update({k: f32(2, n, hidden) for k in inputs if k != "x"})
        return feed

    assert_runs_at_sizes(tmp_path, m, feeds(make, (1, 3, 7)), rtol=1e-4, atol=1e-5)


# Over a sequence whose length is known only at run time: one Recurrent Call, stepped by each engine
# (onnxruntime runs no batch-major ``layout=1`` recurrence, so none is compared here).
SEQUENCE_CASES = {
    "lstm_forward_peephole_clip": ("LSTM", dict(direction="forward", clip=2.0), True),
    "lstm_bidirectional": ("LSTM", dict(direction="bidirectional"), True),
    "lstm_reverse_input_forget": ("LSTM", dict(direction="reverse", input_forget=1), False),
    "gru_linear_before_reset": ("GRU", dict(direction="bidirectional", linear_before_reset=1), True),
    "gru_hardsigmoid_relu": ("GRU", dict(activations=["HardSigmoid", "Relu"], activation_alpha=[0.3],
                                         activation_beta=[0.4]), False),
    "rnn_reverse_states": ("RNN", dict(direction="reverse"), True),
    "gru_leakyrelu_alpha_in_order": ("GRU", dict(activations=["Sigmoid", "LeakyRelu"], activation_alpha=[0.2]), True),
}  # fmt: skip


@pytest.mark.parametrize("name", SEQUENCE_CASES)
def test_recurrent_over_a_dynamic_sequence(tmp_path, name):
    op, attrs, states = SEQUENCE_CASES[name]
    gates, hidden, width = {"RNN": 1, "GRU": 3, "LSTM": 4}[op], 5, 3
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    inits = {
        "W": R.standard_normal((dirs, gates * hidden, width)).astype(np.float32) * 0.5,
        "R": R.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5,
        "B": R.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.5,
    }
    names = ["x", "W", "R", "B", ""]
    state = [dirs, "batch", hidden]
    inputs = {"x": (TensorProto.FLOAT, ["seq", "batch", width])}
    if states:
        inputs.update({"h0": (TensorProto.FLOAT, state)} | ({"c0": (TensorProto.FLOAT, state)} if op == "LSTM" else {}))
        names += list(inputs)[1:]
    elif op == "LSTM":
        names += ["", ""]
    if op == "LSTM" and "clip" in attrs:
        inits["P"] = R.standard_normal((dirs, 3 * hidden)).astype(np.float32)
        names.append("P")
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=hidden, **attrs)
    m = model([node], inputs, outs, inits, opset=14)

    def make(n: int) -> dict[str, np.ndarray]:
        batch = 1 + n % 3
        feed = {"x": f32(n, batch, width)}
        feed.update({k: f32(dirs, batch, hidden) for k in inputs if k != "x"})
        return feed

    assert_runs_at_sizes(tmp_path, m, feeds(make, (4, 1, 9)), rtol=1e-4, atol=1e-5)
    (instr,) = [i for i in rlx.load(tmp_path / "out").program.instrs if i.call.op == "Recurrent"]
    assert str(instr.shape[0]) == "seq + 2"  # Y and the final states, packed along the steps


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("seq", [6, "seq"], ids=["unrolled", "recurrent_call"])
def test_batch_major_recurrence_with_states(tmp_path, op, seq):
    # layout=1: x [batch, seq, in], states [batch, directions, hidden]. onnxruntime runs no such
    # node, so ONNX's reference implementation is the judge.
    from onnx.reference import ReferenceEvaluator

    gates, hidden = {"GRU": 3, "LSTM": 4}[op], 5
    inits = {"W": f32(2, gates * hidden, 3), "R": f32(2, gates * hidden, hidden), "B": f32(2, 2 * gates * hidden)}
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    inputs = {"x": (TensorProto.FLOAT, [3, seq, 3])} | {k: (TensorProto.FLOAT, [3, 2, hidden]) for k in states}
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ["x", "W", "R", "B", "", *states], outs, hidden_size=hidden, layout=1,
                            direction="bidirectional")  # fmt: skip
    m = model([node], inputs, outs, inits, opset=14)
    feed = {"x": f32(3, 6, 3)} | {k: f32(3, 2, hidden) for k in states}
    rlx.from_onnx(m, tmp_path / "out", example_inputs=feed, verify="none")
    loaded = rlx.load(tmp_path / "out")
    for got, want in zip(loaded.run_flat(loaded.bind((), feed)), ReferenceEvaluator(m).run(None, feed)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


# ── 3. fixing chosen dimensions while converting ─────────────────────────────
def _upsample_like() -> onnx.ModelProto:
    """x[1, 3, h, w] resized to like[1, 3, h, w]'s extents doubled: two inputs tied by their dim_params."""
    nodes = [
        helper.make_node("Add", ["x", "like"], ["s"]),
        helper.make_node("Resize", ["s", "", "scales"], ["y"], mode="linear"),
    ]
    inputs = {"x": (TensorProto.FLOAT, [1, 3, "h", "w"]), "like": (TensorProto.FLOAT, [1, 3, "h", "w"])}
    return model(nodes, inputs, ["y"], {"scales": np.array([1, 1, 2, 2], np.float32)}, opset=19)


def test_input_shapes_fix_chosen_dims_and_keep_the_rest(tmp_path):
    m = _upsample_like()
    rlx.from_onnx(m, tmp_path / "out", input_shapes={"x": (1, 3, None, 6)})
    loaded = rlx.load(tmp_path / "out")
    assert [s.name for s in loaded.program.symbols] == ["h"]  # w fixed on both inputs (the same dim_param)
    assert [v.shape[3] for v in loaded.program.inputs] == [6, 6]
    for engine in ENGINES:
        run = rlx.load(tmp_path / "out", engine=engine)
        for h in (2, 5, 9):
            feed = {"x": f32(1, 3, h, 6), "like": f32(1, 3, h, 6)}
            got = run.run_flat(run.bind((), feed))[0]
            np.testing.assert_allclose(np.asarray(got), run_onnxruntime(m, feed)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(RlxError):  # the fixed axis is checked at run time
        loaded.run_flat(loaded.bind((), {"x": f32(1, 3, 4, 7), "like": f32(1, 3, 4, 7)}))


def test_question_mark_dims_are_independent(tmp_path):
    # paddle2onnx declares every free axis "?": each is its own size, not one tied dimension.
    m = model([helper.make_node("Relu", ["x"], ["y"])], {"x": (TensorProto.FLOAT, ["?", 3, "?", "?"])}, ["y"], {})
    assert_runs_at_sizes(tmp_path, m, [{"x": f32(1, 3, 4, 6)}, {"x": f32(2, 3, 7, 2)}, {"x": f32(3, 3, 1, 5)}])
    assert len(rlx.load(tmp_path / "out").program.symbols) == 3
    rlx.from_onnx(m, tmp_path / "fixed", input_shapes={"x": (1, 3, 48, None)})  # fixing one leaves the others
    assert [s.name for s in rlx.load(tmp_path / "fixed").program.symbols] == ["x_3"]


def test_input_shape_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save_model(_upsample_like(), str(path))
    assert main(["import", str(path), "-o", str(tmp_path / "all"), "--input-shape", "x=1,3,4,?"]) == 0
    assert rlx.load(tmp_path / "all").program.inputs[1].shape == (1, 3, 4, Sym("w"))
    assert main(["import", str(path), "-o", str(tmp_path / "fixed"), "--input-shape", "x=1,3,4,5",
                 "--input-shape", "like=?,?,?,5"]) == 0  # fmt: skip
    assert not rlx.load(tmp_path / "fixed").program.symbols


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x=1,3,a,?", "expected NAME=D0,D1"),
        ("images=1,3,4,4", "not a tensor input (inputs: like, x)"),
        ("x=1,3,4", "3 dimensions, the model declares 4"),
        ("x=2,3,?,?", "axis 0: the model fixes it to 1, not 2"),
    ],
)
def test_bad_input_shape_is_one_line(tmp_path, capsys, spec, message):
    path = tmp_path / "m.onnx"
    onnx.save_model(_upsample_like(), str(path))
    assert main(["import", str(path), "-o", str(tmp_path / "out"), "--input-shape", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlx: ") and "\n" not in err and message in err
    assert not (tmp_path / "out").exists()


def test_tied_dims_given_two_sizes_are_refused():
    with pytest.raises(UsageError, match="'h' two sizes, 4 and 5"):
        rlx.from_onnx(_upsample_like(), "unused", input_shapes={"x": (1, 3, 4, None), "like": (1, 3, 5, None)})


# ── 4. model inputs used as shape parameters, without freeze_inputs ─────────
PARAM_CASES = {  # name → (node, the parameter input's values tried at each size)
    "trilu_upper_k": (helper.make_node("Trilu", ["x", "p"], ["y"], upper=1), [0, 2, -3]),
    "trilu_lower_k": (helper.make_node("Trilu", ["x", "p"], ["y"], upper=0), [1, -1, 5]),
    "cumsum_axis": (helper.make_node("CumSum", ["x", "p"], ["y"]), [0, 1, -1]),
    "cumsum_axis_reverse_exclusive": (helper.make_node("CumSum", ["x", "p"], ["y"], reverse=1, exclusive=1),
                                      [2, -2, 1]),
}  # fmt: skip


@pytest.mark.parametrize("name", PARAM_CASES)
def test_shape_parameter_inputs_stay_inputs(tmp_path, name):
    node, values = PARAM_CASES[name]
    inputs = {"x": (TensorProto.FLOAT, [2, "n", "m"]), "p": (TensorProto.INT64, [])}
    m = model([node], inputs, ["y"], opset=18)
    rlx.from_onnx(m, tmp_path / "out", example_inputs={"x": f32(2, 3, 4), "p": np.array(values[0])})
    assert [v.name for v in rlx.load(tmp_path / "out").program.inputs] == ["x", "p"]  # not frozen
    sizes = [(3, 4), (5, 2), (6, 6)]
    assert_runs_at_sizes(
        tmp_path / "again", m, [{"x": f32(2, *s), "p": np.array(v, np.int64)} for s, v in zip(sizes, values)]
    )


# Reduction axes as a model input: which extents the result has is the values' business, so they
# are sizes bound as the reduction runs (ReduceAxes); its rank is known from the axes' length.
AXES_CASES = {  # name → (op, keepdims, the axes tried at each size)
    "sum_keepdims": ("ReduceSum", 1, [[1], [-1], [0]]),
    "max_two_axes_dropped": ("ReduceMax", 0, [[1, 2], [0, -1], [2, 0]]),
    "logsumexp_keepdims": ("ReduceLogSumExp", 1, [[0, 2], [1, 2], [-3, -2]]),
    "logsumexp_dropped": ("ReduceLogSumExp", 0, [[2], [0], [1]]),
    "l2_dropped": ("ReduceL2", 0, [[2], [0], [1]]),
    "mean_centred": ("ReduceMean", 1, [[1], [2], [0]]),  # x - mean(x): the bound sizes broadcast on
}


@pytest.mark.parametrize("name", AXES_CASES)
def test_reduction_axes_input_stays_an_input(tmp_path, name):
    op, keep, values = AXES_CASES[name]
    nodes = [helper.make_node(op, ["x", "axes"], ["r"], keepdims=keep)]
    if name == "mean_centred":
        nodes.append(helper.make_node("Sub", ["x", "r"], ["y"]))
    k = len(values[0])
    inputs = {"x": (TensorProto.FLOAT, [2, "n", "m"]), "axes": (TensorProto.INT64, [k])}
    m = model(nodes, inputs, [nodes[-1].output[0]], opset=18)
    sizes = [(3, 4), (5, 1), (6, 6)]
    feeds = [{"x": f32(2, *s), "axes": np.array(v, np.int64)} for s, v in zip(sizes, values)]
    assert_runs_at_sizes(tmp_path, m, feeds)
    program = rlx.load(tmp_path / "out").program
    assert [v.name for v in program.inputs] == ["x", "axes"]  # not frozen
    assert any(ins.call.op == "ReduceAxes" for ins in program.instrs)


# ── an If on the sizes (a decoder that squeezes a unit axis): decided at the example, guarded ──
def test_if_on_a_size_comparison_takes_the_example_branch_and_guards_it(tmp_path):
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    squeeze = helper.make_graph([helper.make_node("Squeeze", ["x", "last"], ["out"])], "then", [],
                                [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])  # fmt: skip
    keep = helper.make_graph([helper.make_node("Identity", ["x"], ["out"])], "else", [],
                             [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])  # fmt: skip
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=-1),
        helper.make_node("Constant", [], ["c1"], value=one),
        helper.make_node("Equal", ["s", "c1"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["y"], then_branch=squeeze, else_branch=keep),
    ]
    m = model(nodes, {"x": (TensorProto.FLOAT, ["n", "t"])}, ["y"], {"last": np.array([-1], np.int64)}, opset=18)
    assert_runs_at_sizes(tmp_path, m, [{"x": f32(n, 1)} for n in (1, 4, 6)])
    loaded = rlx.load(tmp_path / "out")
    assert loaded.program.guards == ["Eq(t, 1)"]
    with pytest.raises(RlxError, match="guard Eq"):  # the other branch has another shape: refused, not wrong
        loaded(f32(3, 2))


# ── torch.onnx's TorchScript exporter writes expand(batch, -1, -1) as Where(Equal(shape, -1), 1, shape) ──
def test_expand_minus_one_pattern_over_a_dynamic_batch(tmp_path):
    """ViT's class token: the -1 entries become 1 (an input's size is never -1), so Expand's shape is
    known while converting: no guard, every batch size runs."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
        helper.make_node("Concat", ["s", "minus_ones"], ["shape"], axis=0),  # [batch, -1, -1]
        helper.make_node(
            "ConstantOfShape", ["three"], ["ones"], value=helper.make_tensor("v", TensorProto.INT64, [1], [1])
        ),
        helper.make_node("Mul", ["ones", "minus_one"], ["all_minus_one"]),
        helper.make_node("Equal", ["shape", "all_minus_one"], ["keep"]),
        helper.make_node("Where", ["keep", "ones", "shape"], ["target"]),
        helper.make_node("Expand", ["token", "target"], ["tokens"]),
        helper.make_node("Concat", ["tokens", "x"], ["y"], axis=1),
    ]
    init = {"minus_ones": np.array([-1, -1], np.int64), "three": np.array([3], np.int64),
            "minus_one": np.array(-1, np.int64), "token": f32(1, 1, 4)}  # fmt: skip
    m = model(nodes, {"x": (TensorProto.FLOAT, ["n", 3, 4])}, ["y"], init)
    assert_runs_at_sizes(tmp_path, m, [{"x": f32(n, 3, 4)} for n in (2, 1, 5)])
    assert rlx.load(tmp_path / "out").program.guards == []


def test_where_on_a_size_comparison_takes_the_example_choice_and_guards_it(tmp_path):
    """Shape values picked by a comparison of sizes: decided at the example's sizes, like If."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
        helper.make_node("Greater", ["s", "two"], ["long"]),
        helper.make_node("Where", ["long", "flat", "keep"], ["target"]),  # [-1] if t > 2 else [0, 0]
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    init = {"two": np.array([2], np.int64), "flat": np.array([-1, 1], np.int64), "keep": np.array([0, 0], np.int64)}
    m = model(nodes, {"x": (TensorProto.FLOAT, ["n", "t"])}, ["y"], init)
    assert_runs_at_sizes(tmp_path, m, [{"x": f32(n, 3)} for n in (2, 4, 1)])
    loaded = rlx.load(tmp_path / "out")
    assert loaded.program.guards == ["(t) > (2)"]
    with pytest.raises(RlxError, match="guard"):  # the other choice reshapes differently: refused, not wrong
        loaded(f32(3, 2))


# ── the generated package and the JAX engine run the same bundle at other sizes ──
@pytest.mark.parametrize("name", ["resize_cubic_sizes_from_graph", "pad_reflect_conv_same", "lstm_dynamic_sequence"])
def test_generated_package_runs_at_sizes(tmp_path, name, monkeypatch):
    if name.startswith("lstm"):  # the Recurrent Call, stepped by the vendored kernel
        nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=4, direction="bidirectional")]
        inputs = {"x": (TensorProto.FLOAT, ["seq", 2, 3])}
        inits = {"W": f32(2, 16, 3), "R": f32(2, 16, 4)}
        make = lambda n: {"x": f32(n, 2, 3)}  # noqa: E731
    elif name.startswith("resize"):
        nodes, inits = RESIZE_CASES["cubic_sizes_from_graph_align"]
        inputs = {**IMAGE, "like": (TensorProto.FLOAT, [1, 3, "H", "W"])}
        make = lambda n: {**image(n), "like": f32(1, 3, 2 * n - 3, n + 1)}  # noqa: E731
    else:
        pad_nodes, pad_inits = _pad("reflect", [0, 0, 2, 3, 0, 0, 4, 1])
        conv_nodes, conv_inits = WINDOW_CASES["conv_same_upper_stride2"]
        nodes = [*pad_nodes, helper.make_node("Conv", ["y", "w"], ["z"], auto_pad="SAME_UPPER", strides=[2, 2])]
        inputs, inits, make = IMAGE, {**pad_inits, **conv_inits}, image
    m = model(nodes, inputs, [nodes[-1].output[0]], inits, opset=19)
    rlx.from_onnx(m, tmp_path / "out", example_inputs=make(5), write=("bundle", "package"))
    monkeypatch.syspath_prepend(str(tmp_path / "out" / "rlx_test_graph"))
    monkeypatch.delitem(sys.modules, "rlx_test_graph", raising=False)
    import rlx_test_graph

    try:
        forward = rlx_test_graph.load()
        for n in (5, 8, 13):
            feed = make(n)
            got = forward(*feed.values())
            got = got[0] if isinstance(got, (list, tuple)) else got
            np.testing.assert_allclose(np.asarray(got), run_onnxruntime(m, feed)[0], rtol=1e-4, atol=1e-5)
    finally:
        for mod in [k for k in sys.modules if k.split(".")[0] == "rlx_test_graph"]:
            del sys.modules[mod]
