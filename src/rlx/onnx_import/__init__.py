"""The ONNX front-end: an ONNX model → the same Program, bundle and parity report as a torch model.

Needs the ``onnx`` package (``pip install 'rlx[onnx]'``), never torch. Lowerings are registered by
(domain, op_type) in ``registry.py``, one module per op family, onto the Call vocabulary.
"""

from __future__ import annotations

from typing import Any


def from_onnx(*args: Any, **kwargs: Any) -> Any:
    """See ``rlx.onnx_import.importer.from_onnx``."""
    from rlx.onnx_import.importer import from_onnx as _from_onnx

    return _from_onnx(*args, **kwargs)


__all__ = ["from_onnx"]
