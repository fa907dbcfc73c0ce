"""int8 through onnxruntime's quantizer, two ways (the onnxruntime engine runs both, the OpenVINO
engine int8-static, whose QDQ graph its CPU plugin runs as int8 kernels):

- ``int8``: onnxruntime's dynamic quantization of the MatMul/Gemm weights (``quantize_dynamic``:
  int8 weights, activations quantized per call), the rest left in float (nothing for a convnet);
- ``int8-static``: onnxruntime's static QDQ quantization (``quantize_static``) of the convolutions
  and products: weights int8 per output channel, activations uint8 with fixed ranges measured once
  on calibration inputs (``calibrate``, run by ``rlx tune``), so convolutions run as int8 kernels
  too (VNNI where the CPU has it). The ranges are kept in onnxruntime's calibration cache, a JSON
  file of tensor name → range; each input-shape binding is quantized from it when its session or
  compiled model is built, never recalibrated (the graph's tensor names are the program's value
  names, the same in every binding and on both engines).

Either way, ``float32`` names instructions (by result) whose ONNX nodes stay unquantized (mixed
precision: ``nodes_to_exclude``). The quantizers write their result to a path, so the quantized
graph passes through a private temporary directory and is read back as bytes (the weights then
live inside the session, quantized, not shared with the engine's float arrays)."""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rlx.errors import RlxError, UsageError
from rlx.exporters.onnx import OPENVINO_FIXES, to_onnx
from rlx.ir.program import Program

OP_TYPES = ["MatMul", "Gemm"]
# int8-static's: the ops int8 kernels speed up. Left to quantize every op type, the quantizer also
# quantizes normalizations (a LayerNorm's bias as int32, which fails on BERT's zero biases) and
# puts Q/DQ pairs around ops that only run in float anyway.
STATIC_OP_TYPES = ["Conv", "MatMul", "Gemm"]
# (DefaultTensorType float: the types shape inference cannot see past com.microsoft fusions)
EXTRA = {"DefaultTensorType": 1}


def quantization_graph(program: Program, arrays: Mapping[str, np.ndarray]) -> Any:
    """The float graph of ``program`` that int8-static is calibrated on and that OpenVINO quantizes
    (an ``onnx.ModelProto``): weights embedded, standard operators only (every product has its own
    tensors, attention's included), max pooling plain and checked, bfloat16 inputs and outputs as
    float32. One graph for both, so that the calibration's tensor names are the quantized graph's."""
    options = replace(OPENVINO_FIXES, io_bf16_as_f32=True, pooling_nan="check", weight_values=arrays)
    return to_onnx(program, dict(arrays), options=options)


def check_quantization(
    precision: str, calibration: str | Path | None, float32: Any, lowered: Sequence[str] = ("int8", "int8-static")
) -> None:
    """UsageError unless ``precision``'s quantization settings hold: int8-static's calibration file
    exists, and ``float32`` is a list of instruction names, at one of the engine's ``lowered``
    precisions only (where some instructions can be kept out of the lower precision)."""
    if precision == "int8-static" and (calibration is None or not Path(calibration).is_file()):
        where = "no calibration given" if calibration is None else f"{calibration}: no such file"
        raise UsageError(
            f"int8-static needs the activation ranges of a calibration run ({where}); "
            "run `rlx tune BUNDLE --precisions int8-static` (with --inputs FILE) first"
        )
    if isinstance(float32, str) or not all(isinstance(n, str) for n in float32):
        raise UsageError(f"float32 must be a list of instruction result names, got {float32!r}")
    if float32 and precision not in lowered:
        choices = " or ".join(repr(p) for p in lowered)
        raise UsageError(f"float32= keeps instructions out of a lower precision; it needs precision={choices}")


