"""The models onnx ships in onnx/backend/test/data/light (ResNet-50, DenseNet-121, …) against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from frontends.onnx.onnx_helpers import run_onnxruntime, run_rlx  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "engine" / "test" / "data" / "light"
MODELS = sorted(p.name for p in LIGHT.glob("light_*.onnx")) if LIGHT.is_dir() else []


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_onnxruntime(name):
    m = onnx.load(str(LIGHT / name))
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(0)
    feed = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
        feed[vi.name] = rng.standard_normal(shape).astype(np.float32)
    got, want = run_rlx(m, feed), run_onnxruntime(m, feed)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(w).max())))
