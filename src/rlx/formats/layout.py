"""The on-disk contract shared with the Rust ``rlx-torch-import``: file names and reference keys.

Every file an rlx directory holds is named here once, and the keys of ``reference.safetensors``
(``in::<input name>``, ``out::<output index>``) are built and parsed only by the functions below,
so the two implementations cannot drift apart on a spelling. An ``rlx import`` OUT directory::

    OUT/torch-ir.json  OUT/weights.safetensors  OUT/reference.safetensors  [OUT/exported.pt2]
    OUT/model.onnx [+ model.onnx.data]          (an ONNX import, or --write onnx)
    OUT/bundle/program.json  OUT/bundle/weights.safetensors  OUT/bundle/meta.json  [tuning.json]
"""

from __future__ import annotations

from pathlib import Path

# The exported, language-neutral directory (what `rlx export` / the Rust front-end write).
TORCH_IR_FILE = "torch-ir.json"
WEIGHTS_FILE = "weights.safetensors"  # also the bundle's and a generated package's weights
REFERENCE_FILE = "reference.safetensors"  # example inputs (in::) and the reference outputs (out::)
EXPORTED_FILE = "exported.pt2"  # torch's ExportedProgram, kept for `rlx debug`

# The bundle the runtime loads: OUT/bundle/ or any directory holding these three files.
BUNDLE_DIR = "bundle"
PROGRAM_FILE = "program.json"
META_FILE = "meta.json"
TUNING_FILE = "tuning.json"  # written by `rlx tune`, followed by `rlx.load`
# int8-static's calibration (onnxruntime's tensor ranges, JSON), written by `rlx tune` beside
# tuning.json: loading reads the ranges instead of recalibrating, for every input-shape binding
CALIBRATION_FILE = "int8-static.calibration.json"

# What `rlx import` / `rlx build` report beside them (report.html is rendered from these).
REPORT_FILE = "report.json"
DEBUG_FILE = "debug.json"  # `rlx debug`'s per-node comparison

# ONNX: an imported model as read, or the portable export; weights above 2 GB in the data file.
ONNX_FILE = "model.onnx"
ONNX_DATA_FILE = "model.onnx.data"

INPUT_PREFIX = "in::"
OUTPUT_PREFIX = "out::"


def input_key(name: str) -> str:
    """The reference.safetensors key of input ``name``'s example value."""
    return f"{INPUT_PREFIX}{name}"


def output_key(index: int) -> str:
    """The reference.safetensors key of output ``index``'s reference value."""
    return f"{OUTPUT_PREFIX}{index}"


def parse_input_key(key: str) -> str | None:
    """The input name an ``in::`` key names, or None for any other key."""
    return key[len(INPUT_PREFIX) :] if key.startswith(INPUT_PREFIX) else None


def parse_output_key(key: str) -> int | None:
    """The output index an ``out::`` key names, or None for any other key."""
    rest = key[len(OUTPUT_PREFIX) :] if key.startswith(OUTPUT_PREFIX) else ""
    return int(rest) if rest.isdigit() else None


def bundle_root(path: Path) -> Path:
    """The directory holding program.json: ``path/bundle`` for an ``rlx import`` OUT directory,
    else ``path`` itself."""
    return path / BUNDLE_DIR if (path / BUNDLE_DIR / PROGRAM_FILE).is_file() else path
