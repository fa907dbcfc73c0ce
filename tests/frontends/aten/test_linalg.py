"""Matrix products against eager PyTorch: mm, bmm, matmul broadcasting, addmm/baddbmm with
beta/alpha, linear — in float32, float16, bfloat16 and float64. Pairwise distances (cdist, pdist)
in float32 and float64 (PyTorch has no half-precision CPU kernels for them): every p (0, 1, 2,
inf and others), the matrix-product path of p=2, broadcast batches, NaN/inf, empty inputs.

Each case is one export that runs its variants over every swept dtype (an export costs far more
than the ops); "output k" in a failure counts variants within dtypes.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import rlx
from rlx.frontends.torch.tensors import tensor_to_numpy

from helpers import (
    BLOCK_SCIPY,
    LEVELS,
    Wrap,
    align_column_signs,
    assert_arrays_match,
    assert_converts_and_matches,
    convert,
    rand,
    with_specials,
)

F32, F16, BF16, F64, I64 = torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64
C64, C128 = torch.complex64, torch.complex128
FLOATS = (F32, F16, BF16, F64)


def case(name, variants, *inputs, dtypes=FLOATS, levels=LEVELS, marks=()):
    """``variants``: one callable or a list, all taking ``inputs``; an input is a shape (random
    data of each swept dtype) or a callable ``dtype -> tensor``."""
    variants = variants if isinstance(variants, list) else [variants]
    made = [rand(a, d, seed=i) if isinstance(a, tuple) else a(d) for d in dtypes for i, a in enumerate(inputs)]
    n = len(inputs)

    def run(*args):
        return tuple(v(*args[k * n : (k + 1) * n]) for k in range(len(dtypes)) for v in variants)

    return pytest.param(run, tuple(made), levels, id=name, marks=marks)


class PerDtype(nn.Module):
    """One copy of a module per swept dtype; copy k runs on input group k."""

    def __init__(self, make, dtypes, n_inputs):
        super().__init__()
        self.copies = nn.ModuleList()
        for d in dtypes:
            torch.manual_seed(0)
            self.copies.append(make().to(d))
        self.n = n_inputs

    def forward(self, *args):
        return tuple(m(*args[k * self.n : (k + 1) * self.n]) for k, m in enumerate(self.copies))


def module_case(name, make, *shapes, dtypes=FLOATS, levels=LEVELS, marks=()):
    inputs = tuple(rand(s, d, seed=i) for d in dtypes for i, s in enumerate(shapes))
    return pytest.param(PerDtype(make, dtypes, len(shapes)), inputs, levels, id=name, marks=marks)


def specials(shape):
    return lambda d: with_specials(rand(shape, d, seed=7))


# matmul inputs: a, b 1-d; m [3,4]; n [4,5]; bt [2,3,4]; bn [2,4,5]; b4 [2,1,3,4]; bn3 [3,4,5].
MATMUL_SHAPES = ((4,), (4,), (3, 4), (4, 5), (2, 3, 4), (2, 4, 5), (2, 1, 3, 4), (3, 4, 5))

INF = float("inf")
DIST = (F32, F64)
P_VALUES = (0.0, 1.0, 2.0, INF, 0.5, 3.0)


def _dist_specials(d):
    """Rows with a NaN, an inf, both infs, and a finite row, so NaN meets inf and inf meets inf."""
    x = rand((6, 3), d, seed=11)
    x[0, 0], x[1, 1], x[2, 0], x[3, 2], x[3, 0] = float("nan"), INF, -INF, INF, INF
    return x


DIST_SPECIALS = _dist_specials

CASES = [
    case("mm", lambda x, y: torch.mm(x, y), (3, 4), (4, 5)),
    case("bmm", lambda x, y: torch.bmm(x, y), (2, 3, 4), (2, 4, 5)),
    case(
        "matmul",
        [
            lambda a, b, m, n, bt, bn, b4, bn3: a @ b,  # 1-d · 1-d → scalar
            lambda a, b, m, n, bt, bn, b4, bn3: a @ n,  # 1-d · 2-d
            lambda a, b, m, n, bt, bn, b4, bn3: m @ a,  # 2-d · 1-d
            lambda a, b, m, n, bt, bn, b4, bn3: torch.matmul(m, n),
            lambda a, b, m, n, bt, bn, b4, bn3: bt @ bn,  # batched
            lambda a, b, m, n, bt, bn, b4, bn3: bt @ n,  # batched · 2-d
            lambda a, b, m, n, bt, bn, b4, bn3: m @ bn,  # 2-d · batched
            lambda a, b, m, n, bt, bn, b4, bn3: a @ bn,  # 1-d · batched
            lambda a, b, m, n, bt, bn, b4, bn3: bt @ a,  # batched · 1-d
            lambda a, b, m, n, bt, bn, b4, bn3: b4 @ bn3,  # batch dims broadcast: [2,1] with [3]
            lambda a, b, m, n, bt, bn, b4, bn3: bn3.mT @ b4.mT,
        ],
        *MATMUL_SHAPES,
    ),
    case(
        "mv_dot",
        [lambda m, a, b: torch.mv(m, a), lambda m, a, b: torch.dot(a, b), lambda m, a, b: torch.vdot(a, b)],
        (3, 4),
        (4,),
        (4,),
    ),
    # Composite ops with no aten-level lowering: torch decomposes them at high/core.
    case(
        "inner_outer",
        [lambda m, a, b: torch.inner(a, b), lambda m, a, b: torch.inner(m, m), lambda m, a, b: torch.outer(a, b)],
        (3, 4),
        (4,),
        (4,),
        levels=("high", "core"),
    ),
    case(
        "addmm",
        [
            lambda c, c1, x, y: torch.addmm(c, x, y),
            lambda c, c1, x, y: torch.addmm(c1, x, y),
            lambda c, c1, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2.0),
            lambda c, c1, x, y: torch.addmm(c1, x, y, beta=-1, alpha=3),
            lambda c, c1, x, y: torch.addmm(c[:1], x, y, alpha=0.25),
        ],
        (3, 5),
        (5,),
        (3, 4),
        (4, 5),
    ),
    # beta=0 ignores the input entirely, NaN and inf included; otherwise they propagate.
    case(
        "addmm_specials",
        [
            lambda c, x, y: torch.addmm(c, x, y, beta=0),
            lambda c, x, y: torch.addmm(c, x, y, beta=0, alpha=2),
            lambda c, x, y: torch.addmm(c, x, y, beta=0.5),
            lambda c, x, y: torch.addmm(c, x, y),
        ],
        specials((3, 5)),
        (3, 4),
        (4, 5),
    ),
    case(
        "baddbmm",
        [
            lambda c, x, y: torch.baddbmm(c, x, y),
            lambda c, x, y: torch.baddbmm(c, x, y, beta=0.5, alpha=-2),
            lambda c, x, y: torch.baddbmm(c[:1, :, :1], x, y, alpha=1.5),
            lambda c, x, y: torch.baddbmm(c, x, y, beta=0),
            lambda c, x, y: torch.baddbmm(c, x, y, beta=2),
        ],
        specials((2, 3, 5)),
        (2, 3, 4),
        (2, 4, 5),
    ),
    case(
        "addmv",
        [lambda c, m, v: torch.addmv(c, m, v), lambda c, m, v: torch.addmv(c, m, v, beta=2, alpha=0.5)],
        (3,),
        (3, 4),
        (4,),
    ),
    case(
        "addbmm",
        [lambda c, x, y: torch.addbmm(c, x, y), lambda c, x, y: torch.addbmm(c, x, y, beta=0.5, alpha=2)],
        (3, 5),
        (2, 3, 4),
        (2, 4, 5),
    ),
    case(
        "int64",
        [
            lambda x, y, bx, by: torch.mm(x, y),
            lambda x, y, bx, by: torch.bmm(bx, by),
            lambda x, y, bx, by: x @ y[:, 0],
            lambda x, y, bx, by: bx @ y,
        ],
        (3, 4),
        (4, 5),
        (2, 3, 4),
        (2, 4, 5),
        dtypes=(I64,),
    ),
    case(
        "F.linear",
        [
            lambda x, w, b: F.linear(x, w, b),
            lambda x, w, b: F.linear(x, w),
            lambda x, w, b: F.linear(x[0, 0], w, b),
            lambda x, w, b: F.linear(x[0], w),
        ],
        (2, 3, 4),
        (5, 4),
        (5,),
    ),
    # distances: rows 5 and 7 (odd), 3 columns; p=2 below 26 rows is the direct sum of squares
    case(
        "cdist",
        [
            lambda x, y, b1, b2: tuple(torch.cdist(x, y, p) for p in P_VALUES),
            lambda x, y, b1, b2: tuple(torch.cdist(b1, b2, p) for p in (2.0, 1.0, INF)),  # batch [2,1]x[3]
            lambda x, y, b1, b2: torch.cdist(x, x, 0.0),
        ],
        (5, 3),
        (7, 3),
        (2, 1, 4, 3),
        (3, 5, 3),
        dtypes=DIST,
    ),
    # more than 25 rows (or compute_mode=use_mm…): p=2 through torch's matrix-product formula
    case(
        "cdist_mm",
        [
            lambda x, y: torch.cdist(x, y),
            lambda x, y: torch.cdist(y, x[:4]),
            lambda x, y: torch.cdist(x[:6], y[:5], compute_mode="use_mm_for_euclid_dist"),
            lambda x, y: torch.cdist(x, y, compute_mode="donot_use_mm_for_euclid_dist"),
            lambda x, y: torch.cdist(x, y, 3.0),
        ],
        (30, 4),
        (27, 4),
        dtypes=DIST,
    ),
    # near-identical points: the matrix-product formula cancels badly (errors ~1e-3 against the direct
    # sum), so only taking the same path as PyTorch matches it
    case("cdist_mm_near", lambda x, n: torch.cdist(x, x + 1e-3 * n), (30, 4), (30, 4), dtypes=(F32,)),
    # NaN/inf: cdist's inf-norm skips NaN (a scalar std::max loop), every other p propagates it
    case(
        "cdist_specials", lambda x, y: tuple(torch.cdist(x, y, p) for p in P_VALUES), DIST_SPECIALS, (3, 3), dtypes=DIST
    ),
    case(
        "cdist_empty",
        [
            lambda x, y: torch.cdist(x[:0], y),
            lambda x, y: torch.cdist(x[:, :0], y[:, :0], 1.0),
            lambda x, y: torch.cdist(x, y[:0], INF),
        ],
        (4, 3),
        (5, 3),
        dtypes=(F32,),
    ),
    case(
        "pdist",
        [
            lambda x: tuple(F.pdist(x, p) for p in P_VALUES),
            lambda x: F.pdist(x[:1]),
            lambda x: F.pdist(x[:2], 0.5),
            lambda x: F.pdist(x[:, :0], 2.0),
        ],
        (7, 3),
        dtypes=DIST,
    ),
    case("pdist_specials", lambda x: tuple(F.pdist(x, p) for p in P_VALUES), DIST_SPECIALS, dtypes=DIST),
    case("pdist_many_rows", lambda x: F.pdist(x), (61, 2), dtypes=(F32,), levels=("core",)),
    module_case("nn.Linear", lambda: nn.Linear(4, 5), (2, 3, 4)),
    module_case("nn.Linear_2d", lambda: nn.Linear(4, 5), (3, 4), levels=("high",)),
    module_case("nn.Linear_no_bias", lambda: nn.Linear(4, 5, bias=False), (3, 4)),
    module_case("nn.Linear_1d", lambda: nn.Linear(4, 5), (4,), levels=("high",)),
    module_case(
        "nn.Linear_chain",
        lambda: nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3, bias=False)),
        (2, 5, 4),
        levels=("high",),
    ),
]

# F.bilinear (aten.bilinear, and _trilinear under Core ATen) and _trilinear itself: leading axes,
# no bias, integer inputs (exact sums), small integers so float sums are exact too.
BILINEAR = [
    lambda a, c, w, bias: F.bilinear(a, c, w, bias),
    lambda a, c, w, bias: F.bilinear(a[None], c[None], w),
    lambda a, c, w, bias: torch.ops.aten._trilinear(a, w, c, [1, 3], [0], [1, 2], [2, 3]),
    lambda a, c, w, bias: torch.ops.aten._trilinear(a, c, a, [2], [1], [2], [0]),
]
_SMALL = [lambda d, s=s: torch.randint(-4, 5, s, generator=torch.Generator().manual_seed(len(s))).to(d)
          for s in [(3, 4), (3, 5), (6, 4, 5), (6,)]]  # fmt: skip
CASES.append(case("bilinear", BILINEAR, *_SMALL, dtypes=(F32, F64, I64)))


@pytest.mark.parametrize("fn,inputs,levels", CASES)
def test_matches_torch(fn, inputs, levels):
    assert_converts_and_matches(fn, inputs, levels=levels)


@pytest.mark.parametrize("dtype", [F32, I64], ids=str)
def test_bilinear_on_jax(dtype):
    pytest.importorskip("jax")
    fn, inputs, _ = case("bilinear", BILINEAR, *_SMALL, dtypes=(dtype,)).values
    assert_converts_and_matches(fn, inputs, levels=("high",), engine="jax")


# ── decompositions and solvers ───────────────────────────────────────────────
# Singular vectors are defined up to sign, so the SVD cases check what is well-defined (as
# PyTorch's own linalg tests do): singular values, the reconstruction U·diag(S)·Vh and U's
# orthonormal columns. The factorisations run on numpy and on JAX.
REAL = (F32, F64)


def spd(shape, seed=0):
    """A well-conditioned symmetric positive definite matrix (batch) of each dtype."""

    def make(d):
        a = rand(shape, F64, seed=seed)
        return (a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=F64)).to(d)

    return make


def lower_factor(shape, upper=False, seed=0):
    def make(d):
        factor = torch.linalg.cholesky(spd(shape, seed)(F64))
        return (factor.mT if upper else factor).to(d)

    return make


def geqrf(shape, seed=0):
    """``(a, tau)`` of torch.geqrf, flattened into two inputs by the caller."""
    return lambda d: torch.geqrf(rand(shape, d, seed=seed))


def singular(shape):
    def make(d):
        a = rand(shape, d, seed=3)
        a[..., -1, :] = 0  # exactly singular (dependent rows would leave PyTorch a rounding error)
        return a

    return make


def svd_parts(a, full=False):
    u, s, vh = torch.linalg.svd(a, full_matrices=full)
    k = s.shape[-1]
    return s, (u[..., :, :k] * s.unsqueeze(-2)) @ vh[..., :k, :], u.mT @ u, vh @ vh.mT


def complex_rand(shape, seed=0):
    """Random complex matrices (both parts random) of a complex dtype."""
    return lambda d: torch.complex(rand(shape, F64, seed=seed), rand(shape, F64, seed=seed + 1)).to(d)


def symmetric(shape, seed=0, hermitian=False):
    """``a + aᵀ`` (``a + aᴴ``) of random ``a``: symmetric indefinite, so Bunch-Kaufman pivots."""

    def make(d):
        a = complex_rand(shape, seed)(d) if d.is_complex else rand(shape, d, seed=seed)
        return a + (a.mH if hermitian else a.mT)

    return make


def ldl_edge_cases(d):
    """2×2 pivot blocks (a zero diagonal: negative pivots), a zero matrix (info 1) and a singular
    one whose second pivot is zero (info 2)."""
    two_by_two = [[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]]
    singular_second = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [3.0, 6.0, 0.0]]
    return torch.tensor([two_by_two, [[0.0] * 3] * 3, singular_second], dtype=d)


def zero_below(shape):
    """A matrix whose first column is zero below the diagonal (LAPACK leaves that reflector out:
    tau 0) and whose second column is all zero."""

    def make(d):
        a = rand(shape, d, seed=5)
        a[1:, 0] = 0
        a[:, 1] = 0
        return a

    return make


COMPLEX = (C64, C128)
LDL_VARIANTS = [
    torch.linalg.ldl_factor_ex,
    lambda a: torch.linalg.ldl_factor(a, hermitian=True),
    lambda a: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(a), a[..., :2]),
]


DECOMPOSITION_CASES = [
    case("svd", [svd_parts, lambda a: svd_parts(a, True)], (4, 3), dtypes=REAL),
    case("svd-wide-batched", [svd_parts, lambda a: svd_parts(a, True)], (2, 3, 5), dtypes=REAL),
    case(
        "svdvals-nuclear-cond",
        [torch.linalg.svdvals, lambda a: torch.linalg.matrix_norm(a, "nuc"), torch.linalg.cond],
        (2, 4, 4),
        dtypes=REAL,
    ),
    case("det-slogdet-logdet", [torch.linalg.det, torch.linalg.slogdet, torch.logdet], (3, 4, 4), dtypes=REAL),
    case("det-singular-empty", [torch.linalg.det, torch.linalg.slogdet], singular((2, 3, 3)), dtypes=REAL),
    case("det-empty", torch.linalg.det, (0, 0), dtypes=(F32,)),
    case(
        "solve-triangular",
        [
            lambda a, b, up=up, unit=unit: torch.linalg.solve_triangular(a, b, upper=up, left=True, unitriangular=unit)
            for up in (False, True)
            for unit in (False, True)
        ],
        spd((2, 4, 4)),
        (4, 3),
        dtypes=REAL,
    ),
    case(
        "solve-triangular-right",
        [lambda a, b, up=up: torch.linalg.solve_triangular(a, b, upper=up, left=False) for up in (False, True)],
        spd((4, 4)),
        (2, 3, 4),
        dtypes=REAL,
    ),
    case(
        "triangular-solve",
        [
            lambda b, a, up=up, t=t: torch.triangular_solve(b, a, upper=up, transpose=t)
            for up in (False, True)
            for t in (False, True)
        ],
        (4, 2),
        spd((4, 4)),
        dtypes=REAL,
    ),
    case(
        "cholesky-solve-inverse",
        [lambda b, factor: torch.cholesky_solve(b, factor), lambda b, factor: torch.cholesky_inverse(factor)],
        (2, 4, 3),
        lower_factor((2, 4, 4)),
        dtypes=REAL,
    ),
    case(
        "cholesky-upper",
        [lambda b, f: torch.cholesky_solve(b, f, upper=True), lambda b, f: torch.cholesky_inverse(f, upper=True)],
        (4, 3),
        lower_factor((4, 4), upper=True),
        dtypes=REAL,
    ),
    case(
        "lu-factor-lu",
        [lambda a: torch.linalg.lu_factor_ex(a), torch.linalg.lu],
        (2, 5, 5),
        dtypes=REAL,
    ),
    case("lu-rectangular", [torch.linalg.lu_factor_ex, torch.linalg.lu], (3, 5), dtypes=REAL),
    case("lu-tall-singular", [torch.linalg.lu_factor_ex, torch.linalg.lu], singular((5, 3)), dtypes=REAL),
    case(
        "lu-unpack-solve",
        [
            lambda a, b: torch.lu_unpack(*torch.linalg.lu_factor_ex(a)[:2]),
            *(
                lambda a, b, left=left, adjoint=adjoint: torch.linalg.lu_solve(
                    *torch.linalg.lu_factor_ex(a)[:2], b if left else b.mT, left=left, adjoint=adjoint
                )
                for left in (True, False)
                for adjoint in (False, True)
            ),
        ],
        (2, 4, 4),
        (4, 3),
        dtypes=REAL,
    ),
    case(
        "householder-ormqr",
        [
            lambda a, tau, c: torch.linalg.householder_product(a, tau),
            *(
                lambda a, tau, c, left=left, t=t: torch.ormqr(a, tau, c if left else c.mT, left=left, transpose=t)
                for left in (True, False)
                for t in (False, True)
            ),
        ],
        lambda d: torch.geqrf(rand((5, 3), d))[0],
        lambda d: torch.geqrf(rand((5, 3), d))[1],
        (5, 4),
        dtypes=REAL,
    ),
    case("householder-batched", torch.linalg.householder_product, (2, 4, 3), (2, 2), dtypes=REAL),
    case("matrix-exp", torch.linalg.matrix_exp, lambda d: rand((2, 4, 4), d) * 0.3, dtypes=REAL),
    case("matrix-exp-large-norm", torch.linalg.matrix_exp, lambda d: rand((3, 3), d, seed=4), dtypes=(F64,)),
    case(
        "pinv",
        [
            torch.linalg.pinv,
            lambda a, t: torch.linalg.pinv(a, atol=t),
            lambda a, t: torch.linalg.pinv(a, rtol=t * 0.1),
            lambda a, t: torch.linalg.pinv(a, atol=t, rtol=t * 0.05),
            lambda a, t: torch.linalg.pinv(a @ a.mT, hermitian=True),
        ],
        singular((2, 4, 3)),
        lambda d: torch.tensor([0.5, 2.0], dtype=d),
        dtypes=REAL,
    ),
    case("geqrf", torch.geqrf, (5, 3), dtypes=REAL),
    case("geqrf-wide-batched", torch.geqrf, (2, 3, 5), dtypes=REAL),
    case("geqrf-zero-columns", torch.geqrf, zero_below((4, 3)), dtypes=REAL),
    case("geqrf-complex", torch.geqrf, complex_rand((2, 4, 3)), dtypes=COMPLEX),
    case(
        "geqrf-householder-ormqr",
        [
            lambda a, c: torch.linalg.householder_product(*torch.geqrf(a)),
            lambda a, c: torch.ormqr(*torch.geqrf(a), c, transpose=True),
        ],
        (2, 5, 3),
        (2, 5, 2),
        dtypes=REAL,
    ),
    case("ldl", LDL_VARIANTS, symmetric((2, 5, 5)), dtypes=REAL),
    case("ldl-pivots-singular", torch.linalg.ldl_factor_ex, ldl_edge_cases, dtypes=REAL),
    case(
        "ldl-solve-broadcast",
        lambda a, b: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(a), b),
        symmetric((2, 4, 4)),
        (4, 3),
        dtypes=REAL,
    ),  # fmt: skip
    case("ldl-complex-symmetric", LDL_VARIANTS[::2], symmetric((2, 4, 4)), dtypes=COMPLEX),
    case(
        "ldl-complex-hermitian",
        [
            lambda a: torch.linalg.ldl_factor_ex(a, hermitian=True),
            lambda a: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(a, hermitian=True), a[..., :2], hermitian=True),
        ],
        symmetric((2, 4, 4), hermitian=True),
        dtypes=COMPLEX,
    ),
    case("eigvals", torch.linalg.eigvals, (3, 5, 5), dtypes=REAL),
    case("eigvals-complex", torch.linalg.eigvals, complex_rand((2, 4, 4)), dtypes=COMPLEX),
]


@pytest.mark.parametrize("engine", ["numpy", "jax"])
@pytest.mark.parametrize("fn,inputs,levels", DECOMPOSITION_CASES)
def test_decompositions_match_torch(fn, inputs, levels, engine):
    if engine == "jax":
        pytest.importorskip("jax")
    assert_converts_and_matches(fn, inputs, levels=("high",), engine=engine)


# Eigenvectors of a general matrix: LAPACK's geev scales each column to unit norm with its largest
# entry real, which leaves its sign, and LAPACK builds choose that differently (PyTorch's MKL,
# numpy's OpenBLAS): columns are compared once their signs are aligned with PyTorch's, and must be
# eigenvectors of unit norm whatever their sign.
@pytest.mark.parametrize("engine", ["numpy", "jax"])
@pytest.mark.parametrize("dtype", [F32, F64, C64, C128], ids=str)
def test_eig_matches_torch_up_to_column_signs(dtype, engine):
    if engine == "jax":
        pytest.importorskip("jax")
    a = complex_rand((4, 5, 5), 3)(dtype) if dtype.is_complex else rand((4, 5, 5), dtype, seed=3)
    model, _, _ = convert(torch.linalg.eig, [a], engine=engine)
    values, vectors = model(tensor_to_numpy(a))
    want_values, want_vectors = (tensor_to_numpy(t) for t in torch.linalg.eig(a))
    assert_arrays_match(values, want_values, "eigenvalues")
    assert_arrays_match(align_column_signs(vectors, want_vectors), want_vectors, "eigenvectors")
    wide = vectors.astype(np.complex128)
    residual = tensor_to_numpy(a).astype(np.complex128) @ wide - wide * values[..., None, :]
    tol = 1e-4 if dtype in (F32, C64) else 1e-10
    assert np.abs(residual).max() < tol and np.allclose(np.linalg.norm(wide, axis=-2), 1, atol=tol)


def test_scipy_is_needed_only_by_the_ldl_factorisation(tmp_path):
    """geqrf and eig run on numpy alone; a Bunch-Kaufman LDLᵀ bundle needs scipy's LAPACK and says
    so when it is loaded on numpy, and when it is compiled on JAX."""
    s = rand((4, 4), F32)
    s = s + s.mT
    rlx.from_torch(Wrap(lambda a: (*torch.geqrf(a), *torch.linalg.eig(a))), [s], tmp_path / "plain", verify=False)
    rlx.from_torch(Wrap(lambda a: torch.linalg.ldl_factor(a)[0]), [s], tmp_path / "ldl")
    np.save(tmp_path / "s.npy", s.numpy())
    script = BLOCK_SCIPY + textwrap.dedent(
        f"""
        import numpy as np
        import rlx
        from rlx.errors import RlxError
        s = np.load({str(tmp_path / "s.npy")!r})
        rlx.load({str(tmp_path / "plain" / "bundle")!r})(s)
        assert "scipy" not in sys.modules, "something imported scipy"
        for engine in ("numpy", "jax"):
            try:
                rlx.load({str(tmp_path / "ldl" / "bundle")!r}, engine=engine)(s)
            except RlxError as e:
                print("ERROR:", e)
            else:
                raise SystemExit(f"running an LDL bundle on {{engine}} without scipy did not fail")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ERROR:")]
    assert len(lines) == 2 and all("sytrf" in ln and "pip install 'rlx[special]'" in ln for ln in lines), lines
