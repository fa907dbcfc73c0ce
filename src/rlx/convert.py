"""``rlx.from_torch``: export → lower → passes → bundle → parity, into one output directory.

OUT/
  torch-ir.json  weights.safetensors  reference.safetensors   (the language-neutral export)
  bundle/        program.json  weights.safetensors  meta.json  (what the runtime loads)
  report.json    conversion summary and parity
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlx import safetensors_io
from rlx.bundle import bind_weights, write_bundle
from rlx.debug import DebugReport, compare_nodes, debug_dir, write_debug
from rlx.emit.package import check_style, package_name, write_package
from rlx.errors import OutputError, UsageError, WeightsError
from rlx.ir import dtypes, torch_ir
from rlx.ir.program import Program, dumps_json
from rlx.ir.torch_ir import TorchIR, TorchWeight
from rlx.ir.validate import validate
from rlx.lower import lower
from rlx.passes import BUILD_PASSES
from rlx.report import write_report
from rlx.runtime.engines import check_engine
from rlx.runtime.model import Model
from rlx.util import StagedDir, atomic_write_text, check_writable_target, replace_dir
from rlx.verify import ParityReport, check_parity

EMITS = ("bundle", "package", "onnx")
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


def build_program(ir: TorchIR) -> Program:
    """Lower and optimise a parsed torch-ir graph, then verify the result."""
    return finish_program(lower(ir))


def finish_program(program: Program) -> Program:
    """Run the default passes over a freshly lowered program, then verify the result."""
    for run_pass in BUILD_PASSES:
        program = run_pass(program)
    validate(program)
    return program


def reconcile_weight_dtypes(ir: TorchIR, tensors: Mapping[str, np.ndarray]) -> list[str]:
    """Check every declared weight against the file. A stored dtype that differs from the declared
    one (the reference front-end stores f64 as f32) wins, and is reported once."""
    missing = [w.key for w in ir.weights if w.key not in tensors]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise WeightsError(f"weights.safetensors: missing tensor(s) {', '.join(map(repr, missing[:3]))}{more}")
    changed = []
    for k, w in enumerate(ir.weights):
        arr = tensors[w.key]
        if tuple(arr.shape) != w.shape:
            raise WeightsError(
                f"weights.safetensors: tensor {w.key!r} has shape {list(arr.shape)}, torch-ir.json declares {list(w.shape)}"
            )
        stored = dtypes.from_numpy(arr.dtype)
        if stored != w.dtype:
            changed.append(f"{w.key} ({w.dtype}→{stored})")
            ir.weights[k] = TorchWeight(w.id, w.key, w.shape, stored, w.kind)
    if not changed:
        return []
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    return [
        f"using the stored dtype of {len(changed)} weight(s) that torch-ir.json declares differently: "
        f"{', '.join(changed[:3])}{more}"
    ]


class _Steps:
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


def _check_emit(emit: Sequence[str], emit_style: str = "numpy", backend: str = "numpy") -> None:
    """Refuse bad options before any work is done (a missing jax included)."""
    unknown = set(emit) - set(EMITS)
    if unknown:
        raise UsageError(f"unknown --emit value(s) {', '.join(sorted(unknown))}; choose from {', '.join(EMITS)}")
    if emit_style != "numpy" or "package" in emit:
        check_style(emit_style)
    if "onnx" in emit:
        try:
            import onnx  # noqa: F401
        except ImportError:
            raise UsageError("--emit onnx needs the onnx package: pip install 'rlx[onnx]'") from None
    check_engine(backend)


def _lower_write_verify(
    ir: TorchIR,
    weights: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray] | None,
    dest: Path,
    final_dir: Path,
    emit: Sequence[str],
    steps: _Steps,
    weights_file: Path | None,
    notes: list[str],
    emit_style: str = "numpy",
    backend: str = "numpy",
) -> tuple[ConvertReport, Program]:
    """The shared tail of ``from_torch`` and ``build``: lower, write the bundle into ``dest``
    (a staging directory that becomes ``final_dir``), check parity, write report.json."""
    program = steps("lower", lambda: build_program(ir))
    source = {"format": "rlx-torch-ir", "version": 1, "producer": ir.producer, "decomposition": ir.decomposition}
    report = write_and_verify(
        program, weights, reference, dest, final_dir, emit, steps, weights_file, notes, emit_style, backend,
        source=source, decomposition=ir.decomposition, op_histogram=ir.op_histogram(),
        n_params=sum(math.prod(w.shape) for w in ir.weights),
    )  # fmt: skip
    return report, program


def write_and_verify(
    program: Program,
    weights: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray] | None,
    dest: Path,
    final_dir: Path,
    emit: Sequence[str],
    steps: _Steps,
    weights_file: Path | None,
    notes: list[str],
    emit_style: str,
    backend: str,
    *,
    source: Mapping[str, Any],
    decomposition: str,
    op_histogram: dict[str, int],
    n_params: int,
) -> ConvertReport:
    """Write a lowered program's bundle / package into ``dest``, check parity, write report.json
    (shared by every front-end: torch, torch-ir directories and ONNX)."""
    if "bundle" in emit:
        steps(
            "write", lambda: write_bundle(program, weights, dest / "bundle", source=source, weights_file=weights_file)
        )
    if "package" in emit:
        steps("package", lambda: write_package(program, weights, dest, decomposition=decomposition, style=emit_style))
    if "onnx" in emit:
        from rlx.onnx_export import write_onnx  # needs rlx[onnx]

        steps("onnx", lambda: write_onnx(program, bind_weights(program, weights, "weights"), dest))
    parity = None
    if reference is not None:
        bound = bind_weights(program, weights, "weights")
        parity = steps("verify", lambda: check_parity(Model(program, bound, backend=backend), reference))
    report = ConvertReport(
        model_name=program.name,
        out_dir=final_dir,
        bundle_dir=final_dir / "bundle" if "bundle" in emit else None,
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
    atomic_write_text(dest / "report.json", dumps_json(report.to_json()))
    return report


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
    auto_decompose: bool = True,
    on_step: StepCallback | None = None,
    emit_style: str = "numpy",
    backend: str = "numpy",
    strict: bool = False,
) -> ConvertReport:
    """Convert a PyTorch module into ``out_dir`` and (by default) check parity against PyTorch.

    ``strict=True`` exports with TorchDynamo (``torch.export.export(strict=True)``), which
    transformers' static-cache export wrappers need. Buffers the forward updates in place (a KV
    cache) become the model's state: see ``Model.state``.

    Ops the registry lacks but torch can decompose are decomposed automatically (``auto_decompose``);
    the report's notes list them. ``emit_style`` picks the generated package's array library
    (``"numpy"`` or ``"jax"``); ``backend`` the runtime the parity check runs on.
    """
    from rlx.torch_import import capture, write  # torch is needed only here
    from rlx.torch_import.interpret import EXPORTED_FILE, save_exported

    _check_emit(emit, emit_style, backend)
    steps = _Steps(on_step)
    with StagedDir(out_dir, force=force) as staged:
        exported = steps(
            "export",
            lambda: capture(
                model,
                tuple(example_inputs),
                example_kwargs=example_kwargs,
                decomposition=decomposition,
                dynamic_shapes=dynamic_shapes,
                model_name=model_name,
                auto_decompose=auto_decompose,
                strict=strict,
            ),
        )
        notes = []
        if exported.auto_decomposed:
            notes.append(
                "auto-decomposed with torch's decompositions (or a custom op's registered implementation): "
                + ", ".join(exported.auto_decomposed)
            )
        write(exported, staged.path)
        reference = None
        if verify:
            reference = {f"in::{k}": v for k, v in exported.inputs.items()}
            reference.update({f"out::{i}": v for i, v in enumerate(exported.outputs) if v is not None})
        report, program = _lower_write_verify(
            exported.ir,
            exported.weights,
            reference,
            staged.path,
            Path(out_dir),
            emit,
            steps,
            staged.path / "weights.safetensors",
            notes,
            emit_style,
            backend,
        )
        # What `rlx debug` needs later, and the per-node comparison for report.html now.
        unsaved = save_exported(exported.exported_program, staged.path / EXPORTED_FILE)
        if unsaved:
            report.notes.append(f"exported.pt2 not written, so `rlx debug` cannot re-run PyTorch later: {unsaved}")
            atomic_write_text(staged.path / "report.json", dumps_json(report.to_json()))
        if verify:
            steps("debug", lambda: _debug_nodes(exported, program, staged.path))
        write_report(staged.path)
    return report


def _debug_nodes(exported: Any, program: Program, out: Path) -> None:
    from rlx.torch_import.interpret import node_values

    values = node_values(exported.exported_program, exported.inputs)
    weights = bind_weights(program, exported.weights, "weights")
    write_debug(compare_nodes(exported.ir, program, weights, exported.inputs, values), exported.ir, values, out)


def build(
    src_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    emit: Sequence[str] = ("bundle",),
    verify: bool = False,
    force: bool = False,
    on_step: StepCallback | None = None,
    emit_style: str = "numpy",
    backend: str = "numpy",
) -> ConvertReport:
    """Lower an exported directory (``torch-ir.json`` + ``weights.safetensors``) without torch.

    Writes ``bundle/`` and ``report.json`` into ``out_dir`` (default: ``src_dir``); with a separate
    ``out_dir`` the three source files are copied there too, so it is self-contained.
    """
    _check_emit(emit, emit_style, backend)
    src = Path(src_dir)
    if not (src / "torch-ir.json").is_file():
        raise UsageError(
            f"{src}: no torch-ir.json here; pass the directory `rlx import` or the reference front-end wrote"
        )
    steps = _Steps(on_step)
    ir = steps("read", lambda: torch_ir.load(src / "torch-ir.json"))
    tensors, _ = safetensors_io.read(src / "weights.safetensors")
    notes = reconcile_weight_dtypes(ir, tensors)
    weights = {w.key: tensors[w.key] for w in ir.weights if w.key in tensors}
    reference = None
    if verify:
        if not (src / "reference.safetensors").is_file():
            raise UsageError(f"{src}: --verify needs reference.safetensors next to torch-ir.json")
        reference, _ = safetensors_io.read(src / "reference.safetensors")
    target = src if out_dir is None else Path(out_dir)
    in_place = target.resolve() == src.resolve()
    if in_place:
        check_writable_target(src / "bundle", force)
        try:
            with tempfile.TemporaryDirectory(prefix=".rlx-build.", dir=src) as tmp:
                report, _ = _lower_write_verify(
                    ir,
                    weights,
                    reference,
                    Path(tmp),
                    src,
                    emit,
                    steps,
                    src / "weights.safetensors",
                    notes,
                    emit_style,
                    backend,
                )
                if "bundle" in emit:
                    replace_dir(Path(tmp) / "bundle", src / "bundle")
                if "package" in emit:  # written into the temp dir like the bundle: move it too
                    name = package_name(report.model_name)
                    replace_dir(Path(tmp) / name, src / name)
                for onnx_file in ("model.onnx", "model.onnx.data"):  # --emit onnx
                    if (Path(tmp) / onnx_file).is_file():
                        os.replace(Path(tmp) / onnx_file, src / onnx_file)
                os.replace(Path(tmp) / "report.json", src / "report.json")
                write_report(src)
        except OSError as e:
            raise OutputError(f"{src}: writing the build output failed: {e.strerror or e}") from e
        return report
    with StagedDir(target, force=force) as staged:
        for name in ("torch-ir.json", "weights.safetensors", "reference.safetensors"):
            if (src / name).is_file():
                shutil.copyfile(src / name, staged.path / name)
        report, _ = _lower_write_verify(
            ir,
            weights,
            reference,
            staged.path,
            target,
            emit,
            steps,
            staged.path / "weights.safetensors",
            notes,
            emit_style,
            backend,
        )
        write_report(staged.path)
    return report


def debug(model: Any, example_inputs: Any, out_dir: str | Path, **convert_kwargs: Any) -> DebugReport:
    """Convert ``model`` into ``out_dir`` (as ``rlx.from_torch`` does) and debug it node by node."""
    from_torch(model, example_inputs, out_dir, **convert_kwargs)
    return debug_dir(out_dir)
