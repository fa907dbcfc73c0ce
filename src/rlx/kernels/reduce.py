"""Reductions: Reduce, ReduceAxes and ArgReduce. Half precision reduces in float32; NaN propagates."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from .precision import lowest, widen
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


@kernel("ReduceAxes")
def reduce_axes(c: C.ReduceAxes, x: Any, axes: Any, *, xp: ArrayNamespace) -> Any:
    x = xp.asarray(x)
    rank = max(x.ndim, 1)
    picked = [int(a) for a in np.asarray(axes).reshape(-1)]
    if any(not -rank <= a < rank for a in picked):
        raise ValueError(f"axes {picked} are out of range for rank {x.ndim}")
    picked = sorted(a % rank for a in picked)
    if len(set(picked)) != len(picked):
        raise ValueError(f"axes {picked} repeat an axis")
    if c.fn in ("amax", "amin") and any(x.shape[a] == 0 for a in picked if a < x.ndim):
        # Over nothing: the reduction's identity, as ONNX defines it (numpy refuses).
        shape = [1 if a in picked else d for a, d in enumerate(x.shape)]
        shape = shape if c.keepdim else [d for a, d in enumerate(x.shape) if a not in picked]
        kind = x.dtype.kind
        top = math.inf if kind == "f" else np.iinfo(x.dtype).max if kind in "iu" else True
        return xp.full(shape, lowest(x.dtype) if c.fn == "amax" else top, dtype=x.dtype)
    return reduce(SimpleNamespace(fn=c.fn, axes=tuple(picked), keepdim=c.keepdim), x, xp=xp)


@kernel("ArgReduce")
def arg_reduce(c: C.ArgReduce, x: Any, *, xp: ArrayNamespace) -> Any:
    # argmax/argmin pick the first NaN, else the first extreme, as PyTorch does.
    fn = xp.argmax if c.fn == "argmax" else xp.argmin
    x = xp.asarray(x)
    if c.axis is None or x.ndim == 0:
        out = xp.asarray(fn(xp.reshape(x, (-1,))), dtype=np.int64)
        return xp.reshape(out, (1,) * x.ndim if c.keepdim else ())
    return xp.asarray(fn(x, axis=c.axis, keepdims=c.keepdim), dtype=np.int64)
