"""docs/formats.md names every top-level field rlx writes into torch-ir.json, program.json and meta.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch.export import Dim

import rlx

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ROOT / "docs" / "formats.md"


class Cache(torch.nn.Module):
    """A buffer updated in place (state) and a data-dependent size (data_symbols), on a dynamic batch."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.total.add_(x.sum(0))
        return self.total * 2, torch.nonzero(x > 0)


def documented(section: str) -> set[str]:
    """The field names in the first column of the tables under the heading ``section``."""
    text = FORMATS.read_text(encoding="utf-8")
    body = re.search(rf"^#+ {re.escape(section)}\n(.*?)(?=^#+ |\Z)", text, re.S | re.M)
    assert body, f"docs/formats.md has no section {section!r}"
    return {name for row in re.findall(r"^\| (.*?) \|", body.group(1), re.M) for name in re.findall(r"`(\w+)`", row)}


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("formats") / "out"
    x = torch.tensor([[1.0, -2.0, 3.0], [-1.0, 5.0, 0.0]])
    rlx.from_torch(Cache(), (x,), path, dynamic_shapes={"x": {0: Dim("batch", min=1, max=8)}})
    return path


@pytest.mark.parametrize(
    ("file", "section"),
    [("torch-ir.json", "torch-ir.json"), ("bundle/program.json", "program.json"), ("bundle/meta.json", "meta.json")],
)
def test_every_written_field_is_documented(out: Path, file: str, section: str) -> None:
    written = set(json.loads((out / file).read_text(encoding="utf-8")))
    assert written - documented(section) == set(), f"{file}: fields missing from docs/formats.md"
