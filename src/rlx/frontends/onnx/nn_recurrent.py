"""Recurrent ONNX ops: RNN, GRU, LSTM.

Over a static sequence length they are unrolled: each step is a few existing Calls (MatMul,
elementwise gates); the input projection of every time step is one MatMul up front. Over a
length known only when the model runs (``sequence_length`` of a streaming model) or longer than
``MAX_UNROLL``, the node becomes one ``Recurrent`` Call, which every engine runs step by step.
Gate orders are ONNX's (LSTM: input, output, forget, cell; GRU: update, reset, hidden).
``sequence_lens`` is accepted when every sequence has the full length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.control import MAX_UNROLL, stack, take
from rlx.frontends.onnx.elementwise import emit_binary, unary
from rlx.frontends.onnx.movement import concat, permute, slice_axis
from rlx.frontends.onnx.nn import matmul
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, dim_op, onnx_op
from rlx.ir.calls import Clamp, Recurrent
from rlx.ir.program import Operand, Ref
from rlx.ir.symbolic import Dim

Activation = Callable[[OnnxBuilder, Ref], Ref]


def _affine(alpha: float, beta: float) -> Activation:
    def f(b: OnnxBuilder, x: Ref) -> Ref:
        return emit_binary(b, "add", emit_binary(b, "mul", x, b.lit(alpha, b.dtype(x))), b.lit(beta, b.dtype(x)))

    return f


def _activation(node: OnnxNode, name: str, alpha: float | None, beta: float | None) -> Activation:
    simple = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "softplus": "softplus"}
    key = name.lower()
    if key in simple:
        fn = simple[key]
        return lambda b, x: unary(b, fn, x)
    if key == "softsign":
        return lambda b, x: emit_binary(b, "div", x, emit_binary(b, "add", unary(b, "abs", x), b.lit(1, b.dtype(x))))
    if key == "affine":
        return _affine(1.0 if alpha is None else alpha, 0.0 if beta is None else beta)
    if key == "scaledtanh":
        a, s = 1.0 if alpha is None else alpha, 1.0 if beta is None else beta
        return lambda b, x: emit_binary(b, "mul", unary(b, "tanh", _affine(s, 0.0)(b, x)), b.lit(a, b.dtype(x)))
    if key == "hardsigmoid":
        lin = _affine(0.2 if alpha is None else alpha, 0.5 if beta is None else beta)
        return lambda b, x: b.emit(Clamp(lin(b, x), b.lit(0, b.dtype(x)), b.lit(1, b.dtype(x))), b.shape(x), b.dtype(x))
    if key == "leakyrelu":
        slope = 0.01 if alpha is None else alpha
        return lambda b, x: emit_binary(b, "maximum", x, emit_binary(b, "mul", x, b.lit(slope, b.dtype(x))))
    raise LoweringError(f"node {node.name} ({node.op_type}): activation {name!r} is not supported")


@dataclass
class _Spec:
    gates: int
    default_acts: tuple[str, ...]


_SPECS = {
    "RNN": _Spec(1, ("Tanh",)),
    "GRU": _Spec(3, ("Sigmoid", "Tanh")),
    "LSTM": _Spec(4, ("Sigmoid", "Tanh", "Tanh")),
}


def _activation_specs(node: OnnxNode, n_dirs: int) -> list[tuple[str, float | None, float | None]]:
    """(name, alpha, beta) of every activation, for every direction in turn."""
    spec = _SPECS[node.op_type]
    names = node.attr("activations") or list(spec.default_acts) * n_dirs
    if len(names) == len(spec.default_acts) and n_dirs == 2:
        names = names * 2
    # The values go, in order, to the activations that take one (onnxruntime's reading of the
    # spec): Sigmoid/Tanh consume none, so in [Sigmoid, LeakyRelu] alpha[0] is LeakyRelu's.
    alphas, betas = iter(node.attr("activation_alpha", [])), iter(node.attr("activation_beta", []))
    return [
        (name, next(alphas, None) if name.lower() in _TAKES_ALPHA else None,
         next(betas, None) if name.lower() in _TAKES_BETA else None)
        for name in names
    ]  # fmt: skip


_TAKES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def _activations(node: OnnxNode, n_dirs: int) -> list[list[Activation]]:
    acts = [_activation(node, name, a, bt) for name, a, bt in _activation_specs(node, n_dirs)]
    per = len(_SPECS[node.op_type].default_acts)
    return [acts[d * per : (d + 1) * per] for d in range(n_dirs)]


# Alpha / beta an activation takes when the node gives none (ONNX's defaults).
_DEFAULT_PARAMS = {"affine": (1.0, 0.0), "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "leakyrelu": (0.01, 0.0)}


@dataclass
class _Dir:
    """One direction's weights (W [G·H, I], R [G·H, H], bias [G·H] or None, peepholes [3H] or None)."""

    w: Ref
    r: Ref
    bias: Ref | None
    peep: Ref | None
    acts: list[Activation]


