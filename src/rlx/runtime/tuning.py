"""``BUNDLE/tuning.json``: the (engine, precision, threads) ``rlx tune`` measured fastest within the
user's tolerance, with the machine it was measured on. ``rlx.load(bundle)`` without an ``engine``
uses it when the machine still matches (CPU model and the flags that matter, the package versions
of rlx, numpy and the chosen engine) and the engine is installed; otherwise the numpy engine.

Reading the file never imports an engine (versions come from the installed packages' metadata)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlx.errors import BundleError
from rlx.formats.bundle import inside, read_json
from rlx.formats.layout import CALIBRATION_FILE, TUNING_FILE, bundle_root
from rlx.runtime.cpu import cores, cpu_model, relevant_flags
from rlx.runtime.engines import ENGINE_PRECISIONS, ENGINES
from rlx.version import __version__

FORMAT = "rlx-tuning"
# The engine options a tuning choice may record: the calibration file (a name inside the bundle
# directory) and the instructions kept in float32 (mixed precision; their result names)
CHOICE_OPTIONS = ("calibration", "float32", "pad_channels")
# The package each engine runs on (its version is part of the machine a choice was measured on).
ENGINE_PACKAGES = {"numpy": "numpy", "jax": "jaxlib", "onnxruntime": "onnxruntime", "openvino": "openvino"}


@dataclass(frozen=True)
class Choice:
    engine: str
    precision: str
    threads: int | None
    path: Path  # the tuning.json it came from
    options: dict[str, Any]  # engine options (``CHOICE_OPTIONS``), the calibration file's path resolved


def package_version(package: str) -> str | None:
    import importlib.metadata  # (20 ms: loading a bundle without a tuning.json never needs it)

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine(engines: list[str]) -> dict[str, Any]:
    """This machine as tuning.json records it: CPU, relevant flags, cores and package versions."""
    versions = {"rlx": __version__, **{ENGINE_PACKAGES[e]: package_version(ENGINE_PACKAGES[e]) for e in engines}}
    if "numpy" not in versions:
        versions["numpy"] = package_version("numpy")
    return {"cpu": cpu_model(), "flags": relevant_flags(), "cores": cores(), "versions": versions}


def mismatch(doc: Any, where: Path) -> str:
    """Why the choice in ``doc`` does not apply here ("" when it does); BundleError if it is malformed."""
    try:
        choice, recorded = doc["choice"], doc["machine"]
        engine, precision = choice["engine"], choice["precision"]
        threads = choice.get("threads")
        cpu, flags, versions = recorded["cpu"], recorded["flags"], recorded["versions"]
    except (KeyError, TypeError):
        raise BundleError(f"{where}: not a tuning file written by `rlx tune` (re-run it)") from None
    if doc.get("format") != FORMAT or engine not in ENGINES or precision not in ENGINE_PRECISIONS[engine]:
        raise BundleError(f"{where}: unknown format, engine or precision; re-run `rlx tune`")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise BundleError(f"{where}: threads must be a positive integer; re-run `rlx tune`")
    options = choice.get("options", {})
    if (
        not isinstance(options, dict)
        or any(k not in CHOICE_OPTIONS for k in options)
        or not isinstance(options.get("calibration", ""), str)
        or not isinstance(options.get("float32", []), list)
        or not all(isinstance(n, str) for n in options.get("float32", []))
        or not isinstance(options.get("pad_channels", False), bool)
        or ("pad_channels" in options and engine != "onnxruntime")
    ):
        raise BundleError(f"{where}: malformed choice options; re-run `rlx tune`")
    if importlib.util.find_spec(ENGINE_PACKAGES[engine].replace("jaxlib", "jax")) is None:
        return f"its engine {engine} is not installed"
    here = machine([engine])
    if cpu != here["cpu"] or list(flags) != here["flags"]:
        return f"it was measured on another CPU ({cpu})"
    changed = [f"{k} {versions.get(k)} -> {v}" for k, v in here["versions"].items() if versions.get(k) != v]
    return f"package versions changed ({', '.join(changed)})" if changed else ""


def tuned_choice(path: str | Path) -> tuple[Choice | None, str]:
    """The tuned choice for the bundle at ``path``, or None with the reason it does not apply
    ("" when there is no tuning.json)."""
    directory = bundle_root(Path(path))
    file = directory / TUNING_FILE
    if not file.is_file():
        return None, ""
    try:
        doc = read_json(inside(directory, TUNING_FILE))
    except BundleError as e:  # (a half-written or hand-edited file: say how to get a good one)
        raise BundleError(f"{e}; re-run `rlx tune` or delete it") from None
    why = mismatch(doc, file)
    if why:
        return None, f"{file} ignored: {why}; running the numpy engine (re-run `rlx tune`)"
    choice = doc["choice"]
    options = dict(choice.get("options", {}))
    if "calibration" in options:
        options["calibration"] = inside(directory, options["calibration"])
    return Choice(choice["engine"], choice["precision"], choice.get("threads"), file, options), ""


def calibration_options(path: str | Path, precision: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with int8-static's calibration file added where none is given: the bundle's own
    (``CALIBRATION_FILE``, written by ``rlx tune``) when it has one."""
    if precision != "int8-static" or "calibration" in options:
        return options
    directory = bundle_root(Path(path))
    if (directory / CALIBRATION_FILE).is_file():
        return {**options, "calibration": inside(directory, CALIBRATION_FILE)}
    return options
