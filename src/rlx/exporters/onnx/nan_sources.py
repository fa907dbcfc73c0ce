"""Where a NaN in a value can come from: which graph inputs must be finite for it to hold none.

onnxruntime's MaxPool skips NaN where PyTorch's propagates it, so the onnxruntime engine flags a
run whose pooled input may hold one (``pooling_nan="check"``) and reruns it exactly. Checking the
pooled tensor itself costs a reduction of it on every run (with its NCHWc reorder: a sixth of a
small CNN's time). Most pooled inputs are a conv/norm/activation chain from the image: there,
a NaN can only come from a non-finite input or weight, since every step maps finite values to
finite ones except by overflowing float range (inf − inf), where no two implementations agree
on which sums overflow anyway. So for such a chain the engine checks the graph input (one cheap
sum over the image, shared by every pool) and, once at load, the weights; any other step on the
way (a division, a log, a square root …) keeps the check on the pooled tensor. OpenVINO's exp,
relu, clamp and softmax drop NaN too: its graph selects NaN back in after one of them only where
this analysis cannot rule out a NaN made inside the model (``GraphOptions.kernels_keep_nan``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rlx.exporters.onnx.static_values import memoized_upward
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Call, Instr, Lit, Program, Ref

# Elementwise functions that map finite values to finite values (or overflow to ±inf).
FINITE_UNARY = frozenset({
    "relu", "sigmoid", "tanh", "neg", "abs", "gelu", "gelu_tanh", "silu", "hardswish", "hardsigmoid",
    "identity", "square", "exp", "sin", "cos", "erf", "floor", "ceil", "round", "trunc", "sign",
    "relu6", "elu", "selu", "celu", "softplus", "mish", "logsigmoid",
})  # fmt: skip
FINITE_BINARY = frozenset({"add", "sub", "mul", "maximum", "minimum"})
FINITE_REDUCTIONS = frozenset({"sum", "mean", "amax", "amin"})
# Calls whose result is finite wherever their operands are (norms: their eps keeps the divisor
# positive; BatchNorm's running variance is checked at load with the weights; attention gives a
# fully masked row zeros, as PyTorch does; an index, gather or select picks finite values, and
# literals are checked apart).
FINITE_CALLS = (
    C.Conv, C.Linear, C.MatMul, C.Clamp, C.LeakyRelu, C.MaxPool, C.AdaptiveAvgPool, C.Reshape,
    C.Permute, C.Slice, C.Concat, C.Expand, C.Cast, C.LayerNorm, C.GroupNorm, C.Softmax,
    C.Attention, C.IndexSelect, C.Gather, C.Index, C.Where,
)  # fmt: skip


class NanSources:
    """``inputs(name)``: the float graph inputs whose finiteness rules out NaN in value ``name``
    (barring overflow), or None where a step on the way can make NaN of finite values."""

    def __init__(self, program: Program, weight: Callable[[str], np.ndarray | None]) -> None:
        self._producers: dict[str, Instr] = {ins.result: ins for ins in program.instrs}
        self._inputs = {v.name: v.dtype for v in program.inputs}
        self._weights = {w.name for w in program.weights}
        self._weight = weight
        self._values = program.values()
        self._memo: dict[str, frozenset[str] | None] = {}

    def inputs(self, name: str) -> frozenset[str] | None:
        return memoized_upward(name, self._memo, self._operands, self._combine)

    def _operands(self, name: str) -> list[str]:
        ins = self._producers.get(name)
        if ins is None or not self._allowed(ins.call):
            return []
        return [r.name for r in ins.call.refs()]

    def _combine(self, name: str) -> frozenset[str] | None:
        if not dtypes.is_float(self._values[name].dtype):
            return frozenset()  # integers and booleans hold no NaN
        if name in self._inputs:
            return frozenset([name])
        if name in self._weights:
            arr = self._weight(name)
            return frozenset() if arr is not None and bool(np.isfinite(arr).all()) else None
        ins = self._producers.get(name)
        if ins is None or not self._allowed(ins.call) or not _finite_literals(ins.call):
            return None
        if isinstance(ins.call, C.BatchNorm) and not self._positive(ins.call.var, ins.call.eps):
            return None
        found: frozenset[str] = frozenset()
        for ref in ins.call.refs():
            sub = self._memo[ref.name]
            if sub is None:
                return None
            found |= sub
        return found

    def _allowed(self, call: Call) -> bool:
        if isinstance(call, C.Unary):
            return call.fn in FINITE_UNARY
        if isinstance(call, C.Binary):  # (a division by a nonzero literal: attention's scale)
            return call.fn in FINITE_BINARY or (call.fn == "div" and _nonzero_literal(call.y))
        if isinstance(call, C.AvgPool):
            return call.divisor_override is None or call.divisor_override > 0
        if isinstance(call, C.Pad):
            return not isinstance(call.value, float) or math.isfinite(call.value)
        if isinstance(call, (C.LayerNorm, C.GroupNorm)):
            return call.eps > 0
        if isinstance(call, C.Full):  # (masked_fill's fill value)
            return not isinstance(call.value, float) or math.isfinite(call.value)
        if isinstance(call, C.Reduce):  # (a squeeze-excitation block's global mean)
            return call.fn in FINITE_REDUCTIONS
        return isinstance(call, (*FINITE_CALLS, C.BatchNorm))

    def _positive(self, var: Ref, eps: float) -> bool:
        arr = self._weight(var.name) if var.name in self._weights else None
        return arr is not None and bool((np.asarray(arr, dtype=np.float64) + eps > 0).all())


def _nonzero_literal(operand: object) -> bool:
    return isinstance(operand, Lit) and isinstance(operand.value, (int, float)) and operand.value != 0


def _finite_literals(call: Call) -> bool:
    for name in call.operand_fields():
        v = getattr(call, name)
        for item in v if isinstance(v, tuple) else (v,):
            if isinstance(item, Lit) and isinstance(item.value, float) and not math.isfinite(item.value):
                return False
    return True
