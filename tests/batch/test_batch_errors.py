"""Bad data: one-line errors naming file, row and column; `skip` records rows and goes on; nothing partial left."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rlx.batch
from conftest import torch_outputs
from rlx.cli import main
from rlx.errors import DataError


def rows(n: int, seed: int = 0) -> list[np.ndarray]:
    return list(np.random.default_rng(seed).standard_normal((n, 6)).astype(np.float32))


def leftovers(out) -> list[str]:
    """Temporary files a failed run might have left behind."""
    return sorted(p.name for p in out.rglob("*") if ".tmp-" in p.name) if out.exists() else []


def test_missing_column_names_file_and_column_and_creates_nothing(two_heads, tmp_path, capsys):
    _, bundle = two_heads
    pq.write_table(pa.table({"id": [1, 2], "feats": pa.array(rows(2))}), tmp_path / "d.parquet")
    code = main(["batch", str(bundle), "-i", str(tmp_path / "d.parquet"), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert (
        err == f"rlx: {tmp_path / 'd.parquet'}: rows 0..1, column 'features': no column 'features' (it has id, feats)\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_row_of_the_wrong_shape_stops_the_run_or_is_skipped(two_heads, tmp_path):
    model, bundle = two_heads
    good = rows(10)
    data = [r.tolist() for r in good]
    data[7] = data[7][:5]  # five features instead of six
    pq.write_table(pa.table({"id": list(range(100, 110)), "features": pa.array(data)}), tmp_path / "d.parquet")
    with pytest.raises(DataError) as err:
        rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "out", batch_size=4)
    assert (
        str(err.value)
        == f"{tmp_path / 'd.parquet'}: row 7, column 'features': shape [5], input 'features' needs [6] per row"
    )

    summary = rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "skip", batch_size=4, on_error="skip")
    assert (summary.written, summary.skipped) == (9, 1)
    table = pq.read_table(tmp_path / "skip")
    assert table.column("row_index").to_pylist() == [0, 1, 2, 3, 4, 5, 6, 8, 9]
    assert table.column("id").to_pylist() == [100, 101, 102, 103, 104, 105, 106, 108, 109]
    keep = [i for i in range(10) if i != 7]
    want = torch_outputs(model, np.stack(good)[keep])["logits"]
    np.testing.assert_allclose(table.column("logits").combine_chunks().to_numpy_ndarray(), want, rtol=1e-5, atol=1e-5)
    skipped_text = (tmp_path / "skip" / "_skipped.jsonl").read_text()
    rerun = rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "skip", batch_size=4, on_error="skip")
    assert (rerun.shards_reused, rerun.skipped) == (1, 1)
    assert (tmp_path / "skip" / "_skipped.jsonl").read_text() == skipped_text  # a rerun keeps the record
    (record,) = [json.loads(line) for line in skipped_text.splitlines()]
    assert record == {
        "row_index": 7, "count": 1, "file": str(tmp_path / "d.parquet"), "file_row": 7, "column": "features",
        "error": "shape [5], input 'features' needs [6] per row",
    }  # fmt: skip


def test_null_rows_are_skipped_and_named(two_heads, tmp_path):
    _, bundle = two_heads
    data = [r.tolist() for r in rows(6)]
    data[2] = None
    data[4] = [1.0, None, 0.0, 0.0, 0.0, 0.0]
    pq.write_table(pa.table({"features": pa.array(data)}), tmp_path / "d.parquet")
    summary = rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "out", on_error="skip")
    assert (summary.written, summary.skipped) == (4, 2)
    skipped = [json.loads(line) for line in (tmp_path / "out" / "_skipped.jsonl").read_text().splitlines()]
    assert [(s["row_index"], s["column"], s["error"]) for s in skipped] == [
        (2, "features", "value is null"),
        (4, "features", "holds nulls or ragged nested lists"),
    ]


def test_a_column_of_the_wrong_dtype_is_named(two_heads, tmp_path):
    _, bundle = two_heads
    pq.write_table(pa.table({"features": pa.array([["a"] * 6] * 3)}), tmp_path / "d.parquet")
    with pytest.raises(
        DataError,
        match=r"d\.parquet: rows 0\.\.2, column 'features': holds list<element: string> values, input 'features' needs float32",
    ):
        rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "out")


def test_a_corrupt_parquet_file_stops_before_any_work_or_is_skipped(two_heads, tmp_path):
    _, bundle = two_heads
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"features": pa.array(rows(5))}), tmp_path / "data" / "a.parquet")
    (tmp_path / "data" / "b.parquet").write_bytes(b"PAR1 this is not parquet")
    pq.write_table(pa.table({"features": pa.array(rows(3, seed=1))}), tmp_path / "data" / "c.parquet")
    with pytest.raises(DataError, match=r"b\.parquet: not a readable Parquet file: "):
        rlx.batch.run(bundle, tmp_path / "data", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    summary = rlx.batch.run(bundle, tmp_path / "data", tmp_path / "out", on_error="skip")
    assert (summary.rows, summary.written, summary.skipped) == (8, 8, 1)  # b's rows are unknown: one record
    (record,) = [json.loads(line) for line in (tmp_path / "out" / "_skipped.jsonl").read_text().splitlines()]
    assert record["file"].endswith("b.parquet") and record["file_row"] is None and "Parquet" in record["error"]


def test_a_corrupt_page_is_named_by_file_and_rows(two_heads, tmp_path):
    _, bundle = two_heads
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"features": pa.array(rows(400))}), path, row_group_size=200, compression="snappy")
    meta = pq.ParquetFile(path).metadata
    page = meta.row_group(1).column(0).data_page_offset  # scribble over the second row group's data
    raw = bytearray(path.read_bytes())
    raw[page + 40 : page + 400] = b"\xff" * 360
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=r"d\.parquet: rows 200\.\.299: cannot read row group 1: "):
        rlx.batch.run(bundle, path, tmp_path / "out", batch_size=100, shard_rows=100)
    # Shards finished before the bad row group stay (a rerun resumes from them); no temporary files are left.
    assert sorted(p.name for p in (tmp_path / "out").glob("part-*")) == [
        "part-000000000000-000000000100.parquet",
        "part-000000000100-000000000200.parquet",
    ]
    assert leftovers(tmp_path / "out") == []
    assert json.loads((tmp_path / "out" / "_manifest.json").read_text())["complete"] is False
    stale = tmp_path / "out" / ".part-000000000200-000000000300.parquet.tmp-999"
    stale.write_bytes(b"left by a run that was killed")
    summary = rlx.batch.run(bundle, path, tmp_path / "out", batch_size=100, shard_rows=100, on_error="skip")
    assert (summary.shards_reused, summary.written, summary.skipped) == (2, 200, 200)
    assert leftovers(tmp_path / "out") == []


def test_rows_the_model_refuses_are_found_within_their_batch(per_token, tmp_path):
    _, bundle = per_token
    rng = np.random.default_rng(0)
    seqs = [rng.standard_normal((3, 4)).astype(np.float32).tolist() for _ in range(6)]
    seqs[4] = seqs[4][:1]  # one token: below the model's minimum sequence length of 2
    pq.write_table(pa.table({"tokens": pa.array(seqs)}), tmp_path / "d.parquet")
    with pytest.raises(
        DataError,
        match=r"d\.parquet: row 4: the model refused it: input 'tokens' axis 1 \(symbol seq\) = 1, outside 2\.\.64",
    ):
        rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "out")
    summary = rlx.batch.run(bundle, tmp_path / "d.parquet", tmp_path / "out", on_error="skip")
    assert (summary.written, summary.skipped) == (5, 1)
    assert pq.read_table(tmp_path / "out").column("row_index").to_pylist() == [0, 1, 2, 3, 5]


def test_stateful_model_is_refused_in_one_line(tmp_path):
    import torch

    import rlx
    from rlx.batch.spec import signature
    from rlx.errors import UsageError

    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x):
            self.seen.add_(1)
            return x * self.seen

    rlx.from_torch(Counter(), (torch.ones(2, 3),), tmp_path / "counter")
    with pytest.raises(UsageError) as err:
        signature(rlx.load(tmp_path / "counter"))
    assert "b_seen" in str(err.value) and "\n" not in str(err.value)
