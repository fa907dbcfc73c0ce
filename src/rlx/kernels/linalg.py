"""Products: MatMul and Linear (``xp.matmul`` keeps float32 exact on every engine)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .precision import widen
from .registry import kernel

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace


@kernel("MatMul")
def matmul(c: C.MatMul, x: Any, y: Any, *, xp: ArrayNamespace) -> Any:
    # 1-d · 1-d gives a numpy scalar: keep it a 0-d array.
    return xp.asarray(xp.matmul(widen(x), widen(y))).astype(x.dtype, copy=False)


@kernel("Linear")
def linear(c: C.Linear, x: Any, w: Any, b: Any | None, *, xp: ArrayNamespace) -> Any:
    out = xp.matmul(widen(x), widen(w).T)
    if b is not None:
        out = out + widen(xp.asarray(b))
    return out.astype(x.dtype, copy=False)
