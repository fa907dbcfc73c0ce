"""The onnxruntime engine (``engine="onnxruntime"``): the Program emitted as ONNX
(``rlx.exporters.onnx``) and run by an onnxruntime session per input-shape binding. Needs
``rlx[onnxruntime]``; imported only when asked for."""

from __future__ import annotations

from typing import Any

from rlx.errors import UsageError


def require_onnxruntime() -> Any:
    """onnxruntime and onnx, or a UsageError saying how to install them."""
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError:
        raise UsageError("the onnxruntime engine needs onnxruntime and onnx: pip install 'rlx[onnxruntime]'") from None
    return onnxruntime
