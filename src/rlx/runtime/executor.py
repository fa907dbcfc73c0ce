"""Runs a Program on numpy arrays: operands resolved to slots once, values freed after last use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx.errors import BundleError, RlxError
from rlx.ir import dtypes
from rlx.ir.program import Instr, Lit, Program, Ref
from rlx.runtime.numpy_backend import KERNELS, Kernel


@dataclass(frozen=True)
class _Step:
    kernel: Kernel
    call: Any
    args: tuple[Any, ...]  # per operand field: slot index, constant array, None, or a tuple of those
    out: int
    dtype: np.dtype
    shape: tuple[int, ...]
    free: tuple[int, ...]  # slots whose last reader is this step
    label: str


_NONE = object()


class Executor:
    """A Program bound to its weights, ready to run many times."""

    def __init__(self, program: Program, weights: Mapping[str, np.ndarray], *, fold_constants: bool = True) -> None:
        self.program = program
        slots: dict[str, int] = {}
        for v in program.inputs:
            slots[v.name] = len(slots)
        for w in program.weights:
            slots[w.name] = len(slots)
        for ins in program.instrs:
            if ins.result in slots:
                raise BundleError(f"program.json: value {ins.result!r} is defined twice")
            slots[ins.result] = len(slots)
        self._n_slots = len(slots)
        self._input_slots = [slots[v.name] for v in program.inputs]
        self._weights = [(slots[w.name], weights[w.name]) for w in program.weights]
        pinned = {slots[w.name] for w in program.weights} | {
            slots[o.name] for o in program.outputs if isinstance(o, Ref)
        }
        last_use: dict[int, int] = {}
        for k, ins in enumerate(program.instrs):
            for r in ins.call.refs():
                if r.name not in slots:
                    raise BundleError(f"program.json: instruction {ins.result!r} reads undefined value {r.name!r}")
                last_use[slots[r.name]] = k
        frees: dict[int, list[int]] = {}
        for slot, k in last_use.items():
            if slot not in pinned:
                frees.setdefault(k, []).append(slot)

        def resolve(v: Any) -> Any:
            if isinstance(v, Ref):
                return slots[v.name]
            if isinstance(v, Lit):
                return _Const(np.asarray(v.value, dtype=dtypes.to_numpy(v.dtype)))
            if isinstance(v, tuple):
                return tuple(resolve(x) for x in v)
            return None

        self._steps = []
        for k, ins in enumerate(program.instrs):
            kern = KERNELS.get(type(ins.call))
            if kern is None:
                raise BundleError(f"program.json: the numpy backend has no kernel for {ins.call.op}")
            args = tuple(resolve(getattr(ins.call, f)) for f in ins.call.operand_fields())
            self._steps.append(
                _Step(
                    kern,
                    ins.call,
                    args,
                    slots[ins.result],
                    dtypes.to_numpy(ins.dtype),
                    ins.shape,
                    tuple(frees.get(k, ())),
                    f"{ins.result} = {ins.call.op} [{ins.note or ins.node}]",
                )  # fmt: skip
            )
        self._outputs = [
            slots[o.name] if isinstance(o, Ref) else _Const(np.asarray(o.value, dtypes.to_numpy(o.dtype)))
            for o in program.outputs
        ]
        if fold_constants:
            self._fold_constants()

    @property
    def n_steps(self) -> int:
        return len(self._steps)

    def _fold_constants(self) -> None:
        """Run once, now, every step that reads only weights and constants (weight transposes and
        casts, masks built from arange, …); their results join the weights."""
        known = dict(self._weights)
        kept = []
        with np.errstate(all="ignore"):
            for step in self._steps:
                if not _slots(step.args) <= known.keys():
                    kept.append(step)
                    continue
                try:
                    out = step.kernel(step.call, *[_get_const(a, known) for a in step.args])
                except Exception:  # let it fail at run time, with the usual error
                    kept.append(step)
                    continue
                known[step.out] = np.asarray(out).astype(step.dtype, copy=False)
        self._weights = list(known.items())
        self._steps = kept

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run on arrays already checked against the program's inputs (in order)."""
        env: list[Any] = [None] * self._n_slots
        for slot, arr in zip(self._input_slots, inputs):
            env[slot] = arr
        for slot, arr in self._weights:
            env[slot] = arr

        def get(a: Any) -> Any:
            if type(a) is int:
                return env[a]
            if a is None:
                return None
            if isinstance(a, _Const):
                return a.array
            return [get(x) for x in a]

        with np.errstate(all="ignore"):  # inf/NaN are values here, as in PyTorch, not warnings
            for step in self._steps:
                try:
                    out = step.kernel(step.call, *[get(a) for a in step.args])
                except RlxError:
                    raise
                except Exception as e:  # a kernel failure is reported with the instruction
                    raise RlxError(f"runtime error in {step.label}: {type(e).__name__}: {e}") from e
                if out.dtype != step.dtype:
                    out = out.astype(step.dtype)
                if out.shape != step.shape:
                    raise RlxError(
                        f"runtime error in {step.label}: produced shape {list(out.shape)}, "
                        f"program declares {list(step.shape)}"
                    )
                env[step.out] = out
                for slot in step.free:
                    env[slot] = None
        return [np.asarray(get(o)) if isinstance(o, _Const) else env[o] for o in self._outputs]


@dataclass(frozen=True)
class _Const:
    array: np.ndarray


def _slots(args: Any) -> set[int]:
    if type(args) is int:
        return {args}
    if isinstance(args, tuple):
        return set().union(*(_slots(a) for a in args)) if args else set()
    return set()


def _get_const(a: Any, known: dict[int, np.ndarray]) -> Any:
    if type(a) is int:
        return known[a]
    if a is None:
        return None
    if isinstance(a, _Const):
        return a.array
    return [_get_const(x, known) for x in a]


def _resolve(v: Any, env: dict[str, np.ndarray]) -> Any:
    if isinstance(v, Ref):
        return env[v.name]
    if isinstance(v, Lit):
        return np.asarray(v.value, dtype=dtypes.to_numpy(v.dtype))
    if isinstance(v, tuple):
        return [_resolve(x, env) for x in v]
    return None


def run_instructions(instrs: Iterable[Instr], env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run instructions one by one on a value environment, keeping every result.

    The slow, transparent path used by the parity debugger (a plain dict, nothing freed); the
    ``Executor`` is the fast one. Both call the same kernels.
    """
    with np.errstate(all="ignore"):
        for ins in instrs:
            kern = KERNELS.get(type(ins.call))
            if kern is None:
                raise BundleError(f"program.json: the numpy backend has no kernel for {ins.call.op}")
            try:
                out = kern(ins.call, *[_resolve(getattr(ins.call, f), env) for f in ins.call.operand_fields()])
            except KeyError as e:
                raise RlxError(f"{ins.result} = {ins.call.op}: operand {e} has no value") from None
            except Exception as e:
                raise RlxError(f"runtime error in {ins.result} = {ins.call.op} [{ins.note}]: {type(e).__name__}: {e}") from e
            env[ins.result] = np.asarray(out).astype(dtypes.to_numpy(ins.dtype), copy=False)
    return env
