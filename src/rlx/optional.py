"""Optional dependencies, checked in one place: each feature that needs a heavy library asks for it
here and a missing one is refused in one line naming the ``rlx[extra]`` that installs it."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from rlx.errors import UsageError


def require(module: str, *, extra: str, feature: str | None = None) -> ModuleType:
    """Import ``module`` (a dotted name) or raise UsageError: ``<feature> needs <module>: pip install 'rlx[<extra>]'``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        what = feature or "this feature"
        raise UsageError(f"{what} needs {top}: pip install 'rlx[{extra}]'") from None


def available(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
