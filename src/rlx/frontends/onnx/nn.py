"""Neural-network ONNX ops: MatMul, Gemm, Conv, ConvTranspose, pooling, normalisations, softmax.

ONNX padding is per side (``pads = [b1 … bn, e1 … en]``, or ``auto_pad``); the Calls pad
symmetrically, so uneven padding becomes an explicit ``Pad`` (zeros for convolution and average
pooling, −inf for max pooling) in front of the Call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.elementwise import emit_binary, unary
from rlx.frontends.onnx.movement import permute, slice_axis
from rlx.frontends.onnx.registry import (
    Env,
    OnnxBuilder,
    OnnxNode,
    broadcast,
    dim_op,
    norm_axis,
    numel,
    onnx_op,
)
from rlx.ir import dtypes, symbolic
from rlx.ir.calls import (
    ArgReduce,
    AvgPool,
    BatchNorm,
    Conv,
    Full,
    GroupNorm,
    LayerNorm,
    MatMul,
    MaxPool,
    Pad,
    Reduce,
    Softmax,
    Where,
)
from rlx.ir.program import Lit, Operand, Ref
from rlx.ir.symbolic import Dim, static_shape


# ── matrix products ──────────────────────────────────────────────────────────
def matmul(b: OnnxBuilder, x: Operand, y: Operand) -> Ref:
    x, y = b.as_ref(x), b.as_ref(y)
    xs, ys = list(b.shape(x)), list(b.shape(y))
    if len(xs) == 1 and len(ys) == 1:
        return b.reshape(matmul(b, b.reshape(x, (1, xs[0])), y), ())
    lead_x, lead_y = xs[:-2], ys[:-2]
    out: list[Dim] = list(broadcast(lead_x, lead_y))
    if len(xs) >= 2:
        out.append(xs[-2])
    if len(ys) >= 2:
        out.append(ys[-1])
    return b.emit(MatMul(x, y), tuple(out), b.dtype(x))


@onnx_op("MatMul")
def matmul_(node: OnnxNode, b: OnnxBuilder) -> Env:
    return matmul(b, b.input(node, 0), b.input(node, 1))


@onnx_op("Gemm")
def gemm(node: OnnxNode, b: OnnxBuilder) -> Env:
    a, w = b.ref(node, 0), b.ref(node, 1)
    if node.attr("transA", 0):
        a = permute(b, a, (1, 0))
    if node.attr("transB", 0):
        w = permute(b, w, (1, 0))
    y = matmul(b, a, w)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    dt = b.dtype(y)
    if alpha != 1.0:
        y = emit_binary(b, "mul", y, b.lit(alpha, dt))
    c = b.optional(node, 2)
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = emit_binary(b, "mul", c, b.lit(beta, dt))
        y = emit_binary(b, "add", y, c)
    return y


# ── convolution ──────────────────────────────────────────────────────────────
def _pads(
    node: OnnxNode, in_sizes: list[Dim], kernel: list[int], strides: list[int], dilations: list[int]
) -> list[tuple[Dim, Dim]]:
    n = len(kernel)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):  # symbolic over a dynamic extent when a stride is > 1
        upper = auto == "SAME_UPPER"
        return [symbolic.same_pads(size, k, s, d, upper) for size, k, s, d in zip(in_sizes, kernel, strides, dilations)]
    if auto == "VALID":
        return [(0, 0)] * n
    pads = node.attr("pads", [0] * (2 * n))
    return [(int(pads[i]), int(pads[i + n])) for i in range(n)]


def _even(pads: list[tuple[Dim, Dim]], kernel: list[int]) -> list[int] | None:
    """The padding per axis when the window Calls' own fits (static, the same on both sides, at most
    half a window), else None."""
    out = [lo for (lo, hi), k in zip(pads, kernel) if isinstance(lo, int) and lo == hi and lo <= k // 2]
    return out if len(out) == len(pads) else None


def _static_pads(node: OnnxNode, pads: list[tuple[Dim, Dim]]) -> list[tuple[int, int]]:
    return [(static_dim(lo, "the padding", node), static_dim(hi, "the padding", node)) for lo, hi in pads]


def _window_attrs(
    node: OnnxNode, kernel: list[int], in_sizes: list[Dim]
) -> tuple[list[int], list[int], list[tuple[Dim, Dim]]]:
    n = len(kernel)
    strides = [int(s) for s in node.attr("strides", [1] * n)]
    dilations = [int(d) for d in node.attr("dilations", [1] * n)]
    return strides, dilations, _pads(node, in_sizes, kernel, strides, dilations)


def _explicit_pad(b: OnnxBuilder, x: Ref, pads: Sequence[tuple[Dim, Dim]], value: float | int) -> Ref:
    pairs = ((0, 0), (0, 0), *pads)
    shape = tuple(symbolic.add(symbolic.add(d, lo), hi) for d, (lo, hi) in zip(b.shape(x), pairs))
    return b.emit(Pad(x, pairs, value), shape, b.dtype(x))


def _conv_out(size: Dim, k: int, s: int, d: int, lo: int, hi: int, ceil: bool = False) -> Dim:
    return symbolic.conv_out(size, k, s, d, lo + hi, ceil)


@onnx_op("Conv")
def conv(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, w = b.ref(node, 0), b.ref(node, 1)
    bias = b.optional(node, 2)
    wshape = b.shape(w)
    kernel = [static_dim(k, "the kernel size", node) for k in wshape[2:]]
    shape = b.shape(x)
    strides, dilations, pads = _window_attrs(node, kernel, list(shape[2:]))
    even: list[int] = [lo for lo, hi in pads if isinstance(lo, int) and lo == hi]
    if len(even) < len(pads):
        x, even = _explicit_pad(b, x, pads, 0), [0] * len(pads)
        shape = b.shape(x)
    out = (shape[0], wshape[0]) + tuple(
        _conv_out(sz, k, s, d, p, p) for sz, k, s, d, p in zip(shape[2:], kernel, strides, dilations, even)
    )
    bias_ref = None if bias is None else b.as_ref(bias)
    call = Conv(x, w, bias_ref, tuple(strides), tuple(even), tuple(dilations),
                int(node.attr("group", 1)), False, (0,) * len(kernel))  # fmt: skip
    return b.emit(call, out, b.dtype(x))


@onnx_op("ConvTranspose")
def conv_transpose(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, w = b.ref(node, 0), b.ref(node, 1)
    bias = b.optional(node, 2)
    wshape, shape = b.shape(w), b.shape(x)
    kernel = [static_dim(k, "the kernel size", node) for k in wshape[2:]]
    n = len(kernel)
    groups = int(node.attr("group", 1))
    strides = [int(s) for s in node.attr("strides", [1] * n)]
    dilations = [int(d) for d in node.attr("dilations", [1] * n)]
    out_pad = [int(p) for p in node.attr("output_padding", [0] * n)]
    sizes = list(shape[2:])
    channels = static_dim(wshape[1], "the weight's output channels", node) * groups
    tail = [op + (k - 1) * d + 1 for op, k, d in zip(out_pad, kernel, dilations)]
    full = [symbolic.add(symbolic.mul(s, symbolic.sub(i, 1)), t) for i, s, t in zip(sizes, strides, tail)]
    auto = node.attr("auto_pad", "NOTSET")
    pads: list[tuple[int, int]]
    if node.attr("output_shape") is not None:
        static_full = static_shape(full)
        if static_full is None:
            raise LoweringError(
                f"node {node.name} (ConvTranspose): output_shape over dynamic spatial sizes is not supported; "
                "fix the input's size with input_shapes / --input-shape"
            )
        target = [int(t) for t in node.attr("output_shape")[-n:]]
        totals = [f - t for f, t in zip(static_full, target)]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):  # the output is size·stride: the total is the same at any size
        totals = [t - s for t, s in zip(tail, strides)]
    if node.attr("output_shape") is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for total in totals:
            if auto == "SAME_UPPER":
                pads.append((total // 2, total - total // 2))
            else:
                pads.append((total - total // 2, total // 2))
    elif auto == "VALID":
        pads = [(0, 0)] * n
    else:
        raw = node.attr("pads", [0] * (2 * n))
        pads = [(int(raw[i]), int(raw[i + n])) for i in range(n)]
    # Full transposed convolution, then crop each side (a negative crop pads with zeros).
    call = Conv(x, w, None, tuple(strides), (0,) * n, tuple(dilations), groups, True, tuple(out_pad))
    y = b.emit(call, (shape[0], channels, *full), b.dtype(x))
    for axis, ((lo, hi), f) in enumerate(zip(pads, full), start=2):
        if lo < 0 or hi < 0:
            y = _explicit_pad(b, y, [(max(-lo, 0), max(-hi, 0)) if a == axis - 2 else (0, 0) for a in range(n)], 0)
            lo, hi, f = max(lo, 0), max(hi, 0), symbolic.add(f, max(-lo, 0) + max(-hi, 0))
        y = slice_axis(b, y, axis, lo, symbolic.sub(f, hi))
    if bias is not None:
        y = emit_binary(b, "add", y, b.reshape(bias, (channels,) + (1,) * n))
    return y


# ── pooling ──────────────────────────────────────────────────────────────────
def _pool_window(node: OnnxNode, b: OnnxBuilder) -> tuple[Ref, list[int], list[int], list[int], list[tuple[Dim, Dim]]]:
    """A pooling node's input and window: kernel, strides, dilations and (before, after) pads per axis."""
    x = b.ref(node, 0)
    kernel = [int(k) for k in node.attr("kernel_shape")]
    return x, kernel, *_window_attrs(node, kernel, list(b.shape(x)[2:]))


