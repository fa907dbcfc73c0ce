"""README.md stays a short front page: the reference lives in docs/, and its numbers come from there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    long = [(k + 1, len(line)) for k, line in enumerate(lines) if len(line) > 200]
    assert not long, f"README lines over 200 characters (line, length): {long}"


def test_generated_tables_live_only_in_docs() -> None:
    text = README.read_text(encoding="utf-8")
    for name in ("aten-ops", "onnx-ops", "opinfo-by-op", "onnx-conformance-by-op", "engines", "cli"):
        assert f"<!-- gen:{name} -->" not in text


def test_readme_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_readme_speed_numbers_are_the_performance_pages() -> None:
    # The README quotes the geometric means of the benchmark table on docs/performance.md.
    perf = (DOCS / "performance.md").read_text(encoding="utf-8")
    geomeans = re.search(r"^\| \*\*geomean\*\*.*$", perf, re.M)
    assert geomeans
    numpy, jax, ort = re.findall(r"\*\*([\d.]+)\*\*", geomeans.group(0))
    readme = README.read_text(encoding="utf-8")
    assert f"| rlx numpy | {numpy}× |" in readme
    assert f"| rlx JAX | {jax}× |" in readme
    assert f"| rlx onnxruntime | | {ort}× |" in readme


def test_setup_commands_are_unchanged() -> None:
    # The two commands a new user copies: one runs the example, one runs the tests.
    readme = README.read_text(encoding="utf-8")
    assert (
        'python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[torch]" && '
        ".venv/bin/rlx import examples/transformer.py -o out/transformer --force"
    ) in readme
    assert (
        'python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[test]" && .venv/bin/python -m pytest'
    ) in readme
