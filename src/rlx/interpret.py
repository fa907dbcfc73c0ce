"""The reference interpreter: a Program run instruction by instruction on the shared numpy kernels.

Slow and transparent — a plain dict of values, nothing freed, no plan — and the one evaluator the
layers above the kernels share: constant folding (``rlx.passes.fold``), the exporters' load-time
evaluation of constants, the ONNX front-end's folding of shape subgraphs, and both parity
debuggers. The numpy engine (``rlx.runtime.numpy_engine``) is the fast path over the same kernels;
it binds data-dependent sizes with ``bind_sizes`` from here, so both agree on what a size means.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rlx.errors import BundleError, RlxError
from rlx.ir import dtypes
from rlx.ir.program import Instr, Program, resolve_operand, subst_call
from rlx.ir.symbolic import Sym, eval_dim, is_static, partial_dim
from rlx.kernels.numpy.kernels import KERNELS
from rlx.kernels.registry import Kernel

KernelLookup = Callable[[str], "Kernel | None"]


def bind_sizes(declared: tuple[Any, ...], actual: tuple[int, ...], sizes: dict[str, int], label: str) -> None:
    """Check a result's shape against its declaration, binding each data-dependent size it defines."""
    if len(declared) != len(actual):
        raise RlxError(f"runtime error in {label}: produced rank {len(actual)}, program declares {len(declared)}")
    for d, n in zip(declared, actual):
        if isinstance(d, Sym) and d.expr.isidentifier() and d.expr not in sizes:
            sizes[d.expr] = int(n)
            continue
        want = d if isinstance(d, int) else eval_dim(d, sizes)
        if want != n:
            shown = [str(x) for x in declared]
            raise RlxError(f"runtime error in {label}: produced shape {list(actual)}, program declares {shown}")


def run_instruction(
    ins: Instr,
    env: Mapping[str, np.ndarray],
    sizes: dict[str, int] | None = None,
    kernels: KernelLookup | None = None,
) -> np.ndarray:
    """One instruction through its kernel, the result in its declared dtype. ``sizes`` holds the
    data-dependent sizes bound so far (and receives the ones this result defines); ``kernels``
    replaces the shared table (the numpy engine passes its own, which knows its fused Calls)."""
    kern = (kernels or KERNELS.get)(ins.call.op)
    if kern is None:
        raise BundleError(f"program.json: no numpy kernel for {ins.call.op} (instruction {ins.result})")
    call = ins.call if sizes is None else subst_call(ins.call, sizes)
    out = kern(call, *[resolve_operand(getattr(call, f), env) for f in call.operand_fields()])
    out = np.asarray(out).astype(dtypes.to_numpy(ins.dtype), copy=False)
    if sizes is not None and not is_static(ins.shape):
        bind_sizes(tuple(partial_dim(d, sizes) for d in ins.shape), out.shape, sizes, ins.result)
    return out


def run_instructions(
    instrs: Iterable[Instr], env: dict[str, np.ndarray], sizes: dict[str, int] | None = None
) -> dict[str, np.ndarray]:
    """Run instructions one by one on a value environment, keeping every result (errors name the
    instruction and its provenance note)."""
    sizes = {} if sizes is None else sizes  # data-dependent sizes, bound as they are produced
    with np.errstate(all="ignore"):
        for ins in instrs:
            try:
                env[ins.result] = run_instruction(ins, env, sizes)
            except KeyError as e:
                raise RlxError(f"{ins.result} = {ins.call.op}: operand {e} has no value") from None
            except RlxError:
                raise
            except Exception as e:
                raise RlxError(
                    f"runtime error in {ins.result} = {ins.call.op} [{ins.note}]: {type(e).__name__}: {e}"
                ) from e
    return env


def evaluate(program: Program, weights: Mapping[str, np.ndarray], inputs: Sequence[np.ndarray] = ()) -> list[Any]:
    """A whole program's outputs: ``weights`` by weight key, ``inputs`` in the program's input order."""
    env: dict[str, np.ndarray] = {w.name: weights[w.key] for w in program.weights}
    env.update({i.name: np.asarray(v) for i, v in zip(program.inputs, inputs)})
    run_instructions(program.instrs, env)
    return [resolve_operand(o, env) for o in program.outputs]


__all__ = ["bind_sizes", "evaluate", "run_instruction", "run_instructions"]
