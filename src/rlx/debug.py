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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlx import safetensors_io
from rlx.errors import BundleError
from rlx.ir import dtypes, torch_ir
from rlx.ir.calls import RandomBits
from rlx.ir.program import Program, Ref, dumps_json, specialize
from rlx.ir.rng import random_values
from rlx.ir.torch_ir import Input, Node, Output, TensorMeta, TorchIR
from rlx.runtime.binding import bind_symbols
from rlx.runtime.model import load
from rlx.runtime.numpy_engine.executor import run_instructions
from rlx.util import StagedDir, atomic_write_text
from rlx.verify import OutputParity, compare

DEBUG_FILE = "debug.json"
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
        return {
            "index": self.index,
            "id": self.id,
            "op": self.op,
            "shape": self.shape,
            "dtype": self.dtype,
            "accumulated": asdict(self.accumulated),
            "local": asdict(self.local),
        }


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
    if program.is_dynamic:
        program = specialize(program, bind_symbols(program, arrays))
    env: dict[str, np.ndarray] = {v.name: a for v, a in zip(program.inputs, arrays)}
    env.update(weights)
    sizes: dict[str, int] = {}
    rlx_values = run_instructions(program.instrs, dict(env), sizes)
    producer = {ins.result: ins.node for ins in program.instrs}
    groups: dict[str, list] = {}
    for ins in program.instrs:
        groups.setdefault(ins.node, []).append(ins)
    to_aten = {v: k for k, v in program.value_map.items()}
    drawn = random_values(program)  # values that depend on a random draw: shape and dtype only
    report = DebugReport(program.name)
    for index, node in enumerate(ir.nodes):
        value = program.value_map.get(node.id)
        want = torch_values.get(node.id)
        if value is None or not isinstance(want, np.ndarray) or value not in rlx_values:
            continue
        accumulated = compare(index, np.asarray(rlx_values[value]), want, random=value in drawn)
        group = groups.get(producer.get(value, ""), [])
        if not group:  # an alias of an input or weight: nothing of rlx's own was computed
            local = accumulated
        else:
            seeded = dict(env)
            produced = {ins.result for ins in group}
            # Fed with PyTorch's values, a node downstream of a draw is comparable again; one that
            # draws itself, or reads a drawn value PyTorch did not record, is not.
            draws = any(isinstance(ins.call, RandomBits) for ins in group)
            for ins in group:
                for r in ins.call.refs():
                    if r.name in produced or r.name in seeded:
                        continue
                    source = torch_values.get(to_aten.get(r.name, ""))
                    seeded[r.name] = source if isinstance(source, np.ndarray) else rlx_values[r.name]
                    draws = draws or (not isinstance(source, np.ndarray) and r.name in drawn)
            local = compare(index, np.asarray(run_instructions(group, seeded, dict(sizes))[value]), want, random=draws)
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
            inputs.append(Input(a.name, tuple(value.shape), dtypes.from_numpy(value.dtype)))
            reference[f"in::{a.name}"] = value
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
        reference[f"out::{len(outputs)}"] = part
        outputs.append(Output(ref, None, tuple(part.shape), dtypes.from_numpy(part.dtype)))
    repro = TorchIR(
        f"repro_{node_id}", inputs, [], nodes, outputs, producer=ir.producer, decomposition=ir.decomposition
    )
    with StagedDir(directory, force=True) as staged:
        atomic_write_text(staged.path / "torch-ir.json", repro.dumps())
        safetensors_io.write(staged.path / "weights.safetensors", {})
        safetensors_io.write(staged.path / "reference.safetensors", reference)
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
    from rlx.torch_import.interpret import EXPORTED_FILE, load_exported, node_values

    out = Path(out_dir)
    if not (out / "torch-ir.json").is_file() and (out / "model.onnx").is_file():  # an ONNX import
        from rlx.onnx_import.node_parity import debug_onnx_dir

        return debug_onnx_dir(out)
    model = load(out / "bundle")
    ir = torch_ir.load(out / "torch-ir.json")
    reference, _ = safetensors_io.read(out / "reference.safetensors")
    inputs = {v.name: reference[f"in::{v.name}"] for v in model.inputs if f"in::{v.name}" in reference}
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
