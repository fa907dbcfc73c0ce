"""Data columns ↔ numpy: decode an Arrow or numpy column into model rows, encode model outputs as Arrow.

Rows of one shape are decoded as one stacked array (the fast path); ragged or null-holding columns fall
back to one array per row, so a bad row is found and named without spoiling the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from rlx.batch.spec import InputSpec
from rlx.errors import UsageError
from rlx.ir.symbolic import Sym


def pyarrow() -> ModuleType:
    """pyarrow, or one line saying which extra installs it (the base rlx never imports it)."""
    try:
        import pyarrow as pa
        import pyarrow.compute
        import pyarrow.parquet  # noqa: F401  (pa.compute and pa.parquet are used through pa)
    except ImportError:
        raise UsageError("rlx batch needs pyarrow: pip install 'rlx[batch]'") from None
    return pa


def is_arrow(col: Any) -> bool:
    return type(col).__module__.startswith("pyarrow")


@dataclass
class Rows:
    """One input's rows in a block: ``stacked`` (n, *row) when all rows share a shape, else ``each``."""

    stacked: np.ndarray | None = None
    each: list[np.ndarray | None] | None = None
    bad: dict[int, str] = field(default_factory=dict)  # block row → why it cannot be used

    def shape_of(self, i: int) -> tuple[int, ...]:
        if self.stacked is not None:
            return self.stacked.shape[1:]
        row = self.each[i] if self.each is not None else None
        return () if row is None else row.shape

    def take(self, rows: list[int]) -> np.ndarray:
        if self.stacked is not None:
            full = len(rows) == len(self.stacked) and rows[0] == 0 and rows[-1] == len(rows) - 1
            return self.stacked if full else self.stacked[rows]
        assert self.each is not None
        return np.stack([_usable(self.each[i]) for i in rows])


# ── type checks, once per file ───────────────────────────────────────────────
def leaf_dtype(arrow_type: Any) -> np.dtype | None:
    """The numpy dtype of a column's innermost values (through lists and tensor types), None if not numeric."""
    pa = pyarrow()
    t = arrow_type
    while True:
        if isinstance(t, pa.BaseExtensionType):
            t = t.storage_type
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            t = t.value_type
        else:
            break
    if pa.types.is_boolean(t):
        return np.dtype(bool)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return np.dtype(t.to_pandas_dtype())
    return None


def dtype_problem(have: np.dtype | None, have_text: str, spec: InputSpec) -> str | None:
    """Why values of dtype ``have`` cannot feed ``spec`` (None when they can)."""
    if have is not None and np.can_cast(have, spec.dtype, casting="same_kind"):
        return None
    return f"holds {have_text} values, input {spec.name!r} needs {spec.dtype}"


# ── decoding ─────────────────────────────────────────────────────────────────
class Segments(list):
    """A block's column from files that store it as different types (a tensor column here, lists there)."""


def decode(col: Any, spec: InputSpec) -> Rows:
    """A block's column as rows of ``spec.dtype``, each checked against ``spec.row_shape``."""
    if isinstance(col, Segments):
        return _joined([decode(c, spec) for c in col])
    rows = _decode_arrow(col, spec.dtype) if is_arrow(col) else Rows(stacked=np.asarray(col))
    if rows.stacked is not None:
        rows.stacked = rows.stacked.astype(spec.dtype, copy=False)
        problem = shape_problem(rows.stacked.shape[1:], spec)
        if problem:
            rows.bad.update(dict.fromkeys(range(len(rows.stacked)), problem))
    else:
        assert rows.each is not None
        for i, row in enumerate(rows.each):
            problem = None if row is None else shape_problem(row.shape, spec)
            if problem:
                rows.bad[i] = problem
    return rows


def _usable(row: np.ndarray | None) -> np.ndarray:
    if row is None:
        raise ValueError("a row that could not be read reached the model")  # bad rows are taken out first
    return row


def _rows_of(p: Rows) -> list[np.ndarray | None]:
    return list(p.stacked) if p.stacked is not None else list(p.each or [])


def _joined(parts: list[Rows]) -> Rows:
    stacks = [p.stacked for p in parts if p.stacked is not None]
    if len(stacks) == len(parts) and len({s.shape[1:] for s in stacks}) == 1:
        joined = Rows(stacked=np.concatenate(stacks))
    else:
        joined = Rows(each=[row for p in parts for row in _rows_of(p)])
    offset = 0
    for p in parts:
        joined.bad.update({offset + i: why for i, why in p.bad.items()})
        offset += len(p.stacked) if p.stacked is not None else len(p.each or [])
    return joined


def shape_problem(shape: tuple[int, ...], spec: InputSpec) -> str | None:
    """Rank and fixed extents must match; symbolic extents are checked by the model when it binds them."""
    fits = len(shape) == len(spec.row_shape) and all(
        isinstance(want, Sym) or want == got for want, got in zip(spec.row_shape, shape)
    )
    return None if fits else f"shape {list(shape)}, input {spec.name!r} needs {spec.shape_text()} per row"


def _decode_arrow(col: Any, dtype: np.dtype) -> Rows:
    pa = pyarrow()
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count == 0:
        stacked = _uniform_to_numpy(arr)
        if stacked is not None:
            return Rows(stacked=stacked)
    return _rows_one_by_one(arr, dtype)


