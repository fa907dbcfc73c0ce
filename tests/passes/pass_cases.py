"""Shared fixtures for the pass tests: programs lowered from torch once per session, and a runner
that checks a (possibly rewritten) program against PyTorch's own output."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlx.app.convert import build_program
from rlx.formats.bundle import bind_weights
from rlx.frontends.torch import capture
from rlx.frontends.torch.tensors import tensor_to_numpy
from rlx.ir.program import Program
from rlx.ir.validate import validate
from rlx.runtime.model import Model
from rlx.runtime.numpy_engine.executor import Executor
from rlx.runtime.numpy_engine.passes import optimize as pipeline

from helpers import as_module, assert_arrays_match, load_example


@dataclass(frozen=True)
class Case:
    """A lowered program with its weights, inputs and PyTorch's outputs."""

    program: Program
    weights: dict[str, np.ndarray]
    inputs: tuple[np.ndarray, ...]
    want: tuple[np.ndarray, ...]

    def model(self, **kwargs: Any) -> Model:
        return Model(self.program, self.weights, **kwargs)

    def check(self, got: Any, what: str = "output", rtol: float = 1e-4, atol: float = 1e-5) -> None:
        """Values, shapes, dtypes and the NaN/inf pattern against PyTorch (the examples' tolerance:
        errors of a deep float32 model accumulate past a single op's)."""
        got = got if isinstance(got, (tuple, list)) else (got,)
        assert len(got) == len(self.want)
        for k, (g, w) in enumerate(zip(got, self.want)):
            assert_arrays_match(np.asarray(g), w, f"{what} {k}", rtol, atol)

    def run_program(self, program: Program, weights: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """Run a rewritten program as it is (no further passes), after verifying it."""
        validate(program, "rewritten program")
        return Executor(program, weights if weights is not None else self.weights).run(list(self.inputs))


def lower(fn: Callable[..., Any] | torch.nn.Module, inputs: Sequence[torch.Tensor], level: str = "high") -> Case:
    module = as_module(fn).eval()
    with torch.no_grad():
        want = module(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    exported = capture(module, tuple(inputs), decomposition=level)
    program = build_program(exported.ir)
    weights = bind_weights(program, exported.weights, "weights")
    return Case(program, weights, tuple(tensor_to_numpy(t) for t in inputs), tuple(tensor_to_numpy(t) for t in want))


@functools.cache
def example(name: str, level: str = "high") -> Case:
    model, inputs = load_example(name).get_model()
    return lower(model, inputs, level)


def ops(program: Program) -> dict[str, int]:
    return program.call_histogram()


def only(*names: str) -> Iterable[str]:
    """The passes to disable so that only ``names`` run."""
    return [p for p in pipeline.PASS_NAMES if p not in names]
