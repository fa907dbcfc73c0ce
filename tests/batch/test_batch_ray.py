"""Ray Data scale-out on a local 2-CPU cluster this module starts and stops (about 40 s on 2 cores: slow)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rlx
import rlx.batch
from rlx.cli import main

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def dataset(tmp_path, n: int = 1000) -> pa.Table:
    x = np.random.default_rng(4).standard_normal((n, 6)).astype(np.float32)
    table = pa.table({"id": np.arange(n) + 10_000, "features": pa.array(list(x))})
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=300)
    return table


def test_cli_on_ray_writes_the_same_bytes_as_a_local_run(cluster, two_heads, tmp_path, capsys):
    _, bundle = two_heads
    dataset(tmp_path)
    common = [str(bundle), "-i", str(tmp_path / "d.parquet"), "--batch-size", "64", "--shard-rows", "256"]
    assert main(["batch", *common, "-o", str(tmp_path / "local")]) == 0
    assert main(["batch", *common, "-o", str(tmp_path / "ray"), "--ray", "--workers", "2"]) == 0
    assert "1,000 rows written, 0 skipped, 4 shards written" in capsys.readouterr().out
    local = sorted((tmp_path / "local").glob("part-*.parquet"))
    assert [p.name for p in local] == sorted(p.name for p in (tmp_path / "ray").glob("part-*.parquet"))
    for shard in local:
        assert shard.read_bytes() == (tmp_path / "ray" / shard.name).read_bytes()


def test_map_dataset_equals_iter_batches_in_order(cluster, two_heads, tmp_path):
    _, bundle = two_heads
    table = dataset(tmp_path, 700)
    ds = ray.data.from_arrow(table)
    got = pa.concat_tables(
        rlx.batch.ray(ds, str(bundle), batch_size=64, concurrency=2).iter_batches(
            batch_format="pyarrow", batch_size=None
        )
    )
    assert got.column_names == ["id", "logits", "label"]
    assert got.column("id").to_pylist() == list(range(10_000, 10_700))
    local = list(rlx.batch.iter_batches(rlx.load(bundle), table, batch_size=64))
    np.testing.assert_array_equal(
        got.column("logits").combine_chunks().to_numpy_ndarray(), np.concatenate([b["logits"] for b in local])
    )
    np.testing.assert_array_equal(got.column("label").to_numpy(), np.concatenate([b["label"] for b in local]))
