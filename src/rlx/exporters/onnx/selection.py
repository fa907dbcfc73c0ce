"""Selection: Nonzero through NonZero, MaskedSelect through Compress, NonMaxSuppression through its
namesake, SearchSorted by counting comparisons (as the shared kernel does), the determinant through Det,
Histc through a ScatterElements sum, GroupedMatMul as one MatMul per group. The data-dependent Calls
ONNX has no operator for (and the factorisations) are declared here with the reason."""

from __future__ import annotations

from rlx.exporters.onnx.registry import OnnxGraph, T, emits, no_onnx_form, unsupported
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr, Ref


@emits(C.Nonzero)
def nonzero(g: OnnxGraph, c: C.Nonzero, out: Instr, x: T) -> T:
    if x.rank == 0:  # a scalar's coordinates have no columns: [1, 0] or [0, 0]
        coords = g.op("NonZero", [g.cast(g.op("Reshape", [x, g.ints([1])], x.dtype), "bool")], "i64")
        column = g.op("Transpose", [coords], "i64", perm=[1, 0])
        return g.op("Slice", [column, g.ints([0]), g.ints([0]), g.ints([1])], "i64", out.shape)
    coords = g.op("NonZero", [g.cast(x, "bool")], "i64")  # [rank, n], row-major order
    return g.op("Transpose", [coords], "i64", out.shape, perm=[1, 0])


@emits(C.MaskedSelect)
def masked_select(g: OnnxGraph, c: C.MaskedSelect, out: Instr, x: T, mask: T) -> T:
    both = g.where(mask, x, x)  # x broadcast against the mask
    full_mask = g.op("Expand", [mask, g.op("Shape", [both], "i64")], "bool")
    flat = g.op("Reshape", [both, g.ints([-1])], x.dtype)
    return g.op("Compress", [flat, g.op("Reshape", [full_mask, g.ints([-1])], "bool")], x.dtype, out.shape, axis=0)


@emits(C.NonMaxSuppression)
def non_max_suppression(
    g: OnnxGraph, c: C.NonMaxSuppression, out: Instr, boxes: T, scores: T, most: T, iou: T, score: T | None
) -> T:
    # onnxruntime's kernel takes float32 boxes and scores, and the limits as one-element tensors
    def one(v: T, dtype: str) -> T:
        return g.op("Reshape", [g.cast(v, dtype), g.ints([1])], dtype)

    limits = [one(most, "i64"), one(iou, "f32"), *([one(score, "f32")] if score is not None else [])]
    ins = [g.cast(boxes, "f32"), g.cast(scores, "f32"), *limits]
    return g.op("NonMaxSuppression", ins, "i64", out.shape, center_point_box=int(c.center_point_box))


@emits(C.SearchSorted)
def search_sorted(g: OnnxGraph, c: C.SearchSorted, out: Instr, sorted_: T, values: T) -> T:
    queries = g.op("Unsqueeze", [values, g.ints([-1])], values.dtype)
    table = sorted_ if sorted_.rank == 1 else g.op("Unsqueeze", [sorted_, g.ints([-2])], sorted_.dtype)
    below = g.op("LessOrEqual" if c.right else "Less", [table, queries], "bool")
    return g.op("ReduceSum", [g.cast(below, "i64"), g.ints([-1])], "i64", out.shape, keepdims=0)


@emits(C.Det, widen=True)
def det(g: OnnxGraph, c: C.Det, out: Instr, x: T) -> T:
    if c.part != "det":  # log|det| through Det would overflow where slogdet does not
        raise unsupported(c, f"part {c.part!r} (slogdet); only the determinant itself has an ONNX operator")
    return g.op("Det", [x], x.dtype, out.shape)


no_onnx_form("ai.onnx has no operator for this factorisation", C.Svd, C.LuFactor, C.LuPermutation,
             C.TriangularSolve, C.MatrixExp, C.Cholesky, C.Qr, C.Eigh, C.Geqrf, C.Eig, C.LdlFactor,
             C.LdlSolve)  # fmt: skip


