"""``rlx.from_onnx``: read → lower → passes → bundle → parity against onnxruntime, into one directory.

OUT/
  model.onnx     the model as read (external data inlined), for `rlx debug` and re-checks
  reference.safetensors   example inputs and onnxruntime's outputs (when it is installed)
  bundle/        program.json  weights.safetensors  meta.json
  report.json    conversion summary and parity

torch is never imported on this path.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlx.errors import SchemaError, UsageError
from rlx.formats import safetensors_io
from rlx.formats.layout import ONNX_FILE, REFERENCE_FILE, input_key, output_key
from rlx.frontends.onnx import reader
from rlx.frontends.onnx.boundary import naming, one_line
from rlx.frontends.onnx.input_shapes import fix_input_shapes
from rlx.frontends.onnx.reader import OnnxGraph
from rlx.frontends.onnx.registry import REGISTRY, OnnxBuilder, check_coverage, ident
from rlx.ir import dtypes
from rlx.ir.program import Program, Ref, Value
from rlx.ir.symbolic import Sym, eval_shape

VERIFY_MODES = ("auto", "onnxruntime", "none")
MAX_EXAMPLE_ELEMENTS = 2**28  # per input: 1 GiB of f32, far beyond any example a parity check needs

if TYPE_CHECKING:
    from rlx.app.pipeline import OutputOptions, Steps


def lower_graph(graph: OnnxGraph) -> tuple[Program, dict[str, np.ndarray]]:
    """Lower a read ONNX graph to a Program and its weights (keyed by ONNX initializer name)."""
    check_coverage(graph.nodes)
    program = Program(
        name=ident(graph.name),
        inputs=[Value(name, shape, dtype) for name, shape, dtype in graph.inputs],
        weights=[],
        instrs=[],
        outputs=[],
        source_histogram=graph.op_histogram(),
        source_format="onnx",
        symbols=list(graph.symbols),
    )
    b = OnnxBuilder(program, graph.initializers, read_body=reader.subgraph)
    b.opsets = dict(graph.opsets)
    for v in program.inputs:
        b.env[v.name] = Ref(v.name)
    for name, arr in graph.initializers.items():
        b.env[name] = arr
    for node in graph.nodes:
        b.lower_node(node, REGISTRY[node.key].handler, graph.declared)
    program.outputs.extend(b.graph_outputs(graph.outputs))
    n = len(program.outputs)
    program.output_tree = {"out": 0} if n == 1 else {"tuple": [{"out": k} for k in range(n)]}
    program.value_map = {k: v.name for k, v in b.env.items() if isinstance(v, Ref)}
    return program, b.weights


def _example_inputs(graph: OnnxGraph, given: Sequence[Any] | Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    names = [name for name, _, _ in graph.inputs]
    if given is not None:
        pairs = given.items() if isinstance(given, Mapping) else zip(names, given)
        out = {k: np.asarray(v) for k, v in pairs}
        missing = [n for n in names if n not in out]
        if missing:
            raise UsageError(
                f"example_inputs: missing input(s) {', '.join(missing)}; the model takes {', '.join(names)}"
            )
        return out
    rng = np.random.default_rng(0)
    hints = {s.name: s.hint for s in graph.symbols}
    out = {}
    for name, shape, dtype in graph.inputs:
        concrete = eval_shape(shape, hints)
        if math.prod(concrete) > MAX_EXAMPLE_ELEMENTS:
            raise UsageError(
                f"input {name!r} has shape {list(concrete)}, too large for a made-up example input; "
                "pass example_inputs= (or --verify none)"
            )
        np_type = dtypes.to_numpy(dtype)
        if dtypes.is_float(dtype) or dtypes.is_complex(dtype):
            out[name] = rng.standard_normal(concrete).astype(np_type)
        elif dtype == "bool":
            out[name] = rng.random(concrete) < 0.5
        else:
            out[name] = rng.integers(0, 2, concrete).astype(np_type)
    return out


def ort_errors() -> tuple[type[BaseException], ...]:
    """The exception types onnxruntime raises for a model it refuses or cannot run (its pybind
    classes: ``Fail``, ``InvalidArgument``, ``InvalidGraph``, ``NotImplemented``,
    ``RuntimeException`` …, all subclasses of ``RuntimeError`` or ``Exception``)."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as state
    except ImportError:  # pragma: no cover - a build without the pybind state module
        return (RuntimeError,)
    found = [getattr(state, n) for n in dir(state) if isinstance(getattr(state, n), type)]
    errors = tuple(t for t in found if issubclass(t, Exception))
    # Feeding inputs numpy cannot convert raises plain RuntimeError/ValueError/TypeError there.
    return (*errors, RuntimeError, ValueError, TypeError)


def ort_refusal(where: str, e: BaseException) -> SchemaError:
    """onnxruntime refused or failed on the model: rlx read it, but its parity reference cannot be
    computed, which almost always means the file breaks an ONNX rule onnxruntime enforces."""
    return SchemaError(
        f"{where}: onnxruntime cannot run the model for the parity check ({type(e).__name__}: {one_line(e)}); "
        "fix the model or pass verify=False (--verify none) to skip the check"
    )


def has_onnxruntime() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


