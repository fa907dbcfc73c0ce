"""Weight packing: weights a kernel consumes transposed are pre-arranged once, at load.

``Linear(x, W, b)`` computes ``x @ W.T``: it becomes ``Gemm(x, Wt, b)`` with ``Wt = W.T`` written as
a Permute of the weight, which constant folding then stores C-contiguous — a GEMM-ready ``[in, out]``
matrix, shared by every Linear that reads ``W``. A MatMul by a transposed weight (``addmm`` / ``mm``
of ``permute(W)``) needs no rewrite: the Permute reads only a weight, so folding packs it the same
way. Convolution weights need none either: the conv kernel multiplies ``W`` as ``[out, in·k]``
against an im2col matrix laid out ``[in·k, positions]``, which is the weight's own layout.
"""

from __future__ import annotations

import dataclasses

from rlx.ir import calls as C
from rlx.ir.program import Instr, Program, Ref
from rlx.passes.rewrite import Names

_FLOATS = ("f32", "f64")


def pack_weights(program: Program) -> Program:
    const = {w.name: w for w in program.weights}
    names = Names(program)
    packed: dict[str, str] = {}  # weight → its transposed copy
    instrs: list[Instr] = []
    changed = False
    for ins in program.instrs:
        c = ins.call
        w = const.get(c.weight.name) if isinstance(c, C.Linear) else None
        if (
            isinstance(c, C.Linear)
            and w is not None
            and len(w.shape) == 2
            and w.dtype in _FLOATS
            and w.dtype == ins.dtype
        ):
            if w.name not in packed:
                packed[w.name] = names(f"{w.name}_packed")
                note = f"{w.name} packed as [in, out] for the GEMM"
                instrs.append(
                    Instr(
                        packed[w.name], C.Permute(c.weight, (1, 0)), (w.shape[1], w.shape[0]), w.dtype, ins.node, note
                    )
                )
            ins = dataclasses.replace(ins, call=C.Gemm(c.x, Ref(packed[w.name]), c.bias, ""))
            changed = True
        instrs.append(ins)
    return dataclasses.replace(program, instrs=instrs) if changed else program
