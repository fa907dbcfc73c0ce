"""Values an engine graph can know before it runs: those computed from weights and literals only.

A decoder's attention mask is usually one (built from ``arange``, compared, combined): onnxruntime
folds it at load, but its consumers stay general. Knowing its value while emitting lets the
attention emitter drop what it cannot need: the zeroing of rows that attend nowhere when every
row attends somewhere, a mask that allows everything, and a mask that is exactly the causal
triangle (onnxruntime's own causal attention, no bias tensor).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlx.ir.program import Instr, Program
from rlx.ir.symbolic import is_static

MAX_ELEMENTS = 1 << 22  # larger intermediates are not worth evaluating while emitting


class StaticValues:
    """``value(name)``: the array value ``name`` always has, or None (it depends on an input, or a
    step cannot be evaluated here); evaluated once with the numpy kernels, memoized."""

    def __init__(self, program: Program, weight: Callable[[str], np.ndarray | None]) -> None:
        self._producers: dict[str, Instr] = {ins.result: ins for ins in program.instrs}
        self._weights = {w.name for w in program.weights}
        self._weight = weight
        self._memo: dict[str, np.ndarray | None] = {}

    def value(self, name: str) -> np.ndarray | None:
        stack = [name]
        while stack:  # (iterative: chains can be deep)
            top = stack[-1]
            if top in self._memo:
                stack.pop()
                continue
            ins = self._producers.get(top)
            pending = [] if ins is None else [r.name for r in ins.call.refs() if r.name not in self._memo]
            if pending:
                stack.extend(pending)
                continue
            self._memo[top] = self._evaluate(top, ins)
            stack.pop()
        return self._memo[name]

    def _evaluate(self, name: str, ins: Instr | None) -> np.ndarray | None:
        if ins is None:
            return self._weight(name) if name in self._weights else None  # (a graph input: unknown)
        known = {r.name: self._memo[r.name] for r in ins.call.refs()}
        if any(v is None for v in known.values()) or not is_static(ins.shape):
            return None
        size = 1
        for d in ins.shape:
            size *= d if isinstance(d, int) else MAX_ELEMENTS
        if size > MAX_ELEMENTS:
            return None
        from rlx.runtime.numpy_engine.executor import run_instruction

        try:
            with np.errstate(all="ignore"):
                return run_instruction(ins, known)  # type: ignore[arg-type]
        except Exception:  # (a Call the numpy kernels refuse here: simply not known)
            return None
