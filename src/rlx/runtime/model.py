"""``rlx.load(bundle_dir)`` → a callable ``Model`` that runs with numpy only (or on another engine)."""

from __future__ import annotations

import functools
import math
import operator
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlx.deprecation import renamed
from rlx.errors import BundleError, InputError, RlxError, UsageError
from rlx.formats.bundle import read_bundle
from rlx.ir import dtypes
from rlx.ir.program import Program, Value, specialize
from rlx.ir.rng import DEFAULT_SEED, RNG_STATE, fork_state, seed_state
from rlx.ir.symbolic import static_shape
from rlx.runtime.binding import bind_symbols
from rlx.runtime.engines import Executor, create_engine


class Model:
    """A loaded model. ``model(*arrays, **named)`` returns outputs in the model's structure.

    A model whose forward updates buffers in place (a KV cache) carries that state: every call
    reads the current values and stores the new ones (``state``; ``reset()`` restores the values
    it was exported with). The state belongs to this Model object, so give each concurrent
    conversation or stream its own: ``fork()`` makes one that shares the weights and compiled
    plans (cheap) and starts from the initial state. Models without state run from any number of
    threads at once.

    Random ops (``torch.randn``, dropout in training mode …) draw from the model's generator, whose
    state is one more state buffer (``rlx.ir.rng``): ``seed`` sets where it starts (equal seeds give
    equal draws, on every engine), ``reset()`` replays the draws from there, and each ``fork()``
    draws a stream of its own (reproducible too: the k-th fork of a model loaded with a seed always
    gets the same one).
    """

    def __init__(
        self,
        program: Program,
        weights: Mapping[str, np.ndarray],
        meta: dict[str, Any] | None = None,
        *,
        optimize: bool = True,
        engine: str = "numpy",
        disable_passes: Iterable[str] = (),
        threads: int | None = None,
        engine_options: Mapping[str, Any] | None = None,
        seed: int = DEFAULT_SEED,
        precision: str = "f32",
        backend: str | None = None,  # deprecated spelling of engine
    ) -> None:
        engine = renamed("rlx.Model", "engine", engine, "numpy", "backend", backend)
        self.program = program
        initial = weights
        self.meta = meta or {}
        self.name = program.name
        self.inputs: list[Value] = program.user_inputs
        self.output_tree = program.output_tree
        check_tree(self.output_tree, program.n_user_outputs, "output_tree")
        self._initial_state = {s.name: initial[s.name] for s in program.state}
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise UsageError(f"seed must be an int, found {type(seed).__name__}")
        if RNG_STATE in self._initial_state:
            self._initial_state[RNG_STATE] = seed_state(seed)
        self.seed = seed
        self._forks = 0
        self._state = {k: np.array(v) for k, v in self._initial_state.items()}
        # State buffers' initial values come with the weights; the engine must see them only as
        # the inputs they are (constant folding would bake them in).
        carried = {s.name for s in program.state}
        if carried:
            weights = {k: v for k, v in weights.items() if k not in carried}
        self._weights = weights
        self.precision = precision
        self.tuning: str = ""  # set by ``load``: the tuning.json it followed, or why it ignored one
        # set by ``load``: why a tuning.json beside the bundle was not followed ("" when it was, or
        # when there is none): the one line `rlx run` and `rlx batch` print on stderr
        self.tuning_fallback: str = ""
        # The numpy engine's passes (rlx.runtime.numpy_engine.passes.optimize) run unless `optimize=False` (`rlx run --no-opt`).
        self.engine = create_engine(
            engine, program, weights, disable_passes if optimize else None, threads, engine_options, precision
        )
        # Static programs have one executor; dynamic ones get one per binding of the symbols.
        self._static = None if program.is_dynamic else self._compile(program)
        self._by_binding: OrderedDict[tuple[tuple[str, int], ...], Executor] = OrderedDict()
        self._lock = threading.Lock()  # guards the plan cache; running a plan needs no lock
        # Per-call overhead matters on small models (an MLP runs in a few µs): a static model without
        # state takes C-contiguous numpy arrays of exactly its input dtypes and shapes on a short path.
        plain = self._static is not None and not program.state and not program.input_updates
        self._exact_inputs = [(dtypes.to_numpy(v.dtype), v.shape) for v in self.inputs] if plain else None
        self._one_input = self._exact_inputs[0] if self._exact_inputs and len(self._exact_inputs) == 1 else None
        self._run_static = self._static.run if self._static is not None else self.run_flat  # (only static ones take it)
        self._structured = structurer(self.output_tree)

    @property
    def backend(self) -> str:
        """Deprecated: the engine's name, ``model.engine.name``."""
        warnings.warn("Model.backend is deprecated; use model.engine.name", DeprecationWarning, stacklevel=2)
        return self.engine.name

    @property
    def weights(self) -> Mapping[str, np.ndarray]:
        """The weights by program value name (memory-mapped when loaded from a bundle)."""
        return self._weights

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.inputs]

    @property
    def state(self) -> dict[str, np.ndarray]:
        """The current value of every state buffer, by name (copies: writing them changes nothing)."""
        return {k: v.copy() for k, v in self._state.items()}

    def reset(self) -> None:
        """Put every state buffer back to the value it was exported with."""
        self._state = {k: np.array(v) for k, v in self._initial_state.items()}

    def fork(self) -> Model:
        """A Model with its own state (the initial values) sharing this one's weights, engine and plans;
        its random draws come from a stream of its own."""
        twin = object.__new__(Model)
        twin.__dict__.update(self.__dict__)
        with self._lock:
            self._forks += 1
            k = self._forks
        twin._forks = 0
        twin._initial_state = dict(self._initial_state)
        if RNG_STATE in twin._initial_state:
            twin._initial_state[RNG_STATE] = fork_state(self._initial_state[RNG_STATE], k)
        twin.reset()
        return twin

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        one = self._one_input
        if one is not None and len(args) == 1 and not kwargs:  # (most models: one input, unrolled)
            a = args[0]
            if type(a) is np.ndarray and a.dtype is one[0] and a.shape == one[1] and a.flags.c_contiguous:
                return self._structured(self._run_static([a]))
        exact = self._exact_inputs
        if exact is not None and not kwargs and len(args) == len(exact):
            for a, (dtype, shape) in zip(args, exact):
                # (`is`: numpy's dtypes of one kind are one object; any other is checked the long way)
                if type(a) is not np.ndarray or a.dtype is not dtype or a.shape != shape or not a.flags.c_contiguous:
                    break
            else:  # every input as check_input would return it
                return self._structured(self._run_static(list(args)))
        return unflatten(self.output_tree, self.run_flat(self.bind(args, kwargs)))

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[np.ndarray]:
        """Match positional and named arguments to the program inputs, checking each one."""
        if not kwargs and len(args) == len(self.inputs):  # all positional: the common, short path
            return [check_input(v, a) for v, a in zip(self.inputs, args)]
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
        """Run on inputs in program order (as ``bind`` returns them); a model with state reads and
        updates it, and returns only its own outputs."""
        program = self.program
        if not program.state and not program.input_updates:
            return self.executor_for(inputs).run(inputs)
        carried = iter(inputs)
        full = [self._state[v.name] if v.name in self._state else next(carried) for v in program.inputs]
        outputs = self.executor_for(full).run(full)
        for s in program.state:
            self._state[s.name] = outputs[s.output]
        if program.input_updates:
            write_back(program, full, outputs)
        return outputs[: program.n_user_outputs]

    def _compile(self, program: Program) -> Executor:
        # (onnxruntime refuses to load a graph without outputs: OpInfo's broadcast_shapes of two 0-d shapes)
        return self.engine.compile(program) if program.outputs else NoOutputs(program)

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
        executor = self._compile(specialize(self.engine.source, bindings))
        with self._lock:
            self._by_binding[key] = executor
            if len(self._by_binding) > PLAN_CACHE_SIZE:
                self._by_binding.popitem(last=False)
        return executor


