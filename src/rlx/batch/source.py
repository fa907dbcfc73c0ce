"""Where rows come from: Parquet files (one, several, a directory), a .npy/.npz file, or in-memory arrays.

Rows are numbered across all files in sorted order. A source reads a range of rows as *blocks*
cut on a fixed grid (global rows k·B … (k+1)·B), so a row lands in the same batch however the
files are split into row groups and wherever a rerun resumes. Only one Parquet record batch per
file is held at a time: memory stays bounded whatever the dataset's size.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlx.batch.columns import concat, dtype_problem, leaf_dtype, pyarrow, slice_col
from rlx.batch.spec import ROW_INDEX, Signature
from rlx.errors import DataError, UsageError

MEMORY = "<memory>"


@dataclass
class Part:
    """One file (or the in-memory data): its rows are global rows ``start … start + rows - 1``."""

    path: str
    start: int
    rows: int
    reader: Any = field(repr=False, compare=False)
    problem: str | None = None  # the whole file is unusable (unreadable, a column missing or of the wrong type)
    problem_column: str | None = None


@dataclass
class Piece:
    """Consecutive rows of one part, as read (``columns`` None: they could not be read, ``problem`` says why)."""

    start: int
    n: int
    part: Part
    part_row: int
    columns: dict[str, Any] | None
    problem: str | None = None


@dataclass
class Block:
    """The rows of one grid cell (or less, at a range end or around unreadable rows)."""

    start: int
    n: int
    columns: dict[str, Any] | None
    origins: list[tuple[int, Part, int]]  # (block row, part, row in that part) where each part's run begins
    problem: str | None = None

    def locate(self, i: int) -> tuple[str, int]:
        """The file and the row within it of block row ``i``."""
        for block_row, part, part_row in reversed(self.origins):
            if i >= block_row:
                return part.path, part_row + i - block_row
        raise IndexError(i)


class Source:
    """Parts in order plus the columns to read from each."""

    def __init__(self, parts: list[Part], all_columns: list[str]) -> None:
        self.parts = parts
        self.all_columns = all_columns
        self.read_columns: list[str] = []
        self.carried_types: dict[str, Any] = {}  # carried columns whose files differ in type → the unified type

    @property
    def total_rows(self) -> int:
        return sum(p.rows for p in self.parts)

    def check(self, sig: Signature, keep: Sequence[str] | None) -> list[str]:
        """Mark parts lacking a column or holding the wrong dtype; returns the carried (kept) columns."""
        kept = [c for c in self.all_columns if c not in sig.columns] if keep is None else list(keep)
        if ROW_INDEX in kept:
            raise UsageError(f"column {ROW_INDEX!r} is written by rlx batch itself; rename it in the input")
        self.read_columns = list(dict.fromkeys([*sig.columns, *kept]))
        for part in self.parts:
            if part.problem is None:
                part.problem, part.problem_column = _column_problem(part, sig, self.read_columns)
        self.carried_types = {c: t for c in dict.fromkeys(kept) if (t := self._carried_type(c)) is not None}
        return kept

    def _carried_type(self, column: str) -> Any:
        """The one Arrow type a carried column gets in every shard, so the output reads as one table:
        the files' types unified (null → any, int32 → int64, ...); a file whose type cannot be unified
        with the first file's is marked. None for a single part (its own type is the type)."""
        pa = pyarrow()
        typed = [(p, p.reader.arrow_type(column)) for p in self.parts if p.problem is None]
        typed = [(p, t) for p, t in typed if t is not None]
        if len({str(t) for _, t in typed}) <= 1:
            return None
        unified = typed[0][1]
        for part, t in typed[1:]:
            try:
                schemas = [pa.schema([pa.field(column, unified)]), pa.schema([pa.field(column, t)])]
                unified = pa.unify_schemas(schemas, promote_options="permissive").field(column).type
            except (pa.ArrowException, TypeError, ValueError):
                part.problem_column = column
                part.problem = (
                    f"holds {t} values here but {typed[0][1]} in {typed[0][0].path}; a carried column needs "
                    "one type in every file (or leave it out with --keep)"
                )
        return unified

    def blocks(self, start: int, stop: int, grid: int) -> Iterator[Block]:
        """Rows ``start … stop - 1`` in blocks that never cross a multiple of ``grid``."""
        return _regrid(self._pieces(start, stop, grid), grid)

    def _pieces(self, start: int, stop: int, chunk: int) -> Iterator[Piece]:
        for part in self.parts:
            first, last = max(start, part.start), min(stop, part.start + part.rows)
            if first >= last:
                continue
            if part.problem is not None:
                yield Piece(first, last - first, part, first - part.start, None, part.problem)
                continue
            for piece_start, n, columns, problem in part.reader.read(
                first - part.start, last - part.start, chunk, self.read_columns
            ):
                yield Piece(part.start + piece_start, n, part, piece_start, columns, problem)


