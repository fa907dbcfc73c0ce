"""Generated packages: standalone (no torch, no rlx), parity with PyTorch, deterministic, ruff-clean."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from standalone import (
    BLOCK_BOTH,
    assert_dynamic_package_runs,
    assert_parity,
    assert_same_files_and_ruff_clean,
    run_standalone,
    write_example_packages,
)

import rlx

from helpers import assert_arrays_match, load_example


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    return write_example_packages(tmp_path_factory.mktemp("pkg"), "numpy")


def test_packages_run_standalone_with_parity(packages):
    assert_parity(run_standalone(packages))


def test_generated_code_is_deterministic_and_ruff_clean(packages, tmp_path):
    model, inputs = load_example("transformer").get_model()
    rlx.from_torch(model, inputs, tmp_path / "again", emit=("bundle", "package"), verify=False)
    assert_same_files_and_ruff_clean(packages["transformer", "high"], tmp_path / "again" / "rlx_transformer")


def test_model_code_reads_like_the_source(packages):
    code = (packages["transformer", "high"] / "rlx_transformer" / "model.py").read_text()
    assert "def forward(params, x, padding_mask):" in code
    assert "params['blocks.0.attn.qkv.weight']" in code  # weights by state_dict name
    assert "# aten.scaled_dot_product_attention.default (" in code
    assert "-> [2,4,8,16] f32" in code
    assert "# Decomposition level: high" in code and "aten.addmm.default" in code
    assert "import torch" not in code and "import rlx" not in code


def test_dynamic_shapes_stay_symbolic_in_the_package(tmp_path):
    assert_dynamic_package_runs(tmp_path, "numpy")


class HalfToInt(torch.nn.Module):
    """Half floats (out of range too) to integers: PyTorch goes through float32 and wraps."""

    def forward(self, x):
        h, b = x.half(), x.bfloat16()
        return h.to(torch.int8), b.to(torch.int8), b.to(torch.uint8), h.to(torch.int64), b.to(torch.int32)


@pytest.mark.parametrize("style", ["numpy", "jax"])
def test_package_casts_half_floats_to_integers_as_pytorch(tmp_path, style):
    if style == "jax":
        pytest.importorskip("jax")
    x = torch.tensor([0.0, 2.7, -3.5, 255.0, 300.5, -129.0, 1000.0, 70000.0])
    out = tmp_path / "out"
    rlx.from_torch(HalfToInt(), (x,), out, emit=("bundle", "package"), emit_style=style, verify=False)
    np.save(tmp_path / "x.npy", x.numpy())
    script = BLOCK_BOTH + textwrap.dedent(
        f"""
        import numpy as np
        sys.path.insert(0, {str(out / "rlx_half_to_int")!r})
        import rlx_half_to_int as m
        got = m.load()(np.load({str(tmp_path / "x.npy")!r}))
        np.savez({str(tmp_path / "got.npz")!r}, *[np.asarray(g) for g in got])
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(tmp_path / "got.npz")
    with torch.no_grad():
        want = HalfToInt()(x)
    for k, w in enumerate(want):
        assert got[f"arr_{k}"].dtype == w.numpy().dtype, k
        np.testing.assert_array_equal(got[f"arr_{k}"], w.numpy(), err_msg=f"[{style}] output {k}")


class Factorisations(torch.nn.Module):
    """LAPACK's geqrf, Bunch-Kaufman LDLᵀ (factor and solve: scipy's LAPACK, called back from JAX)
    and the eigenvalues of a general matrix, each a Call of its own."""

    def forward(self, a, s, b):
        ld, pivots, info = torch.linalg.ldl_factor_ex(s)
        solved = torch.linalg.ldl_solve(ld, pivots, b)
        return (*torch.geqrf(a), ld, pivots, info, solved, torch.linalg.eigvals(a[..., :3, :]))


@pytest.mark.parametrize("style", ["numpy", "jax"])
def test_package_runs_factorisations_as_pytorch(tmp_path, style):
    if style == "jax":
        pytest.importorskip("jax")
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2, 4, 4, generator=g)
    inputs = (torch.randn(2, 5, 3, generator=g), s + s.mT, torch.randn(4, 2, generator=g))
    out = tmp_path / "out"
    rlx.from_torch(Factorisations(), inputs, out, emit=("bundle", "package"), emit_style=style, verify=False)
    assert '"scipy>=1.10"' in (out / "rlx_factorisations" / "pyproject.toml").read_text()
    for k, t in enumerate(inputs):
        np.save(tmp_path / f"x{k}.npy", t.numpy())
    script = BLOCK_BOTH + textwrap.dedent(
        f"""
        import numpy as np
        sys.path.insert(0, {str(out / "rlx_factorisations")!r})
        import rlx_factorisations as m
        got = m.load()(*[np.load({str(tmp_path)!r} + f"/x{{k}}.npy") for k in range(3)])
        np.savez({str(tmp_path / "got.npz")!r}, *[np.asarray(g) for g in got])
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(tmp_path / "got.npz")
    with torch.no_grad():
        want = Factorisations()(*inputs)
    for k, w in enumerate(want):
        assert_arrays_match(got[f"arr_{k}"], w.numpy(), f"[{style}] output {k}")
