"""The numpy engine's selection kernels that read the data's sizes: Histc by ``bincount`` and
GroupedMatMul group by group (the shared definitions, which must also trace under JAX, compare every
value with every bin and gather a weight matrix per row)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...kernels.precision import widen
from ...kernels.selection import histc_bins
from .namespace import NUMPY
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import GroupedMatMul, Histc


@override("Histc")
def histc(c: Histc, x: np.ndarray) -> np.ndarray:
    counts = np.bincount(histc_bins(c, x, NUMPY), minlength=c.bins + 1)[: c.bins]  # (the last: outside)
    return counts.astype(x.dtype)


@override("GroupedMatMul")
def grouped_mat_mul(c: GroupedMatMul, x: np.ndarray, w: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Rows ``[offsets[g-1], offsets[g])`` times ``w[g]``, each row once; rows past the last offset are zero."""
    wide = widen(x)
    out = np.zeros((x.shape[0], w.shape[-1]), wide.dtype)
    start = 0
    for group, end in enumerate(offsets.astype(np.int64).tolist()):
        end = min(max(end, start), x.shape[0])  # (offsets never decrease; clipped to the rows there are)
        if end > start:
            np.matmul(wide[start:end], widen(w[group]), out=out[start:end])
        start = end
    return out.astype(x.dtype, copy=False)