def _gate(b: OnnxBuilder, x: Ref, k: int, hidden: int) -> Ref:
    return slice_axis(b, x, b.rank(x) - 1, k * hidden, (k + 1) * hidden)


def _clip(b: OnnxBuilder, x: Ref, clip: float | None) -> Ref:
    if clip is None:
        return x
    dt = b.dtype(x)
    return b.emit(Clamp(x, b.lit(-clip, dt), b.lit(clip, dt)), b.shape(x), dt)


def _step(
    node: OnnxNode, b: OnnxBuilder, d: _Dir, xw: Ref, h: Ref, c: Ref | None, hidden: int
) -> tuple[Ref, Ref | None]:
    """One time step: ``xw`` is the input projection (with both biases) for this step, [batch, G·H]."""
    clip = node.attr("clip")
    f, g = d.acts[0], d.acts[1] if len(d.acts) > 1 else d.acts[0]
    if node.op_type == "RNN":
        return f(b, _clip(b, emit_binary(b, "add", xw, matmul(b, h, permute(b, d.r, (1, 0)))), clip)), None
    if node.op_type == "GRU":
        r_t = permute(b, d.r, (1, 0))
        rz = matmul(b, h, slice_axis(b, r_t, 1, 0, 2 * hidden))
        z = f(b, _clip(b, emit_binary(b, "add", _gate(b, xw, 0, hidden), _gate(b, rz, 0, hidden)), clip))
        r = f(b, _clip(b, emit_binary(b, "add", _gate(b, xw, 1, hidden), _gate(b, rz, 1, hidden)), clip))
        rh = slice_axis(b, r_t, 1, 2 * hidden, 3 * hidden)
        rbh = None if d.bias is None else _gate(b, d.bias, 5, hidden)
        if node.attr("linear_before_reset", 0):
            hr = matmul(b, h, rh)
            hr = hr if rbh is None else emit_binary(b, "add", hr, rbh)
            pre = emit_binary(b, "add", _gate(b, xw, 2, hidden), emit_binary(b, "mul", r, hr))
        else:
            pre = emit_binary(b, "add", _gate(b, xw, 2, hidden), matmul(b, emit_binary(b, "mul", r, h), rh))
            pre = pre if rbh is None else emit_binary(b, "add", pre, rbh)
        cand = g(b, _clip(b, pre, clip))
        one = b.lit(1, b.dtype(z))
        return emit_binary(
            b, "add", emit_binary(b, "mul", emit_binary(b, "sub", one, z), cand), emit_binary(b, "mul", z, h)
        ), None
    assert c is not None
    gates = emit_binary(b, "add", xw, matmul(b, h, permute(b, d.r, (1, 0))))
    gate_pre = [_gate(b, gates, k, hidden) for k in range(4)]  # i, o, f, c

    def peep(k: int, state: Ref) -> Ref:
        return (
            gate_pre[k]
            if d.peep is None
            else emit_binary(b, "add", gate_pre[k], emit_binary(b, "mul", _gate(b, d.peep, k, hidden), state))
        )

    i = f(b, _clip(b, peep(0, c), clip))
    if node.attr("input_forget", 0):
        fg = emit_binary(b, "sub", b.lit(1, b.dtype(i)), i)
    else:
        fg = f(b, _clip(b, peep(2, c), clip))
    cell = g(b, _clip(b, gate_pre[3], clip))
    c_new = emit_binary(b, "add", emit_binary(b, "mul", fg, c), emit_binary(b, "mul", i, cell))
    o = f(b, _clip(b, peep(1, c_new), clip))
    h_act = d.acts[2] if len(d.acts) > 2 else g
    return emit_binary(b, "mul", o, h_act(b, c_new)), c_new


