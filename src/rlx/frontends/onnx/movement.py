"""Shape and data-movement ONNX ops: Shape, Reshape, Transpose, Concat, Split, Slice, Gather …

Shape arithmetic is folded while converting: ``Shape`` of an input with dynamic axes is an object
array of ints and ``Sym`` extents, and the ops a shape computation goes through (Gather, Concat,
Slice, Unsqueeze, Squeeze, Reshape, arithmetic in ``elementwise``) keep it so. ONNX specifics:
``Reshape`` with 0 (copy the input extent unless ``allowzero``) and -1, ``Slice`` with INT_MAX ends
and negative steps, ``Gather`` with negative indices.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.elementwise import emit_binary
from rlx.frontends.onnx.reader import ELEM_TYPES
from rlx.frontends.onnx.registry import (
    Env,
    OnnxBuilder,
    OnnxNode,
    Out,
    broadcast,
    dim_op,
    norm_axis,
    numel,
    onnx_op,
)
from rlx.ir import dtypes, symbolic
from rlx.ir.calls import (
    Arange,
    Concat,
    Expand,
    Flip,
    Full,
    Gather,
    Index,
    IndexPut,
    IndexSelect,
    Pad,
    Permute,
    Scatter,
    Slice,
    Where,
)
from rlx.ir.program import Lit, Operand, Ref
from rlx.ir.symbolic import Dim, Sym, static_shape


def dims_array(shape: tuple[Dim, ...]) -> np.ndarray:
    """A shape as a known 1-D int64 array (object dtype when an extent is symbolic)."""
    if all(isinstance(d, int) for d in shape):
        return np.asarray(shape, dtype=np.int64).reshape(len(shape))
    out = np.empty(len(shape), dtype=object)
    out[:] = list(shape)
    return out


def permute(b: OnnxBuilder, x: Operand, perm: tuple[int, ...]) -> Ref:
    x = b.as_ref(x)
    if perm == tuple(range(len(perm))):
        return x
    shape = b.shape(x)
    return b.emit(Permute(x, perm), tuple(shape[p] for p in perm), b.dtype(x))


def slice_axis(b: OnnxBuilder, x: Ref, axis: int, start: Dim, stop: Dim, step: int = 1) -> Ref:
    shape = list(b.shape(x))
    if start == 0 and stop == shape[axis] and step == 1:
        return x
    length = dim_op("sub", stop, start)
    shape[axis] = length if step == 1 else dim_op("floordiv", dim_op("add", length, step - 1), step)
    return b.emit(Slice(x, axis, start, stop, step), tuple(shape), b.dtype(x))


def concat(b: OnnxBuilder, xs: list[Ref], axis: int) -> Ref:
    if len(xs) == 1:
        return xs[0]
    shape = list(b.shape(xs[0]))
    total: Dim = 0
    for x in xs:
        total = dim_op("add", total, b.shape(x)[axis])
    shape[axis] = total
    return b.emit(Concat(tuple(xs), axis), tuple(shape), b.dtype(xs[0]))


def flip(b: OnnxBuilder, x: Ref, axes: tuple[int, ...]) -> Ref:
    return b.emit(Flip(x, axes), b.shape(x), b.dtype(x))


# ── shape queries and constants ──────────────────────────────────────────────
@onnx_op("Shape")
def shape_(node: OnnxNode, b: OnnxBuilder) -> Env:
    dims = dims_array(tuple(b.in_shape(node, 0)))
    rank = len(dims)
    start, end = node.attr("start", 0), node.attr("end", rank)
    start, end = (max(0, min(rank, s + rank if s < 0 else s)) for s in (start, end))
    return dims[start:end]


@onnx_op("Size")
def size(node: OnnxNode, b: OnnxBuilder) -> Env:
    n = numel(b.in_shape(node, 0))
    return np.asarray(n, dtype=np.int64) if isinstance(n, int) else np.asarray(n, dtype=object)


@onnx_op("Constant")
def constant(node: OnnxNode, b: OnnxBuilder) -> Env:
    for key, kind in (("value_float", np.float32), ("value_int", np.int64)):
        if key in node.attrs:
            return np.asarray(node.attrs[key], dtype=kind)
    for key, kind in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in node.attrs:
            return np.asarray(node.attrs[key], dtype=kind).reshape(-1)
    if "value" in node.attrs:
        arr = np.asarray(node.attrs["value"])
        dtypes.from_numpy(arr.dtype)  # refuses strings and types rlx has no kernels for
        return arr
    raise LoweringError(
        f"node {node.name} (Constant): only tensor/float/int values are supported, found {sorted(node.attrs)}"
    )


@onnx_op("ConstantOfShape")
def constant_of_shape(node: OnnxNode, b: OnnxBuilder) -> Env:
    shape = tuple(b.required_ints(node, 0))
    value = np.asarray(node.attr("value", np.zeros(1, np.float32))).reshape(-1)
    tok = dtypes.from_numpy(value.dtype)
    static = static_shape(shape)
    if static is not None and math.prod(static) <= 64:
        return np.full(static, value[0], dtype=value.dtype)
    return b.emit(Full(value[0].item(), shape, tok), shape, tok)


@onnx_op("Range")
def range_(node: OnnxNode, b: OnnxBuilder) -> Env:
    start, limit, delta = (np.asarray(b.const(node, k)).item() for k in range(3))
    tok = b.in_dtype(node, 0)
    if any(isinstance(v, Sym) for v in (start, limit, delta)):
        if not isinstance(delta, int) or delta <= 0 or not dtypes.is_int(tok):
            raise LoweringError(
                f"node {node.name} (Range): a range over symbolic bounds needs a positive static integer step, "
                f"found {delta}"
            )
        n = symbolic.maximum(symbolic.ceildiv(symbolic.sub(limit, start), delta), 0)
        return b.emit(Arange(start, limit, delta, tok), (n,), tok)
    n = max(int(math.ceil((limit - start) / delta)), 0)
    if n <= 64 and dtypes.is_int(tok):
        return (start + delta * np.arange(n)).astype(dtypes.to_numpy(tok))
    return b.emit(Arange(start, limit, delta, tok), (n,), tok)


# ── reshaping ────────────────────────────────────────────────────────────────
def _infer_reshape(in_shape: tuple[Dim, ...], target: list[Dim], allowzero: bool, where: str) -> tuple[Dim, ...]:
    out = [in_shape[k] if d == 0 and not allowzero and k < len(in_shape) else d for k, d in enumerate(target)]
    if sum(1 for d in out if d == -1) > 1:
        raise LoweringError(f"{where}: more than one -1 in the target shape {target}")
    if -1 in out:
        k = out.index(-1)
        known = numel([d for j, d in enumerate(out) if j != k])
        total = numel(in_shape)
        if isinstance(known, int) and isinstance(total, int):
            out[k] = total // known if known else 0
        else:
            out[k] = _sym_quotient(in_shape, [d for j, d in enumerate(out) if j != k])
    return tuple(out)


def _sym_quotient(num: tuple[Dim, ...], den: list[Dim]) -> Dim:
    """numel(num) / numel(den), cancelling equal factors so ``[b, s, 12, 64] / [b, s, 768]`` is exact."""
    rest = list(num)
    left: list[Dim] = []
    for d in den:
        if d in rest:
            rest.remove(d)
        else:
            left.append(d)
    n, m = numel(rest), numel(left)
    return dim_op("floordiv", n, m)


@onnx_op("Reshape")
def reshape(node: OnnxNode, b: OnnxBuilder) -> Env:
    target = b.required_ints(node, 1, attr="shape")
    xv = b.required(node, 0)
    out = _infer_reshape(tuple(b.shape(xv)), target, bool(node.attr("allowzero", 0)), f"node {node.name} (Reshape)")
    static = static_shape(out)
    if isinstance(xv, np.ndarray) and static is not None:
        return xv.reshape(static)
    return b.reshape(b.input(node, 0), out)


@onnx_op("Flatten")
def flatten(node: OnnxNode, b: OnnxBuilder) -> Env:
    shape = b.in_shape(node, 0)
    axis = node.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    return b.reshape(b.input(node, 0), (numel(shape[:axis]), numel(shape[axis:])))


@onnx_op("Squeeze")
def squeeze(node: OnnxNode, b: OnnxBuilder) -> Env:
    xv = b.required(node, 0)
    shape = tuple(b.shape(xv))
    axes = b.ints(node, 1, attr="axes")
    if axes is None:
        axes = [k for k, d in enumerate(shape) if d == 1]
    drop = {norm_axis(static_dim(a, "axes", node), len(shape)) for a in axes}
    out = tuple(d for k, d in enumerate(shape) if k not in drop)
    if isinstance(xv, np.ndarray):
        known = cast(tuple[int, ...], out)  # the extents of a known array are ints
        return (
            xv.reshape(known)
            if xv.dtype != object
            else np.asarray(xv.reshape(-1).tolist(), dtype=object).reshape(known)
        )
    return b.reshape(xv, out)


@onnx_op("Unsqueeze")
def unsqueeze(node: OnnxNode, b: OnnxBuilder) -> Env:
    xv = b.required(node, 0)
    shape = list(b.shape(xv))
    axes = b.required_ints(node, 1, attr="axes")
    rank = len(shape) + len(axes)
    for a in sorted(norm_axis(static_dim(a, "axes", node), rank) for a in axes):
        shape.insert(a, 1)
    if isinstance(xv, np.ndarray):
        return xv.reshape(cast(list[int], shape))  # a known array's extents and the inserted 1s are ints
    return b.reshape(xv, tuple(shape))


@onnx_op("Transpose")
def transpose(node: OnnxNode, b: OnnxBuilder) -> Env:
    rank = len(b.in_shape(node, 0))
    perm = tuple(int(p) for p in node.attr("perm", list(range(rank))[::-1]))
    xv = b.get(node, 0)
    if isinstance(xv, np.ndarray) and xv.size <= 4096:
        return xv.transpose(perm)
    return permute(b, b.input(node, 0), perm)


@onnx_op("Expand")
def expand(node: OnnxNode, b: OnnxBuilder) -> Out:
    target = tuple(b.required_ints(node, 1))
    x = b.input(node, 0)
    shape = broadcast(b.shape(x), target)
    if tuple(b.shape(x)) == shape:
        return x
    return b.emit(Expand(x, shape), shape, b.dtype(x))


# ── joining and splitting ────────────────────────────────────────────────────
@onnx_op("Concat")
def concat_(node: OnnxNode, b: OnnxBuilder) -> Env:
    vals = [b.required(node, k) for k in range(len(node.inputs)) if node.has_input(k)]
    rank = max(len(b.shape(v)) for v in vals)
    axis = norm_axis(node.attr("axis", 0), rank)
    known = [v for v in vals if isinstance(v, np.ndarray)]
    if len(known) == len(vals) and sum(v.size for v in known) <= 4096:
        kinds = {v.dtype == object for v in known}
        if kinds == {False}:
            return np.concatenate(known, axis=axis)
        return np.concatenate([v.astype(object) for v in known], axis=axis)
    refs = [b.as_ref(b.operand(v, node.inputs[k])) for k, v in enumerate(vals) if 0 not in b.shape(v) or len(vals) == 1]
    return concat(b, refs, axis) if refs else b.as_ref(b.operand(vals[0]))


@onnx_op("Split")
def split(node: OnnxNode, b: OnnxBuilder) -> list[Env]:
    x = b.as_ref(b.input(node, 0))
    shape = b.shape(x)
    axis = norm_axis(node.attr("axis", 0), len(shape))
    sizes = b.ints(node, 1, attr="split") if node.opset < 13 else b.ints(node, 1)
    n_out = len(node.outputs)
    if sizes is None:
        n = node.attr("num_outputs", n_out)
        size = shape[axis]
        if not isinstance(size, int):
            if n == 1:
                return [x]
            raise LoweringError(f"node {node.name} (Split): splitting a dynamic axis needs explicit sizes")
        step = -(-size // n)
        sizes = [min(step, size - k * step) for k in range(n)]
    outs: list[Env] = []
    start: Dim = 0
    for s in sizes:
        stop = dim_op("add", start, s)
        outs.append(slice_axis(b, x, axis, start, stop))
        start = stop
    return outs


def _clamp_bound(v: int, size: int, step: int, is_start: bool) -> int:
    if v < 0:
        v += size
    if step > 0:
        return max(0, min(size, v))
    return max(-1, min(size - 1, v))


@onnx_op("Slice")
def slice_(node: OnnxNode, b: OnnxBuilder) -> Env:
    xv = b.required(node, 0)
    shape = tuple(b.shape(xv))
    starts: list[Dim]
    ends: list[Dim]
    axes: list[Dim]
    steps: list[Dim]
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes", list(range(len(starts)))), [1] * len(starts)
    else:
        starts, ends = b.required_ints(node, 1), b.required_ints(node, 2)
        axes = b.ints(node, 3) or list(range(len(starts)))
        steps = b.ints(node, 4) or [1] * len(starts)
    if isinstance(xv, np.ndarray) and all(isinstance(v, int) for v in (*starts, *ends, *steps)):
        index = [slice(None)] * len(shape)
        for s, e, a, st in zip(starts, ends, axes, steps):
            index[norm_axis(static_dim(a, "axes", node), len(shape))] = slice(s, e, st)
        return xv[tuple(index)]
    x = b.as_ref(b.operand(xv, node.inputs[0]))
    for s, e, a, st in zip(starts, ends, axes, steps):
        axis = norm_axis(static_dim(a, "axes", node), len(shape))
        size = b.shape(x)[axis]
        x = _slice_one(b, x, axis, size, s, e, static_dim(st, "steps", node), node)
    return x


def _slice_one(b: OnnxBuilder, x: Ref, axis: int, size: Dim, s: Dim, e: Dim, step: int, node: OnnxNode) -> Ref:
    if step == 0:
        raise LoweringError(f"node {node.name} (Slice): step 0")
    if isinstance(size, Sym) or isinstance(s, Sym) or isinstance(e, Sym):
        if step != 1:
            raise LoweringError(f"node {node.name} (Slice): a dynamic slice needs step 1")
        start = 0 if s == 0 else s if isinstance(s, Sym) else (dim_op("add", size, s) if s < 0 else s)
        if isinstance(e, int) and e >= 2**31 - 1:
            stop = size
        elif isinstance(e, int) and e < 0:
            stop = dim_op("add", size, e)
        else:
            stop = e
        if isinstance(start, int) and isinstance(size, Sym) and start > 0:
            stop = stop  # the runtime clamps nothing: the model is trusted to slice inside the axis
        return slice_axis(b, x, axis, start, stop)
    start, stop = _clamp_bound(int(s), size, step, True), _clamp_bound(int(e), size, step, False)
    if step > 0:
        return slice_axis(b, x, axis, start, max(start, stop), step)
    # A negative step: flip, then slice forward.
    n = len(range(start, stop, step))
    flipped = flip(b, x, (axis,))
    first = size - 1 - start
    return slice_axis(b, flipped, axis, first, first + (n - 1) * -step + 1 if n else first, -step)


# ── gathering ────────────────────────────────────────────────────────────────
def nonneg_index(b: OnnxBuilder, index: Operand, size: Dim) -> Operand:
    """Negative indices count from the end (ONNX); the Calls want them in range."""
    if isinstance(index, Lit) and isinstance(index.value, int):
        return Lit(index.value + size if index.value < 0 and isinstance(size, int) else index.value, index.dtype)
    index = b.cast(index, "i64")
    neg = emit_binary(b, "lt", index, Lit(0, "i64"))
    wrapped = emit_binary(b, "add", index, Lit(size, "i64"))
    return b.emit(Where(neg, wrapped, index), b.shape(index), "i64")


@onnx_op("Gather")
def gather(node: OnnxNode, b: OnnxBuilder) -> Env:
    xv, iv = b.required(node, 0), b.required(node, 1)
    shape = tuple(b.shape(xv))
    axis = norm_axis(node.attr("axis", 0), len(shape))
    if isinstance(xv, np.ndarray) and isinstance(iv, np.ndarray) and iv.size <= 4096:
        return np.take(xv, iv.astype(np.int64), axis=axis)
    x = b.as_ref(b.operand(xv, node.inputs[0]))
    if isinstance(iv, np.ndarray):
        iv = np.where(iv < 0, iv + shape[axis], iv).astype(np.int64) if isinstance(shape[axis], int) else iv
        index = b.as_ref(b.operand(iv, node.inputs[1]))
    else:
        index = b.as_ref(nonneg_index(b, iv, shape[axis]))
    out = shape[:axis] + tuple(b.shape(index)) + shape[axis + 1 :]
    return b.emit(IndexSelect(x, axis, index), out, b.dtype(x))


@onnx_op("GatherElements")
def gather_elements(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    shape = b.shape(x)
    axis = norm_axis(node.attr("axis", 0), len(shape))
    index = b.as_ref(nonneg_index(b, b.input(node, 1), shape[axis]))
    return b.emit(Gather(x, axis, index), b.shape(index), b.dtype(x))


@onnx_op("GatherND")
def gather_nd(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, index = b.ref(node, 0), b.ref(node, 1)
    batch = node.attr("batch_dims", 0)
    shape, ishape = b.shape(x), b.shape(index)
    k = ishape[-1]
    if not isinstance(k, int):
        raise LoweringError(f"node {node.name} (GatherND): the index depth must be static")
    parts: list[Ref | None] = []
    lead = ishape[:-1]
    for j in range(batch):  # batch axes index themselves: an arange shaped to broadcast
        ar = b.emit(Arange(0, shape[j], 1, "i64"), (shape[j],), "i64")
        view: list[Dim] = [1] * len(lead)
        view[j] = shape[j]
        parts.append(b.reshape(ar, tuple(view)))
    for j in range(k):
        col = slice_axis(b, index, len(ishape) - 1, j, j + 1)
        col = b.reshape(col, lead)
        parts.append(b.as_ref(nonneg_index(b, col, shape[batch + j])))
    out = tuple(lead) + tuple(shape[batch + k :])
    return b.emit(Index(x, tuple(parts)), out, b.dtype(x))


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    shape = b.shape(x)
    axis = norm_axis(node.attr("axis", 0), len(shape))
    index = b.as_ref(nonneg_index(b, b.input(node, 1), shape[axis]))
    reduce = {"none": "none", "add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[node.attr("reduction", "none")]
    return b.emit(Scatter(x, axis, index, b.ref(node, 2), reduce), shape, b.dtype(x))


@onnx_op("ScatterND")
def scatter_nd(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, index, updates = b.ref(node, 0), b.ref(node, 1), b.ref(node, 2)
    reduction = node.attr("reduction", "none")
    shape, ishape = b.shape(x), b.shape(index)
    k = static_dim(ishape[-1], "the index depth", node)
    parts = []
    for j in range(k):
        col = b.reshape(slice_axis(b, index, len(ishape) - 1, j, j + 1), ishape[:-1])
        parts.append(b.as_ref(nonneg_index(b, col, shape[j])))
    if reduction in ("none", "add"):
        return b.emit(IndexPut(x, tuple(parts), updates, reduction == "add"), shape, b.dtype(x))
    # mul / max / min: a Scatter along the first k axes flattened into one
    return _scatter_flat(node, b, x, parts, updates, {"mul": "prod", "max": "amax", "min": "amin"}[reduction])


def _scatter_flat(node: OnnxNode, b: OnnxBuilder, x: Ref, parts: list[Ref], updates: Ref, reduce: str) -> Ref:
    shape = b.shape(x)
    k = len(parts)
    lead = [static_dim(d, "the scattered extents", node) for d in shape[:k]]
    rest = tuple(shape[k:])
    strides = [math.prod(lead[j + 1 :]) for j in range(k)]
    linear: Ref = parts[0]
    if strides[0] != 1:
        linear = emit_binary(b, "mul", parts[0], b.lit(strides[0], b.dtype(parts[0])))
    for j in range(1, k):
        term = parts[j] if strides[j] == 1 else emit_binary(b, "mul", parts[j], b.lit(strides[j], b.dtype(parts[j])))
        linear = emit_binary(b, "add", linear, term)
    n = numel(b.shape(linear))
    flat_index = b.reshape(linear, (n,) + (1,) * len(rest))
    flat_index = b.emit(Expand(flat_index, (n, *rest)), (n, *rest), b.dtype(flat_index))
    flat_x = b.reshape(x, (math.prod(lead), *rest))
    flat_u = b.reshape(updates, (n, *rest))
    out = b.emit(Scatter(flat_x, 0, flat_index, flat_u, reduce), b.shape(flat_x), b.dtype(x))
    return b.reshape(out, shape)


@onnx_op("ReverseSequence")
def reverse_sequence(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    lens = np.asarray(b.required_const(node, 1)).astype(np.int64).reshape(-1)
    shape = b.shape(x)
    batch_axis, time_axis = node.attr("batch_axis", 1), node.attr("time_axis", 0)
    steps = static_dim(shape[time_axis], "the time extent", node)
    t = np.arange(steps)[None, :]
    src = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)  # [batch, time]
    if batch_axis > time_axis:
        src = src.T
    view = [1] * len(shape)
    view[batch_axis], view[time_axis] = len(lens), steps
    index = b.as_ref(b.operand(np.ascontiguousarray(src.reshape(view)), f"{node.name}_index"))
    index = b.emit(Expand(index, tuple(shape)), tuple(shape), "i64")
    return b.emit(Gather(x, time_axis, index), shape, b.dtype(x))


# ── tiling, padding, rearranging ─────────────────────────────────────────────
@onnx_op("Tile")
def tile(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    reps = [static_dim(r, "repeats", node) for r in b.required_ints(node, 1)]
    shape = b.shape(x)
    if all(r == 1 for r in reps):
        return x
    view, big, out = [], [], []
    for d, r in zip(shape, reps):
        view += [1, d]
        big += [r, d]
        out.append(dim_op("mul", d, r))
    y = b.reshape(x, tuple(view))
    y = b.emit(Expand(y, tuple(big)), tuple(big), b.dtype(x))
    return b.reshape(y, tuple(out))


@onnx_op("Pad")
def pad(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    rank = b.rank(x)
    axes: list[Dim]
    if node.opset < 11:
        pads, value = node.attr("pads") or node.attr("paddings"), node.attr("value", 0.0)
        axes = list(range(rank))
    else:
        pads = b.ints(node, 1)
        cv = b.const(node, 2)
        value = 0 if cv is None or cv.size == 0 else cv.reshape(-1)[0].item()
        axes = b.ints(node, 3) or list(range(rank))
    n = len(axes)
    pairs = [(0, 0)] * rank
    for k, a in enumerate(axes):
        pairs[norm_axis(static_dim(a, "axes", node), rank)] = (int(pads[k]), int(pads[k + n]))
    mode = node.attr("mode", "constant")
    if mode == "constant":
        shape = tuple(dim_op("add", d, lo + hi) for d, (lo, hi) in zip(b.shape(x), pairs))
        value = value if dtypes.is_float(b.dtype(x)) else int(value) if b.dtype(x) != "bool" else bool(value)
        return b.emit(Pad(x, tuple(pairs), value), shape, b.dtype(x))
    for axis, (lo, hi) in enumerate(pairs):
        x = _pad_mode(b, x, axis, lo, hi, mode, node)
    return x


def _pad_mode(b: OnnxBuilder, x: Ref, axis: int, lo: int, hi: int, mode: str, node: OnnxNode) -> Ref:
    """reflect / edge / wrap padding along one axis, as slices of the input joined around it."""
    if lo == 0 and hi == 0:
        return x
    size = b.shape(x)[axis]
    if lo < 0 or hi < 0:
        x = slice_axis(b, x, axis, max(0, -lo), dim_op("sub", size, max(0, -hi)))
        return _pad_mode(b, x, axis, max(lo, 0), max(hi, 0), mode, node)
    if not isinstance(size, int):
        return _pad_dynamic(b, x, axis, size, lo, hi, mode, node)

    def piece(indices: list[int]) -> Ref | None:
        if not indices:
            return None
        index = b.as_ref(b.operand(np.asarray(indices, np.int64), f"{node.name}_pad{axis}"))
        shape = list(b.shape(x))
        shape[axis] = len(indices)
        return b.emit(IndexSelect(x, axis, index), tuple(shape), b.dtype(x))

    if mode == "edge":
        before, after = [0] * lo, [size - 1] * hi
    elif mode == "wrap":
        before = [(i - lo) % size for i in range(lo)]
        after = [i % size for i in range(hi)]
    elif mode == "reflect":
        period = 2 * (size - 1) if size > 1 else 1

        def refl(i: int) -> int:
            i = i % period
            return i if i < size else period - i

        before = [refl(-lo + i) for i in range(lo)]
        after = [refl(size + i) for i in range(hi)]
    else:
        raise LoweringError(f"node {node.name} (Pad): mode {mode!r} is not supported")
    parts = [p for p in (piece(before), x, piece(after)) if p is not None]
    return concat(b, parts, axis)


def _pad_dynamic(b: OnnxBuilder, x: Ref, axis: int, size: Sym, lo: int, hi: int, mode: str, node: OnnxNode) -> Ref:
    """reflect / edge / wrap padding of an axis whose extent is known at run time: slices at
    symbolic offsets (flipped for reflect, broadcast for edge), valid while each pad is shorter than
    the axis (reflect; at most as long for wrap), as onnxruntime requires."""

    def part(start: Dim, stop: Dim, n: int, flip: bool = False, repeat: bool = False) -> Ref | None:
        if n == 0:
            return None
        y = slice_axis(b, x, axis, start, stop)
        if flip:
            y = b.emit(Flip(y, (axis,)), b.shape(y), b.dtype(y))
        if repeat:
            shape = list(b.shape(y))
            shape[axis] = n
            y = b.emit(Expand(y, tuple(shape)), tuple(shape), b.dtype(y))
        return y

    last = dim_op("sub", size, 1)
    if mode == "edge":
        before, after = part(0, 1, lo, repeat=True), part(last, size, hi, repeat=True)
    elif mode == "reflect":  # x[lo], …, x[1] | x | x[size-2], …, x[size-1-hi]
        before = part(1, lo + 1, lo, flip=True)
        after = part(dim_op("sub", last, hi), last, hi, flip=True)
    elif mode == "wrap":
        before, after = part(dim_op("sub", size, lo), size, lo), part(0, hi, hi)
    else:
        raise LoweringError(f"node {node.name} (Pad): mode {mode!r} is not supported")
    return concat(b, [p for p in (before, x, after) if p is not None], axis)


def _space_depth(b: OnnxBuilder, x: Ref, view: tuple[Dim, ...], perm: tuple[int, ...], out: tuple[Dim, ...]) -> Ref:
    return b.reshape(permute(b, b.reshape(x, view), perm), out)


@onnx_op("DepthToSpace")
def depth_to_space(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    n, c, h, w = b.shape(x)
    s = node.attr("blocksize")
    c2 = dim_op("floordiv", c, s * s)
    out = (n, c2, dim_op("mul", h, s), dim_op("mul", w, s))
    if node.attr("mode", "DCR") == "DCR":
        return _space_depth(b, x, (n, s, s, c2, h, w), (0, 3, 4, 1, 5, 2), out)
    return _space_depth(b, x, (n, c2, s, s, h, w), (0, 1, 4, 2, 5, 3), out)


@onnx_op("SpaceToDepth")
def space_to_depth(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    n, c, h, w = b.shape(x)
    s = node.attr("blocksize")
    h2, w2 = dim_op("floordiv", h, s), dim_op("floordiv", w, s)
    perm = (0, 1, 3, 5, 2, 4) if node.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    return _space_depth(b, x, (n, c, h2, s, w2, s), perm, (n, dim_op("mul", c, s * s), h2, w2))


@onnx_op("Trilu")
def trilu(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    shape = b.shape(x)
    given = b.get(node, 1)
    k: Operand = Lit(0, "i64")
    if isinstance(given, np.ndarray):
        k = b.operand(given.reshape(()), node.inputs[1])
    elif given is not None:  # a model input: the mask is computed at run time, the shape is x's
        k = b.reshape(b.cast(given, "i64"), ())
    rows, cols = shape[-2], shape[-1]
    r = b.reshape(b.emit(Arange(0, rows, 1, "i64"), (rows,), "i64"), (rows, 1))
    c = b.emit(Arange(0, cols, 1, "i64"), (cols,), "i64")
    diff = emit_binary(b, "sub", c, r)  # j - i
    keep = emit_binary(b, "ge" if node.attr("upper", 1) else "le", diff, b.cast(k, "i64"))
    zero = b.lit(0, b.dtype(x))
    return b.emit(Where(keep, x, zero), shape, b.dtype(x))


@onnx_op("EyeLike")
def eye_like(node: OnnxNode, b: OnnxBuilder) -> Env:
    rows, cols = b.in_shape(node, 0)
    dtype = ELEM_TYPES[node.attr("dtype")] if node.attr("dtype") is not None else b.in_dtype(node, 0)
    if isinstance(rows, int) and isinstance(cols, int):
        return np.eye(rows, cols, node.attr("k", 0), dtype=dtypes.to_numpy(dtype))
    # A dynamic extent: the ones where j - i == k, computed at run time.
    r = b.reshape(b.emit(Arange(0, rows, 1, "i64"), (rows,), "i64"), (rows, 1))
    c = b.emit(Arange(0, cols, 1, "i64"), (cols,), "i64")
    on = emit_binary(b, "eq", emit_binary(b, "sub", c, r), Lit(int(node.attr("k", 0)), "i64"))
    return b.cast(on, dtype)


@onnx_op("OneHot")
def one_hot(node: OnnxNode, b: OnnxBuilder) -> Env:
    indices = b.input(node, 0)
    depth = int(np.asarray(b.const(node, 1)).reshape(-1)[0])
    values = b.input(node, 2)
    ishape = b.shape(indices)
    axis = node.attr("axis", -1)
    axis = axis + len(ishape) + 1 if axis < 0 else axis
    idx = b.cast(indices, "i64")
    neg = emit_binary(b, "lt", idx, Lit(0, "i64"))
    idx = b.emit(Where(neg, emit_binary(b, "add", idx, Lit(depth, "i64")), idx), ishape, "i64")
    view = list(ishape)
    view.insert(axis, 1)
    idx = b.reshape(idx, tuple(view))
    ar_shape = [1] * len(view)
    ar_shape[axis] = depth
    ar = b.reshape(b.emit(Arange(0, depth, 1, "i64"), (depth,), "i64"), tuple(ar_shape))
    hot = emit_binary(b, "eq", idx, ar)
    vals = b.as_ref(values)
    off, on = (b.reshape(slice_axis(b, vals, 0, k, k + 1), ()) for k in (0, 1))
    out = broadcast(tuple(view), tuple(ar_shape))
    return b.emit(Where(hot, on, off), out, b.dtype(values))


@onnx_op("NonZero")
def non_zero(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.required_const(node, 0)
    return np.asarray(np.nonzero(x), dtype=np.int64)


@onnx_op("Compress")
def compress(node: OnnxNode, b: OnnxBuilder) -> Env:
    cond = np.asarray(b.const(node, 1)).astype(bool)
    x = b.ref(node, 0)
    axis = node.attr("axis")
    if axis is None:
        x = b.reshape(x, (numel(b.shape(x)),))
        axis = 0
    axis = norm_axis(axis, b.rank(x))
    picks = np.nonzero(cond)[0].astype(np.int64)
    index = b.as_ref(b.operand(picks, f"{node.name}_picks"))
    shape = list(b.shape(x))
    shape[axis] = len(picks)
    return b.emit(IndexSelect(x, axis, index), tuple(shape), b.dtype(x))


@onnx_op("TensorScatter")
def tensor_scatter(node: OnnxNode, b: OnnxBuilder) -> Env:
    # past_cache [B, …, max_len, …], update [B, …, len, …], write_indices [B] (the start per batch row)
    cache, update = b.ref(node, 0), b.ref(node, 1)
    shape, ushape = b.shape(cache), b.shape(update)
    axis = norm_axis(node.attr("axis", -2), len(shape))
    steps = static_dim(ushape[axis], "the update length", node)
    view = [1] * len(shape)
    view[axis] = steps
    offsets = b.operand(np.arange(steps, dtype=np.int64).reshape(view), f"{node.name}_offsets")
    if node.has_input(2):
        starts = b.cast(b.as_ref(b.input(node, 2)), "i64")
        starts = b.reshape(starts, (b.shape(starts)[0],) + (1,) * (len(shape) - 1))
        index: Ref = emit_binary(b, "add", starts, offsets)
    else:
        index = b.as_ref(offsets)
    if node.attr("mode", "linear") == "circular":
        index = emit_binary(b, "remainder", index, b.lit(shape[axis], "i64"))
    index = b.emit(Expand(index, tuple(ushape)), tuple(ushape), "i64")
    return b.emit(Scatter(cache, axis, index, update, "none"), shape, b.dtype(cache))


@onnx_op("MaxUnpool")
def max_unpool(node: OnnxNode, b: OnnxBuilder) -> Env:
    x, indices = b.ref(node, 0), b.ref(node, 1)
    shape = b.shape(x)
    kernel = [int(k) for k in node.attr("kernel_shape")]
    n = len(kernel)
    strides = [int(s) for s in node.attr("strides", [1] * n)]
    pads = [int(p) for p in node.attr("pads", [0] * (2 * n))]
    spatial = [
        dim_op("sub", dim_op("add", dim_op("mul", dim_op("sub", d, 1), s), k), pads[i] + pads[i + n])
        for i, (d, k, s) in enumerate(zip(shape[2:], kernel, strides))
    ]
    wanted = b.ints(node, 2)
    # The indices count over the whole output (as onnxruntime and PyTorch's max_unpool place them,
    # also when output_shape is given), so one flat IndexPut places every value.
    out_shape = tuple(wanted) if wanted is not None else (*shape[:2], *spatial)
    total = numel(out_shape)
    flat = b.as_ref(b.lit(0, b.dtype(x)), (total,))
    placed = b.emit(
        IndexPut(flat, (b.reshape(indices, (numel(shape),)),), b.reshape(x, (numel(shape),)), False),
        (total,),
        b.dtype(x),
    )
    return b.reshape(placed, out_shape)
