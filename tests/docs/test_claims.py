"""Numbers and lists the docs quote from the code are the code's: a change to one fails here until
the page says the same. (Behaviour the pages describe is tested where it is implemented; this file
holds the places where the page repeats a constant.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def page(name: str) -> str:
    return re.sub(r"\s+", " ", (DOCS / name).read_text(encoding="utf-8"))


def test_high_level_ops_are_the_ones_the_exporter_keeps() -> None:
    pytest.importorskip("torch")
    from rlx.frontends.torch.levels import HIGH_LEVEL_OPS

    text = page("pytorch.md")
    listed = re.search(r"stay whole so that each lands on one fused Call: (.*?) \(`rlx.frontends.torch", text)
    assert listed
    assert re.findall(r"`(\w+)`", listed.group(1)) == [op.split(".")[0] for op in HIGH_LEVEL_OPS]


def test_pass_names_are_the_pipelines() -> None:
    from rlx.runtime.numpy_engine.passes.optimize import PASS_NAMES

    text = page("engines.md")
    listed = re.search(r"`disable_passes=\(…\)` one of them: (.*?)\. Results", text)
    assert listed and re.findall(r"`(\w+)`", listed.group(1)) == list(PASS_NAMES)


def test_contrib_fusions_are_the_emitters() -> None:
    from rlx.exporters.onnx.registry import DEFAULT_CONTRIB

    assert f"`{tuple(DEFAULT_CONTRIB)!r}`".replace("'", '"') in page("engines.md")


def test_numpy_engine_threads() -> None:
    from rlx.runtime.numpy_engine.parallel import MIN_BYTES, default_threads

    text = page("engines.md")
    assert default_threads() == 1 and "The default is `T = 1`" in text
    assert MIN_BYTES == 1 << 20 and "`rlx.runtime.numpy_engine.parallel.MIN_BYTES` (1 MiB)" in text


def test_parity_tolerances() -> None:
    from rlx.app import verify

    text = page("parity.md")
    assert verify.COSINE_MIN == 0.99999 and verify.ATOL_FACTOR == 1e-4
    assert "cosine ≥ 0.99999 and max |error| ≤ 1e-4 · max(1, max |reference|)" in text
    assert f'"{verify.RANDOM}"' in text


def test_binding_cache_size() -> None:
    from rlx.runtime.model import PLAN_CACHE_SIZE

    assert f"cached (the {PLAN_CACHE_SIZE} most recent bindings)" in page("pytorch.md")


def test_onnx_opset() -> None:
    from rlx.exporters.onnx.registry import OPSET

    assert f"opset {OPSET}" in page("pytorch.md") and f"ONNX, opset {OPSET}" in page("architecture.md")


def test_extras_table_lists_every_extra() -> None:
    # tomllib is Python 3.11+; the section is one `name = [...]` line per extra.
    toml = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = toml.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = re.findall(r"^([\w-]+) = \[", section, re.M)
    assert "docs" in extras and "test" in extras
    rows = re.findall(r"^\| (`[^|]*`) \|", (DOCS / "getting-started.md").read_text(encoding="utf-8"), re.M)
    listed = {name for row in rows for name in re.findall(r"`([\w-]+)`", row)}
    assert set(extras) <= listed, f"extras missing from getting-started.md: {set(extras) - listed}"
