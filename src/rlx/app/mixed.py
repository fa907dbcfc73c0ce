"""Mixed precision for ``rlx tune``: where a lower precision loses the accuracy, node by node.

The program runs twice on one input set: in float32 on the reference interpreter (every value kept,
``rlx.app.node_compare.run_whole``) and on the engine at the lower precision with every
intermediate value returned (``rlx.runtime.engines.trace``). Each instruction's loss is
1 − cosine of its value against the float32 one; what an instruction *adds* is its loss minus the
largest loss among the values it reads (a value the engine's graph has no tensor for passes its
inputs' loss on). Errors accumulate along a network, so the accumulated loss alone would blame
the last layers; the increase names the instructions where the precision breaks — typically a
quantized convolution or matmul whose activations or weights int8 cannot represent. (Returning a
value keeps onnxruntime from fusing its quantize/dequantize pair into an int8 kernel, so the traced
run computes each op in float on the dequantized values: the same numbers to rounding.)

Where only the max-error bound fails (cosine holds), the loss that matters is the largest error
of a few elements, which cosine barely sees: ConvNeXt at OpenVINO's bf16 has cosine 0.99997 and no
instruction adding a hundredth of cosine's allowance, while its output's max error is 8% over.
So each instruction's max |error| is measured too, over the value's own largest magnitude: a
scale-free measure like cosine, which a LayerNorm or a per-channel scale does not change (over the
output's scale floored at 1, as the parity rule measures an output, a LayerNorm would seem to add
the error it only rescales). There the stem convolution, which rounds the image to bfloat16, adds
the most.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx.app.node_compare import run_whole
from rlx.ir.calls import Clamp, Unary
from rlx.ir.program import Instr, Program, Ref
from rlx.runtime.engines import trace

FLOATS = ("f32", "f16", "bf16", "f64")


@dataclass(frozen=True)
class Loss:
    name: str  # the instruction's result
    op: str  # what it computes (its aten op or Call)
    loss: float  # 1 - cosine against float32
    added: float  # loss minus the largest loss among its inputs
    error: float  # max |error| against float32 over the value's largest magnitude
    error_added: float  # error minus the largest error among its inputs
    also: tuple[str, ...] = ()  # a ReLU/clamp after it that the quantizer folds into its output's range

    @property
    def names(self) -> list[str]:
        """The instructions to keep in float32 together."""
        return [self.name, *self.also]

    def describe(self, by_error: bool = False) -> str:
        measure = f"max err {self.error:.1e} of its scale" if by_error else f"1-cos {self.loss:.1e}"
        return f"{self.name} ({self.op}, {measure})"


def losses(
    engine: str,
    program: Program,
    weights: Mapping[str, np.ndarray],
    inputs: list[np.ndarray],
    precision: str,
    options: Mapping[str, Any] | None = None,
) -> list[Loss]:
    """Every instruction the engine has a float tensor for, those adding the most loss first.

    A value read only by a ReLU or clamp is judged after it: static quantization gives it the
    clipped range of the activation's output (onnxruntime's "removable activations"), so its own
    negative part is gone by design, not lost; the pair is one entry, named after the producer."""
    whole = run_whole(program, inputs, weights)
    instrs = whole.program.instrs
    low = trace(engine, program, weights, inputs, [ins.result for ins in instrs if ins.dtype in FLOATS],
                precision, options)  # fmt: skip
    clipped = _clipped(whole.program)  # producer -> the activation after it
    by_result = {ins.result: ins for ins in instrs}
    grouped = {act.result: by_result[producer] for producer, act in clipped.items()}
    # a value's (loss, error), or (no tensor for it) the largest of its inputs'
    carried: dict[str, tuple[float, float]] = {}
    out = []
    for ins in instrs:
        read = [carried.get(r.name, (0.0, 0.0)) for r in ins.call.refs() if isinstance(r, Ref)]
        upstream = (max((c[0] for c in read), default=0.0), max((c[1] for c in read), default=0.0))
        if ins.result in clipped:  # judged with the activation after it
            carried[ins.result] = upstream
            continue
        got, want = low.get(ins.result), whole.values.get(ins.result)
        measured = None if got is None or want is None or ins.dtype not in FLOATS else _measure(got, want)
        carried[ins.result] = upstream if measured is None else measured
        if measured is None:
            continue
        (loss, error), producer = measured, grouped.get(ins.result)
        owner, also = (ins, ()) if producer is None else (producer, (ins.result,))
        out.append(Loss(owner.result, _op(owner), loss, loss - upstream[0], error, error - upstream[1], also))
    return sorted(out, key=lambda x: -x.added)


def _op(ins: Instr) -> str:
    return ins.note.split(" ", 1)[0] if ins.note else ins.call.op


def _clipped(program: Program) -> dict[str, Instr]:
    """Instructions whose result only a ReLU / clamp reads (and is no output), with that activation."""
    readers: dict[str, list[Instr]] = {}
    for ins in program.instrs:
        for r in {r.name for r in ins.call.refs() if isinstance(r, Ref)}:
            readers.setdefault(r, []).append(ins)
    outputs = {o.name for o in program.outputs if isinstance(o, Ref)}
    produced = {ins.result for ins in program.instrs}
    out = {}
    for name, users in readers.items():
        (act,) = users if len(users) == 1 else (None,)
        if act is not None and name in produced and name not in outputs and _clips(act.call):
            out[name] = act
    return out


def _clips(call: Any) -> bool:
    return (isinstance(call, Unary) and call.fn in ("relu", "relu6")) or isinstance(call, Clamp)


def _measure(got: np.ndarray, want: np.ndarray) -> tuple[float, float] | None:
    """(1 - cosine, max |error| / max |want|) of a traced value against float32's, or None where
    they cannot be compared (shapes differ, NaN/inf, both all zero)."""
    g = np.asarray(got, dtype=np.float64).ravel()
    w = np.asarray(want, dtype=np.float64).ravel()
    if g.shape != w.shape or not (np.isfinite(g).all() and np.isfinite(w).all()):
        return None
    ng, nw = float(np.linalg.norm(g)), float(np.linalg.norm(w))
    if nw == 0.0 or ng == 0.0:
        return None if nw == ng else (1.0, 1.0)
    error = float(np.abs(g - w).max()) / float(np.abs(w).max())
    return max(0.0, 1.0 - float(g @ w) / (ng * nw)), error


def culprits(ranked: Sequence[Loss], tolerance: float, max_error: float | None = None) -> list[Loss]:
    """The instructions that add loss worth keeping in float32, most first: by cosine, those adding
    more than a hundredth of what the tolerance allows an output (``1 - tolerance``); with
    ``max_error`` (where outputs failed only that bound), by max error, those adding more than a
    hundredth of it."""
    if max_error is None:
        floor = (1.0 - tolerance) / 100
        return sorted((x for x in ranked if x.added > floor), key=lambda x: -x.added)
    return sorted((x for x in ranked if x.error_added > max_error / 100), key=lambda x: -x.error_added)


__all__ = ["Loss", "culprits", "losses"]
