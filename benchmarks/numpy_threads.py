"""The numpy engine's ``threads`` against ``threads=1`` and PyTorch eager, interleaved in one process.

    python benchmarks/numpy_threads.py --only convnext,swin --batches 1,8 --repeats 3 --min-bytes 1048576,131072

For each model and batch: one bundle, loaded with ``threads=1`` and with ``threads=2`` at each
``--min-bytes`` threshold (``parallel.MIN_BYTES``, fixed at load); every variant is checked
bit-identical to ``threads=1``, then timed with ``bench.measure`` (blocks of runs, interleaved; ratios paired by round),
``--repeats`` times. Prints how many steps each threshold splits and the median (min–max) of
each variant's latency / eager's over the repeats. ``--repeats 0``: split counts only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # noqa: E402  (sets the thread variables before numpy and torch load)
import numpy as np  # noqa: E402
import torch  # noqa: E402

import rlx  # noqa: E402
from rlx.runtime.numpy_engine import parallel  # noqa: E402


def split_steps(model: rlx.Model) -> int:
    executor = model._static
    steps = executor._steps if executor is not None else []  # type: ignore[attr-defined]
    return sum("_bind_chunks" in getattr(fn, "__qualname__", "") for fn, *_ in steps)


def run_case(name: str, model: torch.nn.Module, inputs: tuple, thresholds: list[int], repeats: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "m"
        rlx.from_torch(model, inputs, bundle, force=True, verify=False)
        x = [t.numpy() for t in inputs]
        models = {"t1": rlx.load(bundle / "bundle", threads=1)}
        for b in thresholds:
            parallel.MIN_BYTES = b
            models[f"t2@{b}"] = rlx.load(bundle / "bundle", threads=2)
        want = bench.first_tensor(models["t1"](*x))
        for k, m in models.items():
            assert np.array_equal(bench.first_tensor(m(*x)), want, equal_nan=True), k
        counts = {k: split_steps(m) for k, m in models.items() if k != "t1"}
        line = f"{name:<22} split {counts}"
        if not repeats:
            return line

        def eager() -> np.ndarray:
            with torch.inference_mode():
                return bench.first_tensor(model(*inputs)).numpy()

        fns = {"eager": eager, **{k: (lambda m=m: m(*x)) for k, m in models.items()}}
        ratios: dict[str, list[float]] = {k: [] for k in models}
        for r in range(repeats):
            # A pause longer than OpenBLAS's idle workers spin (2^28 cycles, ~0.1 s): else they steal a core
            # from eager, timed right after rlx (measured: ConvNeXt b8 eager 1.5-2x slower).
            _, rounds = bench.measure(fns, rounds=30, warmup=3 if r == 0 else 1, pause_s=0.25)
            for k in models:
                ratios[k].append(bench.ratio(rounds, k, "eager"))
        return line + "".join(
            f"  {k} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for k, v in ratios.items()
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="convnext,swin,segformer,whisper-encoder,mobilevit,bart,bert")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-bytes", default=f"{parallel.MIN_BYTES},{1 << 17}")
    args = parser.parse_args()
    torch.set_num_threads(bench.THREADS)
    names = args.only.split(",")
    thresholds = [int(b) for b in args.min_bytes.split(",")]
    for batch in (int(b) for b in args.batches.split(",")):
        models = {n: (m, i) for n, m, i in bench.hf_models(batch) if n in names}
        for name in names:
            if name in models:
                print(run_case(f"{name}/b{batch}", *models[name], thresholds, args.repeats), flush=True)


if __name__ == "__main__":
    main()
