"""Products (MatMul, Linear: ``xp.matmul`` keeps float32 exact on every engine), decompositions
(Svd, Det, LuFactor, LuPermutation, Cholesky, Qr, Geqrf, Eigh, Eig, LdlFactor), the solves
(TriangularSolve, LdlSolve) and MatrixExp.

The Bunch-Kaufman LDLᵀ (LdlFactor, LdlSolve) is LAPACK's ``sytrf``/``sytrs`` through
``scipy.linalg.lapack`` (numpy has no binding for them): scipy is the optional extra
``rlx[special]``, imported at first use; ``SCIPY_CALLS`` names the Calls that need it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .precision import F64, I64, widen
from .registry import kernel
from .special import scipy_module

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace


@kernel("MatMul")
def matmul(c: C.MatMul, x: Any, y: Any, *, xp: ArrayNamespace) -> Any:
    # 1-d · 1-d gives a numpy scalar: keep it a 0-d array.
    return xp.asarray(xp.matmul(widen(x), widen(y))).astype(x.dtype, copy=False)


@kernel("Linear")
def linear(c: C.Linear, x: Any, w: Any, b: Any | None, *, xp: ArrayNamespace) -> Any:
    out = xp.matmul(widen(x), widen(w).T)
    if b is not None:
        out = out + widen(xp.asarray(b))
    return out.astype(x.dtype, copy=False)


# ── decompositions and solvers ───────────────────────────────────────────────
# Computed in float64 and rounded once: the factorisations of small float32 matrices come out as
# close to the exact result as float32 can hold, so they sit within tolerance of PyTorch's own
# float32 LAPACK results (which carry a few ulps of rounding each).
I32 = np.dtype(np.int32)


def _f64(x: Any) -> Any:
    return x.astype(F64)


@kernel("Svd")
def svd(c: C.Svd, x: Any, *, xp: ArrayNamespace) -> Any:
    a = _f64(x)
    if c.part == "s":
        return xp.linalg.svd(a, compute_uv=False).astype(x.dtype)
    u, _, vh = xp.linalg.svd(a, full_matrices=c.full_matrices)
    return (u if c.part == "u" else vh).astype(x.dtype)


@kernel("Det")
def det(c: C.Det, x: Any, *, xp: ArrayNamespace) -> Any:
    a = _f64(x)
    if c.part == "det":
        return xp.asarray(xp.linalg.det(a)).astype(x.dtype)
    sign, logabsdet = xp.linalg.slogdet(a)
    return xp.asarray(sign if c.part == "sign" else logabsdet).astype(x.dtype)


def _swap_rows(rows: Any, j: int, p: Any, xp: ArrayNamespace) -> Any:
    """The index that swaps entry ``j`` with entry ``p`` (per batch element) of ``rows``."""
    p = p[..., None]
    return xp.where(rows == j, p, xp.where(rows == p, j, rows))


def lu_factor(a: Any, xp: ArrayNamespace) -> tuple[Any, Any, Any]:
    """(LU, 0-based pivots int64 ``[..., k]``, info int32) of ``a`` ``[..., m, n]``: the unblocked
    right-looking ``getf2`` of LAPACK, one column at a time over the whole batch. A zero pivot
    leaves its column unscaled and sets ``info``, as ``getf2`` does."""
    m, n = a.shape[-2:]
    rows, cols = xp.arange(m), xp.arange(n)
    pivots, info = [], xp.zeros(a.shape[:-2], I32)
    for j in range(min(m, n)):
        p = xp.argmax(xp.abs(a[..., j:, j]), axis=-1) + j  # the first largest, as idamax
        pivots.append(p)
        a = xp.take_along_axis(a, _swap_rows(rows, j, p, xp)[..., None], axis=-2)
        pivot = a[..., j : j + 1, j : j + 1]
        zero = pivot == 0
        info = xp.where((info == 0) & zero[..., 0, 0], j + 1, info)
        below = (rows > j)[:, None]
        factors = xp.where(below & ~zero, a[..., :, j : j + 1] / xp.where(zero, 1, pivot), 0)
        a = a - xp.where((cols > j)[None, :], factors * a[..., j : j + 1, :], 0)
        a = xp.where(below & (cols == j)[None, :], factors, a)
    stacked = xp.stack(pivots, axis=-1) if pivots else xp.zeros((*a.shape[:-2], 0), I64)
    return a, stacked, info.astype(I32)


@kernel("LuFactor")
def lu(c: C.LuFactor, x: Any, *, xp: ArrayNamespace) -> Any:
    factors, pivots, info = lu_factor(_f64(x), xp)
    if c.part == "lu":
        return factors.astype(x.dtype)
    return (pivots + 1).astype(I32) if c.part == "pivots" else info


@kernel("LuPermutation")
def lu_permutation(c: C.LuPermutation, pivots: Any, *, xp: ArrayNamespace) -> Any:
    rows = xp.arange(c.size)
    perm = xp.broadcast_to(rows, (*pivots.shape[:-1], c.size)).astype(I64)
    for j in range(pivots.shape[-1]):
        perm = xp.take_along_axis(perm, _swap_rows(rows, j, pivots[..., j].astype(I64) - 1, xp), axis=-1)
    return perm


@kernel("TriangularSolve")
def triangular_solve(c: C.TriangularSolve, a: Any, b: Any, *, xp: ArrayNamespace) -> Any:
    n, dtype = a.shape[-1], b.dtype
    batch = xp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = xp.broadcast_to(_f64(a), (*batch, n, n))
    x = xp.zeros((*batch, *b.shape[-2:]), F64)
    b = xp.broadcast_to(_f64(b), x.shape)
    rows, cols = xp.arange(n)[:, None], xp.arange(n)[None, :]
    strict = xp.where(cols > rows if c.upper else cols < rows, a, 0)  # the triangle, diagonal aside
    for i in range(n - 1, -1, -1) if c.upper else range(n):
        rest = b[..., i : i + 1, :] - xp.matmul(strict[..., i : i + 1, :], x)
        solved = rest if c.unitriangular else rest / a[..., i : i + 1, i : i + 1]
        x = xp.where(rows == i, solved, x)
    return x.astype(dtype)


# Padé [13/13] with scaling and squaring (Higham 2005, as scipy's expm): the numerator and
# denominator coefficients, and the 1-norm up to which the approximant is accurate to float64.
_PADE13 = (
    64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0, 129060195264000.0,
    10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0,
)  # fmt: skip
_THETA13 = 5.371920351148152


@kernel("MatrixExp")
def matrix_exp(c: C.MatrixExp, x: Any, *, xp: ArrayNamespace) -> Any:
    """The squaring count comes from the data (the largest 1-norm of the batch), so this runs
    eagerly only; the JAX engine overrides it with ``jax.scipy.linalg.expm``."""
    a = _f64(x)
    n = a.shape[-1]
    if a.size == 0:
        return x
    norm = float(xp.max(xp.sum(xp.abs(a), axis=-2)))
    squarings = (
        0 if not norm < float("inf") or norm <= _THETA13 else min(int(math.ceil(math.log2(norm / _THETA13))), 1100)
    )
    a = a / 2.0**squarings
    b = _PADE13
    eye = xp.eye(n, dtype=F64)
    a2 = xp.matmul(a, a)
    a4 = xp.matmul(a2, a2)
    a6 = xp.matmul(a4, a2)
    u = xp.matmul(
        a, xp.matmul(a6, b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye
    )
    v = xp.matmul(a6, b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = xp.linalg.solve(v - u, v + u)
    for _ in range(squarings):
        r = xp.matmul(r, r)
    return r.astype(x.dtype)


def _symmetric(a: Any, lower: bool, xp: ArrayNamespace) -> Any:
    """The symmetric matrix one triangle of ``a`` stands for (LAPACK reads only that triangle)."""
    n = a.shape[-1]
    rows, cols = xp.arange(n)[:, None], xp.arange(n)[None, :]
    tri = xp.where(cols <= rows if lower else cols >= rows, a, 0)
    return tri + xp.swapaxes(xp.where(cols == rows, 0, tri), -1, -2)


@kernel("Cholesky")
def cholesky(c: C.Cholesky, x: Any, *, xp: ArrayNamespace) -> Any:
    factor = xp.linalg.cholesky(_symmetric(_f64(x), True, xp))
    return (xp.swapaxes(factor, -1, -2) if c.upper else factor).astype(x.dtype)


@kernel("Qr")
def qr(c: C.Qr, x: Any, *, xp: ArrayNamespace) -> Any:
    q, r = xp.linalg.qr(_f64(x), mode="complete" if c.complete else "reduced")
    return (q if c.part == "q" else r).astype(x.dtype)


@kernel("Eigh")
def eigh(c: C.Eigh, x: Any, *, xp: ArrayNamespace) -> Any:
    values, vectors = xp.linalg.eigh(_symmetric(_f64(x), c.lower, xp))
    return (values if c.part == "values" else vectors).astype(x.dtype)


# ── Householder QR (geqrf), general eigenproblem (geev), Bunch-Kaufman LDLᵀ (sytrf) ──
C128 = np.dtype(np.complex128)


def householder_qr(a: Any, xp: ArrayNamespace) -> tuple[Any, Any]:
    """(packed a, tau ``[..., k]``) of ``a`` ``[..., m, n]``: LAPACK's unblocked ``geqr2``, one column
    at a time over the whole batch. Column j's reflector comes from ``larfg``: ``β = -sign(Re α)·‖(α, x)‖``,
    ``τ = (β - α)/β``, ``v = (1, x/(α - β))``, and none (τ = 0) where ``x`` is zero and α real; then
    ``Hᴴ = I - τ̄·v·vᴴ`` is applied to the columns right of j."""
    m, n = a.shape[-2:]
    rows, cols = xp.arange(m), xp.arange(n)
    taus = []
    for j in range(min(m, n)):
        col = a[..., :, j]
        x = xp.where(rows > j, col, 0)
        xnorm = xp.sqrt(xp.sum(xp.real(x * xp.conj(x)), axis=-1))
        alpha = col[..., j]
        re, im = xp.real(alpha), xp.imag(alpha)
        beta = -xp.copysign(xp.sqrt(re * re + im * im + xnorm * xnorm), re)
        none = (xnorm == 0) & (im == 0)
        tau = xp.where(none, 0, (beta - alpha) / xp.where(none, 1, beta))
        scale = xp.where(none, 0, 1 / xp.where(none, 1, alpha - beta))
        v = x * scale[..., None] + (rows == j)
        w = xp.matmul(xp.conj(v)[..., None, :], a)  # vᴴ·a, [..., 1, n]
        a = xp.where(cols > j, a - xp.conj(tau)[..., None, None] * v[..., :, None] * w, a)
        packed = xp.where(rows == j, beta[..., None], xp.where(rows > j, v, col))
        a = xp.where(cols == j, xp.where(none[..., None], col, packed)[..., :, None], a)
        taus.append(tau)
    tau = xp.stack(taus, axis=-1) if taus else xp.zeros((*a.shape[:-2], 0), a.dtype)
    return a, tau


def _wide(x: Any) -> Any:
    """float64, or complex128 for a complex ``x``."""
    return x.astype(C128 if np.dtype(x.dtype).kind == "c" else F64)


@kernel("Geqrf")
def geqrf(c: C.Geqrf, x: Any, *, xp: ArrayNamespace) -> Any:
    a, tau = householder_qr(_wide(x), xp)
    return (a if c.part == "a" else tau).astype(x.dtype)


@kernel("Eig")
def eig(c: C.Eig, x: Any, *, xp: ArrayNamespace) -> Any:
    """``geev`` in double precision (numpy's own LAPACK; the JAX engine's), as complex of ``x``'s precision."""
    values, vectors = xp.linalg.eig(_wide(x))
    out = C128 if np.dtype(x.dtype) in (F64, C128) else np.dtype(np.complex64)
    return (values if c.part == "values" else vectors).astype(out)


