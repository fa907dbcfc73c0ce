"""The numpy top-k of a few out of long lanes (a partition, not a sort of the lane) against
PyTorch's stable sort: the same k values, and among equal values the lowest indices, in the
order of ``torch.sort(stable=True)`` (the rule rlx's kernels keep everywhere)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlx.ir import calls as C
from rlx.ir.program import Ref
from rlx.kernels.numpy.namespace import NUMPY
from rlx.kernels.ordering import arg_top_k


def _lanes(kind: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind in ("distinct", "ties_all_taken"):
        x = rng.permutation(np.prod(shape)).reshape(shape).astype(np.float32)
        if kind == "ties_all_taken":  # equal values among the largest and among the smallest only
            x[x >= x.size - 4], x[x < 4] = x.size, -1
        return x
    x = rng.integers(-3, 4, shape).astype(np.float32)  # ties everywhere, also at the k-th value
    if kind == "specials":
        r = rng.random(shape)
        x[r < 0.2] = np.nan
        x[(r >= 0.2) & (r < 0.3)] = np.inf
        x[(r >= 0.3) & (r < 0.4)] = -np.inf
        x[(r >= 0.4) & (r < 0.45)] = -0.0
    return x


@pytest.mark.parametrize("kind", ["distinct", "ties_all_taken", "ties", "specials"])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize(("shape", "axis", "k"), [((3, 4000), 1, 50), ((5000, 2), 0, 7), ((64, 300), 1, 1)])
def test_partition_top_k_matches_the_stable_sort(kind, largest, shape, axis, k):
    x = _lanes(kind, shape, seed=k)
    assert 8 * k <= shape[axis] and x.size >= 2048  # (the partition path)
    got = arg_top_k(C.ArgTopK(Ref("x"), k, axis, largest, True), x, xp=NUMPY)
    _, order = torch.sort(torch.from_numpy(x), dim=axis, descending=largest, stable=True)
    want = order.narrow(axis, 0, k).numpy()
    assert got.dtype == np.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
