"""Regenerate the README's supported-op table from the registry: python tools/update_readme.py"""

from __future__ import annotations

import re
from pathlib import Path

from rlx.frontends.aten.registry import op_table_markdown

README = Path(__file__).resolve().parent.parent / "README.md"


def main() -> None:
    text = README.read_text()
    table = op_table_markdown()
    new = re.sub(
        r"(<!-- ops-table:start -->\n).*?(<!-- ops-table:end -->)",
        lambda m: f"{m.group(1)}{table}\n{m.group(2)}",
        text,
        flags=re.S,
    )
    README.write_text(new)


if __name__ == "__main__":
    main()
