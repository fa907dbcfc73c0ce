"""Constant folding: instructions that read only weights and literals run once, at load.

Their results become weights of the rewritten Program (weight transposes and casts, reshaped conv
kernels, BatchNorm scales, masks built from ``arange``…), so a run never recomputes them. A
folded result is stored C-contiguous — the layout the kernels want, which is how a transposed
weight gets packed — except a broadcast view (``expand`` of a constant), which stays a view rather
than growing to its full size. A result much larger than what it is computed from (a big ``full``)
is left to run time, so folding never costs more memory than the run itself would.

Needs the weight arrays, so unlike the other passes it maps ``(Program, weights)`` to
``(Program, weights)``; it evaluates with the numpy kernels (passes run for the numpy engine).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from rlx.interpret import KernelLookup, run_instruction
from rlx.ir.program import Instr, Program, Weight, mentions_sym
from rlx.ir.symbolic import is_static

FOLDED_KEY = "rlx:folded:"  # the key of a folded weight: it lives in memory, never in a file
# A folded result may take this many bytes even when its inputs are smaller (a constant mask, an
# arange); beyond it, only results no larger than their inputs are kept.
MAX_GROWTH_BYTES = 16 * 2**20


def constant_folding(
    program: Program, weights: Mapping[str, np.ndarray], kernels: KernelLookup | None = None
) -> tuple[Program, dict[str, np.ndarray]]:
    """``kernels``: the table to compute with (default the shared numpy kernels; an engine that has
    Calls of its own, as the numpy engine's fused ones, passes its lookup)."""
    known = dict(weights)
    new_weights = list(program.weights)
    kept: list[Instr] = []
    with np.errstate(all="ignore"):
        for ins in program.instrs:
            value = _fold(ins, known, kernels)
            if value is None:
                kept.append(ins)
                continue
            known[ins.result] = value
            new_weights.append(Weight(ins.result, FOLDED_KEY + ins.result, tuple(value.shape), ins.dtype))
    if len(kept) == len(program.instrs):
        return program, known
    return dataclasses.replace(program, instrs=kept, weights=new_weights), known


def _fold(ins: Instr, known: Mapping[str, np.ndarray], kernels: KernelLookup | None) -> np.ndarray | None:
    refs = list(ins.call.refs())
    if any(r.name not in known for r in refs) or not is_static(ins.shape) or mentions_sym(ins.call):
        return None
    try:
        out = run_instruction(ins, known, kernels=kernels)
    except Exception:  # let it fail at run time, with the usual error
        return None
    if out.shape != tuple(ins.shape):
        return None
    inputs = sum(known[r.name].nbytes for r in refs)
    if out.nbytes > MAX_GROWTH_BYTES and out.nbytes > inputs and 0 not in out.strides:
        return None
    if 0 not in out.strides and not out.flags.c_contiguous:
        out = np.ascontiguousarray(out)
    if out.flags.writeable and any(np.may_share_memory(out, known[r.name]) for r in refs):
        out = out.view()
    out.flags.writeable = False  # shared by every run: no kernel may write into it
    return out
