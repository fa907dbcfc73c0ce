"""The bundle: ``program.json`` + ``weights.safetensors`` + ``meta.json`` — everything the runtime needs.

The writer (``write_bundle``) and the reader (``read_bundle``), side by side."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlx.errors import BundleError
from rlx.formats import safetensors_io
from rlx.formats.atomic import atomic_write_text
from rlx.formats.layout import META_FILE, PROGRAM_FILE, WEIGHTS_FILE, bundle_root
from rlx.ir import dtypes
from rlx.ir.program import Lit, Program, Ref, Value, Weight, dumps_json
from rlx.ir.rng import RNG_KEY, with_rng_state
from rlx.ir.rules import TensorType
from rlx.ir.symbolic import dim_json
from rlx.ir.validate import check_program, validate
from rlx.version import __version__

BUNDLE_FORMAT = "rlx-bundle"
BUNDLE_VERSION = 1


def meta_json(program: Program, source: Mapping[str, Any] | None = None) -> dict[str, Any]:
    values = program.values()
    outputs = []
    for k, o in enumerate(program.outputs[: program.n_user_outputs]):
        if isinstance(o, Ref):
            v = values[o.name]
            outputs.append({"name": f"out{k}", "shape": [dim_json(d) for d in v.shape], "dtype": v.dtype})
        elif isinstance(o, Lit):
            outputs.append({"name": f"out{k}", "shape": [], "dtype": o.dtype})
    doc = {
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
    if program.state:  # buffers the runtime carries from call to call (their initial values: the weights)
        doc["state"] = [s.name for s in program.state]
    return doc


def write_bundle(
    program: Program,
    weights: Mapping[str, np.ndarray],
    bundle_dir: Path,
    *,
    source: Mapping[str, Any] | None = None,
    weights_file: Path | None = None,
) -> Path:
    """Write a bundle. ``weights`` is keyed by state_dict name; when ``weights_file`` already holds
    every tensor the program needs, it is hard-linked (copied across filesystems) instead of written
    again, and the tensors it holds that the program does not read (a buffer the lowering left
    unused) are listed in meta.json's ``unused_weights``, so the bundle stays self-contained."""
    bundle_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(bundle_dir / PROGRAM_FILE, program.dumps())
    needed = {w.key for w in program.weights} | {s.key for s in program.state}
    target = bundle_dir / WEIGHTS_FILE
    stored = set(safetensors_io.read(weights_file)[0]) if weights_file is not None else set()
    unused: list[str] = []
    # the generator's initial state of a program that draws is made at load when the file lacks it
    if weights_file is not None and needed - {RNG_KEY} <= stored:
        unused = sorted(stored - needed)
        try:
            os.link(weights_file, target)
        except OSError:
            shutil.copyfile(weights_file, target)
    else:
        weights = with_rng_state(program, dict(weights))  # a generator's initial state, if it draws
        safetensors_io.write(target, {k: weights[k] for k in sorted(needed)})
    meta = meta_json(program, source)
    if unused:
        meta["unused_weights"] = unused
    atomic_write_text(bundle_dir / META_FILE, dumps_json(meta))
    return bundle_dir


def read_meta(bundle_dir: Path) -> dict[str, Any]:
    return json.loads((bundle_dir / META_FILE).read_text(encoding="utf-8"))


# ── reading ──────────────────────────────────────────────────────────────────
BUNDLE_FILES = (PROGRAM_FILE, META_FILE, WEIGHTS_FILE)
MAX_JSON_BYTES = 256 * 1024 * 1024


def read_bundle(bundle_dir: str | Path) -> tuple[Program, dict[str, np.ndarray], dict[str, Any]]:
    """The program, its weights (memory-mapped) by value name, and meta.json of a bundle directory,
    every size, shape and dtype checked; nothing outside the directory is read."""
    bundle_dir = bundle_root(Path(bundle_dir))  # an OUT directory from `rlx import` holds it in bundle/
    if not bundle_dir.is_dir():
        raise BundleError(f"{bundle_dir}: not a directory; pass the bundle directory written by `rlx import`")
    paths = {name: inside(bundle_dir, name) for name in BUNDLE_FILES}
    program, meta, inferred = read_checked_program(bundle_dir)
    tensors, _ = safetensors_io.read(paths[WEIGHTS_FILE])
    extra = sorted(
        set(tensors)
        - {w.key for w in program.weights}
        - {s.key for s in program.state}
        - unused_weights(meta, paths[META_FILE])
    )
    if extra:
        more = f" and {len(extra) - 3} more" if len(extra) > 3 else ""
        raise BundleError(
            f"{paths[WEIGHTS_FILE]}: tensor(s) {', '.join(map(repr, extra[:3]))}{more} are not used by the "
            "program; the bundle's files do not belong together"
        )
    weights = bind_weights(program, tensors, paths[WEIGHTS_FILE])
    # Every declared shape and dtype against its Call's rule; after the weights, so a weight
    # whose declared dtype disagrees with the file is reported as that, not as its first reader.
    check_program(program, PROGRAM_FILE, inferred)
    return program, weights, meta


# The optional top-level fields of program.json and the JSON type each must have when present
# (Program.from_json iterates them: an int there would escape as a TypeError).
PROGRAM_FIELD_TYPES: dict[str, type] = {
    "guards": list,
    "symbols": list,
    "data_symbols": list,
    "state": list,
    "input_updates": list,
    "value_map": dict,
    "source_histogram": dict,
}