class NoOutputs:
    """The executor of a program without outputs: nothing to compute, on any engine."""

    def __init__(self, program: Program) -> None:
        self.program = program

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return []


def write_back(program: Program, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """Inputs the model updates in place receive their new values, as the PyTorch tensors would
    (the caller sees it when it passed a numpy array of the input's dtype, which is used as is)."""
    index = {v.name: k for k, v in enumerate(program.inputs)}
    for name, k in program.input_updates.items():
        target = inputs[index[name]]
        if not target.flags.writeable:
            raise InputError(f"input {name!r} is updated in place by the model, but the array given is read-only")
        np.copyto(target, outputs[k])


PLAN_CACHE_SIZE = 16  # evaluated plans kept per model, least recently used first out


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
    if arr.shape != spec.shape and (  # (equal: a static shape matched, the common case, checked first)
        arr.ndim != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, arr.shape))
    ):
        expected = "[" + ", ".join(str(d) for d in spec.shape) + "]"
        raise InputError(f"input {spec.name!r} has shape {list(arr.shape)}, expected {expected}")
    # One memory layout for every caller, so equal values always give bit-identical outputs.
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def check_tree(tree: Any, n_outputs: int, where: str) -> None:
    """Validate an output structure before it is trusted: every leaf names an existing output."""
    _check_node(tree, n_outputs, where, 0)