def quantize(
    model: Any, name: str, precision: str, calibration: Path | None = None, float32: Sequence[str] = ()
) -> bytes:
    """The serialized ``precision`` (int8 / int8-static) graph of ``model`` (an ``onnx.ModelProto``
    with its weights embedded); ``float32``: instructions whose nodes stay unquantized."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    fold_weight_transposes(model)
    exclude = excluded_nodes(model, float32)
    with _quiet(), tempfile.TemporaryDirectory(prefix="rlx-int8-") as tmp:
        out = Path(tmp) / "model.int8.onnx"
        try:
            if precision == "int8":
                quantize_dynamic(model, out, op_types_to_quantize=OP_TYPES, weight_type=QuantType.QInt8,
                                 nodes_to_exclude=exclude, extra_options={"MatMulConstBOnly": True, **EXTRA})  # fmt: skip
            else:
                # (the cache is copied: onnxruntime rewrites a cache it disagrees with, and the bundle's stays as tune wrote it)
                cache = Path(tmp) / "ranges.json"
                shutil.copyfile(str(calibration), cache)
                quantize_static(model, out, None, quant_format=QuantFormat.QDQ, per_channel=True,
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                nodes_to_exclude=exclude, calibrate_method=CalibrationMethod.MinMax,
                                op_types_to_quantize=STATIC_OP_TYPES,
                                extra_options=dict(EXTRA), calibration_cache_path=cache)  # fmt: skip
            return out.read_bytes()
        except Exception as e:
            text = str(e).strip().splitlines()
            first = text[0] if text else type(e).__name__
            if "Quantization parameters are not specified" in first:
                raise RlxError(
                    f"{calibration} has no activation range for a tensor of {name}'s graph ({first.split('.')[0]}); "
                    "recalibrate: `rlx tune BUNDLE --precisions int8-static`"
                ) from e
            raise RlxError(f"onnxruntime could not quantize {name} to {precision}: {first}") from e


def calibrate(model: Any, feeds: Sequence[dict[str, np.ndarray]], path: Path, name: str) -> None:
    """Run onnxruntime's MinMax calibration of ``model`` (weights embedded) on ``feeds`` (ONNX input
    name → array, all of one shape) and write the activation ranges to ``path``."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._feeds = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._feeds, None)

    fold_weight_transposes(model)
    with _quiet(), tempfile.TemporaryDirectory(prefix="rlx-calibrate-") as tmp:
        try:
            cache = Path(tmp) / "ranges.json"
            quantize_static(model, Path(tmp) / "model.int8.onnx", Reader(), quant_format=QuantFormat.QDQ,
                            per_channel=True, calibrate_method=CalibrationMethod.MinMax, extra_options=dict(EXTRA),
                            op_types_to_quantize=STATIC_OP_TYPES,
                            calibration_cache_path=cache)  # fmt: skip
            shutil.copyfile(cache, path)
        except Exception as e:
            text = str(e).strip().splitlines()
            first = text[0] if text else type(e).__name__
            raise RlxError(f"onnxruntime could not calibrate {name} for int8-static: {first}") from e


def merge_ranges(parts: Sequence[Path], path: Path) -> None:
    """One calibration file from several (one per input shape): each tensor's range is the widest
    of its ranges in any of them."""
    from onnxruntime.quantization.calibrate import TensorData, TensorsData, load_tensors_data, save_tensors_data

    loaded = [load_tensors_data(p) for p in parts]
    merged: dict[str, TensorData] = {}
    for ranges in loaded:
        for name, r in ranges.items():
            lo, hi = r.range_value
            if name in merged:
                lo0, hi0 = merged[name].range_value
                lo, hi = np.minimum(lo0, lo), np.maximum(hi0, hi)
            merged[name] = TensorData(lowest=lo, highest=hi)
    save_tensors_data(TensorsData(loaded[0].calibration_method, merged), path)


def excluded_nodes(model: Any, float32: Sequence[str]) -> list[str]:
    """The ONNX nodes of the instructions named in ``float32`` (the emitter names each node
    ``RESULT:OP:K`` after the instruction it comes from)."""
    owners = set(float32)
    return [node.name for node in model.graph.node if node.name.partition(":")[0] in owners]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The quantizers' advice (run a pre-processing script …) is not the user's business."""
    import onnxruntime

    # (and onnxruntime's own warnings from the sessions the quantizers open: unused initializers …;
    # a process-wide setting with no getter, so it stays at errors-only, as rlx's own sessions run)
    onnxruntime.set_default_logger_severity(3)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def fold_weight_transposes(model: Any) -> None:
    """A Linear is emitted as ``MatMul(x, Transpose(W))``; the quantizer only quantizes a MatMul
    whose B is an initializer, so each Transpose of a float initializer becomes the transposed
    initializer (in place)."""
    from onnx import numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    kept = []
    for node in graph.node:
        src = inits.get(node.input[0]) if node.op_type == "Transpose" and node.input else None
        if src is None or src.data_type not in (1, 10, 11):  # float, float16, double
            kept.append(node)
            continue
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        arr = numpy_helper.to_array(src)
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(arr.transpose(perm)), node.output[0]))
    del graph.node[:]
    graph.node.extend(kept)
