"""Read and write safetensors files with numpy only, validating every header field first.

Reading memory-maps the file and returns read-only array views, so loading a bundle costs no
copy. Nothing in a header is trusted: sizes, offsets and dtypes are checked before any array is
made, and every problem is a ``WeightsError`` naming the file and the tensor.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import weakref
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..errors import WeightsError
from ..ir import dtypes

# safetensors dtype names ↔ rlx tokens.
ST_TO_TOKEN = {
    "F32": "f32", "F16": "f16", "BF16": "bf16", "F64": "f64", "I64": "i64", "I32": "i32",
    "I16": "i16", "I8": "i8", "U8": "u8", "BOOL": "bool", "C64": "c64", "U16": "u16", "U32": "u32",
    "U64": "u64", "F8_E4M3": "f8e4m3fn", "F8_E5M2": "f8e5m2",
    # Not in the safetensors spec (which stops at C64): rlx's name for complex128 tensors.
    "C128": "c128",
}  # fmt: skip
TOKEN_TO_ST = {v: k for k, v in ST_TO_TOKEN.items()}
MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_EXTENT = 2**48  # product of a shape's non-zero extents (numpy's limit is 2**63 - 1)
# Each live mapping made by ``read`` → (the file's resolved path, the mapping's address), so that an
# engine that reads weights files itself can be pointed at the bytes instead of handed a copy.
_MAPPINGS: weakref.WeakKeyDictionary[mmap.mmap, tuple[Path, int]] = weakref.WeakKeyDictionary()


def read(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """All tensors of a safetensors file as read-only arrays, plus its ``__metadata__``."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise WeightsError(f"{path}: not a safetensors file ({size} bytes, too short for a header)")
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > min(size - 8, MAX_HEADER_BYTES):
                raise WeightsError(f"{path}: header claims {header_len} bytes but the file has {size - 8}")
            raw_header = f.read(header_len)
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 8 + header_len else b""
    except FileNotFoundError:
        raise WeightsError(f"{path}: file not found") from None
    except OSError as e:
        raise WeightsError(f"{path}: cannot read: {e}") from None
    try:
        header = json.loads(raw_header.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise WeightsError(f"{path}: header is not valid JSON; the file is damaged or not safetensors") from None
    if not isinstance(header, dict):
        raise WeightsError(f"{path}: header must be a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise WeightsError(f"{path}: __metadata__ must be an object")
    _remember(buf, path)
    data_start = 8 + header_len
    data_len = size - data_start
    spans: list[tuple[int, int, str]] = []
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        dtype, shape, begin, end = _check_entry(path, name, info, data_len)
        if begin != end:
            spans.append((begin, end, name))
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        arr = (
            np.frombuffer(buf, dtype=dtypes.to_numpy(dtype), count=count, offset=data_start + begin)
            if count
            else (np.zeros(0, dtype=dtypes.to_numpy(dtype)))
        )
        out[name] = arr.reshape(shape)
    spans.sort()
    for (_b0, e0, n0), (b1, _e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise WeightsError(f"{path}: tensors {n0!r} and {n1!r} overlap in the file")
    return out, {str(k): str(v) for k, v in metadata.items()}


def _remember(buf: mmap.mmap | bytes, path: Path) -> None:
    if isinstance(buf, mmap.mmap):
        _MAPPINGS[buf] = (path.resolve(), np.frombuffer(buf, np.uint8, count=1).__array_interface__["data"][0])


def file_region(arr: np.ndarray) -> tuple[Path, int] | None:
    """(file, byte offset) where ``arr``'s bytes lie, C-ordered, in a file mapped by ``read``; None
    for any other array (in memory, or a strided view such as a transpose)."""
    if not arr.flags.c_contiguous or arr.nbytes == 0:
        return None
    base: object = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # (numpy's frombuffer keeps the buffer's view)
        base = base.obj
    found = _MAPPINGS.get(base) if isinstance(base, mmap.mmap) else None
    if found is None:
        return None
    path, address = found
    return path, arr.__array_interface__["data"][0] - address


def _check_entry(path: Path, name: str, info: object, data_len: int) -> tuple[str, tuple[int, ...], int, int]:
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict):
        raise WeightsError(f"{where}: header entry must be an object")
    st = info.get("dtype")
    if not isinstance(st, str) or st not in ST_TO_TOKEN:
        raise WeightsError(f"{where}: unsupported dtype {st!r}"[:300])
    shape = info.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise WeightsError(f"{where}: shape must be a list of non-negative ints, found {shape!r}")
    offsets = info.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise WeightsError(f"{where}: data_offsets must be [begin, end]")
    begin, end = offsets
    token = ST_TO_TOKEN[st]
    nbytes = dtypes.to_numpy(token).itemsize
    if 0 in shape:
        nbytes = 0
    for d in shape:  # multiply with an early exit so a hostile shape cannot overflow or allocate
        nbytes *= d
        if nbytes > data_len:
            break
    if not 0 <= begin <= end <= data_len:
        raise WeightsError(f"{where}: byte range [{begin}, {end}) lies outside the file's {data_len} data bytes")
    if end - begin != nbytes:
        raise WeightsError(f"{where}: shape {shape} of {st} needs {nbytes} bytes, header gives {end - begin}")
    # numpy refuses a shape whose extents, zeros left out, overflow its index type, even with no
    # data: [0, 2**63, 2**63] needs 0 bytes but cannot be made. Bound that product too.
    extent = 1
    for d in shape:
        extent *= max(d, 1)
        if extent > MAX_EXTENT:
            raise WeightsError(f"{where}: shape {shape} is too large (its non-zero extents exceed {MAX_EXTENT})"[:300])
    return token, tuple(shape), begin, end


def write(path: str | Path, tensors: Mapping[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (sorted by name, so the file is deterministic) to ``path``, one tensor at a
    time straight from its memory: a contiguous array (a view of a torch tensor, a memory map) is
    never copied, so writing costs no more memory than the largest non-contiguous tensor."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    arrays = []
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        token = dtypes.from_numpy(arr.dtype)
        if token not in TOKEN_TO_ST:
            raise WeightsError(f"{path}: tensor {name!r} is {token}, which safetensors has no name for")
        header[name] = {
            "dtype": TOKEN_TO_ST[token],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        arrays.append(arr)
        offset += arr.nbytes
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)  # align the data section to 8 bytes, as the reference writer does
    # A new file renamed into place, never the old one truncated: a bundle's weights file may be a
    # hard link of this one, and must not change under it.
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            for arr in arrays:
                if arr.size:  # bytes in C order; a copy only of a tensor that is not C-contiguous already
                    f.write(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
