"""What the engines that run rlx's ONNX emission (onnxruntime, OpenVINO) share: the checks made
before any graph is emitted, the host copy of the weights their sessions share, and the outputs
they hand back."""

from __future__ import annotations

import inspect
import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rlx.errors import UsageError
from rlx.exporters.onnx import FINITE_INPUTS, UNORDERED_TIES, WEIGHT_SLICES, check_coverage
from rlx.exporters.onnx.registry import EmitError
from rlx.ir import dtypes
from rlx.ir.calls import Call
from rlx.ir.program import Program, Ref, Value


class GraphEngine:
    """A program's host weights and settings, shared by the session or compiled model of every
    input-shape binding; ``compilations`` counts the graphs built (one per binding, or one in all).

    ``threads`` and ``precision`` are every engine's; each engine declares its own settings as the
    keyword parameters of ``configure``, which checks them before any graph is built."""

    name = ""
    # Calls this engine computes wrongly or cannot read where the ONNX emitter writes them → why (a
    # program using one is refused when it loads, with ``instead``).
    refused_calls: Mapping[type[Call], str] = {}
    instead = ""

    def __init__(
        self,
        program: Program,
        weights: Mapping[str, np.ndarray],
        *,
        threads: int | None = None,
        precision: str = "f32",
        numpy_engine: Callable[[], Any] | None = None,
        **options: Any,
    ) -> None:
        check_options(self.configure, self.name, options)
        self.configure(precision, **options)
        check_program(program, threads)
        refused = sorted({why for ins in program.instrs if (why := self.refused_calls.get(type(ins.call)))})
        if refused:
            raise UsageError(f"{program.name} {'; '.join(refused)}; {self.instead}")
        self._source = program
        self.threads = threads
        self.precision = precision
        # Makes the numpy engine of the program, for what this engine cannot compute exactly (the
        # engine table gives it; OpenVINO runs the calls whose inputs hold NaN or inf there).
        self.numpy_engine = numpy_engine
        self._arrays = host_weights(program, weights)
        self.compilations = 0
        self._lock = threading.Lock()  # guards the compilation count

    def configure(self, precision: str) -> None:
        """Check and keep the engine's own settings (its keyword parameters) at ``precision``."""
        raise NotImplementedError

    @property
    def source(self) -> Program:
        return self._source

    def count_compilation(self) -> None:
        with self._lock:
            self.compilations += 1


def check_options(configure: Callable[..., None], engine: str, options: Mapping[str, Any]) -> None:
    """Refuse, in one line, an option the engine's ``configure`` does not take."""
    known = [n for n, p in inspect.signature(configure).parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(
            f"unknown {engine} engine option(s) {', '.join(unknown)}; it takes {', '.join(known) or 'none'}"
        )


def check_program(program: Program, threads: int | None) -> None:
    """Refuse a program with a Call that has no ONNX form, and a thread count below one."""
    try:
        check_coverage(program)
    except EmitError as e:  # (its message names the engines that run the program)
        raise UsageError(str(e)) from None
    if threads is not None and threads < 1:
        raise UsageError(f"threads must be at least 1, got {threads}")


def host_weights(program: Program, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The program's weights as C-contiguous arrays (no copy when they are already): the one host
    copy that the session or compiled model of every input-shape binding points at."""
    return {w.name: np.asarray(weights[w.name], order="C") for w in program.weights}


def output_values(program: Program) -> list[Value]:
    """The type of each program output; a literal output is a 0-d value of its dtype."""
    values = program.values()
    return [values[o.name] if isinstance(o, Ref) else Value("", (), o.dtype) for o in program.outputs]


def finite(inputs: Sequence[np.ndarray]) -> bool:
    """Whether every one of ``inputs`` is free of NaN and inf (``all_finite`` of each)."""
    return all(all_finite(a) for a in inputs)


_FAST_FINITE = (np.dtype(np.float32), np.dtype(np.float64))
_BF16 = dtypes.to_numpy("bf16")


def all_finite(arr: np.ndarray) -> bool:
    """Whether ``arr`` holds no NaN or inf (True for integers and booleans). float32/64 first take
    one BLAS dot product of the array with itself, about half the time of ``isfinite().all()`` on
    an image: NaN and inf survive it, and only squares past the float range (|x| > 1e19 in
    float32) fall through to the exact test."""
    if arr.dtype in _FAST_FINITE:
        if math.isfinite(np.vdot(arr, arr)):  # (vdot: no overflow warning, unlike dot and matmul)
            return True
    elif arr.dtype.kind != "f" and arr.dtype != _BF16:
        return True
    return bool(np.isfinite(arr).all())


def finite_inputs(model: Any, program: Program) -> tuple[int, ...]:
    """The positions of the program inputs that the emitted ``model`` (an ``onnx.ModelProto``)
    wants checked for NaN and inf before each run (``rlx.exporters.onnx.FINITE_INPUTS``): a
    max pooling whose input only they can make NaN runs plainly, and a run whose input is not
    finite goes to the exact graph instead."""
    position = {v.name: k for k, v in enumerate(program.inputs)}
    return tuple(sorted(position[n] for n in _listed(model, FINITE_INPUTS)))


def unordered_ties(model: Any) -> frozenset[str]:
    """The TopK index outputs of the emitted ``model`` whose equal values may come in any order
    (``rlx.exporters.onnx.UNORDERED_TIES``)."""
    return frozenset(_listed(model, UNORDERED_TIES))


def with_weight_slices(model: Any, arrays: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
    """``arrays`` and the initializers the emitted ``model`` reads as one index of a weight's first
    axis (``rlx.exporters.onnx.WEIGHT_SLICES``: an expert's matrix), each a view of that weight:
    a memory-mapped weight's slices lie in its file too. ``arrays`` itself when there are none."""
    listed: dict[str, list[Any]] = _metadata(model, WEIGHT_SLICES, {})
    if not listed:
        return arrays
    return {**arrays, **{name: arrays[weight][index] for name, (weight, index) in listed.items()}}


def _listed(model: Any, key: str) -> list[str]:
    """The names the emitter listed in ``model``'s metadata under ``key`` (as JSON)."""
    names: list[str] = _metadata(model, key, [])
    return names


def _metadata(model: Any, key: str, default: Any) -> Any:
    """The JSON value the emitter stored in ``model``'s metadata under ``key``, else ``default``."""
    return next((json.loads(p.value) for p in model.metadata_props if p.key == key), default)
