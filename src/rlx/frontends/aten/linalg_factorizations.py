"""Matrix factorisations and what is built from them: svd, det/slogdet, LU (factor, unpack, solve),
triangular and Cholesky solves, Householder QR (geqrf) and products (householder_product, ormqr),
pinv, matrix_exp, the general eigenproblem (eig, eigvals) and the Bunch-Kaufman LDLᵀ (factor, solve).

The factorisations are Calls (``Svd``, ``Det``, ``LuFactor``, ``TriangularSolve``, ``MatrixExp``,
``Geqrf``, ``Eig``, ``LdlFactor``, ``LdlSolve``); everything PyTorch builds on top of them
(unpacking L/U/P, the solves of a factorisation, the pseudo-inverse's threshold, applying
Householder reflectors) is lowered here into products, masks and those Calls. Real dtypes only,
except geqrf, eig and the LDLᵀ Calls, whose kernels take complex matrices as well (eig's results
are always complex). Every matrix op works on the last two axes.
"""

from __future__ import annotations

import numpy as np

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node, TensorMeta
from rlx.frontends.aten.elementwise import emit_binary
from rlx.frontends.aten.movement import reshape_to, take_slice
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import broadcast
from rlx.frontends.common import static_dim
from rlx.ir.calls import (
    Arange,
    ArgSort,
    Binary,
    Cast,
    Cholesky,
    Det,
    Eig,
    Eigh,
    Expand,
    Full,
    Gather,
    Geqrf,
    LdlFactor,
    LdlSolve,
    LuFactor,
    LuPermutation,
    MatMul,
    MatrixExp,
    Permute,
    Qr,
    Svd,
    TriangularSolve,
    Unary,
    Where,
)
from rlx.ir.program import Lit, Operand, Ref
from rlx.ir.symbolic import Dim


# ── helpers ──────────────────────────────────────────────────────────────────
def _meta(node: Node, k: int) -> TensorMeta:
    m = node.out[k] if len(node.out) > k else None
    if not isinstance(m, TensorMeta):
        raise LoweringError(f"node {node.id} ({node.op}): result {k} has no tensor shape recorded")
    return m


def _mt(b: Builder, x: Ref) -> Ref:
    """The transpose of the last two axes."""
    r, s = b.rank(x), b.shape(x)
    return b.emit(Permute(x, (*range(r - 2), r - 1, r - 2)), (*s[:-2], s[-1], s[-2]), b.dtype(x))


def _matmul(b: Builder, x: Ref, y: Ref) -> Ref:
    xs, ys = b.shape(x), b.shape(y)
    batch = broadcast(xs[:-2], ys[:-2])
    return b.emit(MatMul(x, y), (*batch, xs[-2], ys[-1]), b.dtype(x))


def _band(b: Builder, m: Dim, n: Dim, fn: str, offset: int = 0) -> Ref:
    """The bool ``[m, n]`` mask ``(col - row) fn offset`` (``le``/0: the lower triangle …)."""
    rows = reshape_to(b, b.emit(Arange(0, m, 1, "i64"), (m,), "i64"), (m, 1))
    cols = reshape_to(b, b.emit(Arange(0, n, 1, "i64"), (n,), "i64"), (1, n))
    return emit_binary(b, fn, emit_binary(b, "sub", cols, rows), Lit(offset, "i64"), "bool")


def _keep(b: Builder, x: Ref, fn: str, offset: int = 0) -> Ref:
    """``x`` where the band mask holds, else 0 (tril: ``le``, 0; triu: ``ge``, 0)."""
    m, n = b.shape(x)[-2:]
    return b.emit(Where(_band(b, m, n, fn, offset), x, b.lit(0, b.dtype(x))), b.shape(x), b.dtype(x))


def _eye(b: Builder, m: Dim, n: Dim, dtype: str) -> Ref:
    return b.emit(Cast(_band(b, m, n, "eq"), dtype), (m, n), dtype)


def _expand(b: Builder, x: Ref, shape: tuple[Dim, ...]) -> Ref:
    if tuple(b.shape(x)) == tuple(shape):
        return x
    return b.emit(Expand(x, shape), shape, b.dtype(x))


def _full(b: Builder, meta: TensorMeta, value: float = 0) -> Ref:
    return b.emit_like(Full(value, meta.shape, meta.dtype), meta)


def _flag(node: Node, index: int, name: str, default: bool) -> bool:
    return bool(node.arg(index, name, default))


