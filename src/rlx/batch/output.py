"""The output directory: one Parquet shard per fixed range of input rows, a manifest, skipped rows, a lock.

A shard is named by its row range (``part-000000065536-000000131072.parquet``), written to a temporary
file that is fsynced and renamed into place when complete, so a shard on disk is always whole. The
manifest lists each finished shard with its row range, row count, byte size and sha256, and is itself
replaced atomically after the shard is in place. A rerun of the same job verifies every listed shard
(the file is there, has that size and hash, pyarrow reads it, it holds those rows) and redoes any that
fails; it removes the files of rlx's own naming that the manifest does not vouch for (stray shards,
temporaries of a killed run) and refuses a directory holding anything else a reader would take for
output. So after a run that succeeds, the directory reads as the input's rows, once each, in order.

A lock file (``_rlx-batch.lock``, created with O_CREAT|O_EXCL) keeps a second run out while one is
writing; a lock whose process has died on this host is taken over.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlx.batch.columns import Segments, encode, pyarrow, take
from rlx.batch.predict import Predicted, Skip
from rlx.batch.spec import ROW_INDEX, Signature
from rlx.errors import DataError, OutputError, UsageError

MANIFEST = "_manifest.json"  # "_" first: pyarrow and Spark read OUT as a dataset and skip it
SKIPPED = "_skipped.jsonl"
SKIPPED_DIR = "_skipped"  # per-shard skipped rows, joined into _skipped.jsonl when the run completes
LOCK = "_rlx-batch.lock"
FORMAT, VERSION = "rlx-batch", 2  # version 1 manifests had no hashes: their shards are redone
ROW_GROUP_ROWS = 16_384  # rows buffered per Parquet row group: fewer, larger groups read faster
SHARD_FILE = re.compile(r"part-(\d{12})-(\d{12})\.parquet")
SIDECAR_FILE = re.compile(r"part-(\d{12})-(\d{12})\.jsonl")
# Temporaries rlx writes (".<name>.tmp-<pid>") and locks set aside while taking a stale one over.
TEMPORARY = re.compile(r"\.(part-\d{12}-\d{12}\.(parquet|jsonl)|_manifest\.json|_skipped\.jsonl)\.tmp-\d+")
LOCK_ASIDE = re.compile(re.escape(LOCK) + r"\.stale-\d+-[0-9a-f]+")
SHA256 = re.compile(r"[0-9a-f]{64}")


def shard_name(start: int, stop: int) -> str:
    return f"part-{start:012d}-{stop:012d}.parquet"


def sidecar_name(start: int, stop: int) -> str:
    return shard_name(start, stop).removesuffix(".parquet") + ".jsonl"


@dataclass(frozen=True)
class ShardResult:
    """One finished shard, as the manifest records it."""

    start: int
    stop: int
    rows: int  # rows written
    skipped: int  # rows skipped
    file: str | None  # None when every row was skipped
    bytes: int = 0  # size of ``file``
    sha256: str | None = None  # of ``file``
    skipped_sha256: str | None = None  # of the shard's skipped-rows record (None: no row skipped)


def block_table(
    predicted: Predicted,
    block_start: int,
    columns: Mapping[str, Any],
    kept: Iterable[str],
    sig: Signature,
    where: str = "input",
    types: Mapping[str, Any] | None = None,
) -> Any:
    """The output rows of one block: row index, carried columns, then the model's outputs (``where``: the
    file the block comes from, for errors; ``types``: carried columns cast to one type in every shard)."""
    pa = pyarrow()
    rows = predicted.rows
    arrays = {ROW_INDEX: pa.array([block_start + i for i in rows], type=pa.int64())}
    for name in kept:
        try:
            col = columns[name]
            target = (types or {}).get(name)
            if target is not None:
                col = Segments([c.cast(target) for c in col]) if isinstance(col, Segments) else col.cast(target)
            col = take(col, rows)
            arrays[name] = col if hasattr(col, "type") else encode(col, ragged=False)
        except pa.ArrowException as e:  # not an I/O error: the column's values or types
            raise DataError(
                f"{where}: carried column {name!r} cannot be written to Parquet ({_one_line(e)}); "
                "leave it out with --keep"
            ) from None
    for o in sig.outputs:
        arrays[o.name] = encode(predicted.outputs[o.name], o.ragged)
    return pa.table(arrays)


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (best effort: some filesystems cannot sync a directory)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def file_digest(path: Path, sync: bool = False) -> tuple[int, str]:
    """(size, sha256) of ``path``; with ``sync`` the file's data is flushed to disk first."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        if sync:
            os.fsync(f.fileno())
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


