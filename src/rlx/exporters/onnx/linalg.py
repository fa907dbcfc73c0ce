"""Products: MatMul and Linear (half precision multiplies in float32, as PyTorch's CPU kernels do)."""

from __future__ import annotations

from rlx.exporters.onnx.registry import CONTRIB_DOMAIN, OnnxGraph, T, emits
from rlx.ir import calls as C
from rlx.ir.program import Instr

# onnxruntime's MatMul has float, double, int32/int64 and uint32/uint64 kernels only.
_VIA_INT32 = ("i8", "i16", "u8")


@emits(C.MatMul, widen=True)
def matmul(g: OnnxGraph, c: C.MatMul, out: Instr, x: T, y: T) -> T:
    if x.shape is not None and x.shape[-1] == 0:  # a sum of nothing (OpenVINO failed to compile it)
        return g.op("Expand", [g.const(0, out.dtype), g.dims(out.shape)], out.dtype, out.shape)
    if x.dtype in _VIA_INT32:  # wrap-around products, narrowed: the same bits
        return g.cast(g.op("MatMul", [g.cast(x, "i32"), g.cast(y, "i32")], "i32"), x.dtype)
    if x.dtype == "bool":
        raise_bool = g.op("MatMul", [g.cast(x, "i32"), g.cast(y, "i32")], "i32")
        return g.cast(raise_bool, "bool")
    return g.op("MatMul", [x, y], x.dtype, out.shape)


@emits(C.Linear, widen=True)
def linear(g: OnnxGraph, c: C.Linear, out: Instr, x: T, w: T, b: T | None) -> T:
    bias = None if b is None else g.cast(b, x.dtype)
    if "transposed_weights" in g.contrib and x.dtype == "f32":
        # The weight is read where it lies (memory-mapped), by a product with transB: Gemm for
        # rows (bias and all, one node: onnxruntime fuses no Add into a FusedMatMul), else
        # onnxruntime's MatMul with transB.
        if x.shape is not None and x.rank == 2:
            return g.op("Gemm", [x, w] + ([bias] if bias is not None else []), x.dtype, out.shape, transB=1)
        y = g.op("FusedMatMul", [x, w], x.dtype, domain=CONTRIB_DOMAIN, transB=1)
    else:
        # MatMul against the transposed weight: onnxruntime folds the Transpose of an initializer
        # once at load (a copy), and fuses MatMul + Add (+ activation) itself.
        y = g.op("MatMul", [x, g.op("Transpose", [w], w.dtype, perm=[1, 0])], x.dtype)
    return y if bias is None else g.op("Add", [y, bias], x.dtype)
