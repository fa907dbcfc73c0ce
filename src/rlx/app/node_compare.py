"""The comparison core both parity debuggers share (torch: ``rlx.app.debug``, ONNX:
``rlx.app.onnx_debug``): every reference value is compared twice with rlx's —

- accumulated: the whole rlx program up to the value (errors add up along the way);
- local: only the instructions that compute the value from values the reference also has, fed
  with the *reference's* values for those, so an op is blamed for its own error only.

A driver says which values to compare, which instructions are local to each, and where the
reference's values come from; this module runs the program, the local slices and the comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rlx.app.verify import OutputParity, compare
from rlx.formats.layout import DEBUG_FILE
from rlx.interpret import run_instructions
from rlx.ir.program import Instr, Program, specialize
from rlx.runtime.binding import bind_symbols

REPRO_DIR = "repro"


@dataclass
class NodeReport:
    index: int  # position in the aten graph
    id: str
    op: str
    shape: list[int]
    dtype: str
    accumulated: OutputParity  # the whole rlx program up to here vs torch
    local: OutputParity  # this node's instructions alone, on torch's inputs

    @property
    def passed(self) -> bool:
        return self.local.passed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # the fields, in order, are debug.json's keys (both parities as objects)


@dataclass
class DebugReport:
    model_name: str
    nodes: list[NodeReport] = field(default_factory=list)

    @property
    def first_divergent(self) -> NodeReport | None:
        return next((n for n in self.nodes if not n.passed), None)

    def to_json(self) -> dict[str, Any]:
        first = self.first_divergent
        return {
            "model_name": self.model_name,
            "first_divergent": None
            if first is None
            else {"id": first.id, "op": first.op, "index": first.index, "reason": first.local.reason},
            "nodes": [n.to_json() for n in self.nodes],
        }

    def table(self, top: int = 15) -> str:
        def key(n: NodeReport) -> tuple[bool, float, float]:
            def err(p: OutputParity) -> float:
                return p.max_abs_err if p.max_abs_err is not None else np.inf

            return (n.passed, -err(n.local), -err(n.accumulated))

        worst = sorted(self.nodes, key=key)[:top]
        rows = [f"{'#':>4}  {'node':<28}{'op':<42}{'local err':>11}{'accum err':>11}{'cosine':>12}  result"]
        for n in worst:
            rows.append(
                f"{n.index:>4}  {n.id[:27]:<28}{n.op[:41]:<42}{_fmt(n.local.max_abs_err):>11}"
                f"{_fmt(n.accumulated.max_abs_err):>11}{_fmt(n.accumulated.cosine, '.8f'):>12}  "
                f"{'ok' if n.passed else 'DIVERGES: ' + n.local.reason}"
            )
        first = self.first_divergent
        rows.append("")
        rows.append(
            f"first divergent node: {first.id} ({first.op}) at position {first.index}: {first.local.reason}"
            if first
            else f"no node diverges ({len(self.nodes)} nodes compared)"
        )
        return "\n".join(rows)


def _fmt(v: float | None, spec: str = ".2e") -> str:
    return "-" if v is None else format(v, spec)


def outside_reads(group: Sequence[Instr]) -> list[str]:
    """The values a group of instructions reads that none of them produces."""
    produced = {ins.result for ins in group}
    return [r.name for ins in group for r in ins.call.refs() if r.name not in produced]


@dataclass
class WholeRun:
    """A program run once on the reference's inputs, every value kept."""

    program: Program  # specialised to the inputs' sizes when it was dynamic
    env: dict[str, np.ndarray]  # inputs and weights
    values: dict[str, np.ndarray]  # every value the run produced (and env)
    sizes: dict[str, int]  # data-dependent sizes the run bound

    def compare_both(
        self,
        index: int,
        value: str,
        want: np.ndarray,
        group: Sequence[Instr],
        reference: Callable[[str], np.ndarray | None],
        random: bool = False,
        local_random: bool = False,
    ) -> tuple[OutputParity, OutputParity]:
        """(accumulated, local) parity of ``value`` against ``want``. The local run computes ``group``
        alone, each value it reads from outside taken from ``reference`` where that has it, else from
        the whole run."""
        accumulated = compare(index, np.asarray(self.values[value]), want, random=random)
        if not group:  # an alias of an input or weight: nothing of rlx's own was computed
            return accumulated, accumulated
        feed = dict(self.env)
        for name in outside_reads(group):
            if name not in feed:
                seeded = reference(name)
                feed[name] = seeded if seeded is not None else self.values[name]
        local_values = run_instructions(group, feed, dict(self.sizes))
        return accumulated, compare(index, np.asarray(local_values[value]), want, random=local_random)


def run_whole(program: Program, arrays: Sequence[np.ndarray], weights: Mapping[str, np.ndarray]) -> WholeRun:
    """Run ``program`` on ``arrays`` (its inputs, in order) with the reference interpreter."""
    if program.is_dynamic:
        program = specialize(program, bind_symbols(program, list(arrays)))
    env: dict[str, np.ndarray] = {v.name: a for v, a in zip(program.inputs, arrays)}
    env.update(weights)
    sizes: dict[str, int] = {}
    values = run_instructions(program.instrs, dict(env), sizes)
    return WholeRun(program, env, values, sizes)


__all__ = ["DEBUG_FILE", "REPRO_DIR", "DebugReport", "NodeReport", "WholeRun", "outside_reads", "run_whole"]
