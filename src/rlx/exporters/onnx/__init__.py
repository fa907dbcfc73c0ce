"""Emit ONNX from a Program, torch-free: ``to_onnx(program, weights)`` → an ``onnx.ModelProto``.

Standard ai.onnx operators at opset ``OPSET``; weights become initializers (external data beside
``model.onnx`` above 2 GB); symbolic extents become ``dim_param`` on the inputs and are computed
from the inputs' shapes inside the graph; every node's ``doc_string`` is the provenance note of
the instruction it came from (``aten.op (x[2,3]) -> [2,3] f32``) and its name starts with that
instruction's result. One emitter per Call family is registered in ``registry.EMITTERS``
(``@emits``), or declared in ``NO_ONNX_FORM`` with the reason it has none; ``check_coverage``
lists what a program uses that has no emitter, all at once. Needs ``rlx[onnx]``.
"""

from __future__ import annotations

# The family modules (named by ``rlx.ir.calls.FAMILIES``); importing each registers its emitters.
from rlx.exporters.onnx import elementwise, linalg, movement, nn, ordering, random  # isort: split

from rlx.exporters.onnx import reduce, resample, scatter, selection, spectral  # isort: split

from rlx.exporters.onnx.build import (
    EXTERNAL_DATA_THRESHOLD,
    FINITE_INPUTS,
    NAN_CHECK,
    UNORDERED_TIES,
    WEIGHT_SLICES,
    check_coverage,
    to_onnx,
    write_onnx,
)
from rlx.exporters.onnx.registry import (
    EMITTERS,
    FUNCTIONS,
    NO_ONNX_FORM,
    NO_ONNX_FUNCTION,
    OPENVINO_FIXES,
    OPSET,
    PORTABLE,
    EmitError,
    GraphOptions,
    emits,
)

FAMILIES = (elementwise, linalg, movement, nn, ordering, random, reduce, resample, scatter, selection, spectral)

__all__ = [
    "EMITTERS", "EXTERNAL_DATA_THRESHOLD", "FAMILIES", "FINITE_INPUTS", "FUNCTIONS", "NAN_CHECK", "NO_ONNX_FORM", "NO_ONNX_FUNCTION", "OPENVINO_FIXES", "OPSET", "PORTABLE", "UNORDERED_TIES", "WEIGHT_SLICES", "EmitError", "GraphOptions",
    "check_coverage",
    "emits", "to_onnx", "write_onnx",
]  # fmt: skip
