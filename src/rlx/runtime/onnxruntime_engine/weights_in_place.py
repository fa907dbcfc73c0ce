"""Products by transposed weights read the weight where it lies (memory-mapped), not a copy.

The torch front-end lowers ``nn.Linear`` at the ``high`` level as ``MatMul(x, Permute(W, (1, 0)))``
(then ``+ bias``). Emitted as is, onnxruntime's constant folding turns every ``Transpose`` of a
weight into a new initializer at load: a transposed copy of nearly all of a transformer's weights,
beside the mapped file. Rewritten as ``Linear(x, W, bias)``, the emitter's ``"transposed_weights"``
form (``Gemm`` with ``transB`` for a 2-d input, FusedMatMul with ``transB`` otherwise) multiplies by
``W`` in its stored ``[out, in]`` layout: onnxruntime packs it for its GEMM from the mapped file,
or reads it there (see ``OrtEngine``), and a loaded model holds its weights once. The bias joins
the product so that a 2-d one stays a single Gemm, as onnxruntime fuses ``MatMul + Add`` itself
(it does not fuse FusedMatMul with the Add).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from rlx.ir import calls as C
from rlx.ir.program import Instr, Program, Ref, Weight
from rlx.ir.symbolic import Shape
from rlx.passes.dce import dead_code_elimination
from rlx.passes.rewrite import use_counts

# FusedMatMul's onnxruntime kernel is float32 only.
_DTYPES = ("f32",)


def read_weights_in_place(program: Program) -> Program:
    """``program`` with each ``MatMul(x, Permute(W, (1, 0)))`` of a 2-d float32 weight ``W`` as
    ``Linear(x, W)``, where every reader of the Permute multiplies by it on the right; a bias
    added to such a product alone (a 1-d float32 weight over its last axis) joins the Linear."""
    weights = {w.name: w for w in program.weights}
    transposes = {
        ins.result: ins.call.x
        for ins in program.instrs
        if isinstance(ins.call, C.Permute)
        and ins.call.perm == (1, 0)
        and ins.call.x.name in weights
        and len(weights[ins.call.x.name].shape) == 2
        and ins.dtype in _DTYPES
    }
    if not transposes:
        return program
    uses = use_counts(program)
    right: dict[str, int] = {}
    for ins in program.instrs:
        c = ins.call
        if isinstance(c, C.MatMul) and isinstance(c.y, Ref) and c.y.name in transposes and c.x != c.y:
            right[c.y.name] = right.get(c.y.name, 0) + 1
    readable = {n for n in transposes if right.get(n, 0) == uses[n]}  # (an output counts as a reader)
    if not readable:
        return program
    products: dict[str, C.Linear] = {}  # a product's result → the Linear it becomes
    shapes: dict[str, Shape] = {}  # and its shape
    for ins in program.instrs:
        c = ins.call
        if isinstance(c, C.MatMul) and isinstance(c.y, Ref) and c.y.name in readable and ins.dtype in _DTYPES:
            products[ins.result] = C.Linear(c.x, transposes[c.y.name], None)
            shapes[ins.result] = ins.shape
    folded = set()  # products whose bias add became their Linear
    instrs = []
    for ins in program.instrs:
        bias = _bias_of(ins, shapes, weights, uses)
        if bias is not None:
            product, b = bias
            folded.add(product)
            ins = dataclasses.replace(ins, call=dataclasses.replace(products[product], bias=b))
        elif ins.result in products:
            ins = dataclasses.replace(ins, call=products[ins.result])
        instrs.append(ins)
    kept = [ins for ins in instrs if ins.result not in folded]
    return dead_code_elimination(dataclasses.replace(program, instrs=kept))


def _bias_of(
    ins: Instr, products: dict[str, Shape], weights: dict[str, Weight], uses: Counter[str]
) -> tuple[str, Ref] | None:
    """(product, bias) where ``ins`` adds a 1-d float32 weight over the last axis to one of
    ``products`` (result → shape) that nothing else reads, keeping its shape; None otherwise."""
    c = ins.call
    if not (isinstance(c, C.Binary) and c.fn == "add" and ins.dtype in _DTYPES):
        return None
    for product, bias in ((c.x, c.y), (c.y, c.x)):
        if not (isinstance(product, Ref) and isinstance(bias, Ref)) or product.name not in products:
            continue
        w = weights.get(bias.name)
        fits = w is not None and w.dtype in _DTYPES and w.shape == ins.shape[-1:] == products[product.name][-1:]
        if fits and uses[product.name] == 1:
            return product.name, bias
    return None