def check_program_fields(doc: Any, path: Path) -> None:
    """program.json is an object whose optional fields have the JSON types rlx writes."""
    if not isinstance(doc, dict):
        raise BundleError(f"{path}: expected a JSON object, found {type(doc).__name__}")
    check_field_types(doc, PROGRAM_FIELD_TYPES, path)
    hist = doc.get("source_histogram") or {}
    if not all(type(n) is int for n in hist.values()):
        raise BundleError(f"{path}: field 'source_histogram' must map op names to counts (ints)")


def check_field_types(doc: dict[str, Any], types: Mapping[str, type], path: Path) -> None:
    for key, typ in types.items():
        value = doc.get(key)
        if value is not None and not isinstance(value, typ):
            want = (
                "a list" if typ is list else "an object" if typ is dict else "a string" if typ is str else typ.__name__
            )
            raise BundleError(f"{path}: field {key!r} must be {want}, found {type(value).__name__}")


# meta.json's optional fields and their JSON types (readers such as `rlx inspect` use them).
META_FIELD_TYPES: dict[str, type] = {
    "model_name": str,
    "outputs": list,
    "symbols": list,
    "source": dict,
    "state": list,
    "rlx_version": str,
    "unused_weights": list,
}


def read_program(bundle_dir: Path) -> tuple[Program, dict[str, Any]]:
    """A bundle's program.json and meta.json, each checked and checked against the other (what
    ``rlx inspect`` shows; ``read_bundle`` adds the weights)."""
    program, meta, _ = read_checked_program(bundle_dir)
    return program, meta


def read_checked_program(bundle_dir: Path) -> tuple[Program, dict[str, Any], list[TensorType | None]]:
    """``read_program`` plus the result types the Call rules gave (``check_program`` reuses them)."""
    program_path, meta_path = inside(bundle_dir, PROGRAM_FILE), inside(bundle_dir, META_FILE)
    doc = read_json(program_path)
    check_program_fields(doc, program_path)
    program = Program.from_json(doc, PROGRAM_FILE)
    inferred = validate(program, PROGRAM_FILE, rules=True)
    meta = read_json(meta_path)
    check_meta(meta, program, meta_path)
    # An optional field written as null is absent: readers then see their default, not None.
    meta = {k: v for k, v in meta.items() if not (v is None and k in META_FIELD_TYPES)}
    return program, meta, inferred


def unused_weights(meta: Mapping[str, Any], source: Path) -> set[str]:
    """The tensors meta.json says the weights file holds for others (torch-ir.json) and the program
    does not read: the file is shared with the exported directory rather than written twice."""
    names = meta.get("unused_weights", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BundleError(f"{source}: unused_weights must be a list of tensor names")
    return set(names)


def inside(directory: Path, name: str) -> Path:
    """``directory/name``, refusing a path that resolves outside ``directory`` (symlinks included)."""
    path = directory / name
    root = directory.resolve()
    if not path.resolve().is_relative_to(root):
        raise BundleError(f"{path}: resolves outside the bundle directory ({path.resolve()}); refusing to read it")
    return path


def check_meta(meta: Any, program: Program, source: Path) -> None:
    """meta.json must describe the same inputs as program.json (a mismatch means mixed-up files)."""
    if not isinstance(meta, dict) or meta.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{source}: not an rlx bundle meta.json (format must be {BUNDLE_FORMAT!r})")
    if meta.get("version") != BUNDLE_VERSION:
        raise BundleError(
            f"{source}: this rlx reads bundle version {BUNDLE_VERSION}, found {meta.get('version')!r}"[:300]
        )
    check_field_types(meta, META_FIELD_TYPES, source)
    inputs = meta.get("inputs")
    declared = [{"name": v.name, "shape": [dim_json(d) for d in v.shape], "dtype": v.dtype} for v in program.inputs]
    if inputs != declared:
        raise BundleError(f"{source}: inputs {repr(inputs)[:200]} do not match program.json's {repr(declared)[:200]}")


def bind_weights(program: Program, tensors: Mapping[str, np.ndarray], source: Path | str) -> dict[str, np.ndarray]:
    """Weights by program value name, checking every declared shape and dtype (a program that draws
    random numbers gets its generator's initial state when ``tensors`` lacks it: ``rlx.ir.rng``)."""
    tensors = with_rng_state(program, dict(tensors))

    def take(key: str, v: Value | Weight, needed_as: str, declared_as: str) -> np.ndarray:
        if key not in tensors:
            raise BundleError(f"{source}: tensor {key!r} is missing ({needed_as})")
        arr = tensors[key]
        if dtypes.from_numpy(arr.dtype) != v.dtype or tuple(arr.shape) != v.shape:
            raise BundleError(
                f"{source}: tensor {key!r} is {dtypes.from_numpy(arr.dtype)}{list(arr.shape)}, "
                f"{declared_as} {v.dtype}{list(v.shape)}"
            )
        return arr

    out = {w.name: take(w.key, w, f"the program needs it as {w.name}", "the program declares") for w in program.weights}
    inputs = {v.name: v for v in program.inputs}
    for s in program.state:  # the initial value of each state buffer
        out[s.name] = take(s.key, inputs[s.name], f"the initial value of state {s.name}", f"state {s.name} is")
    return out


def read_json(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise BundleError(f"{path}: {size} bytes is more than the {MAX_JSON_BYTES}-byte limit for a JSON file")
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path}: missing; is {path.parent} a bundle written by `rlx import`?") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BundleError(f"{path}: not valid JSON: {e}") from None
