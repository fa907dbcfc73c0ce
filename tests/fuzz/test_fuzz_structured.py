"""Structured fuzzing (tests/fuzz/structured.py) of every file a user hands rlx: ONNX models,
program.json, meta.json, weights.safetensors, reference.safetensors, .npy inputs, torch-ir.json.

The default suite runs a short deterministic slice of every format in this process (seconds);
the long run (``-m slow``) runs ``RLX_FUZZ_CASES`` cases per format (default 100,000) in child
processes under a 4 GiB address-space limit and a 10 s per-case watchdog:

    RLX_FUZZ_CASES=20000 python -m pytest tests/fuzz/test_fuzz_structured.py -m slow -n 0

Every case must end as a success or a one-line ``RlxError``; anything else fails naming the format
and seed, which ``python tests/fuzz/structured.py FORMAT SEED 1 BASE OUT`` replays.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import structured as S  # noqa: E402

SLICE = 40  # cases per format in the default suite
QUICK_FORMATS = [f for f in S.FORMATS if f != "torch-ir"]  # torch-ir needs a torch export: the long run
LONG_CASES = int(os.environ.get("RLX_FUZZ_CASES", "100000"))


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> S.Base:
    d = tmp_path_factory.mktemp("fuzz-base")
    import rlx

    rlx.from_onnx(S.base_onnx_models()[0], d / "onnx_out")
    return S.Base(d, S.base_onnx_models())


@pytest.mark.parametrize("fmt", QUICK_FORMATS)
def test_slice(base, tmp_path, fmt):
    warnings.simplefilter("ignore")
    problems, seen = [], {"ok": 0, "rlx": 0}
    for seed in range(SLICE):
        row = {"format": fmt, "seed": seed, **S.classify(S.case(fmt, seed, base, tmp_path))}
        seen[row["status"]] = seen.get(row["status"], 0) + 1
        if row["status"] not in ("ok", "rlx"):
            problems.append(S.describe(row))
    assert not problems, "\n".join(problems)
    assert seen["rlx"] > 0  # the mutations reach the checks (a slice that never fails tests nothing)


# Seeds that raised a raw exception before their fix (each also has a test in test_regressions.py).
FOUND = [("onnx", 1624), ("onnx", 59456)]


@pytest.mark.parametrize("fmt, seed", FOUND, ids=[f"{f}-{s}" for f, s in FOUND])
def test_seeds_that_found_bugs(base, tmp_path, fmt, seed):
    warnings.simplefilter("ignore")
    row = {"format": fmt, "seed": seed, **S.classify(S.case(fmt, seed, base, tmp_path))}
    assert row["status"] in ("ok", "rlx"), S.describe(row)


@pytest.mark.slow
@pytest.mark.parametrize("cases", [LONG_CASES])
@pytest.mark.parametrize("fmt", S.FORMATS)
def test_long_run(tmp_path_factory, fmt, cases):
    base_dir = tmp_path_factory.getbasetemp() / "fuzz-long-base"
    if not (base_dir / "onnx_out").exists():
        base_dir.mkdir(exist_ok=True)
        S.make_base(base_dir)
    log = Path(os.environ.get("RLX_FUZZ_LOG", tmp_path_factory.mktemp("fuzz-log") / "fuzz.jsonl"))
    summary = S.run_cases(fmt, 0, cases, base_dir, log)
    print(f"{fmt}: {summary.cases} cases {summary.counts}")
    assert summary.cases == cases
    assert not summary.problems, "\n".join(S.describe(p) for p in summary.problems[:50])
