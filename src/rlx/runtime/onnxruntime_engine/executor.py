"""Runs a Program on onnxruntime: one ONNX graph and one InferenceSession per static program.

The serialized graph holds no weight bytes. A loaded bundle's weights are external data that
points into its ``weights.safetensors`` (offset and length of each tensor), which onnxruntime
memory-maps itself; weights held in memory instead are handed over as external initializers, which
onnxruntime copies into each session (measured with onnxruntime 1.32). Products read their weight
in its stored layout (``weights_in_place``: no folded transposed copy). So a loaded model holds its
weights about once: onnxruntime packs each product's weight for its GEMM and then drops its mapping
of the original (``prepack=False``: no packing, the mapped file's pages are used and shared).
onnxruntime's graph optimizer runs at ``ORT_ENABLE_ALL`` (constant folding, Conv+BatchNorm,
LayerNorm / attention / GELU fusions) unless told otherwise.
"""

from __future__ import annotations

import functools
import math
import tempfile
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from threading import get_ident
from typing import Any

import numpy as np

from rlx.errors import InputError, RlxError, UsageError, first_line, summary
from rlx.exporters.onnx import NAN_CHECK, GraphOptions, to_onnx
from rlx.exporters.onnx.registry import DEFAULT_CONTRIB, ONNX_TYPES, check_contrib
from rlx.formats.safetensors_io import file_region
from rlx.ir import dtypes
from rlx.ir.program import Program, specialize
from rlx.runtime.binding import bind_symbols
from rlx.runtime.onnx_graph import (
    GraphEngine,
    all_finite,
    check_program,
    finite,
    finite_inputs,
    host_weights,
    output_values,
    with_weight_slices,
)
from rlx.runtime.onnxruntime_engine import require_onnxruntime
from rlx.runtime.onnxruntime_engine.pad_channels import channel_block, guard_block_padding, pad_channels
from rlx.runtime.onnxruntime_engine.weights_in_place import read_weights_in_place
from rlx.runtime.quantize import check_quantization

OPTIMIZATION_LEVELS = ("all", "extended", "basic", "none")


class OrtEngine(GraphEngine):
    """A program's weights as onnxruntime values, shared by the session of every binding."""

    name = "onnxruntime"

    def configure(
        self,
        precision: str,
        *,
        optimization: str = "all",
        pooling_nan: bool = True,
        contrib: Collection[str] = DEFAULT_CONTRIB,
        calibration: str | Path | None = None,
        float32: Collection[str] = (),
        prepack: bool = True,
        pad_channels: bool = False,
    ) -> None:
        """``optimization``: onnxruntime's graph optimization level (all / extended / basic / none);
        ``pooling_nan=False``: max pooling skips NaN as onnxruntime's MaxPool does, instead of
        propagating it as PyTorch does (saves the check of each pooled input; see ``OrtExecutor``);
        ``contrib``: onnxruntime's fused com.microsoft operators to emit where they are faster
        (``"attention"``: an encoder's Attention as one MultiHeadAttention; ``"causal_attention"``:
        causal and grouped-query ones too); ``()`` for standard operators only; ``precision="int8"``:
        the MatMul/Gemm weights quantized to int8 (``rlx.runtime.quantize``);
        ``precision="int8-static"``: static QDQ quantization with the activation ranges in
        ``calibration`` (a file ``calibrate`` wrote); ``float32``: instructions (by result name)
        left unquantized at int8 / int8-static (mixed precision);
        ``prepack=False``: onnxruntime multiplies by the weights where they lie (a loaded bundle's
        mapped file, whose pages every process running the model shares) instead of packing each
        product's weight once into memory of its own (faster products: about 1.6× at 4 rows);
        ``pad_channels=True``: convolution channels off onnxruntime's channel block padded to it at
        float32, so its blocked layout is kept (``rlx.runtime.onnxruntime_engine.pad_channels``;
        faster or slower by model and batch: ``rlx tune`` tries it)."""
        self._ort = require_onnxruntime()
        if optimization not in OPTIMIZATION_LEVELS:
            raise UsageError(
                f"unknown onnxruntime optimization level {optimization!r}; choose {', '.join(OPTIMIZATION_LEVELS)}"
            )
        if not isinstance(prepack, bool):
            raise UsageError(f"prepack must be True or False, got {prepack!r}")
        if not isinstance(pooling_nan, bool):
            raise UsageError(f"pooling_nan must be True or False, got {pooling_nan!r}")
        if not isinstance(pad_channels, bool):
            raise UsageError(f"pad_channels must be True or False, got {pad_channels!r}")
        contrib = check_contrib(contrib)
        if precision not in ("f32", "int8", "int8-static"):
            raise UsageError(f"the onnxruntime engine runs f32, int8 and int8-static, not {precision!r}")
        check_quantization(precision, calibration, float32)
        self.optimization = optimization
        self.pooling_nan = pooling_nan
        self.contrib = contrib
        self.calibration = None if calibration is None else Path(calibration)
        self.float32 = tuple(float32)
        self.prepack = prepack
        self.pad_channels = pad_channels

    @functools.cached_property
    def _values(self) -> dict[str, Any]:
        """The weights as onnxruntime values, made once and shared by every session."""
        return {name: _ort_value(self._ort, arr) for name, arr in self._arrays.items()}

    def session_options(self) -> Any:
        ort = self._ort
        opts = ort.SessionOptions()
        if self.threads is not None:
            opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        levels = {
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        }
        opts.graph_optimization_level = levels[self.optimization]
        opts.log_severity_level = 3  # warnings about unused initializers etc. are not the user's business
        if not self.prepack:
            opts.add_session_config_entry("session.disable_prepacking", "1")
        return opts

    def compile(self, program: Program) -> OrtExecutor:
        executor = OrtExecutor(program, self)
        self.count_compilation()
        return executor

    @property
    def arrays(self) -> Mapping[str, np.ndarray]:
        return self._arrays

    def array(self, name: str) -> np.ndarray:
        return self._arrays[name]

    def weight_values(self, names: list[str], arrays: Mapping[str, np.ndarray] | None = None) -> list[Any]:
        """The values of ``names``; one that is not a weight (an expert's matrix, a view of one) is
        made from ``arrays`` once and kept with the weights' (onnxruntime reads them for as long as
        a session lives)."""
        for n in names:
            if n not in self._values:
                self._values[n] = _ort_value(self._ort, (arrays or self._arrays)[n])
        return [self._values[n] for n in names]