class ShardWriter:
    """Writes one shard to a temporary file; ``commit`` fsyncs and renames it into place, ``abort`` removes it."""

    def __init__(self, out_dir: Path, start: int, stop: int, dictionary_columns: list[str] | None = None) -> None:
        self.path = out_dir / shard_name(start, stop)
        self.start, self.stop = start, stop
        # Dictionary encoding only pays for carried columns (ids, labels); on float tensors it is wasted time.
        self.dictionary_columns = dictionary_columns or []
        self.tmp = out_dir / f".{self.path.name}.tmp-{os.getpid()}"
        self.writer: Any = None
        self.buffer: list[Any] = []
        self.rows = 0

    def write(self, table: Any, where: str = "input") -> None:
        if table.num_rows == 0:
            return
        pa = pyarrow()
        try:
            if self.writer is None:
                self.writer = pa.parquet.ParquetWriter(
                    self.tmp, table.schema, use_dictionary=self.dictionary_columns or False
                )
            self.buffer.append(table.cast(self.writer.schema) if table.schema != self.writer.schema else table)
        except OSError as e:
            raise OutputError(f"{self.tmp.parent}: cannot write {self.path.name}: {_one_line(e)}") from None
        except pa.ArrowException as e:  # a type Parquet cannot hold, or rows whose types changed between files
            raise DataError(
                f"{where}: dataset rows {self.start}..{self.stop - 1} cannot be written to Parquet "
                f"({_one_line(e)}); leave odd carried columns out with --keep"
            ) from None
        self.rows += table.num_rows
        if sum(t.num_rows for t in self.buffer) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            try:
                self.writer.write_table(pyarrow().concat_tables(self.buffer))
            except OSError as e:
                raise OutputError(f"{self.tmp.parent}: cannot write {self.path.name}: {_one_line(e)}") from None
            self.buffer = []

    def commit(self) -> tuple[str, int, str] | None:
        """(file name, size, sha256) of the shard now in place, or None when no row had outputs."""
        if self.writer is None:
            return None
        self._flush()
        try:
            self.writer.close()
            self.writer = None
            size, digest = file_digest(self.tmp, sync=True)  # on disk before the rename makes it visible
            os.replace(self.tmp, self.path)
        except OSError as e:
            raise OutputError(f"{self.tmp.parent}: cannot write {self.path.name}: {_one_line(e)}") from None
        # The directory is synced once, when the run finishes: a rename lost in a crash before that
        # leaves a shard missing, which the next run's verification finds and redoes.
        return self.path.name, size, digest

    def abort(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:  # noqa: BLE001 (the write already failed; that error is the one to report)
                pass
            self.writer = None
        self.tmp.unlink(missing_ok=True)


def write_skipped_sidecar(out_dir: Path, start: int, stop: int, skipped: list[Skip]) -> str | None:
    """The shard's skipped rows under ``_skipped/``; returns the record's sha256 (None when nothing was skipped)."""
    if not skipped:
        return None
    path = out_dir / SKIPPED_DIR / sidecar_name(start, stop)
    try:
        path.parent.mkdir(exist_ok=True)
    except OSError as e:
        raise OutputError(f"{path.parent}: cannot write: {_one_line(e)}") from None
    text = "".join(json.dumps(s.as_json()) + "\n" for s in skipped)
    atomic_write(path, text)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ── the lock ─────────────────────────────────────────────────────────────────
def _process_started(pid: int) -> str | None:
    """When process ``pid`` started (Linux /proc; None elsewhere or when it is gone), to tell a reused pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None  # field 22 of stat: start time in clock ticks


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's process
        return True
    except (ProcessLookupError, OverflowError, ValueError):  # gone, or a pid no kernel hands out
        return False
    return True


class Lock:
    """``OUT/_rlx-batch.lock``: who writes into OUT now (pid, host, process start, a token of this holder)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = out / LOCK
        self.held: bytes | None = None

    def acquire(self) -> None:
        body = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "process_started": _process_started(os.getpid()),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "token": secrets.token_hex(8),
        }
        mine = (json.dumps(body) + "\n").encode()
        for _ in range(5):  # a few rounds: a stale lock taken over, or one released while we looked
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                seen = self._read()
                if seen is None:  # released meanwhile
                    continue
                holder = _parse_lock(seen)
                if holder is not None and _stale(holder) and self._take_over(seen):
                    continue
                raise UsageError(_held_message(self.out, self.path, holder)) from None
            except OSError as e:
                raise OutputError(
                    f"{self.out}: cannot write: {_one_line(e)}; choose a writable output directory"
                ) from None
            try:
                os.write(fd, mine)
                os.fsync(fd)
            except OSError as e:  # a full disk: no half-written lock stays to block the next run
                self.path.unlink(missing_ok=True)
                raise OutputError(f"{self.out}: cannot write {LOCK}: {_one_line(e)}") from None
            finally:
                os.close(fd)
            self.held = mine
            return
        raise UsageError(_held_message(self.out, self.path, None))

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise OutputError(f"{self.path}: cannot read: {_one_line(e)}") from None

    def _take_over(self, seen: bytes) -> bool:
        """Set the stale lock aside by rename (atomic) and check it is the one judged stale: a run that
        took it over first and wrote its own in between must keep it."""
        aside = self.path.with_name(f"{LOCK}.stale-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return True  # gone already: try to create ours
        except OSError:
            return False
        try:
            if aside.read_bytes() == seen:
                return True
            try:  # a live run's lock: put it back (unless yet another run holds the name now)
                os.link(aside, self.path)
            except OSError:
                pass
            return False
        finally:
            aside.unlink(missing_ok=True)

    def release(self) -> None:
        if self.held is None:
            return
        try:
            if self.path.read_bytes() == self.held:
                self.path.unlink()
        except OSError:
            pass
        self.held = None


def _parse_lock(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict):
        return None
    pid = body.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(body.get("host"), str):
        return None
    return body


def _stale(holder: Mapping[str, Any]) -> bool:
    """The holder's process is gone (only decidable on its own host), or its pid now names another process."""
    if holder.get("host") != socket.gethostname():
        return False
    pid = holder["pid"]
    if not _alive(pid):
        return True
    started = holder.get("process_started")
    now = _process_started(pid)
    return started is not None and now is not None and started != now


def _held_message(out: Path, lock: Path, holder: Mapping[str, Any] | None) -> str:
    if holder is None:
        who = f"{lock} is held (its content is not an rlx lock)"
    else:
        who = f"another rlx batch run (pid {holder['pid']} on {holder.get('host', '?')}, since {holder.get('since', '?')}) is writing into {out}"
    return f"{who}; wait for it to finish, or remove {lock} if no run is going on"


# ── the manifest and the directory ───────────────────────────────────────────
class OutputDir:
    """The manifest of a run: which shards are finished, for which job (a rerun must be the same job).

    ``open`` creates the directory (if needed) and takes the lock; ``verify`` reads the manifest and keeps
    the shards that pass every check; ``prepare`` removes what the manifest does not vouch for.
    """

    def __init__(self, path: str | os.PathLike[str], job: dict[str, Any]) -> None:
        self.path = Path(path)
        self.job = job
        self.created = False
        self.lock = Lock(self.path)
        self.shards: dict[str, dict[str, Any]] = {}
        self.had_manifest = False
        self.redone: list[str] = []  # listed shards that failed verification (redone by this run)
        self.removed: list[str] = []  # files of rlx's naming the manifest did not list, removed
        self.failed: set[str] = set()  # listed shards (names without suffix) that failed verification

    def open(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"{self.path} exists and is not a directory; choose another output")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a parent that is a file, or not writable
            raise OutputError(f"{self.path.parent}: cannot create: {_one_line(e)}; choose another output") from None
        try:
            os.mkdir(self.path)
            self.created = True
        except FileExistsError:
            if not self.path.is_dir():
                raise UsageError(f"{self.path} exists and is not a directory; choose another output") from None
        except OSError as e:
            raise OutputError(
                f"{self.path}: cannot create: {_one_line(e)}; choose a writable output directory"
            ) from None
        try:
            self.lock.acquire()
        except BaseException:
            self._remove_if_created()
            raise

    def close(self, failed: bool) -> None:
        """Release the lock; after a failure, no temporary files stay, and a directory this run created
        stays only if a shard was finished in it."""
        try:
            if failed and self.path.is_dir():
                self.remove_temporary_files()
        finally:
            self.lock.release()
        if failed and self.created and not self.shards:
            shutil.rmtree(self.path / SKIPPED_DIR, ignore_errors=True)
            (self.path / MANIFEST).unlink(missing_ok=True)
            self._remove_if_created()

    def _remove_if_created(self) -> None:
        if self.created:
            try:
                self.path.rmdir()
            except OSError:  # someone else's files are there: leave them
                pass

    def verify(self, expected: Iterable[tuple[int, int]]) -> None:
        """Read the manifest (refusing one that is not rlx's or belongs to another job) and keep the
        listed shards that pass every check; a failed one is redone."""
        manifest = self.path / MANIFEST
        if not manifest.exists():
            return
        self.had_manifest = True
        saved = _read_manifest(manifest, self.path)
        if saved["job"] != self.job:
            differs = sorted(k for k in self.job if saved["job"].get(k) != self.job[k])
            raise UsageError(
                f"{self.path} holds a run of another job (differs in {', '.join(differs) or 'its settings'}); "
                "use another output directory or remove it to start over"
            )
        ranges = set(expected)
        for name, entry in saved["shards"].items():
            problem = _shard_problem(self.path, name, entry, ranges)
            if problem is None:
                self.shards[name] = dict(entry)
            else:
                self.redone.append(f"{name} ({problem})")
                self.failed.add(name.removesuffix(".parquet"))

    def done(self, start: int, stop: int) -> bool:
        return shard_name(start, stop) in self.shards

    def prepare(self) -> None:
        """Refuse files a reader would take for output that rlx did not write; remove rlx-named files the
        manifest does not vouch for (stray or damaged shards, their skipped-rows records, temporaries);
        write the manifest of the shards kept."""
        foreign, ours = self._survey()
        if foreign:
            raise UsageError(
                f"{self.path} holds {foreign[0]!r}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, "
                "which rlx batch did not write; move it away or choose another output directory"
            )
        for path in ours:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                raise OutputError(f"{path}: cannot remove it: {_one_line(e)}") from None
            stray = path.name.rsplit(".", 1)[0] not in self.failed  # not a shard being redone, nor its record
            if stray and TEMPORARY.fullmatch(path.name) is None and LOCK_ASIDE.fullmatch(path.name) is None:
                self.removed.append(str(path.relative_to(self.path)))
        _fsync_dir(self.path)
        self._write_manifest(complete=False)

    def _survey(self) -> tuple[list[str], list[Path]]:
        """(foreign names that block the run, rlx-named files to remove)."""
        foreign: list[str] = []
        remove: list[Path] = []
        keep_sidecars = {
            sidecar_name(s["start"], s["stop"]) for s in self.shards.values() if s.get("skipped_sha256") is not None
        }
        for entry in sorted(os.scandir(self.path), key=lambda e: e.name):
            name = entry.name
            if name in (MANIFEST, SKIPPED, LOCK):
                continue
            if name == SKIPPED_DIR and entry.is_dir(follow_symlinks=False):
                for inner in sorted(os.scandir(entry.path), key=lambda e: e.name):
                    rlx_named = SIDECAR_FILE.fullmatch(inner.name) or TEMPORARY.fullmatch(inner.name)
                    if rlx_named and inner.name not in keep_sidecars:
                        remove.append(Path(inner.path))
                continue
            if SHARD_FILE.fullmatch(name):
                if name not in self.shards:
                    remove.append(Path(entry.path))
            elif TEMPORARY.fullmatch(name) or LOCK_ASIDE.fullmatch(name):
                remove.append(Path(entry.path))
            elif not name.startswith(("_", ".")) or not self.had_manifest:
                # Readers (pyarrow, Spark, pandas) skip names starting with "_" or "."; anything else
                # would be read as output. Without a manifest, the directory is someone else's.
                foreign.append(name)
        return foreign, remove

    def remove_temporary_files(self) -> None:
        """Shards a killed run (or a Ray worker stopped mid-shard) did not finish."""
        for stale in [*self.path.glob(".*.tmp-*"), *self.path.glob(f"{SKIPPED_DIR}/.*.tmp-*")]:
            if TEMPORARY.fullmatch(stale.name):
                stale.unlink(missing_ok=True)

    def record(self, result: ShardResult) -> None:
        """The shard is in place (renamed, synced): now the manifest lists it."""
        self.shards[shard_name(result.start, result.stop)] = asdict(result)
        self._write_manifest(complete=False)

    def finish(self, unreadable: list[Skip], total_rows: int) -> None:
        """skipped.jsonl (unreadable files first, then shard by shard) and the manifest marked complete."""
        lines = [json.dumps(s.as_json()) + "\n" for s in unreadable]
        for name in sorted(self.shards):
            sidecar = self.path / SKIPPED_DIR / (name.removesuffix(".parquet") + ".jsonl")
            if self.shards[name].get("skipped_sha256") is not None:
                try:
                    lines.append(sidecar.read_text(encoding="utf-8"))
                except OSError as e:
                    raise OutputError(f"{sidecar}: cannot read: {_one_line(e)}") from None
        # The per-shard records stay (under "_", unseen by readers): a rerun rebuilds this file from them.
        atomic_write(self.path / SKIPPED, "".join(lines))
        self._write_manifest(complete=True, total_rows=total_rows)
        _fsync_dir(self.path / SKIPPED_DIR)
        _fsync_dir(self.path)

    def _write_manifest(self, complete: bool, **extra: Any) -> None:
        body = {"format": FORMAT, "version": VERSION, "job": self.job, "complete": complete, **extra}
        body["shards"] = dict(sorted(self.shards.items()))
        atomic_write(self.path / MANIFEST, json.dumps(body, indent=1) + "\n")


def _read_manifest(manifest: Path, out: Path) -> dict[str, Any]:
    """The manifest's top level, checked; one that is not an rlx batch manifest is refused in one line."""

    def refuse(why: str) -> UsageError:
        return UsageError(f"{manifest}: {why}; remove {out} (or choose another output directory) to start over")

    try:
        saved = json.loads(manifest.read_bytes())
    except OSError as e:
        raise OutputError(f"{manifest}: cannot read: {_one_line(e)}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise refuse(f"not valid JSON ({_one_line(e)})") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise refuse("not an rlx batch manifest")
    version = saved.get("version")
    if version not in (1, VERSION) or isinstance(version, bool):
        raise refuse(f"manifest version {version!r}, this rlx reads versions 1 and {VERSION}")
    if not isinstance(saved.get("job"), dict):
        raise refuse("its 'job' is not an object")
    if not isinstance(saved.get("shards"), dict):
        raise refuse("its 'shards' is not an object")
    return saved


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shard_problem(out: Path, name: str, entry: Any, ranges: set[tuple[int, int]]) -> str | None:
    """Why the listed shard ``name`` cannot be reused (None: it can)."""
    problem = _entry_problem(name, entry, ranges)
    if problem is not None:
        return problem
    start, stop = entry["start"], entry["stop"]
    side = entry.get("skipped_sha256")
    if side is not None and not _digest_matches(out / SKIPPED_DIR / sidecar_name(start, stop), side):
        return "its skipped-rows record is missing or changed"
    return None if entry["file"] is None else _file_problem(out / name, entry)


def _entry_problem(name: str, entry: Any, ranges: set[tuple[int, int]]) -> str | None:
    """Whether the manifest entry itself is whole and consistent."""
    if not isinstance(entry, dict):
        return "its manifest entry is not an object"
    if not all(_is_int(entry.get(k)) for k in ("start", "stop", "rows", "skipped", "bytes")) or "file" not in entry:
        return "its manifest entry lacks fields"
    start, stop, rows, skipped = entry["start"], entry["stop"], entry["rows"], entry["skipped"]
    if name != shard_name(start, stop) or (start, stop) not in ranges:
        return "not a shard of this job"
    if rows < 0 or skipped < 0 or rows + skipped != stop - start:
        return "its row counts do not add up"
    if (entry.get("skipped_sha256") is None) != (skipped == 0):
        return "its skipped-rows hash is missing"
    if entry["file"] is None:
        return None if rows == 0 else "its manifest entry names no file"
    if entry["file"] != name or not isinstance(entry.get("sha256"), str) or not SHA256.fullmatch(entry["sha256"]):
        return "its manifest entry has no hash"
    return None


def _file_problem(path: Path, entry: Mapping[str, Any]) -> str | None:
    """Whether the shard file is the one the manifest describes: a regular file of that size and hash,
    readable by pyarrow, holding that many rows."""
    try:
        info = os.lstat(path)
    except OSError:
        return "file missing"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size != entry["bytes"]:
        return f"size {info.st_size}, manifest says {entry['bytes']}"
    if not _digest_matches(path, entry["sha256"]):
        return "content changed (sha256 differs)"
    try:
        have = pyarrow().parquet.ParquetFile(path).metadata.num_rows
    except Exception as e:  # noqa: BLE001 (any reader failure means: redo the shard)
        return f"unreadable ({_one_line(e)})"
    return None if have == entry["rows"] else f"{have} rows, manifest says {entry['rows']}"


def _digest_matches(path: Path, want: Any) -> bool:
    try:
        return isinstance(want, str) and os.path.isfile(path) and file_digest(path)[1] == want
    except OSError:
        return False


def atomic_write(path: Path, text: str) -> None:
    """Write through a synced temporary file and a rename: readers see the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
