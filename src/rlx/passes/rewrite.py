"""Helpers shared by the passes: renaming values, counting readers, fresh names."""

from __future__ import annotations

import dataclasses
from collections import Counter

from rlx.ir.program import Lit, Program, Ref


def resolve(mapping: dict[str, Ref | Lit]) -> dict[str, Ref | Lit]:
    """``mapping`` with chains followed to their end (a → b, b → c gives a → c)."""
    out = {}
    for name, target in mapping.items():
        seen = {name}
        while isinstance(target, Ref) and target.name in mapping and target.name not in seen:
            seen.add(target.name)
            target = mapping[target.name]
        out[name] = target
    return out


def rename_all(program: Program, mapping: dict[str, Ref | Lit]) -> Program:
    """Every read of a value in ``mapping`` (instructions and outputs) redirected to its target."""
    if not mapping:
        return program
    mapping = resolve(mapping)
    instrs = [dataclasses.replace(i, call=i.call.replace_refs(mapping)) for i in program.instrs]
    outputs = [mapping.get(o.name, o) if isinstance(o, Ref) else o for o in program.outputs]
    return dataclasses.replace(program, instrs=instrs, outputs=outputs)


def use_counts(program: Program) -> Counter[str]:
    """How many times each value is read, an output counting as a reader."""
    uses: Counter[str] = Counter()
    for ins in program.instrs:
        for r in ins.call.refs():
            uses[r.name] += 1
    for o in program.outputs:
        if isinstance(o, Ref):
            uses[o.name] += 1
    return uses


class Names:
    """Fresh value names that collide with nothing in the program."""

    def __init__(self, program: Program) -> None:
        self.used = set(program.values())

    def __call__(self, base: str) -> str:
        k = 0
        while f"{base}__{k}" in self.used:
            k += 1
        name = f"{base}__{k}"
        self.used.add(name)
        return name
