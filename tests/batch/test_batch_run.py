"""rlx batch over Parquet / numpy data: values against PyTorch, order, carried columns, shards, resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rlx
import rlx.batch
from conftest import torch_outputs
from rlx.cli import main


def features(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 6)).astype(np.float32)


def write_two_files(directory, x: np.ndarray) -> None:
    """Rows 0..599 as a fixed-shape tensor column, the rest as plain lists (both are accepted)."""
    directory.mkdir()
    ids = np.arange(len(x)) * 7
    first = pa.table({"id": ids[:600], "features": pa.FixedShapeTensorArray.from_numpy_ndarray(x[:600])})
    second = pa.table({"id": ids[600:], "features": pa.array(list(x[600:].astype(np.float64)))})
    pq.write_table(first, directory / "a.parquet", row_group_size=250)
    pq.write_table(second, directory / "b.parquet", row_group_size=128)


def read_output(out) -> pa.Table:
    return pq.read_table(out)  # the manifest and skipped rows start with "_", so pyarrow skips them


def test_parquet_directory_matches_torch_in_input_order(two_heads, tmp_path):
    model, bundle = two_heads
    x = features(1000)
    write_two_files(tmp_path / "data", x)
    summary = rlx.batch.run(bundle, tmp_path / "data", tmp_path / "out", batch_size=64, shard_rows=300)
    assert (summary.rows, summary.written, summary.skipped, summary.shards_written) == (1000, 1000, 0, 4)
    # 300 rows per shard rounds up to whole batches (5 x 64); shards are named by their input rows.
    shards = sorted(p.name for p in (tmp_path / "out").glob("part-*.parquet"))
    assert shards == [f"part-{a:012d}-{min(a + 320, 1000):012d}.parquet" for a in (0, 320, 640, 960)]
    table = read_output(tmp_path / "out")
    assert table.column_names == ["row_index", "id", "logits", "label"]
    assert table.column("row_index").to_pylist() == list(range(1000))
    assert table.column("id").to_pylist() == list(range(0, 7000, 7))
    want = torch_outputs(model, x)
    logits = table.column("logits").combine_chunks()
    assert isinstance(logits.type, pa.FixedShapeTensorType) and logits.type.shape == [3]
    got = logits.to_numpy_ndarray()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want["logits"], rtol=1e-5, atol=1e-5)
    assert table.schema.field("label").type == pa.int64()
    np.testing.assert_array_equal(table.column("label").to_numpy(), want["label"])
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["complete"] and manifest["total_rows"] == 1000
    assert (tmp_path / "out" / "_skipped.jsonl").read_text() == ""


def test_rerun_skips_finished_shards_and_redoes_a_missing_one_identically(two_heads, tmp_path):
    _, bundle = two_heads
    pq.write_table(pa.table({"features": pa.array(list(features(500)))}), tmp_path / "d.parquet")
    out = tmp_path / "out"
    rlx.batch.run(bundle, tmp_path / "d.parquet", out, batch_size=50, shard_rows=100)
    files = sorted(out.glob("part-*.parquet"))
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    files[2].unlink()  # as if the run had been killed before writing it
    summary = rlx.batch.run(bundle, tmp_path / "d.parquet", out, batch_size=50, shard_rows=100)
    assert (summary.shards_written, summary.shards_reused, summary.written) == (1, 4, 500)
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.glob("part-*.parquet"))}
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}  # deterministic bytes
    untouched = [n for n in before if n != files[2].name]
    assert all(after[n][1] == before[n][1] for n in untouched)
    with pytest.raises(rlx.errors.UsageError, match="differs in batch_size"):
        rlx.batch.run(bundle, tmp_path / "d.parquet", out, batch_size=25, shard_rows=100)


def test_iter_batches_equals_the_plain_model_call(two_heads):
    _, bundle = two_heads
    model = rlx.load(bundle)
    x = features(300, seed=3)
    batches = list(rlx.batch.iter_batches(model, {"features": x, "key": np.arange(300)}, batch_size=128))
    assert [len(b["row_index"]) for b in batches] == [128, 128, 44]
    for k, batch in enumerate(batches):
        rows = slice(128 * k, 128 * k + len(batch["row_index"]))
        plain = model(features=x[rows])
        np.testing.assert_array_equal(batch["row_index"], np.arange(300)[rows])
        np.testing.assert_array_equal(batch["key"], np.arange(300)[rows])
        for name in ("logits", "label"):
            assert batch[name].dtype == plain[name].dtype
            np.testing.assert_array_equal(batch[name], plain[name])  # bit for bit: the same batch


def test_ragged_sequences_give_list_outputs_per_row(per_token, tmp_path):
    model, bundle = per_token
    rng = np.random.default_rng(5)
    lengths = [3, 3, 7, 7, 7, 2, 9, 9]
    rows = [rng.standard_normal((n, 4)).astype(np.float32) for n in lengths]
    pq.write_table(pa.table({"tokens": pa.array([r.tolist() for r in rows])}), tmp_path / "seq.parquet")
    rlx.batch.run(bundle, tmp_path / "seq.parquet", tmp_path / "out", batch_size=4)
    table = read_output(tmp_path / "out")
    assert pa.types.is_large_list(table.schema.field("output").type)
    got = table.column("output").to_pylist()
    for row, x in zip(got, rows):
        want = torch_outputs(model, x[None])["output"][0]
        np.testing.assert_allclose(np.asarray(row, dtype=np.float32), want, rtol=1e-5, atol=1e-6)


def test_static_bundle_runs_one_row_at_a_time_from_npz(static, tmp_path):
    model, bundle = static
    x = np.random.default_rng(2).standard_normal((10, 2, 5)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, name=np.arange(10) + 100)
    rlx.batch.run(bundle, tmp_path / "d.npz", tmp_path / "out", batch_size=4)
    table = read_output(tmp_path / "out")
    assert table.column("name").to_pylist() == list(range(100, 110))
    got = table.column("output").combine_chunks().to_numpy_ndarray()
    want = np.stack([torch_outputs(model, row)["output"] for row in x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_cli_runs_an_npy_file_with_a_column_map(two_heads, tmp_path, capsys):
    model, bundle = two_heads
    x = features(70, seed=9)
    np.save(tmp_path / "x.npy", x)
    code = main(
        ["batch", str(bundle), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out"), "--batch-size", "32"]
    )
    assert code == 0
    assert "70 rows written, 0 skipped" in capsys.readouterr().out
    got = read_output(tmp_path / "out").column("logits").combine_chunks().to_numpy_ndarray()
    np.testing.assert_allclose(got, torch_outputs(model, x)["logits"], rtol=1e-5, atol=1e-5)
    pq.write_table(pa.table({"f": pa.array(list(x))}), tmp_path / "renamed.parquet")
    args = [
        "batch",
        str(bundle),
        "-i",
        str(tmp_path / "renamed.parquet"),
        "-o",
        str(tmp_path / "o2"),
        "--column",
        "features=f",
    ]
    args += ["--batch-size", "32"]  # the same batches give the same bits
    assert main(args) == 0
    np.testing.assert_array_equal(
        read_output(tmp_path / "o2").column("logits").combine_chunks().to_numpy_ndarray(), got
    )


def test_pyarrow_is_optional(tmp_path):
    code = """
