"""Data-dependent selection ops (Unique, NonMaxSuppression) against the ONNX reference."""

from __future__ import annotations

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import TensorProto, helper, model, run_rlx

R = np.random.default_rng(11)


def reference(m, feed):
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(o) for o in ReferenceEvaluator(m).run(None, feed)]


def assert_equal_outputs(got, want):
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


UNIQUE_INPUTS = {
    "vector": R.integers(0, 5, (11,)).astype(np.float32),
    "matrix": R.integers(0, 3, (4, 3)).astype(np.int64),
    "rows": np.array([[2, 1], [0, 5], [2, 1], [0, 5], [1, 1]], np.int32),
    "cube": R.integers(0, 2, (2, 3, 2)).astype(np.float32),
    "one": np.array([7.0], np.float32),
}


@pytest.mark.parametrize("sort", [1, 0])
@pytest.mark.parametrize(
    "name,axis", [("vector", None), ("matrix", None), ("rows", 0), ("rows", -1), ("cube", 1), ("one", None)]
)
def test_unique_matches_reference(name, axis, sort):
    x = UNIQUE_INPUTS[name]
    attrs = {"sorted": sort, **({"axis": axis} if axis is not None else {})}
    node = helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs)
    elem = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32}[x.dtype.type]
    m = model([node], {"x": (elem, list(x.shape))}, ["y", "indices", "inverse", "counts"], opset=11)
    got = run_rlx(m, {"x": x})
    if sort or (axis is None and x.ndim == 1):  # the reference's unsorted path breaks on the others
        assert_equal_outputs(got, reference(m, {"x": x}))
    y, first, inverse, counts = got
    lanes = x.reshape(-1) if axis is None else np.moveaxis(x, axis, 0)
    vals = y if axis is None else np.moveaxis(y, axis, 0)
    np.testing.assert_array_equal(vals[inverse], lanes)  # inverse rebuilds the input
    np.testing.assert_array_equal(lanes[first], vals)  # indices point at each value
    assert counts.sum() == lanes.shape[0]
    if not sort:
        assert list(first) == sorted(first)  # first-seen order


def test_unique_unsorted_order_and_counts():
    x = np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], np.float32)
    node = helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], sorted=0)
    m = model([node], {"x": x}, ["y", "indices", "inverse", "counts"], opset=11)
    y, first, inverse, counts = run_rlx(m, {"x": x})
    np.testing.assert_array_equal(y, [2.0, 1.0, 3.0, 4.0])
    np.testing.assert_array_equal(first, [0, 1, 3, 4])
    np.testing.assert_array_equal(inverse, [0, 1, 1, 2, 3, 2])
    np.testing.assert_array_equal(counts, [1, 2, 2, 1])
    assert y.dtype == np.float32 and first.dtype == inverse.dtype == counts.dtype == np.int64


def test_unique_programs_round_trip_and_older_ones_load():
    from rlx.app.onnx_convert import lower_graph
    from rlx.app.pipeline import finish_program
    from rlx.frontends.onnx import reader
    from rlx.ir.calls import Unique
    from rlx.ir.program import Program

    node = helper.make_node("Unique", ["x"], ["y", "indices"], sorted=0)
    m = model([node], {"x": (TensorProto.FLOAT, [5])}, ["y", "indices"], opset=11)
    program = finish_program(lower_graph(reader.read(m, {"x": (5,)}))[0])
    doc = program.to_json()
    assert Program.from_json(doc).to_json() == doc
    calls = [i["args"] for i in doc["instrs"] if i["op"] == "Unique"]
    assert calls and all(a["sorted"] is False for a in calls)
    for a in calls:  # a program written before Unique had `sorted` reads as sorted
        del a["sorted"]
    old = Program.from_json(doc)
    assert all(i.call.sorted for i in old.instrs if isinstance(i.call, Unique))
    assert [s.name for s in program.data_symbols] == ["u0"]


