"""Neural-network blocks: softmax, norms (weight norm included), embedding, attention, convolution, pooling."""

from __future__ import annotations

import math
import re

import ml_dtypes

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node, TensorMeta
from rlx.frontends.aten.elementwise import emit_binary
from rlx.frontends.aten.movement import reshape_to, take_slice
from rlx.frontends.aten.random import dropout_weights
from rlx.frontends.aten.reduce import p_norm, window_argmax
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import broadcast, ints, norm_axis
from rlx.frontends.common import static_dim
from rlx.ir import dtypes, symbolic
from rlx.ir.calls import (
    AdaptiveAvgPool,
    Arange,
    Attention,
    AvgPool,
    BatchNorm,
    Binary,
    Conv,
    Expand,
    Full,
    Gather,
    GroupNorm,
    Index,
    IndexSelect,
    LayerNorm,
    Linear,
    MatMul,
    MaxPool,
    Pad,
    Permute,
    Reduce,
    Reshape,
    RmsNorm,
    Scatter,
    SearchSorted,
    Softmax,
    Unary,
    Where,
)
from rlx.ir.program import Operand, Ref
from rlx.ir.symbolic import Dim


@lowers("aten._softmax", "aten.softmax", "aten._log_softmax", "aten.log_softmax", "aten.special_softmax")
def softmax(node: Node, b: Builder) -> Operand:
    out = node.meta
    x = b.cast(b.input(node, 0), out.dtype)  # softmax.int(dtype=…) casts before computing
    axis = norm_axis(node.arg(1, "dim"), b.rank(x))
    return b.emit_like(Softmax(x, axis, log="log" in node.base), out)


