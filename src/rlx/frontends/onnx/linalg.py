"""Linear-algebra ONNX ops: Einsum, as permutes, diagonals, sums and batched MatMuls; Det of small matrices.

Einsum is contracted left to right, two operands at a time: labels both operands carry and a later
operand or the output needs are batch axes, labels both carry that nothing later needs are summed
by the MatMul, labels only one operand carries (and nothing later needs) are summed first.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.control import take
from rlx.frontends.onnx.elementwise import emit_binary
from rlx.frontends.onnx.movement import permute
from rlx.frontends.onnx.nn import matmul
from rlx.frontends.onnx.reduce import reduce
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, numel, onnx_op
from rlx.ir.calls import Diagonal, Expand
from rlx.ir.program import Ref
from rlx.ir.symbolic import Dim


class _Term:
    """An operand with one label per axis."""

    def __init__(self, ref: Ref, labels: str) -> None:
        self.ref, self.labels = ref, labels


def _parse(node: OnnxNode, equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise LoweringError(f"node {node.name} (Einsum): {len(terms)} terms for {len(ranks)} inputs")
    used = set(eq) - set(",->.")
    free = [c for c in string.ascii_letters if c not in used]
    n_ellipsis = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    ell = "".join(free[:n_ellipsis])
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - len(t.replace("...", ""))
            t = t.replace("...", ell[n_ellipsis - k :])
        if len(t) != r:
            raise LoweringError(f"node {node.name} (Einsum): term {t!r} does not match an input of rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:  # implicit output: the ellipsis axes, then the labels used once, sorted
        joined = "".join(out_terms)
        out = ell + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in ell))
    return out_terms, out


def _dedupe(b: OnnxBuilder, term: _Term) -> _Term:
    """A repeated label (``ii``) takes the diagonal."""
    ref, labels = term.ref, term.labels
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i = labels.index(c)
        j = labels.index(c, i + 1)
        shape = b.shape(ref)
        rest = [d for k, d in enumerate(shape) if k not in (i, j)]
        ref = b.emit(Diagonal(ref, 0, i, j), (*rest, shape[i]), b.dtype(ref))
        labels = "".join(ch for k, ch in enumerate(labels) if k not in (i, j)) + c
    return _Term(ref, labels)


def _sum_unneeded(b: OnnxBuilder, term: _Term, needed: set[str]) -> _Term:
    axes = tuple(k for k, c in enumerate(term.labels) if c not in needed)
    if not axes:
        return term
    return _Term(reduce(b, "sum", term.ref, axes, False), "".join(c for c in term.labels if c in needed))


def _to(b: OnnxBuilder, term: _Term, order: str) -> Ref:
    return permute(b, term.ref, tuple(term.labels.index(c) for c in order))


def _contract(b: OnnxBuilder, x: _Term, y: _Term, keep: set[str]) -> _Term:
    xs = dict(zip(x.labels, b.shape(x.ref)))
    ys = dict(zip(y.labels, b.shape(y.ref)))
    batch = "".join(c for c in x.labels if c in ys and c in keep)
    summed = "".join(c for c in x.labels if c in ys and c not in keep)
    left = "".join(c for c in x.labels if c not in ys)
    right = "".join(c for c in y.labels if c not in xs)

    def size(labels: str, sizes: dict[str, Dim]) -> Dim:
        return numel([sizes[c] for c in labels])

    bsizes = [xs[c] if xs[c] != 1 else ys[c] for c in batch]
    a = _expand_batch(b, _to(b, x, batch + left + summed), bsizes, len(batch))
    c = _expand_batch(b, _to(b, y, batch + summed + right), bsizes, len(batch))
    a = b.reshape(a, (*bsizes, size(left, xs), size(summed, xs)))
    c = b.reshape(c, (*bsizes, size(summed, ys), size(right, ys)))
    prod = matmul(b, a, c)
    out_shape = (*bsizes, *(xs[ch] for ch in left), *(ys[ch] for ch in right))
    return _Term(b.reshape(prod, out_shape), batch + left + right)


def _expand_batch(b: OnnxBuilder, ref: Ref, sizes: list[Dim], n: int) -> Ref:
    shape = b.shape(ref)
    want = (*sizes, *shape[n:])
    if tuple(shape) == want:
        return ref
    return b.emit(Expand(ref, want), want, b.dtype(ref))


@onnx_op("Einsum")
def einsum(node: OnnxNode, b: OnnxBuilder) -> Env:
    refs = [b.ref(node, k) for k in range(len(node.inputs))]
    terms_labels, out = _parse(node, node.attr("equation"), [b.rank(r) for r in refs])
    terms = [_dedupe(b, _Term(r, t)) for r, t in zip(refs, terms_labels)]
    later = [set(out).union(*(t.labels for t in terms[k + 1 :])) for k in range(len(terms))]
    acc = _sum_unneeded(b, terms[0], later[0])
    for k in range(1, len(terms)):
        nxt = _sum_unneeded(b, terms[k], later[k] | set(acc.labels))
        acc = _contract(b, acc, nxt, later[k])
        acc = _sum_unneeded(b, acc, later[k])
    acc = _sum_unneeded(b, acc, set(out))
    return _to(b, acc, out)


MAX_DET_SIZE = 4  # cofactor expansion: n! products


@onnx_op("Det")
def det(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    shape = b.shape(x)
    n = static_dim(shape[-1], "the matrix size", node)
    if n > MAX_DET_SIZE or shape[-2] != n:
        raise LoweringError(
            f"node {node.name} (Det): square matrices up to {MAX_DET_SIZE}×{MAX_DET_SIZE} are supported, got {list(shape[-2:])}"
        )
    rank = len(shape)
    rows = [take(b, x, rank - 2, i) for i in range(n)]
    entries = [[b.as_ref(b.operand(take(b, row, rank - 2, j))) for j in range(n)] for row in rows]

    def cofactor(rows_left: list[int], cols: list[int]) -> Ref:
        if len(cols) == 1:
            return entries[rows_left[0]][cols[0]]
        acc: Ref | None = None
        for k, c in enumerate(cols):
            term = emit_binary(b, "mul", entries[rows_left[0]][c], cofactor(rows_left[1:], cols[:k] + cols[k + 1 :]))
            acc = term if acc is None else emit_binary(b, "sub" if k % 2 else "add", acc, term)
        assert acc is not None
        return acc

    return cofactor(list(range(n)), list(range(n)))
