"""Dead-code elimination: drop instructions whose results nothing reads.

Lowerings of multi-output ops (``native_layer_norm`` → y, mean, rstd) emit every result; this
pass removes the ones the graph never uses.
"""

from __future__ import annotations

import dataclasses

from rlx.ir.program import Program, Ref


def dead_code_elimination(program: Program) -> Program:
    live = {o.name for o in program.outputs if isinstance(o, Ref)}
    kept = []
    for ins in reversed(program.instrs):
        if ins.result in live:
            kept.append(ins)
            live.update(r.name for r in ins.call.refs())
    kept.reverse()
    weights = [w for w in program.weights if w.name in live]
    defined = {v.name for v in program.inputs} | {w.name for w in weights} | {i.result for i in kept}
    value_map = {k: v for k, v in program.value_map.items() if v in defined}
    return dataclasses.replace(program, instrs=kept, weights=weights, value_map=value_map)