def _column_problem(part: Part, sig: Signature, columns: list[str]) -> tuple[str | None, str | None]:
    have = part.reader.schema()
    for column in columns:
        if part.reader.duplicates.get(column, 1) > 1:
            return f"column {column!r} appears {part.reader.duplicates[column]} times; rename all but one", column
    for column in columns:
        if column not in have:
            return f"no column {column!r} (it has {', '.join(have) or 'none'})", column
    for spec in sig.inputs:
        dtype, text = have[spec.column]
        problem = dtype_problem(dtype, text, spec)
        if problem:
            return problem, spec.column
    return None, None


def _regrid(pieces: Iterator[Piece], grid: int) -> Iterator[Block]:
    pending: list[Piece] = []

    def flush() -> Iterator[Block]:
        if pending:
            yield _join(pending)
            pending.clear()

    for piece in pieces:
        if piece.columns is None:
            yield from flush()
            yield Block(piece.start, piece.n, None, [(0, piece.part, piece.part_row)], piece.problem)
            continue
        done = 0
        while done < piece.n:
            at = piece.start + done
            take = min(piece.n - done, (at // grid + 1) * grid - at)
            columns = {k: slice_col(v, done, done + take) for k, v in piece.columns.items()}
            pending.append(Piece(at, take, piece.part, piece.part_row + done, columns))
            done += take
            if (at + take) % grid == 0:
                yield from flush()
    yield from flush()


def _join(pieces: list[Piece]) -> Block:
    origins: list[tuple[int, Part, int]] = []
    offset = 0
    for p in pieces:
        if not origins or origins[-1][1] is not p.part:
            origins.append((offset, p.part, p.part_row))
        offset += p.n
    names = pieces[0].columns or {}
    columns = {k: concat([p.columns[k] for p in pieces if p.columns is not None]) for k in names}
    return Block(pieces[0].start, offset, columns, origins)


# ── Parquet ──────────────────────────────────────────────────────────────────
class ParquetReader:
    def __init__(self, path: str) -> None:
        self.path = path
        # The footer only; the file is opened again while its rows are read, so a dataset of
        # thousands of files never holds thousands of open files.
        meta = pyarrow().parquet.read_metadata(path)
        group_rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        if any(n < 0 for n in group_rows) or sum(group_rows) != meta.num_rows:  # a damaged footer
            raise ValueError(f"its footer lists {meta.num_rows} rows, its row groups {group_rows}")
        self.rows = meta.num_rows
        self.group_starts = np.cumsum([0, *group_rows])
        fields = list(meta.schema.to_arrow_schema())
        self._schema = {f.name: (leaf_dtype(f.type), str(f.type)) for f in fields}
        self._types = {f.name: f.type for f in fields}
        self.duplicates = _duplicates([f.name for f in fields])

    def schema(self) -> dict[str, tuple[np.dtype | None, str]]:
        return self._schema

    def arrow_type(self, column: str) -> Any:
        return self._types.get(column)

    def read(self, first: int, stop: int, chunk: int, columns: list[str]) -> Iterator[tuple[int, int, Any, Any]]:
        """(row in file, rows, columns or None, problem) for rows ``first … stop - 1``, row group by row group."""
        try:
            file = pyarrow().parquet.ParquetFile(self.path)
        except (OSError, ValueError, pyarrow().ArrowException) as e:  # changed or removed since its footer was read
            yield first, stop - first, None, f"cannot open: {_one_line(e)}"
            return
        try:
            yield from self._read_groups(file, first, stop, chunk, columns)
        finally:
            file.close()

    def _read_groups(
        self, file: Any, first: int, stop: int, chunk: int, columns: list[str]
    ) -> Iterator[tuple[int, int, Any, Any]]:
        for g in range(len(self.group_starts) - 1):
            g_start, g_stop = int(self.group_starts[g]), int(self.group_starts[g + 1])
            if g_stop <= first or g_start >= stop:
                continue
            at, problem = g_start, None
            try:
                for batch in file.iter_batches(batch_size=chunk, row_groups=[g], columns=columns):
                    lo, hi = max(at, first), min(at + batch.num_rows, stop, g_stop)
                    if lo < hi:
                        cols = {name: batch.column(name).slice(lo - at, hi - lo) for name in columns}
                        yield lo, hi - lo, cols, None
                    at += batch.num_rows
                    if at >= g_stop:  # rows past the footer's count (a damaged file) are not the group's
                        break
                if at < g_stop:  # a damaged file whose pages hold fewer rows than its footer lists
                    problem = f"row group {g} holds {at - g_start} rows, its footer lists {g_stop - g_start}"
            except (OSError, ValueError, pyarrow().ArrowException) as e:  # a corrupt page
                problem = f"cannot read row group {g}: {_one_line(e)}"
            if problem is not None:  # the rest of this row group is lost
                lo = max(min(at, g_stop), first)
                if lo < min(g_stop, stop):
                    yield lo, min(g_stop, stop) - lo, None, problem


def _parquet_files(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    files: list[str] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(
                str(p)
                for p in path.rglob("*.parquet")
                if not any(part.startswith((".", "_")) for part in p.relative_to(path).parts)
            )
            if not found:
                raise UsageError(f"{path}: directory holds no .parquet files")
            files += found
        elif path.is_file():
            files.append(str(path))
        else:
            raise UsageError(f"{path}: no such file or directory")
    return files


def parquet_source(paths: Sequence[str | os.PathLike[str]]) -> Source:
    parts, start, columns = [], 0, None
    for path in _parquet_files(paths):
        try:
            reader: Any = ParquetReader(path)
        except (OSError, ValueError, pyarrow().ArrowException) as e:  # a damaged footer raises any Arrow error
            # Its row count is unknown, so it adds no rows; the run stops on it, or `skip` records it.
            parts.append(Part(path, start, 0, None, f"not a readable Parquet file: {_one_line(e)}"))
            continue
        parts.append(Part(path, start, reader.rows, reader))
        start += reader.rows
        columns = columns if columns is not None else list(reader.schema())
    return Source(parts, columns or [])


# ── numpy and memory ─────────────────────────────────────────────────────────
class ArraysReader:
    """Columns that are numpy arrays (rows along axis 0) or Arrow arrays of one length."""

    def __init__(self, path: str, columns: Mapping[str, Any], duplicates: dict[str, int] | None = None) -> None:
        for name, col in columns.items():
            if getattr(col, "ndim", 1) == 0:
                raise DataError(f"{path}: column {name!r} is a single value, not rows (an array of at least 1 axis)")
        lengths = {name: len(col) for name, col in columns.items()}
        if len(set(lengths.values())) > 1:
            raise DataError(f"{path}: columns differ in length: " + ", ".join(f"{k} {n}" for k, n in lengths.items()))
        self.columns = dict(columns)
        self.rows = next(iter(lengths.values()), 0)
        self.duplicates = duplicates or {}

    def schema(self) -> dict[str, tuple[np.dtype | None, str]]:
        out = {}
        for name, col in self.columns.items():
            if isinstance(col, np.ndarray):
                out[name] = (col.dtype if col.dtype.kind in "biuf" else None, str(col.dtype))
            else:
                out[name] = (leaf_dtype(col.type), str(col.type))
        return out

    def arrow_type(self, column: str) -> Any:
        col = self.columns.get(column)
        return None if col is None or isinstance(col, np.ndarray) else col.type

    def read(self, first: int, stop: int, chunk: int, columns: list[str]) -> Iterator[tuple[int, int, Any, Any]]:
        for lo in range(first, stop, chunk):
            hi = min(lo + chunk, stop)
            yield lo, hi - lo, {name: slice_col(self.columns[name], lo, hi) for name in columns}, None


def numpy_source(path: str | os.PathLike[str], sig: Signature) -> Source:
    """A .npy file (rows of the model's one input) or a .npz file (one array per column)."""
    path = Path(path)
    if path.suffix == ".npy" and len(sig.inputs) != 1:
        names = ", ".join(i.name for i in sig.inputs)
        raise UsageError(f"{path}: a .npy file feeds one input, the model has {names}; use a .npz")
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        if path.suffix == ".npy":
            # mmap: rows are paged in as blocks are read, never the whole file at once.
            columns = {sig.inputs[0].column: np.load(path, mmap_mode="r", allow_pickle=False)}
        else:
            with np.load(path, allow_pickle=False) as npz:  # a zip: each array is read whole when opened
                columns = {name: npz[name] for name in npz.files}
    except Exception as e:  # noqa: BLE001
        # numpy parses the header with Python's tokenizer and reads zips with zipfile/zlib: a damaged
        # file raises any of ValueError, SyntaxError, TokenError, EOFError, BadZipFile, zlib.error,
        # MemoryError... All of them mean the same to a user.
        why = _one_line(e) if isinstance(e, (OSError, ValueError)) else f"{type(e).__name__}: {_one_line(e)}"
        raise DataError(f"{path}: not a readable {path.suffix} file: {why}") from None
    return memory_source(columns, str(path))


def _duplicates(names: Sequence[str]) -> dict[str, int]:
    """Column names that appear more than once, with their counts."""
    counts = Counter(names)
    return {name: n for name, n in counts.items() if n > 1}


def memory_source(data: Any, path: str = MEMORY) -> Source:
    """Arrays by column name, or an Arrow table / record batch."""
    duplicates: dict[str, int] = {}
    if hasattr(data, "column_names") and hasattr(data, "column"):
        names = list(data.column_names)
        duplicates = _duplicates(names)
        columns: dict[str, Any] = {}
        for k, name in enumerate(names):  # by position: a duplicated name cannot be looked up
            columns.setdefault(name, data.column(k))
    elif isinstance(data, Mapping):
        columns = {str(k): v if is_arrowish(v) else np.asarray(v) for k, v in data.items()}
    else:
        raise UsageError(f"data must be arrays by column name or an Arrow table, not {type(data).__name__}")
    reader = ArraysReader(path, columns, duplicates)
    return Source([Part(path, 0, reader.rows, reader)], list(columns))


def is_arrowish(v: Any) -> bool:
    return type(v).__module__.startswith("pyarrow")


def open_source(data: Any, sig: Signature) -> Source:
    """Paths (Parquet files or directories, or one .npy/.npz) or in-memory data (arrays by name, an Arrow table)."""
    if isinstance(data, (str, os.PathLike)):
        data = [data]
    is_paths = isinstance(data, (list, tuple)) and all(isinstance(d, (str, os.PathLike)) for d in data)
    if not is_paths:
        return memory_source(data)
    if not data:
        raise UsageError("no input data given")
    if {Path(d).suffix for d in data} & {".npy", ".npz"}:
        if len(data) != 1:
            raise UsageError("pass one .npy or .npz file, or Parquet files")
        return numpy_source(data[0], sig)
    return parquet_source(data)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
