"""Matrix products (mm, bmm, matmul, addmm, baddbmm, linear) and pairwise distances (cdist, pdist)."""

from __future__ import annotations

import math

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.movement import reshape_to
from rlx.frontends.aten.reduce import reduce_value
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import broadcast
from rlx.frontends.common import static_dim
from rlx.ir import symbolic
from rlx.ir.calls import (
    Arange,
    Binary,
    Cast,
    Clamp,
    Concat,
    Full,
    IndexSelect,
    Linear,
    MatMul,
    Permute,
    Reshape,
    Unary,
    Where,
)
from rlx.ir.program import Lit, Operand, Ref
from rlx.ir.symbolic import Dim, Shape


@lowers("aten.mm", "aten.bmm", "aten.matmul", "aten.mv", "aten.dot", "aten.vdot")
def matmul(node: Node, b: Builder) -> Operand:
    out = node.meta
    x = b.cast(b.input(node, 0), out.dtype)
    y = b.cast(b.input(node, 1), out.dtype)
    return b.emit_like(MatMul(x, y), out)


@lowers("aten.addmm", "aten.baddbmm", "aten.addmv", "aten.addbmm")
def addmm(node: Node, b: Builder) -> Operand:
    """``beta·input + alpha·(x @ y)``; addbmm sums the batch of products."""
    out = node.meta
    bias = b.cast(b.input(node, 0), out.dtype)
    x, y = b.input(node, 1), b.input(node, 2)
    beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
    if node.base == "addbmm":  # Σ_b x[b] @ y[b] is one product: [n, B·k] @ [B·k, p]
        (nb_dim, n, k_dim), p = b.shape(x), b.shape(y)[2]
        nb, k = static_dim(nb_dim, "the addbmm batch", node), static_dim(k_dim, "the addbmm inner extent", node)
        xt = b.emit(Permute(x, (1, 0, 2)), (n, nb, k), b.dtype(x))
        x = b.emit(Reshape(xt, (n, nb * k)), (n, nb * k), b.dtype(x))
        y = b.emit(Reshape(y, (nb * k, p)), (nb * k, p), b.dtype(y))
    prod = b.emit(MatMul(x, y), _matmul_shape(b.shape(x), b.shape(y)), out.dtype)
    if alpha != 1:
        prod = b.emit(Binary("mul", prod, b.lit(alpha, out.dtype)), b.shape(prod), out.dtype)
    if beta == 0:  # PyTorch ignores `input` entirely (even NaN in it) when beta is 0
        return prod
    if beta != 1:
        bias = b.emit(Binary("mul", bias, b.lit(beta, out.dtype)), b.shape(bias), out.dtype)
    return b.emit_like(Binary("add", prod, bias), out)


def _matmul_shape(xs: Shape, ys: Shape) -> Shape:
    if len(xs) == 1 and len(ys) == 1:
        return ()
    if len(ys) == 1:
        return xs[:-1]
    if len(xs) == 1:
        return ys[:-2] + ys[-1:]
    batch = xs[:-2] if len(xs) >= len(ys) else ys[:-2]
    return batch + (xs[-2], ys[-1])


@lowers("aten.linear")
def linear(node: Node, b: Builder) -> Operand:
    x, w = b.input(node, 0), b.input(node, 1)
    return b.emit_like(Linear(x, w, b.optional_input(node, 2, "bias")), node.meta)


