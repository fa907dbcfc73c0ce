"""The JAX engine's kernel table: the shared definitions on jax.numpy, and the engine's own kernels.

Every kernel traces under ``jax.jit``: shapes come from the Call's fields or the operands' static
shapes, never from array values.
"""

from __future__ import annotations

from ...kernels import engine_kernels

# The engine's own kernel families, in one explicit list: importing each fills OVERRIDES.
from . import elementwise, linalg, nn, scatter, selection
from .namespace import JAX, x64
from .overrides import OVERRIDES

FAMILIES = (elementwise, linalg, nn, scatter, selection)
KERNELS = engine_kernels(JAX, OVERRIDES)

__all__ = ["FAMILIES", "JAX", "KERNELS", "OVERRIDES", "x64"]
