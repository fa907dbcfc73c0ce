"""Shared by the generated-package tests (numpy and JAX styles): write the examples' packages from
the per-process export cache, run them in a subprocess where neither torch nor rlx can be imported,
and check determinism, ruff and symbolic shapes."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

import rlx
from rlx.exporters.package.package import package_name, write_package
from rlx.formats import safetensors_io
from rlx.frontends.torch.tensors import tensor_to_numpy

from helpers import block_imports, exported_example, load_example

NAMES = ("mlp", "transformer", "cnn", "decoder_lm")
LEVELS = ("aten", "high", "core")
# Block rlx as well as torch: the package must stand alone.
BLOCK_BOTH = block_imports("torch", "rlx")


def write_example_packages(root: Path, style: str) -> dict[tuple[str, str], Path]:
    """Every example at every level as a package of ``style`` under ``root/<name>-<level>/``, with
    the example inputs and PyTorch's outputs beside it in ``reference.safetensors``."""
    outs = {}
    for name in NAMES:
        for level in LEVELS:
            exported, program = exported_example(name, level)
            out = root / f"{name}-{level}"
            write_package(program, exported.weights, out, decomposition=level, style=style)
            reference = {f"in::{k}": v for k, v in exported.inputs.items()}
            reference.update({f"out::{i}": v for i, v in enumerate(exported.outputs) if v is not None})
            safetensors_io.write(out / "reference.safetensors", reference)
            outs[name, level] = out / package_name(program.name)
    return outs


# Runs in the subprocess, per package: load() it, run it on the reference inputs. `extra` (a code
# fragment) may add checks that see `module`, `model`, `inputs` and `got`.
_RUN = """
import importlib, json
import numpy as np
results = {{}}
for key, root, pkg in {jobs!r}:
    sys.path.insert(0, root)
    module = importlib.import_module(pkg)
    ref, _ = module._ops.read_safetensors(root + "/../reference.safetensors")
    main = importlib.import_module(pkg + ".__main__")
    inputs = [ref["in::" + n] for n in main.INPUTS]
    model = module.load()
    got = model(*inputs)
    want = ref["out::0"]
    extra = []
{extra}
    g = np.asarray(got)
    results[key] = [list(g.shape), str(g.dtype), float(np.max(np.abs(g - want))), float(np.max(np.abs(want))),
                    str(want.dtype), extra]
    sys.path.pop(0)
    for name in [k for k in sys.modules if k == pkg or k.startswith(pkg + ".")]:
        del sys.modules[name]
assert not [k for k in sys.modules if k.split(".")[0] in ("torch", "rlx")]
print(json.dumps(results))
"""


def run_standalone(packages: dict[tuple[str, str], Path], extra: str = "") -> dict[str, list]:
    """Import and run every package in one subprocess with torch and rlx blocked; per package
    (keyed ``name-level``): shape, dtype, max abs error vs PyTorch, max |PyTorch|, its dtype, extras."""
    jobs = [(f"{n}-{lv}", str(path), path.name) for (n, lv), path in packages.items()]
    script = BLOCK_BOTH + textwrap.dedent(_RUN).format(jobs=jobs, extra=textwrap.indent(textwrap.dedent(extra), "    "))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_model_package(
    tmp_path: Path, model: torch.nn.Module, inputs: Sequence[torch.Tensor], style: str
) -> tuple[list[np.ndarray], Path]:
    """Convert ``model`` to a generated package of ``style``, run it on ``inputs`` in a subprocess
    where neither torch nor rlx can be imported, and return its outputs and the package's folder."""
    out = tmp_path / "out"
    rlx.from_torch(model, tuple(inputs), out, write=("bundle", "package"), package_style=style, verify=False)
    (pkg,) = [p for p in out.iterdir() if p.name.startswith("rlx_")]
    np.savez(tmp_path / "in.npz", *[tensor_to_numpy(t) for t in inputs])
    script = BLOCK_BOTH + textwrap.dedent(
        f"""
        import numpy as np
        sys.path.insert(0, {str(pkg)!r})
        import {pkg.name} as m
        data = np.load({str(tmp_path / "in.npz")!r})
        got = m.load()(*[data[f"arr_{{i}}"] for i in range({len(inputs)})])
        got = got if isinstance(got, (tuple, list)) else [got]
        np.savez({str(tmp_path / "got.npz")!r}, *[np.asarray(g) for g in got])
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(tmp_path / "got.npz")
    return [got[f"arr_{k}"] for k in range(len(got.files))], pkg


def assert_parity(results: dict[str, list]) -> None:
    assert len(results) == len(NAMES) * len(LEVELS)
    for key, (_shape, dtype, err, scale, want_dtype, _extra) in results.items():
        assert dtype == want_dtype, key
        assert err <= 1e-4 * max(1.0, scale), f"{key}: max abs err {err}"


def assert_same_files_and_ruff_clean(first: Path, second: Path) -> None:
    def files(root: Path) -> list[Path]:
        return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)

    assert files(first) == files(second)
    for rel in files(first):
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel
    ruff = Path(sys.executable).parent / "ruff"
    proc = subprocess.run([str(ruff), "check", "--no-cache", str(second)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@functools.cache
def _dynamic_lm() -> tuple[torch.nn.Module, dict]:
    model, _ = load_example("decoder_lm").get_model()
    dim = torch.export.Dim
    return model, {"input_ids": {0: dim("batch", max=8), 1: dim("seq", max=64)}}


def assert_dynamic_package_runs(tmp_path: Path, style: str) -> str:
    """decoder_lm exported with dynamic batch and sequence: the package reads both from its input
    and runs at a shape other than the example's; returns the generated model.py."""
    model, dynamic = _dynamic_lm()
    _, inputs = load_example("decoder_lm").get_model()
    out = tmp_path / "lm"
    rlx.from_torch(
        model, inputs, out, write=("bundle", "package"), package_style=style, dynamic_shapes=dynamic, verify=False
    )
    code = (out / "rlx_decoder_lm" / "rlx_decoder_lm" / "model.py").read_text()
    assert "batch = input_ids.shape[0]" in code and "seq = input_ids.shape[1]" in code
    ids = np.random.default_rng(0).integers(0, 100, (3, 17))  # the example is (2, 12)
    np.save(tmp_path / "ids.npy", ids)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlx_decoder_lm",
            "--input",
            f"input_ids={tmp_path / 'ids.npy'}",
            "-o",
            str(tmp_path / "r"),
        ],
        cwd=out / "rlx_decoder_lm",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "out0: shape [3, 17, 100] dtype float32" in proc.stdout
    with torch.no_grad():
        want = model(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "r" / "out0.npy"), want, rtol=1e-4, atol=1e-5)
    return code
