"""Generated packages in the JAX style: standalone (no torch, no rlx), parity with PyTorch,
``jax.jit(forward)`` works, deterministic, ruff-clean, dynamic shapes read at trace time."""

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
from rlx.exporters.package.package import write_package

from helpers import load_example

jax = pytest.importorskip("jax")

# In the subprocess, per package: the user's own jax.jit of the plain forward gives the same result.
JIT_FORWARD = """
import jax
with module._ops.x64():
    jitted = jax.jit(module.model.forward)(model.params, *inputs)
extra.append(type(got).__module__.split(".")[0])
extra.append(float(np.max(np.abs(np.asarray(jitted) - np.asarray(got)))))
"""


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    return write_example_packages(tmp_path_factory.mktemp("jaxpkg"), "jax")


def test_packages_run_standalone_with_parity(packages):
    results = run_standalone(packages, JIT_FORWARD)
    assert_parity(results)
    for key, (*_, (array_module, jit_diff)) in results.items():
        assert array_module in ("jax", "jaxlib"), f"{key}: the model returned a {array_module} array"
        assert jit_diff == 0.0, f"{key}: jax.jit(forward) differs from the model by {jit_diff}"


def test_generated_code_is_deterministic_and_ruff_clean(packages, tmp_path):
    model, inputs = load_example("transformer").get_model()
    rlx.from_torch(model, inputs, tmp_path / "again", write=("bundle", "package"), package_style="jax", verify=False)
    assert_same_files_and_ruff_clean(packages["transformer", "high"], tmp_path / "again" / "rlx_transformer")


def test_model_code_is_jax(packages):
    root = packages["transformer", "high"]
    code = (root / "rlx_transformer" / "model.py").read_text()
    assert "import jax.numpy as jnp" in code and "import numpy" not in code
    assert "def forward(params, x, padding_mask):" in code
    assert "params['blocks.0.attn.qkv.weight']" in code
    assert 'jnp.matmul(view, permute, precision="highest")' in code
    assert "_ops.attention(" in code and "# aten.scaled_dot_product_attention.default (" in code
    assert "# Decomposition level: high" in code
    assert "import torch" not in code and "import rlx" not in code
    assert '"jax>=' in (root / "pyproject.toml").read_text()
    ops = (root / "rlx_transformer" / "_ops" / "__init__.py").read_text()
    assert "from .kernels.jax.kernels import KERNELS" in ops


def test_cli_build_writes_the_jax_package(tmp_path, capsys):
    """`rlx build DIR --write bundle,package --package-style jax` (torch-free), in place: the package
    lands in DIR next to the bundle."""
    from rlx.cli import main

    model, inputs = load_example("mlp").get_model()
    rlx.export(model, inputs, tmp_path / "m")
    assert main(["build", str(tmp_path / "m"), "--write", "bundle,package", "--package-style", "jax", "--verify"]) == 0
    code = (tmp_path / "m" / "rlx_mlp" / "rlx_mlp" / "model.py").read_text()
    assert "import jax.numpy as jnp" in code and (tmp_path / "m" / "bundle" / "program.json").is_file()
    assert "parity: PASS" in capsys.readouterr().out


def test_dynamic_shapes_stay_symbolic_in_the_package(tmp_path):
    code = assert_dynamic_package_runs(tmp_path, "jax")
    assert "jnp." in code


@pytest.mark.slow
def test_core_call_programs_as_packages(tmp_path):
    """The JAX engine's per-Call programs, generated as JAX packages (their jnp expressions, not
    only the kernels), match PyTorch. In-process: standalone imports are checked above."""
    import importlib
    import sys

    import numpy as np
    from torch.utils import _pytree as pytree

    from rlx.app.convert import build_program
    from rlx.frontends.torch import capture
    from rlx.frontends.torch.tensors import tensor_to_numpy

    from helpers import as_module, assert_arrays_match, sweep

    cases = importlib.import_module("runtime.test_jax_engine").CASES
    for name, _calls, variants, inputs, dtypes, *rest in cases:
        level = rest[0][0] if rest else "high"
        fn, data = sweep(variants, inputs, dtypes)
        exported = capture(as_module(fn).eval(), tuple(data), decomposition=level, model_name=f"case_{name}")
        program = build_program(exported.ir)
        root = write_package(program, exported.weights, tmp_path / name, decomposition=level, style="jax")
        sys.path.insert(0, str(root))
        try:
            got = importlib.import_module(root.name).load()(*[exported.inputs[v.name] for v in program.inputs])
        finally:
            sys.path.pop(0)
        wants = [w for w in exported.outputs if w is not None]
        for k, (g, w) in enumerate(zip(pytree.tree_leaves(got), wants)):
            assert_arrays_match(
                np.asarray(g), tensor_to_numpy(w) if not isinstance(w, np.ndarray) else w, f"{name} output {k}"
            )
