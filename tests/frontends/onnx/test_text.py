"""TfIdfVectorizer over integer tokens, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import assert_matches_ort, helper, model

R = np.random.default_rng(8)
POOL = dict(ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize(("lo", "hi", "skip"), [(1, 1, 0), (2, 2, 0), (1, 2, 3), (2, 2, 5)])
@pytest.mark.parametrize("batched", [False, True])
def test_tfidf_vectorizer(mode, lo, hi, skip, batched):
    x = R.integers(2, 9, (2, 12) if batched else (12,)).astype(np.int32)
    node = helper.make_node(
        "TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip,
        weights=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5], **POOL,
    )  # fmt: skip
    m = model([node], {"x": x}, ["y"], opset=9)
    got = assert_matches_ort(m, {"x": x})
    assert got[0].shape == ((2, 7) if batched else (7,)) and got[0].dtype == np.float32