def _direction(b: OnnxBuilder, node: OnnxNode, k: int, acts: list[Activation]) -> _Dir:
    def part(index: int) -> Ref | None:
        if not node.has_input(index):
            return None
        v = b.ref(node, index)
        return b.reshape(take_ref(b, v, k), b.shape(v)[1:])

    w, r = part(1), part(2)
    assert w is not None and r is not None
    return _Dir(w, r, part(3), part(7) if node.op_type == "LSTM" else None, acts)


def take_ref(b: OnnxBuilder, x: Ref, k: int, axis: int = 0) -> Ref:
    return b.as_ref(b.operand(take(b, x, axis, k)))


def _check_lengths(node: OnnxNode, b: OnnxBuilder, seq: int) -> None:
    if not node.has_input(4):
        return
    lens = b.const(node, 4)
    if lens is None or not np.all(np.asarray(lens) == seq):
        raise LoweringError(
            f"node {node.name} ({node.op_type}): sequence_lens shorter than the sequence are not supported"
        )


def _initial(b: OnnxBuilder, node: OnnxNode, index: int, k: int, batch: Dim, hidden: int, dt: str) -> Operand:
    if node.has_input(index):
        # layout=1 states are [batch, directions, hidden]: direction k is along axis 1.
        return take_ref(b, b.ref(node, index), k, 1 if node.attr("layout", 0) else 0)
    return b.as_ref(b.lit(0, dt), (batch, hidden))


@onnx_op("RNN", "GRU", "LSTM")
def recurrent(node: OnnxNode, b: OnnxBuilder) -> list[Env | None]:
    x = b.ref(node, 0)
    layout = node.attr("layout", 0)
    if layout:
        x = permute(b, x, (1, 0, 2))
    length, batch = b.shape(x)[0], b.shape(x)[1]
    if not isinstance(length, int) or length > MAX_UNROLL:
        return _run_time_steps(node, b, x, layout)
    # Unrolled over the static sequence length; the batch may be dynamic.
    seq = static_dim(length, "the sequence length", node)
    _check_lengths(node, b, seq)
    direction = node.attr("direction", "forward")
    n_dirs = 2 if direction == "bidirectional" else 1
    hidden = int(node.attr("hidden_size") or static_dim(b.in_shape(node, 2)[-1], "hidden_size", node))
    dt = b.dtype(x)
    acts = _activations(node, n_dirs)
    ys, hs, cs = [], [], []
    for k in range(n_dirs):
        d = _direction(b, node, k, acts[k])
        xw = matmul(b, x, permute(b, d.w, (1, 0)))  # [seq, batch, G·H]
        if d.bias is not None:
            g = _SPECS[node.op_type].gates
            wb, rb = _gate(b, d.bias, 0, g * hidden), _gate(b, d.bias, 1, g * hidden)
            if node.op_type == "GRU":  # Rb of the hidden gate goes with the reset gate, in the step
                rb = concat(b, [slice_axis(b, rb, 0, 0, 2 * hidden), b.as_ref(b.lit(0, dt), (hidden,))], 0)
            xw = emit_binary(b, "add", xw, emit_binary(b, "add", wb, rb))
        h: Ref = b.as_ref(_initial(b, node, 5, k, batch, hidden, dt))
        c: Ref | None = b.as_ref(_initial(b, node, 6, k, batch, hidden, dt)) if node.op_type == "LSTM" else None
        reverse = direction == "reverse" or k == 1
        steps: list[Env] = [h] * seq
        for t in range(seq):
            pos = seq - 1 - t if reverse else t
            h, c = _step(node, b, d, b.as_ref(b.operand(take(b, xw, 0, pos))), h, c, hidden)
            steps[pos] = h
        ys.append(stack(b, steps, 0))  # [seq, batch, H]
        hs.append(h)
        cs.append(c)
    y = stack(b, ys, 1)  # [seq, dirs, batch, H]
    y_h = stack(b, hs, 0)
    y_c = stack(b, [c for c in cs if c is not None], 0) if node.op_type == "LSTM" else None
    if layout:
        y = permute(b, b.as_ref(b.operand(y)), (2, 0, 1, 3))
        y_h = permute(b, b.as_ref(b.operand(y_h)), (1, 0, 2))
        y_c = None if y_c is None else permute(b, b.as_ref(b.operand(y_c)), (1, 0, 2))
    return [y, y_h, y_c]


