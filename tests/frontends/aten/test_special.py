"""Special functions (``rlx.frontends.aten.special`` → ``Special`` → ``rlx.kernels.special``) against eager PyTorch.

Each function runs once per dtype group in one export: float32, float64 and int64 inputs (the
integers promoted to float32, as PyTorch does), over edge values — NaN, ±inf, ±0, negative
integers (the poles of the gamma family), points either side of the domains' ends — and some
ordinary ones. float64 is compared at 1e-8 relative: PyTorch's float64 Bessel, Airy, trigamma and
incomplete-gamma approximations are accurate to about 1e-9 (scipy's to the last bits), so two
correct answers differ past the default 1e-10.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import rlx
from rlx.errors import RlxError
from rlx.frontends.torch.tensors import tensor_to_numpy

from helpers import BLOCK_SCIPY, as_module, assert_arrays_match, convert

pytest.importorskip("scipy")

F32, F64, I64 = torch.float32, torch.float64, torch.int64
NAN, INF = math.nan, math.inf
F64_RTOL = 1e-8

EDGES = [NAN, INF, -INF, 0.0, -0.0, -1.0, -2.0, -2.5, -0.3, 1e-3, 0.5, 0.99, -0.99, 1.0, 2.0, 3.7, 7.25, 12.0, -7.5]
INTEGERS = [-3, -1, 0, 1, 2, 3, 7, 12]


def edge_inputs(values: list[float] = EDGES) -> list[torch.Tensor]:
    return [torch.tensor(values, dtype=F32), torch.tensor(values, dtype=F64), torch.tensor(INTEGERS, dtype=I64)]


def check(fn, inputs, level: str = "aten", engine: str | None = None, tol: dict | None = None) -> None:
    """Every dtype group through one export; float64 outputs at ``F64_RTOL``, the rest at the
    defaults, unless ``tol`` gives (rtol, atol) for a dtype."""
    module = as_module(fn).eval()
    with torch.no_grad():
        want = module(*inputs)
    model, _, _ = convert(module, inputs, decomposition=level, engine=engine)
    got = model(*[tensor_to_numpy(t) for t in inputs])
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        rtol, atol = (tol or {}).get(w.dtype, (F64_RTOL if w.dtype == F64 else None, None))
        assert_arrays_match(g, tensor_to_numpy(w), f"[{level}, {engine}] output {k}", rtol=rtol, atol=atol)


def per_dtype(f):
    """``f`` applied to each input (one export for the three dtype groups)."""
    return lambda *xs: tuple(f(x) for x in xs)


UNARY = {
    "lgamma": torch.lgamma,
    "special.gammaln": torch.special.gammaln,
    "digamma": torch.digamma,
    "special.psi": torch.special.psi,
    "erfc": torch.erfc,
    "special.erfcx": torch.special.erfcx,
    "erfinv": torch.erfinv,
    "special.ndtri": torch.special.ndtri,
    "special.log_ndtr": torch.special.log_ndtr,
    "i0": torch.i0,
    "special.i0e": torch.special.i0e,
    "special.i1": torch.special.i1,
    "special.i1e": torch.special.i1e,
    "special.bessel_j0": torch.special.bessel_j0,
    "special.bessel_j1": torch.special.bessel_j1,
    "special.bessel_y0": torch.special.bessel_y0,
    "special.bessel_y1": torch.special.bessel_y1,
    "special.modified_bessel_i0": torch.special.modified_bessel_i0,
    "special.modified_bessel_i1": torch.special.modified_bessel_i1,
    "special.modified_bessel_k0": torch.special.modified_bessel_k0,
    "special.modified_bessel_k1": torch.special.modified_bessel_k1,
    "special.scaled_modified_bessel_k0": torch.special.scaled_modified_bessel_k0,
    "special.scaled_modified_bessel_k1": torch.special.scaled_modified_bessel_k1,
    "special.spherical_bessel_j0": torch.special.spherical_bessel_j0,
    "special.airy_ai": torch.special.airy_ai,
    **{f"polygamma_{n}": (lambda x, n=n: torch.polygamma(n, x)) for n in range(5)},
    "special.polygamma_3": lambda x: torch.special.polygamma(3, x),
    **{f"mvlgamma_{p}": (lambda x, p=p: torch.mvlgamma(x.abs() + p, p)) for p in (1, 3, 5)},
}


# PyTorch's float64 Bessel J/Y and Airy (its own ports of Cephes' rational approximations) are
# accurate to about 2e-8 absolute near their zeros and 2e-6 relative for Airy just below x = −2.09,
# where its asymptotic series starts; scipy's are accurate to the last bits.
LOOSER_F64 = {
    **{f"special.bessel_{k}": {F64: (1e-6, 1e-7)} for k in ("j0", "j1", "y0", "y1")},
    "special.airy_ai": {F64: (1e-5, 1e-7)},
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_torch(name):
    check(per_dtype(UNARY[name]), edge_inputs(), tol=LOOSER_F64.get(name))


# Domains: erfinv on (−1, 1), ndtri on (0, 1), inside and at the ends.
@pytest.mark.parametrize("fn", [torch.erfinv, torch.special.ndtri], ids=["erfinv", "ndtri"])
def test_unit_interval_functions(fn):
    values = [NAN, -1.0, -0.999, -0.5, -0.0, 0.0, 1e-6, 0.25, 0.5, 0.75, 0.999999, 1.0, 1.5]
    check(per_dtype(fn), [torch.tensor(values, dtype=F32), torch.tensor(values, dtype=F64)])


def test_airy_far_tail_is_zero():
    # PyTorch returns exactly 0 past x = 103.892 (Ai underflows), NaN at ±inf.
    x = torch.tensor([50.0, 103.0, 104.0, 1e30, INF, -INF], dtype=F64)
    check(torch.special.airy_ai, [x])


X_GRID = [NAN, INF, -INF, 0.0, -0.0, -1.0, -2.0, -0.5, 0.5, 1.0, 1.5, 2.0, 3.0, 7.5]


def pair_inputs(xs: list[float], ys: list[float]) -> list[torch.Tensor]:
    """Every (x, y) pair by broadcasting a column against a row, in float32 and float64."""
    return [
        torch.tensor(xs, dtype=F32)[:, None],
        torch.tensor(ys, dtype=F32)[None, :],
        torch.tensor(xs, dtype=F64)[:, None],
        torch.tensor(ys, dtype=F64)[None, :],
    ]


def pairwise(f):
    return lambda a, b, c, d: (f(a, b), f(c, d))


@pytest.mark.parametrize("fn", [torch.special.zeta, torch.igamma, torch.igammac], ids=["zeta", "igamma", "igammac"])
def test_two_argument_functions(fn):
    check(pairwise(fn), pair_inputs(X_GRID, X_GRID))


def test_two_argument_functions_take_numbers_and_integers():
    x = torch.tensor([0.5, 1.5, 2.0, 4.0], dtype=F32)
    n = torch.tensor([1, 2, 3, 5], dtype=I64)

    def f(x, n):
        return (
            torch.special.zeta(x + 1, 2.0),
            torch.special.zeta(3.0, x),
            torch.igamma(n, x),  # int64 a, float32 x → float32
            torch.igammac(x, n),
            torch.special.zeta(n + 1, n),  # both int64 → float32
        )

    check(f, [x, n])


POLYNOMIALS = [
    "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
    "legendre_polynomial_p",
]  # fmt: skip
# Degrees: the closed forms (0, 1), the recurrence, the trigonometric forms (above 4/6/8), a
# fraction (truncated), negatives (0), NaN and inf (read as negative), past Hermite's limit (NaN).
DEGREES = [0, 1, 2, 3, 5, 7, 9, 12, 30, -1, -2.5, 2.7, NAN, INF, 129, 600]
POINTS = [-1.0, 1.0, 0.0, -0.0, 0.3, -0.7, 0.5, 0.999, 1.5, -2.0, 3.0, 0.1, INF, -INF]
# PyTorch leaves its result variable uninitialised for x = NaN and n >= 2 in these (it returns
# whatever was in memory: 0, 6.9e-310, 1470573.4 …); rlx gives NaN there, checked separately.
UNINITIALISED_AT_NAN = {
    "shifted_chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_w", "laguerre_polynomial_l", "legendre_polynomial_p",
}  # fmt: skip


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomials_match_torch(name):
    f = getattr(torch.special, name)
    points = POINTS if name in UNINITIALISED_AT_NAN else [*POINTS, NAN]

    def run(a, b, c, d, n_int):
        # tensor x tensor in each float dtype; int64 degrees (promoted); Python-number n and x
        return f(a, b), f(c, d), f(a, n_int), f(a, 3), f(0.25, b)

    degrees_int = torch.tensor([0, 1, 2, 5, 9, -1, 40], dtype=I64)[None, :]
    # float32: up to 600 recurrence steps amplify a rounding difference per step (PyTorch's C++ may
    # fuse a multiply-add) near the polynomials' roots, where the terms summed reach 2n + 1 ≈ 1200
    # while the value is ~0.05: 1e-4 relative, 1e-3 absolute (1e-6 of the terms) pins every value.
    check(run, [*pair_inputs(points, DEGREES), degrees_int], tol={F32: (1e-4, 1e-3)})


@pytest.mark.parametrize("name", sorted(UNINITIALISED_AT_NAN))
def test_polynomials_give_nan_at_nan(name):
    f = getattr(torch.special, name)
    x = torch.tensor([NAN, NAN, NAN, NAN, NAN])
    n = torch.tensor([-1.0, 0.0, 1.0, 2.0, 10.0])
    model, _, _ = convert(f, [x, n], decomposition="aten")
    got = model(x.numpy(), n.numpy())
    want = np.array([0.0, 1.0, NAN, NAN, NAN], np.float32)  # n < 0 → 0, n = 0 → 1, else NaN in, NaN out
    assert_arrays_match(got, want)


@pytest.mark.parametrize("level", ["high", "core"])
def test_decomposition_levels(level):
    # The torch.special spellings and mvlgamma at the levels that rewrite them.
    def f(x):
        return torch.special.gammaln(x), torch.special.multigammaln(x.abs() + 2, 2), torch.special.i1e(x)

    check(f, [torch.tensor(EDGES, dtype=F32)], level=level)


# What jax.scipy.special lacks (Bessel J/Y/K, Airy): the JAX engine refuses these, naming them.
NOT_ON_JAX = {"special.bessel_j0", "special.bessel_j1", "special.bessel_y0", "special.bessel_y1",
              "special.modified_bessel_k0", "special.modified_bessel_k1", "special.scaled_modified_bessel_k0",
              "special.scaled_modified_bessel_k1", "special.airy_ai"}  # fmt: skip


# jax.scipy.special.zeta is NaN for q < 0, where PyTorch's series still computes ζ (and so
# polygamma(n ≥ 2, x) at negative non-integers): the JAX engine gives NaN there.
JAX_POINTS = [INF, -INF, 0.0, -0.0, -1.0, -2.0, 0.3, 0.5, 1.0, 2.0, 7.25]


def _jax_check(unary: list, binary: list) -> None:
    pytest.importorskip("jax")

    def f(x32, x64, a, n):
        return (
            *(fn(x) for fn in unary for x in (x32, x64)),
            *(fn(a[:, None], n[None, :]) for fn in binary),
        )

    a = torch.tensor([-1.0, 1.0, 0.0, 0.3, -0.7, 1.5, 3.0], dtype=F64)
    n = torch.tensor([-1.0, 0.0, 1.0, 2.0, 5.0, 9.0, 13.0], dtype=F64)
    check(f, [torch.tensor(JAX_POINTS, dtype=F32), torch.tensor(JAX_POINTS, dtype=F64), a, n], engine="jax")


def test_jax_engine_matches_torch():
    # A few of each kind in one program (one compilation); the slow test below has them all.
    unary = [torch.lgamma, torch.digamma, lambda x: torch.polygamma(2, x), torch.special.i1, torch.erfinv]
    _jax_check(unary, [torch.special.zeta, torch.igamma, torch.special.chebyshev_polynomial_t])


@pytest.mark.slow
def test_jax_engine_matches_torch_everywhere():
    unary = [f for name, f in sorted(UNARY.items()) if name not in NOT_ON_JAX]
    binary = [torch.special.zeta, torch.igamma, torch.igammac, *(getattr(torch.special, p) for p in POLYNOMIALS)]
    _jax_check(unary, binary)


def test_jax_engine_refuses_what_jax_lacks():
    pytest.importorskip("jax")
    x = torch.tensor([0.5, 1.0])
    with pytest.raises(RlxError, match=r"Special\(bessel_y0\)"):
        convert(torch.special.bessel_y0, [x], engine="jax")


def test_bad_polygamma_order_is_refused():
    with pytest.raises(Exception, match="polygamma"):
        convert(lambda x: torch.polygamma(-1, x), [torch.tensor([1.0])])


def test_scipy_is_needed_only_by_programs_that_use_special_functions(tmp_path):
    x = torch.tensor([0.5, 1.5, 3.0])
    rlx.from_torch(lambda_module(lambda x: torch.exp(x) + 1), [x], tmp_path / "plain")
    rlx.from_torch(lambda_module(torch.lgamma), [x], tmp_path / "special")
    np.save(tmp_path / "x.npy", x.numpy())
    script = BLOCK_SCIPY + textwrap.dedent(
        f"""
        import numpy as np
        import rlx
        from rlx.errors import RlxError
        out = rlx.load({str(tmp_path / "plain" / "bundle")!r})(np.load({str(tmp_path / "x.npy")!r}))
        assert "scipy" not in sys.modules, "something imported scipy"
        try:
            rlx.load({str(tmp_path / "special" / "bundle")!r})
        except RlxError as e:
            print("ERROR:", e)
        else:
            raise SystemExit("loading a special-function bundle without scipy did not fail")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("ERROR:")]
    assert "lgamma" in line and "pip install 'rlx[special]'" in line


def lambda_module(fn):
    class M(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    return M()