# ── svd, det, slogdet ────────────────────────────────────────────────────────
@lowers("aten._linalg_svd")
def linalg_svd(node: Node, b: Builder) -> tuple[Ref, Ref, Ref]:
    """``(U, S, Vh)``; without ``compute_uv`` PyTorch returns empty U and Vh."""
    u_meta, s_meta, vh_meta = (_meta(node, k) for k in range(3))
    x = b.cast(b.input(node, 0), s_meta.dtype)
    full, compute_uv = _flag(node, 1, "full_matrices", False), _flag(node, 2, "compute_uv", True)
    s = b.emit_like(Svd(x, "s", full), s_meta)
    if not compute_uv:
        return _full(b, u_meta), s, _full(b, vh_meta)
    return b.emit_like(Svd(x, "u", full), u_meta), s, b.emit_like(Svd(x, "vh", full), vh_meta)


def _lu_parts(node: Node, b: Builder, x: Ref, first: int) -> tuple[Ref, Ref]:
    """The LU and pivots results (``first`` and ``first + 1``) a det/slogdet node also returns;
    dead code unless the graph reads them."""
    lu_meta, piv_meta = _meta(node, first), _meta(node, first + 1)
    return b.emit_like(LuFactor(x, "lu"), lu_meta), b.emit_like(LuFactor(x, "pivots"), piv_meta)


@lowers("aten._linalg_det", "aten.linalg_det", "aten.det")
def det(node: Node, b: Builder) -> Operand | tuple[Ref, ...]:
    meta = _meta(node, 0)
    x = b.cast(b.input(node, 0), meta.dtype)
    value = b.emit_like(Det(x, "det"), meta)
    return (value, *_lu_parts(node, b, x, 1)) if node.base == "_linalg_det" else value


@lowers("aten._linalg_slogdet", "aten.linalg_slogdet", "aten.slogdet", "aten.logdet")
def slogdet(node: Node, b: Builder) -> Operand | tuple[Ref, ...]:
    meta = _meta(node, 0)
    x = b.cast(b.input(node, 0), meta.dtype)
    sign = b.emit_like(Det(x, "sign"), meta)
    logabsdet = b.emit_like(Det(x, "logabsdet"), _meta(node, 1) if node.base != "logdet" else meta)
    if node.base == "logdet":  # log(det): NaN for a negative determinant, -inf for a singular one
        negative = b.emit(Binary("lt", sign, b.lit(0, meta.dtype)), meta.shape, "bool")
        return b.emit_like(Where(negative, b.lit(float("nan"), meta.dtype), logabsdet), meta)
    if node.base == "_linalg_slogdet":
        return (sign, logabsdet, *_lu_parts(node, b, x, 2))
    return sign, logabsdet


# ── LU ───────────────────────────────────────────────────────────────────────
@lowers("aten.linalg_lu_factor_ex", "aten.linalg_lu_factor")
def lu_factor(node: Node, b: Builder) -> tuple[Ref, ...]:
    if not _flag(node, 1, "pivot", True):
        raise LoweringError(f"node {node.id}: LU without pivoting is not supported (PyTorch's CPU kernel has none)")
    lu_meta = _meta(node, 0)
    x = b.cast(b.input(node, 0), lu_meta.dtype)
    parts = [b.emit_like(LuFactor(x, "lu"), lu_meta), b.emit_like(LuFactor(x, "pivots"), _meta(node, 1))]
    if node.base == "linalg_lu_factor_ex":
        parts.append(b.emit_like(LuFactor(x, "info"), _meta(node, 2)))
    return tuple(parts)


def _permutation_matrix(b: Builder, pivots: Ref, m: Dim, meta: TensorMeta) -> Ref:
    """``P`` with ``A = P·L·U``: ``P[r, i] = 1`` where row ``i`` of ``L·U`` is row ``r`` of ``A``."""
    batch = b.shape(pivots)[:-1]
    perm = b.emit(LuPermutation(pivots, static_dim(m, "the LU row count")), (*batch, m), "i64")
    rows = reshape_to(b, b.emit(Arange(0, m, 1, "i64"), (m,), "i64"), (m, 1))
    hit = emit_binary(b, "eq", reshape_to(b, perm, (*batch, 1, m)), rows, "bool")
    return b.emit_like(Cast(hit, meta.dtype), meta)


