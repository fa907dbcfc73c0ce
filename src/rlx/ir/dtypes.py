"""Dtype tokens (``f32``, ``i64`` …), their numpy types, and PyTorch's type-promotion rules."""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np

from ..errors import SchemaError, UnsupportedOpError

NUMPY_DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f64": np.dtype(np.float64),
    "i64": np.dtype(np.int64),
    "i32": np.dtype(np.int32),
    "i16": np.dtype(np.int16),
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_),
    "c64": np.dtype(np.complex64),
    "c128": np.dtype(np.complex128),
    # Low-bit types, for storage and casts only (weights and quantized tensors; no arithmetic).
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "f8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8e8m0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f4e2m1": np.dtype(ml_dtypes.float4_e2m1fn),
    "i4": np.dtype(ml_dtypes.int4),
    "u4": np.dtype(ml_dtypes.uint4),
    "i2": np.dtype(ml_dtypes.int2),
    "u2": np.dtype(ml_dtypes.uint2),
}
DTYPES = tuple(NUMPY_DTYPES)
_TOKEN_OF = {dt: tok for tok, dt in NUMPY_DTYPES.items()}

FLOATS = ("f16", "bf16", "f32", "f64")
INTS = ("u8", "i8", "i16", "i32", "i64", "u16", "u32", "u64")
COMPLEX = ("c64", "c128")
# Stored, moved and cast, never computed on: a program that does arithmetic on them is refused.
LOW_BIT = ("f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz", "f8e8m0", "f4e2m1", "i4", "u4", "i2", "u2")
# Bits of each integer type, for promotion between integer types. PyTorch promotes uint16/32/64
# only with themselves and with floats (anything else is an error there, so never reaches here).
_INT_BITS = {"u8": 8, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "u16": 16, "u32": 32, "u64": 64}
_FLOAT_RANK = {"f16": 1, "bf16": 1, "f32": 2, "f64": 3}


def check(tok: object, where: str = "dtype") -> str:
    if not isinstance(tok, str) or tok not in NUMPY_DTYPES:
        raise SchemaError(f"{where}: unknown dtype {tok!r}; expected one of {', '.join(DTYPES)}"[:300])
    return tok


def to_numpy(tok: str) -> np.dtype:
    return NUMPY_DTYPES[tok]


def from_numpy(dtype: np.dtype) -> str:
    try:
        return _TOKEN_OF[np.dtype(dtype)]
    except KeyError:
        raise SchemaError(f"numpy dtype {np.dtype(dtype)} has no rlx dtype token") from None


def is_float(tok: str) -> bool:
    return tok in FLOATS


def is_int(tok: str) -> bool:
    return tok in INTS


def is_complex(tok: str) -> bool:
    return tok in COMPLEX


def is_low_bit(tok: str) -> bool:
    """A float8/float4/int4/int2 type: storage and casts only."""
    return tok in LOW_BIT


def complex_of(tok: str) -> str:
    """The complex type whose parts are ``tok`` (float64 → complex128; the other floats → complex64)."""
    return "c128" if tok in ("f64", "c128") else "c64"


def real_of(tok: str) -> str:
    """The float type of a complex type's parts (complex128 → float64, complex64 → float32)."""
    return {"c128": "f64", "c64": "f32"}.get(tok, tok)


def category(tok: str) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex: the order PyTorch promotes across."""
    if tok == "bool":
        return 0
    if tok in INTS:
        return 1
    if tok in FLOATS:
        return 2
    return 3


def promote_types(a: str, b: str) -> str:
    """``torch.promote_types`` for the dtypes rlx knows."""
    if a in LOW_BIT or b in LOW_BIT:
        raise UnsupportedOpError(f"arithmetic on {a if a in LOW_BIT else b} is not supported; cast to float32 first")
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        hi, lo = (a, b) if ca > cb else (b, a)
        # A complex type takes a float's precision if that is higher (float64 + complex64 = complex128).
        return complex_of(lo) if hi == "c64" and lo == "f64" else hi
    if ca == 1:
        if "u8" in (a, b):
            other = b if a == "u8" else a
            return "i16" if other == "i8" else other
        return a if _INT_BITS[a] >= _INT_BITS[b] else b
    if ca == 2:
        if {a, b} == {"f16", "bf16"}:
            return "f32"
        return a if _FLOAT_RANK[a] >= _FLOAT_RANK[b] else b
    return "c128" if "c128" in (a, b) else a


def scalar_dtype(value: bool | int | float) -> str:
    """The dtype a Python number takes in PyTorch (float → the default dtype, f32)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "i64"
    if isinstance(value, complex):
        return "c64"
    return "f32"


def _combine_categories(higher: str | None, lower: str | None) -> str | None:
    # Mirrors c10's combine_categories: a lower-priority group only matters when it is of a
    # higher category (e.g. an int tensor times a Python float is a float).
    if higher is None:
        return lower
    if lower is None:
        return higher
    if category(higher) == 3:
        return higher
    if category(lower) == 3:  # c10: a complex scalar keeps a float tensor's precision
        return complex_of(higher) if category(higher) == 2 else lower
    if category(higher) == 2:
        return higher
    if higher == "bool" or category(lower) >= 2:
        return promote_types(higher, lower)
    return higher


def result_type(tensors: Sequence[str], zero_dim: Sequence[str] = (), scalars: Sequence[str] = ()) -> str:
    """``torch.result_type`` over tensors (ndim > 0), 0-dim tensors and Python scalars."""

    def fold(toks: Sequence[str]) -> str | None:
        out = None
        for t in toks:
            out = t if out is None else promote_types(out, t)
        return out

    res = _combine_categories(fold(tensors), _combine_categories(fold(zero_dim), fold(scalars)))
    if res is None:
        raise ValueError("result_type of nothing")
    return res
