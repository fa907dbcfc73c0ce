"""int8 on the onnxruntime engine: onnxruntime's dynamic quantization of the MatMul/Gemm weights
(``quantize_dynamic``: int8 weights, activations quantized per call), the rest left in float.

``quantize_dynamic`` writes its result to a path, so the quantized graph passes through a private
temporary directory and is read back as bytes (the weights then live inside the session, quantized,
not shared with the engine's float arrays)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from rlx.errors import RlxError

OP_TYPES = ["MatMul", "Gemm"]


def quantize_int8(model: Any, name: str) -> bytes:
    """The serialized int8 graph of ``model`` (an ``onnx.ModelProto`` with its weights embedded)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    fold_weight_transposes(model)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # (its advice to run a pre-processing script is not the user's business)
    try:
        with tempfile.TemporaryDirectory(prefix="rlx-int8-") as tmp:
            out = Path(tmp) / "model.int8.onnx"
            # (DefaultTensorType float: the types shape inference cannot see past com.microsoft fusions)
            quantize_dynamic(model, out, op_types_to_quantize=OP_TYPES, weight_type=QuantType.QInt8,
                             extra_options={"MatMulConstBOnly": True, "DefaultTensorType": 1})  # fmt: skip
            return out.read_bytes()
    except Exception as e:
        text = str(e).strip().splitlines()
        raise RlxError(f"onnxruntime could not quantize {name} to int8: {text[0] if text else type(e).__name__}") from e
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