def _unpack(b: Builder, lu: Ref, metas: tuple[TensorMeta, TensorMeta]) -> tuple[Ref, Ref]:
    """``L`` (unit lower, ``[m, k]``) and ``U`` (upper, ``[k, n]``) of a packed LU ``[m, n]``."""
    (m, n), l_meta = b.shape(lu)[-2:], metas[0]
    k = l_meta.shape[-1]
    lower = _keep(b, take_slice(b, lu, b.rank(lu) - 1, 0, k) if k != n else lu, "lt")
    unit = b.emit_like(Binary("add", lower, _eye(b, m, k, l_meta.dtype)), l_meta)
    upper = _keep(b, take_slice(b, lu, b.rank(lu) - 2, 0, k) if k != m else lu, "ge")
    return unit, upper


@lowers("aten.linalg_lu")
def linalg_lu(node: Node, b: Builder) -> tuple[Ref, Ref, Ref]:
    if not _flag(node, 1, "pivot", True):
        raise LoweringError(f"node {node.id}: LU without pivoting is not supported (PyTorch's CPU kernel has none)")
    p_meta, l_meta, u_meta = (_meta(node, k) for k in range(3))
    x = b.cast(b.input(node, 0), l_meta.dtype)
    m, n = b.shape(x)[-2:]
    k = min(static_dim(m, "the LU row count"), static_dim(n, "the LU column count"))
    lu = b.emit(LuFactor(x, "lu"), b.shape(x), l_meta.dtype)
    pivots = b.emit(LuFactor(x, "pivots"), (*b.shape(x)[:-2], k), "i32")
    return (_permutation_matrix(b, pivots, m, p_meta), *_unpack(b, lu, (l_meta, u_meta)))


@lowers("aten.lu_unpack")
def lu_unpack(node: Node, b: Builder) -> tuple[Ref, Ref, Ref]:
    p_meta, l_meta, u_meta = (_meta(node, k) for k in range(3))
    lu, pivots = b.cast(b.input(node, 0), l_meta.dtype), b.input(node, 1)
    if _flag(node, 2, "unpack_data", True):
        lower, upper = _unpack(b, lu, (l_meta, u_meta))
    else:
        lower, upper = _full(b, l_meta), _full(b, u_meta)
    unpack_pivots = _flag(node, 3, "unpack_pivots", True)
    p = _permutation_matrix(b, pivots, b.shape(lu)[-2], p_meta) if unpack_pivots else _full(b, p_meta)
    return p, lower, upper


def _solve(b: Builder, a: Ref, rhs: Ref, upper: bool, unit: bool = False) -> Ref:
    batch = broadcast(b.shape(a)[:-2], b.shape(rhs)[:-2])
    return b.emit(TriangularSolve(a, rhs, upper, unit), (*batch, *b.shape(rhs)[-2:]), b.dtype(rhs))


def _gather_rows(b: Builder, x: Ref, perm: Ref) -> Ref:
    """``x[..., perm, :]`` (``perm`` ``[..., m]`` int64, batch broadcast against ``x``)."""
    batch = broadcast(b.shape(x)[:-2], b.shape(perm)[:-1])
    shape = (*batch, *b.shape(x)[-2:])
    x = _expand(b, x, shape)
    index = _expand(b, reshape_to(b, perm, (*b.shape(perm), 1)), shape)
    return b.emit(Gather(x, len(shape) - 2, index), shape, b.dtype(x))


@lowers("aten.linalg_lu_solve")
def lu_solve(node: Node, b: Builder) -> Operand:
    """``A·X = B`` (``adjoint``: ``Aᴴ·X = B``; not ``left``: ``X·A = B``) with ``A = P·L·U``."""
    meta = node.meta
    lu, pivots = b.cast(b.input(node, 0), meta.dtype), b.input(node, 1)
    rhs = b.cast(b.input(node, 2), meta.dtype)
    left, adjoint = _flag(node, 3, "left", True), _flag(node, 4, "adjoint", False)
    if not left:  # X·A = B ⟺ Aᵀ·Xᵀ = Bᵀ
        rhs, adjoint = _mt(b, rhs), not adjoint
    m = b.shape(lu)[-2]
    perm = b.emit(LuPermutation(pivots, static_dim(m, "the LU row count")), (*b.shape(pivots)[:-1], m), "i64")
    if not adjoint:  # X = U⁻¹·L⁻¹·Pᵀ·B, and Pᵀ·B = B[perm]
        x = _solve(b, lu, _solve(b, lu, _gather_rows(b, rhs, perm), upper=False, unit=True), upper=True)
    else:  # Aᵀ = Uᵀ·Lᵀ·Pᵀ: X = P·L⁻ᵀ·U⁻ᵀ·B, and P·W = W[perm⁻¹]
        lut = _mt(b, lu)
        w = _solve(b, lut, _solve(b, lut, rhs, upper=False), upper=True, unit=True)
        inverse = b.emit(ArgSort(perm, b.rank(perm) - 1, False, True), b.shape(perm), "i64")
        x = _gather_rows(b, w, inverse)
    return _mt(b, x) if not left else x


