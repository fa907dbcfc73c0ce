"""The ``rlx`` command: success paths and exit codes (0 ok, 1 parity failure, 2 bad input)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlx.cli import main
from rlx.formats import safetensors_io

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.fixture(scope="module")
def mlp_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "mlp"
    assert main(["import", str(EXAMPLES / "mlp.py"), "-o", str(out)]) == 0
    return out


def test_import_writes_the_artifacts(mlp_out, capsys):
    for rel in (
        "torch-ir.json",
        "weights.safetensors",
        "reference.safetensors",
        "report.json",
        "bundle/program.json",
        "bundle/weights.safetensors",
        "bundle/meta.json",
    ):
        assert (mlp_out / rel).is_file(), rel


def test_import_prints_steps_and_parity(tmp_path, capsys):
    assert main(["import", str(EXAMPLES / "mlp.py"), "-o", str(tmp_path / "o"), "--decomposition", "core"]) == 0
    out = capsys.readouterr().out
    for step in ("exported with torch.export", "lowered", "wrote", "checked parity"):
        assert step in out
    assert "parity: PASS" in out


def test_run_writes_npy_outputs(mlp_out, tmp_path, capsys):
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(mlp_out / "bundle"), "--input", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "r")]) == 0
    got = np.load(tmp_path / "r" / "out0.npy")
    assert got.shape == (4, 10) and got.dtype == np.float32
    assert "out0: shape [4, 10] dtype float32" in capsys.readouterr().out


def test_inspect_bundle_and_torch_ir(mlp_out, capsys):
    assert main(["inspect", str(mlp_out)]) == 0
    out = capsys.readouterr().out
    assert "x" in out and "[4, 32]" in out and "parameters: 2,890" in out and "aten.addmm.default" in out
    assert main(["inspect", str(mlp_out / "torch-ir.json")]) == 0
    assert "aten.gelu.default" in capsys.readouterr().out


STRUCTURED_MODEL = """
import torch


class Structured(torch.nn.Module):
    def forward(self, x):
        return {"scores": x.sum(-1), "pair": (x * 2, x.mean(0)), "plain": x + 1}


def get_model():
    return Structured(), (torch.randn(3, 4),)
"""


def test_inspect_names_outputs_by_where_the_model_returns_them(tmp_path, capsys):
    (tmp_path / "structured.py").write_text(STRUCTURED_MODEL)
    assert main(["import", str(tmp_path / "structured.py"), "-o", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "out")]) == 0
    listed = capsys.readouterr().out.split("outputs:\n")[1].split("parameters:")[0].splitlines()
    assert [line.split()[:2] for line in listed] == [
        ["scores", "[3]"], ["pair[0]", "[3,"], ["pair[1]", "[4]"], ["plain", "[3,"]
    ]  # fmt: skip


def test_verify_passes_then_fails_on_tampered_reference(mlp_out, tmp_path, capsys):
    assert main(["verify", str(mlp_out)]) == 0
    tensors, _ = safetensors_io.read(mlp_out / "reference.safetensors")
    bad = {k: np.array(v) for k, v in tensors.items()}
    bad["out::0"] = bad["out::0"] + 1.0
    safetensors_io.write(tmp_path / "bad.safetensors", bad)
    assert main(["verify", str(mlp_out), "--reference", str(tmp_path / "bad.safetensors")]) == 1
    assert "parity: FAIL" in capsys.readouterr().out


def _rlx(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlx", *args], capture_output=True, text=True, timeout=300)


def test_missing_model_file_exits_2(tmp_path):
    proc = _rlx("import", str(tmp_path / "nope.py"), "-o", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no such file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_model_file_without_model_exits_2(tmp_path, capsys):
    (tmp_path / "empty.py").write_text("x = 1\n")
    assert main(["import", str(tmp_path / "empty.py"), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "neither `model` + `example_inputs` nor `get_model()`" in err
    assert not (tmp_path / "o").exists()


def test_existing_output_needs_force(mlp_out, capsys):
    assert main(["import", str(EXAMPLES / "mlp.py"), "-o", str(mlp_out)]) == 2
    assert "--force" in capsys.readouterr().err


def test_run_with_wrong_shape_exits_2(mlp_out, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((3, 32), np.float32))
    assert main(["run", str(mlp_out), "--input", f"x={tmp_path / 'x.npy'}"]) == 2
    assert "input 'x' has shape [3, 32], expected [4, 32]" in capsys.readouterr().err


def test_run_on_missing_bundle_exits_2(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("rlx: ")


def test_usage_error_is_one_line(capsys):
    assert main(["import"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rlx: ")


STATEFUL_MODEL = """
import torch


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 2


def get_model():
    return Counter(), (torch.ones(3),)
"""


def test_import_strict_keeps_buffers_as_state(tmp_path, capsys):
    src = tmp_path / "counter.py"
    src.write_text(STATEFUL_MODEL)
    assert main(["import", str(src), "-o", str(tmp_path / "o"), "--strict"]) == 0
    assert "parity: PASS" in capsys.readouterr().out
    import rlx

    model = rlx.load(tmp_path / "o")
    outs = [model(np.ones(3, np.float32)) for _ in range(3)]
    np.testing.assert_array_equal(outs[-1], np.full(3, 6.0, np.float32))
