"""ONNX's own node tests through rlx: every ai.onnx case passes unless known_failures.py says why not.

The cases are onnx.backend.test.case.node (a model and its expected outputs each); the table is
written by ``tools/onnx_conformance.py --write-known-failures``. A case that starts passing must be
removed from the table, so the table (and the README numbers) cannot go stale silently.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))  # tests/frontends/onnx -> repo root
import onnx_conformance as conf  # noqa: E402

from frontends.onnx.known_failures import KNOWN_FAILURES  # noqa: E402

MIN_PASS_RATE = 0.80  # of all ai.onnx cases; raise it when the table shrinks


@pytest.fixture(scope="module")
def outcomes() -> list[conf.Outcome]:
    return [conf.run_rlx(c) for c in conf.collect()]


def test_no_unexpected_failures(outcomes):
    unexpected = [f"{o.name}: {o.reason}" for o in outcomes if not o.passed and o.name not in KNOWN_FAILURES]
    assert not unexpected, f"{len(unexpected)} new failure(s):\n" + "\n".join(unexpected[:30])


def test_known_failures_still_fail(outcomes):
    fixed = [o.name for o in outcomes if o.passed and o.name in KNOWN_FAILURES]
    assert not fixed, f"now passing, remove from known_failures.py: {fixed[:30]}"


def test_pass_rate_does_not_regress(outcomes):
    rate = sum(o.passed for o in outcomes) / len(outcomes)
    assert len(outcomes) > 1000
    assert rate >= MIN_PASS_RATE, f"pass rate {rate:.1%} < {MIN_PASS_RATE:.0%}"
