"""Text ONNX ops: TfIdfVectorizer over integer tokens, as window comparisons and sums.

For every n-gram length in range and every skip distance, the token windows are gathered once
(an ``IndexSelect`` with a window index fixed while converting), compared with the pool's n-grams
of that length, and the matches counted; a one-hot matrix sends each pool n-gram's count to its
output column. Unigrams are counted at skip distance 1 only, as the reference does.
"""

from __future__ import annotations

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.elementwise import emit_binary
from rlx.frontends.onnx.movement import concat
from rlx.frontends.onnx.nn import matmul
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, onnx_op
from rlx.ir import dtypes
from rlx.ir.calls import IndexSelect, Reduce
from rlx.ir.program import Ref


def _group_counts(b: OnnxBuilder, node: OnnxNode, x: Ref, pool: np.ndarray, n: int, max_skip: int) -> Ref:
    """[B, G] matches of each of the G pool n-grams (``pool``: [G, n]) in the rows of ``x`` [B, C]."""
    batch, length = b.shape(x)
    length = static_dim(length, "the sequence length", node)
    total: Ref | None = None
    for d in [1] if n == 1 else range(1, max_skip + 2):
        starts = length - d * (n - 1)
        if starts <= 0:
            continue
        index = np.arange(starts)[:, None] + d * np.arange(n)[None, :]
        idx = b.as_ref(b.operand(index.astype(np.int64), f"{node.name}_windows"))
        windows = b.emit(IndexSelect(x, 1, idx), (batch, starts, n), b.dtype(x))
        windows = b.reshape(windows, (batch, starts, 1, n))
        same = emit_binary(b, "eq", windows, b.operand(pool.astype(dtypes.to_numpy(b.dtype(x))), "pool"))
        hit = b.emit(Reduce("all", same, (3,), False), (batch, starts, len(pool)), "bool")
        count = b.emit(Reduce("sum", b.cast(hit, "f32"), (1,), False), (batch, len(pool)), "f32")
        total = count if total is None else emit_binary(b, "add", total, count)
    return total if total is not None else b.as_ref(b.lit(0.0, "f32"), (batch, len(pool)))


@onnx_op("TfIdfVectorizer")
def tfidf_vectorizer(node: OnnxNode, b: OnnxBuilder) -> Env:
    if node.attr("pool_strings"):
        raise LoweringError(f"node {node.name} (TfIdfVectorizer): string pools are not supported")
    x = b.ref(node, 0)
    rank = b.rank(x)
    if rank not in (1, 2):
        raise LoweringError(f"node {node.name} (TfIdfVectorizer): the input must be [C] or [B, C]")
    rows = x if rank == 2 else b.reshape(x, (1, b.shape(x)[0]))
    pool = np.asarray(node.attr("pool_int64s"), np.int64)
    starts = [int(s) for s in node.attr("ngram_counts")]
    indexes = [int(i) for i in node.attr("ngram_indexes")]
    lo, hi = int(node.attr("min_gram_length")), int(node.attr("max_gram_length"))
    max_skip = int(node.attr("max_skip_count"))
    out_size = max(indexes) + 1
    parts: list[Ref] = []
    onehot_rows: list[int] = []
    first_id = 0
    for k, start in enumerate(starts):
        n = k + 1
        end = starts[k + 1] if k + 1 < len(starts) else len(pool)
        grams = pool[start:end].reshape(-1, n)
        if lo <= n <= hi and len(grams):
            parts.append(_group_counts(b, node, rows, grams, n, max_skip))
            onehot_rows += [indexes[first_id + g] for g in range(len(grams))]
        first_id += len(grams)
    batch = b.shape(rows)[0]
    if not parts:
        freq = b.as_ref(b.lit(0.0, "f32"), (batch, out_size))
    else:
        onehot = np.zeros((len(onehot_rows), out_size), np.float32)
        onehot[np.arange(len(onehot_rows)), onehot_rows] = 1
        freq = matmul(b, concat(b, parts, 1), b.operand(onehot, f"{node.name}_columns"))
    weights = node.attr("weights")
    mode = node.attr("mode")
    if mode == "IDF":
        freq = b.cast(emit_binary(b, "gt", freq, b.lit(0.0, "f32")), "f32")
    if mode in ("IDF", "TFIDF") and weights:
        freq = emit_binary(b, "mul", freq, b.operand(np.asarray(weights, np.float32), "weights"))
    return freq if rank == 2 else b.reshape(freq, (out_size,))
