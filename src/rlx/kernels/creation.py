"""Producers: Full and Arange."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ir import dtypes as ir_dtypes
from .registry import kernel, static

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace


@kernel("Full")
def full(c: C.Full, *, xp: ArrayNamespace) -> Any:
    return xp.full(tuple(c.shape), c.value, dtype=ir_dtypes.to_numpy(c.dtype))


@kernel("Arange")
def arange(c: C.Arange, *, xp: ArrayNamespace) -> Any:
    dt = ir_dtypes.to_numpy(c.dtype)
    start, end, step = static(c.start), static(c.end), static(c.step)
    n = max(0, math.ceil((end - start) / step))
    # int64 steps for integer results, float64 otherwise, rounded once to the result dtype.
    base = xp.arange(n, dtype=np.int64 if dt.kind in "iub" else np.float64)
    return (start + step * base).astype(dt)
