"""Run a converted model over a dataset: ``rlx batch`` and ``rlx.batch.run`` / ``iter_batches`` / ``ray``.

Needs pyarrow for Parquet (``pip install 'rlx[batch]'``) and Ray for scale-out (``rlx[ray]``);
neither is imported by ``import rlx``.
"""

from __future__ import annotations

from typing import Any

from rlx.batch.run import BatchSummary, iter_batches, run


def ray(ds: Any, bundle: str, **kwargs: Any) -> Any:
    """See ``rlx.batch.ray_run.map_dataset``: the model mapped over a Ray Dataset, one bundle load per actor."""
    from rlx.batch.ray_run import map_dataset

    return map_dataset(ds, bundle, **kwargs)


__all__ = ["BatchSummary", "iter_batches", "ray", "run"]
