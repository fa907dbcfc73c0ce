"""The one resampling definition (``rlx.kernels.resample``) gives the same bits on numpy and on JAX.

Upsample and GridSample follow PyTorch's order of roundings, which XLA would change (FMA
contraction, reciprocal division, constant folding) but for the JAX namespace's rounding hooks.
Random Calls (modes, extents, scale factors, align_corners, antialiasing, padding, dtypes) on data
with NaN, ±inf and ±0 planted: every result must equal the numpy engine's bit for bit, signed zeros
included (any NaN stands for any NaN). PyTorch itself is the reference in
tests/frontends/aten/test_resample.py and tests/runtime/test_jax_engine_families.py.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from rlx.ir import calls as C
from rlx.ir.program import Call, Ref
from rlx.kernels.numpy.kernels import KERNELS

jax = pytest.importorskip("jax")

from rlx.kernels.jax.kernels import KERNELS as JAX_KERNELS  # noqa: E402  (needs jax)
from rlx.kernels.jax.kernels import x64  # noqa: E402

X, Y = Ref("x"), Ref("y")
FLOATS = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float64))


def data(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    x = rng.uniform(-3, 3, shape)
    x.reshape(-1)[: min(5, x.size)] = [np.nan, np.inf, -np.inf, -0.0, 0.0][: min(5, x.size)]
    return x.astype(dtype)


def random_upsample(rng: np.random.Generator) -> tuple[Call, list[np.ndarray]]:
    nd = int(rng.integers(1, 4))
    mode = str(rng.choice(["nearest", "nearest_exact", "linear"] + ["bicubic"] * (nd == 2)))
    antialias = nd == 2 and mode in ("linear", "bicubic") and rng.random() < 0.4
    dtype = FLOATS[int(rng.integers(0, 2)) * 3] if antialias else FLOATS[int(rng.integers(0, 4))]
    sizes_in = [int(rng.integers(1, 9)) for _ in range(nd)]
    if nd == 2 and rng.random() < 0.25:  # H + W > 128: PyTorch's generic 2-d kernels
        sizes_in[1] = int(rng.integers(60, 90))
    sizes, scales = [], []
    for n in sizes_in:
        if rng.random() < 0.5:
            scale = float(np.round(rng.uniform(0.3, 3.0), 2))
            sizes.append(max(1, int(n * scale)))
            scales.append(scale)
        else:
            sizes.append(int(rng.integers(1, 2 * n + 4)))
            scales.append(None)
    align = mode in ("linear", "bicubic") and bool(rng.random() < 0.5)
    x = data(rng, (2, 3, *sizes_in), dtype)
    return C.Upsample(X, mode, tuple(sizes), tuple(scales), align, antialias), [x]


def random_grid_sample(rng: np.random.Generator) -> tuple[Call, list[np.ndarray]]:
    nd = int(rng.integers(2, 4))
    mode = str(rng.choice(["bilinear", "nearest"] + ["bicubic"] * (nd == 2)))
    padding = str(rng.choice(["zeros", "border", "reflection"]))
    dtype = FLOATS[int(rng.integers(0, 4))]
    reach = 9.0 if rng.random() < 0.3 else 1.6  # far outside the input: reflection folds many times
    x = data(rng, (2, 2, *(int(rng.integers(1, 7)) for _ in range(nd))), dtype)
    grid = rng.uniform(-reach, reach, (2, *(int(rng.integers(1, 6)) for _ in range(nd)), nd)).astype(dtype)
    return C.GridSample(X, Y, mode, padding, bool(rng.random() < 0.5)), [x, grid]


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    bits = np.dtype(f"u{want.dtype.itemsize}")
    nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    return bool(((got.view(bits) == want.view(bits)) | nan).all())


@pytest.mark.parametrize("seed", range(3))
def test_numpy_and_jax_give_the_same_bits(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cases = [random_upsample(rng) for _ in range(8)] + [random_grid_sample(rng) for _ in range(6)]
    with np.errstate(all="ignore"):
        want = [np.asarray(KERNELS[c.op](c, *ops)) for c, ops in cases]
    calls = [c for c, _ in cases]

    def run_all(operands: list[list[Any]]) -> list[Any]:
        return [JAX_KERNELS[c.op](c, *ops) for c, ops in zip(calls, operands)]

    with x64():  # one jit for all cases: compiling dominates
        got = [np.asarray(g) for g in jax.jit(run_all)([ops for _, ops in cases])]
    for (c, ops), g, w in zip(cases, got, want):
        what = f"{c} on {ops[0].dtype}{list(ops[0].shape)}"
        assert g.shape == w.shape and g.dtype == w.dtype == ops[0].dtype, what
        assert same_bits(g, w), f"{what}: {int((g.astype(float) != w.astype(float)).sum())} entries differ"