# ── triangular and Cholesky solves ───────────────────────────────────────────
@lowers("aten.linalg_solve_triangular")
def solve_triangular(node: Node, b: Builder) -> Operand:
    meta = node.meta
    a, rhs = b.cast(b.input(node, 0), meta.dtype), b.cast(b.input(node, 1), meta.dtype)
    upper = _flag(node, 2, "upper", False)
    left, unit = _flag(node, 3, "left", True), _flag(node, 4, "unitriangular", False)
    if left:
        return _solve(b, a, rhs, upper, unit)
    return _mt(b, _solve(b, _mt(b, a), _mt(b, rhs), not upper, unit))  # X·A = B ⟺ Aᵀ·Xᵀ = Bᵀ


@lowers("aten.triangular_solve")
def triangular_solve(node: Node, b: Builder) -> tuple[Ref, Ref]:
    """``(X, A)`` with ``op(A)·X = B``; the second result is PyTorch's copy of ``A``."""
    meta = _meta(node, 0)
    rhs, a = b.cast(b.input(node, 0), meta.dtype), b.cast(b.input(node, 1), meta.dtype)
    upper, transpose = _flag(node, 2, "upper", True), _flag(node, 3, "transpose", False)
    unit = _flag(node, 4, "unitriangular", False)
    x = _solve(b, _mt(b, a), rhs, not upper, unit) if transpose else _solve(b, a, rhs, upper, unit)
    return x, a


def _cholesky_solve(b: Builder, rhs: Ref, factor: Ref, upper: bool) -> Ref:
    """``X`` with ``A·X = B`` for ``A = L·Lᵀ`` (or ``Uᵀ·U`` with ``upper``)."""
    lower = _mt(b, factor) if upper else factor
    return _solve(b, _mt(b, lower), _solve(b, lower, rhs, upper=False), upper=True)


@lowers("aten.cholesky_solve", "aten._cholesky_solve_helper")
def cholesky_solve(node: Node, b: Builder) -> Operand:
    meta = node.meta
    rhs, factor = b.cast(b.input(node, 0), meta.dtype), b.cast(b.input(node, 1), meta.dtype)
    return _cholesky_solve(b, rhs, factor, _flag(node, 2, "upper", False))


@lowers("aten.cholesky_inverse")
def cholesky_inverse(node: Node, b: Builder) -> Operand:
    meta = node.meta
    factor = b.cast(b.input(node, 0), meta.dtype)
    n = b.shape(factor)[-1]
    return _cholesky_solve(b, _eye(b, n, n, meta.dtype), factor, _flag(node, 1, "upper", False))


# ── Householder reflectors ───────────────────────────────────────────────────
def _reflectors(b: Builder, a: Ref, tau: Ref) -> tuple[list[Ref], list[Ref]]:
    """The Householder vectors ``vᵢ`` (``[..., m, 1]``: 1 at row i, ``a``'s column i below it) and
    scales ``τᵢ`` (``[..., 1, 1]``) of a geqrf-packed ``a``; ``Hᵢ = I - τᵢ·vᵢ·vᵢᵀ``."""
    shape, dt = b.shape(a), b.dtype(a)
    m = shape[-2]
    k = static_dim(b.shape(tau)[-1], "the number of Householder reflectors")
    lower = _keep(b, a, "lt")
    vs, taus = [], []
    for i in range(k):
        column = take_slice(b, lower, len(shape) - 1, i, 1)
        unit = reshape_to(b, take_slice(b, _eye(b, m, i + 1, dt), 1, i, 1), (m, 1))
        vs.append(emit_binary(b, "add", column, unit))
        t = take_slice(b, tau, b.rank(tau) - 1, i, 1)
        taus.append(reshape_to(b, t, (*b.shape(t), 1)))
    return vs, taus


