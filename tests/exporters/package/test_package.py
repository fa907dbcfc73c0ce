"""Generated packages: standalone (no torch, no rlx), parity with PyTorch, deterministic, ruff-clean."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from standalone import (
    assert_dynamic_package_runs,
    assert_parity,
    assert_same_files_and_ruff_clean,
    run_model_package,
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
    rlx.from_torch(model, inputs, tmp_path / "again", write=("bundle", "package"), verify=False)
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
    got, _ = run_model_package(tmp_path, HalfToInt(), (x,), style)
    with torch.no_grad():
        want = HalfToInt()(x)
    for k, w in enumerate(want):
        assert got[k].dtype == w.numpy().dtype, k
        np.testing.assert_array_equal(got[k], w.numpy(), err_msg=f"[{style}] output {k}")


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
    got, pkg = run_model_package(tmp_path, Factorisations(), inputs, style)
    assert '"scipy>=1.10"' in (pkg / "pyproject.toml").read_text()
    with torch.no_grad():
        want = Factorisations()(*inputs)
    for k, w in enumerate(want):
        assert_arrays_match(got[k], w.numpy(), f"[{style}] output {k}")
