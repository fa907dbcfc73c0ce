"""rlx: convert a PyTorch ``nn.Module`` into a portable model that runs without PyTorch.

``rlx.load`` and ``rlx.verify_bundle`` need numpy only; ``rlx.from_torch`` and ``rlx.export``
import torch when called; ``rlx.from_onnx`` imports onnx (never torch).
"""

from __future__ import annotations

from typing import Any

from rlx.errors import RlxError
from rlx.runtime import Model, load
from rlx.verify import verify_bundle
from rlx.version import __version__


def from_torch(*args: Any, **kwargs: Any) -> Any:
    """See ``rlx.convert.from_torch``."""
    from rlx.convert import from_torch as _from_torch

    return _from_torch(*args, **kwargs)


def build(*args: Any, **kwargs: Any) -> Any:
    """See ``rlx.convert.build`` (no torch needed)."""
    from rlx.convert import build as _build

    return _build(*args, **kwargs)


def from_onnx(*args: Any, **kwargs: Any) -> Any:
    """See ``rlx.onnx_import.importer.from_onnx`` (needs ``onnx``, never torch)."""
    from rlx.onnx_import.importer import from_onnx as _from_onnx

    return _from_onnx(*args, **kwargs)


def tune(*args: Any, **kwargs: Any) -> Any:
    """See ``rlx.app.tune.tune``: the fastest engine × precision within a tolerance, into tuning.json."""
    from rlx.app.tune import tune as _tune

    return _tune(*args, **kwargs)


def export(*args: Any, **kwargs: Any) -> Any:
    """See ``rlx.torch_import.export``."""
    from rlx.torch_import import export as _export

    return _export(*args, **kwargs)


__all__ = [
    "Model",
    "RlxError",
    "__version__",
    "build",
    "export",
    "from_onnx",
    "from_torch",
    "load",
    "tune",
    "verify_bundle",
]
