"""Values an engine graph can know before it runs: those computed from weights and literals only.

A decoder's attention mask is usually one (built from ``arange``, compared, combined): onnxruntime
folds it at load, but its consumers stay general. Knowing its value while emitting lets the
attention emitter drop what it cannot need: the zeroing of rows that attend nowhere when every
row attends somewhere, a mask that allows everything, and a mask that is exactly the causal
triangle (onnxruntime's own causal attention, no bias tensor).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TypeVar

import numpy as np

from rlx.ir.program import Instr, Program
from rlx.ir.symbolic import static_shape

MAX_ELEMENTS = 1 << 22  # larger intermediates are not worth evaluating while emitting

Fact = TypeVar("Fact")


def memoized_upward(
    name: str, memo: dict[str, Fact], operands: Callable[[str], Iterable[str]], compute: Callable[[str], Fact]
) -> Fact:
    """``memo[name]``, filled in post-order: ``compute(n)`` runs once every name in ``operands(n)``
    is in ``memo``. Iterative: a chain of instructions can be deeper than Python's recursion limit."""
    stack = [name]
    while stack:
        top = stack[-1]
        if top in memo:
            stack.pop()
            continue
        pending = [r for r in operands(top) if r not in memo]
        if pending:
            stack.extend(pending)
            continue
        memo[top] = compute(top)
        stack.pop()
    return memo[name]


class StaticValues:
    """``value(name)``: the array value ``name`` always has, or None (it depends on an input, or a
    step cannot be evaluated here); evaluated once with the numpy kernels, memoized."""

    def __init__(self, program: Program, weight: Callable[[str], np.ndarray | None]) -> None:
        self._producers: dict[str, Instr] = {ins.result: ins for ins in program.instrs}
        self._weights = {w.name for w in program.weights}
        self._weight = weight
        self._memo: dict[str, np.ndarray | None] = {}

    def value(self, name: str) -> np.ndarray | None:
        return memoized_upward(name, self._memo, self._operands, self._evaluate)

    def _operands(self, name: str) -> list[str]:
        ins = self._producers.get(name)
        return [] if ins is None else [r.name for r in ins.call.refs()]

    def _evaluate(self, name: str) -> np.ndarray | None:
        ins = self._producers.get(name)
        if ins is None:
            return self._weight(name) if name in self._weights else None  # (a graph input: unknown)
        known = {r.name: self._memo[r.name] for r in ins.call.refs()}
        shape = static_shape(ins.shape)
        if any(v is None for v in known.values()) or shape is None or math.prod(shape) > MAX_ELEMENTS:
            return None
        from rlx.interpret import run_instruction

        try:
            with np.errstate(all="ignore"):
                return run_instruction(ins, known)  # type: ignore[arg-type]
        except Exception:  # (a Call the numpy kernels refuse here: simply not known)
            return None