def _reflect(b: Builder, x: Ref, v: Ref, tau: Ref, left: bool) -> Ref:
    """``H·x`` (``left``) or ``x·H`` with ``H = I - τ·v·vᵀ``."""
    if left:  # x - τ·v·(vᵀ·x)
        step = _matmul(b, emit_binary(b, "mul", v, tau), _matmul(b, _mt(b, v), x))
    else:  # x - (x·v)·τ·vᵀ
        step = _matmul(b, emit_binary(b, "mul", _matmul(b, x, v), tau), _mt(b, v))
    return emit_binary(b, "sub", x, step)


@lowers("aten.linalg_householder_product", "aten.orgqr")
def householder_product(node: Node, b: Builder) -> Operand:
    """``H₀·H₁·…·H_{k-1}`` restricted to its first ``n`` columns: the reflectors applied to ``I[m, n]``."""
    meta = node.meta
    a, tau = b.cast(b.input(node, 0), meta.dtype), b.cast(b.input(node, 1), meta.dtype)
    m, n = b.shape(a)[-2:]
    q = _expand(b, _eye(b, m, n, meta.dtype), meta.shape)
    vs, taus = _reflectors(b, a, tau)
    for v, t in reversed(list(zip(vs, taus))):
        q = _reflect(b, q, v, t, left=True)
    return _expand(b, q, meta.shape)


@lowers("aten.ormqr")
def ormqr(node: Node, b: Builder) -> Operand:
    """``op(Q)·C`` (``left``) or ``C·op(Q)`` with ``Q = H₀·…·H_{k-1}``, ``op`` the transpose or not."""
    meta = node.meta
    a, tau = b.cast(b.input(node, 0), meta.dtype), b.cast(b.input(node, 1), meta.dtype)
    c = b.cast(b.input(node, 2), meta.dtype)
    left, transpose = _flag(node, 3, "left", True), _flag(node, 4, "transpose", False)
    pairs = list(zip(*_reflectors(b, a, tau)))
    # Q·C applies H_{k-1} first; Qᵀ·C and C·Q apply H₀ first; C·Qᵀ applies H_{k-1} first.
    if left != transpose:
        pairs.reverse()
    for v, t in pairs:
        c = _reflect(b, c, v, t, left)
    return _expand(b, c, meta.shape)


# ── pinv, matrix_exp ─────────────────────────────────────────────────────────
def _tolerance_operand(b: Builder, node: Node, index: int, name: str, dtype: str) -> Operand | None:
    arg = node.arg(index, name)
    if arg is None:
        return None
    op = b.operand(arg, dtype)
    return b.cast(op, dtype)


@lowers("aten.linalg_pinv")
def pinv(node: Node, b: Builder) -> Operand:
    """PyTorch's ``linalg_pinv``: ``Vᴴ·diag(1/S)·Uᴴ`` over the singular values above
    ``max(atol, rtol·S_max)``; rtol defaults to ``eps·max(m, n)``, or to 0 where a positive atol is
    given. ``hermitian`` input gives the same matrix (PyTorch gets it from eigh; for a symmetric
    matrix the singular values are the eigenvalues' magnitudes)."""
    meta = node.meta
    dt = meta.dtype
    x = b.cast(b.input(node, 0), dt)
    m, n = (static_dim(d, "the pinv matrix extent") for d in b.shape(x)[-2:])
    if 0 in (m, n):
        return _full(b, meta)
    k = min(m, n)
    batch = b.shape(x)[:-2]
    if node.arg(3, "hermitian", False):  # eigh reads the lower triangle only
        x = emit_binary(b, "add", _keep(b, x, "le"), _mt(b, _keep(b, x, "lt")))
    u = b.emit(Svd(x, "u", False), (*batch, m, k), dt)
    s = b.emit(Svd(x, "s", False), (*batch, k), dt)
    vh = b.emit(Svd(x, "vh", False), (*batch, k, n), dt)
    if node.overload in ("default", "rcond_tensor"):  # pinv(A, rcond): rcond is the rtol, atol is 0
        atol, rtol = None, _tolerance_operand(b, node, 1, "rcond", dt)
    else:
        atol, rtol = _tolerance_operand(b, node, 1, "atol", dt), _tolerance_operand(b, node, 2, "rtol", dt)
    if rtol is None:
        default = b.lit(float(np.finfo(np.dtype("float32" if dt != "f64" else "float64")).eps) * max(m, n), dt)
        rtol = default if atol is None else _where_positive(b, atol, default, dt)
    s_max = take_slice(b, s, len(batch), 0, 1)
    bound = emit_binary(b, "mul", _unsqueeze_last(b, rtol), s_max)
    if atol is not None:
        bound = emit_binary(b, "maximum", _unsqueeze_last(b, atol), bound)
    kept = emit_binary(b, "gt", s, bound, "bool")
    inverse = b.emit(Unary("reciprocal", s), b.shape(s), dt)
    s_inv = b.emit(Where(kept, inverse, b.lit(0, dt)), b.shape(kept), dt)
    scaled = emit_binary(b, "mul", _mt(b, vh), reshape_to(b, s_inv, (*b.shape(s_inv)[:-1], 1, k)))
    return _expand(b, _matmul(b, scaled, _mt(b, u)), meta.shape)


