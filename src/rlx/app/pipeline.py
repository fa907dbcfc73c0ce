"""The conversion pipeline's shared tail, for every front-end (``rlx.app.convert`` for torch and
torch-ir.json directories, ``rlx.app.onnx_convert`` for ONNX): the default passes, writing the
bundle / package / ONNX file, the parity check, ``report.json``; and the options and the timed
steps they share.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlx.app.verify import ParityReport, check_parity
from rlx.deprecation import renamed
from rlx.errors import UsageError
from rlx.exporters.package.package import check_style, write_package
from rlx.formats.atomic import atomic_write_text
from rlx.formats.bundle import bind_weights, write_bundle
from rlx.formats.layout import BUNDLE_DIR, REPORT_FILE
from rlx.ir.program import Program, dumps_json
from rlx.ir.validate import validate
from rlx.optional import require
from rlx.passes import BUILD_PASSES
from rlx.runtime.engines import check_engine
from rlx.runtime.model import Model

ARTIFACTS = ("bundle", "package", "onnx")  # what a conversion may write (`write=`, `--write`)
StepCallback = Callable[[str, float], None]


@dataclass
class ConvertReport:
    """What a conversion did: counts, op histograms, the output directory and the parity check.

    ``passed`` is False only when parity ran and failed; ``summary()`` is what ``rlx import``
    prints; ``to_json()`` is ``report.json``.
    """

    model_name: str
    out_dir: Path
    bundle_dir: Path | None
    decomposition: str
    n_inputs: int
    n_params: int  # number of weight elements
    param_bytes: int
    n_instructions: int
    op_histogram: dict[str, int]
    call_histogram: dict[str, int]
    parity: ParityReport | None
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # things the user should know (dtype fixes …)
    node_kind: str = "aten"  # what op_histogram counts: aten nodes, or ONNX nodes

    @property
    def passed(self) -> bool:
        return self.parity is None or self.parity.passed

    def to_json(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "decomposition": self.decomposition,
            "inputs": self.n_inputs,
            "parameters": self.n_params,
            "parameter_bytes": self.param_bytes,
            "instructions": self.n_instructions,
            "op_histogram": self.op_histogram,
            "call_histogram": self.call_histogram,
            "parity": self.parity.to_json() if self.parity else None,
            "timings_s": {k: round(v, 4) for k, v in self.timings.items()},
            "notes": self.notes,
        }

    def summary(self) -> str:
        lines = [
            f"model {self.model_name}: {self.n_inputs} input(s), {self.n_params:,} parameters "
            f"({self.param_bytes / 1e6:.2f} MB), {sum(self.op_histogram.values())} {self.node_kind} nodes → "
            f"{self.n_instructions} instructions",
            f"output: {self.out_dir}",
        ]
        lines += [f"note: {n}" for n in self.notes]
        if self.parity is not None:
            lines += ["", self.parity.table(), "", "parity: " + ("PASS" if self.parity.passed else "FAIL")]
        return "\n".join(lines)


@dataclass(frozen=True)
class OutputOptions:
    """What a conversion writes and how it checks it, shared by every front-end.

    ``write``: any of ``ARTIFACTS``; ``package_style``: the generated package's array library
    (``"numpy"`` or ``"jax"``); ``engine``: the runtime the parity check runs on."""

    write: tuple[str, ...] = ("bundle",)
    package_style: str = "numpy"
    engine: str = "numpy"

    @classmethod
    def of(
        cls,
        where: str,
        write: Sequence[str],
        package_style: str,
        engine: str,
        deprecated: tuple[Sequence[str] | None, str | None, str | None],
    ) -> OutputOptions:
        """The checked options of public function ``where``; ``deprecated``: the values of its old
        keywords ``emit=``, ``emit_style=``, ``backend=`` (None where not passed)."""
        emit, emit_style, backend = deprecated
        options = cls(
            renamed(where, "write", tuple(write), ("bundle",), "emit", None if emit is None else tuple(emit), 4),
            renamed(where, "package_style", package_style, "numpy", "emit_style", emit_style, 4),
            renamed(where, "engine", engine, "numpy", "backend", backend, 4),
        )
        options.check()
        return options

    def check(self) -> None:
        """Refuse bad options before any work is done (a missing jax or onnx included)."""
        unknown = set(self.write) - set(ARTIFACTS)
        if unknown:
            raise UsageError(
                f"unknown --write value(s) {', '.join(sorted(unknown))}; choose from {', '.join(ARTIFACTS)}"
            )
        if self.package_style != "numpy" or "package" in self.write:
            check_style(self.package_style)
        if "onnx" in self.write:
            require("onnx", extra="onnx", feature="--write onnx")
        check_engine(self.engine)


class Steps:
    """Runs named pipeline steps, timing each and reporting it to the caller's callback."""

    def __init__(self, on_step: StepCallback | None) -> None:
        self.timings: dict[str, float] = {}
        self.on_step = on_step

    def __call__(self, name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = fn()
        self.timings[name] = time.perf_counter() - t0
        if self.on_step:
            self.on_step(name, self.timings[name])
        return result


def finish_program(program: Program) -> Program:
    """Run the default passes over a freshly lowered program, then verify the result."""
    for run_pass in BUILD_PASSES:
        program = run_pass(program)
    validate(program, rules=True)  # every instruction against its Call's shape rule, as rlx.load will
    return program


def write_and_verify(
    program: Program,
    weights: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray] | None,
    dest: Path,
    final_dir: Path,
    options: OutputOptions,
    steps: Steps,
    weights_file: Path | None,
    notes: list[str],
    *,
    source: Mapping[str, Any],
    decomposition: str,
    op_histogram: dict[str, int],
    n_params: int,
) -> ConvertReport:
    """Write a lowered program's bundle / package into ``dest``, check parity, write report.json
    (shared by every front-end: torch, torch-ir directories and ONNX)."""
    if "bundle" in options.write:
        steps(
            "write", lambda: write_bundle(program, weights, dest / BUNDLE_DIR, source=source, weights_file=weights_file)
        )
    if "package" in options.write:
        steps(
            "package",
            lambda: write_package(program, weights, dest, decomposition=decomposition, style=options.package_style),
        )
    if "onnx" in options.write:
        from rlx.exporters.onnx import write_onnx  # needs rlx[onnx], checked by OutputOptions.check

        steps("onnx", lambda: write_onnx(program, bind_weights(program, weights, "weights"), dest))
    parity = None
    if reference is not None:
        bound = bind_weights(program, weights, "weights")
        parity = steps("verify", lambda: check_parity(Model(program, bound, engine=options.engine), reference))
    report = ConvertReport(
        model_name=program.name,
        out_dir=final_dir,
        bundle_dir=final_dir / BUNDLE_DIR if "bundle" in options.write else None,
        decomposition=decomposition,
        n_inputs=len(program.user_inputs),
        n_params=n_params,
        param_bytes=sum(int(np.asarray(a).nbytes) for a in weights.values()),
        n_instructions=len(program.instrs),
        op_histogram=op_histogram,
        call_histogram=program.call_histogram(),
        parity=parity,
        timings=steps.timings,
        notes=notes,
    )
    atomic_write_text(dest / REPORT_FILE, dumps_json(report.to_json()))
    return report
