"""Building small ONNX models in code and checking rlx against onnxruntime on them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rlx  # noqa: E402
from rlx.app.onnx_convert import lower_graph, run_onnxruntime  # noqa: E402
from rlx.app.pipeline import finish_program  # noqa: E402
from rlx.formats.bundle import bind_weights  # noqa: E402
from rlx.frontends.onnx import reader  # noqa: E402
from rlx.ir import dtypes  # noqa: E402
from rlx.runtime.model import Model  # noqa: E402

ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
        np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
        np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.uint8): TensorProto.UINT8,
        np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int8): TensorProto.INT8,
        np.dtype(np.int16): TensorProto.INT16}  # fmt: skip


def model(
    nodes: Sequence[Any],
    inputs: dict[str, np.ndarray | tuple[Any, Any]],
    outputs: Sequence[str],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 18,
) -> Any:
    """A one-graph model: ``inputs`` maps names to example arrays (or (elem_type, shape) for dim_params)."""
    ins = []
    for name, v in inputs.items():
        if isinstance(v, tuple):
            ins.append(helper.make_tensor_value_info(name, v[0], v[1]))
        else:
            ins.append(helper.make_tensor_value_info(name, ELEM[v.dtype], list(v.shape)))
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(a), k) for k, a in (inits or {}).items()]
    graph = helper.make_graph(list(nodes), "test_graph", ins, outs, init)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    # Output types from shape inference (onnxruntime needs them declared).
    try:
        g = onnx.shape_inference.infer_shapes(m).graph
    except Exception:  # a custom domain added afterwards: leave the outputs untyped
        return m
    inferred = {vi.name: vi.type for vi in [*g.value_info, *g.output]}
    for o in m.graph.output:
        if o.name in inferred:
            o.type.CopyFrom(inferred[o.name])
    return m


def run_rlx(m: Any, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    graph = reader.read(m, {k: v.shape for k, v in feed.items()})
    program, weights = lower_graph(graph)
    program = finish_program(program)
    rt = Model(program, bind_weights(program, weights, "weights"))
    return [np.asarray(o) for o in rt.run_flat(rt.bind((), feed))]


def assert_matches_ort(
    m: Any, feed: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-6, reference: bool = False
) -> list[np.ndarray]:
    """rlx and onnxruntime agree on every output: shape, dtype, NaN pattern and values
    (``reference``: against the ONNX reference implementation, where onnxruntime lacks a kernel)."""
    got = run_rlx(m, feed)
    if reference:
        from onnx.reference import ReferenceEvaluator

        want = [np.asarray(o) for o in ReferenceEvaluator(m).run(None, feed)]
    else:
        want = run_onnxruntime(m, feed)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {k}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"output {k}: dtype {g.dtype} != {w.dtype}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
    return got


def token(arr: np.ndarray) -> str:
    return dtypes.from_numpy(arr.dtype)


ENGINES = ("numpy", "onnxruntime")


def assert_runs_at_sizes(
    tmp_path: Path, m: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], rtol: float = 1e-5, atol: float = 1e-5
) -> None:
    """Convert ``m`` once (dynamic dims left as they are), then on each engine and at each feed:
    the same shapes, dtypes and values as onnxruntime."""
    rlx.from_onnx(m, tmp_path / "out", example_inputs=feeds[0])
    for engine in ENGINES:
        loaded = rlx.load(tmp_path / "out", engine=engine)
        for feed in feeds:
            got = loaded.run_flat(loaded.bind((), feed))
            want = run_onnxruntime(m, feed)
            assert len(got) == len(want)
            for k, (g, w) in enumerate(zip(got, want)):
                g = np.asarray(g)
                where = f"{engine}, output {k}, input shapes {[v.shape for v in feed.values()]}"
                assert g.shape == w.shape and g.dtype == w.dtype, f"{where}: {g.shape} {g.dtype} != {w.shape} {w.dtype}"
                if w.dtype.kind == "f":
                    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=where)
                else:
                    np.testing.assert_array_equal(g, w, err_msg=where)
