"""Runs a Program on OpenVINO: rlx's ONNX emission read from memory, weights as shared constants.

The ONNX graph is emitted with its weights declared as graph inputs (no weight bytes in it), read
by OpenVINO's ONNX front-end from memory (``Core.read_model`` on the serialized bytes; no file is
written), and every weight input is then replaced by a ``Constant`` that points at the engine's own
array (``shared_memory=True``), so the compiled models of several bindings share one host copy of
the weights.

A dynamic program is emitted once with symbolic extents and compiled once; every input-shape
binding then reuses that compiled model. Where OpenVINO cannot compile the dynamic graph, each
binding gets a static compilation of its own, as on the onnxruntime engine.

OpenVINO's CPU plugin runs in bfloat16 by default on CPUs that have it (AMX, AVX-512 BF16): the
engine always sets ``INFERENCE_PRECISION_HINT`` itself, to f32 unless a lower precision is asked
for, so a model loaded with ``precision="f32"`` computes in float32 everywhere. At int8-static the
graph is onnxruntime's quantizer's (``rlx.runtime.quantize``: QDQ around the convolutions and
products), whose quantized ops the CPU plugin runs as int8 kernels; each binding is quantized and
compiled at its own shape.

Mixed precision at bf16/f16 (``float32=``): the nodes of the named instructions are marked to
compute in float32 (``keep_float32``). The engine keeps two kinds of convolution in float32 itself
at bf16: grouped ones where OpenVINO's bf16 kernel is wrong on this CPU (a probe, ``hints``), and
any that the compiled model runs on one of OpenVINO's slow fallback kernels at the lower precision
(read from the compiled model, which is then compiled again with them kept).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rlx.errors import RlxError, UsageError, first_line
from rlx.exporters.onnx import NAN_CHECK, OPENVINO_FIXES, to_onnx
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Program
from rlx.runtime.onnx_graph import GraphEngine, all_finite, output_values, unordered_ties, with_weight_slices
from rlx.runtime.openvino_engine import require_openvino
from rlx.runtime.openvino_engine.hints import HINTS, bf16_grouped_conv_is_wrong, check_precision
from rlx.runtime.openvino_engine.keep_float32 import keep_float32
from rlx.runtime.quantize import check_quantization, quantization_graph, quantize

BF16 = dtypes.to_numpy("bf16")
# The precisions at which instructions can be kept in float32 (``float32=``).
LOWERED = ("bf16", "f16", "int8-static")
# Convolution kernels of OpenVINO's CPU plugin that are fallbacks, not tuned kernels: im2col + gemm
# and the reference loop. Without AMX, its bf16 grouped convolution with a long kernel (wav2vec2's
# positional convolution: 8 channels a group, kernel 128) runs on ``jit_gemm_bf16``, 10-50x slower
# than its float32 kernel, so at bf16 such a convolution computes in float32 instead.
SLOW_CONVOLUTION_KERNELS = ("jit_gemm", "ref")


class Compiled(NamedTuple):
    """A compiled OpenVINO model and the inputs to check for NaN and inf before each of its runs."""

    model: Any
    finite_inputs: tuple[int, ...]


class OvEngine(GraphEngine):
    """A program's weights and OpenVINO settings, shared by the compiled model of every binding."""

    name = "openvino"
    refused_calls = {
        # (OpenVINO 2026.4: torch.rand drew from [-0.5, 0.5))
        C.RandomBits: "draws random numbers, which OpenVINO computes wrongly (its unsigned 32-bit integer arithmetic)",
        C.Det: "computes a determinant, for which OpenVINO's ONNX reader has no operator",
    }
    instead = "run it with engine='numpy' or 'onnxruntime'"

    def configure(
        self,
        precision: str,
        *,
        dynamic: bool = True,
        calibration: str | Path | None = None,
        float32: Collection[str] = (),
        check_finite: bool = True,
    ) -> None:
        """``threads``: OpenVINO's inference threads (``None``: its default, one per physical core);
        ``precision``: ``f32`` / ``bf16`` / ``f16``, OpenVINO's inference-precision hint (refused
        where this CPU lacks it), or ``int8-static``: the QDQ graph of onnxruntime's static
        quantizer with the activation ranges in ``calibration`` (``rlx.runtime.quantize``), which
        OpenVINO runs as int8 kernels; ``float32``: instructions (by result name) left unquantized;
        at bf16 / f16, instructions computed in float32 (mixed precision);
        ``dynamic=False``: compile each input-shape binding on its own (static shapes) instead of
        one compiled model for all of them; ``check_finite=False``: every call runs on OpenVINO,
        its inputs unchecked and its max pooling plain, so NaN may come out as numbers (by default a
        call whose inputs hold NaN or inf runs on the numpy engine: ``OvExecutor``)."""
        self._ov = require_openvino()
        check_precision(precision)
        if not isinstance(dynamic, bool):
            raise UsageError(f"dynamic must be True or False, got {dynamic!r}")
        check_quantization(precision, calibration, float32, lowered=LOWERED)
        if not isinstance(check_finite, bool):
            raise UsageError(f"check_finite must be True or False, got {check_finite!r}")
        self.check_finite = check_finite
        self.dynamic = dynamic
        self.calibration = None if calibration is None else Path(calibration)
        self.float32 = tuple(float32)
        self._core = self._ov.Core()
        self._shared_lock = threading.Lock()  # one thread compiles the dynamic model
        self._shared: Compiled | None = None  # the compiled dynamic model, once built
        self._shared_failed = False
        self._numpy: Any = None  # the numpy engine of calls whose inputs hold NaN or inf (made on the first)
        # Convolutions found on a slow kernel at the lower precision: every later compilation keeps them.
        self._slow_convolutions: set[str] = set()

    def config(self) -> dict[str, Any]:
        """The compile_model properties: precision, latency (one stream), threads."""
        cfg: dict[str, Any] = {"INFERENCE_PRECISION_HINT": HINTS[self.precision], "PERFORMANCE_HINT": "LATENCY"}
        if self.threads is not None:
            cfg["INFERENCE_NUM_THREADS"] = self.threads
        return cfg

    def compile(self, program: Program) -> OvExecutor:
        # (int8-static: each binding is quantized at its static shape, as it was calibrated)
        shareable = self.dynamic and self.precision != "int8-static"
        if self._source.is_dynamic and shareable and not program.is_dynamic:
            shared = self._compiled_source()
            if shared is not None:  # one compiled model serves every binding
                return OvExecutor(program, shared, self)
        return OvExecutor(program, self._compile_program(program), self)

    def on_numpy(self, program: Program) -> Any:
        """The numpy engine's executor of ``program``: the runs whose inputs hold NaN or inf, which
        OpenVINO's kernels would turn into numbers (see ``OvExecutor``)."""
        if self.numpy_engine is None:
            raise RlxError(f"the OpenVINO engine of {program.name} has no numpy engine for inputs holding NaN or inf")
        with self._shared_lock:
            if self._numpy is None:
                self._numpy = self.numpy_engine()
        return self._numpy.compile(program)

    def _compiled_source(self) -> Compiled | None:
        with self._shared_lock:
            if self._shared is None and not self._shared_failed:
                try:
                    self._shared = self._compile_program(self._source)
                except RlxError:  # a graph OpenVINO cannot shape dynamically: one compilation per binding
                    self._shared_failed = True
            return self._shared

    def _compile_program(self, program: Program, traced: Collection[str] = ()) -> Compiled:
        """``program`` compiled; ``traced``: values (by name) made outputs too, after the program's
        own, where OpenVINO's model has a tensor for them. A convolution that the lower precision
        runs on a slow kernel is kept in float32 from then on, and the model compiled again."""
        while True:
            model, finite = self.ov_model(program)
            if traced:
                wanted = set(traced)
                model.add_outputs([out for op in model.get_ordered_ops()
                                   if op.get_type_name() not in ("Parameter", "Constant", "Result")
                                   for out in op.outputs() if out.get_names() & wanted])  # fmt: skip
            try:
                compiled = self._core.compile_model(model, "CPU", self.config())
            except Exception as e:
                raise RlxError(f"OpenVINO could not compile {program.name}: {ov_reason(e)}") from e
            self.count_compilation()
            slow = _slow_convolutions(compiled, program) if self.precision in ("bf16", "f16") else set()
            if not slow - self._slow_convolutions:  # (one kept that still runs slow is not tried again)
                return Compiled(compiled, finite)
            self._slow_convolutions |= slow  # (for every later binding too)

    def ov_model(self, program: Program) -> tuple[Any, tuple[int, ...]]:
        """The OpenVINO model of ``program`` with the weights as shared constants (not compiled),
        and the positions of the inputs to check for NaN and inf before each run: every float input
        the caller passes (state is not checked: it is what an earlier run returned). Its max
        pooling is plain and checked; plain at f16. At int8-static the weights are inside the
        quantized graph instead."""
        import onnx

        carried = {s.name for s in program.state}
        floats = [k for k, v in enumerate(program.inputs) if dtypes.is_float(v.dtype) and v.name not in carried]
        finite = tuple(floats) if self.check_finite else ()
        if self.precision == "int8-static":
            return self._quantized_model(program), finite
        scalars = {w.name: self._arrays[w.name] for w in program.weights if not w.shape}
        # At f16 the check's sum overflows float16 on ordinary activations (every run would be
        # flagged and run twice), and OpenVINO turns the mask's NaN constant into 65504 anyway:
        # that precision pools plainly, as the ONNX MaxPool does.
        pooling_nan = False if self.precision == "f16" or not self.check_finite else "check"
        options = replace(OPENVINO_FIXES, io_bf16_as_f32=True, external_weights=True, weight_values=self._arrays,
                          pooling_nan=pooling_nan, unique_sort_keys=True)  # fmt: skip
        proto = to_onnx(program, scalars, options=options)
        arrays = with_weight_slices(proto, self._arrays)  # (the weights, and the experts' matrices as views of them)
        graph = proto.graph
        # The graph's inputs are the program's, in order (a bfloat16 one renamed: it crosses as float32).
        renamed = {i.name: v.name for i, v in zip(graph.input, program.inputs) if i.name != v.name}
        external = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        kept = [t for t in graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        for t in external:  # weights enter as inputs, become shared constants below
            graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        model = self._read(proto.SerializeToString(), program, unordered_ties(proto))
        keep = set(self.float32) | self._slow_convolutions if self.precision in ("bf16", "f16") else set()
        if self.precision == "bf16":
            keep |= _wrong_bf16_convolutions(program)
        if keep:
            try:
                model = keep_float32(self._core, model, keep, arrays, self.precision)
            except Exception as e:  # (OpenVINO's graph API or IR reader refusing the marked model)
                raise RlxError(
                    f"OpenVINO could not keep {program.name}'s instructions in float32: {ov_reason(e)}"
                ) from e
        ov = self._ov
        for param in list(model.get_parameters()):
            name = param.output(0).get_any_name()
            if name in renamed:  # the executor feeds inputs by the program's names
                param.output(0).get_tensor().add_names({renamed[name]})
            if name not in arrays:
                continue
            arr = arrays[name]
            const = ov.op.Constant(_shared_tensor(ov, arr), shared_memory=True)
            param.output(0).replace(const.output(0))
            model.remove_parameter(param)
        model.validate_nodes_and_infer_types()
        return _fold_constants(model), finite

    def _quantized_model(self, program: Program) -> Any:
        """int8-static: the graph with its weights embedded, quantized by onnxruntime's static
        quantizer (QDQ), read by OpenVINO, whose CPU plugin runs the quantized convolutions and
        products as int8 kernels."""
        proto = quantization_graph(program, self._arrays)
        quantized = quantize(proto, program.name, self.precision, self.calibration, self.float32)
        model = self._read(quantized, program, unordered_ties(proto))  # (the quantizer keeps tensor names)
        graph_inputs = [i.name for i in proto.graph.input]
        for param, name, value in zip(model.get_parameters(), graph_inputs, program.inputs):
            if name != value.name:  # (a bfloat16 input, renamed: it crosses as float32)
                param.output(0).get_tensor().add_names({value.name})
        return model  # (not folded: folding would compute the quantized weights back in float32)

    def _read(self, serialized: bytes, program: Program, unordered: frozenset[str] = frozenset()) -> Any:
        """``unordered``: the TopKs (by index output) whose equal values may come in any order."""
        try:
            model = self._core.read_model(serialized)
        except Exception as e:
            raise RlxError(f"OpenVINO could not read {program.name}'s ONNX graph: {ov_reason(e)}") from e
        for op in model.get_ordered_ops():
            # ONNX's TopK keeps the lower index first among equal values (rlx's sorts rely on it,
            # as PyTorch's stable sort does); OpenVINO's reader builds TopK unstable, which
            # reordered ties (65 of 80 sort indices of rows of repeated values were wrong). Its
            # stable TopK is quadratic in the lane (a top-50 of 50257: 31 ms, 0.35 unstable), so
            # the TopKs whose ties may come in any order (a top-k's, as in PyTorch, and those on
            # a sort's unique keys: GraphOptions.unique_sort_keys) stay unstable.
            if op.get_type_name() == "TopK" and "stable" in op.get_attributes():
                op.set_attribute("stable", not op.output(1).get_names() & unordered)
        return model


def _fold_constants(model: Any) -> Any:
    """``model`` with what depends on constants only computed once, by OpenVINO's own constant
    folding. Its CPU plugin computes such a subgraph wrongly where it has an ``Abs`` over a 1-d
    value: |-w| came back as -w, |2 - w| as 2 - w (a weight ``w``; reflection padding's
    |2 - arange| read zeros), while the same subgraph folded by this pass is right."""
    from openvino import passes

    manager = passes.Manager()
    manager.register_pass(passes.ConstantFolding())
    manager.run_passes(model)
    return model


def trace_program(
    program: Program,
    weights: Mapping[str, np.ndarray],
    inputs: list[np.ndarray],
    names: Sequence[str],
    precision: str,
    options: Mapping[str, Any],
) -> dict[str, np.ndarray]:
    """The static ``program``'s outputs and the values ``names`` (where OpenVINO's model has a tensor
    for them), run once on ``inputs`` at ``precision`` (tune traces int8-static on onnxruntime,
    which runs the same quantized graph). Each traced value is a model output, which keeps OpenVINO
    from fusing it away and its producer from being a fused op's interior, so the numbers are close
    to, not the same as, an untraced run's: enough to rank where the precision loses the accuracy."""
    engine = OvEngine(program, weights, precision=precision, **dict(options))
    built = engine._compile_program(program, traced=names)
    values = OvExecutor(program, built, engine).infer(inputs)
    found = {name: np.asarray(value) for port, value in zip(built.model.outputs, values) for name in port.get_names()}
    outputs = [v.name for v in output_values(program)]
    return {name: found[name] for name in [*outputs, *names] if name in found}


_OV_NODE = re.compile(r"(?:ONNX node '<Node\(\w+\): |node with name '|friendly_name ')([^:'>]+)")


def ov_reason(e: BaseException) -> str:
    """OpenVINO's reason for an exception, in one line: its messages open with the source
    locations they passed through ("Exception from src/inference/src/cpp/core.cpp:117:") and end
    with the reason; with the rlx instruction whose node it names (its nodes are named after them)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    reasons = [
        ln for ln in lines if not ln.startswith(("Exception from", "Check '", "Summary:", "--", "While validating"))
    ]
    reason = reasons[-1] if reasons else first_line(e)
    node = next((m.group(1) for ln in lines if (m := _OV_NODE.search(ln))), None)
    return f"{reason} (at {node})" if node and node not in reason else reason


def _wrong_bf16_convolutions(program: Program) -> set[str]:
    """The grouped convolutions (2–15 channels a group) of ``program`` to compute in float32 at
    bf16, where OpenVINO's bf16 grouped convolution is wrong on this CPU (``hints``); none elsewhere."""
    values = program.values()
    grouped = {
        ins.result
        for ins in program.instrs
        if isinstance(ins.call, C.Conv)
        and not ins.call.transposed
        and ins.call.groups > 1
        and _grouped_width(values[ins.call.weight.name].shape)
    }
    return grouped if grouped and bf16_grouped_conv_is_wrong() else set()


def _slow_convolutions(compiled: Any, program: Program) -> set[str]:
    """The convolutions of ``program`` that OpenVINO's ``compiled`` model runs below float32 on a
    fallback kernel (``SLOW_CONVOLUTION_KERNELS``), by instruction (a runtime node lists the nodes
    it was fused from; their names start with their instruction's)."""
    convolutions = {ins.result for ins in program.instrs if isinstance(ins.call, C.Conv)}
    slow: set[str] = set()
    try:
        nodes = compiled.get_runtime_model().get_ordered_ops()
    except Exception:  # (an OpenVINO that cannot show its kernels: the guard is for speed, load as is)
        return slow
    for node in nodes:
        info = node.get_rt_info()
        if (
            info["layerType"].astype(str) == "Convolution"
            and info["primitiveType"].astype(str).startswith(SLOW_CONVOLUTION_KERNELS)
            and info["runtimePrecision"].astype(str) != "f32"
        ):
            fused = info["originalLayersNames"].astype(str).split(",")
            slow |= {name.split(":", 1)[0] for name in fused} & convolutions
    return slow


def _grouped_width(weight_shape: tuple[Any, ...]) -> bool:
    """Whether a convolution weight ``[out, in / groups, *kernel]`` has 2–15 channels a group."""
    width = weight_shape[1]
    return isinstance(width, int) and 1 < width < 16


def _shared_tensor(ov: Any, arr: np.ndarray) -> Any:
    """An OpenVINO tensor over ``arr``'s memory (read-only, memory-mapped weights included; this
    constructor does not ask for a writeable array, OpenVINO never writes a constant)."""
    if arr.dtype == BF16:  # numpy has no bfloat16 of its own: the bits, typed as OpenVINO's bf16
        return ov.Tensor(arr.view(np.uint16), list(arr.shape), ov.Type.bf16)
    kind = ov.Type.boolean if arr.dtype == np.bool_ else ov.Type(arr.dtype)
    return ov.Tensor(arr, list(arr.shape), kind)


def _input_tensor(ov: Any, arr: np.ndarray) -> Any:
    """An OpenVINO tensor over an input array's memory (a copy only where it is strided)."""
    if not arr.flags.c_contiguous:  # (not ascontiguousarray: it makes a 0-d array 1-d)
        arr = np.ascontiguousarray(arr)
    if arr.flags.writeable and arr.dtype != np.bool_:  # (the short constructor: half the time)
        return ov.Tensor(arr, shared_memory=True)
    return _shared_tensor(ov, arr)


class OvExecutor:
    """One static-shaped Program on a compiled OpenVINO model (its own, or the dynamic one shared
    by every binding); one infer request per calling thread.

    OpenVINO's kernels turn NaN into a number in many places (exp, relu, clamp, softmax, its max
    pooling; docs/engines.md), where PyTorch propagates it. So a run whose float inputs hold NaN
    or inf runs on the numpy engine instead (made on the first such run), as does one where a
    pooled value turns out not finite: the compiled model pools plainly and also returns the sum
    of every pooled input (pooling the NaN mask as well cost OpenVINO 10-20% on a ResNet)."""

    def __init__(self, program: Program, built: Compiled, engine: OvEngine) -> None:
        self.program = program
        self._compiled = compiled = built.model
        self._finite_inputs = built.finite_inputs
        self._engine = engine
        self._on_numpy: Any = None  # the numpy engine's executor
        self._on_numpy_lock = threading.Lock()
        names = [v.name for v in program.inputs]
        position = {n: k for k, n in enumerate(names)}
        self._feed: list[int] = []
        for port in compiled.inputs:
            found = [n for n in port.get_names() if n in position]
            if not found:
                raise RlxError(
                    f"OpenVINO's model of {program.name} has an input {port.get_any_name()!r} it does not declare"
                )
            self._feed.append(position[found[0]])
        self._bf16_inputs = {k for k, v in enumerate(program.inputs) if v.dtype == "bf16"}
        self._want = [dtypes.to_numpy(v.dtype) for v in output_values(program)]
        self._checked = (
            engine.check_finite
            and len(compiled.outputs) > len(self._want)
            and NAN_CHECK in compiled.outputs[-1].get_names()
        )
        self._local = threading.local()
        # The binding's own infer, under the Python wrapper's input dispatch (about 5 µs of a small
        # model's 15 µs call): the inputs are checked arrays already, handed over as tensors on
        # their memory. (The public call where an OpenVINO version has no such method.)
        binding = getattr(engine._ov, "_pyopenvino", None)
        self._binding_infer = getattr(getattr(binding, "InferRequest", None), "infer", None)

    def _request(self) -> Any:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self._compiled.create_infer_request()
        return request

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run on arrays already checked against the program's inputs (in order)."""
        for k in self._finite_inputs:
            if not all_finite(inputs[k]):
                return self.on_numpy().run(inputs)
        values = self.infer(inputs)
        if self._checked and not np.isfinite(values[-1]).all():
            return self.on_numpy().run(inputs)
        out = []
        for arr, want in zip(values, self._want):
            arr = np.asarray(arr)
            if arr.dtype != want:  # bfloat16 outputs cross as float32 (exactly); OpenVINO's bool/u8 outputs
                arr = arr.astype(want)
            out.append(arr)
        return out

    def infer(self, inputs: list[np.ndarray]) -> tuple[Any, ...]:
        """Every output of the compiled model, as OpenVINO returns them, on ``inputs`` (in program order)."""
        arrays = [inputs[k].astype(np.float32) if k in self._bf16_inputs else inputs[k] for k in self._feed]
        try:
            if self._binding_infer is not None:
                try:  # (outputs copied out of the request, in the compiled model's order)
                    ov = self._engine._ov
                    if len(arrays) == 1:  # (a lone tensor, not a dict: a microsecond less a call)
                        feed: Any = _input_tensor(ov, arrays[0])
                    else:
                        feed = {port: _input_tensor(ov, arr) for port, arr in enumerate(arrays)}
                    return tuple(self._binding_infer(self._request(), feed, False, False).values())
                except TypeError:  # another OpenVINO's binding takes other arguments: the public call from now on
                    self._binding_infer = None
            results = self._request().infer(dict(enumerate(arrays)), share_inputs=True, share_outputs=False)
        except Exception as e:
            raise RlxError(f"runtime error in OpenVINO running {self.program.name}: {ov_reason(e)}") from e
        return results.to_tuple()

    def on_numpy(self) -> Any:
        """The numpy engine's executor of this program (made on the first run that needs it)."""
        with self._on_numpy_lock:
            if self._on_numpy is None:
                self._on_numpy = self._engine.on_numpy(self.program)
            return self._on_numpy
