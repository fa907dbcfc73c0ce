"""The output directory: one Parquet shard per fixed range of input rows, a manifest, skipped rows.

A shard is named by its row range (``part-000000065536-000000131072.parquet``) and written to a
temporary file that is renamed into place when complete, so a shard on disk is always whole. The
manifest lists finished shards; a rerun with the same job skips them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlx.batch.columns import encode, pyarrow, take
from rlx.batch.predict import Predicted, Skip
from rlx.batch.spec import ROW_INDEX, Signature
from rlx.errors import OutputError, UsageError

MANIFEST = "_manifest.json"  # "_" first: pyarrow and Spark read OUT as a dataset and skip it
SKIPPED = "_skipped.jsonl"
SKIPPED_DIR = "_skipped"  # per-shard skipped rows, joined into _skipped.jsonl when the run completes
FORMAT, VERSION = "rlx-batch", 1
ROW_GROUP_ROWS = 16_384  # rows buffered per Parquet row group: fewer, larger groups read faster


def shard_name(start: int, stop: int) -> str:
    return f"part-{start:012d}-{stop:012d}.parquet"


@dataclass(frozen=True)
class ShardResult:
    start: int
    stop: int
    rows: int  # rows written
    skipped: int  # rows skipped
    file: str | None  # None when every row was skipped


def block_table(
    predicted: Predicted, block_start: int, columns: Mapping[str, Any], kept: Iterable[str], sig: Signature
) -> Any:
    """The output rows of one block: row index, carried columns, then the model's outputs."""
    pa = pyarrow()
    rows = predicted.rows
    arrays = {ROW_INDEX: pa.array([block_start + i for i in rows], type=pa.int64())}
    for name in kept:
        col = take(columns[name], rows)
        arrays[name] = col if hasattr(col, "type") else encode(col, ragged=False)
    for o in sig.outputs:
        arrays[o.name] = encode(predicted.outputs[o.name], o.ragged)
    return pa.table(arrays)


class ShardWriter:
    """Writes one shard to a temporary file; ``commit`` renames it into place, ``abort`` removes it."""

    def __init__(self, out_dir: Path, start: int, stop: int, dictionary_columns: list[str] | None = None) -> None:
        self.path = out_dir / shard_name(start, stop)
        # Dictionary encoding only pays for carried columns (ids, labels); on float tensors it is wasted time.
        self.dictionary_columns = dictionary_columns or []
        self.tmp = out_dir / f".{self.path.name}.tmp-{os.getpid()}"
        self.writer: Any = None
        self.buffer: list[Any] = []
        self.rows = 0

    def write(self, table: Any) -> None:
        if table.num_rows == 0:
            return
        if self.writer is None:
            self.writer = pyarrow().parquet.ParquetWriter(
                self.tmp, table.schema, use_dictionary=self.dictionary_columns or False
            )
        self.buffer.append(table.cast(self.writer.schema) if table.schema != self.writer.schema else table)
        self.rows += table.num_rows
        if sum(t.num_rows for t in self.buffer) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            self.writer.write_table(pyarrow().concat_tables(self.buffer))
            self.buffer = []

    def commit(self) -> str | None:
        if self.writer is None:
            return None
        self._flush()
        self.writer.close()
        os.replace(self.tmp, self.path)
        return self.path.name

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.tmp.unlink(missing_ok=True)


def write_skipped_sidecar(out_dir: Path, start: int, stop: int, skipped: list[Skip]) -> None:
    if skipped:
        path = out_dir / SKIPPED_DIR / (shard_name(start, stop).removesuffix(".parquet") + ".jsonl")
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, "".join(json.dumps(s.as_json()) + "\n" for s in skipped))


class OutputDir:
    """The manifest of a run: which shards are finished, for which job (a rerun must be the same job)."""

    def __init__(self, path: str | os.PathLike[str], job: dict[str, Any]) -> None:
        self.path = Path(path)
        self.job = job
        self.created = not self.path.exists()
        self.shards: dict[str, dict[str, Any]] = {}
        if not self.created:
            self._resume()

    def _resume(self) -> None:
        if not self.path.is_dir():
            raise UsageError(f"{self.path} exists and is not a directory; choose another output")
        manifest = self.path / MANIFEST
        if not manifest.is_file():
            if any(self.path.iterdir()):
                raise UsageError(f"{self.path} is not empty and holds no {MANIFEST}; choose another output directory")
            return
        try:
            saved = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"{manifest}: unreadable ({e}); remove {self.path} to start over") from None
        if saved.get("format") != FORMAT or saved.get("job") != self.job:
            differs = sorted(k for k in self.job if saved.get("job", {}).get(k) != self.job[k])
            raise UsageError(
                f"{self.path} holds a run of another job (differs in {', '.join(differs) or 'format'}); "
                "use another output directory or remove it to start over"
            )
        # A shard counts as finished only if the manifest lists it and its file is there.
        self.shards = {
            name: s for name, s in saved.get("shards", {}).items() if s["file"] is None or (self.path / name).is_file()
        }

    def done(self, start: int, stop: int) -> bool:
        return shard_name(start, stop) in self.shards

    def prepare(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.remove_temporary_files()

    def remove_temporary_files(self) -> None:
        """Shards a killed run (or a Ray worker stopped mid-shard) did not finish."""
        for stale in [*self.path.glob(".part-*.tmp-*"), *self.path.glob(f"{SKIPPED_DIR}/.*.tmp-*")]:
            stale.unlink(missing_ok=True)

    def record(self, result: ShardResult) -> None:
        self.shards[shard_name(result.start, result.stop)] = asdict(result)
        self._write_manifest(complete=False)

    def finish(self, unreadable: list[Skip], total_rows: int) -> None:
        """skipped.jsonl (unreadable files first, then shard by shard) and the manifest marked complete."""
        lines = [json.dumps(s.as_json()) + "\n" for s in unreadable]
        for name in sorted(self.shards):
            sidecar = self.path / SKIPPED_DIR / (name.removesuffix(".parquet") + ".jsonl")
            if sidecar.is_file():
                lines.append(sidecar.read_text(encoding="utf-8"))
        # The per-shard records stay (under "_", unseen by readers): a rerun rebuilds this file from them.
        atomic_write(self.path / SKIPPED, "".join(lines))
        self._write_manifest(complete=True, total_rows=total_rows)

    def clean_up_after_failure(self) -> None:
        """No temporary files stay; a run that fails before finishing any shard leaves no directory it created."""
        if self.path.is_dir():
            self.remove_temporary_files()
        if self.created and self.path.is_dir() and not self.shards:
            shutil.rmtree(self.path / SKIPPED_DIR, ignore_errors=True)
            (self.path / MANIFEST).unlink(missing_ok=True)
            try:
                self.path.rmdir()
            except OSError:  # someone else's files are there: leave them
                pass

    def _write_manifest(self, complete: bool, **extra: Any) -> None:
        body = {"format": FORMAT, "version": VERSION, "job": self.job, "complete": complete, **extra}
        body["shards"] = dict(sorted(self.shards.items()))
        atomic_write(self.path / MANIFEST, json.dumps(body, indent=1) + "\n")


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {e}") from None
