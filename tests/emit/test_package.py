"""Generated packages: standalone (no torch, no rlx), parity with PyTorch, deterministic, ruff-clean."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import rlx
from rlx.emit.package import package_name

from helpers import BLOCK_TORCH, load_example

NAMES = ("mlp", "transformer", "cnn", "decoder_lm")
LEVELS = ("aten", "high", "core")
# Block rlx as well as torch: the package must stand alone.
BLOCK_BOTH = BLOCK_TORCH.replace('name == "torch" or name.startswith("torch.")',
                                 'name.split(".")[0] in ("torch", "rlx")')  # fmt: skip


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("pkg")
    outs = {}
    for name in NAMES:
        model, inputs = load_example(name).get_model()
        for level in LEVELS:
            out = root / f"{name}-{level}"
            rlx.from_torch(model, inputs, out, decomposition=level, emit=("bundle", "package"))
            outs[name, level] = out
    return outs


def test_packages_run_standalone_with_parity(packages, tmp_path):
    jobs = [(str(out), package_name(_model_name(out))) for out in packages.values()]
    script = BLOCK_BOTH + textwrap.dedent(
        f"""
        import importlib, json
        import numpy as np
        results = {{}}
        for out, pkg in {jobs!r}:
            sys.path.insert(0, out + "/" + pkg)
            module = importlib.import_module(pkg)
            ref, _ = module._ops.read_safetensors(out + "/reference.safetensors")
            model = module.load()
            main = importlib.import_module(pkg + ".__main__")
            got = model(*[ref["in::" + n] for n in main.INPUTS])
            want = ref["out::0"]
            results[out] = [list(got.shape), str(got.dtype), float(np.max(np.abs(got - want))),
                            float(np.max(np.abs(want))), str(want.dtype)]
            sys.path.pop(0)
            for key in [k for k in sys.modules if k == pkg or k.startswith(pkg + ".")]:
                del sys.modules[key]
        assert not [k for k in sys.modules if k.split(".")[0] in ("torch", "rlx")]
        print(json.dumps(results))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(NAMES) * len(LEVELS)
    for out, (_shape, dtype, err, scale, want_dtype) in results.items():
        assert dtype == want_dtype, out
        assert err <= 1e-4 * max(1.0, scale), f"{out}: max abs err {err}"


def _model_name(out: Path) -> str:
    return json.loads((out / "bundle" / "meta.json").read_text())["model_name"]


def test_generated_code_is_deterministic_and_ruff_clean(packages, tmp_path):
    model, inputs = load_example("transformer").get_model()
    again = tmp_path / "again"
    rlx.from_torch(model, inputs, again, emit=("bundle", "package"))
    first = packages["transformer", "high"] / "rlx_transformer"
    second = again / "rlx_transformer"
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for rel in files:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel
    ruff = Path(sys.executable).parent / "ruff"
    proc = subprocess.run([str(ruff), "check", "--no-cache", str(second)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_model_code_reads_like_the_source(packages):
    code = (packages["transformer", "high"] / "rlx_transformer" / "rlx_transformer" / "model.py").read_text()
    assert "def forward(params, x, padding_mask):" in code
    assert "params['blocks.0.attn.qkv.weight']" in code  # weights by state_dict name
    assert "# aten.scaled_dot_product_attention.default (" in code
    assert "-> [2,4,8,16] f32" in code
    assert "# Decomposition level: high" in code and "aten.addmm.default" in code
    assert "import torch" not in code and "import rlx" not in code


def test_dynamic_shapes_stay_symbolic_in_the_package(tmp_path):
    model, inputs = load_example("decoder_lm").get_model()
    dim = torch.export.Dim
    out = tmp_path / "lm"
    rlx.from_torch(model, inputs, out, emit=("bundle", "package"),
                   dynamic_shapes={"input_ids": {0: dim("batch", max=8), 1: dim("seq", max=64)}})  # fmt: skip
    code = (out / "rlx_decoder_lm" / "rlx_decoder_lm" / "model.py").read_text()
    assert "batch = input_ids.shape[0]" in code and "seq = input_ids.shape[1]" in code
    ids = np.random.default_rng(0).integers(0, 100, (3, 17))
    np.save(tmp_path / "ids.npy", ids)
    proc = subprocess.run(
        [sys.executable, "-m", "rlx_decoder_lm", "--input", f"input_ids={tmp_path / 'ids.npy'}", "-o", str(tmp_path / "r")],
        cwd=out / "rlx_decoder_lm", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "out0: shape [3, 17, 100] dtype float32" in proc.stdout
    with torch.no_grad():
        want = model(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "r" / "out0.npy"), want, rtol=1e-4, atol=1e-5)
