"""Einsum and Det, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import assert_matches_ort, helper, model

R = np.random.default_rng(3)

EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 2)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ijk,ikl,ilm->ijm", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]),
    ("ij,kj->ik", [(1, 4), (3, 4)]),
    ("abc,cd->abd", [(2, 1, 3), (3, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ibj,jk->bik", [(3, 2, 4), (4, 5)]),
]


@pytest.mark.parametrize(("equation", "shapes"), EINSUM, ids=[e for e, _ in EINSUM])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_einsum_matches_onnxruntime(equation, shapes, dtype):
    names = [f"x{k}" for k in range(len(shapes))]
    feed = {n: (R.standard_normal(s) * 3).astype(dtype) for n, s in zip(names, shapes)}
    if dtype == np.int64 and equation == "ij,kj->ik":
        pytest.skip("onnxruntime's Einsum has no int64 kernel for this broadcast")
    m = model([helper.make_node("Einsum", names, ["y"], equation=equation)], feed, ["y"], opset=12)
    got = assert_matches_ort(m, feed, rtol=1e-5, atol=1e-5)
    want = np.einsum(equation, *feed.values())
    assert got[0].shape == want.shape


@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (2, 4, 4), (1, 1)])
def test_det_matches_onnxruntime(shape):
    x = R.standard_normal(shape).astype(np.float32)
    m = model([helper.make_node("Det", ["x"], ["y"])], {"x": x}, ["y"])
    got = assert_matches_ort(m, {"x": x}, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[0], np.linalg.det(x), rtol=1e-4, atol=1e-5)
