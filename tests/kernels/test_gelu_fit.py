"""The numpy engine's float32 GELU coefficients (``GELU_COEFFICIENTS``): the fit that made them,
rerun here, and the checked-in constants held to the exact GELU (``math.erf``) and to PyTorch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlx.kernels.numpy.namespace import GELU_COEFFICIENTS, GELU_SHIFT, gelu_float32

DEGREE = 6  # 5 fits a·Q(a) to only 2e-8: 10–35 ulps of GELU on (−2, 0)
FIT_MAX = 13.0  # beyond, exp(−a²/2) < 2^-121 wipes out F: fitted over a ∈ [0, 13]


def _target(a: float) -> float:
    """F at a: a·½·erfc(a/√2)·exp(a²/2) / u = ½·(a + shift)·exp(a²/2)·erfc(a/√2)."""
    return 0.5 * (a + GELU_SHIFT) * math.exp(a * a / 2) * math.erfc(a / math.sqrt(2))


def fit() -> tuple[np.ndarray, float]:
    """The coefficients of −F(u) (highest power first) and their weighted max error: least squares on
    Chebyshev nodes, re-weighted towards the largest errors (Lawson's iteration, to near the minimax
    fit), the error weighted by exp(−a²/2)/(a + shift) because GELU needs a·Q = u·F·exp(−a²/2) to
    an absolute few 1e-9, not F itself."""
    n = 800
    u_max = FIT_MAX / (FIT_MAX + GELU_SHIFT)
    u = (np.cos(np.pi * (np.arange(n) + 0.5) / n) + 1) / 2 * u_max
    a = GELU_SHIFT * u / (1 - u)
    target = np.array([_target(v) for v in a.tolist()])
    weight = np.exp(-a * a / 2) / (a + GELU_SHIFT)
    basis = np.vander(u, DEGREE + 1)
    lawson = np.full(n, 1 / n)
    best_err, best = np.inf, np.zeros(DEGREE + 1)
    for _ in range(40):
        w = np.sqrt(lawson) * weight
        coef = np.linalg.lstsq(basis * w[:, None], target * w, rcond=None)[0]
        err = np.abs(basis @ coef - target) * weight
        if err.max() < best_err:
            best_err, best = float(err.max()), coef
        lawson *= err
        lawson /= lawson.sum()
    return -best, best_err


def test_refit_reproduces_the_checked_in_coefficients() -> None:
    coef, err = fit()
    assert err < 5e-9  # a·Q(a) to a few 1e-9 absolute
    # Equal up to the float32 rounding of the constants (the refit's last bits depend on LAPACK).
    np.testing.assert_allclose(np.asarray(GELU_COEFFICIENTS, np.float64), coef, rtol=2e-6, atol=2e-7)
    assert all(c.dtype == np.float32 for c in GELU_COEFFICIENTS)


def _ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    spacing = np.spacing(np.abs(exact).astype(np.float32))
    return np.abs(got.astype(np.float64) - exact) / spacing.astype(np.float64)


@pytest.mark.parametrize(
    ("lo", "hi", "max_ulps", "max_abs"), [(-2.0, 4.0, 6, None), (4.0, 20.0, 1, None), (-9.0, -2.0, None, 3e-8)]
)
def test_constants_give_the_exact_gelu(lo: float, hi: float, max_ulps: int | None, max_abs: float | None) -> None:
    """Within a few ulps where GELU is not small; on the negative tail, where GELU is a tiny
    x·Q(x), within the absolute error of the fit of a·Q(a) (which is what the design bounds)."""
    x = np.linspace(lo, hi, 20_001, dtype=np.float32)
    # x·Φ(x) through erfc, which keeps its relative precision on the negative tail (1 + erf does not)
    exact = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64).tolist()])
    got = gelu_float32(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    if max_ulps is not None:
        assert _ulps(got, exact).max() <= max_ulps
    if max_abs is not None:
        assert np.abs(got.astype(np.float64) - exact).max() <= max_abs


def test_constants_match_pytorch_with_specials() -> None:
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 4
    x[:3] = [0.0, -0.0, np.nan]
    got = gelu_float32(x)
    want = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # NaN where NaN
    assert got[0] == 0.0 and np.isnan(got[2])
