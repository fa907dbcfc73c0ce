"""The numpy engine's scatter kernels (IndexPut, Scatter): in-place writes on a copy, ``ufunc.at`` for reductions.

Repeated positions: accumulating writes (``IndexPut(accumulate)``, ``Scatter`` with a reduction)
combine every value (``ufunc.at``); plain overwrites keep numpy's last write, one of the results
PyTorch allows (it leaves that case unspecified).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...kernels.precision import widen
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import IndexPut, Scatter


def _int_indices(indices: list[np.ndarray | None]) -> tuple[Any, ...]:
    # A bool mask over k axes stands for the k integer arrays of its True positions, as in PyTorch.
    out: list[Any] = []
    for i in indices:
        if i is None:
            out.append(slice(None))
        elif i.dtype == np.bool_:
            out.extend(np.nonzero(i))
        else:
            out.append(i.astype(np.intp, copy=False))
    return tuple(out)


@override("IndexPut")
def index_put(c: IndexPut, x: np.ndarray, indices: list[np.ndarray | None], values: np.ndarray) -> np.ndarray:
    out = x.copy()
    idx = _int_indices(indices)
    values = np.asarray(values).astype(x.dtype, copy=False)
    if c.accumulate:
        np.add.at(out, idx, np.broadcast_to(values, out[idx].shape))
    else:
        out[idx] = values
    return out


_IDENTITY = {"sum": 0, "mean": 0, "prod": 1}
_UFUNC = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


@override("Scatter")
def scatter(c: Scatter, x: np.ndarray, index: np.ndarray, src: np.ndarray) -> np.ndarray:
    src = np.asarray(src)
    if src.ndim == 0:
        src = np.broadcast_to(src, index.shape)
    # index may be smaller than src (and than x on the other axes): only its positions count.
    src = src[tuple(slice(0, n) for n in index.shape)]
    grid: list[Any] = list(np.indices(index.shape, sparse=True))
    grid[c.axis] = index.astype(np.intp, copy=False)
    pos = tuple(grid)
    if c.reduce == "none":
        out = x.copy()
        out[pos] = src.astype(x.dtype, copy=False)
        return out
    acc = widen(x).copy()
    values = widen(src).astype(acc.dtype, copy=False)
    touched = np.zeros(x.shape, bool)
    touched[pos] = True
    if not c.include_self:
        if c.reduce in _IDENTITY:
            acc[touched] = _IDENTITY[c.reduce]
        else:  # amax / amin: start from the first value scattered there
            acc[pos] = values
    _UFUNC[c.reduce].at(acc, pos, values)
    if c.reduce == "mean":
        count = np.full(x.shape, 1 if c.include_self else 0, np.int64)
        np.add.at(count, pos, 1)
        count = np.maximum(count, 1)
        if acc.dtype.kind == "f":
            acc = np.where(touched, acc / count, acc)
        else:
            acc = np.where(touched, acc // count, acc)
    return acc.astype(x.dtype, copy=False)