def _nms_model(center: int, score_threshold: bool, limits: bool = True):
    ins = ["boxes", "scores", *(["most", "iou"] if limits else []), *(["score"] if score_threshold else [])]
    node = helper.make_node("NonMaxSuppression", ins, ["selected"], center_point_box=center)
    inits = {"most": np.array([3], np.int64), "iou": np.array([0.4], np.float32), "score": np.array([0.3], np.float32)}
    m = model(
        [node],
        {"boxes": (TensorProto.FLOAT, [2, 12, 4]), "scores": (TensorProto.FLOAT, [2, 3, 12])},
        ["selected"],
        {k: v for k, v in inits.items() if k in ins},
        opset=11,
    )
    return m


def _nms_feed(center: int):
    corner = R.random((2, 12, 2)).astype(np.float32) * 4
    size = (R.random((2, 12, 2)).astype(np.float32) + 0.2) * 2
    boxes = np.concatenate([corner, size], axis=-1) if center else np.concatenate([corner, corner + size], axis=-1)
    if not center:
        boxes[:, ::3] = boxes[:, ::3][..., [2, 3, 0, 1]]  # flipped corners
    scores = R.random((2, 3, 12)).astype(np.float32)
    scores[0, 0, 5] = scores[0, 0, 7]  # a tie: the lower index first
    return {"boxes": boxes, "scores": scores}


@pytest.mark.parametrize("score_threshold", [False, True])
@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_matches_reference(center, score_threshold):
    m, feed = _nms_model(center, score_threshold), _nms_feed(center)
    (got,) = run_rlx(m, feed)
    assert_equal_outputs([got], reference(m, feed))
    assert got.ndim == 2 and got.shape[1] == 3 and got.dtype == np.int64
    for batch in range(2):
        for cls in range(3):
            picked = got[(got[:, 0] == batch) & (got[:, 1] == cls), 2]
            assert 1 <= len(picked) <= 3  # at most max_output_boxes_per_class, best score first
            s = feed["scores"][batch, cls]
            assert list(s[picked]) == sorted(s[picked], reverse=True)
            if score_threshold:
                assert (s[picked] > 0.3).all()


def test_non_max_suppression_without_limits_selects_nothing():
    m, feed = _nms_model(0, False, limits=False), _nms_feed(0)
    (got,) = run_rlx(m, feed)
    assert got.shape == (0, 3) and got.dtype == np.int64


def test_non_max_suppression_on_the_onnxruntime_engine():
    from rlx.app.onnx_convert import lower_graph
    from rlx.app.pipeline import finish_program
    from rlx.formats.bundle import bind_weights
    from rlx.frontends.onnx import reader
    from rlx.runtime.model import Model

    m, feed = _nms_model(1, True), _nms_feed(1)
    program, weights = lower_graph(reader.read(m, {k: v.shape for k, v in feed.items()}))
    program = finish_program(program)
    rt = Model(program, bind_weights(program, weights, "weights"), engine="onnxruntime")
    (got,) = rt.run_flat(rt.bind((), feed))
    assert_equal_outputs([np.asarray(got)], run_rlx(m, feed))


def test_negative_gather_positions_on_the_onnxruntime_engine():
    """IndexSelect / Gather Calls with negative positions (legal in ONNX's Gather and
    GatherElements) on the onnxruntime engine, whose emitter hands them to Gather unchanged."""
    from rlx.app.onnx_convert import lower_graph
    from rlx.app.pipeline import finish_program
    from rlx.formats.bundle import bind_weights
    from rlx.frontends.onnx import reader
    from rlx.runtime.model import Model

    x = R.standard_normal((4, 5)).astype(np.float32)
    feed = {"x": x, "i": np.array([-1, 0, -5, 3], np.int64), "j": np.array([[-1, 0, 2], [3, -4, -2]], np.int64)}
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], axis=1),
             helper.make_node("GatherElements", ["x", "j"], ["z"], axis=0)]  # fmt: skip
    m = model(nodes, feed, ["y", "z"])
    program, weights = lower_graph(reader.read(m, {k: v.shape for k, v in feed.items()}))
    program = finish_program(program)
    rt = Model(program, bind_weights(program, weights, "weights"), engine="onnxruntime")
    got = [np.asarray(o) for o in rt.run_flat(rt.bind((), feed))]
    assert_equal_outputs(got, [x[:, [4, 0, 0, 3]], np.take_along_axis(x[:, :3], feed["j"] % 4, axis=0)])
    assert_equal_outputs(got, run_rlx(m, feed))