def _children(kind: str, v: Any, at: str) -> list[tuple[str, Any]]:
    """The sub-structures of one node (``at`` names it in errors), after checking its form."""
    if kind in ("tuple", "list"):
        if not isinstance(v, list):
            raise BundleError(f"{at}.{kind}: expected a list")
        return [(f".{kind}[{k}]", item) for k, item in enumerate(v)]
    if not isinstance(v, list) or not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], (str, int)) for p in v
    ):
        raise BundleError(f"{at}.dict: expected a list of [key, value] pairs")
    return [(f".dict[{k}]", item) for k, (_key, item) in enumerate(v)]


def _check_node(t: Any, n_outputs: int, at: str, depth: int) -> None:
    if depth > 100:
        raise BundleError(f"{at}: output structure nested more than 100 levels")
    if t is None:
        return
    if not isinstance(t, dict) or len(t) != 1:
        raise BundleError(f"{at}: expected one of out/const/tuple/list/dict, found {t!r}"[:300])
    ((kind, v),) = t.items()
    if kind == "out":
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n_outputs:
            raise BundleError(f"{at}.out: {v!r} is not an output index below {n_outputs}")
    elif kind in ("tuple", "list", "dict"):
        for path, item in _children(kind, v, at):
            _check_node(item, n_outputs, at + path, depth + 1)
    elif kind != "const":
        raise BundleError(f"{at}: unknown output-structure node {kind!r}")


def structurer(tree: Any) -> Callable[[list[Any]], Any]:
    """``unflatten`` with ``tree`` bound; for the common one-tensor output a plain index, and for a
    tuple of two or more tensors one ``itemgetter`` (it returns the tuple; half a microsecond a call
    less than walking the tree, a model's own per-call overhead on onnxruntime at these sizes)."""
    if tree is not None and "out" in tree:
        return operator.itemgetter(tree["out"])
    leaves = tree.get("tuple", ()) if tree is not None else ()
    if len(leaves) >= 2 and all(set(leaf) == {"out"} for leaf in leaves):
        return operator.itemgetter(*(leaf["out"] for leaf in leaves))
    return functools.partial(unflatten, tree)


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


