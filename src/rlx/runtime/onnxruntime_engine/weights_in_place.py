"""Products by transposed weights read the weight where it lies (memory-mapped), not a copy.

The torch front-end lowers ``nn.Linear`` at the ``high`` level as ``MatMul(x, Permute(W, (1, 0)))``.
Emitted as is, onnxruntime's constant folding turns every ``Transpose`` of a weight into a new
initializer at load: a transposed copy of nearly all of a transformer's weights, beside the mapped
file. Rewritten as ``Linear(x, W)``, the emitter's ``"transposed_weights"`` form (FusedMatMul with
``transB``) multiplies by ``W`` in its stored ``[out, in]`` layout: onnxruntime packs it for its
GEMM from the mapped file, or reads it there (see ``OrtEngine``), and a loaded model holds its
weights once.
"""

from __future__ import annotations

import dataclasses

from rlx.ir import calls as C
from rlx.ir.program import Program, Ref
from rlx.passes.dce import dead_code_elimination
from rlx.passes.rewrite import use_counts

# FusedMatMul's onnxruntime kernel is float32 only.
_DTYPES = ("f32",)


def read_weights_in_place(program: Program) -> Program:
    """``program`` with each ``MatMul(x, Permute(W, (1, 0)))`` of a 2-d float32 weight ``W`` as
    ``Linear(x, W)``, where every reader of the Permute multiplies by it on the right."""
    weights = {w.name: w for w in program.weights}
    transposes = {
        ins.result: ins.call.x
        for ins in program.instrs
        if isinstance(ins.call, C.Permute)
        and ins.call.perm == (1, 0)
        and ins.call.x.name in weights
        and len(weights[ins.call.x.name].shape) == 2
        and ins.dtype in _DTYPES
    }
    if not transposes:
        return program
    uses = use_counts(program)
    right: dict[str, int] = {}
    for ins in program.instrs:
        c = ins.call
        if isinstance(c, C.MatMul) and isinstance(c.y, Ref) and c.y.name in transposes and c.x != c.y:
            right[c.y.name] = right.get(c.y.name, 0) + 1
    readable = {n for n in transposes if right.get(n, 0) == uses[n]}  # (an output counts as a reader)
    if not readable:
        return program
    instrs = []
    for ins in program.instrs:
        c = ins.call
        if isinstance(c, C.MatMul) and isinstance(c.y, Ref) and c.y.name in readable and ins.dtype in _DTYPES:
            ins = dataclasses.replace(ins, call=C.Linear(c.x, transposes[c.y.name], None))
        instrs.append(ins)
    return dead_code_elimination(dataclasses.replace(program, instrs=instrs))