def run_onnxruntime(proto: Any, inputs: Mapping[str, np.ndarray], where: str = "model") -> list[np.ndarray]:
    """The model's outputs from onnxruntime (CPU), in graph output order. onnxruntime's own errors
    (a model it refuses: ``InvalidGraph``, ``InvalidArgument``, ``Fail`` …) come back as one
    ``SchemaError`` line naming ``where``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        outputs = session.run(None, dict(inputs))
    except ort_errors() as e:
        raise ort_refusal(where, e) from None
    return [np.asarray(o) for o in outputs]


def from_onnx(
    model: Any,
    out_dir: str | Path,
    *,
    example_inputs: Sequence[Any] | Mapping[str, Any] | None = None,
    verify: bool | str = True,
    force: bool = False,
    write: Sequence[str] = ("bundle",),
    package_style: str = "numpy",
    engine: str = "numpy",
    on_step: Any = None,
    freeze_inputs: Mapping[str, Any] | None = None,
    base_dir: str | Path | None = None,
    input_shapes: Mapping[str, Sequence[int | None]] | None = None,
    emit: Sequence[str] | None = None,
    emit_style: str | None = None,
    backend: str | None = None,
) -> Any:
    """Convert an ONNX model (a path or an ``onnx.ModelProto``) into ``out_dir``.

    ``verify``: True / "auto" checks parity against onnxruntime when it is installed (a note in the
    report otherwise), "onnxruntime" requires it, False / "none" skips the check. ``freeze_inputs``
    fixes inputs to values (they become weights): shape parameters a model takes as inputs.
    ``base_dir``: the directory a ``ModelProto``'s external data files are in (a path's own directory
    by default); external data is read only from inside it, symlinks resolved.
    ``input_shapes`` fixes chosen input dimensions (``{"x": (1, 3, None, None)}``: None keeps an
    axis dynamic), as onnxruntime's ``make_dynamic_shape_fixed`` does. ``write``, ``package_style``,
    ``engine`` (and their deprecated spellings ``emit``, ``emit_style``, ``backend``) as for
    ``rlx.from_torch``.
    """
    from rlx.app.pipeline import OutputOptions, Steps

    mode = "auto" if verify is True else "none" if verify is False else verify
    if mode not in VERIFY_MODES:
        raise UsageError(f"verify={verify!r}: choose from {', '.join(VERIFY_MODES)}")
    if mode == "onnxruntime" and not has_onnxruntime():
        raise UsageError("--verify onnxruntime needs the onnxruntime package: pip install onnxruntime")
    options = OutputOptions.of("rlx.from_onnx", write, package_style, engine, (emit, emit_style, backend))
    steps = Steps(on_step)
    proto = steps("read", lambda: reader.load_proto(model, base_dir))
    where = str(model) if isinstance(model, (str, Path)) else reader.model_name(proto)
    if input_shapes:
        proto = fix_input_shapes(proto, input_shapes, where)
    with naming(where):
        return _convert(proto, where, out_dir, example_inputs, mode, force, options, steps, freeze_inputs)


def _convert(
    proto: Any,
    where: str,
    out_dir: str | Path,
    example_inputs: Sequence[Any] | Mapping[str, Any] | None,
    mode: str,
    force: bool,
    options: OutputOptions,
    steps: Steps,
    freeze_inputs: Mapping[str, Any] | None,
) -> Any:
    from rlx.app.pipeline import finish_program, write_and_verify
    from rlx.app.report import write_report
    from rlx.formats.atomic import StagedDir

    shapes = reader.example_shapes(example_inputs, [i.name for i in proto.graph.input])
    frozen = {k: np.asarray(v) for k, v in (freeze_inputs or {}).items()}
    graph = reader.read(proto, shapes, frozen, name=where)
    with StagedDir(out_dir, force=force) as staged:
        program, weights = steps("lower", lambda: _lower(graph, finish_program))
        _save_model(proto, staged.path / ONNX_FILE)
        notes: list[str] = []
        reference = None
        if mode != "none":
            if has_onnxruntime():
                inputs = _example_inputs(graph, example_inputs)
                outputs = steps("onnxruntime", lambda: run_onnxruntime(proto, {**inputs, **frozen}, where))
                reference = {input_key(k): v for k, v in {**inputs, **frozen}.items()}
                reference.update({output_key(i): v for i, v in enumerate(outputs)})
                safetensors_io.write(staged.path / REFERENCE_FILE, reference)
            else:
                notes.append("parity not checked: onnxruntime is not installed (pip install onnxruntime)")
        source = {"format": "onnx", "version": 1, "producer": graph.producer, "decomposition": "onnx",
                  "opsets": {d or "ai.onnx": v for d, v in graph.opsets.items()}}  # fmt: skip
        report = write_and_verify(
            program, weights, reference, staged.path, Path(out_dir), options, steps, None, notes,
            source=source, decomposition="onnx", op_histogram=graph.op_histogram(),
            n_params=sum(int(np.asarray(a).size) for a in weights.values()),
        )  # fmt: skip
        report.node_kind = "ONNX"
        write_report(staged.path)
    return report


def _save_model(proto: Any, path: Path) -> None:
    """The model as read, for `rlx debug`; weights beyond protobuf's 2 GB go to ``model.onnx.data``."""
    import onnx

    if proto.ByteSize() < 2**31 - 2**20:
        onnx.save_model(proto, str(path))
        return
    copy = onnx.ModelProto()  # saving as external data empties the tensors it writes out
    copy.CopyFrom(proto)
    onnx.save_model(copy, str(path), save_as_external_data=True, location=f"{path.name}.data")


def _lower(graph: OnnxGraph, finish: Any) -> tuple[Program, dict[str, np.ndarray]]:
    program, weights = lower_graph(graph)
    return finish(program), weights


__all__ = ["Sym", "from_onnx", "lower_graph", "run_onnxruntime"]
