"""rlx: convert a PyTorch ``nn.Module`` (or an ONNX model) into a portable model that runs without
PyTorch, and prove the conversion right.

The public API, each name imported on first use (PEP 562), so ``import rlx`` stays cheap and never
pulls in torch, onnx or an engine's library:

- ``rlx.from_torch`` / ``rlx.export`` / ``rlx.build``: convert a module (needs torch), export it to
  torch-ir.json, or lower an exported directory (no torch);
- ``rlx.from_onnx``: convert an ONNX model (needs onnx);
- ``rlx.load`` / ``rlx.Model``: run a bundle (numpy only by default);
- ``rlx.verify_bundle``: check a bundle against its stored reference outputs;
- ``rlx.tune``: try every installed engine × precision, keep the fastest within a tolerance;
- ``rlx.RlxError``: the base of every error rlx raises on purpose.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlx.errors import RlxError
from rlx.version import __version__

if TYPE_CHECKING:  # what editors and type checkers see; at run time __getattr__ imports on demand
    from rlx.app.convert import build, from_torch
    from rlx.app.onnx_convert import from_onnx
    from rlx.app.tune import tune
    from rlx.app.verify import verify_bundle
    from rlx.frontends.torch.export import export
    from rlx.runtime.model import Model, load

_LAZY = {
    "from_torch": "rlx.app.convert",
    "build": "rlx.app.convert",
    "from_onnx": "rlx.app.onnx_convert",
    "export": "rlx.frontends.torch.export",
    "load": "rlx.runtime.model",
    "Model": "rlx.runtime.model",
    "verify_bundle": "rlx.app.verify",
    "tune": "rlx.app.tune",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlx' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once; later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


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
