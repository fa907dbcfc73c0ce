"""Every Python code block in docs/ and README.md runs, unless the line before it says why not.

The blocks of one page run in order in one namespace (as a reader would paste them), in a fresh
directory holding a copy of examples/, so they convert the examples' tiny models. A block that is
an excerpt or needs what a test cannot have (a Ray cluster, a downloaded model) is preceded by
``<!-- not run: REASON -->``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: \S.*-->\s*$")


def blocks(page: Path) -> list[tuple[int, str, bool]]:
    """(line, code, runs) for each ```python block of ``page``."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) not in ("python", "py", "python3"):
            continue
        before = [line for line in text[: m.start()].splitlines() if line.strip()]
        runs = not (before and NOT_RUN.match(before[-1]))
        out.append((text.count("\n", 0, m.start()) + 1, m.group(2), runs))
    return out


RUNNABLE = [p for p in PAGES if any(runs for _, _, runs in blocks(p))]


def test_python_blocks_are_spelt_python() -> None:
    # The runner and the not-run marker read ```python fences; another spelling would slip past both.
    for page in PAGES:
        for m in FENCE.finditer(page.read_text(encoding="utf-8")):
            assert m.group(1) not in ("py", "python3", "pycon"), f"{page.relative_to(ROOT)}: use ```python"


def test_skipped_blocks_say_why() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for line in re.findall(r"<!-- not run.*-->", text):
            assert NOT_RUN.match(line), f"{page.relative_to(ROOT)}: {line!r} needs a reason"


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for line, code, runs in blocks(page):
        if not runs:
            continue
        try:
            exec(compile(code, f"{page.relative_to(ROOT)}:{line}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"{page.relative_to(ROOT)}, code block at line {line}: {type(e).__name__}: {e}") from e
