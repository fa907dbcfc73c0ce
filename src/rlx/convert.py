"""``rlx.from_torch``: export → lower → passes → bundle → parity, into one output directory.

OUT/
  torch-ir.json  weights.safetensors  reference.safetensors   (the language-neutral export)
  bundle/        program.json  weights.safetensors  meta.json  (what the runtime loads)
  report.json    conversion summary and parity
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlx.bundle import write_bundle
from rlx.errors import UsageError
from rlx.ir.program import Program, dumps_json
from rlx.ir.torch_ir import TorchIR
from rlx.ir.verify import verify as verify_program
from rlx.lower import lower
from rlx.passes import DEFAULT_PASSES
from rlx.runtime.model import Model, bind_weights
from rlx.util import StagedDir, atomic_write_text
from rlx.verify import ParityReport, check_parity

EMITS = ("bundle",)
StepCallback = Callable[[str, float], None]


@dataclass
class ConvertReport:
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
        }

    def summary(self) -> str:
        lines = [
            f"model {self.model_name}: {self.n_inputs} input(s), {self.n_params:,} parameters "
            f"({self.param_bytes / 1e6:.2f} MB), {sum(self.op_histogram.values())} aten nodes → "
            f"{self.n_instructions} instructions",
            f"output: {self.out_dir}",
        ]
        if self.parity is not None:
            lines += ["", self.parity.table(), "", "parity: " + ("PASS" if self.parity.passed else "FAIL")]
        return "\n".join(lines)


def build_program(ir: TorchIR) -> Program:
    """Lower and optimise a parsed torch-ir graph, then verify the result."""
    program = lower(ir)
    for run_pass in DEFAULT_PASSES:
        program = run_pass(program)
    verify_program(program)
    return program


def from_torch(
    model: Any,
    example_inputs: Sequence[Any],
    out_dir: str | Path,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    verify: bool = True,
    emit: Sequence[str] = ("bundle",),
    decomposition: str = "high",
    force: bool = False,
    dynamic_shapes: Any = None,
    model_name: str | None = None,
    on_step: StepCallback | None = None,
) -> ConvertReport:
    """Convert a PyTorch module into ``out_dir`` and (by default) check parity against PyTorch."""
    from rlx.torch_import import capture, write  # torch is needed only here

    unknown = set(emit) - set(EMITS)
    if unknown:
        raise UsageError(f"unknown --emit value(s) {', '.join(sorted(unknown))}; choose from {', '.join(EMITS)}")
    staged = StagedDir(out_dir, force=force)
    timings: dict[str, float] = {}

    def step(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = fn()
        timings[name] = time.perf_counter() - t0
        if on_step:
            on_step(name, timings[name])
        return result

    try:
        exported = step("export", lambda: capture(model, tuple(example_inputs), example_kwargs=example_kwargs,
                                                  decomposition=decomposition, dynamic_shapes=dynamic_shapes,
                                                  model_name=model_name))  # fmt: skip
        program = step("lower", lambda: build_program(exported.ir))

        def write_all() -> None:
            write(exported, staged.path)
            if "bundle" in emit:
                source = {"format": "rlx-torch-ir", "version": 1, "producer": exported.ir.producer,
                          "decomposition": decomposition}  # fmt: skip
                write_bundle(program, exported.weights, staged.path / "bundle", source=source,
                             weights_file=staged.path / "weights.safetensors")  # fmt: skip

        step("write", write_all)
        parity = None
        if verify:

            def run_parity() -> ParityReport:
                runtime = Model(program, bind_weights(program, exported.weights, "weights"))
                reference = {f"in::{k}": v for k, v in exported.inputs.items()}
                reference.update({f"out::{i}": v for i, v in enumerate(exported.outputs) if v is not None})
                return check_parity(runtime, reference)

            parity = step("verify", run_parity)
        report = ConvertReport(
            model_name=program.name,
            out_dir=Path(out_dir),
            bundle_dir=Path(out_dir) / "bundle" if "bundle" in emit else None,
            decomposition=decomposition,
            n_inputs=len(program.inputs),
            n_params=sum(math.prod(w.shape) for w in exported.ir.weights),
            param_bytes=sum(int(np.asarray(a).nbytes) for a in exported.weights.values()),
            n_instructions=len(program.instrs),
            op_histogram=exported.ir.op_histogram(),
            call_histogram=program.call_histogram(),
            parity=parity,
            timings=timings,
        )
        atomic_write_text(staged.path / "report.json", dumps_json(report.to_json()))
    except BaseException:
        staged.abort()
        raise
    staged.commit()
    return report
