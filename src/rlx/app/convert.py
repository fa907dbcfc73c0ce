"""``rlx.from_torch``: export → lower → passes → bundle → parity, into one output directory.

OUT/
  torch-ir.json  weights.safetensors  reference.safetensors   (the language-neutral export)
  bundle/        program.json  weights.safetensors  meta.json  (what the runtime loads)
  report.json    conversion summary and parity
  exported.pt2   the ExportedProgram, for `rlx debug`: only with keep_exported or when parity fails

The weights are written once: bundle/weights.safetensors is a hard link of OUT/weights.safetensors
(a copy only where the filesystem has no hard links), straight from the module's own tensors.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlx.app.debug import DebugReport, compare_nodes, debug_dir, write_debug
from rlx.app.pipeline import ConvertReport, OutputOptions, StepCallback, Steps, finish_program, write_and_verify
from rlx.app.report import write_report
from rlx.errors import OutputError, UsageError, WeightsError
from rlx.exporters.package.package import package_name
from rlx.formats import safetensors_io, torch_ir
from rlx.formats.atomic import StagedDir, atomic_write_text, check_writable_target, replace_dir
from rlx.formats.bundle import bind_weights
from rlx.formats.layout import (
    BUNDLE_DIR,
    EXPORTED_FILE,
    ONNX_DATA_FILE,
    ONNX_FILE,
    REFERENCE_FILE,
    REPORT_FILE,
    TORCH_IR_FILE,
    WEIGHTS_FILE,
    input_key,
    output_key,
)
from rlx.formats.torch_ir import TorchIR, TorchWeight
from rlx.frontends.aten import lower
from rlx.frontends.aten.fixed_dims import InputShapes, fix_input_shapes
from rlx.ir import dtypes
from rlx.ir.program import Program, dumps_json


def build_program(ir: TorchIR) -> Program:
    """Lower and optimise a parsed torch-ir graph, then verify the result."""
    return finish_program(lower(ir))


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


def torch_ir_facts(ir: TorchIR) -> dict[str, Any]:
    """What the bundle and report.json say about a torch-ir source: ``write_and_verify``'s keywords."""
    return {
        "source": {"format": "rlx-torch-ir", "version": 1, "producer": ir.producer, "decomposition": ir.decomposition},
        "decomposition": ir.decomposition,
        "op_histogram": ir.op_histogram(),
        "n_params": sum(math.prod(w.shape) for w in ir.weights),
    }


def from_torch(
    model: Any,
    example_inputs: Sequence[Any],
    out_dir: str | Path,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    verify: bool = True,
    write: Sequence[str] = ("bundle",),
    decomposition: str = "high",
    force: bool = False,
    dynamic_shapes: Any = None,
    model_name: str | None = None,
    auto_decompose: bool = True,
    on_step: StepCallback | None = None,
    package_style: str = "numpy",
    engine: str = "numpy",
    strict: bool = False,
    keep_exported: bool = False,
    emit: Sequence[str] | None = None,
    emit_style: str | None = None,
    backend: str | None = None,
) -> ConvertReport:
    """Convert a PyTorch module into ``out_dir`` and (by default) check parity against PyTorch.

    Memory: the weights are read from the module's own tensors (no copy) and written once; the
    parity run uses them in place too. ``keep_exported=True`` also saves ``exported.pt2`` (the
    ExportedProgram, weights included: a second copy on disk) and compares every node with PyTorch
    for report.html and ``rlx debug``; when parity fails both happen anyway.

    ``strict=True`` exports with TorchDynamo (``torch.export.export(strict=True)``), which
    transformers' static-cache export wrappers need. Buffers the forward updates in place (a KV
    cache) become the model's state: see ``Model.state``.

    Ops the registry lacks but torch can decompose are decomposed automatically (``auto_decompose``);
    the report's notes list them. ``write``: what to write, any of ``"bundle"``, ``"package"``,
    ``"onnx"``; ``package_style`` picks the generated package's array library (``"numpy"`` or
    ``"jax"``); ``engine`` the runtime the parity check runs on. ``emit=``, ``emit_style=`` and
    ``backend=`` are the deprecated spellings of ``write=``, ``package_style=`` and ``engine=``.
    """
    from rlx.frontends.torch import capture  # torch is needed only here
    from rlx.frontends.torch import write as write_exported
    from rlx.frontends.torch.reference import save_exported

    options = OutputOptions.of("rlx.from_torch", write, package_style, engine, (emit, emit_style, backend))
    steps = Steps(on_step)
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
        write_exported(exported, staged.path)
        reference = None
        if verify:
            reference = {input_key(k): v for k, v in exported.inputs.items()}
            reference.update({output_key(i): v for i, v in enumerate(exported.outputs) if v is not None})
        program = steps("lower", lambda: build_program(exported.ir))
        report = write_and_verify(
            program,
            exported.weights,
            reference,
            staged.path,
            Path(out_dir),
            options,
            steps,
            staged.path / WEIGHTS_FILE,
            notes,
            **torch_ir_facts(exported.ir),
        )
        # What `rlx debug` needs later, and the per-node comparison for report.html now: on request,
        # or when parity failed (the eager graph's intermediates are the most memory a conversion holds).
        if keep_exported or not report.passed:
            unsaved = save_exported(exported.exported_program, staged.path / EXPORTED_FILE)
            if unsaved:
                report.notes.append(f"exported.pt2 not written, so `rlx debug` cannot re-run PyTorch later: {unsaved}")
                atomic_write_text(staged.path / REPORT_FILE, dumps_json(report.to_json()))
            if verify:
                steps("debug", lambda: _debug_nodes(exported, program, staged.path))
        write_report(staged.path)
    return report