def _uniform_to_numpy(arr: Any) -> np.ndarray | None:
    """(n, *shape) without a per-row loop when every row has the same shape and no nulls; else None."""
    pa = pyarrow()
    n = len(arr)
    if isinstance(arr.type, pa.FixedShapeTensorType):
        return _tensor_to_numpy(arr)
    dims: list[int] = []
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        if arr.null_count:
            return None
        if pa.types.is_fixed_size_list(arr.type):
            length = arr.type.list_size
        else:
            lengths = np.asarray(pa.compute.list_value_length(arr))
            if len(lengths) and not (lengths == lengths[0]).all():
                return None  # ragged: rows differ in length
            length = int(lengths[0]) if len(lengths) else 0
        dims.append(length)
        arr = arr.flatten()  # respects slicing, unlike .values
    if arr.null_count or isinstance(arr.type, pa.BaseExtensionType) or leaf_dtype(arr.type) is None:
        return None
    return arr.to_numpy(zero_copy_only=False).reshape(n, *dims)


def _tensor_to_numpy(arr: Any) -> np.ndarray | None:
    """A fixed-shape tensor column as (n, *shape); None when its values hold nulls (found row by row then)."""
    pa = pyarrow()
    t = arr.type
    if arr.storage.flatten().null_count:
        return None
    if t.value_type == pa.bool_():  # Arrow's tensor conversion has no bool: go through uint8, same layout
        as_bytes = pa.fixed_shape_tensor(pa.uint8(), t.shape, dim_names=t.dim_names, permutation=t.permutation)
        storage = arr.storage.cast(pa.list_(pa.uint8(), t.storage_type.list_size))
        return pa.ExtensionArray.from_storage(as_bytes, storage).to_numpy_ndarray().astype(bool)
    if leaf_dtype(t.value_type) is None:
        return None
    return arr.to_numpy_ndarray()


def _rows_one_by_one(arr: Any, dtype: np.dtype) -> Rows:
    """The slow path: each row on its own, so nulls and ragged nesting are pinned to their rows."""
    rows = Rows(each=[])
    assert rows.each is not None
    for i in range(len(arr)):
        if not arr[i].is_valid:
            rows.each.append(None)
            rows.bad[i] = "value is null"
            continue
        one = _uniform_to_numpy(arr.slice(i, 1))
        if one is None:
            rows.each.append(None)
            rows.bad[i] = "holds nulls or ragged nested lists"
        else:
            rows.each.append(one[0].astype(dtype, copy=False))
    return rows


# ── encoding ─────────────────────────────────────────────────────────────────
def encode(values: np.ndarray | list[np.ndarray], ragged: bool) -> Any:
    """Model output rows as an Arrow array: fixed-shape tensors, plain scalars, or nested lists when ragged."""
    pa = pyarrow()
    rows = [_arrow_friendly(v) for v in values] if isinstance(values, list) else None
    if rows is None:
        assert isinstance(values, np.ndarray)
        values = _arrow_friendly(values)
        if values.ndim == 1 and not ragged:
            return pa.array(values)
        if not ragged and values.dtype != bool:
            return pa.FixedShapeTensorArray.from_numpy_ndarray(_c_order(values))
        rows = list(values)
    return _nested_lists(rows, variable=ragged)


def _c_order(values: np.ndarray) -> np.ndarray:
    """Row-major with canonical strides: numpy calls an array of a length-1 axis contiguous whatever that
    axis's stride (``x[None]`` has stride 0), and Arrow's tensor conversion refuses such strides."""
    values = np.ascontiguousarray(values)
    canonical = tuple(values.itemsize * int(np.prod(values.shape[i + 1 :])) for i in range(values.ndim))
    return values if values.strides == canonical else values.copy()


def _arrow_friendly(values: np.ndarray) -> np.ndarray:
    # Arrow has no bfloat16: widen to float32, which holds every bfloat16 value exactly.
    return values.astype(np.float32) if values.dtype.name == "bfloat16" else values


def _nested_lists(rows: list[np.ndarray], variable: bool) -> Any:
    """Rows of any shapes as list<list<...>>: the flat values plus one offsets array per level."""
    pa = pyarrow()
    rank = rows[0].ndim if rows else 0
    flat = pa.array(np.concatenate([r.reshape(-1) for r in rows]) if rows else np.zeros(0))
    if rank == 0:
        return flat
    arr = flat
    for level in reversed(range(rank)):
        if variable:
            lengths = np.concatenate([np.full(int(np.prod(r.shape[:level])), r.shape[level]) for r in rows])
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            arr = pa.LargeListArray.from_arrays(pa.array(offsets), arr)
        else:
            arr = pa.FixedSizeListArray.from_arrays(arr, rows[0].shape[level])
    return arr


def take(col: Any, rows: list[int]) -> Any:
    """Rows of a carried column (Arrow or numpy), in order."""
    if isinstance(col, Segments):  # carried columns keep the first file's type
        col = pyarrow().concat_arrays([c.cast(col[0].type) for c in col])
    if is_arrow(col):
        return col.take(pyarrow().array(rows, type=pyarrow().int64()))
    return col[rows]


def slice_col(col: Any, start: int, stop: int) -> Any:
    return col.slice(start, stop - start) if is_arrow(col) else col[start:stop]


def concat(cols: list[Any]) -> Any:
    if len(cols) == 1:
        return cols[0]
    if is_arrow(cols[0]):
        arrays = [c.combine_chunks() if hasattr(c, "combine_chunks") else c for c in cols]
        if len({a.type for a in arrays}) > 1:
            return Segments(arrays)
        return pyarrow().concat_arrays(arrays)
    return np.concatenate(cols)