# ── pairwise distances ───────────────────────────────────────────────────────
def _p_distance(b: Builder, diff: Ref, p: float, nan_max: bool) -> Ref:
    """The ``p``-distance along the last axis of ``diff`` (``x_i - y_j``), as PyTorch's distance
    kernels compute it on ``|diff|``: p=0 sums ``min(ceil(|d|), 1)`` (so NaN propagates), p=1 sums,
    p=2 is ``sqrt(Σd²)``, p=inf the max, other p ``(Σ|d|^p)^(1/p)``. ``nan_max``: the inf-norm
    skips NaNs (cdist's scalar ``std::max`` loop) instead of propagating them (pdist's vector max)."""
    shape, dt = b.shape(diff), b.dtype(diff)
    axis = len(shape) - 1
    absolute = b.emit(Unary("abs", diff), shape, dt)
    if p == 0:
        step = b.emit(Binary("minimum", b.emit(Unary("ceil", absolute), shape, dt), b.lit(1, dt)), shape, dt)
        return reduce_value(b, "sum", step, (axis,), False, dt)
    if math.isinf(p):
        if nan_max:
            nan = b.emit(Unary("isnan", absolute), shape, "bool")
            absolute = b.emit(Where(nan, b.lit(0, dt), absolute), shape, dt)
        return reduce_value(b, "amax", absolute, (axis,), False, dt)
    if p == 1:
        return reduce_value(b, "sum", absolute, (axis,), False, dt)
    if p == 2:
        total = reduce_value(b, "sum", b.emit(Unary("square", absolute), shape, dt), (axis,), False, dt)
        return b.emit(Unary("sqrt", total), b.shape(total), dt)
    powered = b.emit(Binary("pow", absolute, b.lit(p, dt)), shape, dt)
    total = reduce_value(b, "sum", powered, (axis,), False, dt)
    return b.emit(Binary("pow", total, b.lit(1.0 / p, dt)), b.shape(total), dt)


def _distance_p(node: Node, index: int) -> float:
    p = node.arg(index, "p", 2.0)
    if not isinstance(p, (int, float)) or isinstance(p, bool) or p < 0 or math.isnan(p):
        raise LoweringError(f"node {node.id}: {node.base} needs a non-negative p, found {p!r}")
    return float(p)


@lowers("aten.cdist", "aten._cdist_forward")
def cdist(node: Node, b: Builder) -> Operand:
    """``cdist(x1 [*, P, M], x2 [*, R, M], p, compute_mode)`` → ``[*, P, R]``, as ``cdist_impl``
    does it: p=2 goes through a matrix product (``_euclidean_dist``) when ``compute_mode`` is 1, or
    is None/0 and P or R exceeds 25; everything else is the direct distance of every pair."""
    out = node.meta
    x1, x2 = b.cast(b.input(node, 0), out.dtype), b.cast(b.input(node, 1), out.dtype)
    p = _distance_p(node, 2)
    mode = node.arg(3, "compute_mode") or 0
    (r1, c1), r2 = b.shape(x1)[-2:], b.shape(x2)[-2]
    if 0 in (r1, r2, c1):  # no pairs, or distances between empty vectors (0)
        return b.emit_like(Full(0.0, out.shape, out.dtype), out)
    if p == 2 and (mode == 1 or (mode == 0 and (_rows(r1, node) > 25 or _rows(r2, node) > 25))):
        return _euclidean_dist(b, x1, x2, out.shape, out.dtype)
    s1, s2 = b.shape(x1), b.shape(x2)
    a = reshape_to(b, x1, (*s1[:-1], 1, c1))  # [*, P, 1, M]
    c = reshape_to(b, x2, (*s2[:-2], 1, r2, c1))  # [*, 1, R, M]
    diff = b.emit(Binary("sub", a, c), broadcast(b.shape(a), b.shape(c)), out.dtype)
    return reshape_to(b, _p_distance(b, diff, p, nan_max=True), out.shape)


def _rows(d: Dim, node: Node) -> int:
    # Choosing the matrix-product path compares the row counts with 25, which needs them static.
    return static_dim(d, "cdist's row count", node)


