"""The numpy engine's own Calls, made by its load-time passes (``passes/fusion.py``,
``passes/packing.py``, ``passes/buffers.py``) and run by its executor (kernels in ``fused.py``).

They are not part of the portable vocabulary (``rlx.ir.calls``): ``program.json`` always holds the
plain lowering, and ``rlx build`` / ``rlx import`` never write these. They are declared with
``portable=False``, so ``Program.from_json`` does not know them (a program.json naming one is refused
as an unknown Call), and the ONNX exporter and other engines never see them. ``reuse`` names a value
that is dead by this instruction (set by the buffer-reuse pass): its storage may receive the result,
so the kernel writes with ``out=`` instead of allocating.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlx.ir.program import Call, Operand, Ref
from rlx.ir.rules import TensorType, Types, broadcast_dims, matmul_shape, require, type_rule


class Gemm(Call, portable=False):
    """``activation(x @ w + bias)`` with ``numpy.matmul`` semantics; ``w`` is GEMM-ready (``[.., K, N]``,
    packed at load when it is a weight), ``bias`` broadcasts against the product, ``activation`` is
    ``""`` or a Unary function name applied last."""

    x: Ref
    w: Ref
    bias: Operand | None
    activation: str
    reuse: Ref | None = None


@dataclass(frozen=True)
class Step:
    """One step of a ``Fused`` chain: ``fn`` applied to registers ``args``, giving ``dtype``.

    ``fn`` is a Unary or Binary function name, ``where``, ``clamp``, ``cast``, ``leaky_relu``
    (``param``: the slope), or — as the last step only — ``softmax`` / ``log_softmax`` of the
    chain so far (``param``: the axis). Register ``i < len(inputs)`` is ``inputs[i]``,
    ``len(inputs) + j`` the result of step ``j``; ``None`` is an open clamp bound."""

    fn: str
    args: tuple[int | None, ...]
    dtype: str
    param: float | int | None = None


class Fused(Call, portable=False):
    """An elementwise chain run as one step (the scale + mask + softmax of attention, residual
    adds, RMSNorm's scale …); the result is the last step's."""

    inputs: tuple[Operand, ...]
    steps: tuple[Step, ...]
    reuse: Ref | None = None


# Their shape and dtype rules: the passes' rewritten programs are checked like program.json's.
@type_rule(Gemm)
def gemm_type(c: Gemm, t: Types) -> TensorType:
    x, w = t(c.x), t(c.w)
    shape = matmul_shape(x.shape, w.shape)
    if c.bias is not None:
        shape = broadcast_dims(shape, t(c.bias).shape)
    return TensorType(shape, x.dtype)


@type_rule(Fused)
def fused_type(c: Fused, t: Types) -> TensorType:
    require(bool(c.steps), "a fused chain without steps")
    return TensorType(broadcast_dims(*(t(x).shape for x in c.inputs)), c.steps[-1].dtype)


# For Program.from_json(doc, engine_calls=ENGINE_CALLS): reading back a rewritten program.
ENGINE_CALLS: dict[str, type[Call]] = {Gemm.op: Gemm, Fused.op: Fused}

__all__ = ["ENGINE_CALLS", "Fused", "Gemm", "Step"]