def _run_time_steps(node: OnnxNode, b: OnnxBuilder, x: Ref, layout: int) -> list[Env | None]:
    """The node as one ``Recurrent`` Call, its packed result split into Y, Y_h and Y_c."""
    where = f"node {node.name} ({node.op_type})"
    steps, batch = b.shape(x)[0], b.shape(x)[1]
    if node.has_input(4):
        lens = b.const(node, 4)
        if lens is None or not isinstance(steps, int) or not np.all(np.asarray(lens) == steps):
            raise LoweringError(f"{where}: sequence_lens over a sequence of {steps} steps is not supported")
    direction = node.attr("direction", "forward")
    n_dirs = 2 if direction == "bidirectional" else 1
    hidden = int(node.attr("hidden_size") or static_dim(b.in_shape(node, 2)[-1], "hidden_size", node))
    names, alphas, betas = [], [], []
    for name, a, bt in _activation_specs(node, n_dirs):
        _activation(node, name, a, bt)  # refuses an activation rlx does not know, naming the node
        key = name.lower()
        da, db = _DEFAULT_PARAMS.get(key, (0.0, 0.0))
        names.append(key)
        alphas.append(float(da if a is None else a))
        betas.append(float(db if bt is None else bt))
    lstm = node.op_type == "LSTM"

    def optional(index: int) -> Ref | None:
        return b.ref(node, index) if node.has_input(index) else None

    states = [optional(5), optional(6) if lstm else None]
    if layout:  # the states come batch-major too
        states = [None if s is None else permute(b, s, (1, 0, 2)) for s in states]
    clip = node.attr("clip")
    call = Recurrent(
        node.op_type.lower(), x, b.ref(node, 1), b.ref(node, 2), optional(3), states[0], states[1],
        optional(7) if lstm else None, hidden, direction, tuple(names), tuple(alphas), tuple(betas),
        None if clip is None else float(clip), bool(node.attr("linear_before_reset", 0)),
        bool(node.attr("input_forget", 0)),
    )  # fmt: skip
    packed = b.emit(call, (dim_op("add", steps, 2), n_dirs, batch, hidden), b.dtype(x))

    def row(k: Any) -> Ref:
        return b.reshape(slice_axis(b, packed, 0, k, dim_op("add", k, 1)), (n_dirs, batch, hidden))

    y: Ref = slice_axis(b, packed, 0, 0, steps)
    y_h, y_c = row(steps), row(dim_op("add", steps, 1)) if lstm else None
    if layout:
        y = permute(b, y, (2, 0, 1, 3))
        y_h = permute(b, y_h, (1, 0, 2))
        y_c = None if y_c is None else permute(b, y_c, (1, 0, 2))
    return [y, y_h, y_c]
