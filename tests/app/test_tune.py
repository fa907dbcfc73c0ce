"""``rlx tune`` / ``rlx.tune``: every installed engine × precision, each in its own process, checked
against PyTorch's outputs at the user's tolerance; the fastest passing choice in tuning.json, which
``rlx.load`` follows when it matches this machine (and an explicit engine overrides). Also the
onnxruntime engine's int8 precision, one of the candidates."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import rlx
from rlx.app.tune import judge, tune
from rlx.errors import BundleError, InputError, UsageError
from rlx.formats.layout import TUNING_FILE
from rlx.runtime.engines import supported_precisions
from rlx.runtime.tuning import FORMAT, machine

from helpers import load_example

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune") / "mlp"
    module, inputs = load_example("mlp").get_model()
    rlx.from_torch(module, inputs, out)
    with torch.no_grad():
        want = module(*inputs).numpy()
    return out, inputs[0].numpy(), want


def _tuning(out, engine, precision, **changes):
    """A tuning.json choosing (engine, precision), recorded on this machine unless ``changes`` say otherwise."""
    doc = {"format": FORMAT, "version": 1, "choice": {"engine": engine, "precision": precision, "threads": 1},
           "machine": machine([engine])}  # fmt: skip
    doc["machine"].update(changes)
    (out / "bundle" / TUNING_FILE).write_text(json.dumps(doc))


NAN = float("nan")
# (got, reference, cosine tolerance, passes, reason it fails)
JUDGE_CASES = [
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.001], 0.999, True, ""),
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.05], 0.999, False, "max err 5.000e-02 > 3.050e-02"),  # relative to scale 3.05
    ([100.0, 200.0], [100.5, 200.0], 0.999, True, ""),  # 0.5 ≤ 1e-2 × 200
    ([1.0, -1.0], [-1.0, 1.0], 0.999, False, "cosine -1.000000 < 0.999; max err 2.000e+00 > 1.000e-02"),
    ([1.0, NAN], [1.0, 2.0], 0.999, False, "NaN/inf positions differ"),
    ([1.0, NAN, float("inf")], [1.0, NAN, float("inf")], 0.999, True, ""),
    (np.array([1, 2, 3]), np.array([1, 2, 4]), 0.5, False, "values differ"),  # integers: exact
    (np.array([True, False]), np.array([True, False]), 0.5, True, ""),
    (np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0], np.float64), 0.5, False, "dtype differs"),
]


@pytest.mark.parametrize("got,want,tolerance,passes,reason", JUDGE_CASES)
def test_parity_rule_at_the_users_tolerance(got, want, tolerance, passes, reason):
    got = np.asarray(got, dtype=None if isinstance(got, np.ndarray) else np.float32)
    want = np.asarray(want, dtype=None if isinstance(want, np.ndarray) else np.float32)
    (check,) = judge("set", [got], [want], tolerance, 1e-2, set())
    assert check.passed is passes and check.reason == reason, check


def test_tune_writes_the_fastest_passing_choice_and_load_follows_it(mlp, capsys):
    from rlx.cli import main

    out, x, want = mlp
    engines = ["numpy", "onnxruntime"] + (["openvino"] if "openvino" in _installed() else [])
    assert main(["tune", str(out), "--engines", ",".join(engines), "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = [(e, p) for e in engines for p in supported_precisions(e)]
    progress = [line for line in lines if line.startswith("[")]
    assert [p.split(":")[0] for p in progress] == [
        f"[{k + 1}/{len(expected)}] {e} {p}" for k, (e, p) in enumerate(expected)
    ]
    assert any(line.startswith("fastest within tolerance: ") for line in lines)
    doc = json.loads((out / "bundle" / TUNING_FILE).read_text())
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["versions"]["onnxruntime"]
    assert doc["tolerance"] == {"cosine": 0.999, "max_error": 0.01}
    assert len(doc["candidates"]) == len(expected)
    choice = doc["choice"]
    fastest = min((c for c in doc["candidates"] if c["passed"]), key=lambda c: c["median_ms"])
    assert (choice["engine"], choice["precision"]) == (fastest["engine"], fastest["precision"])
    model = rlx.load(out)
    assert (model.engine.name, model.precision) == (choice["engine"], choice["precision"])
    assert model.tuning.startswith("tuned by ")
    got = model(x)
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    assert g @ w / (np.linalg.norm(g) * np.linalg.norm(w)) >= 0.999
    assert rlx.load(out, engine="numpy").engine.name == "numpy"  # an explicit engine wins


def test_tune_finishes_in_under_two_minutes_and_names_failures(mlp):
    out, _, _ = mlp
    # A tolerance no lower precision meets: each fails, naming the output and by how much.
    report = tune(out, tolerance=0.99999999, max_error=1e-7, engines=["onnxruntime"], write=False)
    assert report.seconds < 120
    f32, int8 = report.candidates
    assert f32.passed or f32.failures  # (float32 on another engine may round differently)
    assert not int8.passed
    assert int8.verdict().startswith("FAIL reference out0: cosine ")
    assert "max err" in int8.verdict() and int8.failures[0].max_error > 1e-7


def test_user_inputs_are_checked_too(mlp, tmp_path):
    out, x, _ = mlp
    np.savez(tmp_path / "more.npz", x=x * 3)
    report = tune(out, engines=["numpy"], inputs=tmp_path / "more.npz", write=False)
    assert report.inputs[1].endswith("(numpy engine, f32)") and report.candidates[0].passed
    np.savez(tmp_path / "bad.npz", y=x)
    with pytest.raises(InputError, match=r"^--inputs .*bad.npz: set 0 has no array for input\(s\) x$"):
        tune(out, engines=["numpy"], inputs=tmp_path / "bad.npz", write=False)


@pytest.mark.parametrize(
    "changes,why",
    [
        ({"cpu": "Another CPU 9000"}, "it was measured on another CPU (Another CPU 9000)"),
        (
            {"versions": {"rlx": "0.0.1", "numpy": "1.0", "onnxruntime": "0.1"}},
            "package versions changed (rlx 0.0.1 -> ",
        ),
    ],
)
def test_a_tuning_from_another_machine_is_ignored(mlp, changes, why):
    out, x, _ = mlp
    _tuning(out, "onnxruntime", "f32", **changes)
    model = rlx.load(out)
    assert model.engine.name == "numpy" and why in model.tuning
    _tuning(out, "onnxruntime", "f32")
    assert rlx.load(out).engine.name == "onnxruntime"


def test_a_malformed_tuning_is_refused_in_one_line(mlp):
    out, _, _ = mlp
    (out / "bundle" / TUNING_FILE).write_text('{"choice": 3}')
    with pytest.raises(BundleError, match="not a tuning file written by `rlx tune`"):
        rlx.load(out)
    (out / "bundle" / TUNING_FILE).unlink()
    assert rlx.load(out).engine.name == "numpy"


def test_int8_on_onnxruntime_is_close_not_exact(mlp):
    out, x, _ = mlp
    int8 = rlx.load(out, engine="onnxruntime", precision="int8")
    f32 = rlx.load(out, engine="onnxruntime")
    assert (int8.precision, f32.precision) == ("int8", "f32")
    g, w = int8(x).astype(np.float64).ravel(), f32(x).astype(np.float64).ravel()
    assert g @ w / (np.linalg.norm(g) * np.linalg.norm(w)) > 0.999
    assert np.abs(g - w).max() > 0  # the MatMuls ran in int8


def test_cli_refuses_an_unknown_engine_in_one_line(mlp, capsys):
    from rlx.cli import main

    assert main(["tune", str(mlp[0]), "--engines", "tpu"]) == 2
    assert (
        capsys.readouterr().err.strip() == "rlx: unknown engine(s) tpu; choose from numpy, jax, onnxruntime, openvino"
    )
    with pytest.raises(UsageError, match="--tolerance is a cosine"):
        tune(mlp[0], tolerance=2.0)


def _installed():
    import importlib.util

    return {e for e in ("openvino", "jax") if importlib.util.find_spec(e) is not None}
