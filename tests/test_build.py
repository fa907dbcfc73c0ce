"""Two-stage workflow: export where torch is, ``rlx build`` / ``rlx verify`` where it is not, and
``torch-ir.json`` files written in the reference front-end's style."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rlx
from rlx.cli import main
from rlx.formats import safetensors_io

from helpers import BLOCK_TORCH, load_example

RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def ref(name):
    return {"ref": name}


def out(shape, dtype="f32"):
    return {"shape": list(shape), "dtype": dtype}


# Each fixture: torch-ir.json as the reference front-end writes it (no `kwargs` where empty, no
# producer/decomposition), its weights, its inputs, and the expected outputs computed with numpy.
def linear_fixture():
    w, b, x = f32(5, 3), f32(5), f32(2, 3)
    ir = {
        "format": "rlx-torch-ir", "version": 1, "model_name": "linear",
        "inputs": [{"id": "x", "shape": [2, 3], "dtype": "f32"}],
        "weights": [{"id": "p_w", "key": "fc.weight", "shape": [5, 3], "dtype": "f32", "kind": "param"},
                    {"id": "p_b", "key": "fc.bias", "shape": [5], "dtype": "f32", "kind": "param"}],
        "nodes": [
            {"id": "t", "op": "aten.permute.default", "args": [ref("p_w"), {"list": [{"int": 1}, {"int": 0}]}],
             "out": out([3, 5])},
            {"id": "addmm", "op": "aten.addmm.default", "args": [ref("p_b"), ref("x"), ref("t")], "out": out([2, 5])},
        ],
        "outputs": [{"ref": "addmm", "shape": [2, 5], "dtype": "f32"}],
    }  # fmt: skip
    return ir, {"fc.weight": w, "fc.bias": b}, {"x": x}, [x @ w.T + b]


def group_norm_fixture():
    x, w, b = f32(2, 4, 3, 3), f32(4), f32(4)
    ir = {
        "format": "rlx-torch-ir", "version": 1, "model_name": "gn",
        "inputs": [{"id": "x", "shape": [2, 4, 3, 3], "dtype": "f32"}],
        "weights": [{"id": "w", "key": "gn.weight", "shape": [4], "dtype": "f32", "kind": "param"},
                    {"id": "b", "key": "gn.bias", "shape": [4], "dtype": "f32", "kind": "param"}],
        "nodes": [
            {"id": "gn", "op": "aten.native_group_norm.default",
             "args": [ref("x"), ref("w"), ref("b"), {"int": 2}, {"int": 4}, {"int": 9}, {"int": 2}, {"float": 1e-5}],
             "kwargs": {}, "out": [out([2, 4, 3, 3]), out([2, 2]), out([2, 2])]},
            {"id": "getitem", "op": "_getitem", "args": [ref("gn"), {"int": 0}], "out": out([2, 4, 3, 3])},
        ],
        "outputs": [{"ref": "getitem", "shape": [2, 4, 3, 3], "dtype": "f32"}],
    }  # fmt: skip
    g = x.reshape(2, 2, -1).astype(np.float64)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    y = y.reshape(x.shape) * w.reshape(1, 4, 1, 1) + b.reshape(1, 4, 1, 1)
    return ir, {"gn.weight": w, "gn.bias": b}, {"x": x}, [y.astype(np.float32)]


def pad_and_constant_fixture():
    x = f32(2, 3)
    ir = {
        "format": "rlx-torch-ir", "version": 1, "model_name": "pad",
        "inputs": [{"id": "x", "shape": [2, 3], "dtype": "f32"}],
        "weights": [],
        "nodes": [
            {"id": "pad", "op": "aten.constant_pad_nd.default",
             "args": [ref("x"), {"list": [{"int": 1}, {"int": -1}, {"int": 0}, {"int": 2}]}, {"float": 0.5}],
             "out": out([4, 3])},
        ],
        "outputs": [{"ref": "pad", "shape": [4, 3], "dtype": "f32"}, {"const": {"int": 7}}],
    }  # fmt: skip
    expected = np.full((4, 3), 0.5, np.float32)
    expected[:2, 1:] = x[:, :2]
    return ir, {}, {"x": x}, [expected, 7]


def f64_stored_as_f32_fixture():
    # The reference front-end declares f64 weights but stores them as f32.
    w, x = f32(3), f32(2, 3)
    ir = {
        "format": "rlx-torch-ir", "version": 1, "model_name": "scale",
        "inputs": [{"id": "x", "shape": [2, 3], "dtype": "f32"}],
        "weights": [{"id": "c", "key": "scale", "shape": [3], "dtype": "f64", "kind": "buffer"}],
        "nodes": [{"id": "mul", "op": "aten.mul.Tensor", "args": [ref("x"), ref("c")], "out": out([2, 3])}],
        "outputs": [{"ref": "mul", "shape": [2, 3], "dtype": "f32"}],
        "some_future_field": {"ignored": True},
    }  # fmt: skip
    return ir, {"scale": w}, {"x": x}, [x * w]


def upsample_fixture():
    # upsample_nearest2d.vec with a float scale list, as the reference front-end writes it.
    x = f32(1, 2, 3, 4)
    ir = {
        "format": "rlx-torch-ir", "version": 1, "model_name": "up",
        "inputs": [{"id": "x", "shape": [1, 2, 3, 4], "dtype": "f32"}],
        "weights": [],
        "nodes": [{"id": "up", "op": "aten.upsample_nearest2d.vec",
                   "args": [ref("x"), {"none": True}, {"list": [{"float": 2.0}, {"float": 2.0}]}],
                   "out": out([1, 2, 6, 8])}],
        "outputs": [{"ref": "up", "shape": [1, 2, 6, 8], "dtype": "f32"}],
    }  # fmt: skip
    return ir, {}, {"x": x}, [x.repeat(2, axis=2).repeat(2, axis=3)]


FIXTURES = {
    "upsample_nearest": upsample_fixture,
    "linear": linear_fixture,
    "group_norm": group_norm_fixture,
    "pad_and_constant": pad_and_constant_fixture,
    "f64_stored_as_f32": f64_stored_as_f32_fixture,
}


def write_fixture(directory, ir, weights, inputs, expected):
    directory.mkdir(parents=True)
    (directory / "torch-ir.json").write_text(json.dumps(ir))
    safetensors_io.write(directory / "weights.safetensors", weights)
    reference = {f"in::{k}": v for k, v in inputs.items()}
    reference.update({f"out::{i}": v for i, v in enumerate(expected) if isinstance(v, np.ndarray)})
    safetensors_io.write(directory / "reference.safetensors", reference)


def run_without_torch(code: str) -> subprocess.CompletedProcess:
    script = BLOCK_TORCH + textwrap.dedent(code) + '\nassert "torch" not in sys.modules\n'
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


def test_reference_style_fixtures_build_and_run_without_torch(tmp_path):
    cases = {name: make() for name, make in FIXTURES.items()}
    for name, (ir, weights, inputs, expected) in cases.items():
        write_fixture(tmp_path / name, ir, weights, inputs, expected)
    code = f"""
        import numpy as np
        from pathlib import Path
        import rlx
        from rlx.cli import main
        root = Path({str(tmp_path)!r})
        for d in sorted(p for p in root.iterdir() if p.is_dir()):
            assert main(["build", str(d), "--verify"]) == 0, d
            outs = rlx.load(d / "bundle").run_flat([np.load(d / "x.npy")])
            for i, o in enumerate(outs):
                np.save(d / f"got{{i}}.npy", np.asarray(o))
        """
    for name, (_, _, inputs, _) in cases.items():
        np.save(tmp_path / name / "x.npy", inputs["x"])
    proc = run_without_torch(code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "using the stored dtype of 1 weight(s)" in proc.stdout and "scale (f64→f32)" in proc.stdout
    for name, (_, _, _, expected) in cases.items():
        for i, want in enumerate(expected):
            got = np.load(tmp_path / name / f"got{i}.npy")
            if isinstance(want, np.ndarray):
                assert got.shape == want.shape and got.dtype == want.dtype, name
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
            else:
                assert got == want, name


def test_round_trip_import_then_build_without_torch(tmp_path):
    model, inputs = load_example("transformer").get_model()
    rlx.from_torch(model, inputs, tmp_path / "full")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("torch-ir.json", "weights.safetensors", "reference.safetensors"):
        shutil.copy(tmp_path / "full" / name, src / name)
    proc = run_without_torch(
        f"""
        from rlx.cli import main
        assert main(["build", {str(src)!r}, "-o", {str(tmp_path / "built")!r}, "--verify"]) == 0
        assert main(["verify", {str(tmp_path / "built")!r}]) == 0
        assert main(["build", {str(src)!r}, "--verify"]) == 0
        assert main(["build", {str(src)!r}]) == 2   # bundle exists now: needs --force
        assert main(["build", {str(src)!r}, "--force"]) == 0
        """
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "parity: PASS" in proc.stdout
    built = (tmp_path / "built" / "bundle" / "program.json").read_bytes()
    assert built == (tmp_path / "full" / "bundle" / "program.json").read_bytes()
    assert (src / "bundle" / "program.json").read_bytes() == built


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda ir: ir.update(version=3), "version: this rlx reads version 1, found 3; upgrade rlx"),
        (lambda ir: ir["nodes"][1]["args"].__setitem__(2, {"ref": "nope"}), "nodes[1].args[2]: reference to 'nope'"),
        (
            lambda ir: ir["weights"][0].update(shape=[5, 4]),
            "tensor 'fc.weight' has shape [5, 3], torch-ir.json declares [5, 4]",
        ),
    ],
)
def test_build_errors_are_one_line(tmp_path, capsys, mutate, message):
    ir, weights, inputs, expected = linear_fixture()
    mutate(ir)
    write_fixture(tmp_path / "d", ir, weights, inputs, expected)
    assert main(["build", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "d" / "bundle").exists()


def test_missing_weight_and_missing_dir(tmp_path, capsys):
    ir, weights, inputs, expected = linear_fixture()
    write_fixture(tmp_path / "d", ir, {"fc.weight": weights["fc.weight"]}, inputs, expected)
    assert main(["build", str(tmp_path / "d")]) == 2
    assert "missing tensor(s) 'fc.bias'" in capsys.readouterr().err
    assert main(["build", str(tmp_path / "nowhere")]) == 2
    assert "no torch-ir.json here" in capsys.readouterr().err


def test_build_reports_parity_failure_with_exit_1(tmp_path, capsys):
    ir, weights, inputs, expected = linear_fixture()
    write_fixture(tmp_path / "d", ir, weights, inputs, [expected[0] + 1])
    assert main(["build", str(tmp_path / "d"), "--verify"]) == 1
    assert "parity: FAIL" in capsys.readouterr().out


def test_reference_dynamic_marks_without_symbol_table(tmp_path):
    ir, weights, inputs, expected = linear_fixture()
    ir["inputs"][0]["dynamic"] = [0, -1]
    for node in ir["nodes"][1:]:
        node["out"]["sym_shape"] = ["s0", 5]
    write_fixture(tmp_path / "d", ir, weights, inputs, expected)
    report = rlx.build(tmp_path / "d", verify=True)
    assert report.passed
    model = rlx.load(tmp_path / "d")
    x = f32(7, 3)
    np.testing.assert_allclose(model(x), x @ weights["fc.weight"].T + weights["fc.bias"], rtol=1e-5, atol=1e-6)
