"""Selection: Nonzero through NonZero, MaskedSelect through Compress, NonMaxSuppression through its
namesake, SearchSorted by counting comparisons (as the shared kernel does), the determinant through Det. The data-dependent Calls
ONNX has no operator for (and the factorisations) are declared here with the reason."""

from __future__ import annotations

from rlx.exporters.onnx.registry import OnnxGraph, T, emits, no_onnx_form, unsupported
from rlx.ir import calls as C
from rlx.ir.program import Instr


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
no_onnx_form("ai.onnx has no operator for these data-dependent sizes and orders", C.Unique, C.NonzeroStatic,
             C.Bincount, C.Histc)  # fmt: skip
no_onnx_form("its grouped product has no ai.onnx operator", C.GroupedMatMul)
no_onnx_form("ai.onnx has no special functions beyond erf", C.Special)
no_onnx_form("BitCast needs opset 26; the emitter writes opset 21", C.Bitcast)
