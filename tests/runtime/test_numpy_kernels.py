"""The numpy backend's hand-written fast kernels against PyTorch and against float64 truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlx.runtime import fused_kernels, numpy_backend

SCALES = [0.01, 0.3, 1.0, 3.0, 8.0]


def _true_gelu(x: np.ndarray) -> np.ndarray:
    return np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64).tolist()])


@pytest.mark.parametrize("size", [7, 300, 5000])  # the per-element path and the polynomial one
@pytest.mark.parametrize("scale", SCALES)
def test_gelu_float32_is_within_a_few_ulps_of_the_true_gelu(size: int, scale: float) -> None:
    x = (torch.randn(size, generator=torch.Generator().manual_seed(size)) * scale).numpy()
    got = numpy_backend.gelu_float32(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    truth = _true_gelu(x)
    ulp = np.spacing(np.abs(truth).astype(np.float32)).astype(np.float64)
    # x·½·(1 + erf) in float32 carries an error of about ulp(1)·|x|/2 from rounding 1 + erf, which
    # dominates where 1 + erf cancels (x < 0): the bound has that term and a few ulps of the result.
    bound = 4 * ulp + 1.2e-7 * np.abs(x)
    assert np.all(np.abs(got.astype(np.float64) - truth) <= bound)
    # PyTorch's float32 GELU is less accurate where 1 + erf cancels (about 1e-6 at x = -5).
    ref = torch.nn.functional.gelu(torch.from_numpy(x)).numpy().astype(np.float64)
    assert np.all(np.abs(got - ref) <= 8 * ulp + 3e-7 * np.abs(x))


@pytest.mark.parametrize("size", [8, 4096])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf·0 and x² overflow, as in PyTorch
def test_gelu_float32_special_values_and_in_place(size: int) -> None:
    specials = np.array([np.nan, -np.inf, -20.0, -0.0, 0.0, 1e30, -1e30, 12.0], np.float32)
    x = np.resize(specials, size)
    got = numpy_backend.gelu_float32(x)
    ref = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, ref)
    real = ~np.isnan(ref)
    np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(ref[real]))  # -0.0 stays -0.0
    buf = x.copy()
    assert fused_kernels._gelu(buf, buf) is buf
    np.testing.assert_array_equal(buf, got)