def _debug_nodes(exported: Any, program: Program, out: Path) -> None:
    from rlx.frontends.torch.reference import node_values

    values = node_values(exported.exported_program, exported.inputs)
    weights = bind_weights(program, exported.weights, "weights")
    write_debug(compare_nodes(exported.ir, program, weights, exported.inputs, values), exported.ir, values, out)


def _fix_shapes(ir: TorchIR, input_shapes: InputShapes, src: Path, verify: bool) -> TorchIR:
    """``ir`` with the chosen dimensions fixed; a size other than the example's cannot be verified."""
    hints = {sym.name: sym.hint for sym in ir.symbols}
    fixed_ir, fixed = fix_input_shapes(ir, input_shapes, f"{src / TORCH_IR_FILE}")
    moved = {name: size for name, size in fixed.items() if size != hints[name]}
    if verify and moved:
        name, size = next(iter(moved.items()))
        raise UsageError(
            f"{src}: --verify compares with {REFERENCE_FILE}, recorded at {name} = {hints[name]}; "
            f"fixing it to {size} needs a build without --verify"
        )
    return fixed_ir


def build(
    src_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    write: Sequence[str] = ("bundle",),
    verify: bool = False,
    force: bool = False,
    on_step: StepCallback | None = None,
    package_style: str = "numpy",
    engine: str = "numpy",
    input_shapes: InputShapes | None = None,
    emit: Sequence[str] | None = None,
    emit_style: str | None = None,
    backend: str | None = None,
) -> ConvertReport:
    """Lower an exported directory (``torch-ir.json`` + ``weights.safetensors``) without torch.

    Writes ``bundle/`` and ``report.json`` into ``out_dir`` (default: ``src_dir``); with a separate
    ``out_dir`` the three source files are copied there too, so it is self-contained. ``write``,
    ``package_style``, ``engine`` (and their deprecated spellings) as for ``from_torch``.
    ``input_shapes`` ({input: sizes, None keeps a dimension dynamic}) fixes chosen dynamic
    dimensions while building, as ``from_onnx(input_shapes=...)`` does for ONNX files.
    """
    options = OutputOptions.of("rlx.build", write, package_style, engine, (emit, emit_style, backend))
    src = Path(src_dir)
    if not (src / TORCH_IR_FILE).is_file():
        raise UsageError(
            f"{src}: no torch-ir.json here; pass the directory `rlx import` or the reference front-end wrote"
        )
    steps = Steps(on_step)
    ir = steps("read", lambda: torch_ir.load(src / TORCH_IR_FILE))
    ir = _fix_shapes(ir, input_shapes or {}, src, verify)
    tensors, _ = safetensors_io.read(src / WEIGHTS_FILE)
    notes = reconcile_weight_dtypes(ir, tensors)
    weights = {w.key: tensors[w.key] for w in ir.weights if w.key in tensors}
    reference = None
    if verify:
        if not (src / REFERENCE_FILE).is_file():
            raise UsageError(f"{src}: --verify needs reference.safetensors next to torch-ir.json")
        reference, _ = safetensors_io.read(src / REFERENCE_FILE)
    target = src if out_dir is None else Path(out_dir)
    in_place = target.resolve() == src.resolve()
    if in_place:
        check_writable_target(src / BUNDLE_DIR, force)
        try:
            with tempfile.TemporaryDirectory(prefix=".rlx-build.", dir=src) as tmp:
                program = steps("lower", lambda: build_program(ir))
                report = write_and_verify(
                    program,
                    weights,
                    reference,
                    Path(tmp),
                    src,
                    options,
                    steps,
                    src / WEIGHTS_FILE,
                    notes,
                    **torch_ir_facts(ir),
                )
                if "bundle" in options.write:
                    replace_dir(Path(tmp) / BUNDLE_DIR, src / BUNDLE_DIR)
                if "package" in options.write:  # written into the temp dir like the bundle: move it too
                    name = package_name(report.model_name)
                    replace_dir(Path(tmp) / name, src / name)
                for onnx_file in (ONNX_FILE, ONNX_DATA_FILE):  # --write onnx
                    if (Path(tmp) / onnx_file).is_file():
                        os.replace(Path(tmp) / onnx_file, src / onnx_file)
                os.replace(Path(tmp) / REPORT_FILE, src / REPORT_FILE)
                write_report(src)
        except OSError as e:
            raise OutputError(f"{src}: writing the build output failed: {e.strerror or e}") from e
        return report
    with StagedDir(target, force=force) as staged:
        for name in (TORCH_IR_FILE, WEIGHTS_FILE, REFERENCE_FILE):
            if (src / name).is_file():
                shutil.copyfile(src / name, staged.path / name)
        program = steps("lower", lambda: build_program(ir))
        report = write_and_verify(
            program,
            weights,
            reference,
            staged.path,
            target,
            options,
            steps,
            staged.path / WEIGHTS_FILE,
            notes,
            **torch_ir_facts(ir),
        )
        write_report(staged.path)
    return report


def debug(model: Any, example_inputs: Any, out_dir: str | Path, **convert_kwargs: Any) -> DebugReport:
    """Convert ``model`` into ``out_dir`` (as ``rlx.from_torch`` does) and debug it node by node."""
    convert_kwargs.setdefault("keep_exported", True)  # debug_dir re-runs PyTorch from exported.pt2
    from_torch(model, example_inputs, out_dir, **convert_kwargs)
    return debug_dir(out_dir)
