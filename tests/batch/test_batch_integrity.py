"""Output integrity of `rlx batch`: a resume verifies every shard it reuses, repairs or refuses a damaged
directory, keeps concurrent runs out with a lock, and never leaves a partial file."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import rlx.batch
from rlx.batch.output import LOCK, MANIFEST, SKIPPED, SKIPPED_DIR
from rlx.batch.run import Session
from rlx.cli import main
from rlx.errors import OutputError, UsageError

try:
    import pandas
except ImportError:  # pandas is one more reader to check, not a requirement
    pandas = None

N, BATCH, SHARD = 300, 50, 100  # three shards
NULL_ROW = 130  # a null row in the second shard: skipped, so shards have skipped-rows records too


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    x = np.random.default_rng(7).standard_normal((N, 6)).astype(np.float32)
    rows = [r.tolist() for r in x]
    rows[NULL_ROW] = None
    path = tmp_path_factory.mktemp("integrity") / "d.parquet"
    pq.write_table(pa.table({"id": np.arange(N) * 3, "features": pa.array(rows)}), path, row_group_size=120)
    return path


def run(bundle, data, out, **kwargs):
    return rlx.batch.run(bundle, data, out, batch_size=BATCH, shard_rows=SHARD, on_error="skip", **kwargs)


@pytest.fixture(scope="module")
def clean(two_heads, data, tmp_path_factory) -> Path:
    """The reference: one uninterrupted run."""
    out = tmp_path_factory.mktemp("clean") / "out"
    run(two_heads[1], data, out)
    return out


def shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("part-*.parquet"))}


def snapshot(out: Path) -> dict[str, bytes]:
    """Every file under OUT, by relative path."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def assert_same_as_clean(out: Path, clean: Path) -> None:
    """Byte-identical shards and skipped-rows records, and the directory reads as the input's rows once each."""
    assert shards(out) == shards(clean)
    assert (out / SKIPPED).read_text() == (clean / SKIPPED).read_text()
    table = ds.dataset(out, format="parquet").to_table()
    assert table.equals(pq.read_table(clean))
    assert table.column("row_index").to_pylist() == [i for i in range(N) if i != NULL_ROW]
    if pandas is not None:
        assert pandas.read_parquet(out)["row_index"].tolist() == [i for i in range(N) if i != NULL_ROW]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean.iterdir())
    assert not (out / LOCK).exists()


def names(out: Path) -> list[str]:
    return sorted(out.glob("part-*.parquet"))


def truncate(out: Path) -> None:
    p = names(out)[2]
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def flip_byte(out: Path) -> None:
    p = names(out)[1]
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    p.write_bytes(bytes(raw))


def replace_by_other_shard(out: Path) -> None:
    a, _, c = names(out)
    shutil.copyfile(a, c)  # a whole, valid shard, of other rows


def delete(out: Path) -> None:
    names(out)[1].unlink()


def add_stray_shard(out: Path) -> None:
    shutil.copyfile(names(out)[0], out / "part-000000000250-000000000350.parquet")


def add_temporaries(out: Path) -> None:
    (out / ".part-000000000100-000000000200.parquet.tmp-4242").write_bytes(b"half a shard")
    (out / "._manifest.json.tmp-4242").write_text("{")
    (out / SKIPPED_DIR / ".part-000000000100-000000000200.jsonl.tmp-4242").write_text("half")


def symlink_shard(out: Path) -> None:
    p = names(out)[0]
    moved = out.parent / "elsewhere.parquet"
    shutil.move(p, moved)
    p.symlink_to(moved)  # same bytes, but not a file rlx wrote in OUT


def edit_manifest(change):
    def damage(out: Path) -> None:
        manifest = json.loads((out / MANIFEST).read_text())
        change(manifest)
        (out / MANIFEST).write_text(json.dumps(manifest))

    return damage


def first_entry(m: dict) -> dict:
    return m["shards"][sorted(m["shards"])[0]]


def second_entry(m: dict) -> dict:
    return m["shards"][sorted(m["shards"])[1]]


def as_version_1(m: dict) -> None:
    m["version"] = 1
    for entry in m["shards"].values():
        for key in ("bytes", "sha256", "skipped_sha256"):
            entry.pop(key)


def damage_sidecar(out: Path) -> None:
    (sidecar,) = (out / SKIPPED_DIR).glob("*.jsonl")
    sidecar.write_text(sidecar.read_text().replace("null", "nul"))


