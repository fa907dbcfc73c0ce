"""Two revisions of rlx on the same bundles: import, load, first output and steady-state latency.

    python benchmarks/revisions.py 16ac251 HEAD [--models mlp,transformer,cnn,decoder_lm] [--rounds 12]

Each revision is checked out (``git worktree add --detach``) into a temporary folder. Every example
is converted once, by the first revision's ``rlx import`` (so both read the very same bundle: a
later revision must read an earlier one's files). Then, round after round, each revision runs in a
fresh process (``PYTHONPATH=<revision>/src``), the two alternating, and reports: ``import rlx``,
``rlx.load`` of the bundle, the first call, and the median of the steady calls after it (blocks of
calls with a pause between blocks, as bench.py times). Printed: per model and measure, the median
over the rounds of each revision and their ratio (second / first). Only ratios measured in one
interleaved run mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the examples and the 2-thread environment)

ROOT = Path(__file__).resolve().parent.parent
LABELS = {
    "import_s": "import rlx (s)",
    "load_s": "rlx.load (s)",
    "first_ms": "first call (ms)",
    "cold_s": "import + load + first call (s)",
    "steady_ms": "steady call, median (ms)",
}
MEASURES = tuple(LABELS)

# What one fresh process measures (runs against whichever rlx PYTHONPATH points at).
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import rlx
t1 = time.perf_counter()
import numpy as np
bundle, inputs_file, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
with np.load(inputs_file) as f:
    inputs = [f[k] for k in sorted(f.files)]
t2 = time.perf_counter()
model = rlx.load(bundle)
t3 = time.perf_counter()
model(*inputs)
t4 = time.perf_counter()
times = []
for block in range(calls // 10):
    time.sleep(0.05)
    for _ in range(10):
        s = time.perf_counter()
        model(*inputs)
        times.append(time.perf_counter() - s)
times.sort()
print(json.dumps({"import_s": t1 - t0, "load_s": t3 - t2, "first_ms": (t4 - t3) * 1e3,
                  "cold_s": (t1 - t0) + (t4 - t2), "steady_ms": times[len(times) // 2] * 1e3}))
"""


def example(name: str):
    """examples/<name>.py's model and inputs, as its get_model() makes them (what `rlx import` converts)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_model()


def checkout(rev: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), rev], check=True,
                   capture_output=True)  # fmt: skip
    return into


def child_env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(bench.THREADS)}


def convert(rev_dir: Path, name: str, out: Path) -> Path:
    """The example converted by this revision's CLI; returns the bundle directory."""
    subprocess.run([sys.executable, "-m", "rlx", "import", str(ROOT / "examples" / f"{name}.py"), "-o", str(out),
                    "--force"], check=True, capture_output=True, env=child_env(rev_dir / "src"))  # fmt: skip
    return out / "bundle"


def measure(rev_dir: Path, bundle: Path, inputs: Path, calls: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(bundle), str(inputs), str(calls)],
                          capture_output=True, text=True, env=child_env(rev_dir / "src"))  # fmt: skip
    if done.returncode:
        raise SystemExit(f"{rev_dir.name} on {bundle}: {done.stderr.strip().splitlines()[-1]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", help="the earlier revision (it converts the bundles)")
    parser.add_argument("second", help="the later revision")
    parser.add_argument("--models", default="mlp,transformer,cnn,decoder_lm", help="examples/ names")
    parser.add_argument("--rounds", type=int, default=12, help="fresh processes per revision and model")
    parser.add_argument("--calls", type=int, default=200, help="steady calls per process")
    args = parser.parse_args()
    revs = (args.first, args.second)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dirs = [checkout(rev, work / f"rev{k}") for k, rev in enumerate(revs)]
        try:
            rows = []
            for name in args.models.split(","):
                _, example_inputs = example(name)
                inputs = work / f"{name}.npz"
                np.savez(inputs, **{f"{k:03d}": t.numpy() for k, t in enumerate(example_inputs)})
                bundle = convert(dirs[0], name, work / name)
                got: dict[str, dict[str, list[float]]] = {rev: {m: [] for m in MEASURES} for rev in revs}
                for _ in range(args.rounds):
                    for rev, rev_dir in zip(revs, dirs):
                        for m, v in measure(rev_dir, bundle, inputs, args.calls).items():
                            got[rev][m].append(v)
                rows.append((name, {rev: {m: statistics.median(v) for m, v in got[rev].items()} for rev in revs}))
                print(f"measured {name}", flush=True)
        finally:
            for d in dirs:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(d)], capture_output=True)
    a, b = revs
    print(f"\nmedian over {args.rounds} fresh processes each, interleaved; ratio = {b} / {a}")
    print(f"{'model':<14}{'measure':<30}{a[:12]:>14}{b[:12]:>14}{'ratio':>8}")
    for name, med in rows:
        for m in MEASURES:
            x, y = med[a][m], med[b][m]
            print(f"{name:<14}{LABELS[m]:<30}{x:>14.4f}{y:>14.4f}{y / x:>8.2f}")


if __name__ == "__main__":
    main()
