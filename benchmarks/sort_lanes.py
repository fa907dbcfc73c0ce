"""A sort and a top-50 of one long lane on each engine, against PyTorch eager, in one run.

    python benchmarks/sort_lanes.py

Why: OpenVINO's TopK is stable only on request, and its stable TopK grows with the square of
the lane, so rlx runs unstable TopKs there: a top-k's ties in any order (as PyTorch allows), a
sort's put in index order (as ``torch.sort(stable=True)`` promises) by unique keys; the numpy
engine takes a few out of a long lane by partition, not by sorting it. This prints what each
costs per lane length (median ms; ratio to eager in brackets).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import rlx

LENGTHS = (1_000, 10_000, 50_257)
ENGINES = ("numpy", "onnxruntime", "openvino")
BUDGET_S = 2.0  # time each engine for about this long (at least one call)


class Sort(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sort(x, dim=-1, stable=True)


class TopK(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.topk(x, 50, -1)


def median_ms(fn: Callable[..., object], *args: object) -> float:
    fn(*args)  # warm-up (and the first compilation)
    times: list[float] = []
    while sum(times) < BUDGET_S and len(times) < 50:
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    torch.set_num_threads(2)
    print(f"{'op':6} {'lane':>7} {'eager':>9} " + " ".join(f"{e:>20}" for e in ENGINES))
    with tempfile.TemporaryDirectory() as tmp:
        for module in (Sort(), TopK()):
            for n in LENGTHS:
                x = torch.randn(1, n, generator=torch.Generator().manual_seed(0))
                out = Path(tmp) / f"{type(module).__name__}{n}"
                rlx.from_torch(module, (x,), out)
                with torch.no_grad():
                    eager = median_ms(module, x)
                cells = []
                for engine in ENGINES:
                    model, arr = rlx.load(out, engine=engine, threads=2), x.numpy()
                    got = model(arr)[0]
                    np.testing.assert_array_equal(got, module(x)[0].numpy())  # (the same values)
                    ms = median_ms(model, arr)
                    cells.append(f"{ms:9.2f} ({ms / eager:6.1f}x)")
                print(f"{type(module).__name__:6} {n:>7} {eager:9.2f} " + " ".join(f"{c:>20}" for c in cells))


if __name__ == "__main__":
    main()
