"""Alias and no-op removal: instructions that return their operand unchanged disappear.

Dropped, with their readers pointed at the operand: a reshape / expand to the operand's own shape,
an identity permutation, a cast to the operand's dtype, the ``identity`` Unary, a slice of a whole
axis, a pad of nothing, a concat of one tensor, a clamp with no bounds. Collapsed: a reshape of a
reshape (one reshape of the source) and a permute of a permute (one permutation). What is left
over is removed by dead-code elimination. Shapes are compared as written, so a symbolic extent
counts as equal only to the same expression.
"""

from __future__ import annotations

import dataclasses

from rlx.ir import calls as C
from rlx.ir.program import Instr, Lit, Program, Ref, Value
from rlx.passes.rewrite import rename_all


def remove_aliases(program: Program) -> Program:
    values: dict[str, Value] = program.values()
    producer: dict[str, Instr] = {}
    alias: dict[str, Ref | Lit] = {}
    instrs: list[Instr] = []
    for ins in program.instrs:
        call = ins.call.replace_refs(alias) if alias else ins.call
        ins = dataclasses.replace(ins, call=call)
        ins = _collapse(ins, producer)
        same = _alias_of(ins, values)
        if same is not None:
            alias[ins.result] = same
            continue
        producer[ins.result] = ins
        instrs.append(ins)
    if not alias and instrs == program.instrs:
        return program
    return rename_all(dataclasses.replace(program, instrs=instrs), alias)


def _alias_of(ins: Instr, values: dict[str, Value]) -> Ref | None:
    c = ins.call
    src = c.xs[0] if isinstance(c, C.Concat) and len(c.xs) == 1 else getattr(c, "x", None)
    if not isinstance(src, Ref):
        return None
    v = values[src.name]
    same_type = tuple(v.shape) == tuple(ins.shape) and v.dtype == ins.dtype
    if not same_type:
        return None
    if isinstance(c, (C.Reshape, C.Expand, C.Concat)):
        return src
    if isinstance(c, C.Permute) and c.perm == tuple(range(len(c.perm))):
        return src
    if isinstance(c, C.Cast) or (isinstance(c, C.Unary) and c.fn == "identity"):
        return src
    if isinstance(c, C.Slice) and c.start == 0 and c.step == 1 and c.stop == v.shape[c.axis]:
        return src
    if isinstance(c, C.Pad) and all(lo == 0 and hi == 0 for lo, hi in c.pads):
        return src
    if isinstance(c, C.Clamp) and c.lo is None and c.hi is None:
        return src
    return None


def _collapse(ins: Instr, producer: dict[str, Instr]) -> Instr:
    c = ins.call
    inner = producer.get(c.x.name) if isinstance(c, (C.Reshape, C.Permute)) else None
    if inner is None:
        return ins
    if isinstance(c, C.Reshape) and isinstance(inner.call, C.Reshape):
        return dataclasses.replace(ins, call=C.Reshape(inner.call.x, c.shape))
    if isinstance(c, C.Permute) and isinstance(inner.call, C.Permute):
        perm = tuple(inner.call.perm[p] for p in c.perm)
        return dataclasses.replace(ins, call=C.Permute(inner.call.x, perm))
    return ins  # a reshape of a permute or the other way round: not one call
