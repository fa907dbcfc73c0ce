"""Selection ONNX ops whose result sizes depend on the data: Unique (and NonMaxSuppression).

Each such size is a fresh data symbol (``u0`` …) that the numpy runtime binds from the result; the
Calls are the ones the torch front-end lowers ``torch.unique`` to.
"""

from __future__ import annotations

import math

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, norm_axis, numel, onnx_op
from rlx.ir.calls import NonMaxSuppression, Unique
from rlx.ir.program import Operand


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
    n = b.data_dim(static_dim(lanes, "the input size", node))
    values_shape = (n,) if axis is None else (*shape[:axis], n, *shape[axis + 1 :])
    values = b.emit(Unique(x, "values", False, axis, sort), values_shape, b.dtype(x))
    indices = b.emit(Unique(x, "indices", False, axis, sort), (n,), "i64")
    inverse = b.emit(Unique(x, "inverse", False, axis, sort), shape if axis is None else (lanes,), "i64")
    counts = b.emit(Unique(x, "counts", False, axis, sort), (n,), "i64")
    return values, indices, b.reshape(inverse, (lanes,)), counts


@onnx_op("NonMaxSuppression")
def non_max_suppression(node: OnnxNode, b: OnnxBuilder) -> Env:
    boxes, scores = b.ref(node, 0), b.ref(node, 1)
    bshape, sshape = b.shape(boxes), b.shape(scores)
    if len(bshape) != 3 or len(sshape) != 3:
        raise LoweringError(f"node {node.name} (NonMaxSuppression): boxes and scores must be rank 3")
    limits: list[Operand | None] = []
    for k, default in ((2, b.lit(0, "i64")), (3, b.lit(0.0, "f32")), (4, None)):
        v = b.get(node, k)
        if v is None or (isinstance(v, np.ndarray) and v.size == 0):  # absent or empty: the default
            limits.append(default)
        else:
            limits.append(b.operand(v, node.inputs[k]))
    most, iou, score = limits
    assert most is not None and iou is not None
    hint = math.prod(static_dim(d, "the box count", node) for d in (sshape[0], sshape[1], bshape[1]))
    n = b.data_dim(hint)
    call = NonMaxSuppression(boxes, scores, most, iou, score, bool(node.attr("center_point_box", 0)))
    return b.emit(call, (n, 3), "i64")
