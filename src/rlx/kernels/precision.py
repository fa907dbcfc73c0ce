"""Precision facts every kernel shares: which types widen to float32, what a max or a scan starts from."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
F32, F64, I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)
# Computed in float32 and rounded once at the end, as PyTorch's CPU kernels do.
HALF = (F16, BF16)


def is_half(dtype: Any) -> bool:
    return np.dtype(dtype) in HALF


def widen(x: Any) -> Any:
    """float16/bfloat16 → float32 for the arithmetic; other dtypes unchanged (numpy or jax arrays)."""
    return x.astype(F32) if x.dtype in HALF else x


def lowest(dtype: Any) -> Any:
    """The identity of a maximum: -inf, the integer minimum, or False."""
    dtype = np.dtype(dtype)
    return -np.inf if dtype.kind == "f" else (np.iinfo(dtype).min if dtype.kind in "iu" else False)


def highest(dtype: Any) -> Any:
    """The identity of a minimum: +inf, the integer maximum, or True."""
    dtype = np.dtype(dtype)
    return np.inf if dtype.kind == "f" else (np.iinfo(dtype).max if dtype.kind in "iu" else True)


def scan_accumulator(dtype: Any) -> np.dtype:
    """PyTorch's CPU accumulation type of a scan (``acc_type<T, false>``): float32 for the half
    types, float64 for float32/float64, int64 for integers and bool."""
    dtype = np.dtype(dtype)
    if dtype in HALF:
        return F32
    if dtype.kind == "f":
        return F64
    return I64 if dtype.kind in "iub" else dtype
