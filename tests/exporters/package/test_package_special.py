"""Generated packages with special functions and the math/complex ops: standalone (no torch, no rlx),
equal to PyTorch, and a numpy package lists scipy among its dependencies."""

from __future__ import annotations

import pytest
import torch
from standalone import run_model_package

from rlx.frontends.torch.tensors import tensor_to_numpy

from helpers import assert_arrays_match

pytest.importorskip("scipy")


class Special(torch.nn.Module):
    def forward(self, x, n, i):
        return (
            torch.lgamma(x),
            torch.polygamma(2, x),
            torch.special.zeta(x.abs() + 1.5, 2.0),
            torch.special.chebyshev_polynomial_t(x, n),
            torch.special.hermite_polynomial_h(x, n),
            torch.special.i1e(x),
            torch.copysign(x, -x),
            torch.view_as_real(torch.complex(x, n)),
            i << 3,
            torch.frexp(x)[1],
        )


INPUTS = [
    torch.tensor([0.5, -2.5, 3.0, 0.0, float("inf"), -0.3], dtype=torch.float64),
    torch.tensor([0.0, 3.0, 9.0, 2.0, 1.0, 12.0], dtype=torch.float64),
    torch.tensor([1, -5, 70, 3, 0, 9]),
]


@pytest.mark.parametrize("style", ["numpy", "jax"])
def test_package_runs_special_functions(tmp_path, style):
    if style == "jax":
        pytest.importorskip("jax")
    got, pkg = run_model_package(tmp_path, Special(), INPUTS, style)
    assert ('"scipy>=1.10"' in (pkg / "pyproject.toml").read_text()) == (style == "numpy")
    with torch.no_grad():
        want = Special()(*INPUTS)
    for k, w in enumerate(want):
        assert_arrays_match(got[k], tensor_to_numpy(w), f"[{style}] output {k}", rtol=1e-8)
