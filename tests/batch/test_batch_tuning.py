"""``rlx batch`` and ``rlx run`` follow the bundle's tuning.json as ``rlx.load`` does: the tuned engine
and precision where it matches this machine, an explicit engine always wins, and a tuning.json that
does not match falls back to numpy with one line on stderr."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import rlx.batch
from conftest import torch_outputs
from rlx.cli import main
from rlx.formats.layout import TUNING_FILE
from rlx.runtime.tuning import FORMAT, machine

pytest.importorskip("onnxruntime")


@pytest.fixture
def tuned(two_heads, tmp_path):
    """A copy of the two-heads bundle (the shared one stays untuned) and its inputs."""
    model, bundle = two_heads
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    x = np.random.default_rng(5).standard_normal((40, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return model, copy, x


def write_tuning(bundle, engine: str, precision: str, **machine_changes) -> None:
    doc = {"format": FORMAT, "version": 1, "choice": {"engine": engine, "precision": precision, "threads": 1},
           "machine": {**machine([engine]), **machine_changes}}  # fmt: skip
    (bundle / TUNING_FILE).write_text(json.dumps(doc))


def manifest_engine(out) -> str:
    return json.loads((out / "_manifest.json").read_text())["job"]["engine"]


CASES = [
    # (tuning.json's choice, machine changes, engine= given, engine that runs, stderr)
    (("onnxruntime", "f32"), {}, None, "onnxruntime", ""),
    (("onnxruntime", "int8"), {}, None, "onnxruntime int8", ""),
    (("onnxruntime", "f32"), {}, "numpy", "numpy", ""),  # an explicit engine wins
    (("onnxruntime", "f32"), {"cpu": "Another CPU 9000"}, None, "numpy",
     "it was measured on another CPU (Another CPU 9000); running the numpy engine"),
]  # fmt: skip


@pytest.mark.parametrize("choice,changes,engine,runs,stderr", CASES)
def test_batch_follows_tuning_json(tuned, tmp_path, capsys, choice, changes, engine, runs, stderr):
    model, bundle, x = tuned
    write_tuning(bundle, *choice, **changes)
    rlx.batch.run(bundle, tmp_path / "x.npy", tmp_path / "out", batch_size=16, engine=engine, progress=False)
    assert manifest_engine(tmp_path / "out") == runs
    err = capsys.readouterr().err
    if stderr:
        assert err.count("\n") == 1 and err.startswith(f"rlx: {bundle / TUNING_FILE} ignored: ") and stderr in err
    else:
        assert err == ""
    got = pq.read_table(tmp_path / "out").column("logits").combine_chunks().to_numpy_ndarray()
    want = torch_outputs(model, x)["logits"]
    tol = 5e-2 if "int8" in runs else 1e-5  # int8: close, not exact (the cosine check is rlx tune's)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_a_rerun_after_tuning_is_refused_not_mixed(tuned, tmp_path):
    """Shards computed by two engines are not one run: resuming with another tuned engine is refused."""
    _, bundle, _ = tuned
    rlx.batch.run(bundle, tmp_path / "x.npy", tmp_path / "out", batch_size=16, progress=False)
    assert manifest_engine(tmp_path / "out") == "numpy"
    write_tuning(bundle, "onnxruntime", "f32")
    with pytest.raises(rlx.errors.UsageError, match=r"holds a run of another job \(differs in engine\)"):
        rlx.batch.run(bundle, tmp_path / "x.npy", tmp_path / "out", batch_size=16, progress=False)


def test_cli_batch_and_run_say_in_one_line_that_tuning_was_ignored(tuned, tmp_path, capsys):
    _, bundle, x = tuned
    write_tuning(bundle, "onnxruntime", "f32", versions={"rlx": "0.0.1"})
    args = ["batch", str(bundle), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out")]
    assert main(args) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "ignored: package versions changed (rlx 0.0.1 -> " in err[0], err
    np.save(tmp_path / "one.npy", x[:4])
    assert main(["run", str(bundle), "-i", f"features={tmp_path / 'one.npy'}"]) == 0
    captured = capsys.readouterr()
    assert captured.err == err[0] + "\n" and captured.out.startswith("out0: shape [4, 3]")
    assert main(["batch", str(bundle), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "o2"),
                 "--engine", "onnxruntime", "--precision", "int8"]) == 0  # fmt: skip
    assert capsys.readouterr().err == "" and manifest_engine(tmp_path / "o2") == "onnxruntime int8"
