"""``rlx.load(bundle_dir)`` → a callable ``Model`` that runs with numpy only."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlx import safetensors_io
from rlx.bundle import BUNDLE_FORMAT, BUNDLE_VERSION
from rlx.errors import BundleError, InputError, RlxError, UsageError
from rlx.ir import dtypes
from rlx.ir.program import Program, Value, specialize
from rlx.ir.symbolic import dim_json
from rlx.ir.verify import verify as verify_program
from rlx.passes import pipeline
from rlx.runtime.binding import bind_symbols
from rlx.runtime.executor import Executor


class Model:
    """A loaded model. ``model(*arrays, **named)`` returns outputs in the model's structure."""

    def __init__(
        self,
        program: Program,
        weights: Mapping[str, np.ndarray],
        meta: dict[str, Any] | None = None,
        *,
        optimize: bool = True,
        backend: str = "numpy",
        disable_passes: Iterable[str] = (),
    ) -> None:
        self.program = program
        self.meta = meta or {}
        self.name = program.name
        self.inputs: list[Value] = list(program.inputs)
        self.output_tree = program.output_tree
        check_tree(self.output_tree, len(program.outputs), "output_tree")
        self._weights = weights
        # Static programs have one executor; dynamic ones get one per binding of the symbols.
        self._optimize = optimize  # constant folding at load; off for debugging (`rlx run --no-opt`)
        self.backend = backend
        self._jax = _jax_backend(backend, program, weights)  # None for numpy: jax is imported only when asked for
        # The numpy backend's passes (rlx.passes.pipeline; `rlx run --no-opt` / `--disable-pass NAME`).
        # A dynamic program is optimised once as written — weights folded and packed once, shared by
        # every binding — and then again per binding, once its shapes are known.
        self._disabled = pipeline.check_names(disable_passes) if optimize else frozenset(pipeline.PASS_NAMES)
        self._plan_source, self._plan_weights = program, weights
        if self._jax is None and program.is_dynamic:
            self._plan_source, self._plan_weights = pipeline.optimize(program, weights, self._disabled)
        self._static = None if program.is_dynamic else self._new_executor(program)
        self._by_binding: OrderedDict[tuple[tuple[str, int], ...], Executor] = OrderedDict()
        self._lock = threading.Lock()  # guards the plan cache; running a plan needs no lock

    @property
    def weights(self) -> Mapping[str, np.ndarray]:
        """The weights by program value name (memory-mapped when loaded from a bundle)."""
        return self._weights

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.inputs]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return unflatten(self.output_tree, self.run_flat(self.bind(args, kwargs)))

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[np.ndarray]:
        """Match positional and named arguments to the program inputs, checking each one."""
        names = self.input_names
        if len(args) > len(names):
            raise InputError(f"{self.name} takes {len(names)} inputs ({', '.join(names)}), got {len(args)} positional")
        bound: dict[str, Any] = dict(zip(names, args))
        for key, val in kwargs.items():
            if key not in names:
                raise InputError(f"{self.name} has no input named {key!r}; its inputs are {', '.join(names)}")
            if key in bound:
                raise InputError(f"input {key!r} given both by position and by name")
            bound[key] = val
        missing = [n for n in names if n not in bound]
        if missing:
            raise InputError(f"{self.name}: missing input(s) {', '.join(missing)}; expected {', '.join(names)}")
        return [check_input(v, bound[v.name]) for v in self.inputs]

    def run_flat(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run on inputs in program order (as ``bind`` returns them)."""
        return self.executor_for(inputs).run(inputs)

    def executor_for(self, inputs: list[np.ndarray]) -> Executor:
        if self._static is not None:
            return self._static
        bindings = bind_symbols(self.program, inputs)
        key = tuple(sorted(bindings.items()))
        with self._lock:
            executor = self._by_binding.get(key)
            if executor is not None:
                self._by_binding.move_to_end(key)
                return executor
        executor = self._new_executor(specialize(self._plan_source, bindings))
        with self._lock:
            self._by_binding[key] = executor
            if len(self._by_binding) > PLAN_CACHE_SIZE:
                self._by_binding.popitem(last=False)
        return executor

    def _new_executor(self, program: Program) -> Executor:
        if self._jax is not None:  # one XLA compilation of the whole (specialised) program; same run()
            return self._jax(program)
        return Executor(*pipeline.optimize(program, self._plan_weights, self._disabled))


PLAN_CACHE_SIZE = 16  # evaluated plans kept per model, least recently used first out
BACKENDS = ("numpy", "jax")


def check_backend(backend: str) -> None:
    """A known backend that can run here: UsageError otherwise (for jax: how to install it)."""
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "jax":
        from rlx.runtime.jax_backend import load_kernels

        load_kernels()


def _jax_backend(backend: str, program: Program, weights: Mapping[str, np.ndarray]) -> Any:
    check_backend(backend)
    if backend == "numpy":
        return None
    from rlx.runtime import jax_backend

    return jax_backend.backend(program, weights)


def check_input(spec: Value, value: Any) -> np.ndarray:
    want = dtypes.to_numpy(spec.dtype)
    if isinstance(value, np.ndarray):
        arr = value
        if arr.dtype != want and arr.dtype.newbyteorder("=") == want.newbyteorder("="):
            arr = arr.astype(want)  # the same values in the other byte order: convert, as torch would need
        if arr.dtype != want:
            raise InputError(
                f"input {spec.name!r} has dtype {arr.dtype}, expected {want} ({spec.dtype}); convert with .astype()"
            )
    else:
        try:
            arr = np.asarray(value, dtype=want)
        except (TypeError, ValueError) as e:
            raise InputError(f"input {spec.name!r}: cannot convert {type(value).__name__} to {want}: {e}") from None
    if arr.ndim != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, arr.shape)):
        expected = "[" + ", ".join(str(d) for d in spec.shape) + "]"
        raise InputError(f"input {spec.name!r} has shape {list(arr.shape)}, expected {expected}")
    # One memory layout for every caller, so equal values always give bit-identical outputs.
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def check_tree(tree: Any, n_outputs: int, where: str) -> None:
    """Validate an output structure before it is trusted: every leaf names an existing output."""

    def walk(t: Any, path: str, depth: int) -> None:
        if depth > 100:
            raise BundleError(f"{where}: output structure nested more than 100 levels")
        if t is None:
            return
        if not isinstance(t, dict) or len(t) != 1:
            raise BundleError(f"{where}{path}: expected one of out/const/tuple/list/dict, found {t!r}"[:300])
        ((kind, v),) = t.items()
        if kind == "out":
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n_outputs:
                raise BundleError(f"{where}{path}.out: {v!r} is not an output index below {n_outputs}")
        elif kind in ("tuple", "list"):
            if not isinstance(v, list):
                raise BundleError(f"{where}{path}.{kind}: expected a list")
            for k, item in enumerate(v):
                walk(item, f"{path}.{kind}[{k}]", depth + 1)
        elif kind == "dict":
            if not isinstance(v, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], (str, int)) for p in v
            ):
                raise BundleError(f"{where}{path}.dict: expected a list of [key, value] pairs")
            for k, (_key, item) in enumerate(v):
                walk(item, f"{path}.dict[{k}]", depth + 1)
        elif kind != "const":
            raise BundleError(f"{where}{path}: unknown output-structure node {kind!r}")

    walk(tree, "", 0)


def unflatten(tree: Any, flat: list[Any]) -> Any:
    """Rebuild the model's output structure from the flat output list."""
    if tree is None:
        return None
    if "out" in tree:
        return flat[tree["out"]]
    if "const" in tree:
        return tree["const"]
    if "tuple" in tree:
        return tuple(unflatten(t, flat) for t in tree["tuple"])
    if "list" in tree:
        return [unflatten(t, flat) for t in tree["list"]]
    if "dict" in tree:
        return {k: unflatten(t, flat) for k, t in tree["dict"]}
    raise BundleError(f"output structure has an unknown node {sorted(tree)}")


BUNDLE_FILES = ("program.json", "meta.json", "weights.safetensors")
MAX_JSON_BYTES = 256 * 1024 * 1024


def load(
    bundle_dir: str | Path, *, optimize: bool = True, backend: str = "numpy", disable_passes: Iterable[str] = ()
) -> Model:
    """Load a bundle directory (``program.json`` + ``weights.safetensors`` + ``meta.json``).

    Nothing in a bundle is executed, nothing outside the directory is read (a file that is a
    symlink leading out of it is refused), and every size, shape and dtype is checked before use.
    ``backend="jax"`` runs the program as one XLA computation per input-shape binding (needs jax).
    """
    bundle_dir = Path(bundle_dir)
    if (bundle_dir / "bundle" / "program.json").is_file():  # an OUT directory from `rlx import`
        bundle_dir = bundle_dir / "bundle"
    if not bundle_dir.is_dir():
        raise BundleError(f"{bundle_dir}: not a directory; pass the bundle directory written by `rlx import`")
    paths = {name: inside(bundle_dir, name) for name in BUNDLE_FILES}
    program = Program.from_json(read_json(paths["program.json"]), "program.json")
    verify_program(program, "program.json")
    meta = read_json(paths["meta.json"])
    check_meta(meta, program, paths["meta.json"])
    tensors, _ = safetensors_io.read(paths["weights.safetensors"])
    extra = sorted(set(tensors) - {w.key for w in program.weights})
    if extra:
        more = f" and {len(extra) - 3} more" if len(extra) > 3 else ""
        raise BundleError(
            f"{paths['weights.safetensors']}: tensor(s) {', '.join(map(repr, extra[:3]))}{more} are not used by the "
            "program; the bundle's files do not belong together"
        )
    weights = bind_weights(program, tensors, paths["weights.safetensors"])
    return Model(program, weights, meta, optimize=optimize, backend=backend, disable_passes=disable_passes)


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
        raise BundleError(f"{source}: this rlx reads bundle version {BUNDLE_VERSION}, found {meta.get('version')!r}")
    inputs = meta.get("inputs")
    declared = [{"name": v.name, "shape": [dim_json(d) for d in v.shape], "dtype": v.dtype} for v in program.inputs]
    if inputs != declared:
        raise BundleError(f"{source}: inputs {inputs!r} do not match program.json's {declared!r}")


def bind_weights(program: Program, tensors: Mapping[str, np.ndarray], source: Path | str) -> dict[str, np.ndarray]:
    """Weights by program value name, checking every declared shape and dtype."""
    out = {}
    for w in program.weights:
        if w.key not in tensors:
            raise BundleError(f"{source}: tensor {w.key!r} is missing (the program needs it as {w.name})")
        arr = tensors[w.key]
        if dtypes.from_numpy(arr.dtype) != w.dtype or tuple(arr.shape) != w.shape:
            raise BundleError(
                f"{source}: tensor {w.key!r} is {dtypes.from_numpy(arr.dtype)}{list(arr.shape)}, "
                f"the program declares {w.dtype}{list(w.shape)}"
            )
        out[w.name] = arr
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


__all__ = ["Model", "RlxError", "load", "unflatten"]
