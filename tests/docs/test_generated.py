"""The generated parts of docs/ and README.md are what tools/gen_docs.py writes now.

The op tables, the Calls × engine matrix and the CLI reference are derived from the code, so a new
lowering, kernel, emitter or argument makes its page stale until the script is rerun; the
conformance pages are rendered from the recorded results files (tests/conformance/results.json,
tests/frontends/onnx/results.json), which the conformance tools write.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "tools"))  # appended: tools/conformance.py must not shadow the tests/conformance package

import gen_docs  # noqa: E402

PAGES = [p for p in gen_docs.pages() if gen_docs.MARKER.search(p.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def cache() -> dict[str, str]:
    return {}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_generated_parts_are_current(page: Path, cache: dict[str, str]) -> None:
    text = page.read_text(encoding="utf-8")
    assert gen_docs.render(text, page.name, cache) == text, f"{page.relative_to(ROOT)} is stale: run tools/gen_docs.py"


def test_every_generated_part_has_a_page() -> None:
    used = {m.group(1) for p in PAGES for m in gen_docs.MARKER.finditer(p.read_text(encoding="utf-8"))}
    assert used == set(gen_docs.BLOCKS)


def test_markers_are_well_formed() -> None:
    # An opening marker without its closing one would be silently left alone by the script.
    for page in gen_docs.pages():
        text = page.read_text(encoding="utf-8")
        opened = re.findall(r"<!-- gen:([a-z0-9-]+) -->", text)
        closed = re.findall(r"<!-- /gen:([a-z0-9-]+) -->", text)
        assert opened == closed, f"{page.relative_to(ROOT)}: markers {opened} vs {closed}"
        assert len(gen_docs.MARKER.findall(text)) == len(opened)


def test_stale_page_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- gen:aten-ops -->\n| old table |\n<!-- /gen:aten-ops -->\nend\n", encoding="utf-8")
    (new,) = gen_docs.stale([page]).values()
    assert "| old table |" not in new and "`addmm`" in new and new.startswith("intro\n") and new.endswith("end\n")
    page.write_text(new, encoding="utf-8")
    assert gen_docs.stale([page]) == {}


def test_unknown_part_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown generated part 'nope'"):
        gen_docs.render("<!-- gen:nope -->\n<!-- /gen:nope -->", "page.md", {})


def test_recorded_onnx_counts_agree_with_the_known_failures() -> None:
    # test_conformance.py checks every case outside known_failures.py passes and every one in it fails,
    # so the recorded pass count must be the case count less the table.
    sys.path.insert(0, str(ROOT / "tests"))
    from frontends.onnx.known_failures import KNOWN_FAILURES

    record = json.loads(gen_docs.ONNX_RESULTS.read_text(encoding="utf-8"))
    assert record["rlx_passed"] == record["cases"] - len(KNOWN_FAILURES), "rerun tools/onnx_conformance.py --record"
    assert sum(op["cases"] for op in record["ops"].values()) == record["cases"]
    assert sum(op["rlx"] for op in record["ops"].values()) == record["rlx_passed"]


def test_recorded_opinfo_counts_add_up() -> None:
    record = json.loads(gen_docs.OPINFO_RESULTS.read_text(encoding="utf-8"))
    by_op = {s: sum(op[s] for op in record["ops"].values()) for s in ("pass", "fail", "known")}
    by_group = {s: sum(g["all"][s] for g in record["groups"].values()) for s in ("pass", "fail", "known")}
    assert by_op == by_group