def _unsqueeze_last(b: Builder, x: Operand) -> Operand:
    return x if isinstance(x, Lit) else reshape_to(b, x, (*b.shape(x), 1))


def _where_positive(b: Builder, atol: Operand, default: Lit, dt: str) -> Operand:
    """0 where ``atol > 0``, else ``default``: PyTorch's rtol when only atol is given."""
    if isinstance(atol, Lit):
        return b.lit(0, dt) if float(atol.value) > 0 else default  # type: ignore[arg-type]
    positive = b.emit(Binary("gt", atol, b.lit(0, dt)), b.shape(atol), "bool")
    return b.emit(Where(positive, b.lit(0, dt), default), b.shape(atol), dt)


@lowers("aten.linalg_matrix_exp", "aten.matrix_exp")
def matrix_exp(node: Node, b: Builder) -> Operand:
    meta = node.meta
    return b.emit_like(MatrixExp(b.cast(b.input(node, 0), meta.dtype)), meta)


# ── Cholesky, QR, eigh, inverse, solve ───────────────────────────────────────
@lowers("aten.cholesky", "aten.linalg_cholesky_ex", "aten.linalg_cholesky")
def cholesky(node: Node, b: Builder) -> Operand | tuple[Ref, Ref]:
    meta = _meta(node, 0)
    upper = _flag(node, 1, "upper", False)
    factor = b.emit_like(Cholesky(b.cast(b.input(node, 0), meta.dtype), upper), meta)
    return (factor, _full(b, _meta(node, 1))) if node.base == "linalg_cholesky_ex" else factor


@lowers("aten.linalg_qr")
def linalg_qr(node: Node, b: Builder) -> tuple[Ref, Ref]:
    q_meta, r_meta = _meta(node, 0), _meta(node, 1)
    x = b.cast(b.input(node, 0), r_meta.dtype)
    mode = node.arg(1, "mode", "reduced")
    complete = mode == "complete"
    q = _full(b, q_meta) if mode == "r" else b.emit_like(Qr(x, "q", complete), q_meta)
    return q, b.emit_like(Qr(x, "r", complete), r_meta)


@lowers("aten._linalg_eigh", "aten.linalg_eigh")
def linalg_eigh(node: Node, b: Builder) -> tuple[Ref, Ref]:
    values_meta, vectors_meta = _meta(node, 0), _meta(node, 1)
    x = b.cast(b.input(node, 0), values_meta.dtype)
    lower = str(node.arg(1, "UPLO", "L")).upper() == "L"
    values = b.emit_like(Eigh(x, "values", lower), values_meta)
    if not _flag(node, 2, "compute_v", True):
        return values, _full(b, vectors_meta)
    return values, b.emit_like(Eigh(x, "vectors", lower), vectors_meta)


def _lu_solve_left(b: Builder, x: Ref, rhs: Ref, m: Dim) -> tuple[Ref, Ref, Ref]:
    """``A⁻¹·B`` through ``A``'s LU: (solution, LU, pivots)."""
    k = static_dim(m, "the matrix extent")
    lu = b.emit(LuFactor(x, "lu"), b.shape(x), b.dtype(x))
    pivots = b.emit(LuFactor(x, "pivots"), (*b.shape(x)[:-2], k), "i32")
    perm = b.emit(LuPermutation(pivots, k), (*b.shape(x)[:-2], m), "i64")
    solution = _solve(b, lu, _solve(b, lu, _gather_rows(b, rhs, perm), upper=False, unit=True), upper=True)
    return solution, lu, pivots


