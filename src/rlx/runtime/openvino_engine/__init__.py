"""The OpenVINO engine (``engine="openvino"``): the Program emitted as ONNX (``rlx.exporters.onnx``),
read by OpenVINO from memory with the weights as shared constants, and compiled for the CPU, once
for a dynamic program where OpenVINO can. Needs ``rlx[openvino]``; imported only when asked for."""

from __future__ import annotations

from typing import Any

from rlx.optional import require


def require_openvino() -> Any:
    """openvino and onnx, or a UsageError saying how to install them."""
    require("onnx", extra="openvino", feature="the openvino engine")
    return require("openvino", extra="openvino", feature="the openvino engine")
