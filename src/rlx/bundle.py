"""The bundle: ``program.json`` + ``weights.safetensors`` + ``meta.json`` — everything the runtime needs."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlx import __version__, safetensors_io
from rlx.ir.program import Lit, Program, Ref, dumps_json
from rlx.ir.symbolic import dim_json
from rlx.util import atomic_write_text

BUNDLE_FORMAT = "rlx-bundle"
BUNDLE_VERSION = 1


def meta_json(program: Program, source: Mapping[str, Any] | None = None) -> dict[str, Any]:
    values = program.values()
    outputs = []
    for k, o in enumerate(program.outputs):
        if isinstance(o, Ref):
            v = values[o.name]
            outputs.append({"name": f"out{k}", "shape": [dim_json(d) for d in v.shape], "dtype": v.dtype})
        elif isinstance(o, Lit):
            outputs.append({"name": f"out{k}", "shape": [], "dtype": o.dtype})
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "model_name": program.name,
        "inputs": [{"name": v.name, "shape": [dim_json(d) for d in v.shape], "dtype": v.dtype} for v in program.inputs],
        "outputs": outputs,
        "output_tree": program.output_tree,
        "symbols": [{"name": s.name, "min": s.min, "max": s.max, "hint": s.hint} for s in program.symbols],
        "rlx_version": __version__,
        "source": dict(source or {"format": "rlx-torch-ir", "version": 1}),
    }


def write_bundle(
    program: Program,
    weights: Mapping[str, np.ndarray],
    bundle_dir: Path,
    *,
    source: Mapping[str, Any] | None = None,
    weights_file: Path | None = None,
) -> Path:
    """Write a bundle. ``weights`` is keyed by state_dict name; when ``weights_file`` already holds
    exactly those tensors it is linked (or copied) instead of written again."""
    bundle_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(bundle_dir / "program.json", program.dumps())
    needed = {w.key for w in program.weights}
    target = bundle_dir / "weights.safetensors"
    if weights_file is not None and set(weights) == needed:
        try:
            os.link(weights_file, target)
        except OSError:
            shutil.copyfile(weights_file, target)
    else:
        safetensors_io.write(target, {k: weights[k] for k in sorted(needed)})
    atomic_write_text(bundle_dir / "meta.json", dumps_json(meta_json(program, source)))
    return bundle_dir


def read_meta(bundle_dir: Path) -> dict[str, Any]:
    return json.loads((bundle_dir / "meta.json").read_text(encoding="utf-8"))