SCIPY_CALLS = ("LdlFactor", "LdlSolve")


def scipy_lapack() -> Any:
    """``scipy.linalg.lapack``, imported at first use (a UsageError naming the extra without it)."""
    return scipy_module("scipy.linalg.lapack", "Bunch-Kaufman LDLᵀ factorisations and solves (LAPACK sytrf/sytrs)")


def _ldl_routine(dtype: Any, hermitian: bool, step: str) -> Any:
    """The double-precision LAPACK routine ``?sytrf``/``?sytrs`` (``zhe…`` for a hermitian complex)."""
    kind = ("zhe" if hermitian else "zsy") if np.dtype(dtype).kind == "c" else "dsy"
    return getattr(scipy_lapack(), kind + step)


def ldl_factor(a: np.ndarray, hermitian: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(LD, pivots int32, info int32) of ``a`` ``[..., n, n]`` (numpy), one matrix at a time."""
    work = np.tril(_wide(np.asarray(a)))
    n = work.shape[-1]
    ld, pivots = np.zeros_like(work), np.zeros(work.shape[:-1], np.int32)
    info = np.zeros(work.shape[:-2], np.int32)
    trf = _ldl_routine(work.dtype, hermitian, "trf")
    for at in np.ndindex(work.shape[:-2]) if n else ():
        factor, ipiv, failed = trf(work[at], lower=1)
        ld[at], pivots[at], info[at] = np.tril(factor), ipiv, failed
    return ld.astype(a.dtype), pivots, info


def ldl_solve(ld: np.ndarray, pivots: np.ndarray, b: np.ndarray, hermitian: bool) -> np.ndarray:
    """``A⁻¹·b`` from ``ldl_factor``'s (LD, pivots) (numpy), the batch axes broadcast."""
    batch = np.broadcast_shapes(ld.shape[:-2], pivots.shape[:-1], b.shape[:-2])
    wide = C128 if "c" in (np.dtype(ld.dtype).kind, np.dtype(b.dtype).kind) else F64
    ld = np.broadcast_to(np.asarray(ld).astype(wide), (*batch, *ld.shape[-2:]))
    pivots = np.broadcast_to(np.asarray(pivots), (*batch, pivots.shape[-1]))
    b = np.broadcast_to(np.asarray(b).astype(wide), (*batch, *b.shape[-2:]))
    out = np.zeros(b.shape, wide)
    trs = _ldl_routine(wide, hermitian, "trs")
    for at in np.ndindex(batch) if out.size else ():
        out[at] = trs(ld[at], pivots[at], b[at], lower=1)[0]
    return out


@kernel("LdlFactor")
def ldl_factor_kernel(c: C.LdlFactor, x: Any, *, xp: ArrayNamespace) -> Any:
    """numpy only (LAPACK through scipy): the JAX engine calls it back (``jax.pure_callback``)."""
    return ldl_factor(x, c.hermitian)[("ld", "pivots", "info").index(c.part)]


@kernel("LdlSolve")
def ldl_solve_kernel(c: C.LdlSolve, ld: Any, pivots: Any, b: Any, *, xp: ArrayNamespace) -> Any:
    return ldl_solve(ld, pivots, b, c.hermitian).astype(b.dtype)