def physical_memory() -> int | None:
    """Bytes of RAM on this machine (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(program: Program, where: Path) -> None:
    """Refuse, before any allocation, a program with a value of known size larger than this
    machine's memory: a damaged or hostile program.json can declare one that still passes
    validation (a ``Full`` of 2**34 elements), and allocating it would not fail cleanly but get
    the process killed once the pages are touched."""
    limit = physical_memory()
    if limit is None:
        return
    for v in program.values().values():
        shape = static_shape(v.shape)
        if shape is None:
            continue  # sized at run time, when the inputs bind its symbols
        nbytes = math.prod(shape) * dtypes.to_numpy(v.dtype).itemsize
        if nbytes > limit:
            raise BundleError(
                f"{where}: value {v.name!r} ({v.dtype}{list(v.shape)}) needs {nbytes / 2**30:.1f} GiB, more than "
                f"this machine's {limit / 2**30:.1f} GiB of memory; the program is damaged or not for this machine"
            )


def load(
    bundle_dir: str | Path,
    *,
    optimize: bool = True,
    engine: str | None = None,
    disable_passes: Iterable[str] = (),
    threads: int | None = None,
    engine_options: Mapping[str, Any] | None = None,
    seed: int = DEFAULT_SEED,
    precision: str | None = None,
    backend: str | None = None,
) -> Model:
    """Load a bundle directory (``program.json`` + ``weights.safetensors`` + ``meta.json``).

    Nothing in a bundle is executed, nothing outside the directory is read (a file that is a
    symlink leading out of it is refused), and every size, shape and dtype is checked before use.
    ``engine="jax"`` runs the program as one XLA computation per input-shape binding (needs jax);
    ``engine="onnxruntime"`` as one onnxruntime session per binding (needs ``rlx[onnxruntime]``),
    with ``threads`` intra-op threads (default: onnxruntime's, one per physical core); the numpy
    engine splits its large elementwise, norm, softmax, depthwise-conv and pooling steps over
    ``threads`` threads (default 1, every step on the calling thread: splitting is opt-in, see
    ``rlx.runtime.numpy_engine.parallel.default_threads``);
    ``engine_options`` are the engine's own settings (``rlx.runtime.onnxruntime_engine.executor.OrtEngine``);
    ``seed`` starts the generator of a model with random ops (see ``Model``);
    ``engine="openvino"`` runs it on OpenVINO (needs ``rlx[openvino]``). ``backend=`` is the
    deprecated spelling of ``engine=``.

    ``precision``: ``"f32"`` (default), ``"bf16"`` / ``"f16"`` (openvino), ``"int8"`` (onnxruntime,
    dynamic) or ``"int8-static"`` (onnxruntime or openvino, with the calibration ``rlx tune`` stored in the bundle),
    refused where the engine or this CPU lacks it. Without ``engine``, the bundle's ``tuning.json``
    (``rlx tune``) picks the engine, precision and threads when it matches this machine and its
    engine is installed (``model.tuning`` says which file, or why it was ignored); otherwise the
    numpy engine runs. An explicit ``engine`` always wins.
    """
    engine = renamed("rlx.load", "engine", engine, None, "backend", backend)
    program, weights, meta = read_bundle(bundle_dir)
    check_memory(program, Path(bundle_dir))
    note = fallback = ""
    if engine is None:
        from rlx.runtime.tuning import tuned_choice

        choice, note = tuned_choice(bundle_dir)
        fallback = note
        if choice is not None and precision in (None, choice.precision):
            engine, precision = choice.engine, choice.precision
            threads = choice.threads if threads is None else threads
            engine_options = {**choice.options, **(engine_options or {})}  # (the user's own options win)
            note = f"tuned by {choice.path}"
        elif choice is not None:
            note = f"{choice.path} not used: it chose {choice.precision}, precision={precision!r} was asked for"
    if precision == "int8-static":
        from rlx.runtime.tuning import calibration_options

        engine_options = calibration_options(bundle_dir, precision, dict(engine_options or {}))
    model = Model(
        program,
        weights,
        meta,
        optimize=optimize,
        engine=engine or "numpy",
        disable_passes=disable_passes,
        threads=threads,
        engine_options=engine_options,
        seed=seed,
        precision=precision or "f32",
    )
    model.tuning, model.tuning_fallback = note, fallback
    return model


__all__ = ["Model", "RlxError", "load", "unflatten"]
