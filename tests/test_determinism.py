"""The same model and inputs give byte-identical torch-ir.json and program.json."""

from __future__ import annotations

import pytest

import rlx

from helpers import load_example


@pytest.mark.parametrize("name", ["transformer", "cnn"])
def test_export_twice_is_byte_identical(name, tmp_path):
    model, inputs = load_example(name).get_model()
    rlx.from_torch(model, inputs, tmp_path / "a")
    model, inputs = load_example(name).get_model()
    rlx.from_torch(model, inputs, tmp_path / "b")
    for rel in (
        "torch-ir.json",
        "bundle/program.json",
        "bundle/meta.json",
        "weights.safetensors",
        "reference.safetensors",
    ):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