def _pool_prep(node: OnnxNode, b: OnnxBuilder, fill: float) -> tuple[Ref, list[int], list[int], list[int], list[int]]:
    x, kernel, strides, dilations, pads = _pool_window(node, b)
    even = _even(pads, kernel)
    if even is None:
        x, even = _explicit_pad(b, x, pads, fill), [0] * len(pads)
    return x, kernel, strides, dilations, even


def _pool_shape(
    b: OnnxBuilder, x: Ref, kernel: list[int], strides: list[int], dilations: list[int], pads: list[int], ceil: bool
) -> tuple[Dim, ...]:
    out = []
    for sz, k, s, d, p in zip(b.shape(x)[2:], kernel, strides, dilations, pads):
        o = _conv_out(sz, k, s, d, p, p, ceil)
        if ceil and isinstance(o, int) and isinstance(sz, int) and (o - 1) * s >= sz + p:
            o -= 1  # the last window must start inside the input or its left padding
        out.append(o)
    return tuple(b.shape(x)[:2]) + tuple(out)


@onnx_op("MaxPool")
def max_pool(node: OnnxNode, b: OnnxBuilder) -> Ref | tuple[Ref, Ref]:
    dt = b.in_dtype(node, 0)
    fill = float("-inf") if dtypes.is_float(dt) else int(np.iinfo(dtypes.to_numpy(dt)).min)
    x, kernel, strides, dilations, pads = _pool_prep(node, b, fill)
    ceil = bool(node.attr("ceil_mode", 0))
    shape = _pool_shape(b, x, kernel, strides, dilations, pads, ceil)
    y = b.emit(MaxPool(x, tuple(kernel), tuple(strides), tuple(pads), tuple(dilations), ceil), shape, dt)
    if len(node.outputs) < 2 or not node.outputs[1]:
        return y
    column_major = bool(node.attr("storage_order", 0))
    if b.shape(x) != b.in_shape(node, 0) or (column_major and len(kernel) != 2):  # symmetric padding is the Call's
        raise LoweringError(
            f"node {node.name} (MaxPool): Indices with uneven padding (or storage_order=1 beyond 2-d) are not supported"
        )
    idx = b.emit(MaxPool(x, tuple(kernel), tuple(strides), tuple(pads), tuple(dilations), ceil, True), shape, "i64")
    if column_major:  # row h, column w → h + w·H
        height, width = (static_dim(d, "the spatial extents (for Indices)", node) for d in b.shape(x)[2:])
        row = emit_binary(b, "floor_divide", idx, b.lit(width, "i64"))
        col = emit_binary(b, "remainder", idx, b.lit(width, "i64"))
        idx = emit_binary(b, "add", row, emit_binary(b, "mul", col, b.lit(height, "i64")))
    # The Call gives positions within each (n, c) plane; ONNX counts over the whole tensor.
    n, c = (static_dim(d, "the batch and channel extents (for Indices)", node) for d in shape[:2])
    plane = static_dim(numel(b.shape(x)[2:]), "the spatial size (for Indices)", node)
    offsets = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * len(kernel)) * plane
    return y, emit_binary(b, "add", idx, b.operand(offsets, f"{node.name}_offsets"))