DAMAGE = {
    "truncated shard": truncate,
    "byte-flipped shard": flip_byte,
    "shard replaced by another valid shard": replace_by_other_shard,
    "shard deleted": delete,
    "stray part file": add_stray_shard,
    "temporaries of a killed run": add_temporaries,
    "shard replaced by a symlink": symlink_shard,
    "entry without file": edit_manifest(lambda m: first_entry(m).pop("file")),
    "entry not an object": edit_manifest(lambda m: m["shards"].update({sorted(m["shards"])[0]: [1, 2]})),
    "entry with another hash": edit_manifest(lambda m: first_entry(m).update(sha256="0" * 64)),
    "entry with wrong rows": edit_manifest(lambda m: first_entry(m).update(rows=99, skipped=1)),
    "entry removed (its file stays)": edit_manifest(lambda m: m["shards"].pop(sorted(m["shards"])[2])),
    "entry for rows outside the job": edit_manifest(
        lambda m: m["shards"].update({"part-000000000300-000000000400.parquet": first_entry(m)})
    ),
    "entry skipped hash removed": edit_manifest(lambda m: second_entry(m).update(skipped_sha256=None)),
    "version 1 manifest (no hashes)": edit_manifest(as_version_1),
    "skipped-rows record changed": damage_sidecar,
    "skipped-rows record removed": lambda out: shutil.rmtree(out / SKIPPED_DIR),
    "skipped.jsonl removed": lambda out: (out / SKIPPED).unlink(),
    "lock left by a dead run": lambda out: (out / LOCK).write_text(
        json.dumps({"pid": dead_pid(), "host": socket.gethostname(), "token": "00"})
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_damage_between_runs_is_repaired_to_the_clean_output(two_heads, data, clean, tmp_path, damage):
    out = tmp_path / "out"
    shutil.copytree(clean, out)
    DAMAGE[damage](out)
    summary = run(two_heads[1], data, out)
    assert_same_as_clean(out, clean)
    assert summary.written == N - 1 and summary.skipped == 1
    assert summary.shards_written + summary.shards_reused == 3
    again = run(two_heads[1], data, out)  # now whole: all reused, nothing redone
    assert (again.shards_reused, again.shards_redone, again.removed) == (3, [], [])
    assert_same_as_clean(out, clean)


def test_a_failed_verification_is_named_in_the_summary(two_heads, data, clean, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(clean, out)
    flip_byte(out)
    add_stray_shard(out)
    args = ["batch", str(two_heads[1]), "-i", str(data), "-o", str(out), "--batch-size", str(BATCH)]
    assert main([*args, "--shard-rows", str(SHARD), "--on-error", "skip"]) == 0
    line = capsys.readouterr().out
    assert "1 shards written, 2 reused, 1 failed verification and redone" in line
    assert "part-000000000100-000000000200.parquet (content changed (sha256 differs))" in line
    assert "1 stray files removed" in line
    assert_same_as_clean(out, clean)


def manifest_as(text: str):
    return lambda out: (out / MANIFEST).write_text(text)


def lock_as(text: str):
    return lambda out: (out / LOCK).write_text(text)


REFUSED = {
    "manifest is a list": (manifest_as("[]"), "_manifest.json: not an rlx batch manifest"),
    "manifest not JSON": (manifest_as('{"format": "rlx-ba'), "_manifest.json: not valid JSON"),
    "manifest empty": (manifest_as(""), "_manifest.json: not valid JSON"),
    "manifest of another tool": (manifest_as('{"files": []}'), "_manifest.json: not an rlx batch manifest"),
    "manifest from a newer rlx": (
        edit_manifest(lambda m: m.update(version=99)),
        "_manifest.json: manifest version 99, this rlx reads versions 1 and 2",
    ),
    "job is a list": (edit_manifest(lambda m: m.update(job=[])), "its 'job' is not an object"),
    "shards is a list": (edit_manifest(lambda m: m.update(shards=[])), "its 'shards' is not an object"),
    "manifest of another job": (
        edit_manifest(lambda m: m["job"].update(batch_size=7)),
        "holds a run of another job (differs in batch_size)",
    ),
    "foreign Parquet file": (
        lambda out: shutil.copyfile(names(out)[0], out / "extra.parquet"),
        "holds 'extra.parquet', which rlx batch did not write",
    ),
    "foreign text file": (lambda out: (out / "notes.txt").write_text("x"), "holds 'notes.txt', which rlx"),
    "foreign subdirectory": (lambda out: (out / "year=2024").mkdir(), "holds 'year=2024', which rlx"),
    "lock held by a live run": (
        lambda out: (out / LOCK).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()})),
        f"another rlx batch run (pid {os.getpid()} on {socket.gethostname()}",
    ),
    "lock held on another host": (
        lambda out: (out / LOCK).write_text(json.dumps({"pid": dead_pid(), "host": "elsewhere.example"})),
        "on elsewhere.example",
    ),
    "lock that is not rlx's": (lock_as("garbage"), "_rlx-batch.lock is held (its content is not an rlx lock)"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_a_directory_that_cannot_be_trusted_is_refused_in_one_line_and_left_alone(
    two_heads, data, clean, tmp_path, capsys, case
):
    damage, message = REFUSED[case]
    out = tmp_path / "out"
    shutil.copytree(clean, out)
    damage(out)
    before = snapshot(out)
    args = ["batch", str(two_heads[1]), "-i", str(data), "-o", str(out), "--batch-size", str(BATCH)]
    assert main([*args, "--shard-rows", str(SHARD), "--on-error", "skip"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlx: ") and err.count("\n") == 1 and message in err, err
    assert snapshot(out) == before


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_a_reused_pid_counts_as_stale(two_heads, data, clean, tmp_path):
    """The lock names a live pid, but that process started at another time: the pid was reused."""
    out = tmp_path / "out"
    shutil.copytree(clean, out)
    (out / LOCK).write_text(
        json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "process_started": "1", "token": "00"})
    )
    if not Path(f"/proc/{os.getpid()}/stat").exists():
        pytest.skip("no /proc: process start times are unknown here")
    run(two_heads[1], data, out)
    assert_same_as_clean(out, clean)


def test_lock_keeps_a_second_run_out_while_the_first_writes(two_heads, data, tmp_path, monkeypatch):
    """The second run starts while the first is between two shards: it is refused, the first finishes."""
    out = tmp_path / "out"
    seen: list[str] = []
    original = Session.run_shard

    def run_shard(self, start, stop):
        if start == SHARD and not seen:  # the first run, midway
            with pytest.raises(UsageError) as err:
                run(two_heads[1], data, out)
            seen.append(str(err.value))
        return original(self, start, stop)

    monkeypatch.setattr(Session, "run_shard", run_shard)
    summary = run(two_heads[1], data, out)
    assert summary.written == N - 1
    (message,) = seen
    assert message.startswith(f"another rlx batch run (pid {os.getpid()} on ") and "wait for it to finish" in message
    assert not (out / LOCK).exists()


def test_lock_is_released_after_a_failed_run(two_heads, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"features": pa.array([[1.0] * 6, [1.0] * 5])}), bad)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(rlx.errors.DataError):
        rlx.batch.run(two_heads[1], bad, out)
    assert [p.name for p in out.iterdir()] == [MANIFEST]  # nothing finished: no shard, lock or temporary