def _euclidean_dist(b: Builder, x1: Ref, x2: Ref, shape: tuple[Dim, ...], dtype: str) -> Ref:
    """PyTorch's ``_euclidean_dist``: ``sqrt(clamp_min([-2·x1, |x1|², 1] @ [x2, 1, |x2|²]ᵀ, 0))``."""

    def augmented(x: Ref, scale: float, norm_first: bool) -> Ref:
        s = b.shape(x)
        kept = (*s[:-1], 1)
        norm = reduce_value(b, "sum", b.emit(Unary("square", x), s, dtype), (len(s) - 1,), True, dtype)
        ones = b.emit(Full(1.0, kept, dtype), kept, dtype)
        head = b.emit(Binary("mul", x, b.lit(scale, dtype)), s, dtype) if scale != 1 else x
        parts = (head, norm, ones) if norm_first else (head, ones, norm)
        wide = (*s[:-1], static_dim(s[-1], "cdist's feature extent") + 2)
        return b.emit(Concat(parts, len(s) - 1), wide, dtype)

    a = augmented(x1, -2.0, True)
    c = augmented(x2, 1.0, False)
    rank = b.rank(c)
    ct = b.emit(Permute(c, (*range(rank - 2), rank - 1, rank - 2)), (*b.shape(c)[:-2], *b.shape(c)[-2:][::-1]), dtype)
    prod = b.emit(MatMul(a, ct), shape, dtype)
    clamped = b.emit(Clamp(prod, Lit(0.0, dtype), None), shape, dtype)
    return b.emit(Unary("sqrt", clamped), shape, dtype)


@lowers("aten.pdist", "aten._pdist_forward")
def pdist(node: Node, b: Builder) -> Operand:
    """``pdist(x [N, M], p)`` → the distances of the pairs ``i < j`` in row-major order
    (``N(N-1)/2`` of them). The pair of output ``k`` is computed, not stored: row
    ``i = ⌊(2N-1-√((2N-1)² - 8k)) / 2⌋`` (nudged by one where float rounding lands it off the
    row's first pair ``i(2N-1-i)/2``), column ``j = k - start(i) + i + 1``."""
    out = node.meta
    x = b.cast(b.input(node, 0), out.dtype)
    p = _distance_p(node, 1)
    n, m = b.shape(x)
    if not isinstance(n, int):
        raise LoweringError(f"node {node.id}: pdist over a symbolic number of rows is not supported")
    pairs = n * (n - 1) // 2
    if pairs == 0 or m == 0:
        return b.emit_like(Full(0.0, out.shape, out.dtype), out)
    i, j = _pair_rows(b, n, pairs)
    xi = b.emit(IndexSelect(x, 0, i), (pairs, m), out.dtype)
    xj = b.emit(IndexSelect(x, 0, j), (pairs, m), out.dtype)
    diff = b.emit(Binary("sub", xi, xj), (pairs, m), out.dtype)
    return _p_distance(b, diff, p, nan_max=False)


def _pair_rows(b: Builder, n: int, pairs: int) -> tuple[Ref, Ref]:
    """int64 (i, j) of the ``pairs`` pairs ``i < j < n`` in row-major order."""
    v = (pairs,)

    def op(fn: str, x: Operand, y: Operand, dtype: str = "i64") -> Ref:
        return b.emit(Binary(fn, x, y), v, dtype)

    def start(i: Ref) -> Ref:  # index of row i's first pair: i(2n-1-i)/2, always an integer
        return op("floor_divide", op("mul", i, op("sub", Lit(2 * n - 1, "i64"), i)), Lit(2, "i64"))

    k = b.emit(Arange(0, pairs, 1, "i64"), v, "i64")
    a = float(2 * n - 1)
    disc = op("sub", Lit(a * a, "f64"), op("mul", b.emit(Cast(k, "f64"), v, "f64"), Lit(8.0, "f64"), "f64"), "f64")
    root = b.emit(Unary("sqrt", b.emit(Clamp(disc, Lit(0.0, "f64"), None), v, "f64")), v, "f64")
    guess = b.emit(Unary("floor", op("div", op("sub", Lit(a, "f64"), root, "f64"), Lit(2.0, "f64"), "f64")), v, "f64")
    i = b.emit(Cast(b.emit(Clamp(guess, Lit(0.0, "f64"), Lit(float(n - 2), "f64")), v, "f64"), "i64"), v, "i64")
    # One step either way repairs a guess that float rounding put on a neighbouring row.
    up = op("le", start(op("add", i, Lit(1, "i64"))), k, "bool")
    i = op(
        "add",
        i,
        b.emit(
            Cast(b.emit(Binary("logical_and", up, op("lt", i, Lit(n - 2, "i64"), "bool")), v, "bool"), "i64"), v, "i64"
        ),
    )
    down = op("gt", start(i), k, "bool")
    i = op("sub", i, b.emit(Cast(down, "i64"), v, "i64"))
    j = op("add", op("sub", k, start(i)), op("add", i, Lit(1, "i64")))
    return i, j


