"""Selection ONNX ops whose result sizes depend on the data: Unique (and NonMaxSuppression).

Each such size is a fresh data symbol (``u0`` …) that the numpy runtime binds from the result; the
Calls are the ones the torch front-end lowers ``torch.unique`` to.
"""

from __future__ import annotations

from rlx.ir.calls import Unique
from rlx.onnx_import.registry import Env, OnnxBuilder, OnnxNode, norm_axis, numel, onnx_op, static_dim


@onnx_op("Unique")
def unique(node: OnnxNode, b: OnnxBuilder) -> tuple[Env, ...]:
    # Y, indices (first occurrences), inverse_indices, counts; sorted (default) or in first-seen order
    x = b.ref(node, 0)
    shape = tuple(b.shape(x))
    axis = node.attr("axis")
    sort = bool(node.attr("sorted", 1))
    if axis is not None:
        axis = norm_axis(int(axis), len(shape))
    lanes = shape[axis] if axis is not None else numel(shape)
    n = b.data_dim(static_dim(node, lanes, "the input size"))
    values_shape = (n,) if axis is None else (*shape[:axis], n, *shape[axis + 1 :])
    values = b.emit(Unique(x, "values", False, axis, sort), values_shape, b.dtype(x))
    indices = b.emit(Unique(x, "indices", False, axis, sort), (n,), "i64")
    inverse = b.emit(Unique(x, "inverse", False, axis, sort), shape if axis is None else (lanes,), "i64")
    counts = b.emit(Unique(x, "counts", False, axis, sort), (n,), "i64")
    return values, indices, b.reshape(inverse, (lanes,)), counts