def disk_full(at: int):
    """ParquetWriter.write_table failing on its ``at``-th call, as a full disk does."""
    calls, original = [], pq.ParquetWriter.write_table

    def write_table(writer, table, *args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            raise OSError(28, "No space left on device")
        return original(writer, table, *args, **kwargs)

    return write_table


@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_failed_shard_write_leaves_no_partial_file_and_a_rerun_completes(
    two_heads, data, clean, tmp_path, monkeypatch, at
):
    out = tmp_path / "out"
    monkeypatch.setattr(pq.ParquetWriter, "write_table", disk_full(at))
    with pytest.raises(OutputError) as err:
        run(two_heads[1], data, out)
    assert "No space left on device" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.undo()
    if out.exists():
        left = sorted(p.name for p in out.rglob("*") if p.is_file())
        assert all(".tmp-" not in name for name in left) and LOCK not in left
        listed = set(json.loads((out / MANIFEST).read_text())["shards"])
        assert {p.name for p in out.glob("part-*")} == listed == set(sorted(shards(clean))[: at - 1])
    else:
        assert at == 1  # nothing was finished: the directory this run created is gone
    run(two_heads[1], data, out)
    assert_same_as_clean(out, clean)


def permission_denied(*args, **kwargs):
    raise PermissionError(13, "Permission denied")


@pytest.mark.parametrize("where", ["mkdir", "lock", "lock-write", "shard", "manifest"])
def test_an_unwritable_output_directory_is_one_line(two_heads, data, tmp_path, monkeypatch, where):
    """A read-only directory (simulated: tests may run as root, whom permissions do not stop)."""
    out = tmp_path / "out"
    if where == "mkdir":
        monkeypatch.setattr(os, "mkdir", permission_denied)
    elif where == "lock":
        real_open = os.open
        monkeypatch.setattr(
            os, "open", lambda p, flags, *a: permission_denied() if str(p).endswith(LOCK) else real_open(p, flags, *a)
        )
    elif where == "lock-write":
        monkeypatch.setattr(os, "write", permission_denied)
    elif where == "shard":
        monkeypatch.setattr(pq, "ParquetWriter", permission_denied)
    else:
        real_replace = os.replace
        monkeypatch.setattr(
            os, "replace", lambda a, b: permission_denied() if str(b).endswith(MANIFEST) else real_replace(a, b)
        )
    with pytest.raises(OutputError) as err:
        run(two_heads[1], data, out)
    assert "Permission denied" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.undo()
    assert not out.exists() or not any(".tmp-" in p.name or p.name == LOCK for p in out.rglob("*"))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_output_directory_is_refused_in_one_line(two_heads, data, tmp_path, capsys):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert main(["batch", str(two_heads[1]), "-i", str(data), "-o", str(out)]) == 2
    finally:
        out.chmod(0o755)
    err = capsys.readouterr().err
    assert err.startswith(f"rlx: {out}: cannot write: ") and err.count("\n") == 1
