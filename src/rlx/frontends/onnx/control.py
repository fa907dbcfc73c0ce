"""Control-flow ONNX ops: If, Loop, Scan, lowered by inlining their bodies.

rlx Programs are straight-line, so a body is lowered inline: ``If`` takes the branch its known
condition selects (with a condition computed at run time, both branches run and ``Where`` picks
per output, when their outputs agree in shape and type); ``Loop`` and ``Scan`` are unrolled, which
needs the trip count (and every iteration's loop condition) known while converting. A loop whose
length depends on the model's inputs is refused with one line.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.movement import concat, slice_axis
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, broadcast, norm_axis, onnx_op
from rlx.ir.calls import Where

MAX_UNROLL = 4096  # iterations a Loop / Scan is unrolled to at most


def _known_bool(b: OnnxBuilder, v: Env, node: OnnxNode, what: str) -> bool:
    known = v if isinstance(v, np.ndarray) else b.evaluate(v)
    if known is None:
        raise LoweringError(
            f"node {node.name} ({node.op_type}): {what} depends on the model's inputs; only control flow "
            "decided while converting is supported (unrolled)"
        )
    return bool(np.asarray(known).reshape(-1)[0])


def stack(b: OnnxBuilder, values: Sequence[Env], axis: int) -> Env:
    """``numpy.stack`` of equally shaped values along a new ``axis``."""
    if all(isinstance(v, np.ndarray) and v.dtype != object for v in values):
        return np.stack([np.asarray(v) for v in values], axis=axis)
    parts = []
    for v in values:
        ref = b.as_ref(b.operand(v))
        shape = list(b.shape(ref))
        parts.append(b.reshape(ref, (*shape[:axis], 1, *shape[axis:])))
    return concat(b, parts, axis)


def take(b: OnnxBuilder, x: Env, axis: int, index: int) -> Env:
    """``x`` at ``index`` along ``axis``, that axis removed."""
    if isinstance(x, np.ndarray):
        return np.take(x, index, axis=axis)
    ref = b.as_ref(b.operand(x))
    shape = list(b.shape(ref))
    part = slice_axis(b, ref, axis, index, index + 1)
    return b.reshape(part, (*shape[:axis], *shape[axis + 1 :]))


@onnx_op("If")
def if_(node: OnnxNode, b: OnnxBuilder) -> list[Env]:
    cond = b.required(node, 0)
    then, other = node.attr("then_branch"), node.attr("else_branch")
    known = cond if isinstance(cond, np.ndarray) else b.evaluate(cond)
    if known is not None and known.dtype == object:  # a condition on sizes: decided at the example's
        return b.lower_body(node, then if b.decide_at_hints(known.reshape(-1)[0]) else other, [])
    if known is not None:
        return b.lower_body(node, then if bool(np.asarray(known).reshape(-1)[0]) else other, [])
    # A condition known only at run time: both branches are computed and one is selected per output.
    outs_then, outs_else = b.lower_body(node, then, []), b.lower_body(node, other, [])
    c = b.as_ref(b.operand(cond))
    picked: list[Env] = []
    for t, e in zip(outs_then, outs_else):
        if b.dtype(t) != b.dtype(e) or b.shape(t) != b.shape(e):
            raise LoweringError(
                f"node {node.name} (If): the condition depends on the model's inputs and the branches' outputs "
                f"differ in shape or type ({list(b.shape(t))} {b.dtype(t)} vs {list(b.shape(e))} {b.dtype(e)})"
            )
        x, y = b.operand(t), b.operand(e)
        shape = broadcast(b.shape(c), b.shape(x))
        picked.append(b.emit(Where(b.reshape(c, ()), x, y), shape, b.dtype(t)))
    return picked


@onnx_op("Loop")
def loop(node: OnnxNode, b: OnnxBuilder) -> list[Env]:
    body = node.attr("body")
    trip = b.const(node, 0)
    limit = int(np.asarray(trip).reshape(-1)[0]) if trip is not None else None
    if limit is None and not node.has_input(1):
        raise LoweringError(f"node {node.name} (Loop): neither a trip count nor a condition; the loop never ends")
    go = True if not node.has_input(1) else bool(np.asarray(b.required_const(node, 1)).reshape(-1)[0])
    carried: list[Env] = [b.required(node, k) for k in range(2, len(node.inputs))]
    n_scan = len(body.output) - 1 - len(carried)
    scans: list[list[Env]] = [[] for _ in range(n_scan)]
    t = 0
    while go and (limit is None or t < limit):
        if t >= MAX_UNROLL:
            raise LoweringError(f"node {node.name} (Loop): more than {MAX_UNROLL} iterations; too long to unroll")
        outs = b.lower_body(node, body, [np.asarray(t, np.int64), np.asarray(go), *carried])
        carried = outs[1 : 1 + len(carried)]
        for k in range(n_scan):
            scans[k].append(outs[1 + len(carried) + k])
        if node.has_input(1):  # without a condition input the body's condition output is ignored (a for loop)
            go = _known_bool(b, outs[0], node, "the loop condition")
        t += 1
    if n_scan and t == 0:
        raise LoweringError(f"node {node.name} (Loop): a loop that runs no iteration has empty scan outputs")
    return [*carried, *(stack(b, s, 0) for s in scans)]


def _scan_body(node: OnnxNode, b: OnnxBuilder, states: list[Env], xs: list[Env]) -> tuple[list[Env], list[Env]]:
    """One opset ≥ 9 Scan over ``xs`` from ``states``: (final states, stacked scan outputs)."""
    body = node.attr("body")
    m = len(xs)
    in_axes = [norm_axis(a, b.rank(x)) for a, x in zip(node.attr("scan_input_axes", [0] * m), xs)]
    in_dirs = node.attr("scan_input_directions", [0] * m)
    length = static_dim(b.shape(xs[0])[in_axes[0]], "the scan length", node)
    n_out = len(body.output) - len(states)
    ys: list[list[Env]] = [[] for _ in range(n_out)]
    if length > MAX_UNROLL:
        raise LoweringError(f"node {node.name} (Scan): {length} steps; too long to unroll (at most {MAX_UNROLL})")
    for t in range(length):
        slices = [take(b, x, axis, length - 1 - t if d else t) for x, axis, d in zip(xs, in_axes, in_dirs)]
        outs = b.lower_body(node, body, [*states, *slices])
        states = outs[: len(states)]
        for k in range(n_out):
            ys[k].append(outs[len(states) + k])
    if n_out and length == 0:
        raise LoweringError(f"node {node.name} (Scan): a scan over 0 steps has empty scan outputs")
    out_axes = node.attr("scan_output_axes", [0] * n_out)
    out_dirs = node.attr("scan_output_directions", [0] * n_out)
    stacked = []
    for y, axis, d in zip(ys, out_axes, out_dirs):
        steps = y[::-1] if d else y
        stacked.append(stack(b, steps, norm_axis(axis, b.rank(steps[0]) + 1)))
    return states, stacked


@onnx_op("Scan")
def scan(node: OnnxNode, b: OnnxBuilder) -> list[Env]:
    m = int(node.attr("num_scan_inputs"))
    if node.opset >= 9:
        ins = [b.required(node, k) for k in range(len(node.inputs))]
        states, ys = _scan_body(node, b, ins[: len(ins) - m], ins[len(ins) - m :])
        return [*states, *ys]
    # Opset 8: axis 0 is a batch axis the body does not see, the scan runs along axis 1.
    if node.has_input(0):
        raise LoweringError(f"node {node.name} (Scan): opset-8 sequence_lens is not supported")
    ins = [b.required(node, k) for k in range(1, len(node.inputs))]
    batch = static_dim(b.shape(ins[0])[0], "the batch size", node)
    directions = node.attr("directions")
    per_batch: list[list[Env]] = []
    for i in range(batch):
        parts = [take(b, x, 0, i) for x in ins]
        scan_node = OnnxNode(node.name, node.op_type, node.domain, 9, node.inputs, node.outputs, dict(node.attrs))
        if directions is not None:
            scan_node.attrs["scan_input_directions"] = directions
        states, ys = _scan_body(scan_node, b, parts[: len(parts) - m], parts[len(parts) - m :])
        per_batch.append([*states, *ys])
    return [stack(b, [outs[k] for outs in per_batch], 0) for k in range(len(per_batch[0]))]


# ── optionals of a tensor (optional types themselves are refused by the reader) ──
@onnx_op("OptionalHasElement")
def optional_has_element(node: OnnxNode, b: OnnxBuilder) -> Env:
    return np.asarray(node.has_input(0))  # a tensor is present; an omitted input is an empty optional


@onnx_op("OptionalGetElement")
def optional_get_element(node: OnnxNode, b: OnnxBuilder) -> Env:
    return b.required(node, 0)