@onnx_op("AveragePool")
def avg_pool(node: OnnxNode, b: OnnxBuilder) -> Env:
    x0, kernel, strides, dilations, pads = _pool_window(node, b)
    ceil = bool(node.attr("ceil_mode", 0))
    include = bool(node.attr("count_include_pad", 0))
    if any(d != 1 for d in dilations):  # AvgPool has no dilation: a window sum over a window count
        total, count = _window_sum(node, b, x0, kernel, strides, dilations, _static_pads(node, pads), ceil, include)
        return emit_binary(b, "div", total, count)
    p = _even(pads, kernel)
    if p is not None:
        shape = _pool_shape(b, x0, kernel, strides, dilations, p, ceil)
        return b.emit(AvgPool(x0, tuple(kernel), tuple(strides), tuple(p), ceil, include, None), shape, b.dtype(x0))
    # Uneven padding: pool the zero-padded input, then divide by the count of real elements.
    zero = [0] * len(kernel)
    xp = _explicit_pad(b, x0, pads, 0)
    shape = _pool_shape(b, xp, kernel, strides, dilations, zero, ceil)
    total = b.emit(AvgPool(xp, tuple(kernel), tuple(strides), tuple(zero), ceil, False, 1), shape, b.dtype(x0))
    if include:
        return emit_binary(b, "div", total, b.lit(math.prod(kernel), b.dtype(x0)))
    ones = b.emit(Full(1.0, tuple(b.shape(x0)[2:]), b.dtype(x0)), tuple(b.shape(x0)[2:]), b.dtype(x0))
    ones = b.reshape(ones, (1, 1, *b.shape(x0)[2:]))
    onesp = _explicit_pad(b, ones, pads, 0)
    count = b.emit(
        AvgPool(onesp, tuple(kernel), tuple(strides), tuple(zero), ceil, False, 1), (1, 1, *shape[2:]), b.dtype(x0)
    )
    return emit_binary(b, "div", total, count)


