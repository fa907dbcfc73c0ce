"""The README's supported-op table is the one the registry generates."""

from __future__ import annotations

import re
from pathlib import Path

from rlx.frontends.aten.registry import op_table_markdown

README = Path(__file__).parent.parent / "README.md"


def test_readme_op_table_is_generated_from_the_registry():
    text = README.read_text()
    match = re.search(r"<!-- ops-table:start -->\n(.*?)<!-- ops-table:end -->", text, re.S)
    assert match, "README lacks the ops-table markers"
    assert match.group(1).strip() == op_table_markdown().strip(), "README op table is stale: run tools/update_readme.py"
