"""Neural-network blocks: Softmax, the norms, Conv, pooling and Attention.

Each is emitted as the standard ONNX operator (or the small pattern of them) that onnxruntime's
graph optimizer recognises and fuses — LayerNormalization, the RMSNorm pattern it turns into
SimplifiedLayerNormalization, Conv + BatchNormalization, MatMul + Softmax attention — with the
window geometry of pooling taken from the shared ``rlx.kernels.geometry``, so extents, padding
and divisors are PyTorch's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlx.exporters.onnx.elementwise import trunc_divide
from rlx.exporters.onnx.movement import slice_axis
from rlx.exporters.onnx.registry import CONTRIB_DOMAIN, EmitError, OnnxGraph, T, emits, out_static, unsupported
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr
from rlx.ir.symbolic import Sym
from rlx.kernels import geometry
from rlx.kernels.precision import lowest


@emits(C.Softmax, widen=True)
def softmax(g: OnnxGraph, c: C.Softmax, out: Instr, x: T) -> T:
    if x.rank == 0:  # PyTorch treats a 0-d tensor as one element along its only dim
        return g.op("Sub", [x, x], x.dtype) if c.log else g.op("Div", [x, x], x.dtype)
    return g.op("LogSoftmax" if c.log else "Softmax", [x], x.dtype, out.shape, axis=c.axis)


def _mean(g: OnnxGraph, x: T, axes: list[int]) -> T:
    return g.op("ReduceMean", [x, g.ints(axes)], x.dtype, keepdims=1)


def _ones(g: OnnxGraph, x: T, n_trailing: int) -> T:
    assert x.shape is not None
    shape = x.shape[x.rank - n_trailing :]
    return g.op("Expand", [g.const(1, x.dtype), g.dims(shape)], x.dtype)


@emits(C.LayerNorm, widen=True)
def layer_norm(g: OnnxGraph, c: C.LayerNorm, out: Instr, x: T, w: T | None, b: T | None) -> T:
    scale = _ones(g, x, c.ndim) if w is None else g.cast(w, x.dtype)
    inputs = [x, scale] + ([g.cast(b, x.dtype)] if b is not None else [])
    return g.op("LayerNormalization", inputs, x.dtype, out.shape, axis=-c.ndim, epsilon=c.eps, stash_type=1)


@emits(C.RmsNorm, widen=True)
def rms_norm(g: OnnxGraph, c: C.RmsNorm, out: Instr, x: T, w: T | None) -> T:
    # The pattern onnxruntime fuses into SimplifiedLayerNormalization: Pow → ReduceMean → Add → Sqrt → Div.
    axes = list(range(x.rank - c.ndim, x.rank))
    power = g.op("Pow", [x, g.const(2.0, x.dtype)], x.dtype)
    rms = g.op("Sqrt", [g.op("Add", [_mean(g, power, axes), g.const(c.eps, x.dtype)], x.dtype)], x.dtype)
    y = g.op("Div", [x, rms], x.dtype)
    return y if w is None else g.op("Mul", [y, g.cast(w, x.dtype)], x.dtype, out.shape)


@emits(C.BatchNorm, widen=True)
def batch_norm(g: OnnxGraph, c: C.BatchNorm, out: Instr, x: T, mean: T, var: T, w: T | None, b: T | None) -> T:
    assert x.shape is not None
    channels = x.shape[1]
    scale = g.cast(w, x.dtype) if w is not None else g.op("Expand", [g.const(1, x.dtype), g.dims([channels])], x.dtype)
    bias = g.cast(b, x.dtype) if b is not None else g.op("Expand", [g.const(0, x.dtype), g.dims([channels])], x.dtype)
    stats = [g.cast(mean, x.dtype), g.cast(var, x.dtype)]
    if x.rank == 2:  # BatchNormalization wants spatial axes: [N, C] as [N, C, 1]
        x3 = g.op("Unsqueeze", [x, g.ints([2])], x.dtype)
        y = g.op("BatchNormalization", [x3, scale, bias, *stats], x.dtype, epsilon=c.eps)
        return g.op("Squeeze", [y, g.ints([2])], x.dtype, out.shape)
    return g.op("BatchNormalization", [x, scale, bias, *stats], x.dtype, out.shape, epsilon=c.eps)


@emits(C.GroupNorm, widen=True)
def group_norm(g: OnnxGraph, c: C.GroupNorm, out: Instr, x: T, w: T | None, b: T | None) -> T:
    assert x.shape is not None
    grouped = g.op("Reshape", [x, g.dims([x.shape[0], c.groups, -1])], x.dtype)
    shape = g.dims(x.shape) if all(isinstance(d, int) for d in x.shape) else g.op("Shape", [x], "i64")
    if x.dtype == "f32":  # each group normalized as one instance (one kernel; onnxruntime's is float-only)
        ones, zeros = g.const(np.ones(c.groups), x.dtype), g.const(np.zeros(c.groups), x.dtype)
        normed = g.op("InstanceNormalization", [grouped, ones, zeros], x.dtype, epsilon=c.eps)
        y = g.op("Reshape", [normed, shape], x.dtype)
    else:
        centered = g.op("Sub", [grouped, _mean(g, grouped, [2])], x.dtype)
        var = _mean(g, g.op("Mul", [centered, centered], x.dtype), [2])
        inv = g.op(
            "Div",
            [g.const(1, x.dtype), g.op("Sqrt", [g.op("Add", [var, g.const(c.eps, x.dtype)], x.dtype)], x.dtype)],
            x.dtype,
        )
        y = g.op("Reshape", [g.op("Mul", [centered, inv], x.dtype), shape], x.dtype)
    per_channel = g.ints([-1] + [1] * (x.rank - 2))
    if w is not None:
        y = g.op("Mul", [y, g.op("Reshape", [g.cast(w, x.dtype), per_channel], x.dtype)], x.dtype)
    if b is not None:
        y = g.op("Add", [y, g.op("Reshape", [g.cast(b, x.dtype), per_channel], x.dtype)], x.dtype)
    return y


@emits(C.Conv, widen=True)
def conv(g: OnnxGraph, c: C.Conv, out: Instr, x: T, w: T, b: T | None) -> T:
    if not dtypes.is_float(x.dtype):  # (through float64 it would be exact only below 2**53)
        raise unsupported(c, f"in {x.dtype} (ONNX's Conv and ConvTranspose are float-only)")
    nd = w.rank - 2
    inputs = [x, g.cast(w, x.dtype)] + ([g.cast(b, x.dtype)] if b is not None else [])
    common = dict(strides=list(c.stride), dilations=list(c.dilation), group=c.groups, pads=list(c.padding) * 2)
    if not c.transposed:
        return g.op("Conv", inputs, x.dtype, out.shape, **common)
    if not all(isinstance(d, int) for d in out.shape):
        raise unsupported(c, "transposed with a symbolic output extent")
    if any(extra >= step for extra, step in zip(c.output_padding, c.stride)):
        return _conv_transpose_padded_past_stride(g, c, out, inputs, common)
    return g.op(
        "ConvTranspose",
        inputs,
        x.dtype,
        out.shape,
        output_padding=list(c.output_padding) if any(c.output_padding) else [0] * nd,
        **common,
    )


def _conv_transpose_padded_past_stride(
    g: OnnxGraph, c: C.Conv, out: Instr, inputs: list[T], common: dict[str, Any]
) -> T:
    """A transposed convolution whose output padding reaches its stride (PyTorch allows it below
    the dilation; onnxruntime refuses it): the full product without the far-side crop, then cut
    or zero-extended to the output's extents, then the bias."""
    x, w = inputs[0], inputs[1]
    nd = len(c.stride)
    rank = len(out.shape)
    lead = rank - nd
    near = list(c.padding) + [0] * nd
    y = g.op("ConvTranspose", [x, w], x.dtype, **{**common, "pads": near})
    full = [
        (n - 1) * s + d * (k - 1) + 1 - p
        for n, s, d, k, p in zip(x.static_shape("ConvTranspose")[-nd:], c.stride, c.dilation,
                                 w.static_shape("ConvTranspose")[2:], c.padding)
    ]  # fmt: skip
    want = list(out_static(out, "ConvTranspose")[lead:])
    cut = [min(f, n) for f, n in zip(full, want)]
    if cut != full:
        y = g.op("Slice", [y, g.ints([0] * nd), g.ints(cut), g.ints(list(range(lead, rank)))], x.dtype)
    if cut != want:
        y = g.op("Pad", [y, g.ints([0] * rank + [0] * lead + [n - k for n, k in zip(want, cut)])], x.dtype)
    if len(inputs) > 2:
        y = g.op("Add", [y, g.op("Reshape", [inputs[2], g.ints([-1] + [1] * nd)], x.dtype)], x.dtype)
    return y


