"""Dead-code elimination: drop instructions whose results nothing reads.

Lowerings of multi-output ops (``native_layer_norm`` → y, mean, rstd) emit every result; this
pass removes the ones the graph never uses. An instruction whose result has a data-dependent size
(``nonzero`` → ``[u0, 2]``) stays while anything reads that size, even if nothing reads the result:
running it is how the size becomes known.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlx.ir.program import Instr, Lit, Program, Ref
from rlx.ir.symbolic import Sym, names


def dead_code_elimination(program: Program) -> Program:
    live = {o.name for o in program.outputs if isinstance(o, Ref)}
    data = {s.name for s in program.data_symbols}
    sizes_read: set[str] = set()  # data-dependent sizes the kept instructions read
    kept = []
    for ins in reversed(program.instrs):
        defines = {d.expr for d in ins.shape if isinstance(d, Sym) and d.expr in data}
        if ins.result in live or defines & sizes_read:
            kept.append(ins)
            live.update(r.name for r in ins.call.refs())
            sizes_read -= defines
            sizes_read |= _symbols_read(ins) & data
    kept.reverse()
    weights = [w for w in program.weights if w.name in live]
    defined = {v.name for v in program.inputs} | {w.name for w in weights} | {i.result for i in kept}
    value_map = {k: v for k, v in program.value_map.items() if v in defined}
    return dataclasses.replace(program, instrs=kept, weights=weights, value_map=value_map)


def _symbols_read(ins: Instr) -> set[str]:
    found: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, Sym):
            found.update(names(v.expr))
        elif isinstance(v, Lit):
            walk(v.value)
        elif isinstance(v, tuple):
            for x in v:
                walk(x)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                walk(getattr(v, f.name))

    walk(ins.call)
    for d in ins.shape:
        if isinstance(d, Sym) and not d.expr.isidentifier():
            walk(d)  # an expression over sizes reads them; a bare size may be defined here
    return found