def _window_sum(
    node: OnnxNode,
    b: OnnxBuilder,
    x: Ref,
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    pads: list[tuple[int, int]],
    ceil: bool,
    count_pads: bool,
) -> tuple[Ref, Ref]:
    """Sums over each (dilated) window of the zero-padded ``x`` (a depthwise convolution with ones) and
    how many elements each window covers (input elements, plus padding when ``count_pads``; never the
    overhang ``ceil_mode`` adds)."""
    shape = b.shape(x)
    sizes = [static_dim(d, "the spatial extents", node) for d in shape[2:]]
    channels = static_dim(shape[1], "the channel count", node)
    full = []  # per axis: padding before, after, and the ceil_mode overhang after it
    for size, kk, s, d, (lo, hi) in zip(sizes, kernel, strides, dilations, pads):
        o = _conv_out(size, kk, s, d, lo, hi, ceil)
        assert isinstance(o, int)  # static sizes give a static extent
        if ceil and (o - 1) * s >= size + lo:
            o -= 1
        need = (o - 1) * s + (kk - 1) * d + 1
        full.append((lo, hi, max(need - (size + lo + hi), 0)))
    dt = b.dtype(x)
    np_dt = dtypes.to_numpy(dt)
    pad_pairs = [(lo, hi + extra) for lo, hi, extra in full]
    xp = _explicit_pad(b, x, pad_pairs, 0)
    ones = b.operand(np.ones((channels, 1, *kernel), np_dt), f"{node.name}_window")
    conv_shape = _pool_shape(b, xp, kernel, strides, dilations, [0] * len(kernel), False)
    no_pad = (0,) * len(kernel)
    call = Conv(xp, b.as_ref(ones), None, tuple(strides), no_pad, tuple(dilations), channels, False, no_pad)
    total = b.emit(call, conv_shape, dt)
    mask = np.ones(sizes, np_dt)
    mask = np.pad(mask, [(lo, hi) for lo, hi, _ in full], constant_values=1 if count_pads else 0)
    mask = np.pad(mask, [(0, extra) for _, _, extra in full])
    counts = np.lib.stride_tricks.sliding_window_view(mask, [(kk - 1) * d + 1 for kk, d in zip(kernel, dilations)])
    counts = counts[tuple(slice(None, None, s) for s in strides)]
    dilated: tuple[Any, ...] = (Ellipsis, *(slice(None, None, d) for d in dilations))
    counts = counts[dilated]
    count = counts.sum(axis=tuple(range(len(kernel), 2 * len(kernel)))).astype(np_dt)
    return total, b.as_ref(b.operand(count.reshape(1, 1, *count.shape), f"{node.name}_counts"))


