"""Runs a Program as one XLA computation: every Call is traced through its JAX kernel into a single
``jax.jit`` function of (weights, inputs), compiled once per input-shape binding.

Weights go to the device once and are passed as arguments (closing over them would bake every
weight into the compiled program as a constant: slow to compile, twice the memory). Dynamic programs
are specialised per binding of their shape symbols by ``rlx.runtime.model.Model``, which keeps the
compiled executors in its LRU cache; a ``JaxEngine`` counts the compilations.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlx.errors import RlxError, summary
from rlx.ir import dtypes
from rlx.ir.program import Program, Ref, resolve_operand
from rlx.kernels.jax.coverage import check_coverage
from rlx.kernels.jax.kernels import KERNELS, x64


class JaxEngine:
    """A program's weights on the JAX device, shared by the compiled executor of every binding."""

    name = "jax"

    def __init__(self, program: Program, weights: Mapping[str, np.ndarray]) -> None:
        check_coverage(program)
        self._source = program
        with x64():  # keeps int64/float64 weights 64-bit
            self.weights = {w.name: jax.device_put(np.asarray(weights[w.name])) for w in program.weights}
        self.compilations = 0
        self._lock = threading.Lock()

    @property
    def source(self) -> Program:
        return self._source

    def compile(self, program: Program) -> JaxExecutor:
        """One XLA compilation of the whole (specialised) program."""
        executor = JaxExecutor(program, self.weights)
        with self._lock:
            self.compilations += 1
        return executor


class JaxExecutor:
    """One static-shaped Program compiled by XLA, ready to run many times."""

    def __init__(self, program: Program, weights: Mapping[str, Any]) -> None:
        self.program = program
        self._weights = [weights[w.name] for w in program.weights]
        names = [w.name for w in program.weights] + [v.name for v in program.inputs]

        def forward(weight_args: list[Any], input_args: list[Any]) -> list[Any]:
            env: dict[str, Any] = dict(zip(names, [*weight_args, *input_args]))

            for ins in program.instrs:
                label = f"{ins.result} = {ins.call.op} [{ins.note or ins.node}]"
                call = ins.call
                try:
                    out = KERNELS[call.op](
                        call, *[resolve_operand(getattr(call, f), env) for f in call.operand_fields()]
                    )
                except RlxError:
                    raise
                except Exception as e:  # a kernel failure is reported with the instruction
                    raise RlxError(f"runtime error in {label}: {summary(e)}") from e
                out = jnp.asarray(out)
                want = dtypes.to_numpy(ins.dtype)
                if out.dtype != want:
                    out = out.astype(want)
                if out.shape != tuple(ins.shape):
                    raise RlxError(
                        f"runtime error in {label}: produced shape {list(out.shape)}, program declares {list(ins.shape)}"
                    )
                env[ins.result] = out
            return [env[o.name] for o in program.outputs if isinstance(o, Ref)]

        inputs = [jax.ShapeDtypeStruct(tuple(v.shape), dtypes.to_numpy(v.dtype)) for v in program.inputs]
        with x64():
            try:
                self._compiled = jax.jit(forward).lower(self._weights, inputs).compile()
            except RlxError:
                raise
            except Exception as e:
                raise RlxError(f"the JAX engine could not compile {program.name}: {summary(e)}") from e
        self._outputs = [
            None if isinstance(o, Ref) else np.asarray(o.value, dtypes.to_numpy(o.dtype)) for o in program.outputs
        ]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run on arrays already checked against the program's inputs (in order)."""
        with x64():
            results = iter(self._compiled(self._weights, list(inputs)))
        # Writable host copies, like the numpy engine's outputs (a device array's view is read-only).
        return [np.array(next(results)) if const is None else const.copy() for const in self._outputs]
