"""Parity debugger for imported ONNX models: every ONNX node's output against onnxruntime's.

onnxruntime exposes intermediate values once they are graph outputs, so the saved ``model.onnx``
is run with every node output (whose type shape inference knows) added as an output. Each value
is compared twice, as for torch models (``rlx.app.debug``):

- accumulated: the whole rlx program up to the value against onnxruntime;
- local: only the instructions between the value and the nearest values onnxruntime also has,
  fed with *onnxruntime's* values for those, so a node is blamed for its own error only. (Ops
  lowered through their ONNX function body, or through several Calls, are one such stretch.)

The first node whose local error is beyond tolerance is named.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlx.app.node_compare import DEBUG_FILE, DebugReport, NodeReport, run_whole
from rlx.errors import BundleError, UsageError
from rlx.formats import safetensors_io
from rlx.formats.atomic import atomic_write_text
from rlx.formats.layout import BUNDLE_DIR, ONNX_FILE, REFERENCE_FILE, parse_input_key
from rlx.ir import dtypes
from rlx.ir.program import Instr, Program, dumps_json


def onnxruntime_node_values(proto: Any, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every node output of the main graph as onnxruntime computes it (values whose type shape
    inference cannot tell are left out)."""
    import onnx

    from rlx.app.onnx_convert import has_onnxruntime, run_onnxruntime

    if not has_onnxruntime():
        raise UsageError("rlx debug on an ONNX model needs onnxruntime: pip install onnxruntime")
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        inferred = proto
    typed = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    present = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for name in node.output:
            vi = typed.get(name)
            if name and name not in present and vi is not None and vi.type.tensor_type.elem_type:
                model.graph.output.append(vi)
                present.add(name)
    feed = {i.name: inputs[i.name] for i in model.graph.input if i.name in inputs}
    values = run_onnxruntime(model, feed)
    return {o.name: v for o, v in zip(model.graph.output, values)}


def _local_slice(value: str, by_result: Mapping[str, Instr], known: set[str]) -> list[Instr]:
    """The instructions computing ``value`` back to values in ``known`` (or inputs and weights)."""
    needed: list[Instr] = []
    seen: set[str] = set()
    stack = [value]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        ins = by_result.get(name)
        if ins is None or (name != value and name in known):
            continue
        needed.append(ins)
        stack.extend(r.name for r in ins.call.refs())
    return needed


def compare_onnx_nodes(
    nodes: list[tuple[str, str, list[str]]],
    program: Program,
    weights: Mapping[str, np.ndarray],
    inputs: Mapping[str, np.ndarray],
    ort_values: Mapping[str, np.ndarray],
) -> DebugReport:
    """``nodes``: (node name, op type, output names) in graph order; see the module docstring."""
    run = run_whole(program, [np.asarray(inputs[v.name]) for v in program.inputs], weights)
    by_result = {ins.result: ins for ins in run.program.instrs}
    order = {ins.result: k for k, ins in enumerate(run.program.instrs)}
    to_onnx = {v: k for k, v in run.program.value_map.items()}
    # program values onnxruntime has a value for: the seeds of every local run
    seeded = {p: ort_values[o] for p, o in to_onnx.items() if o in ort_values}
    report = DebugReport(run.program.name)
    for index, (name, op, outputs) in enumerate(nodes):
        for out in outputs:
            value = run.program.value_map.get(out)
            want = ort_values.get(out)
            if value is None or want is None or value not in run.values:
                continue
            group = sorted(_local_slice(value, by_result, set(seeded)), key=lambda ins: order[ins.result])
            accumulated, local = run.compare_both(index, value, np.asarray(want), group, seeded.get)
            label = name if len(outputs) == 1 else f"{name}:{out}"
            report.nodes.append(
                NodeReport(index, label, op, list(want.shape), dtypes.from_numpy(want.dtype), accumulated, local)
            )
    return report


def debug_onnx_dir(out_dir: str | Path) -> DebugReport:
    """Debug an ONNX import ``OUT`` as it is on disk (``model.onnx``, ``bundle/``, the reference
    inputs); writes ``OUT/debug.json``."""
    from rlx.frontends.onnx import reader
    from rlx.runtime.model import load

    out = Path(out_dir)
    reference_file = out / REFERENCE_FILE
    if not reference_file.is_file():
        raise BundleError(f"{out}: no reference.safetensors (re-import with --verify onnxruntime)")
    model = load(out / BUNDLE_DIR)
    proto = reader.load_proto(out / ONNX_FILE)
    reference, _ = safetensors_io.read(reference_file)
    # frozen inputs included
    feeds = {name: v for k, v in reference.items() if (name := parse_input_key(k)) is not None}
    ort_values = onnxruntime_node_values(proto, feeds)
    # the nodes as the file has them (named as the reader names them): an op lowered through its
    # function body is compared on its own outputs
    nodes = [
        (n.name or f"{n.op_type}_{k}", n.op_type, [o for o in n.output if o]) for k, n in enumerate(proto.graph.node)
    ]
    inputs = {v.name: feeds[v.name] for v in model.inputs}
    report = compare_onnx_nodes(nodes, model.program, model.weights, inputs, ort_values)
    atomic_write_text(out / DEBUG_FILE, dumps_json(report.to_json()))
    return report