@onnx_op("LpPool")
def lp_pool(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, kernel, strides, dilations, pads = _pool_window(node, b)
    p = float(node.attr("p", 2))
    dt = b.dtype(x)
    powered = emit_binary(b, "pow", unary(b, "abs", x), b.lit(p, dt))
    total, _ = _window_sum(
        node, b, powered, kernel, strides, dilations, _static_pads(node, pads), bool(node.attr("ceil_mode", 0)), True
    )
    return emit_binary(b, "pow", total, b.lit(1.0 / p, dt))


def _global(fn: str):  # noqa: ANN202
    def handler(node: OnnxNode, b: OnnxBuilder) -> Env:
        x = b.ref(node, 0)
        shape = b.shape(x)
        axes = tuple(range(2, len(shape)))
        return b.emit(Reduce(fn, x, axes, True), tuple(shape[:2]) + (1,) * len(axes), b.dtype(x))

    return handler


onnx_op("GlobalAveragePool")(_global("mean"))
onnx_op("GlobalMaxPool")(_global("amax"))


# ── normalisation ────────────────────────────────────────────────────────────
@onnx_op("BatchNormalization")
def batch_norm(node: OnnxNode, b: OnnxBuilder) -> Env | list[Env]:
    if node.attr("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        return _batch_norm_training(node, b)
    x = b.ref(node, 0)
    scale, bias, mean, var = (b.ref(node, k) for k in (1, 2, 3, 4))
    return b.emit(BatchNorm(x, mean, var, scale, bias, float(node.attr("epsilon", 1e-5))), b.shape(x), b.dtype(x))


def _batch_norm_training(node: OnnxNode, b: OnnxBuilder) -> list[Env]:
    """Training-mode BatchNormalization: normalise with the batch's statistics (population variance)
    and return the updated running mean and variance."""
    x = b.ref(node, 0)
    scale, bias, mean, var = (b.ref(node, k) for k in (1, 2, 3, 4))
    rank, dt = b.rank(x), b.dtype(x)
    axes = tuple(k for k in range(rank) if k != 1)
    stat_shape = tuple(1 if k != 1 else d for k, d in enumerate(b.shape(x)))
    cur_mean = b.emit(Reduce("mean", x, axes, True), stat_shape, dt)
    centered = emit_binary(b, "sub", x, cur_mean)
    cur_var = b.emit(Reduce("mean", emit_binary(b, "mul", centered, centered), axes, True), stat_shape, dt)
    eps = b.lit(float(node.attr("epsilon", 1e-5)), dt)
    y = emit_binary(b, "div", centered, unary(b, "sqrt", emit_binary(b, "add", cur_var, eps)))
    channel = (1, b.shape(scale)[0], *([1] * (rank - 2)))
    y = emit_binary(b, "add", emit_binary(b, "mul", y, b.reshape(scale, channel)), b.reshape(bias, channel))
    momentum = float(node.attr("momentum", 0.9))

    def running(old: Ref, cur: Ref) -> Ref:
        cur = b.reshape(cur, b.shape(old))
        keep = emit_binary(b, "mul", old, b.lit(momentum, b.dtype(old)))
        return emit_binary(
            b, "add", keep, emit_binary(b, "mul", b.cast(cur, b.dtype(old)), b.lit(1 - momentum, b.dtype(old)))
        )

    return [y, running(mean, cur_mean), running(var, cur_var)]


@onnx_op("InstanceNormalization")
def instance_norm(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    c = b.shape(x)[1]
    call = GroupNorm(
        x, b.ref(node, 1), b.ref(node, 2), static_dim(c, "the channel count", node), float(node.attr("epsilon", 1e-5))
    )
    return b.emit(call, b.shape(x), b.dtype(x))


@onnx_op("GroupNormalization")
def group_norm(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    shape = b.shape(x)
    groups, eps = int(node.attr("num_groups")), float(node.attr("epsilon", 1e-5))
    scale, bias = b.ref(node, 1), b.ref(node, 2)
    if b.shape(scale)[0] == shape[1]:
        return b.emit(GroupNorm(x, scale, bias, groups, eps), shape, b.dtype(x))
    # opset 18: one scale and bias per group, applied to every channel of the group.
    y = b.emit(GroupNorm(x, None, None, groups, eps), shape, b.dtype(x))
    per = (groups, dim_op("floordiv", shape[1], groups))
    view = (1, shape[1]) + (1,) * (len(shape) - 2)
    for v, fn in ((scale, "mul"), (bias, "add")):
        col = b.reshape(v, (groups, 1))
        full = b.reshape(emit_binary(b, "add", col, b.as_ref(Lit(0.0, b.dtype(v)), per)), view)
        y = emit_binary(b, fn, y, full)
    return y


@onnx_op("LayerNormalization")
def layer_norm(node: OnnxNode, b: OnnxBuilder) -> Ref | tuple[Ref, Ref, Ref]:
    x = b.ref(node, 0)
    shape = b.shape(x)
    axis = norm_axis(node.attr("axis", -1), len(shape))
    trailing = tuple(shape[axis:])
    scale, bias = b.ref(node, 1), b.optional(node, 2)
    eps = float(node.attr("epsilon", 1e-5))
    if len([o for o in node.outputs if o]) > 1:
        return _layer_norm_stats(b, x, axis, scale, bias, eps, node.attr("stash_type", 1))

    def full(v: Operand) -> Ref:
        v = b.as_ref(v)
        if tuple(b.shape(v)) == trailing:
            return v
        return emit_binary(b, "add", v, b.as_ref(Lit(0.0, b.dtype(v)), trailing))

    call = LayerNorm(x, full(scale), None if bias is None else full(bias), len(trailing), eps)
    return b.emit(call, shape, b.dtype(x))


def _layer_norm_stats(
    b: OnnxBuilder, x: Ref, axis: int, scale: Ref, bias: Operand | None, eps: float, stash: int
) -> tuple[Ref, Ref, Ref]:
    """LayerNormalization with its Mean and InvStdDev outputs, composed (in f32 when ``stash_type=1``)."""
    dt = b.dtype(x)
    xs = b.cast(x, "f32") if stash == 1 and dt != "f64" else x
    cdt = b.dtype(xs)
    axes = tuple(range(axis, b.rank(x)))
    kept = tuple(1 if k in axes else d for k, d in enumerate(b.shape(x)))
    mean = b.emit(Reduce("mean", b.as_ref(xs), axes, True), kept, cdt)
    centered = emit_binary(b, "sub", xs, mean)
    var = b.emit(Reduce("mean", emit_binary(b, "mul", centered, centered), axes, True), kept, cdt)
    inv = unary(b, "rsqrt", emit_binary(b, "add", var, b.lit(eps, cdt)))
    y = b.cast(emit_binary(b, "mul", centered, inv), dt)
    y = emit_binary(b, "mul", y, scale)
    if bias is not None:
        y = emit_binary(b, "add", y, bias)
    return y, mean, inv


@onnx_op("RMSNormalization")
def rms_norm(node: OnnxNode, b: OnnxBuilder) -> Env:
    from rlx.ir.calls import RmsNorm

    x = b.ref(node, 0)
    shape = b.shape(x)
    axis = norm_axis(node.attr("axis", -1), len(shape))
    trailing = tuple(shape[axis:])
    scale = b.ref(node, 1)
    if tuple(b.shape(scale)) != trailing:
        scale = emit_binary(b, "add", scale, b.as_ref(Lit(0.0, b.dtype(scale)), trailing))
    return b.emit(RmsNorm(x, scale, len(trailing), float(node.attr("epsilon", 1e-5))), shape, b.dtype(x))


@onnx_op("LpNormalization")
def lp_norm(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    axis = norm_axis(node.attr("axis", -1), b.rank(x))
    p = node.attr("p", 2)
    shape = list(b.shape(x))
    shape[axis] = 1
    if p == 1:
        norm = b.emit(Reduce("sum", unary(b, "abs", x), (axis,), True), tuple(shape), b.dtype(x))
    else:
        norm = unary(
            b, "sqrt", b.emit(Reduce("sum", emit_binary(b, "mul", x, x), (axis,), True), tuple(shape), b.dtype(x))
        )
    # A zero vector stays zero (the reference divides by a norm of 1 there, not 0).
    zero = emit_binary(b, "eq", norm, b.lit(0, b.dtype(x)))
    norm = b.emit(Where(zero, b.lit(1, b.dtype(x)), norm), tuple(shape), b.dtype(x))
    return emit_binary(b, "div", x, norm)


@onnx_op("MeanVarianceNormalization")
def mvn(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    shape = b.shape(x)
    axes = tuple(sorted(norm_axis(a, len(shape)) for a in node.attr("axes", [0, 2, 3])))
    kept = tuple(1 if k in axes else d for k, d in enumerate(shape))
    mean = b.emit(Reduce("mean", x, axes, True), kept, b.dtype(x))
    centered = emit_binary(b, "sub", x, mean)
    var = b.emit(Reduce("mean", emit_binary(b, "mul", centered, centered), axes, True), kept, b.dtype(x))
    std = unary(b, "sqrt", var)
    return emit_binary(b, "div", centered, emit_binary(b, "add", std, b.lit(1e-9, b.dtype(x))))


# ── softmax family ───────────────────────────────────────────────────────────
def _coerced(node: OnnxNode, b: OnnxBuilder) -> tuple[Ref, int, tuple[Dim, ...]]:
    """The input and the axis to normalise over; before opset 13 the input is seen as 2-d."""
    x = b.ref(node, 0)
    shape = b.shape(x)
    if node.opset >= 13:
        return x, norm_axis(node.attr("axis", -1), len(shape)), shape
    axis = norm_axis(node.attr("axis", 1), len(shape)) if shape else 0
    flat = b.reshape(x, (numel(shape[:axis]), numel(shape[axis:])))
    return flat, 1, shape


def _softmax(log: bool):  # noqa: ANN202
    def handler(node: OnnxNode, b: OnnxBuilder) -> Env:
        x, axis, shape = _coerced(node, b)
        y = b.emit(Softmax(x, axis, log), b.shape(x), b.dtype(x))
        return b.reshape(y, shape)

    return handler


onnx_op("Softmax")(_softmax(False))
onnx_op("LogSoftmax")(_softmax(True))


@onnx_op("Hardmax")
def hardmax(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, axis, shape = _coerced(node, b)
    xs = list(b.shape(x))
    kept = tuple(1 if k == axis else d for k, d in enumerate(xs))
    arg = b.emit(ArgReduce("argmax", x, axis, True), kept, "i64")
    from rlx.ir.calls import Arange

    ar_shape = tuple(xs[axis] if k == axis else 1 for k in range(len(xs)))
    ar = b.reshape(b.emit(Arange(0, xs[axis], 1, "i64"), (xs[axis],), "i64"), ar_shape)
    hot = b.cast(emit_binary(b, "eq", ar, arg), b.dtype(x))
    return b.reshape(hot, shape)


@onnx_op("LRN")
def lrn(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    shape = b.shape(x)
    size = int(node.attr("size"))
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    sq = emit_binary(b, "mul", x, x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    # Sum of squares over a window of channels: pad the channel axis, then sum shifted slices.
    pairs = ((0, 0), (lo, hi)) + ((0, 0),) * (len(shape) - 2)
    padded = b.emit(
        Pad(sq, pairs, 0.0), tuple(dim_op("add", d, p0 + p1) for d, (p0, p1) in zip(shape, pairs)), b.dtype(x)
    )
    total: Operand | None = None
    for k in range(size):
        part = slice_axis(b, padded, 1, k, dim_op("add", shape[1], k))
        total = part if total is None else emit_binary(b, "add", total, part)
    if total is None:
        raise LoweringError(f"node {node.name} (LRN): size must be at least 1, found {size}")
    dt = b.dtype(x)
    scaled = emit_binary(b, "add", emit_binary(b, "mul", total, b.lit(alpha / size, dt)), b.lit(bias, dt))
    return emit_binary(b, "div", x, emit_binary(b, "pow", scaled, b.lit(beta, dt)))


@onnx_op("Col2Im")
def col2im(node: OnnxNode, b: OnnxBuilder) -> Env:
    """Sum sliding blocks back into an image: a grouped transposed convolution whose one-hot kernel
    sends column entry ``k`` of each block to kernel position ``k``."""
    x = b.ref(node, 0)  # [N, C·∏block, L]
    image = [static_dim(d, "image_shape", node) for d in b.required_ints(node, 1)]
    block = [static_dim(d, "block_shape", node) for d in b.required_ints(node, 2)]
    n = len(image)
    strides = [int(s) for s in node.attr("strides", [1] * n)]
    dilations = [int(d) for d in node.attr("dilations", [1] * n)]
    pads = [int(p) for p in node.attr("pads", [0] * (2 * n))]
    counts = [
        (size + pads[i] + pads[i + n] - d * (k - 1) - 1) // s + 1
        for i, (size, k, s, d) in enumerate(zip(image, block, strides, dilations))
    ]
    k_total = math.prod(block)
    batch, cols = b.shape(x)[0], static_dim(b.shape(x)[1], "the column channels", node)
    channels = cols // k_total
    grid = b.reshape(x, (batch, cols, *counts))
    weight = np.zeros((cols, 1, *block), dtypes.to_numpy(b.dtype(x)))
    for c in range(channels):
        for k in range(k_total):
            position = (c * k_total + k, 0, *(int(i) for i in np.unravel_index(k, block)))
            weight[position] = 1
    w = b.as_ref(b.operand(weight, f"{node.name}_scatter"))
    full = [(m - 1) * s + (k - 1) * d + 1 for m, s, k, d in zip(counts, strides, block, dilations)]
    zero = (0,) * n
    call = Conv(grid, w, None, tuple(strides), zero, tuple(dilations), channels, True, zero)
    y = b.emit(call, (batch, channels, *full), b.dtype(x))
    for i in range(n):  # crop the padding
        y = slice_axis(b, y, 2 + i, pads[i], min(full[i], pads[i] + image[i]))
    short = [max(p + s - f, 0) for f, p, s in zip(full, pads, image)]
    if any(short):  # the image's last rows no block reached stay zero
        grow = ((0, 0), (0, 0), *((0, k) for k in short))
        y = b.emit(Pad(y, grow, 0), (batch, channels, *image), b.dtype(x))
    return y
