"""The numpy engine: the load-time passes (``rlx.runtime.numpy_engine.passes.optimize``), then a plan-compiled executor."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from rlx.ir.calls import Special
from rlx.ir.program import Program
from rlx.kernels.linalg import SCIPY_CALLS, scipy_lapack
from rlx.kernels.special import library_functions, scipy_special
from rlx.runtime.numpy_engine.executor import Executor
from rlx.runtime.numpy_engine.parallel import check_threads
from rlx.runtime.numpy_engine.passes import optimize as pipeline


class NumpyEngine:
    """A program's weights and passes. A dynamic program is optimised once as written — weights
    folded and packed once, shared by every binding — and then again per binding, once its shapes
    are known."""

    name = "numpy"

    def __init__(
        self,
        program: Program,
        weights: Mapping[str, np.ndarray],
        disable_passes: Iterable[str] | None = (),
        threads: int | None = None,
    ) -> None:
        # Large steps run as chunks on this many threads (``parallel``); 1: one thread, as before.
        self.threads = check_threads(threads)
        _load_libraries(program)
        self.disabled = (
            frozenset(pipeline.PASS_NAMES) if disable_passes is None else pipeline.check_names(disable_passes)
        )
        self._source, self.weights = program, weights
        if program.is_dynamic:
            self._source, self.weights = pipeline.optimize(program, weights, self.disabled)

    @property
    def source(self) -> Program:
        return self._source

    def compile(self, program: Program) -> Executor:
        return Executor(*pipeline.optimize(program, self.weights, self.disabled), threads=self.threads)


def _load_libraries(program: Program) -> None:
    """Import the optional libraries ``program``'s kernels need (scipy for special functions and
    for LAPACK's LDLᵀ) now, so a missing one fails at load with one line naming the extra, not
    halfway through a run."""
    fns = library_functions(ins.call.fn for ins in program.instrs if isinstance(ins.call, Special))
    if fns:
        scipy_special(*fns)
    if any(ins.call.op in SCIPY_CALLS for ins in program.instrs):
        scipy_lapack()
