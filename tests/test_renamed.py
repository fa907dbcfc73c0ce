"""Renamed keywords and flags: the new spelling (engine, write, package_style) everywhere, the old
one (backend, emit, emit_style) still working with a DeprecationWarning (a note on the CLI), and
passing both refused in one line."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import rlx
from rlx.cli import main
from rlx.errors import UsageError

EXAMPLES = Path(__file__).parent.parent / "examples"


class Affine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x))


X = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("renamed") / "affine"
    with pytest.warns(DeprecationWarning) as caught:  # the old spellings still convert
        report = rlx.from_torch(Affine(), (X,), out, emit=("bundle", "package"), emit_style="numpy", backend="numpy")
    assert report.passed and (out / "bundle" / "program.json").is_file()
    assert any(p.name.startswith("rlx_") for p in out.iterdir())  # emit= asked for the package
    said = sorted(str(w.message) for w in caught)
    assert said == [
        "rlx.from_torch: backend= is deprecated; use engine=",
        "rlx.from_torch: emit= is deprecated; use write=",
        "rlx.from_torch: emit_style= is deprecated; use package_style=",
    ]
    assert all(w.filename == __file__ for w in caught)  # pointed at the caller
    return out


def _expected() -> np.ndarray:
    with torch.no_grad():
        return Affine()(X).numpy()


@pytest.mark.parametrize("keyword", ["engine", "backend"])
def test_load_takes_engine_and_the_old_backend(out: Path, keyword: str) -> None:
    if keyword == "backend":
        with pytest.warns(DeprecationWarning, match=r"^rlx\.load: backend= is deprecated; use engine=$"):
            model = rlx.load(out, backend="numpy")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)  # the new spelling warns of nothing
            model = rlx.load(out, engine="numpy")
    assert model.engine.name == "numpy"
    np.testing.assert_allclose(model(X.numpy()), _expected(), rtol=1e-5, atol=1e-6)


def test_model_backend_attribute_is_the_engine_name(out: Path) -> None:
    model = rlx.load(out, engine="numpy")
    with pytest.warns(DeprecationWarning, match=r"model\.engine\.name"):
        assert model.backend == model.engine.name == "numpy"


@pytest.mark.parametrize(
    "call",
    [
        lambda out: rlx.load(out, engine="numpy", backend="numpy"),
        lambda out: rlx.Model(*_program(out), engine="jax", backend="numpy"),
        lambda out: rlx.build(out, out / "again", write=("bundle", "onnx"), emit=("bundle",)),
        lambda out: rlx.build(out, out / "again", package_style="jax", emit_style="numpy"),
        lambda out: rlx.from_onnx(out / "model.onnx", out / "o", engine="jax", backend="numpy"),
    ],
    ids=["load", "Model", "build-write", "build-style", "from_onnx"],
)
def test_both_spellings_are_refused_in_one_line(out: Path, call) -> None:
    with pytest.raises(UsageError, match=r"^rlx\.\w+: pass \w+= only \(\w+= is its deprecated spelling\)$"):
        call(out)


def test_cli_takes_the_new_flags_and_hides_the_old(out: Path, tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "x.npy", X.numpy())
    args = ["run", str(out), "--input", f"x={tmp_path / 'x.npy'}", "-o"]
    assert main([*args, str(tmp_path / "new"), "--engine", "numpy"]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert main([*args, str(tmp_path / "old"), "--backend", "numpy"]) == 0
    assert capsys.readouterr().err == "rlx: --backend is deprecated; use --engine\n"
    for run in ("new", "old"):
        np.testing.assert_allclose(np.load(tmp_path / run / "out0.npy"), _expected(), rtol=1e-5, atol=1e-6)
    assert main([*args, str(tmp_path / "both"), "--engine", "numpy", "--backend", "numpy"]) == 2
    assert capsys.readouterr().err == "rlx: rlx run: pass --engine only (--backend is its deprecated spelling)\n"
    for command, hidden in (("run", "--backend"), ("build", "--emit"), ("import", "--emit-style")):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert hidden not in capsys.readouterr().out


def test_cli_build_old_emit_flags_still_write(out: Path, tmp_path: Path, capsys) -> None:
    dest = tmp_path / "b"
    assert main(["build", str(out), "-o", str(dest), "--emit", "bundle,package", "--emit-style", "numpy"]) == 0
    err = capsys.readouterr().err
    assert "rlx: --emit is deprecated; use --write" in err and "--emit-style is deprecated" in err
    assert (dest / "bundle" / "program.json").is_file() and any(p.name.startswith("rlx_") for p in dest.iterdir())
    assert main(["build", str(out), "-o", str(tmp_path / "c"), "--write", "bundle", "--emit", "bundle"]) == 2


def _program(out: Path) -> tuple:
    from rlx.formats.bundle import read_bundle

    program, weights, meta = read_bundle(out)
    return program, weights, meta
