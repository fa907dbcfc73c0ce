"""torch dtype ↔ rlx dtype token, and torch tensors → numpy arrays (bf16 included)."""

from __future__ import annotations

import numpy as np
import torch

from rlx.errors import ExportError
from rlx.ir import dtypes

_TOKENS = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "bool", torch.complex64: "c64", torch.complex128: "c128", torch.uint16: "u16",
    torch.uint32: "u32", torch.uint64: "u64",
}  # fmt: skip
_TORCH = {v: k for k, v in _TOKENS.items()}


def torch_dtype_token(dtype: torch.dtype) -> str:
    try:
        return _TOKENS[dtype]
    except KeyError:
        raise ExportError(f"dtype {dtype} is not supported by rlx ({', '.join(dtypes.DTYPES)})") from None


def token_to_torch(tok: str) -> torch.dtype:
    return _TORCH[tok]


def tensor_to_numpy(t: torch.Tensor) -> np.ndarray:
    # resolve_conj/neg: torch.fft's ihfft and .conj() return lazily conjugated complex views.
    t = t.detach().cpu().resolve_conj().resolve_neg().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bf16: reinterpret the bits as ml_dtypes.bfloat16
        return t.view(torch.int16).numpy().view(dtypes.to_numpy("bf16")).copy()
    torch_dtype_token(t.dtype)
    return t.numpy().copy()


def numpy_to_tensor(a: np.ndarray) -> torch.Tensor:
    if a.dtype == dtypes.to_numpy("bf16"):
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(a, copy=True))
