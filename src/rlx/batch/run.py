"""Run a bundle over a dataset: shards of rows, each read, predicted and written on its own."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlx.batch.columns import is_arrow, pyarrow
from rlx.batch.output import OutputDir, ShardResult, ShardWriter, block_table, write_skipped_sidecar
from rlx.batch.predict import Predictor, Skip
from rlx.batch.progress import Progress
from rlx.batch.source import Source, open_source
from rlx.batch.spec import ROW_INDEX, Signature, signature
from rlx.errors import DataError, UsageError
from rlx.formats.layout import META_FILE, PROGRAM_FILE, WEIGHTS_FILE, bundle_root
from rlx.runtime import Model, load

DEFAULT_BATCH_SIZE = 256
DEFAULT_SHARD_ROWS = 65_536


@dataclass(frozen=True)
class Job:
    """Everything a process needs to run shards of a run: plain data, so it travels to Ray workers."""

    bundle: str
    data: tuple[str, ...]
    output: str
    batch_size: int = DEFAULT_BATCH_SIZE
    columns: tuple[tuple[str, str], ...] = ()
    keep: tuple[str, ...] | None = None
    engine: str | None = None  # None: the bundle's tuning.json where it matches this machine, else numpy
    on_error: str = "stop"
    shard_rows: int = DEFAULT_SHARD_ROWS
    precision: str | None = None  # with ``engine``; None: f32 (or the tuned one)


@dataclass(frozen=True)
class BatchSummary:
    """What ``rlx.batch.run`` did; ``line()`` says it in one line (rows written/skipped, shards, seconds, rows/s)."""

    output: str
    rows: int  # rows in the input
    written: int  # rows with outputs
    skipped: int  # rows left out (see OUTPUT/_skipped.jsonl)
    shards_written: int
    shards_reused: int  # finished by an earlier run and left as they were
    seconds: float
    processed: int = 0  # rows this run read (reused shards not counted)
    columns: list[str] = field(default_factory=list)
    shards_redone: list[str] = field(default_factory=list)  # listed by the manifest but failed verification
    removed: list[str] = field(default_factory=list)  # rlx-named files the manifest did not vouch for

    @property
    def rows_per_second(self) -> float:
        return self.processed / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        repaired = ""
        if self.shards_redone:
            repaired += f", {len(self.shards_redone)} failed verification and redone (first: {self.shards_redone[0]})"
        if self.removed:
            repaired += f", {len(self.removed)} stray files removed"
        return (
            f"{self.written:,} rows written, {self.skipped:,} skipped, {self.shards_written} shards written, "
            f"{self.shards_reused} reused{repaired}, {self.seconds:.2f} s ({self.rows_per_second:,.0f} rows/s) "
            f"-> {self.output}"
        )


class Session:
    """A job opened in one process: the model loaded once, the data's files listed and checked."""

    def __init__(self, job: Job, model: Model | None = None) -> None:
        for what, value in (("batch size", job.batch_size), ("shard rows", job.shard_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{what} must be a whole number of at least 1, not {value!r}")
        pyarrow()  # outputs are Parquet: say which extra is missing before loading anything
        self.job = job
        self.model = model or load(job.bundle, engine=job.engine, precision=job.precision)
        if self.model.tuning_fallback:  # one line, before any progress: the run is not on the tuned engine
            print(f"rlx: {self.model.tuning_fallback}", file=sys.stderr)
        self.sig = signature(self.model, dict(job.columns))
        self.source = open_source(list(job.data), self.sig)
        self.kept = self.source.check(self.sig, job.keep)
        _check_names(self.sig, self.kept)
        self.grid = grid_size(self.sig, job.batch_size)
        self.predictor = Predictor(self.model, self.sig, job.on_error)

    def shards(self) -> list[tuple[int, int]]:
        size = -(-self.job.shard_rows // self.grid) * self.grid  # a whole number of batches
        total = self.source.total_rows
        return [(a, min(a + size, total)) for a in range(0, total, size)]

    def unreadable(self) -> list[Skip]:
        """Files whose rows cannot even be counted (the others are recorded with the shard they fall in)."""
        return [s for s in file_problems(self.source, self.job.on_error) if s.count == 0]

    def run_shard(self, start: int, stop: int) -> ShardResult:
        out_dir = Path(self.job.output)
        writer = ShardWriter(out_dir, start, stop, self.kept)
        skipped: list[Skip] = []
        try:
            for block in self.source.blocks(start, stop, self.grid):
                predicted = self.predictor.block(block)
                skipped += predicted.skipped
                if predicted.rows:
                    where = block.locate(0)[0]
                    table = block_table(
                        predicted, block.start, block.columns or {}, self.kept, self.sig, where,
                        self.source.carried_types,
                    )  # fmt: skip
                    writer.write(table, where)
            skipped_sha256 = write_skipped_sidecar(out_dir, start, stop, skipped)
            written = writer.commit()
        except BaseException:
            writer.abort()
            raise
        file, size, sha256 = written if written is not None else (None, 0, None)
        return ShardResult(start, stop, writer.rows, sum(s.count for s in skipped), file, size, sha256, skipped_sha256)

    def fingerprint(self) -> dict[str, Any]:
        """What a rerun must share with the run it resumes: same bundle, data, columns and batching."""
        job = asdict(self.job)
        # Not compared: where OUT is, and on_error (a rerun with `skip` may finish a run that stopped).
        for key in ("output", "on_error", "precision"):
            job.pop(key)
        # What runs, as resolved (a tuned choice included): shards of two engines or precisions are not
        # one run. ("numpy" alone at f32, as manifests written before precisions were recorded say.)
        model = self.model
        job["engine"] = model.engine.name + ("" if model.precision == "f32" else f" {model.precision}")
        job["bundle"] = bundle_digest(self.job.bundle)  # the content, not the path
        job["data"] = [[p.path, p.rows, _size(p.path)] for p in self.source.parts]
        job["columns"] = [list(c) for c in self.job.columns]
        job["keep"] = self.kept
        return job


def file_problems(source: Source, on_error: str) -> list[Skip]:
    """Files with a problem (unreadable, a column missing or of the wrong type); in ``stop`` mode the
    first one is an error, raised before any work is done."""
    found = [
        Skip(p.start, p.rows, p.path, 0 if p.rows else None, p.problem_column, p.problem)
        for p in source.parts
        if p.problem is not None
    ]
    if found and on_error == "stop":
        raise DataError(found[0].message())
    return found


def grid_size(sig: Signature, batch_size: int) -> int:
    """Rows per batch: the batch symbol's maximum caps it."""
    return min(batch_size, sig.max_batch) if sig.batched and sig.max_batch else batch_size


def _check_names(sig: Signature, kept: Sequence[str]) -> None:
    clash = sorted({o.name for o in sig.outputs} & {ROW_INDEX, *kept})
    if clash:
        raise UsageError(f"output {clash[0]!r} has the name of a carried input column; keep fewer columns (--keep)")


def bundle_digest(bundle: str) -> str:
    """program.json and meta.json hashed, with the weights' size (hashing large weights would be slow)."""
    root = bundle_root(Path(bundle))
    h = hashlib.sha256()
    for name in (PROGRAM_FILE, META_FILE):
        h.update((root / name).read_bytes())
    h.update(str(_size(str(root / WEIGHTS_FILE))).encode())
    return h.hexdigest()[:32]


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def make_job(
    bundle: str | os.PathLike[str],
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    columns: Mapping[str, str] | None = None,
    keep: Sequence[str] | None = None,
    **settings: Any,
) -> Job:
    """A ``Job`` with absolute paths; ``settings`` are its other fields (``run``'s keywords)."""
    paths = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    return Job(
        bundle=str(Path(bundle).resolve()),
        data=tuple(str(Path(p).resolve()) for p in paths),
        output=str(Path(output).resolve()),
        columns=tuple(sorted((columns or {}).items())),
        keep=None if keep is None else tuple(keep),
        **settings,
    )


def run(
    bundle: str | os.PathLike[str],
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    columns: Mapping[str, str] | None = None,
    keep: Sequence[str] | None = None,
    engine: str | None = None,
    precision: str | None = None,
    on_error: str = "stop",
    shard_rows: int = DEFAULT_SHARD_ROWS,
    progress: bool | None = None,
) -> BatchSummary:
    """Run ``bundle`` over ``data`` (Parquet files/directories, or a .npy/.npz) into Parquet shards in ``output``.

    ``columns`` maps input names to data columns; ``keep`` names the input columns carried into the
    output (default: every column that is not a model input); ``on_error="skip"`` records bad rows in
    ``output/_skipped.jsonl`` and goes on. ``engine`` (and ``precision``): what runs the model; by
    default the bundle's ``tuning.json`` (``rlx tune``) where it matches this machine, else numpy (a
    tuning.json that does not match is named in one line on stderr). Finished shards of an earlier run of the same job are kept
    (``output/_manifest.json`` lists them); a rerun with another bundle, data or batch size is refused.
    """
    job = make_job(
        bundle, data, output, batch_size=batch_size, columns=columns, keep=keep,
        engine=engine, precision=precision, on_error=on_error, shard_rows=shard_rows,
    )  # fmt: skip
    return run_job(job, progress)


def run_job(job: Job, progress: bool | None = None) -> BatchSummary:
    """``run`` for a prepared job, in this process."""
    session = Session(job)
    return drive(session, lambda todo: (session.run_shard(a, b) for a, b in todo), progress)


def drive(session: Session, execute: Any, progress: bool | None) -> BatchSummary:
    """Run the shards not finished yet (``execute`` maps shard ranges to results) and complete the manifest."""
    started = time.perf_counter()
    unreadable = session.unreadable()
    out = OutputDir(session.job.output, session.fingerprint())
    shards = session.shards()
    out.open()  # the directory exists and this run holds its lock
    failed = True
    try:
        out.verify(shards)
        out.prepare()
        todo = [(a, b) for a, b in shards if not out.done(a, b)]
        bar = Progress(session.source.total_rows, progress)
        bar.skip(sum(b - a for a, b in shards) - sum(b - a for a, b in todo))
        try:
            for result in execute(todo):
                out.record(result)
                bar.advance(result.stop - result.start)
            out.finish(unreadable, session.source.total_rows)
        finally:
            bar.close()
        failed = False
    finally:
        out.close(failed)
    done = out.shards.values()
    return BatchSummary(
        output=str(out.path),
        rows=session.source.total_rows,
        written=sum(s["rows"] for s in done),
        skipped=sum(s["skipped"] for s in done) + len(unreadable),
        shards_written=len(todo),
        shards_reused=len(shards) - len(todo),
        seconds=time.perf_counter() - started,
        processed=sum(b - a for a, b in todo),
        columns=[ROW_INDEX, *session.kept, *(o.name for o in session.sig.outputs)],
        shards_redone=out.redone,
        removed=out.removed,
    )


def iter_batches(
    model: Model | str | os.PathLike[str],
    data: Any,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    columns: Mapping[str, str] | None = None,
    keep: Sequence[str] | None = None,
    on_error: str = "stop",
    engine: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield one dict per batch: ``row_index``, the carried columns and every output, as numpy arrays.

    ``model`` is a loaded ``Model`` or a bundle path; ``data`` is arrays by column name (rows along axis
    0), an Arrow table, or paths as ``run`` takes them. Skipped rows (``on_error="skip"``) are left
    out; ``row_index`` says which rows each batch holds. Ragged outputs come as lists of arrays.
    """
    if not isinstance(model, Model):
        model = load(os.fspath(model), engine=engine)
    sig = signature(model, columns)
    source: Source = open_source(data, sig)
    kept = source.check(sig, keep)
    _check_names(sig, kept)
    predictor = Predictor(model, sig, on_error)
    file_problems(source, on_error)
    for block in source.blocks(0, source.total_rows, grid_size(sig, batch_size)):
        predicted = predictor.block(block)
        if not predicted.rows:
            continue
        batch: dict[str, Any] = {ROW_INDEX: np.asarray(predicted.rows, dtype=np.int64) + block.start}
        for name in kept:
            col = (block.columns or {})[name]
            rows = col.take(predicted.rows) if is_arrow(col) else col[predicted.rows]
            batch[name] = rows.to_numpy(zero_copy_only=False) if is_arrow(rows) else rows
        batch.update(predicted.outputs)
        yield batch
