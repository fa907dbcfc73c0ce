"""A bundle runs in a process where ``import torch`` fails, and gives the same outputs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import torch

import rlx

from helpers import BLOCK_TORCH, load_example


def test_bundle_runs_without_torch(tmp_path):
    model, inputs = load_example("transformer").get_model()
    rlx.from_torch(model, inputs, tmp_path / "out")
    for i, t in enumerate(inputs):
        np.save(tmp_path / f"in{i}.npy", t.numpy())
    script = BLOCK_TORCH + textwrap.dedent(
        f"""
        import numpy as np
        try:
            import torch  # noqa: F401
            raise SystemExit("torch import was not blocked")
        except ImportError:
            pass
        import rlx
        model = rlx.load({str(tmp_path / "out" / "bundle")!r})
        out = model(np.load({str(tmp_path / "in0.npy")!r}), np.load({str(tmp_path / "in1.npy")!r}))
        np.save({str(tmp_path / "got.npy")!r}, out)
        assert "torch" not in sys.modules, "something imported torch"
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with torch.no_grad():
        want = model(*inputs).numpy()
    got = np.load(tmp_path / "got.npy")
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_cli_run_and_verify_without_torch(tmp_path):
    model, inputs = load_example("mlp").get_model()
    rlx.from_torch(model, inputs, tmp_path / "out")
    np.save(tmp_path / "x.npy", inputs[0].numpy())
    script = BLOCK_TORCH + textwrap.dedent(
        f"""
        from rlx.cli import main
        rc = main(["run", {str(tmp_path / "out")!r}, "--input", "x={tmp_path / "x.npy"}", "-o", {str(tmp_path / "res")!r}])
        assert rc == 0, rc
        rc = main(["verify", {str(tmp_path / "out")!r}])
        assert rc == 0, rc
        assert "torch" not in sys.modules
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    with torch.no_grad():
        want = model(*inputs).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "res" / "out0.npy"), want, rtol=1e-4, atol=1e-5)
