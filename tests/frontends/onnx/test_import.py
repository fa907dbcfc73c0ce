"""from_onnx / `rlx import model.onnx`: bundles, dynamic axes, external data, functions, no torch, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx
from frontends.onnx.onnx_helpers import TensorProto, helper, model, numpy_helper, onnx, run_onnxruntime
from rlx.cli import main
from rlx.errors import SchemaError, UnsupportedOpError

R = np.random.default_rng(1)
W1 = R.standard_normal((8, 16)).astype(np.float32)
B1 = R.standard_normal(16).astype(np.float32)


def mlp(batch: object = "batch", seq: object = "seq") -> onnx.ModelProto:
    """x[batch, seq, 8] → MatMul, Add, Gelu → reshape through Shape arithmetic → [batch, seq*16]."""
    nodes = [
        helper.make_node("MatMul", ["x", "fc.weight"], ["h"]),
        helper.make_node("Add", ["h", "fc.bias"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["a"]),
        helper.make_node("Shape", ["a"], ["s"], end=1),
        helper.make_node("Concat", ["s", "m1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["a", "shape"], ["y"]),
    ]
    inits = {"fc.weight": W1, "fc.bias": B1, "m1": np.array([-1], np.int64)}
    return model(nodes, {"x": (TensorProto.FLOAT, [batch, seq, 8])}, ["y"], inits)


def test_from_onnx_writes_bundle_and_runs_at_other_sizes(tmp_path):
    m = mlp()
    report = rlx.from_onnx(m, tmp_path / "out")
    assert report.passed and report.parity is not None
    assert (tmp_path / "out" / "bundle" / "program.json").is_file()
    assert (tmp_path / "out" / "report.json").is_file()
    loaded = rlx.load(tmp_path / "out")
    assert [s.name for s in loaded.program.symbols] == ["batch", "seq"]
    assert {w.key for w in loaded.program.weights} >= {"fc.weight", "fc.bias"}  # keyed by ONNX names
    for shape in [(1, 3, 8), (4, 7, 8)]:
        x = R.standard_normal(shape).astype(np.float32)
        got = loaded(x)
        want = run_onnxruntime(m, {"x": x})[0]
        assert got.shape == want.shape == (shape[0], shape[1] * 16) and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_external_data_and_cli(tmp_path):
    m = mlp(2, 3)
    path = tmp_path / "ext.onnx"
    onnx.save_model(
        mlp(2, 3),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.bin",
        size_threshold=0,
    )
    assert (tmp_path / "w.bin").is_file()
    assert main(["import", str(path), "-o", str(tmp_path / "cli"), "--write", "bundle,package"]) == 0
    out = rlx.load(tmp_path / "cli")
    x = R.standard_normal((2, 3, 8)).astype(np.float32)
    np.testing.assert_allclose(out(x), run_onnxruntime(m, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_local_function_is_inlined():
    from rlx.frontends.onnx import reader

    fn = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 18)])  # fmt: skip
    m = model([helper.make_node("Twice", ["x"], ["y"], domain="local")], {"x": np.zeros((2,), np.float32)}, ["y"])
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.append(fn)
    graph = reader.read(m)
    assert [n.op_type for n in graph.nodes] == ["Add"]
    from frontends.onnx.onnx_helpers import run_rlx

    np.testing.assert_array_equal(run_rlx(m, {"x": np.array([1.0, 2.5], np.float32)})[0], [2.0, 5.0])


def test_onnx_import_needs_no_torch(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(mlp(2, 3), str(path))
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from rlx.cli import main\n"
        f"sys.exit(main(['import', {str(path)!r}, '-o', {str(tmp_path / 'o')!r}]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "parity: PASS" in r.stdout


def test_unsupported_ops_listed_at_once():
    from frontends.onnx.onnx_helpers import run_rlx

    nodes = [
        helper.make_node("RoiAlign", ["x", "r", "i"], ["d"], name="roi1"),
        helper.make_node("Bernoulli", ["x"], ["y"], name="b1"),
    ]
    m = model(
        nodes,
        {"x": np.zeros((2, 2), np.float32)},
        ["d", "y"],
        {"r": np.zeros((1, 4), np.float32), "i": np.zeros(1, np.int64)},
    )
    with pytest.raises(UnsupportedOpError) as e:
        run_rlx(m, {"x": np.zeros((2, 2), np.float32)})
    msg = str(e.value)
    assert "RoiAlign (domain ai.onnx, opset 18) ×1 (nodes roi1)" in msg and "Bernoulli" in msg and "\n" not in msg


def _bad_models(tmp_path: Path) -> dict[str, Path]:
    good = mlp(2, 3)
    files = {}

    def save(name: str, m: onnx.ModelProto) -> None:
        files[name] = tmp_path / f"{name}.onnx"
        files[name].write_bytes(m.SerializeToString())

    files["truncated"] = tmp_path / "truncated.onnx"
    files["truncated"].write_bytes(good.SerializeToString()[:57])
    files["garbage"] = tmp_path / "garbage.onnx"
    files["garbage"].write_bytes(b"\xff\xfe not a protobuf at all \x00\x01")
    cyc = model([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Relu", ["x"], ["y"])],
                {"x": np.zeros(2, np.float32)}, ["y"])  # fmt: skip
    save("cycle", cyc)
    save("undefined", model([helper.make_node("Add", ["x", "nope"], ["y"])], {"x": np.zeros(2, np.float32)}, ["y"]))
    bad_init = mlp(2, 3)
    t = numpy_helper.from_array(np.zeros(3, np.float32), "fc.bias")
    t.dims[:] = [16]  # 12 bytes declared as 16 floats
    bad_init.graph.initializer[1].CopyFrom(t)
    save("initializer", bad_init)
    future = mlp(2, 3)
    future.opset_import[0].version = onnx.defs.onnx_opset_version() + 5
    save("future_opset", future)
    return files


@pytest.mark.parametrize("name", ["truncated", "garbage", "cycle", "undefined", "initializer", "future_opset"])
def test_bad_input_is_one_line_schema_error(tmp_path, capsys, name):
    path = _bad_models(tmp_path)[name]
    from rlx.frontends.onnx import reader

    with pytest.raises(SchemaError) as e:
        reader.read(path)
    assert "\n" not in str(e.value)
    out = tmp_path / f"out_{name}"
    assert main(["import", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlx: ") and "\n" not in err and "Traceback" not in err
    assert not out.exists()  # nothing written


def test_sequence_input_refused_in_one_line(tmp_path):
    from rlx.frontends.onnx import reader

    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    out = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    g = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["n"])], "g", [seq], [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOpError, match="sequence types are not supported"):
        reader.read(m)