def _pool_pads(x: T, kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
               dilation: tuple[int, ...], ceil_mode: bool) -> tuple[tuple[int, ...], list[tuple[int, int]]]:  # fmt: skip
    return geometry.pool_geometry(x.static_shape("pooling"), kernel, stride, padding, dilation, ceil_mode)


def _crop(g: OnnxGraph, y: T, x: T, nd: int, out: tuple[int, ...], attrs: dict[str, Any]) -> T:
    """Exactly ``out`` windows (explicit padding can add a partial one PyTorch does not count)."""
    sizes = x.static_shape("pooling")[-nd:]
    pads, kernel, stride = attrs["pads"], attrs["kernel_shape"], attrs["strides"]
    dilation = attrs.get("dilations", [1] * nd)
    for i, n in enumerate(out):
        span = sizes[i] + pads[i] + pads[nd + i] - dilation[i] * (kernel[i] - 1) - 1
        onnx_extent = (-(-span // stride[i]) if attrs.get("ceil_mode") else span // stride[i]) + 1
        if onnx_extent != n:
            y = slice_axis(g, y, x.rank - nd + i, 0, n)
    return y


@emits(C.MaxPool, widen=True)
def max_pool(g: OnnxGraph, c: C.MaxPool, out: Instr, x: T) -> T:
    if not dtypes.is_float(x.dtype) and x.dtype not in ("i8", "u8"):
        return _integer_max_pool(g, c, x)
    nd = len(c.kernel)
    windows, pads = _pool_pads(x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    squeeze = x.rank == nd + 1  # an unbatched [C, *spatial] input
    xin = g.op("Unsqueeze", [x, g.ints([0])], x.dtype, (1, *x.static_shape("pooling"))) if squeeze else x
    attrs: dict[str, Any] = dict(kernel_shape=list(c.kernel), strides=list(c.stride), dilations=list(c.dilation),
                 pads=[lo for lo, _ in pads] + [hi for _, hi in pads])  # fmt: skip
    if any(hi >= k for (_, hi), k in zip(pads, c.kernel)):
        # A dilated window's ceil_mode margin can reach the kernel's extent, which onnxruntime
        # refuses as padding: its own ceil_mode makes the partial window from PyTorch's padding.
        attrs.update(pads=list(c.padding) * 2, ceil_mode=1)
    if c.indices:
        _, idx = g.node("MaxPool", [xin], 2, **attrs)
        plane = int(np.prod(x.static_shape("MaxPool")[-nd:]))
        # ONNX counts positions over the whole tensor; PyTorch within each [*spatial] plane.
        y = g.op("Mod", [T(idx, "i64"), g.ints(plane)], "i64", fmod=0)
        if g.pooling_nan and x.dtype in ("f32", "f64"):
            y = _max_pool_nan_indices(g, xin, y, attrs, c.x.name)
    else:
        y = g.op("MaxPool", [xin], x.dtype, **attrs)
        if g.pooling_nan and x.dtype in ("f32", "f64"):  # MaxPool skips NaN; PyTorch's propagates it
            y = _max_pool_nan(g, xin, y, attrs, c.x.name)
    y = _crop(g, y, xin, nd, windows, attrs)
    return g.op("Squeeze", [y, g.ints([0])], y.dtype) if squeeze else y


def _max_pool_nan(g: OnnxGraph, x: T, y: T, attrs: dict[str, Any], pooled: str | None = None) -> T:
    """PyTorch's NaN rule on top of onnxruntime's MaxPool ``y`` of ``x``: exactly, by pooling the
    NaN mask too; or (``pooling_nan="check"``) by flagging the run: the sum of ``x`` is finite only
    when no window held a NaN, and a per-channel mean keeps the NCHWc layout of a conv → pool chain;
    where the program value ``pooled`` can hold NaN only from non-finite graph inputs
    (``OnnxGraph.nan_sources``), no node at all: the engine checks those inputs before the run
    (``OnnxGraph.finite_inputs``), which costs a small CNN less than a reduction node and its
    extra output."""
    if _nan_checked(g, x, pooled):
        return y
    nan = g.op("MaxPool", [g.cast(g.op("IsNaN", [x], "bool"), "f32")], "f32", **attrs)
    return g.op("Where", [g.cast(nan, "bool"), g.const(np.nan, x.dtype), y], x.dtype)


def _max_pool_nan_indices(g: OnnxGraph, x: T, idx: T, attrs: dict[str, Any], pooled: str | None = None) -> T:
    """PyTorch's NaN rule for MaxPool's positions ``idx`` (within each plane) of ``x``: a window
    holding NaN points at its last NaN (row-major), which PyTorch's ``val > max || isnan(val)``
    update moves to; the NaN positions' own max pooling finds it. ``pooling_nan="check"`` as in
    ``_max_pool_nan``."""
    if _nan_checked(g, x, pooled):
        return idx
    spatial = x.static_shape("MaxPool")[2:]
    kind = "f32" if math.prod(spatial) <= 2**24 else "f64"  # positions exact in the float type
    positions = g.const(np.arange(math.prod(spatial)).reshape(spatial), kind)
    nan = g.op("IsNaN", [x], "bool")
    last = g.op("MaxPool", [g.op("Where", [nan, positions, g.const(-1, kind)], kind)], kind, **attrs)
    none = g.op("Less", [last, g.const(0, kind)], "bool")
    return g.op("Where", [none, idx, g.cast(last, "i64")], "i64")


def _nan_checked(g: OnnxGraph, x: T, pooled: str | None) -> bool:
    """Whether ``pooling_nan="check"`` covers the pooling of ``x``: a check that it is finite added,
    or none needed (``pooled``, the value it holds, can be non-finite only where graph inputs the
    engine checks are)."""
    if g.pooling_nan != "check":
        return False
    if pooled is not None and g.check_finite(pooled):
        return True
    # (onnxruntime's GlobalAveragePool is float32 only)
    channel_means = g.op("GlobalAveragePool", [x], x.dtype) if x.dtype == "f32" else x
    g.nan_checks.append(g.cast(g.op("ReduceSum", [channel_means], x.dtype, keepdims=0), "f32"))
    return True


@emits(C.AvgPool, widen=True)
def avg_pool(g: OnnxGraph, c: C.AvgPool, out: Instr, x: T) -> T:
    if not dtypes.is_float(x.dtype):
        return _integer_avg_pool(g, c, x)
    nd = len(c.kernel)
    ones = (1,) * nd
    windows, pads = _pool_pads(x, c.kernel, c.stride, c.padding, ones, c.ceil_mode)
    squeeze = x.rank == nd + 1
    xin = g.op("Unsqueeze", [x, g.ints([0])], x.dtype, (1, *x.static_shape("pooling"))) if squeeze else x
    sizes = x.static_shape("AvgPool")[-nd:]
    divisor = geometry.avg_pool_divisor(sizes, c.kernel, c.stride, c.padding, windows, c.count_include_pad)
    attrs: dict[str, Any] = dict(
        kernel_shape=list(c.kernel), strides=list(c.stride), pads=[lo for lo, _ in pads] + [hi for _, hi in pads]
    )
    area = math.prod(c.kernel)
    inside = geometry.avg_pool_divisor(sizes, c.kernel, c.stride, c.padding, windows, False)
    if not c.divisor_override and np.all(divisor == area):  # the plain average: one AveragePool
        y = _crop(g, g.op("AveragePool", [xin], x.dtype, count_include_pad=1, **attrs), xin, nd, windows, attrs)
    elif not c.divisor_override and np.array_equal(divisor, inside):
        # PyTorch divides by the window's input elements (padding left out, or ceil_mode's partial
        # windows with no padding): onnxruntime's count_include_pad=0 does too, in one AveragePool
        y = _crop(g, g.op("AveragePool", [xin], x.dtype, count_include_pad=0, **attrs), xin, nd, windows, attrs)
    else:  # the window sums (average × area), divided by PyTorch's own divisor per window
        mean = _crop(g, g.op("AveragePool", [xin], x.dtype, count_include_pad=1, **attrs), xin, nd, windows, attrs)
        total = g.op("Mul", [mean, g.const(area, x.dtype)], x.dtype)
        by = g.const(c.divisor_override, x.dtype) if c.divisor_override else g.const(divisor, x.dtype)
        y = g.op("Div", [total, by], x.dtype)
    return g.op("Squeeze", [y, g.ints([0])], y.dtype) if squeeze else y


def _integer_avg_pool(g: OnnxGraph, c: C.AvgPool, x: T) -> T:
    """Integer average pooling (onnxruntime's AveragePool is float-only), exact as PyTorch's: each
    window's sum in x's type (``_window_taps``; padding reads 0), divided by the window's divisor
    rounded toward zero as PyTorch's."""
    nd = len(c.kernel)
    taps, _, out = _window_taps(g, x, c.kernel, c.stride, c.padding, (1,) * nd, c.ceil_mode, 0)
    total = g.op("ReduceSum", [taps, g.ints([-1])], x.dtype, keepdims=0)
    sizes = x.static_shape("AvgPool")[-nd:]
    divisor = c.divisor_override or geometry.avg_pool_divisor(sizes, c.kernel, c.stride, c.padding, out,
                                                              c.count_include_pad)  # fmt: skip
    return trunc_divide(g, total, g.const(divisor, x.dtype))


def _integer_max_pool(g: OnnxGraph, c: C.MaxPool, x: T) -> T:
    """Integer max pooling (onnxruntime's MaxPool takes floats and 8-bit integers only), exact: each
    window's largest (``_window_taps``; padding reads the type's lowest), or its position in the
    plane: the first tap holding it, in the row-major order PyTorch's ``val > max`` scan keeps."""
    work = g.cast(x, "i32") if x.dtype == "i16" else x  # (no 16-bit ReduceMax or ArgMax kernels)
    taps, positions, _ = _window_taps(g, work, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode,
                                      lowest(np.dtype(dtypes.to_numpy(x.dtype))))  # fmt: skip
    if not c.indices:
        return g.cast(g.op("ReduceMax", [taps, g.ints([-1])], work.dtype, keepdims=0), x.dtype)
    first = g.op("ArgMax", [taps], "i64", axis=-1, keepdims=1, select_last_index=0)  # [*lead, *out, 1]
    # (a padding tap holds the type's lowest: it comes first only in a window of nothing else)
    table = g.op("Expand", [g.const(np.maximum(positions, 0), "i64"), g.op("Shape", [taps], "i64")], "i64")
    position = g.op("GatherElements", [table, first], "i64", axis=-1)
    return g.op("Squeeze", [position, g.ints([-1])], "i64")


def _window_taps(g: OnnxGraph, x: T, kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
                 dilation: tuple[int, ...], ceil_mode: bool, fill: Any) -> tuple[T, np.ndarray, tuple[int, ...]]:  # fmt: skip
    """Every pooling window's taps ``[*lead, *out, taps]``, gathered from the flattened plane by the
    static table of the positions they read (``geometry.window_positions``; ``fill`` where a tap
    is padding); with that table and the output's extents."""
    nd = len(kernel)
    shape = x.static_shape("pooling")
    lead, sizes = shape[: len(shape) - nd], shape[len(shape) - nd :]
    windows = geometry.pool_windows(shape, kernel, stride, padding, dilation, ceil_mode)
    plane = math.prod(sizes)
    positions = geometry.window_positions(sizes, windows)  # [*out, taps], -1 in the padding
    flat = g.op("Reshape", [x, g.ints([*lead, plane])], x.dtype)
    padded = g.op("Concat", [flat, g.const(np.full((*lead, 1), fill), x.dtype)], x.dtype, axis=-1)
    taps = g.op("Gather", [padded, g.const(np.where(positions < 0, plane, positions), "i64")], x.dtype, axis=-1)
    return taps, positions, tuple(w.out for w in windows)


@emits(C.AdaptiveAvgPool, widen=True)
def adaptive_avg_pool(g: OnnxGraph, c: C.AdaptiveAvgPool, out: Instr, x: T) -> T:
    nd = len(c.output_size)
    shape = x.static_shape("AdaptiveAvgPool")
    sizes_out = out_static(out, "AdaptiveAvgPool")[-nd:]
    if all(n == 1 for n in sizes_out) and x.rank == nd + 2:  # the global average (classifier heads)
        return g.op("GlobalAveragePool", [x], x.dtype, out.shape)
    y = x
    for i, size_out in enumerate(sizes_out):  # separable: one spatial axis at a time
        axis = x.rank - nd + i
        size_in = shape[axis]
        if size_out == 1:
            y = g.op("ReduceMean", [y, g.ints([axis])], x.dtype, keepdims=1)
            continue
        pieces = []
        for j in range(size_out):
            start, end = (j * size_in) // size_out, -((-(j + 1) * size_in) // size_out)
            piece = slice_axis(g, y, axis, start, end)
            pieces.append(g.op("ReduceMean", [piece, g.ints([axis])], x.dtype, keepdims=1))
        y = g.op("Concat", pieces, x.dtype, axis=axis)
    return y


@emits(C.Attention, widen=True)
def attention(g: OnnxGraph, c: C.Attention, out: Instr, q: T, k: T, v: T, mask: T | None) -> T:
    assert q.shape is not None and k.shape is not None
    grouped = c.gqa and q.rank >= 3 and k.shape[-3] != q.shape[-3]
    if grouped:
        k, v = _repeat_heads(g, k, q), _repeat_heads(g, v, q)
    assert k.shape is not None
    neg_inf = g.const(-np.inf, q.dtype)
    # Measured (benchmarks/bench.py): MultiHeadAttention wins on encoders' attention (BERT 0.5-0.8x,
    # ViT 0.7x at batch 8). With a causal mask ("causal_attention") it was up to 2x slower as an
    # additive [B, N, L, S] bias; its own causal form (unidirectional) measured a median 0.96x
    # (batch 1) / 0.98x (batch 8) of the standard operators on decoder_lm, but aligns the triangle to the top-left only where queries and keys are as many.
    causal, mask, dead_rows = _static_mask(g, c, q, k, mask)
    decoder = causal or grouped
    fused = "attention" in g.contrib and (not decoder or "causal_attention" in g.contrib)
    unidirectional = fused and causal and mask is None and _same_length(q, k)
    unidirectional = unidirectional and _fits_multi_head_attention(q, k, v, None, None)
    allowed: T | None = None  # bool [.., L, S]: where a query may attend (None: everywhere)
    if causal and not unidirectional:  # lower-triangular, top-left as PyTorch's (folded when static)
        rows = g.op("Range", [g.const(0, "i64"), _extent(g, q.shape[-2]), g.const(1, "i64")], "i64")
        cols = g.op("Range", [g.const(0, "i64"), _extent(g, k.shape[-2]), g.const(1, "i64")], "i64")
        allowed = g.op("GreaterOrEqual", [g.op("Unsqueeze", [rows, g.ints([1])], "i64"), cols], "bool")
    if mask is not None and mask.dtype == "bool":
        allowed = mask if allowed is None else g.op("And", [allowed, mask], "bool")
    bias = None if mask is None or mask.dtype == "bool" else g.cast(mask, q.dtype)
    if unidirectional or (fused and _fits_multi_head_attention(q, k, v, allowed, bias)):
        result = _multi_head_attention(g, c, q, k, v, allowed, bias, unidirectional)
    else:
        result = _attention_ops(g, c, q, k, v, allowed, bias)
    if mask is not None and dead_rows:
        # A query that may attend nowhere gets zeros, like PyTorch's safe softmax. Decided on the
        # mask (usually without the head axis: smaller than the scores): for finite q and k a row
        # of scores is all -inf exactly where its mask (with the causal triangle) allows nothing.
        if mask.dtype == "bool":
            assert allowed is not None
            blocked = g.op("Not", [allowed], "bool")
        else:
            assert bias is not None
            blocked = g.op("Equal", [bias, neg_inf], "bool")
            if allowed is not None:
                blocked = g.op("Or", [blocked, g.op("Not", [allowed], "bool")], "bool")
        dead = g.op("ReduceMin", [g.cast(blocked, "i32"), g.ints([-1])], "i32", keepdims=1)
        result = g.op("Where", [g.cast(dead, "bool"), g.const(0, q.dtype), result], q.dtype)
    return T(result.name, result.dtype, out.shape)


def _static_mask(g: OnnxGraph, c: C.Attention, q: T, k: T, mask: T | None) -> tuple[bool, T | None, bool]:
    """(causal, mask, dead_rows): the attention's causal flag and mask, simplified where the mask
    has the same value on every run (``OnnxGraph.static_value``: a decoder's mask built from
    ``arange``): one that allows everything is dropped, one that is exactly the causal triangle
    becomes the causal flag; ``dead_rows``: whether some query may attend nowhere."""
    if mask is None:
        return c.causal, None, False
    known = g.static_value(mask.name) if mask.name in g.values else None
    assert q.shape is not None and k.shape is not None
    rows, cols = q.shape[-2], k.shape[-2]
    if known is None or not isinstance(rows, int) or not isinstance(cols, int):
        return c.causal, mask, True
    allowed = known if known.dtype == np.bool_ else known != -np.inf
    if known.dtype != np.bool_ and not np.all((known == 0) | (known == -np.inf)):
        return c.causal, mask, True  # a real bias: kept (only its dead rows can be decided)
    triangle = np.tril(np.ones((rows, cols), dtype=bool))
    allowed = np.broadcast_to(allowed, np.broadcast_shapes(allowed.shape, (rows, cols)))
    if c.causal:
        allowed = allowed & triangle
    dead = bool((~allowed.any(axis=-1)).any())
    if np.all(allowed == triangle) and rows == cols and not dead:
        return True, None, False  # exactly the causal triangle (or the triangle and a mask within it)
    if not c.causal and allowed.all():
        return False, None, False  # allows everything
    return c.causal, mask, dead


def _attention_ops(g: OnnxGraph, c: C.Attention, q: T, k: T, v: T, allowed: T | None, bias: T | None) -> T:
    """softmax(q·kᵀ·scale, masked) · v in standard operators."""
    perm = list(range(k.rank - 2)) + [k.rank - 1, k.rank - 2]
    kt = g.op("Transpose", [k], k.dtype, perm=perm)
    scores = g.op("Mul", [g.op("MatMul", [q, kt], q.dtype), g.const(c.scale, q.dtype)], q.dtype)
    if allowed is not None:
        scores = g.op("Where", [allowed, scores, g.const(-np.inf, q.dtype)], q.dtype)
    if bias is not None:
        scores = g.op("Add", [scores, bias], q.dtype)
    probs = g.op("Softmax", [scores], q.dtype, axis=-1)
    return g.op("MatMul", [probs, g.cast(v, q.dtype)], q.dtype)


def _fits_multi_head_attention(q: T, k: T, v: T, allowed: T | None, bias: T | None) -> bool:
    """[B, N, L, H] float32 heads with static N and H, masks of at most 4 axes."""
    shapes = [t.shape for t in (q, k, v)]
    if any(s is None or len(s) != 4 for s in shapes) or q.dtype != "f32" or k.dtype != "f32" or v.dtype != "f32":
        return False
    assert q.shape is not None and k.shape is not None and v.shape is not None
    static = all(isinstance(d, int) for d in (q.shape[1], q.shape[3], k.shape[1], k.shape[3], v.shape[3]))
    return static and q.shape[1] == k.shape[1] and q.shape[3] == k.shape[3] == v.shape[3] and all(
        m is None or m.shape is None or len(m.shape) <= 4 for m in (allowed, bias))  # fmt: skip


def _same_length(q: T, k: T) -> bool:
    assert q.shape is not None and k.shape is not None
    return isinstance(q.shape[-2], int) and q.shape[-2] == k.shape[-2]


def _multi_head_attention(
    g: OnnxGraph, c: C.Attention, q: T, k: T, v: T, allowed: T | None, bias: T | None, unidirectional: bool = False
) -> T:
    """onnxruntime's fused com.microsoft.MultiHeadAttention: the query as [B, L, N·H], keys and
    values as [B, N, S, H]; masks become one additive bias broadcast over [B, N, L, S]."""
    assert q.shape is not None
    heads, size = int(q.shape[1]), int(q.shape[3])  # type: ignore[arg-type]
    to_rows = g.op("Transpose", [q], q.dtype, perm=[0, 2, 1, 3])
    query = g.op("Reshape", [to_rows, g.ints([0, 0, heads * size])], q.dtype)
    if allowed is not None:
        blocked = g.op("Where", [allowed, g.const(0.0, q.dtype), g.const(-np.inf, q.dtype)], q.dtype)
        bias = blocked if bias is None else g.op("Add", [bias, blocked], q.dtype)
    if bias is not None:  # MultiHeadAttention broadcasts its bias over batch and heads only
        assert k.shape is not None
        bias = g.op("Expand", [bias, g.dims([1, 1, q.shape[2], k.shape[2]])], q.dtype)
    (fused,) = g.node("MultiHeadAttention", [query, k, v, None, None, bias], domain=CONTRIB_DOMAIN,
                      num_heads=heads, scale=float(c.scale), unidirectional=int(unidirectional))  # fmt: skip
    split = g.op("Reshape", [T(fused, q.dtype), g.ints([0, 0, heads, size])], q.dtype)
    return g.op("Transpose", [split], q.dtype, perm=[0, 2, 1, 3])


def _extent(g: OnnxGraph, d: int | Sym) -> T:
    return g.op("Squeeze", [g.dim(d), g.ints([0])], "i64", ())


def _repeat_heads(g: OnnxGraph, kv: T, q: T) -> T:
    """Key/value head h serves query heads h·rep … h·rep + rep − 1 (repeat_interleave)."""
    assert kv.shape is not None and q.shape is not None
    heads, q_heads = kv.shape[-3], q.shape[-3]
    if not isinstance(heads, int) or not isinstance(q_heads, int):
        raise EmitError(f"grouped-query attention over {kv.name} needs static head counts; specialise it first")
    rep = q_heads // heads
    axis = kv.rank - 2
    unsq = g.op("Unsqueeze", [kv, g.ints([axis])], kv.dtype)
    shape = list(kv.shape[:-2]) + [rep] + list(kv.shape[-2:])
    expanded = g.op("Expand", [unsq, g.dims(shape)], kv.dtype)
    target = list(kv.shape[:-3]) + [q_heads] + list(kv.shape[-2:])
    return g.op("Reshape", [expanded, g.dims(target)], kv.dtype, tuple(target))


# ── Recurrent: ONNX's own RNN / GRU / LSTM ───────────────────────────────────
_ONNX_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "softplus": "Softplus",
                     "softsign": "Softsign", "affine": "Affine", "scaledtanh": "ScaledTanh",
                     "hardsigmoid": "HardSigmoid", "leakyrelu": "LeakyRelu"}  # fmt: skip
_TAKES_ALPHA = {"affine", "scaledtanh", "hardsigmoid", "leakyrelu"}
_TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


@emits(C.Recurrent, widen=True)
def recurrent(g: OnnxGraph, c: C.Recurrent, out: Instr, x: T, w: T, r: T, bias: T | None, h0: T | None,
              c0: T | None, peep: T | None) -> T:  # fmt: skip
    if any(a not in _ONNX_ACTIVATIONS for a in c.activations):
        raise unsupported(c, f"with activations {list(c.activations)}")
    # onnxruntime hands alphas / betas out in order to the activations that take one.
    alphas = [a for n, a in zip(c.activations, c.alphas) if n in _TAKES_ALPHA]
    betas = [b for n, b in zip(c.activations, c.betas) if n in _TAKES_BETA]
    lstm = c.cell == "lstm"
    inputs = [x, w, r, bias, None, h0] + ([c0, peep] if lstm else [])
    attrs: dict[str, Any] = dict(hidden_size=c.hidden, direction=c.direction, clip=c.clip,
                                 activations=[_ONNX_ACTIVATIONS[a] for a in c.activations],
                                 activation_alpha=alphas or None, activation_beta=betas or None)  # fmt: skip
    if lstm:
        attrs["input_forget"] = int(c.input_forget)
    if c.cell == "gru":
        attrs["linear_before_reset"] = int(c.linear_before_reset)
    y, y_h, *rest = g.node(c.cell.upper() if c.cell != "lstm" else "LSTM", inputs, 3 if lstm else 2, **attrs)
    h = T(y_h, x.dtype)
    last = T(rest[0], x.dtype) if lstm else g.op("Expand", [g.const(0, x.dtype), g.op("Shape", [h], "i64")], x.dtype)
    rows = [T(y, x.dtype)] + [g.op("Unsqueeze", [v, g.ints([0])], x.dtype) for v in (h, last)]
    return g.op("Concat", rows, x.dtype, out.shape, axis=0)
