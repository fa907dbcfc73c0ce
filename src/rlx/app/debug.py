"""Parity debugger: find the first aten node whose own result diverges from PyTorch, and show it.

PyTorch's exported graph runs node by node (an FX interpreter) and the rlx Program runs
instruction by instruction on the same inputs. Every aten value is matched to its Program value
through ``program.value_map`` and compared twice:

- accumulated: the whole rlx program against the whole torch graph (errors add up along the way);
- local: only the instructions lowered from that node, fed with *PyTorch's* values for their
  inputs, so an op is blamed for its own error only.

The first node whose local error is beyond tolerance is the answer; ``repro/`` then holds a
one-op ``torch-ir.json`` with its inputs and expected output that ``rlx build --verify`` re-runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlx.app.node_compare import DEBUG_FILE, REPRO_DIR, DebugReport, NodeReport, outside_reads, run_whole
from rlx.errors import BundleError
from rlx.formats import safetensors_io, torch_ir
from rlx.formats.atomic import StagedDir, atomic_write_text
from rlx.formats.layout import (
    BUNDLE_DIR,
    EXPORTED_FILE,
    ONNX_FILE,
    REFERENCE_FILE,
    TORCH_IR_FILE,
    WEIGHTS_FILE,
    input_key,
    output_key,
)
from rlx.formats.torch_ir import Input, Node, Output, TensorMeta, TorchIR
from rlx.ir import dtypes
from rlx.ir.calls import RandomBits
from rlx.ir.program import Program, Ref, dumps_json
from rlx.ir.rng import random_values
from rlx.runtime.model import load


def compare_nodes(
    ir: TorchIR,
    program: Program,
    weights: Mapping[str, np.ndarray],
    inputs: Mapping[str, np.ndarray],
    torch_values: Mapping[str, Any],
) -> DebugReport:
    """Compare every single-tensor aten value, accumulated and local (see the module docstring)."""
    # State inputs (a KV cache) start from their stored initial values, as the first call does.
    arrays = [np.asarray(inputs[v.name] if v.name in inputs else weights[v.name]) for v in program.inputs]
    run = run_whole(program, arrays, weights)
    groups: dict[str, list] = {}
    for ins in run.program.instrs:
        groups.setdefault(ins.node, []).append(ins)
    producer = {ins.result: ins.node for ins in run.program.instrs}
    to_aten = {v: k for k, v in run.program.value_map.items()}
    drawn = random_values(run.program)  # values that depend on a random draw: shape and dtype only

    def reference(name: str) -> np.ndarray | None:
        source = torch_values.get(to_aten.get(name, ""))
        return source if isinstance(source, np.ndarray) else None

    report = DebugReport(run.program.name)
    for index, node in enumerate(ir.nodes):
        value = run.program.value_map.get(node.id)
        want = torch_values.get(node.id)
        if value is None or not isinstance(want, np.ndarray) or value not in run.values:
            continue
        group = groups.get(producer.get(value, ""), [])
        # Fed with PyTorch's values, a node downstream of a draw is comparable again; one that
        # draws itself, or reads a drawn value PyTorch did not record, is not.
        draws = any(isinstance(ins.call, RandomBits) for ins in group) or any(
            reference(r) is None and r in drawn for r in outside_reads(group)
        )
        accumulated, local = run.compare_both(index, value, want, group, reference, value in drawn, draws)
        report.nodes.append(
            NodeReport(index, node.id, node.op, list(want.shape), dtypes.from_numpy(want.dtype), accumulated, local)
        )
    return report


def write_repro(node_id: str, ir: TorchIR, torch_values: Mapping[str, Any], directory: Path) -> Path:
    """A one-op torch-ir.json for ``node_id`` with its inputs and PyTorch's output, runnable with
    ``rlx build DIR --verify`` (no torch needed)."""
    node = next(n for n in ir.nodes if n.id == node_id)
    if node.op == "_getitem" and node.args and isinstance(node.args[0], Ref):  # one result of a multi-result op
        return write_repro(node.args[0].name, ir, torch_values, directory)
    inputs: list[Input] = []
    reference: dict[str, np.ndarray] = {}

    def visit(a: Any) -> None:
        if isinstance(a, Ref) and a.name not in reference:
            value = torch_values.get(a.name)
            if not isinstance(value, np.ndarray):
                raise BundleError(f"node {node_id}: input {a.name} is not a single tensor; cannot write a repro")
            inputs.append(Input(id=a.name, shape=tuple(value.shape), dtype=dtypes.from_numpy(value.dtype)))
            reference[input_key(a.name)] = value
        elif isinstance(a, tuple):
            for x in a:
                visit(x)

    for a in (*node.args, *node.kwargs.values()):
        visit(a)
    result = torch_values[node_id]
    parts = result if isinstance(result, tuple) else (result,)
    nodes = [Node(node.id, node.op, node.args, node.kwargs, _static(node.out, parts), node.multi)]
    outputs: list[Output] = []
    for k, part in enumerate(parts):
        if not isinstance(part, np.ndarray):
            continue
        ref = node.id
        if node.multi:
            ref = f"{node.id}_out{k}"
            meta = TensorMeta(tuple(part.shape), dtypes.from_numpy(part.dtype))
            nodes.append(Node(ref, "_getitem", (Ref(node.id), k), {}, (meta,), False))
        reference[output_key(len(outputs))] = part
        outputs.append(Output(ref, None, tuple(part.shape), dtypes.from_numpy(part.dtype)))
    repro = TorchIR(
        f"repro_{node_id}", inputs, [], nodes, outputs, producer=ir.producer, decomposition=ir.decomposition
    )
    with StagedDir(directory, force=True) as staged:
        atomic_write_text(staged.path / TORCH_IR_FILE, repro.dumps())
        safetensors_io.write(staged.path / WEIGHTS_FILE, {})
        safetensors_io.write(staged.path / REFERENCE_FILE, reference)
        atomic_write_text(
            staged.path / "README.md",
            f"# rlx repro: {node.op} (node {node_id})\n\nOne aten op with its inputs and PyTorch's output.\n"
            f"Re-run it (no torch needed):\n\n    rlx build {directory} --verify --force\n",
        )
    return directory


def _static(out: tuple, parts: tuple) -> tuple:
    """The node's recorded result metadata, with symbolic extents replaced by this run's."""
    metas = []
    for m, part in zip(out, parts):
        if isinstance(m, TensorMeta) and isinstance(part, np.ndarray):
            metas.append(TensorMeta(tuple(part.shape), m.dtype))
        else:
            metas.append(m)
    return tuple(metas)


def debug_dir(out_dir: str | Path) -> DebugReport:
    """Debug ``OUT`` as it is on disk: its bundle, its torch-ir.json, its saved exported program
    and its reference inputs. Writes ``OUT/debug.json`` and, if a node diverges, ``OUT/repro/``.
    An ONNX import (``OUT/model.onnx``) is compared node by node with onnxruntime instead."""
    from rlx.frontends.torch.reference import load_exported, node_values

    out = Path(out_dir)
    if not (out / TORCH_IR_FILE).is_file() and (out / ONNX_FILE).is_file():  # an ONNX import
        from rlx.app.onnx_debug import debug_onnx_dir

        return debug_onnx_dir(out)
    model = load(out / BUNDLE_DIR)
    ir = torch_ir.load(out / TORCH_IR_FILE)
    reference, _ = safetensors_io.read(out / REFERENCE_FILE)
    inputs = {v.name: reference[input_key(v.name)] for v in model.inputs if input_key(v.name) in reference}
    values = node_values(load_exported(out / EXPORTED_FILE), inputs)
    # state inputs (a KV cache, the random generator) start from their initial values
    report = compare_nodes(ir, model.program, {**model.weights, **model.state}, inputs, values)
    write_debug(report, ir, values, out)
    return report


def write_debug(report: DebugReport, ir: TorchIR, values: Mapping[str, Any], out: Path) -> None:
    atomic_write_text(out / DEBUG_FILE, dumps_json(report.to_json()))
    first = report.first_divergent
    if first is not None:
        write_repro(first.id, ir, values, out / REPRO_DIR)