@lowers("aten.dist")
def dist(node: Node, b: Builder) -> Operand:
    """``dist(x, y, p)``: the p-norm of the broadcast difference, over every element."""
    out = node.meta
    x, y = b.cast(b.input(node, 0), out.dtype), b.cast(b.input(node, 1), out.dtype)
    p = node.arg(2, "p", 2.0)
    shape = broadcast(b.shape(x), b.shape(y))
    diff = b.emit(Binary("sub", x, y), shape, out.dtype)
    n = 1
    for d in shape:
        n *= static_dim(d, "the dist extent", node)
    flat = reshape_to(b, diff, (n,))
    if n == 0:
        return b.emit_like(Full(0.0, out.shape, out.dtype), out)
    if isinstance(p, (int, float)) and p == float("-inf"):
        absolute = b.emit(Unary("abs", flat), (n,), out.dtype)
        return reduce_value(b, "amin", absolute, (0,), False, out.dtype)
    return _p_distance(b, flat, float(_distance_p(node, 2)), nan_max=False)


@lowers("aten._trilinear")
def trilinear(node: Node, b: Builder) -> Operand:
    """``_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim)`` (``F.bilinear``): each input
    gets size-1 axes inserted at its ``expand`` positions, the three are multiplied with
    broadcasting and the product is summed over ``sumdim``."""
    out = node.meta
    xs = [b.input(node, k) for k in range(3)]
    expands = [node.arg(3 + k, f"expand{k + 1}") for k in range(3)]
    return reshape_to(b, _trilinear(node, b, xs, expands, node.arg(6, "sumdim"), out.dtype), tuple(out.shape))


@lowers("aten.bilinear")
def bilinear(node: Node, b: Builder) -> Operand:
    """``y[..., o] = Σ_ij x1[..., i] · w[o, i, j] · x2[..., j] + bias[o]`` (leading axes flattened)."""
    out = node.meta
    x1, x2, w = b.input(node, 0), b.input(node, 1, "input2"), b.input(node, 2, "weight")
    x1 = reshape_to(b, x1, (symbolic.numel(b.shape(x1)[:-1]), b.shape(x1)[-1]))
    x2 = reshape_to(b, x2, (symbolic.numel(b.shape(x2)[:-1]), b.shape(x2)[-1]))
    y = _trilinear(node, b, [x1, w, x2], [[1, 3], [0], [1, 2]], [2, 3], out.dtype)
    bias = b.optional_input(node, 3, "bias")
    if bias is not None:
        y = b.emit(Binary("add", y, b.cast(bias, out.dtype)), b.shape(y), out.dtype)
    return reshape_to(b, y, tuple(out.shape))


def _trilinear(node: Node, b: Builder, xs: list[Ref], expands: list[list[int]], sumdim: list[int], dtype: str) -> Ref:
    factors: list[Ref] = []
    for x, expand in zip(xs, expands):
        shape = list(b.shape(x))
        for axis in sorted(expand):
            shape.insert(axis, 1)
        factors.append(reshape_to(b, b.cast(x, dtype), tuple(shape)))
    rank = b.rank(factors[0])
    if any(b.rank(f) != rank for f in factors):
        raise LoweringError(f"node {node.id}: _trilinear inputs must have the same rank once expanded")
    full = broadcast(*(b.shape(f) for f in factors))
    first = b.emit(Binary("mul", factors[0], factors[1]), full, dtype)
    product = b.emit(Binary("mul", first, factors[2]), full, dtype)
    axes = tuple(sorted({d % rank for d in sumdim}))
    return reduce_value(b, "sum", product, axes, False, dtype) if axes else product
