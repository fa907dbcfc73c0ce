"""The numpy engine's kernel table: the shared definitions on numpy, and the engine's own kernels.

``KERNELS[name](c, *operands)`` for every Call a program.json may hold. Kernels know Calls and
arrays, never aten; operands already carry the computation dtype, half precision is widened to
float32 inside a kernel and rounded once at the end, as PyTorch's CPU kernels do.
"""

from __future__ import annotations

from ...kernels import engine_kernels

# The engine's own kernel families, in one explicit list: importing each fills OVERRIDES.
from . import nn, scatter, selection
from .namespace import NUMPY
from .overrides import OVERRIDES

FAMILIES = (nn, scatter, selection)
KERNELS = engine_kernels(NUMPY, OVERRIDES)

__all__ = ["FAMILIES", "KERNELS", "NUMPY", "OVERRIDES"]