@lowers("aten.linalg_inv_ex", "aten.linalg_inv", "aten.inverse")
def inverse(node: Node, b: Builder) -> Operand | tuple[Ref, Ref]:
    meta = _meta(node, 0)
    x = b.cast(b.input(node, 0), meta.dtype)
    n = b.shape(x)[-1]
    solution, _, _ = _lu_solve_left(b, x, _eye(b, n, n, meta.dtype), n)
    result = _expand(b, solution, meta.shape)
    return (result, _full(b, _meta(node, 1))) if node.base == "linalg_inv_ex" else result


@lowers("aten._linalg_solve_ex", "aten.linalg_solve")
def linalg_solve(node: Node, b: Builder) -> Operand | tuple[Ref, ...]:
    """``A·X = B`` (not ``left``: ``X·A = B``); a ``B`` of one rank less than ``A`` is a vector (batch)."""
    meta = _meta(node, 0)
    x, rhs = b.cast(b.input(node, 0), meta.dtype), b.cast(b.input(node, 1), meta.dtype)
    left = _flag(node, 2, "left", True)
    vector = b.rank(rhs) == b.rank(x) - 1
    if vector:
        rhs = reshape_to(b, rhs, (*b.shape(rhs), 1))
    if not left:  # X·A = B ⟺ Aᵀ·Xᵀ = Bᵀ
        solution, lu, pivots = _lu_solve_left(b, _mt(b, x), _mt(b, rhs), b.shape(x)[-1])
        solution = _mt(b, solution)
    else:
        solution, lu, pivots = _lu_solve_left(b, x, rhs, b.shape(x)[-2])
    result = reshape_to(b, _expand(b, solution, (*meta.shape, 1) if vector else meta.shape), meta.shape)
    if node.base == "linalg_solve":
        return result
    return result, lu, pivots, _full(b, _meta(node, 3))


# ── geqrf, eig, LDLᵀ ─────────────────────────────────────────────────────────
@lowers("aten.geqrf")
def geqrf(node: Node, b: Builder) -> tuple[Ref, Ref]:
    """``(a, tau)``: LAPACK's packed Householder QR, which householder_product and ormqr read."""
    a_meta, tau_meta = _meta(node, 0), _meta(node, 1)
    x = b.cast(b.input(node, 0), a_meta.dtype)
    return b.emit_like(Geqrf(x, "a"), a_meta), b.emit_like(Geqrf(x, "tau"), tau_meta)


@lowers("aten.linalg_eig", "aten.linalg_eigvals")
def linalg_eig(node: Node, b: Builder) -> Operand | tuple[Ref, Ref]:
    """Complex eigenvalues (and eigenvectors) of a real or complex matrix."""
    x = b.input(node, 0)
    values = b.emit_like(Eig(x, "values"), _meta(node, 0))
    if node.base == "linalg_eigvals":
        return values
    return values, b.emit_like(Eig(x, "vectors"), _meta(node, 1))


@lowers("aten.linalg_ldl_factor_ex", "aten.linalg_ldl_factor")
def ldl_factor(node: Node, b: Builder) -> tuple[Ref, ...]:
    """``(LD, pivots[, info])``; ``check_errors`` is not honoured (info is returned, nothing raises)."""
    ld_meta = _meta(node, 0)
    x = b.cast(b.input(node, 0), ld_meta.dtype)
    hermitian = _flag(node, 1, "hermitian", False)
    parts = [b.emit_like(LdlFactor(x, "ld", hermitian), ld_meta)]
    parts.append(b.emit_like(LdlFactor(x, "pivots", hermitian), _meta(node, 1)))
    if node.base == "linalg_ldl_factor_ex":
        parts.append(b.emit_like(LdlFactor(x, "info", hermitian), _meta(node, 2)))
    return tuple(parts)


@lowers("aten.linalg_ldl_solve")
def ldl_solve(node: Node, b: Builder) -> Operand:
    meta = node.meta
    ld, pivots = b.cast(b.input(node, 0), meta.dtype), b.input(node, 1)
    rhs = b.cast(b.input(node, 2), meta.dtype)
    return b.emit_like(LdlSolve(ld, pivots, rhs, _flag(node, 3, "hermitian", False)), meta)