import sys
import rlx
assert "pyarrow" not in sys.modules, "import rlx imported pyarrow"
sys.modules["pyarrow"] = None  # as if it were not installed
import rlx.batch
try:
    rlx.batch.run("b", "d.parquet", "o")
except rlx.errors.UsageError as e:
    print(e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}, check=True)
    assert out.stdout.strip() == "rlx batch needs pyarrow: pip install 'rlx[batch]'"


def test_ray_is_optional(two_heads, tmp_path, capsys, monkeypatch):
    _, bundle = two_heads
    pq.write_table(pa.table({"features": pa.array(list(features(3)))}), tmp_path / "d.parquet")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    code = main(["batch", str(bundle), "-i", str(tmp_path / "d.parquet"), "-o", str(tmp_path / "out"), "--ray"])
    assert (code, capsys.readouterr().err) == (2, "rlx: rlx batch --ray needs Ray: pip install 'rlx[ray]'\n")


def test_jax_engine_gives_the_same_values(two_heads, tmp_path):
    pytest.importorskip("jax")
    model, bundle = two_heads
    x = features(100, seed=11)
    np.save(tmp_path / "x.npy", x)
    rlx.batch.run(bundle, tmp_path / "x.npy", tmp_path / "out", batch_size=50, engine="jax")
    table = read_output(tmp_path / "out")
    want = torch_outputs(model, x)
    np.testing.assert_allclose(
        table.column("logits").combine_chunks().to_numpy_ndarray(), want["logits"], rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(table.column("label").to_numpy(), want["label"])


def test_progress_bar_shows_rate_and_eta_only_on_a_terminal():
    import io

    from rlx.batch.progress import Progress

    shown = io.StringIO()
    bar = Progress(1000, enabled=True, stream=shown)
    bar.skip(200)
    bar.advance(300)
    bar.close()
    last = shown.getvalue().split("\r")[-1]
    assert "500/1,000 rows" in last and "rows/s" in last and "ETA" in last
    quiet = io.StringIO()  # StringIO is not a terminal
    Progress(1000, stream=quiet).advance(1000)
    assert quiet.getvalue() == ""