# ── norms ────────────────────────────────────────────────────────────────────
@lowers("aten.layer_norm")
def layer_norm(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    ndim = len(node.arg(1, "normalized_shape"))
    w, bias = b.optional_input(node, 2, "weight"), b.optional_input(node, 3, "bias")
    return b.emit_like(LayerNorm(x, w, bias, ndim, float(node.arg(4, "eps", 1e-5))), node.meta)


@lowers("aten.native_layer_norm")
def native_layer_norm(node: Node, b: Builder) -> tuple[Operand, Operand, Operand]:
    """Returns (y, mean, rstd); the statistics are only computed if something reads them."""
    x = b.input(node, 0)
    ndim = len(node.arg(1, "normalized_shape"))
    eps = float(node.arg(4, "eps"))
    y = b.emit_like(LayerNorm(x, b.optional_input(node, 2), b.optional_input(node, 3), ndim, eps), node.meta)
    return (y, *_moments(node, b, x, ndim, eps))


def _moments(node: Node, b: Builder, x: Ref, ndim: int, eps: float) -> tuple[Ref, Ref]:
    """Mean and 1/sqrt(var + eps) over the trailing ``ndim`` axes, kept as size-1 axes."""
    rank = b.rank(x)
    axes = tuple(range(rank - ndim, rank))
    stat_meta = node.out[1] if len(node.out) > 1 else None
    stat_dtype = stat_meta.dtype if isinstance(stat_meta, TensorMeta) else b.dtype(x)
    xs = b.cast(x, stat_dtype)
    shape = tuple(1 if i in axes else d for i, d in enumerate(b.shape(x)))
    mean = b.emit(Reduce("mean", xs, axes, True), shape, stat_dtype)
    var = b.emit(Reduce("var", xs, axes, True, 0.0), shape, stat_dtype)
    shifted = b.emit(Binary("add", var, b.lit(eps, stat_dtype)), shape, stat_dtype)
    return mean, b.emit(Unary("rsqrt", shifted), shape, stat_dtype)


def _finfo_eps(dtype: str) -> float:
    """rms_norm's default eps: machine epsilon of the type PyTorch computes in (float32 for halves)."""
    return float(ml_dtypes.finfo(dtypes.to_numpy("f32" if dtype in ("f16", "bf16") else dtype)).eps)


@lowers("aten.rms_norm", "aten._fused_rms_norm")
def rms_norm(node: Node, b: Builder) -> Operand | tuple[Operand, None]:
    x = b.input(node, 0)
    ndim = len(node.arg(1, "normalized_shape"))
    eps = node.arg(3, "eps")
    eps = _finfo_eps(b.dtype(x)) if eps is None else float(eps)
    y = b.emit_like(RmsNorm(x, b.optional_input(node, 2, "weight"), ndim, eps), node.meta)
    return (y, None) if node.multi else y


@lowers(
    "aten.batch_norm",
    "aten.native_batch_norm",
    "aten._native_batch_norm_legit",
    "aten._native_batch_norm_legit_no_training",
    "aten._native_batch_norm_legit_functional",
)
def batch_norm(node: Node, b: Builder) -> Operand | tuple[Operand | None, ...]:
    x = b.input(node, 0)
    w, bias = b.optional_input(node, 1, "weight"), b.optional_input(node, 2, "bias")
    if node.overload == "no_stats":  # _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
        mean = var = None
        training, eps = node.arg(3, "training"), node.arg(5, "eps")
    else:
        mean, var = b.optional_input(node, 3, "running_mean"), b.optional_input(node, 4, "running_var")
        if node.base == "_native_batch_norm_legit_no_training":
            training, eps = False, node.arg(6, "eps")
        else:
            training, eps = node.arg(5, "training"), node.arg(7, "eps")
    running = None if mean is None or var is None else (mean, var)
    batch_stats = running is None or bool(training)
    if batch_stats:
        # Training mode, or no running statistics (track_running_stats=False, where even eval mode
        # does this): normalise with the batch's own mean and biased variance.
        mean, var = _batch_stats(b, x)
    assert mean is not None and var is not None
    y = b.emit_like(BatchNorm(x, mean, var, w, bias, float(eps)), node.meta)
    if not node.multi:
        return y
    saved = _saved_stats(node, b, mean, var, float(eps), batch_stats)
    if running is not None and training and len(node.out) == 5:  # the functional form's updated running stats
        momentum = float(node.arg(6, "momentum"))
        total, channels = symbolic.numel(b.shape(x)), b.shape(x)[1]
        if not isinstance(total, int) or not isinstance(channels, int):
            raise LoweringError(f"node {node.id}: batch norm's running-variance update needs static extents")
        n = total // channels
        unbiased = b.emit(
            Binary("mul", var, b.lit(n / (n - 1) if n > 1 else math.inf, b.dtype(var))), b.shape(var), b.dtype(var)
        )
        saved[2:4] = [_momentum_update(b, node.meta_at(3 + k), stat, old, momentum) for k, (stat, old) in
                      enumerate([(mean, running[0]), (unbiased, running[1])])]  # fmt: skip
    return (y, *saved)


def _momentum_update(b: Builder, meta: TensorMeta, stat: Ref, old: Ref, momentum: float) -> Ref:
    """``momentum · stat + (1 − momentum) · old`` in the statistics' dtype, as PyTorch's decomposition."""
    dt = b.dtype(stat)
    shape = b.shape(stat)
    new = b.emit(Binary("mul", b.lit(momentum, dt), stat), shape, dt)
    kept = b.emit(Binary("mul", b.lit(1 - momentum, dt), b.cast(old, dt)), shape, dt)
    return b.cast(b.emit(Binary("add", new, kept), shape, dt), meta.dtype)


def _saved_stats(node: Node, b: Builder, mean: Ref, var: Ref, eps: float, batch_stats: bool) -> list[Ref | None]:
    """Results 1 and 2 of the native batch norms: ``save_mean`` and ``save_invstd``. With running
    statistics PyTorch returns them empty (``[0]``); normalising with the batch's own statistics,
    they are its mean and ``1/sqrt(var + eps)``. The functional form's running-stat updates
    (results 3 and 4) are filled in by ``batch_norm`` in training mode."""
    saved: list[Ref | None] = []
    for k, meta in enumerate(node.out[1:3], start=1):
        if not isinstance(meta, TensorMeta):
            saved.append(None)
        elif tuple(meta.shape) == (0,):
            saved.append(b.emit(Full(0, (0,), meta.dtype), (0,), meta.dtype))
        elif batch_stats:
            stat = (
                mean
                if k == 1
                else b.emit(
                    Unary("rsqrt", b.emit(Binary("add", var, b.lit(eps, b.dtype(var))), b.shape(var), b.dtype(var))),
                    b.shape(var),
                    b.dtype(var),
                )
            )
            saved.append(b.cast(stat, meta.dtype))
        else:
            saved.append(None)
    return saved + [None] * (len(node.out) - 3)


def _batch_stats(b: Builder, x: Ref) -> tuple[Ref, Ref]:
    """Per-channel mean and biased variance over every axis but 1, in float32 for half inputs."""
    dtype = "f32" if b.dtype(x) in ("f16", "bf16") else b.dtype(x)
    xs = b.cast(x, dtype)
    axes = (0,) + tuple(range(2, b.rank(x)))
    channels = (b.shape(x)[1],)
    mean = b.emit(Reduce("mean", xs, axes, False), channels, dtype)
    return mean, b.emit(Reduce("var", xs, axes, False, 0.0), channels, dtype)


@lowers("aten.group_norm", "aten.native_group_norm")
def group_norm(node: Node, b: Builder) -> Operand | tuple[Operand | None, ...]:
    x = b.input(node, 0)
    if node.base == "group_norm":  # (input, num_groups, weight, bias, eps, cudnn)
        groups, w, bias, eps = (
            node.arg(1),
            b.optional_input(node, 2),
            b.optional_input(node, 3),
            node.arg(4, "eps", 1e-5),
        )
    else:  # native_group_norm(input, weight, bias, N, C, HxW, group, eps)
        groups, w, bias, eps = node.arg(6), b.optional_input(node, 1), b.optional_input(node, 2), node.arg(7)
    y = b.emit_like(GroupNorm(x, w, bias, int(groups), float(eps)), node.meta)
    if not node.multi:
        return y
    # native_group_norm also returns mean and 1/sqrt(var + eps) per (sample, group): [N, G].
    shape = b.shape(x)
    channels = static_dim(shape[1], "the channel count", node)
    per_group = symbolic.mul(channels // int(groups), symbolic.numel(shape[2:]))
    grouped = b.emit(Reshape(x, (shape[0], int(groups), per_group)), (shape[0], int(groups), per_group), b.dtype(x))
    mean, rstd = _moments(node, b, grouped, 1, float(eps))
    stats = (shape[0], int(groups))
    return y, reshape_to(b, mean, stats), reshape_to(b, rstd, stats)


# ── weight norm ──────────────────────────────────────────────────────────────
def _norm_except_dim(b: Builder, v: Ref, p: float, dim: int) -> Ref:
    """The ``p``-norm of ``v`` over every axis but ``dim`` (every axis when ``dim`` is -1), kept as
    a broadcastable ``[1, …, size, …, 1]`` tensor (``[1, …, 1]`` for ``dim`` -1, where torch's
    ``norm_except_dim`` returns a 0-d tensor)."""
    shape, dtype = b.shape(v), b.dtype(v)
    axes = tuple(range(len(shape))) if dim == -1 else tuple(a for a in range(len(shape)) if a != dim)
    kept = tuple(1 if a in axes else d for a, d in enumerate(shape))
    if p == 2:
        powered = b.emit(Binary("mul", v, v), shape, dtype)
    else:
        absolute = b.emit(Unary("abs", v), shape, dtype)
        powered = b.emit(Binary("pow", absolute, b.lit(p, dtype)), shape, dtype)
    total = b.emit(Reduce("sum", powered, axes, True), kept, dtype) if axes else powered
    if p == 2:
        return b.emit(Unary("sqrt", total), kept, dtype)
    return b.emit(Binary("pow", total, b.lit(1.0 / p, dtype)), kept, dtype)


def _weight_norm_dim(node: Node, b: Builder, v: Ref, index: int, name: str, default: int) -> int:
    dim = node.arg(index, name, default)
    return -1 if dim == -1 else norm_axis(dim, b.rank(v))


@lowers("aten.norm_except_dim")
def norm_except_dim(node: Node, b: Builder) -> Operand:
    v = b.input(node, 0)
    p = node.arg(1, "pow", 2)
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 < p < math.inf:
        raise LoweringError(f"node {node.id}: norm_except_dim supports a finite positive pow, found {p!r}")
    norm = _norm_except_dim(b, b.cast(v, node.meta.dtype), float(p), _weight_norm_dim(node, b, v, 2, "dim", 0))
    return reshape_to(b, norm, node.meta.shape)  # dim -1: a 0-d norm


@lowers("aten._weight_norm")
def weight_norm(node: Node, b: Builder) -> Operand:
    """``_weight_norm(v, g, dim=0)`` = ``v * (g / norm_except_dim(v, 2, dim))`` (``dim`` -1: one
    norm over the whole tensor), the weight ``nn.utils.weight_norm`` recomputes on every call."""
    out = node.meta
    v, g = b.cast(b.input(node, 0), out.dtype), b.cast(b.input(node, 1, "g"), out.dtype)
    norm = _norm_except_dim(b, v, 2.0, _weight_norm_dim(node, b, v, 2, "dim", 0))
    scale = b.emit(Binary("div", g, norm), broadcast(b.shape(g), b.shape(norm)), out.dtype)
    return b.emit_like(Binary("mul", v, scale), out)


# ── embedding and attention ──────────────────────────────────────────────────
@lowers("aten.embedding")
def embedding(node: Node, b: Builder) -> Operand:
    # padding_idx only affects gradients; the forward is a plain row lookup.
    return b.emit_like(IndexSelect(b.input(node, 0), 0, b.input(node, 1)), node.meta)


def _bag_targets(b: Builder, indices: Ref, offsets: Ref, bags: Dim, padding: int) -> Ref:
    """The bag of each index (``bags`` — one past the last — for entries in no bag and for
    ``padding``): the last offset at or before its position."""
    n = b.shape(indices)[0]
    positions = b.emit(Arange(0, n, 1, "i64"), (n,), "i64")
    bag = emit_binary(b, "sub", b.emit(SearchSorted(offsets, positions, True), (n,), "i64"), b.lit(1, "i64"))
    valid = emit_binary(b, "logical_and", emit_binary(b, "ge", bag, b.lit(0, "i64"), "bool"),
                        emit_binary(b, "lt", bag, b.lit(bags, "i64"), "bool"))  # fmt: skip
    if padding >= 0:
        kept = emit_binary(b, "ne", indices, b.lit(padding, "i64"), "bool")
        valid = emit_binary(b, "logical_and", valid, kept)
    return b.emit(Where(valid, bag, b.lit(bags, "i64")), (n,), "i64")


def _bag_max(b: Builder, rows: Ref, target: Ref, spread: Ref, bags: Dim) -> Ref:
    """Each bag's max as PyTorch's CPU loop takes it (``w > best`` replaces, so a NaN counts only
    as a bag's first entry); an empty bag is 0. ``[bags + 1, width]``, the last row the discard."""
    n, width = b.shape(rows)
    dt = b.dtype(rows)
    nan = b.emit(Unary("isnan", rows), (n, width), "bool")
    finite = b.emit(Where(nan, b.lit(-math.inf, dt), rows), (n, width), dt)
    zeros = b.emit(Full(0, (symbolic.add(bags, 1), width), dt), (symbolic.add(bags, 1), width), dt)
    best = b.emit(Scatter(zeros, 0, spread, finite, "amax", False), b.shape(zeros), dt)
    if n == 0:
        return best
    positions = b.emit(Arange(0, n, 1, "i64"), (n,), "i64")
    past = b.emit(Full(2**62, (symbolic.add(bags, 1),), "i64"), (symbolic.add(bags, 1),), "i64")  # past any entry
    first = b.emit(Scatter(past, 0, target, positions, "amin", True), b.shape(past), "i64")
    picked = b.emit(Binary("minimum", first, b.lit(symbolic.add(n, -1), "i64")), b.shape(first), "i64")
    first_nan = emit_binary(b, "logical_and", b.emit(IndexSelect(nan, 0, picked), b.shape(zeros), "bool"),
                            reshape_to(b, emit_binary(b, "lt", first, b.lit(n, "i64"), "bool"), (b.shape(first)[0], 1)))  # fmt: skip
    return b.emit(Where(first_nan, b.lit(math.nan, dt), best), b.shape(zeros), dt)


@lowers("aten.embedding_bag", "aten._embedding_bag", "aten._embedding_bag_forward_only")
def embedding_bag(node: Node, b: Builder) -> tuple[Operand | None, ...]:
    """``_embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
    per_sample_weights, include_last_offset, padding_idx)`` (and ``embedding_bag``, the ``aten``
    level's): bag ``k`` is ``indices[offsets[k]:
    offsets[k + 1]]`` (the last runs to the end, or, with ``include_last_offset``, ``offsets``
    has one entry more), entries equal to ``padding_idx`` (≥ 0) left out; mode 0 sums the rows
    (times ``per_sample_weights``), 1 averages them, 2 takes their max; an empty bag is 0.
    Only the first result (the bags) is lowered: offset2bag, bag_size and max_indices serve the
    backward pass."""
    weight, indices, offsets = b.input(node, 0), b.cast(b.input(node, 1), "i64"), b.cast(b.input(node, 2), "i64")
    mode, padding = node.arg(4, "mode", 0), node.arg(8, "padding_idx", None)
    padding = -1 if padding is None else padding
    per_sample = b.optional_input(node, 6, "per_sample_weights")
    out = node.meta
    if b.rank(indices) != 1 or mode not in (0, 1, 2) or not isinstance(padding, int):
        raise LoweringError(f"node {node.id} ({node.op}): needs 1-d indices, mode 0/1/2 and a static padding_idx")
    bags, width = out.shape
    dt = "f32" if out.dtype in ("f16", "bf16") else out.dtype
    rows = b.emit(IndexSelect(b.cast(weight, dt), 0, indices), (b.shape(indices)[0], width), dt)
    if per_sample is not None:
        rows = emit_binary(b, "mul", rows, reshape_to(b, b.cast(per_sample, dt), (b.shape(rows)[0], 1)))
    target = _bag_targets(b, indices, offsets, bags, padding)
    spread = b.emit(Expand(reshape_to(b, target, (b.shape(rows)[0], 1)), b.shape(rows)), b.shape(rows), "i64")
    if mode == 2:
        total = _bag_max(b, rows, target, spread, bags)
    else:
        zeros = b.emit(Full(0, (symbolic.add(bags, 1), width), dt), (symbolic.add(bags, 1), width), dt)
        total = b.emit(Scatter(zeros, 0, spread, rows, "sum", True), b.shape(zeros), dt)
    if mode == 1:
        none = b.emit(Full(0, (symbolic.add(bags, 1),), dt), (symbolic.add(bags, 1),), dt)
        count = b.emit(Scatter(none, 0, target, b.lit(1, dt), "sum", True), b.shape(none), dt)
        count = emit_binary(b, "maximum", reshape_to(b, count, (b.shape(count)[0], 1)), b.lit(1, dt))
        total = emit_binary(b, "div", total, count)
    return b.cast(take_slice(b, total, 0, 0, bags), out.dtype), None, None, None


@lowers("aten.embedding_renorm")
def embedding_renorm(node: Node, b: Builder) -> Operand:
    """``embedding_renorm(weight, indices, max_norm, norm_type)`` (``max_norm`` of embedding and
    embedding_bag): each row ``indices`` names whose ``norm_type``-norm exceeds ``max_norm`` is
    scaled by ``max_norm / (norm + 1e-7)``; the other rows stay."""
    weight, indices = b.input(node, 0), b.cast(b.input(node, 1), "i64")
    max_norm, norm_type = float(node.arg(2, "max_norm")), float(node.arg(3, "norm_type"))
    vocab, width = b.shape(weight)
    dt = b.dtype(weight)
    compute = "f32" if dt in ("f16", "bf16") else dt
    norms = p_norm(b, b.cast(weight, compute), norm_type, (1,), True, compute)
    unused = b.emit(Full(False, (vocab,), "bool"), (vocab,), "bool")
    flat = reshape_to(b, indices, (symbolic.numel(b.shape(indices)),))
    named = b.emit(Scatter(unused, 0, flat, b.lit(True, "bool"), "none", True), (vocab,), "bool")
    over = emit_binary(
        b,
        "logical_and",
        reshape_to(b, named, (vocab, 1)),
        emit_binary(b, "gt", norms, b.lit(max_norm, compute), "bool"),
    )
    scale = emit_binary(b, "div", b.lit(max_norm, compute), emit_binary(b, "add", norms, b.lit(1e-7, compute)))
    scaled = b.cast(emit_binary(b, "mul", b.cast(weight, compute), scale), dt)
    return b.emit_like(Where(over, scaled, weight), node.meta)


@lowers(
    "aten.scaled_dot_product_attention",
    "aten._scaled_dot_product_attention_math",
    "aten._scaled_dot_product_flash_attention",
    "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._scaled_dot_product_efficient_attention",
)
def attention(node: Node, b: Builder) -> Operand | tuple[Operand | None, ...]:
    q, k, v = b.input(node, 0), b.input(node, 1), b.input(node, 2)
    if node.base in ("scaled_dot_product_attention", "_scaled_dot_product_attention_math"):
        mask_arg, dropout, causal = (
            node.arg(3, "attn_mask"),
            node.arg(4, "dropout_p", 0.0),
            node.arg(5, "is_causal", False),
        )
        scale, gqa = node.arg(6, "scale"), node.arg(7, "enable_gqa", False)
    elif node.base == "_scaled_dot_product_efficient_attention":  # (q, k, v, attn_bias, compute_lse, p, causal)
        mask_arg, dropout, causal = (
            node.arg(3, "attn_bias"),
            node.arg(5, "dropout_p", 0.0),
            node.arg(6, "is_causal", False),
        )
        scale, gqa = node.kwargs.get("scale"), False
    else:  # flash forms: (q, k, v, dropout_p, is_causal, …, attn_mask=, scale=)
        mask_arg, dropout, causal = (
            node.kwargs.get("attn_mask"),
            node.arg(3, "dropout_p", 0.0),
            node.arg(4, "is_causal", False),
        )
        scale, gqa = node.kwargs.get("scale"), False
    mask = None
    if mask_arg is not None:
        mask = b.tensor(node, mask_arg)
        if b.dtype(mask) != "bool":
            mask = b.cast(mask, b.dtype(q))
    if scale is None:
        scale = 1.0 / math.sqrt(static_dim(b.shape(q)[-1], "the attention head size", node))
    if dropout:
        if gqa or b.shape(k)[:-2] != b.shape(q)[:-2]:
            raise LoweringError(f"node {node.id}: attention dropout with grouped or broadcast heads is not supported")
        y = attention_with_dropout(b, q, k, v, mask, bool(causal), float(scale), float(dropout), node.meta)
        return (y,) + (None,) * (len(node.out) - 1) if node.multi else y
    y = b.emit_like(Attention(q, k, v, mask, bool(causal), float(scale), bool(gqa)), node.meta)
    return (y,) + (None,) * (len(node.out) - 1) if node.multi else y


def attention_with_dropout(
    b: Builder, q: Ref, k: Ref, v: Ref, mask: Ref | None, causal: bool, scale: float, p: float, out: TensorMeta
) -> Ref:
    """``dropout(softmax(q kᵀ · scale + mask), p) v`` spelled out (PyTorch's math attention): the
    attention weights are dropped at random, which the fused Attention Call does not do. Half
    precision computes in float32 and rounds once."""
    dt = out.dtype
    ct = "f32" if dt in ("f16", "bf16") else dt
    q, k, v = b.cast(q, ct), b.cast(k, ct), b.cast(v, ct)
    rank = b.rank(k)
    kt_shape = (*b.shape(k)[:-2], b.shape(k)[-1], b.shape(k)[-2])
    kt = b.emit(Permute(k, (*range(rank - 2), rank - 1, rank - 2)), kt_shape, ct)
    s_shape = (*b.shape(q)[:-1], b.shape(k)[-2])
    scores = b.emit(Binary("mul", b.emit(MatMul(q, kt), s_shape, ct), b.lit(scale, ct)), s_shape, ct)
    if causal:
        n_q, n_k = b.shape(q)[-2], b.shape(k)[-2]
        rows = reshape_to(b, b.emit(Arange(0, n_q, 1, "i64"), (n_q,), "i64"), (n_q, 1))
        cols = reshape_to(b, b.emit(Arange(0, n_k, 1, "i64"), (n_k,), "i64"), (1, n_k))
        allowed = b.emit(Binary("le", cols, rows), (n_q, n_k), "bool")
        scores = b.emit(Where(allowed, scores, b.lit(float("-inf"), ct)), s_shape, ct)
    if mask is not None and b.dtype(mask) == "bool":
        scores = b.emit(Where(mask, scores, b.lit(float("-inf"), ct)), s_shape, ct)
    elif mask is not None:
        scores = b.emit(Binary("add", scores, b.cast(mask, ct)), s_shape, ct)
    weights = dropout_weights(b, b.emit(Softmax(scores, len(s_shape) - 1, False), s_shape, ct), p)
    y = b.emit(MatMul(weights, v), (*s_shape[:-1], b.shape(v)[-1]), ct)
    return b.cast(y, dt)


# ── convolution ──────────────────────────────────────────────────────────────
@lowers("aten.convolution", "aten._convolution")
def convolution(node: Node, b: Builder) -> Operand:
    x, w = b.input(node, 0), b.input(node, 1)
    nd = b.rank(w) - 2
    stride, padding, dilation = (ints(node.arg(i), nd) for i in (3, 4, 5))
    transposed, output_padding, groups = bool(node.arg(6)), ints(node.arg(7), nd), int(node.arg(8))
    return _conv(
        node, b, x, w, b.optional_input(node, 2), stride, padding, dilation, groups, transposed, output_padding
    )


def _conv_inputs(node: Node, b: Builder) -> tuple[Ref, Ref, int, tuple[int, ...]]:
    """What conv1d/2d/3d and conv_transpose1d/2d/3d (input, weight, bias, stride, …) begin with: the
    input (batched), the weight, the number of spatial axes and the stride."""
    x, w = b.input(node, 0), b.input(node, 1)
    nd = b.rank(w) - 2
    return _batched(b, x, w), w, nd, ints(node.arg(3, "stride", 1), nd)


@lowers("aten.conv1d", "aten.conv2d", "aten.conv3d")
def conv_nd(node: Node, b: Builder) -> Operand:
    x, w, nd, stride = _conv_inputs(node, b)
    dilation = ints(node.arg(5, "dilation", 1), nd)
    padding = node.arg(4, "padding", 0)
    groups = int(node.arg(6, "groups", 1))
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * nd
        else:  # "same": total padding d·(k−1), the odd extra element goes on the right as in PyTorch
            total = [d * (static_dim(k, "the kernel size", node) - 1) for d, k in zip(dilation, b.shape(w)[2:])]
            if any(t % 2 for t in total):
                pads = ((0, 0), (0, 0)) + tuple((t // 2, t - t // 2) for t in total)
                shape = tuple(
                    static_dim(s, "the padded input extent", node) + lo + hi for s, (lo, hi) in zip(b.shape(x), pads)
                )
                x = b.emit(Pad(x, pads, 0.0), shape, b.dtype(x))
                padding = (0,) * nd
            else:
                padding = tuple(t // 2 for t in total)
    return _conv(
        node, b, x, w, b.optional_input(node, 2, "bias"), stride, ints(padding, nd), dilation, groups, False, (0,) * nd
    )


@lowers("aten.conv_transpose1d", "aten.conv_transpose2d", "aten.conv_transpose3d")
def conv_transpose(node: Node, b: Builder) -> Operand:
    # (input, weight, bias, stride, padding, output_padding, groups, dilation)
    x, w, nd, stride = _conv_inputs(node, b)
    padding = ints(node.arg(4, "padding", 0), nd)
    output_padding, groups = ints(node.arg(5, "output_padding", 0), nd), int(node.arg(6, "groups", 1))
    dilation = ints(node.arg(7, "dilation", 1), nd)
    return _conv(
        node, b, x, w, b.optional_input(node, 2, "bias"), stride, padding, dilation, groups, True, output_padding
    )


def _conv(
    node: Node,
    b: Builder,
    x: Ref,
    w: Ref,
    bias: Ref | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
    transposed: bool,
    output_padding: tuple[int, ...],
) -> Operand:
    conv = Conv(x, w, bias, stride, padding, dilation, groups, transposed, output_padding)
    out = node.meta
    if len(out.shape) == b.rank(x):
        return b.emit_like(conv, out)
    y = b.emit(conv, (1, *out.shape), out.dtype)  # an unbatched input was given a batch of one
    return b.emit_like(Reshape(y, out.shape), out)


def _batched(b: Builder, x: Ref, w: Ref) -> Ref:
    """aten.convNd accepts an unbatched ``[C, *spatial]`` input; the Conv call always has a batch axis."""
    if b.rank(x) != b.rank(w) - 1:
        return x
    return b.emit(Reshape(x, (1, *b.shape(x))), (1, *b.shape(x)), b.dtype(x))


# ── pooling ──────────────────────────────────────────────────────────────────
def _spatial_rank(node: Node) -> int:
    """``max_pool2d_with_indices`` → 2."""
    match = re.search(r"(\d)d", node.base)
    if match is None:
        raise LoweringError(f"node {node.id}: cannot tell the spatial rank of {node.op}")
    return int(match.group(1))


def _pool_args(node: Node, nd: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    kernel = ints(node.arg(1, "kernel_size"), nd)
    stride = node.arg(2, "stride")
    stride = kernel if not stride else ints(stride, nd)  # an empty stride means "= kernel"
    return kernel, stride, ints(node.arg(3, "padding", 0), nd)


@lowers(
    "aten.max_pool1d",
    "aten.max_pool2d",
    "aten.max_pool3d",
    "aten.max_pool2d_with_indices",
    "aten.max_pool3d_with_indices",
    "aten.max_pool1d_with_indices",
)
def max_pool(node: Node, b: Builder) -> Operand | tuple[Operand, Operand]:
    x = b.input(node, 0)
    nd = _spatial_rank(node)
    kernel, stride, padding = _pool_args(node, nd)
    dilation, ceil_mode = ints(node.arg(4, "dilation", 1), nd), bool(node.arg(5, "ceil_mode", False))
    y = b.emit_like(MaxPool(x, kernel, stride, padding, dilation, ceil_mode), node.meta)
    if not node.multi:
        return y
    idx = b.emit(MaxPool(x, kernel, stride, padding, dilation, ceil_mode, indices=True), node.meta.shape, "i64")
    return y, idx


@lowers("aten.avg_pool1d", "aten.avg_pool2d", "aten.avg_pool3d")
def avg_pool(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    nd = _spatial_rank(node)
    kernel, stride, padding = _pool_args(node, nd)
    ceil_mode, count_include_pad = bool(node.arg(4, "ceil_mode", False)), bool(node.arg(5, "count_include_pad", True))
    divisor = node.arg(6, "divisor_override") if nd > 1 else None
    return b.emit_like(AvgPool(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor), node.meta)


@lowers("aten.adaptive_avg_pool1d", "aten.adaptive_avg_pool2d", "aten.adaptive_avg_pool3d")
@lowers("aten._adaptive_avg_pool2d", "aten._adaptive_avg_pool3d")  # the private forms torch's decompositions call
def adaptive_avg_pool(node: Node, b: Builder) -> Operand:
    x = b.input(node, 0)
    nd = _spatial_rank(node)
    out_size = tuple(node.meta.shape[-nd:])  # None entries in output_size are resolved by torch's record
    return b.emit_like(AdaptiveAvgPool(x, out_size), node.meta)


def _adaptive_windows(b: Builder, size: int, out: int) -> tuple[Ref, int]:
    """The input rows of each adaptive window, ``[out, k]``: window ``o`` spans
    ``[⌊o·size/out⌋, ⌈(o+1)·size/out⌉)``; shorter windows repeat their last row up to the widest ``k``
    (a repeat changes neither the max nor which position is picked first)."""
    k = max(-(-(o + 1) * size // out) - o * size // out for o in range(out))
    o = b.emit(Reshape(b.emit(Arange(0, out, 1, "i64"), (out,), "i64"), (out, 1)), (out, 1), "i64")
    start = b.emit(Binary("floor_divide", b.emit(Binary("mul", o, b.lit(size, "i64")), (out, 1), "i64"),
                          b.lit(out, "i64")), (out, 1), "i64")  # fmt: skip
    o1 = b.emit(Binary("add", o, b.lit(1, "i64")), (out, 1), "i64")
    hi = b.emit(Binary("mul", o1, b.lit(size, "i64")), (out, 1), "i64")
    end = b.emit(Binary("floor_divide", b.emit(Binary("add", hi, b.lit(out - 1, "i64")), (out, 1), "i64"),
                        b.lit(out, "i64")), (out, 1), "i64")  # fmt: skip
    steps = b.emit(Reshape(b.emit(Arange(0, k, 1, "i64"), (k,), "i64"), (1, k)), (1, k), "i64")
    rows = b.emit(Binary("add", start, steps), (out, k), "i64")
    last = b.emit(Binary("sub", end, b.lit(1, "i64")), (out, 1), "i64")
    return b.emit(Binary("minimum", rows, last), (out, k), "i64"), k


@lowers("aten.adaptive_max_pool1d", "aten.adaptive_max_pool2d", "aten.adaptive_max_pool3d")
def adaptive_max_pool(node: Node, b: Builder) -> Operand | tuple[Operand, Operand]:
    """Every window gathered at once (``x[..., rows_1, …, rows_n]`` with the rows of each spatial
    axis laid out ``[out, k]``), then max and argmax over the flattened window. The index is flat over
    the input's spatial axes; among NaNs PyTorch's kernel keeps the last one, otherwise the first max."""
    x = b.input(node, 0)
    nd = _spatial_rank(node)
    shape, dt = b.shape(x), b.dtype(x)
    lead, sizes = tuple(shape[:-nd]), [static_dim(d, "adaptive_max_pool input", node) for d in shape[-nd:]]
    outs = [static_dim(d, "adaptive_max_pool output", node) for d in node.meta.shape[-nd:]]
    windows = [_adaptive_windows(b, n, o) for n, o in zip(sizes, outs)]
    grid = tuple(d for o, (_, k) in zip(outs, windows) for d in (o, k))  # out_1, k_1, out_2, k_2, …
    rows: list[Ref] = []
    flat: Ref | None = None
    for i, (w, _) in enumerate(windows):
        laid = tuple(grid[j] if j in (2 * i, 2 * i + 1) else 1 for j in range(len(grid)))
        r = reshape_to(b, w, laid)
        rows.append(r)
        scaled = r
        stride = math.prod(sizes[i + 1 :])
        if stride != 1:
            scaled = b.emit(Binary("mul", r, b.lit(stride, "i64")), laid, "i64")
        covered = grid[: 2 * i + 2] + (1,) * (len(grid) - 2 * i - 2)  # the axes summed so far
        flat = scaled if flat is None else b.emit(Binary("add", flat, scaled), covered, "i64")
    assert flat is not None
    n_lead = len(lead)
    gathered = b.emit(Index(x, (None,) * n_lead + tuple(rows)), (*lead, *grid), dt)
    order = (*range(n_lead), *(n_lead + 2 * i for i in range(nd)), *(n_lead + 2 * i + 1 for i in range(nd)))
    kk = math.prod(k for _, k in windows)
    wshape = (*lead, *outs, kk)
    moved = b.emit(Permute(gathered, order), tuple((*lead, *grid)[a] for a in order), dt)
    win = reshape_to(b, moved, wshape)
    values = b.emit_like(Reduce("amax", win, (len(wshape) - 1,), False), node.meta)
    if not node.multi:
        return values
    one = (*lead, *outs, 1)
    pick = window_argmax(b, win)
    fgrid = tuple(grid[a - n_lead] for a in order[n_lead:])
    flat = b.emit(
        Permute(b.emit(Expand(flat, grid), grid, "i64"), tuple(a - n_lead for a in order[n_lead:])), fgrid, "i64"
    )
    table = b.emit(Expand(reshape_to(b, flat, (*outs, kk)), wshape), wshape, "i64")
    idx = b.emit(Gather(table, len(wshape) - 1, pick), one, "i64")
    return values, reshape_to(b, idx, tuple(node.meta_at(1).shape))


@lowers("aten.max_pool2d_with_indices_backward", "aten.max_pool3d_with_indices_backward")
def max_pool_backward(node: Node, b: Builder) -> Operand:
    """``(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)``: each
    output gradient is added at the input position its window's max came from (``indices`` are
    flat over the spatial axes); positions no window picked get 0, repeats accumulate."""
    grad, x, idx = b.input(node, 0), b.input(node, 1), b.input(node, 7, "indices")
    out = node.meta
    nd = _spatial_rank(node)
    lead = b.shape(x)[:-nd]
    flat_in = symbolic.numel(b.shape(x)[-nd:])
    flat_out = symbolic.numel(b.shape(grad)[-nd:])
    grad = reshape_to(b, b.cast(grad, out.dtype), (*lead, flat_out))
    idx = reshape_to(b, idx, (*lead, flat_out))
    zeros = b.emit(Full(0.0, (*lead, flat_in), out.dtype), (*lead, flat_in), out.dtype)
    summed = b.emit(Scatter(zeros, len(lead), idx, grad, "sum"), (*lead, flat_in), out.dtype)
    return reshape_to(b, summed, out.shape)


# ── fused linear + cross-entropy (torch.nn.functional.linear_cross_entropy) ───
def _cross_entropy_terms(b: Builder, logp: Ref, target: Ref, ignore: int, weight: Ref | None) -> tuple[Ref, Ref, Ref]:
    """Per row: ``-w[t]·logp[t]`` (0 where ``t == ignore``), the row's weight ``w[t]`` (0 there)
    and whether it counts."""
    rows = b.shape(logp)[0]
    dt = b.dtype(logp)
    valid = emit_binary(b, "ne", target, b.lit(ignore, "i64"), "bool")
    safe = b.emit(Where(valid, target, b.lit(0, "i64")), (rows,), "i64")
    picked = reshape_to(b, b.emit(Gather(logp, 1, reshape_to(b, safe, (rows, 1))), (rows, 1), dt), (rows,))
    scale: Operand = b.lit(1.0, dt) if weight is None else b.emit(IndexSelect(weight, 0, safe), (rows,), dt)
    row_weight = b.emit(Where(valid, scale, b.lit(0.0, dt)), (rows,), dt)
    nll = b.emit(Unary("neg", emit_binary(b, "mul", picked, scale)), (rows,), dt)
    return b.emit(Where(valid, nll, b.lit(0.0, dt)), (rows,), dt), row_weight, valid


@lowers(
    "torch_nn._linear_cross_entropy_batch_chunked.default",
    "torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default",
)
def linear_cross_entropy(node: Node, b: Builder) -> Operand | tuple[Operand | None, ...]:
    """``linear_cross_entropy`` by its documented meaning, ``cross_entropy(x @ Wᵀ + bias, target,
    weight, ignore_index, label_smoothing, reduction)``, computed in ``acc_dtype`` (the batch
    chunking only bounds memory). The gradients the scalar form can precompute are the empty
    tensors PyTorch returns when they are not asked for; asked for, they are not lowered."""
    x, w, target = b.input(node, 0), b.input(node, 1), b.cast(b.input(node, 2), "i64")
    bias, class_weight = b.optional_input(node, 3, "linear_bias"), b.optional_input(node, 4, "weight")
    scalar = node.op.startswith("torch_nn._linear_cross_entropy_batch_chunked.")
    reduction, ignore, smoothing = (
        (node.arg(5), node.arg(6), float(node.arg(7))) if scalar else ("none", node.arg(5), 0.0)
    )
    acc = node.arg(10 if scalar else 8)
    acc = getattr(acc, "dtype", "f32")
    if b.rank(x) != 2 or b.rank(w) != 2 or reduction not in ("mean", "sum", "none"):
        raise LoweringError(f"node {node.id} ({node.op}): needs a 2-d input and weight and a mean/sum/none reduction")
    rows, classes = b.shape(x)[0], b.shape(w)[0]
    logits = b.emit(
        Linear(b.cast(x, acc), b.cast(w, acc), None if bias is None else b.cast(bias, acc)), (rows, classes), acc
    )
    logp = b.emit(Softmax(logits, 1, True), (rows, classes), acc)
    weight = None if class_weight is None else b.cast(class_weight, acc)
    nll, row_weight, valid = _cross_entropy_terms(b, logp, target, ignore, weight)
    if reduction == "none":
        return b.cast(nll, node.meta.dtype)
    total = b.emit(Reduce("sum", nll, (0,), False), (), acc)
    denom = b.emit(Reduce("sum", row_weight, (0,), False), (), acc)
    loss = emit_binary(b, "div", total, denom) if reduction == "mean" else total
    if smoothing:
        spread = logp if weight is None else emit_binary(b, "mul", logp, reshape_to(b, weight, (1, classes)))
        smooth = b.emit(Unary("neg", b.emit(Reduce("sum", spread, (1,), False), (rows,), acc)), (rows,), acc)
        smooth = b.emit(
            Reduce("sum", b.emit(Where(valid, smooth, b.lit(0.0, acc)), (rows,), acc), (0,), False), (), acc
        )
        smooth = emit_binary(b, "div", smooth, denom) if reduction == "mean" else smooth
        loss = emit_binary(
            b,
            "add",
            emit_binary(b, "mul", loss, b.lit(1.0 - smoothing, acc)),
            emit_binary(b, "mul", smooth, b.lit(smoothing / static_dim(classes, "classes", node), acc)),
        )
    grads: list[Operand | None] = []
    for k, wanted in zip((1, 2, 3), (node.arg(12), node.arg(13), node.arg(14))):
        meta = node.meta_at(k)
        grads.append(None if wanted else b.emit(Full(0, meta.shape, meta.dtype), meta.shape, meta.dtype))
    return (b.cast(loss, node.meta.dtype), *grads)
