"""What the engines that run rlx's ONNX emission (onnxruntime, OpenVINO) share: the checks made
before any graph is emitted, the host copy of the weights their sessions share, and the outputs
they hand back."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlx.errors import UsageError
from rlx.exporters.onnx import check_coverage
from rlx.exporters.onnx.registry import EmitError
from rlx.ir.program import Program, Ref, Value


class GraphEngine:
    """A program's host weights and settings, shared by the session or compiled model of every
    input-shape binding; ``compilations`` counts the graphs built (one per binding, or one in all).

    ``threads`` and ``precision`` are every engine's; each engine declares its own settings as the
    keyword parameters of ``configure``, which checks them before any graph is built."""

    name = ""

    def __init__(
        self,
        program: Program,
        weights: Mapping[str, np.ndarray],
        *,
        threads: int | None = None,
        precision: str = "f32",
        **options: Any,
    ) -> None:
        check_options(self.configure, self.name, options)
        self.configure(precision, **options)
        check_program(program, threads)
        self._source = program
        self.threads = threads
        self.precision = precision
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
    except EmitError as e:
        raise UsageError(f"{e}; run this model with engine='numpy'") from None
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


def finite(inputs: list[np.ndarray]) -> bool:
    """Whether every float input is free of NaN and inf (an int8 graph would quantize them into numbers)."""
    return all(np.isfinite(a).all() for a in inputs if a.dtype.kind == "f")


def first_line(e: BaseException) -> str:
    """The first line of an engine library's exception message (theirs run to many lines)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else ""
