"""Reductions: Reduce and ArgReduce. Half precision reduces in float32; NaN propagates."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .precision import widen
from .registry import kernel

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace

_REDUCERS = {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min", "any": "any", "all": "all"}


@kernel("Reduce")
def reduce(c: C.Reduce, x: Any, *, xp: ArrayNamespace) -> Any:
    x = xp.asarray(x)
    axes = tuple(c.axes) if c.axes and x.ndim else None  # a 0-d tensor reduces over its dim 0 / -1 to itself
    xw = widen(x)
    if c.fn in ("mean", "var", "std"):
        # By hand rather than mean/var, which warn: an empty slice is NaN and a correction ≥ n
        # divides by zero, as in PyTorch (the executors silence floating-point errors).
        n = xw.size if axes is None else math.prod(xw.shape[a] for a in axes)
        mean = xp.sum(xw, axis=axes, keepdims=True) / n
        if c.fn == "mean":
            out = mean if c.keepdim else xp.squeeze(mean, axis=axes)
        else:
            centered = xw - mean
            out = xp.sum(centered * centered, axis=axes, keepdims=c.keepdim) / max(n - c.correction, 0)
            out = xp.sqrt(out) if c.fn == "std" else out
    elif c.fn == "xor":
        out = xp.bitwise_xor.reduce(xw, axis=axes, keepdims=c.keepdim)
    else:
        out = getattr(xp, _REDUCERS[c.fn])(xw, axis=axes, keepdims=c.keepdim)
    return xp.asarray(out).astype(x.dtype, copy=False)


@kernel("ArgReduce")
def arg_reduce(c: C.ArgReduce, x: Any, *, xp: ArrayNamespace) -> Any:
    # argmax/argmin pick the first NaN, else the first extreme, as PyTorch does.
    fn = xp.argmax if c.fn == "argmax" else xp.argmin
    x = xp.asarray(x)
    if c.axis is None or x.ndim == 0:
        out = xp.asarray(fn(xp.reshape(x, (-1,))), dtype=np.int64)
        return xp.reshape(out, (1,) * x.ndim if c.keepdim else ())
    return xp.asarray(fn(x, axis=c.axis, keepdims=c.keepdim), dtype=np.int64)
