"""Throughput of running a bundle over a Parquet dataset: plain loop vs rlx batch vs Ray (1 and 2 workers).

    python benchmarks/batch_bench.py            # about 3 minutes on 2 cores
    python benchmarks/batch_bench.py --rows 8192 --quick

Everything is single-threaded per process (OPENBLAS_NUM_THREADS=1 here and in Ray's workers), so
"2 workers" means two cores. The model is compute-bound (an MLP of 512→2048→2048→512 with GELU,
6.3M multiply-adds per row). Ray runs pay a fixed cost (actor start, the bundle loaded per actor);
each Ray mode is timed on N and on 2N rows, so that the fixed cost and the steady throughput can be
told apart: steady rows/s = N / (T(2N) − T(N)), fixed cost = 2·T(N) − T(2N). Needs the test or ray
extra: pip install -e ".[ray,torch]" -c constraints.txt
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from torch.export import Dim  # noqa: E402

import rlx  # noqa: E402
import rlx.batch  # noqa: E402
from rlx.batch.ray_run import WORKER_ENV, run_job  # noqa: E402
from rlx.batch.run import make_job  # noqa: E402


def make_model(width: int, hidden: int) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(hidden, width)).eval()


def write_data(path: Path, rows: int, width: int, copies: int) -> np.ndarray:
    """``copies`` files of ``rows`` rows each (the 2N runs read two)."""
    x = np.random.default_rng(0).standard_normal((rows, width)).astype(np.float32)
    table = pa.table({"id": np.arange(rows), "input": pa.FixedShapeTensorArray.from_numpy_ndarray(x)})
    path.mkdir(parents=True)
    for k in range(copies):
        pq.write_table(table, path / f"part-{k}.parquet", row_group_size=16_384)
    return x


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def plain_loop(bundle: Path, x: np.ndarray, batch: int) -> float:
    model = rlx.load(bundle)
    model(input=x[:batch])  # plan built for this batch size, as rlx batch's first batch does
    return timed(lambda: [model(input=x[i : i + batch]) for i in range(0, len(x), batch)])


def local_run(bundle: Path, data: Path, out: Path, batch: int) -> float:
    return timed(lambda: rlx.batch.run(bundle, data, out, batch_size=batch, progress=False))


def ray_run(bundle: Path, data: Path, out: Path, batch: int, workers: int, shard_rows: int) -> float:
    job = make_job(bundle, data, out, batch_size=batch, shard_rows=shard_rows)
    return timed(lambda: run_job(job, workers=workers, progress=False))


def ray_map(bundle: Path, table: pa.Table, batch: int, workers: int) -> float:
    import ray

    def go() -> None:
        # Blocks of whole batches, several of them: one block would feed one actor only.
        step = 8 * batch
        blocks = [table.slice(i, step) for i in range(0, table.num_rows, step)]
        ds = rlx.batch.ray(ray.data.from_arrow(blocks), str(bundle), batch_size=batch, concurrency=workers)
        for _ in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            pass

    return timed(go)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=32_768)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--quick", action="store_true", help="skip the 2N Ray runs (no fixed/steady split)")
    args = ap.parse_args()
    n, b = args.rows, args.batch_size
    work = Path(tempfile.mkdtemp(prefix="rlx-batch-bench-"))
    try:
        model = make_model(args.width, args.hidden)
        example = torch.randn(4, args.width)
        rlx.from_torch(model, (example,), work / "m", dynamic_shapes=({0: Dim("batch", max=65_536)},), force=True)
        bundle = work / "m" / "bundle"
        x = write_data(work / "d1", n, args.width, 1)
        write_data(work / "d2", n, args.width, 2)
        table = pq.read_table(work / "d1")
        shard_rows = n // 8  # 8 shards per N rows: enough to keep 2 workers busy to the end

        rows: list[tuple[str, float, float | None]] = []  # (mode, seconds for N rows, fixed cost)
        plain = min(plain_loop(bundle, x, b) for _ in range(2))
        rows.append(("model called in a plain loop (numpy in memory)", plain, None))
        local = min(local_run(bundle, work / "d1", work / f"o-local-{k}", b) for k in range(2))
        rows.append(("rlx batch, local (Parquet in, Parquet out)", local, None))

        import ray

        ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": WORKER_ENV}, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        ray_run(bundle, work / "d1", work / "o-warm", b, 1, shard_rows)  # first Ray Data run sets Ray Data up
        for workers in (1, 2):
            t1 = ray_run(bundle, work / "d1", work / f"o-r{workers}-1", b, workers, shard_rows)
            t2 = None if args.quick else ray_run(bundle, work / "d2", work / f"o-r{workers}-2", b, workers, shard_rows)
            rows.append((f"rlx batch --ray --workers {workers}", t1, None if t2 is None else 2 * t1 - t2))
            if t2 is not None:
                rows[-1] = (rows[-1][0], t2 - t1, 2 * t1 - t2)
        t1 = ray_map(bundle, table, b, 2)
        t2 = None if args.quick else ray_map(bundle, pa.concat_tables([table, table]), b, 2)
        rows.append(
            (
                "rlx.batch.ray(ds) map_batches, 2 workers",
                t1 if t2 is None else t2 - t1,
                None if t2 is None else 2 * t1 - t2,
            )
        )
        ray.shutdown()

        batches = -(-n // b)
        print(
            f"\n{n} rows of {args.width} floats, batch {b}, model {args.width}->{args.hidden}->{args.hidden}->{args.width}"
        )
        print("Ray rows: steady state from N and 2N rows; the fixed cost (actor start, bundle load) is separate\n")
        print("| mode | seconds per N rows | rows/s | vs plain loop | fixed cost (s) |")
        print("|---|---|---|---|---|")
        for mode, secs, fixed in rows:
            fixed_text = "" if fixed is None else f"{fixed:.1f}"
            print(f"| {mode} | {secs:.2f} | {n / secs:,.0f} | {plain / secs:.2f}x | {fixed_text} |")
        one = next(s for m, s, _ in rows if m.endswith("--workers 1"))
        two = next(s for m, s, _ in rows if m.endswith("--workers 2"))
        mapped = rows[-1][1]
        print(f"\nRay 2 workers / 1 worker: {one / two:.2f}x")
        print(f"rlx batch overhead per batch vs the plain loop: {(local - plain) / batches * 1e3:.2f} ms")
        print(f"Ray overhead per batch (1 worker, steady) vs local: {(one - local) / batches * 1e3:.2f} ms")
        print(
            f"Ray Data map_batches overhead per batch (2 workers) vs local/2: {(mapped - local / 2) / batches * 1e3:.2f} ms"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