@emits(C.Histc, widen=True)
def histc(g: OnnxGraph, c: C.Histc, out: Instr, x: T) -> T:
    """Each value's bin by PyTorch's CPU formula in the input's precision (as the shared kernel), then
    one ScatterElements adding ones into ``bins + 1`` counters: the extra one takes the values outside
    the range and NaN, and is cut off."""
    if not dtypes.is_float(x.dtype):
        raise unsupported(c, f"{x.dtype} input (PyTorch's histc takes floats)")
    flat = g.op("Reshape", [x, g.ints([-1])], x.dtype)
    lo, hi = g.const(c.lo, x.dtype), g.const(c.hi, x.dtype)
    if c.lo == c.hi:  # the data's own range, widened by 1 each way when it is a single point
        lo, hi = g.op("ReduceMin", [flat], x.dtype, keepdims=0), g.op("ReduceMax", [flat], x.dtype, keepdims=0)
        point, one = g.op("Equal", [lo, hi], "bool"), g.const(1, x.dtype)
        lo = g.op("Where", [point, g.op("Sub", [lo, one], x.dtype), lo], x.dtype)
        hi = g.op("Where", [point, g.op("Add", [hi, one], x.dtype), hi], x.dtype)
    inside = g.op("And", [g.op("GreaterOrEqual", [flat, lo], "bool"), g.op("LessOrEqual", [flat, hi], "bool")], "bool")
    scaled = g.op("Mul", [g.op("Sub", [flat, lo], x.dtype), g.const(c.bins, x.dtype)], x.dtype)
    position = g.cast(g.op("Div", [scaled, g.op("Sub", [hi, lo], x.dtype)], x.dtype), "i64")
    position = g.op("Min", [position, g.ints(c.bins - 1)], "i64")  # hi itself: the last bin
    position = g.op("Where", [inside, position, g.ints(c.bins)], "i64")
    ones = g.op("Expand", [g.const(1, x.dtype), g.op("Shape", [flat], "i64")], x.dtype)
    counters = g.op("Expand", [g.const(0, x.dtype), g.ints([c.bins + 1])], x.dtype)
    counts = g.op("ScatterElements", [counters, position, ones], x.dtype, axis=0, reduction="add")
    return g.op("Slice", [counts, g.ints([0]), g.ints([c.bins]), g.ints([0])], x.dtype, out.shape)


@emits(C.GroupedMatMul, widen=True)
def grouped_mat_mul(g: OnnxGraph, c: C.GroupedMatMul, out: Instr, x: T, w: T, offsets: T) -> T:
    """One product per group on its rows, sliced at the offsets the data holds (each row multiplied
    once, as PyTorch does; no [rows, K, N] gather of the weights), then the groups' rows
    concatenated and zeros for the rows past the last offset."""
    assert w.shape is not None
    groups, n = w.shape[0], w.shape[-1]
    if not isinstance(groups, int) or not dtypes.is_float(x.dtype):
        raise unsupported(c, "a symbolic number of groups or a non-float product")
    stored = _stored_experts(g, c.w, x.dtype)
    if stored is None:  # an expert per slice of the computed w
        split = g.node("Split", [w], groups, axis=0, num_outputs=groups)
        experts = [(g.op("Squeeze", [m, g.ints([0])], w.dtype), False) for m in split]
    else:  # each expert's matrix read where the weight lies, transposed by Gemm if need be
        weight, layout = stored
        experts = [(g.weight_slice(weight, e), layout) for e in range(groups)]
    ends = g.cast(offsets, "i64")
    rows = g.op("Slice", [g.op("Shape", [x], "i64"), g.ints([0]), g.ints([1])], "i64", (1,))
    start, products = g.ints([0]), []
    for group, (matrix, transposed) in enumerate(experts):
        end = g.op("Slice", [ends, g.ints([group]), g.ints([group + 1])], "i64", (1,))
        part = g.op("Slice", [x, start, end, g.ints([0])], x.dtype)
        if transposed:
            products.append(g.op("Gemm", [part, matrix], x.dtype, transB=1))
        else:
            products.append(g.op("MatMul", [part, matrix], x.dtype))
        start = g.op("Max", [start, end], "i64", (1,))  # (offsets never decrease; a slice never runs back)
    past = g.op("Sub", [rows, g.op("Min", [start, rows], "i64")], "i64")
    products.append(g.op("Expand", [g.const(0, x.dtype), g.op("Concat", [past, g.dim(n)], "i64", axis=0)], x.dtype))
    return g.op("Concat", products, x.dtype, out.shape, axis=0)


def _stored_experts(g: OnnxGraph, w: Ref, dtype: str) -> tuple[str, bool] | None:
    """The program weight that holds the experts' matrices, and whether the product reads them
    transposed (``Permute(W, (0, 2, 1))``, transformers' ``[experts, out, in]``): each expert then
    becomes an initializer of its own, read in place; without that a runtime folds the
    transpose and the split into copies of every expert. None when ``w`` is computed otherwise or
    is of another dtype than the product (a half-precision weight, widened)."""
    source = g.producer(w.name)
    if isinstance(source, Instr) and isinstance(source.call, C.Permute) and source.call.perm == (0, 2, 1):
        name, transposed = source.call.x.name, True
    else:
        name, transposed = w.name, False
    stored = next((v for v in g.program.weights if v.name == name), None)
    if stored is None or stored.dtype != dtype or len(stored.shape) != 3:
        return None
    return name, transposed


no_onnx_form("ai.onnx has no operator for these data-dependent sizes and orders", C.Unique, C.NonzeroStatic,
             C.Bincount)  # fmt: skip
no_onnx_form("ai.onnx has no special functions beyond erf", C.Special)
no_onnx_form("BitCast needs opset 26; the emitter writes opset 21", C.Bitcast)
