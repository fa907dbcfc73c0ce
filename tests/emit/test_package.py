"""Generated packages: standalone (no torch, no rlx), parity with PyTorch, deterministic, ruff-clean."""

from __future__ import annotations

import pytest
from standalone import (
    assert_dynamic_package_runs,
    assert_parity,
    assert_same_files_and_ruff_clean,
    run_standalone,
    write_example_packages,
)

import rlx

from helpers import load_example


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
