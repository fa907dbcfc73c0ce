"""Scale-out on Ray Data (``pip install 'rlx[ray]'``).

Two entry points, one idea: ``ds.map_batches`` with a callable class, so Ray makes one instance per
actor and the bundle is loaded once per actor, from a path every worker can read.

- ``run_job`` (``rlx batch --ray``): the dataset is the list of unfinished *shards*; each actor runs
  whole shards with the same code as a local run (read its rows, predict, write the shard
  atomically). Outputs are byte-identical to a local run, and resume works the same way.
- ``map_dataset`` (``rlx.batch.ray(ds, bundle)``): the model over a Ray Dataset you already have;
  returns a Dataset of the carried columns plus the outputs.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from types import ModuleType
from typing import Any

import numpy as np

from rlx import errors
from rlx.batch.columns import pyarrow
from rlx.batch.output import ShardResult, block_table
from rlx.batch.predict import Predictor
from rlx.batch.run import DEFAULT_BATCH_SIZE, BatchSummary, Job, Session, drive, grid_size
from rlx.batch.source import memory_source
from rlx.batch.spec import ROW_INDEX, signature
from rlx.errors import RlxError, UsageError
from rlx.runtime import load

# One BLAS/OpenMP thread per worker: K single-threaded workers on K cores, not K workers fighting over them.
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _ray() -> ModuleType:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UsageError("rlx batch --ray needs Ray: pip install 'rlx[ray]'") from None
    return ray


class ShardWorker:
    """One per Ray actor: opens the job once, then runs the shards it is handed."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.session = Session(Job(**job))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results, failure = [], ""
        for start, stop in zip(batch["start"], batch["stop"]):
            try:
                results.append(self.session.run_shard(int(start), int(stop)))
            except RlxError as e:  # sent back as data: the driver re-raises it as the same one-line error
                failure = f"{type(e).__name__}:{e}"
                break
        return {
            "start": np.array([r.start for r in results] + [-1] * bool(failure), dtype=np.int64),
            "stop": np.array([r.stop for r in results] + [-1] * bool(failure), dtype=np.int64),
            "rows": np.array([r.rows for r in results] + [0] * bool(failure), dtype=np.int64),
            "skipped": np.array([r.skipped for r in results] + [0] * bool(failure), dtype=np.int64),
            "file": np.array([r.file or "" for r in results] + [""] * bool(failure), dtype=object),
            "bytes": np.array([r.bytes for r in results] + [0] * bool(failure), dtype=np.int64),
            "sha256": np.array([r.sha256 or "" for r in results] + [""] * bool(failure), dtype=object),
            "skipped_sha256": np.array([r.skipped_sha256 or "" for r in results] + [""] * bool(failure), dtype=object),
            "error": np.array([""] * len(results) + [failure] * bool(failure), dtype=object),
        }


def run_job(job: Job, *, address: str | None = None, workers: int = 2, progress: bool | None = None) -> BatchSummary:
    """``rlx.batch.run`` with shards spread over ``workers`` Ray actors (a local cluster unless ``address``)."""
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    ray = _ray()
    session = Session(job)  # lists and checks the data here, so a bad file fails before any worker starts
    # Every worker runs what the driver resolved (a tuned choice included), not its own machine's pick.
    job = replace(job, engine=session.model.engine.name, precision=session.model.precision)
    _quiet(ray)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=address,
            num_cpus=workers if address is None else None,
            include_dashboard=False,
            runtime_env={"env_vars": WORKER_ENV},
            log_to_driver=False,
        )
    try:
        return drive(session, lambda todo: _run_shards(ray, job, todo, workers), progress)
    finally:
        if started_here:
            ray.shutdown()


def _quiet(ray: ModuleType) -> None:
    """rlx draws its own progress bar; Ray Data's bars and INFO lines would interleave with it."""
    import logging

    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)


def _run_shards(ray: ModuleType, job: Job, todo: list[tuple[int, int]], workers: int) -> Any:
    if not todo:
        return
    items = [{"start": a, "stop": b} for a, b in todo]
    shards = ray.data.from_items(items, override_num_blocks=len(items))
    done = shards.map_batches(
        ShardWorker,
        fn_constructor_kwargs={"job": asdict(job)},
        compute=ray.data.ActorPoolStrategy(size=min(workers, len(items))),
        batch_size=1,
        num_cpus=1,
        runtime_env={"env_vars": WORKER_ENV},
    )
    for row in done.iter_rows():
        if row["error"]:
            kind, _, message = row["error"].partition(":")
            raise getattr(errors, kind, RlxError)(message)
        yield ShardResult(
            int(row["start"]), int(row["stop"]), int(row["rows"]), int(row["skipped"]), row["file"] or None,
            int(row["bytes"]), row["sha256"] or None, row["skipped_sha256"] or None,
        )  # fmt: skip


class RowPredictor:
    """One per Ray actor for ``map_dataset``: the bundle loaded once, each Arrow batch run like a local block."""

    def __init__(
        self,
        bundle: str,
        batch_size: int,
        columns: dict[str, str] | None,
        keep: list[str] | None,
        engine: str | None,
    ) -> None:
        self.model = load(bundle, engine=engine)
        self.sig = signature(self.model, columns)
        self.predictor = Predictor(self.model, self.sig, "stop")
        self.batch_size, self.keep = batch_size, keep

    def __call__(self, table: Any) -> Any:
        source = memory_source(table, "<ray batch>")
        kept = source.check(self.sig, self.keep)
        part = source.parts[0]
        if part.problem is not None:
            raise errors.DataError(f"ray batch: column {part.problem_column!r}: {part.problem}")
        tables = []
        for block in source.blocks(0, source.total_rows, grid_size(self.sig, self.batch_size)):
            predicted = self.predictor.block(block)
            tables.append(
                block_table(predicted, block.start, block.columns or {}, kept, self.sig, "<ray batch>").drop(
                    [ROW_INDEX]
                )
            )
        return pyarrow().concat_tables(tables)


def map_dataset(
    ds: Any,
    bundle: str,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    columns: dict[str, str] | None = None,
    keep: list[str] | None = None,
    engine: str | None = None,
    concurrency: int = 2,
) -> Any:
    """``ds.map_batches`` with the model: the carried columns plus one column per output, in ``ds``'s order.

    ``bundle`` must be a path every worker can read. Each actor gets one CPU and a single-threaded BLAS.
    """
    ray = _ray()
    # Rows come back in ds's order (Ray reorders them otherwise when several actors run).
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    return ds.map_batches(
        RowPredictor,
        fn_constructor_kwargs={
            "bundle": str(bundle), "batch_size": batch_size, "columns": columns, "keep": keep, "engine": engine,
        },
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=concurrency),
        num_cpus=1,
        runtime_env={"env_vars": WORKER_ENV},
    )  # fmt: skip
