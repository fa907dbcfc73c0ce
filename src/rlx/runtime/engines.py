"""What a Model needs of an engine, and the engines there are.

An engine runs Programs with static shapes. ``Engine.source`` is the program that specialisations
start from (the numpy engine optimises a dynamic program once, as written, so its weights are
folded and packed once for every binding); ``Engine.compile`` turns one static program into an
``Executor``. The JAX and onnxruntime engines are imported only when asked for, so ``import rlx``
never needs jax or onnxruntime.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import numpy as np

from rlx.errors import UsageError
from rlx.ir.program import Program

ENGINES = ("numpy", "jax", "onnxruntime")


class Executor(Protocol):
    """One static-shaped Program, ready to run many times (from any number of threads)."""

    program: Program

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run on arrays already checked against the program's inputs (in order)."""
        ...


class Engine(Protocol):
    name: str

    @property
    def source(self) -> Program:
        """The program that input-shape specialisations are made from."""
        ...

    def compile(self, program: Program) -> Executor:
        """An executor of ``program`` (``source`` itself, or a specialisation of it)."""
        ...


def check_engine(name: str) -> None:
    """A known engine that can run here: UsageError otherwise (for jax, onnxruntime: how to install it)."""
    if name not in ENGINES:
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(ENGINES)}")
    if name == "jax":
        from rlx.runtime.jax_engine import require_jax

        require_jax()
    if name == "onnxruntime":
        from rlx.runtime.onnxruntime_engine import require_onnxruntime

        require_onnxruntime()


def numpy_pass_names() -> tuple[str, ...]:
    """The numpy engine's load-time passes, by name (what ``disable_passes`` may switch off)."""
    from rlx.runtime.numpy_engine.passes.optimize import PASS_NAMES

    return PASS_NAMES


def create_engine(
    name: str,
    program: Program,
    weights: Mapping[str, np.ndarray],
    disable_passes: Iterable[str] | None = None,
    threads: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> Engine:
    """The engine ``name`` for ``program`` and its weights. ``disable_passes``: the numpy engine's
    load-time passes to skip (``None``: all of them); ``threads``: onnxruntime's intra-op threads
    (``None``: its default, one per physical core), or the numpy engine's (``None``: two, one on a
    one-core machine; see ``rlx.runtime.numpy_engine.parallel``; the jax engine takes none); ``options``: the engine's own settings
    (onnxruntime: ``optimization``, ``pooling_nan``, ``contrib``; see ``OrtEngine``)."""
    check_engine(name)
    if name == "onnxruntime":
        from rlx.runtime.onnxruntime_engine.executor import OrtEngine

        return OrtEngine(program, weights, threads=threads, **dict(options or {}))
    if options:
        raise UsageError(f"the {name} engine takes no options, got {', '.join(sorted(options))}")
    if name == "jax":
        from rlx.runtime.jax_engine.executor import JaxEngine

        return JaxEngine(program, weights)
    from rlx.runtime.numpy_engine.engine import NumpyEngine

    return NumpyEngine(program, weights, disable_passes, threads)