def _ort_value(ort: Any, arr: np.ndarray) -> Any:
    if arr.dtype == dtypes.to_numpy("bf16"):  # numpy has no bfloat16 of its own: hand over the bits
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(arr.view(np.uint16), ONNX_TYPES["bf16"])
    return ort.OrtValue.ortvalue_from_numpy(arr)


class OrtExecutor:
    """One static-shaped Program as an onnxruntime session, ready to run many times.

    PyTorch's max pooling propagates NaN, onnxruntime's MaxPool skips it. Pooling the NaN mask
    too costs a second pooling per MaxPool and breaks onnxruntime's NCHWc conv → pool chains, so
    the session runs the plain MaxPool and checks each pooled input's sum (``pooling_nan="check"``),
    or, where only non-finite graph inputs can make a pooled input NaN, checks those inputs before
    the run: on the rare run where one is not finite, the inputs run through a second session,
    built then, whose graph pools the NaN mask (exact for every input). At int8 / int8-static,
    inputs holding NaN or inf run through that second session too, in float32 (quantizing an
    activation turns NaN into a number)."""

    def __init__(
        self, program: Program, engine: OrtEngine, extra_outputs: list[str] | None = None, *, exact: bool = False
    ) -> None:
        self.program = program
        self._engine, self._extra_outputs = engine, extra_outputs
        ort = engine._ort
        # The exact graph of a quantized engine is float32: quantizing an activation turns NaN into
        # a number, so a run whose inputs hold NaN or inf gets PyTorch's answer only in float32.
        int8 = engine.precision != "f32" and not exact
        model = emit_model(program, engine, exact=exact)
        checked = [o.name for o in model.graph.output if o.name == NAN_CHECK]
        # The inputs a run must find finite, else it goes to the exact graph: at int8 every one
        # (quantizing turns NaN into a number), else those the emitter named (max pooling's NaN).
        self._finite_inputs = tuple(range(len(program.inputs))) if int8 else finite_inputs(model, program)
        if extra_outputs:  # intermediate values to return too (the per-node debugger)
            import onnx

            known = {o.name for o in model.graph.output}
            produced = {o for node in model.graph.node for o in node.output}
            # Typed: onnxruntime infers an untyped graph output's type, but not after quantize_dynamic
            # ("Invalid tensor data type 0"); every tensor named after an instruction has its dtype.
            typed = {ins.result: ONNX_TYPES[ins.dtype] for ins in program.instrs}
            for name in extra_outputs:
                if name not in known and name in produced:  # (a value the emitter folded away has no tensor)
                    out = onnx.helper.make_tensor_value_info(name, typed[name], None) if name in typed else None
                    model.graph.output.append(out or onnx.ValueInfoProto(name=name))
        self.output_names = [o.name for o in model.graph.output if o.name != NAN_CHECK]
        self._check = checked  # [NAN_CHECK] when the graph has one
        self._exact: OrtExecutor | None = None
        self._exact_lock = threading.Lock()
        self._input_names = [i.name for i in model.graph.input]
        self._one_input = self._input_names[0] if len(self._input_names) == 1 else None
        opts = engine.session_options()
        arrays = with_weight_slices(model, engine.arrays)
        names = _point_at_files(model, arrays, opts)
        if names:  # weights in memory: onnxruntime copies them into the session
            opts.add_external_initializers(names, engine.weight_values(names, arrays))
        if int8:
            from rlx.runtime.quantize import quantize

            serialized = quantize(model, program.name, engine.precision, engine.calibration, engine.float32)
        else:
            serialized = model.SerializeToString()
        # The exact graph runs without onnxruntime's blocked layout, which computes a channel block's
        # padding from a convolution's input too (0 × inf is NaN there; a reader's zero weights
        # then spread it: ``guard_block_padding``).
        disabled = {"disabled_optimizers": ["NchwcTransformer"]} if exact else {}
        try:
            self._session = ort.InferenceSession(serialized, opts, providers=["CPUExecutionProvider"], **disabled)
        except Exception as e:
            raise RlxError(f"onnxruntime could not load {program.name}: {summary(e)}") from e
        self._bf16_inputs = [v.dtype == "bf16" for v in program.inputs]
        self._want = [dtypes.to_numpy(v.dtype) for v in output_values(program)]
        self._fetch = self.output_names[: len(self._want)] + self._check
        # onnxruntime's InferenceSession.run re-validates the feed's names (about 2 µs a call, a
        # fifth of a small MLP's run); the inputs are checked already, so the binding's own run
        # is called where the session has one (public API otherwise).
        binding: Any = getattr(self._session, "_sess", self._session)
        self._run_session = binding.run if hasattr(binding, "run") else self._session.run
        # No bfloat16 crossing the boundary: onnxruntime's own (fresh, writable) arrays are the outputs.
        self._plain = not any(self._bf16_inputs) and all(w != dtypes.to_numpy("bf16") for w in self._want)
        # Runs bound to output arrays (``bound_run``), one per thread that runs this session; None
        # where the outputs are not for binding.
        self._bound_outputs = self._bindable_outputs()
        self._bound_runs: dict[int, BoundRun] | None = {} if self._bound_outputs is not None else None
        self._bound_lock = threading.Lock()

    def _bindable_outputs(self) -> list[tuple[tuple[int, ...], np.dtype]] | None:
        """The shape and dtype of each fetched output, where the run can be bound to arrays of its
        own: plain, static, non-empty outputs of BOUND_OUTPUT_BYTES in all at most."""
        if not self._plain or self._extra_outputs:
            return None
        symbolic = [v.shape for v in output_values(self.program)] + [()] * len(self._check)
        shapes = [tuple(d for d in shape if isinstance(d, int)) for shape in symbolic]
        if shapes != symbolic:  # (a symbolic dimension: not static)
            return None
        kinds = [*self._want, np.dtype(np.float32)]
        sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in zip(shapes, kinds)]
        if 0 in sizes or sum(sizes) > BOUND_OUTPUT_BYTES:
            return None
        return list(zip(shapes, kinds))

    def _bind_this_thread(self) -> BoundRun | None:
        """This thread's bound run, made on its first call; None for threads past BOUND_THREADS
        (they run unbound), and from then on for every thread where onnxruntime cannot bind."""
        with self._bound_lock:
            runs, outputs = self._bound_runs, self._bound_outputs
            if runs is None or outputs is None or len(runs) >= BOUND_THREADS:
                return None
            run = bound_run(self._session, self._input_names, self._fetch, outputs)
            if run is None:
                self._bound_runs = None
            else:
                runs[get_ident()] = run
            return run

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run on arrays already checked against the program's inputs (in order)."""
        for k in self._finite_inputs:
            if not all_finite(inputs[k]):
                return self.exact().run(inputs)
        if self._plain:  # the common case, kept short: this is per-call overhead on small models
            runs = self._bound_runs
            bound = None if runs is None else runs.get(get_ident()) or self._bind_this_thread()
            if bound is not None:
                try:
                    results = bound(inputs)
                except Exception as e:
                    raise RlxError(f"runtime error in onnxruntime running {self.program.name}: {first_line(e)}") from e
                if self._check and not math.isfinite(results.pop()):
                    return self.exact().run(inputs)
                return results
            one = self._one_input  # (a dict display costs a quarter of dict(zip(...)))
            feed = {one: inputs[0]} if one is not None else dict(zip(self._input_names, inputs))
            try:
                results = self._run_session(self._fetch, feed, None)
            except Exception as e:
                raise RlxError(f"runtime error in onnxruntime running {self.program.name}: {first_line(e)}") from e
            if self._check and not math.isfinite(results.pop()):
                return self.exact().run(inputs)
            return results
        return self.run_named(inputs)[: len(self._want)]

    def exact(self) -> OrtExecutor:
        """The session whose graph pools the NaN mask (built on the first run that needs it)."""
        with self._exact_lock:
            if self._exact is None:
                self._exact = OrtExecutor(self.program, self._engine, self._extra_outputs, exact=True)
            return self._exact

    def run_named(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The program outputs, then any extra outputs asked for, in ``output_names`` order."""
        if not finite([inputs[k] for k in self._finite_inputs]):
            return self.exact().run_named(inputs)
        feed = {
            name: (arr.astype(np.float32) if bf16 else arr)
            for name, arr, bf16 in zip(self._input_names, inputs, self._bf16_inputs)
        }
        try:
            results = self._session.run(self.output_names + self._check, feed)
        except Exception as e:
            raise RlxError(f"runtime error in onnxruntime running {self.program.name}: {first_line(e)}") from e
        if self._check and not math.isfinite(results.pop()):
            return self.exact().run_named(inputs)
        out = []
        for k, r in enumerate(results):
            arr = np.asarray(r)
            if k < len(self._want) and arr.dtype != self._want[k]:
                arr = arr.astype(self._want[k])  # bfloat16 outputs cross the boundary as float32 (exactly)
            out.append(arr if arr.flags.writeable else arr.copy())
        return out


# Small outputs are written into arrays bound once and copied out: the copy costs less than
# onnxruntime's own output allocation and feed checks (about 1 µs a call, measured with onnxruntime
# 1.32); past about 48 KB the copy costs more.
BOUND_OUTPUT_BYTES = 32 * 1024
BOUND_THREADS = 8  # threads with a bound run of their own per session; any others run unbound
BoundRun = Callable[[list[np.ndarray]], list[np.ndarray]]


def bound_run(
    session: Any, input_names: list[str], output_names: list[str], outputs: list[tuple[tuple[int, ...], np.dtype]]
) -> BoundRun | None:
    """A run of ``session`` (an ``InferenceSession``) bound to output arrays of its own
    (onnxruntime's IOBinding): each call binds the inputs where they lie, runs, and returns copies
    of the outputs, which the next run overwrites. For one thread only. None where this
    onnxruntime's binding API is not the one measured."""
    raw: Any = getattr(session, "_sess", None)
    try:
        from onnxruntime.capi import _pybind_state as C

        cpu = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
        io = C.SessionIOBinding(raw)
        buffers = [np.empty(shape, dtype) for shape, dtype in outputs]
        for name, buf in zip(output_names, buffers):
            io.bind_ortvalue_output(name, C.OrtValue.ortvalue_from_numpy(buf, cpu))
        run, options, bind = raw.run_with_iobinding, C.RunOptions(), io.bind_input
    except (ImportError, AttributeError, TypeError):
        return None
    # (the closures keep ``buffers`` alive, which the binding points into; arrays are bound where
    # they lie, without a copy)
    if len(input_names) == 1 and len(buffers) == 1:  # the common case, kept short
        (name,), (out,) = input_names, buffers

        def run_one(inputs: list[np.ndarray]) -> list[np.ndarray]:
            bind(name, inputs[0])
            run(io, options)
            return [out.copy()]

        return run_one

    def run_all(inputs: list[np.ndarray]) -> list[np.ndarray]:
        for name, arr in zip(input_names, inputs):
            bind(name, arr)
        run(io, options)
        return [b.copy() for b in buffers]

    return run_all


def _point_at_files(model: Any, arrays: Mapping[str, np.ndarray], opts: Any) -> list[str]:
    """Point each external initializer that lies in a weights file read by ``safetensors_io`` (a
    loaded bundle's, memory-mapped) at its bytes in that file, which onnxruntime maps itself: no
    copy. Returns the names of the others (weights in memory), which must be handed over."""
    folder: Path | None = None
    rest = []
    for t in model.graph.initializer:
        if t.data_location != 1:  # (onnx.TensorProto.EXTERNAL)
            continue
        region = file_region(arrays[t.name])
        if region is None or (folder is not None and region[0].parent != folder):
            rest.append(t.name)
            continue
        folder = region[0].parent
        del t.external_data[:]
        for key, value in (("location", region[0].name), ("offset", region[1]), ("length", arrays[t.name].nbytes)):
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
    if folder is not None:  # (a graph read from bytes finds its external data here)
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    return rest


def emit_model(program: Program, engine: OrtEngine, *, exact: bool = False) -> Any:
    """The ONNX graph the engine runs for ``program`` (static), as an ``onnx.ModelProto``: weights
    external (the engine's own arrays) at f32, embedded for the int8 precisions (quantization
    reads them); ``exact``: the graph whose max pooling propagates NaN (see ``OrtExecutor``)."""
    scalars = {w.name: engine.array(w.name) for w in program.weights if not w.shape}
    pooling_nan = engine.pooling_nan and (True if exact else "check")
    int8 = engine.precision != "f32"
    if int8:
        scalars = dict(engine.arrays)
    if "transposed_weights" in engine.contrib and not int8:  # (quantization wants plain MatMuls)
        program = read_weights_in_place(program)
    options = GraphOptions(io_bf16_as_f32=True, external_weights=not int8, pooling_nan=pooling_nan,
                           contrib=engine.contrib, weight_values=engine.arrays,
                           blocked_layout=channel_block() > 1 and not int8, top_k_orders_nan=True)  # fmt: skip
    model = to_onnx(program, scalars, options=options)
    if not exact and not int8:  # (the exact graph: NaN and inf meet no padding; int8 checks every input)
        arrays = with_weight_slices(model, engine.arrays)
        guard_block_padding(model, program, arrays)
        if engine.pad_channels:
            pad_channels(model, program, arrays)
    return model


def calibrate_program(
    program: Program, weights: Mapping[str, np.ndarray], sets: Sequence[list[np.ndarray]], path: Path
) -> int:
    """int8-static's calibration: the activation ranges of ``program`` run on ``sets`` (each the
    inputs in program order) written to ``path``. Sets of different shapes (a dynamic program) are
    run on the graph of their own shapes, and each tensor's range is the widest any of them saw:
    one set of ranges serves every binding. A set with NaN or inf in an input is left out: it sets no
    range (a run on such inputs goes to the float32 graph anyway). Returns how many sets were used."""
    from rlx.runtime.quantize import calibrate, merge_ranges, quantization_graph

    check_program(program, None)
    usable = [inputs for inputs in sets if finite(inputs)]
    if not usable:
        raise InputError(
            f"no input set to calibrate int8-static on: each of the {len(sets)} given holds NaN or inf; "
            "give inputs like those the model will see"
        )
    arrays = host_weights(program, weights)
    by_shape: dict[tuple[tuple[int, ...], ...], list[list[np.ndarray]]] = {}
    for inputs in usable:
        by_shape.setdefault(tuple(a.shape for a in inputs), []).append(inputs)
    with tempfile.TemporaryDirectory(prefix="rlx-calibrate-") as tmp:
        parts = []
        for k, group in enumerate(by_shape.values()):
            static = specialize(program, bind_symbols(program, list(group[0]))) if program.is_dynamic else program
            model = quantization_graph(static, arrays)
            names = [i.name for i in model.graph.input]
            bf16 = [v.dtype == "bf16" for v in static.inputs]
            feeds = [{n: (a.astype(np.float32) if b else a) for n, a, b in zip(names, s, bf16)} for s in group]
            parts.append(Path(tmp) / f"ranges.{k}.json")
            calibrate(model, feeds, parts[-1], program.name)
        merge_ranges(parts, path)
    return len(usable)


def trace_program(
    program: Program,
    weights: Mapping[str, np.ndarray],
    inputs: list[np.ndarray],
    names: Sequence[str],
    precision: str,
    options: Mapping[str, Any],
) -> dict[str, np.ndarray]:
    """The static ``program``'s outputs and the values ``names`` (where the graph has a tensor for
    them), run once on ``inputs`` at ``precision``: the per-node view of where a lower precision
    loses accuracy."""
    engine = OrtEngine(program, weights, precision=precision, **dict(options))
    executor = OrtExecutor(program, engine, extra_outputs=list(names))
    return dict(zip(executor.output_names, executor.run_named(inputs)))
