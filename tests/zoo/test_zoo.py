"""Model zoo: every family in tests/zoo/models.py converts at every decomposition level with parity.

Slow (run with ``pytest -m slow``): each case exports a small real model (random weights, built from
a config) and checks the numpy bundle against eager PyTorch with rlx's own parity rule. Known
failures are xfail(strict=True) with their reason (``KNOWN_FAILURES``), so a fix shows up as XPASS.
``python tools/zoo_report.py`` runs the same matrix and writes tests/zoo/RESULTS.md.
"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("transformers")

import rlx  # noqa: E402
from zoo.models import KNOWN_FAILURES, ZOO  # noqa: E402

from helpers import LEVELS  # noqa: E402

pytestmark = pytest.mark.slow


def _params():
    for name in ZOO:
        for level in LEVELS:
            reason = KNOWN_FAILURES.get((name, level))
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            yield pytest.param(name, level, id=f"{name}-{level}", marks=marks)


@pytest.mark.parametrize("name,level", _params())
def test_zoo_model_converts_with_parity(name, level, tmp_path):
    model, args, kwargs = ZOO[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' and torch.export's chatter
        report = rlx.from_torch(model, args, tmp_path / "out", example_kwargs=kwargs, decomposition=level)
    assert report.parity is not None and report.parity.passed, f"{name} [{level}]\n{report.parity.table()}"
    assert report.n_instructions > 0
