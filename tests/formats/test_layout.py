"""The on-disk contract shared with the Rust rlx-torch-import: its spellings, written out here on
purpose (a rename in rlx.formats.layout must fail this test, not silently change the files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlx.formats import layout


@pytest.mark.parametrize(
    "name, spelling",
    [
        ("TORCH_IR_FILE", "torch-ir.json"),
        ("WEIGHTS_FILE", "weights.safetensors"),
        ("REFERENCE_FILE", "reference.safetensors"),
        ("EXPORTED_FILE", "exported.pt2"),
        ("BUNDLE_DIR", "bundle"),
        ("PROGRAM_FILE", "program.json"),
        ("META_FILE", "meta.json"),
        ("TUNING_FILE", "tuning.json"),
        ("REPORT_FILE", "report.json"),
        ("DEBUG_FILE", "debug.json"),
        ("ONNX_FILE", "model.onnx"),
        ("ONNX_DATA_FILE", "model.onnx.data"),
    ],
)
def test_file_names(name: str, spelling: str) -> None:
    assert getattr(layout, name) == spelling


@pytest.mark.parametrize("name", ["x", "input_ids", "a::b", ""])
def test_input_key_round_trip(name: str) -> None:
    assert layout.input_key(name) == f"in::{name}"
    assert layout.parse_input_key(layout.input_key(name)) == name


@pytest.mark.parametrize("index", [0, 1, 12])
def test_output_key_round_trip(index: int) -> None:
    assert layout.output_key(index) == f"out::{index}"
    assert layout.parse_output_key(layout.output_key(index)) == index


@pytest.mark.parametrize("key", ["x", "out::x", "in:x", "rlx.rng_state", "out::", "out::-1"])
def test_other_keys_parse_to_none(key: str) -> None:
    assert layout.parse_output_key(key) is None
    assert layout.parse_input_key(key) is None


def test_bundle_root(tmp_path: Path) -> None:
    assert layout.bundle_root(tmp_path) == tmp_path  # a bundle directory itself, or nothing yet
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "program.json").write_text("{}")
    assert layout.bundle_root(tmp_path) == tmp_path / "bundle"  # an `rlx import` OUT directory
