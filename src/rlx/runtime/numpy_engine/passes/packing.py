"""Weight packing: weights a kernel consumes transposed are arranged once, at load — without a copy.

``Linear(x, W, b)`` computes ``x @ W.T``: it becomes ``Gemm(x, Wt, b)`` where ``Wt`` is a new weight,
the transposed *view* of ``W`` — an ``[in, out]`` matrix in Fortran order, which BLAS multiplies by
with its transpose flag about as fast as a C-ordered copy (measured within noise from 1024×1024
up). A MatMul by a transposed weight (``addmm`` / ``mm`` of ``permute(W)`` at core level) reads the
same view in place of the Permute, and so does a GroupedMatMul by an MoE layer's experts stored
``[experts, out, in]`` (each expert's matrix then a transposed view). So a loaded model holds its large weights once: the views read
the memory-mapped file, and one ``Wt`` is shared by every Linear that reads ``W``. Weights up to
``COPY_MAX_BYTES`` (for experts: one expert's matrix) are still stored as C-contiguous copies,
where the copy is cheap and small GEMMs measurably faster (256×256 by 32 rows: ~50 µs packed, ~70 µs through the view). Convolution weights need none: the conv kernel multiplies ``W`` as
``[out, in·k]`` against an im2col matrix laid out ``[in·k, positions]``, the weight's own layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from rlx.ir import calls as C
from rlx.ir.program import Instr, Program, Ref, Weight
from rlx.passes.fold import FOLDED_KEY
from rlx.passes.rewrite import Names, use_counts
from rlx.runtime.numpy_engine.fused_calls import Gemm

_FLOATS = ("f32", "f64")
# A product by a transposed half-precision weight widens it per call anyway (numpy has no bf16
# GEMM): reading the view instead of a folded copy saves the copy and costs nothing.
_VIEW_FLOATS = (*_FLOATS, "f16", "bf16")
COPY_MAX_BYTES = 2**20  # smaller weights are packed as copies (see above)


def pack_weights(program: Program, weights: Mapping[str, np.ndarray]) -> tuple[Program, Mapping[str, np.ndarray]]:
    const = {w.name: w for w in program.weights}
    names = Names(program)
    packed: dict[str, str] = {}  # weight → its transposed view
    known = dict(weights)
    new_weights = list(program.weights)

    def transposed(w: Weight) -> Ref:
        if w.name not in packed:
            packed[w.name] = name = names(f"{w.name}_packed")
            view = known[w.name].T  # a view: no byte is copied
            if view.nbytes <= COPY_MAX_BYTES:
                view = np.ascontiguousarray(view)
            view.flags.writeable = False
            known[name] = view
            new_weights.append(Weight(name, FOLDED_KEY + name, (w.shape[1], w.shape[0]), w.dtype))
        return Ref(packed[w.name])

    matmul_only = _permutes_read_only_by_matmuls(program, const, weights)
    instrs: list[Instr] = []
    changed = False
    for ins in program.instrs:
        c = ins.call
        w = const.get(c.weight.name) if isinstance(c, C.Linear) else None
        if isinstance(c, C.Linear) and w is not None and _packable(w, ins.dtype) and w.name in known:
            ins = dataclasses.replace(ins, call=Gemm(c.x, transposed(w), c.bias, ""))
            changed = True
        elif ins.result in matmul_only:  # Permute(W, (1, 0)) or (0, 2, 1): the product reads the view instead
            assert isinstance(c, C.Permute)
            if c.perm == (1, 0):
                packed.setdefault(c.x.name, ins.result)
            known[ins.result] = view = known[c.x.name].transpose(c.perm)
            view.flags.writeable = False
            new_weights.append(Weight(ins.result, FOLDED_KEY + ins.result, tuple(ins.shape), ins.dtype))
            changed = True
            continue
        instrs.append(ins)
    if not changed:
        return program, weights
    return dataclasses.replace(program, instrs=instrs, weights=new_weights), known


def _packable(w: Weight, dtype: str) -> bool:
    return len(w.shape) == 2 and w.dtype in _FLOATS and w.dtype == dtype


def _permutes_read_only_by_matmuls(
    program: Program, const: Mapping[str, Weight], weights: Mapping[str, np.ndarray]
) -> set[str]:
    """Transposes of 2-d float weights whose every reader multiplies by them (as the right operand),
    which BLAS does as fast from the untransposed memory, and of 3-d ones (each matrix transposed)
    read only as a GroupedMatMul's experts (an MoE layer's ``[experts, out, in]`` weights): those
    become views."""
    candidates = {
        ins.result
        for ins in program.instrs
        if isinstance(ins.call, C.Permute)
        and ins.call.perm in ((1, 0), (0, 2, 1))
        and ins.call.x.name in const
        and len(const[ins.call.x.name].shape) == len(ins.call.perm)
        and const[ins.call.x.name].dtype == ins.dtype in _VIEW_FLOATS
        and ins.call.x.name in weights
        # small ones: folding stores a copy (for experts, what BLAS multiplies by is one expert's matrix)
        and weights[ins.call.x.name][(0,) * (len(ins.call.perm) - 2)].nbytes > COPY_MAX_BYTES
    }
    if not candidates:
        return set()
    uses = use_counts(program)
    as_right: dict[str, int] = {}
    for ins in program.instrs:
        c = ins.call
        if isinstance(c, (C.MatMul, Gemm, C.GroupedMatMul)):
            y = c.y if isinstance(c, C.MatMul) else c.w
            if isinstance(y, Ref) and y.name in candidates and (isinstance(c, Gemm) or c.x != y):
                as_right[y.name] = as_right.get(y.name, 0) + 1
    outputs = {o.name for o in program.outputs if isinstance(o, Ref)}
    return {n for n in candidates if as_right.get(n, 0) == uses[n] and n not in outputs}
