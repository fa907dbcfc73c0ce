"""Fusion of cheap chains into fewer, larger steps.

Rewrites, in order:

1. **BatchNorm into Conv.** ``BatchNorm(Conv(x, W, b))`` with constant statistics becomes one
   ``Conv(x, W·s, (b − mean)·s + beta)`` with ``s = weight / sqrt(var + eps)``. The new weight and
   bias are written as instructions over the weights, so constant folding computes them at load.
2. **Gemm.** ``MatMul`` followed by an add becomes ``Gemm(x, w, bias)`` (a bias, or a residual of
   the product's shape); a reshape that only merges the leading axes of ``x`` is moved after the
   product (one GEMM over the merged rows either way, and the reshapes around it cancel); an
   activation after the product — directly or through reshapes, ``v * sigmoid(v)`` included —
   moves into it; Gemms of one input by different weights (q, k, v) become one Gemm by the
   concatenated weights and a slice per projection.
3. **Attention with repeated K/V.** Keys and values repeated per query head (``repeat_kv``) feed
   the Attention unrepeated, with ``gqa``: the kernel broadcasts them instead of copying.
4. **Elementwise chains.** A run of elementwise instructions (Unary, Binary, Where, Clamp,
   LeakyRelu, Cast) whose intermediate results have one reader each becomes one ``Fused``
   instruction; a Softmax of such a chain closes it (the scale + mask + softmax of attention).
   A chain of one instruction stays as it is.

Only float32/float64 products are fused into ``Gemm`` and only float BatchNorms are folded, so
half-precision programs keep PyTorch's per-op rounding. Elementwise chains of any dtype are fused:
their kernel runs each step exactly as the plain Call's kernel would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Call, Instr, Lit, Operand, Program, Ref, Value
from rlx.ir.symbolic import Shape, is_static, static_shape
from rlx.passes.rewrite import Names, rename_all, use_counts
from rlx.runtime.numpy_engine.fused_calls import Fused, Gemm, Step

# Unary functions a Gemm may apply to its product (float in, same float out).
ACTIVATIONS = frozenset(
    {
        "relu",
        "gelu",
        "gelu_tanh",
        "silu",
        "sigmoid",
        "tanh",
        "relu6",
        "hardswish",
        "hardsigmoid",
        "mish",
        "softplus",
        "elu",
        "selu",
    }
)
_FLOATS = ("f32", "f64")


def fuse(program: Program) -> Program:
    for rewrite in (
        _batchnorm_into_conv,
        _gemm_bias,
        _gemm_hoist_reshape,
        _gemm_bias,
        _gemm_activation,
        _gemm_siblings,
        _attention_gqa,
        _elementwise_chains,
    ):
        program = rewrite(program)
    return program


# ── 1. BatchNorm into Conv ───────────────────────────────────────────────────
def _batchnorm_into_conv(program: Program) -> Program:
    const = {w.name for w in program.weights}
    values = program.values()
    uses = use_counts(program)
    producer = {i.result: i for i in program.instrs}
    names = Names(program)
    drop: set[str] = set()
    replace: dict[str, list[Instr]] = {}
    for ins in program.instrs:
        bn = ins.call
        if not isinstance(bn, C.BatchNorm) or ins.dtype not in _FLOATS:
            continue
        conv_ins = producer.get(bn.x.name)
        if conv_ins is None or uses[bn.x.name] != 1 or not isinstance(conv_ins.call, C.Conv):
            continue
        conv = conv_ins.call
        operands = [conv.weight, conv.bias, bn.mean, bn.var, bn.weight, bn.bias]
        if conv.transposed or any(r is not None and r.name not in const for r in operands):
            continue
        if any(r is not None and values[r.name].dtype != ins.dtype for r in operands):
            continue
        w_shape = values[conv.weight.name].shape
        n = w_shape[0]
        new: list[Instr] = []
        emit = _emitter(new, names, ins, f"BatchNorm folded into {conv_ins.result}")
        dt = ins.dtype
        inv = emit(C.Unary("rsqrt", emit(C.Binary("add", bn.var, Lit(bn.eps, dt)), (n,), "var_eps")), (n,), "inv_std")
        scale = emit(C.Binary("mul", inv, bn.weight), (n,), "scale") if bn.weight is not None else inv
        col = emit(C.Reshape(scale, (n,) + (1,) * (len(w_shape) - 1)), (n,) + (1,) * (len(w_shape) - 1), "scale_col")
        weight = emit(C.Binary("mul", conv.weight, col), w_shape, "weight")
        centered = (
            emit(C.Binary("sub", conv.bias, bn.mean), (n,), "centered")
            if conv.bias is not None
            else emit(C.Unary("neg", bn.mean), (n,), "centered")
        )
        bias = emit(C.Binary("mul", centered, scale), (n,), "bias")
        if bn.bias is not None:
            bias = emit(C.Binary("add", bias, bn.bias), (n,), "shifted")
        new.append(dataclasses.replace(ins, call=dataclasses.replace(conv, weight=weight, bias=bias)))
        drop.add(conv_ins.result)
        replace[ins.result] = new
    if not replace:
        return program
    instrs = []
    for ins in program.instrs:
        if ins.result in drop:
            continue
        instrs.extend(replace.get(ins.result, [ins]))
    return dataclasses.replace(program, instrs=instrs)


def _emitter(out: list[Instr], names: Names, like: Instr, note: str) -> Callable[[Call, tuple, str], Ref]:
    """``emit(call, shape, hint)``: append an instruction (dtype and provenance of ``like``) to ``out``."""

    def emit(call: Call, shape: tuple, hint: str) -> Ref:
        name = names(f"{like.result}_{hint}")
        out.append(Instr(name, call, tuple(shape), like.dtype, like.node, note))
        return Ref(name)

    return emit


# ── 2. Gemm ──────────────────────────────────────────────────────────────────
def _is_float_product(ins: Instr, values: dict[str, Value]) -> bool:
    """A MatMul or Gemm of two float matrices (or batches of them) in the result's dtype."""
    c = ins.call
    if not isinstance(c, (C.MatMul, Gemm)):
        return False
    return ins.dtype in _FLOATS and all(
        values[r.name].dtype == ins.dtype and len(values[r.name].shape) >= 2
        for r in (c.x, c.w if isinstance(c, Gemm) else c.y)
    )


def _gemm_bias(program: Program) -> Program:
    """``MatMul(x, w) + b`` → ``Gemm(x, w, b)`` when the product has no other reader."""
    values = program.values()
    uses = use_counts(program)
    producer = {i.result: i for i in program.instrs}
    absorbed: set[str] = set()
    instrs: list[Instr] = []
    for ins in program.instrs:
        c = ins.call
        if isinstance(c, C.Binary) and c.fn == "add" and ins.dtype in _FLOATS:
            for prod, other in ((c.x, c.y), (c.y, c.x)):
                if not isinstance(prod, Ref):
                    continue
                mm = producer.get(prod.name)
                if mm is None or not isinstance(mm.call, C.MatMul) or uses[prod.name] != 1:
                    continue
                if not _is_float_product(mm, values) or tuple(mm.shape) != tuple(ins.shape):
                    continue
                if _dtype(other, values) != ins.dtype:
                    continue
                ins = dataclasses.replace(ins, call=Gemm(mm.call.x, mm.call.y, other, ""))
                absorbed.add(mm.result)
                break
        instrs.append(ins)
    if not absorbed:
        return program
    return dataclasses.replace(program, instrs=[i for i in instrs if i.result not in absorbed])


def _gemm_hoist_reshape(program: Program) -> Program:
    """``Gemm(Reshape(x, [M, K]), w)`` with ``w`` a matrix → ``Reshape(Gemm(x, w), [M, N])``: the
    product over ``x``'s leading axes is one GEMM anyway. A reshape of the result straight back to
    ``x``'s leading axes (the usual ``view`` after ``addmm``) then reads the product itself."""
    values = program.values()
    producer = {i.result: i for i in program.instrs}
    names = Names(program)
    instrs: list[Instr] = []
    hoisted: dict[str, tuple[str, tuple]] = {}  # old result → (product, its shape)
    alias: dict[str, Ref | Lit] = {}
    for ins in program.instrs:
        c = ins.call
        if isinstance(c, C.Reshape) and c.x.name in hoisted and tuple(ins.shape) == hoisted[c.x.name][1]:
            alias[ins.result] = Ref(hoisted[c.x.name][0])
            continue
        hoist = _hoisted_product(ins, producer, values)
        if hoist is not None:
            call, shape = hoist
            product = names(ins.result)
            instrs.append(Instr(product, call, shape, ins.dtype, ins.node, ins.note))
            instrs.append(dataclasses.replace(ins, call=C.Reshape(Ref(product), tuple(ins.shape))))
            hoisted[ins.result] = (product, shape)
            continue
        instrs.append(ins)
    if not hoisted:
        return program
    program = rename_all(dataclasses.replace(program, instrs=[i for i in instrs if i.result not in alias]), alias)
    uses = use_counts(program)  # a reshape back to [M, N] that nothing reads any more goes now
    return dataclasses.replace(program, instrs=[i for i in program.instrs if i.result not in hoisted or uses[i.result]])


def _hoisted_product(ins: Instr, producer: dict[str, Instr], values: dict[str, Value]) -> tuple[Call, Shape] | None:
    """For a 2-d MatMul/Gemm of ``Reshape(x0)`` that only merged ``x0``'s leading axes, by a matrix and
    with a bias along the last axis only: the same product over ``x0``, and its shape."""
    c = ins.call
    if not isinstance(c, (C.MatMul, Gemm)):
        return None
    src = producer.get(c.x.name)
    w = c.w if isinstance(c, Gemm) else c.y
    bias = c.bias if isinstance(c, Gemm) else None
    bias_shape = _shape(bias, values) if bias is not None else ()
    if (
        src is None
        or not isinstance(src.call, C.Reshape)
        or len(ins.shape) != 2
        or len(values[w.name].shape) != 2
        or not is_static(ins.shape)
        or len(bias_shape) > 2
        or not all(d == 1 for d in bias_shape[:-1])  # a bias along the last axis only
    ):
        return None
    x0 = values[src.call.x.name]
    if len(x0.shape) > 2 and is_static(x0.shape) and x0.shape[-1] == values[c.x.name].shape[-1]:
        return dataclasses.replace(c, x=src.call.x), tuple(x0.shape[:-1]) + (ins.shape[-1],)
    return None


class _Projection(NamedTuple):
    """A Gemm of ``x`` by a constant matrix ``w`` (``[k, width]``) plus an optional constant bias."""

    ins: Instr
    x: Ref
    w: Ref
    bias: Ref | None
    k: int
    width: int


# The merged matrix is a copy of its members (they stay views of the mapped weights file): beyond
# this size a GEMM keeps BLAS busy on its own, and the copy would make a loaded model hold those
# weights twice.
MAX_MERGED_BYTES = 16 * 2**20


def _gemm_siblings(program: Program) -> Program:
    """Gemms of one input by different weight matrices (the q, k and v projections) → one Gemm by the
    weights side by side, and a slice of its result for each. The concatenated weight and bias are
    written as instructions over the weights, for constant folding. A member without a bias (Whisper's
    key projection beside biased query and value ones) adds −0, the exact identity (x + −0 is x, −0
    included), so it joins the others' product."""
    values = program.values()
    names = Names(program)
    replace: dict[str, list[Instr]] = {}
    for (_, act, dtype), members in _sibling_groups(program, values).items():
        merged_bytes = members[0].k * sum(m.width for m in members) * np.dtype(dtypes.to_numpy(dtype)).itemsize
        if len(members) < 2 or merged_bytes > MAX_MERGED_BYTES:
            continue
        first = members[0].ins
        new: list[Instr] = []
        emit = _emitter(
            new, names, first, "the projections " + ", ".join(m.ins.result for m in members) + " side by side"
        )
        k = members[0].k
        widths = [m.width for m in members]
        total = sum(widths)
        w = emit(C.Concat(tuple(m.w for m in members), 1), (k, total), "w")
        bias = None
        if any(m.bias is not None for m in members):
            biases = tuple(
                m.bias if m.bias is not None else emit(C.Full(-0.0, (m.width,), dtype), (m.width,), "zero")
                for m in members
            )
            bias = emit(C.Concat(biases, 0), (total,), "bias")
        shape = tuple(first.shape[:-1]) + (total,)
        product = emit(Gemm(members[0].x, w, bias, act), shape, "all")
        start = 0
        axis = len(shape) - 1
        for m, width in zip(members, widths):
            new.append(dataclasses.replace(m.ins, call=C.Slice(product, axis, start, start + width, 1)))
            start += width
        replace[first.result] = new
        for m in members[1:]:
            replace[m.ins.result] = []
    if not replace:
        return program
    instrs: list[Instr] = []
    for ins in program.instrs:
        instrs.extend(replace.get(ins.result, [ins]))
    return dataclasses.replace(program, instrs=instrs)


def _sibling_groups(program: Program, values: dict[str, Value]) -> dict[tuple[str, str, str], list[_Projection]]:
    """Static float Gemms (and MatMuls, as bias-less Gemms) by constant matrices, grouped by input,
    activation and dtype."""
    const = {w.name for w in program.weights}
    groups: dict[tuple[str, str, str], list[_Projection]] = {}
    for ins in program.instrs:
        c = ins.call
        if isinstance(c, C.MatMul) and _is_float_product(ins, values):
            c = Gemm(c.x, c.y, None, "")  # a product by a weight without a bias joins too
            ins = dataclasses.replace(ins, call=c)
        if not isinstance(c, Gemm) or c.w.name not in const or ins.dtype not in _FLOATS or not is_static(ins.shape):
            continue
        w_shape = static_shape(values[c.w.name].shape)  # weights have static shapes; others are skipped
        if w_shape is None or len(w_shape) != 2:
            continue
        if c.bias is not None and (not isinstance(c.bias, Ref) or c.bias.name not in const):
            continue
        if c.bias is not None and tuple(values[c.bias.name].shape) != (w_shape[1],):
            continue
        member = _Projection(ins, c.x, c.w, c.bias, w_shape[0], w_shape[1])
        groups.setdefault((c.x.name, c.activation, ins.dtype), []).append(member)
    return groups


def _gemm_activation(program: Program) -> Program:
    """``act(Gemm(...))``, directly or through reshapes with one reader each → ``Gemm(..., act)``;
    ``v * sigmoid(v)`` (SiLU as Core ATen writes it) counts as ``silu(v)``."""
    values = program.values()
    uses = use_counts(program)
    producer = {i.result: i for i in program.instrs}
    updated: dict[str, Instr] = {}
    alias: dict[str, Ref | Lit] = {}
    dropped: set[str] = set()
    for ins in program.instrs:
        act = _activation(ins, producer, uses)
        if act is None:
            continue
        fn, top, readers, extra = act
        name, readers = _through_reshapes(top.name, readers, producer, uses)
        g = updated.get(name) or producer.get(name)
        if g is None or uses[name] != readers or g.dtype != ins.dtype:
            continue
        if isinstance(g.call, C.MatMul) and _is_float_product(g, values):
            call = Gemm(g.call.x, g.call.y, None, fn)
        elif isinstance(g.call, Gemm) and not g.call.activation:
            call = dataclasses.replace(g.call, activation=fn)
        else:
            continue
        updated[name] = dataclasses.replace(g, call=call)
        alias[ins.result] = top
        dropped.update(extra)
    if not updated:
        return program
    instrs = [updated.get(i.result, i) for i in program.instrs if i.result not in alias and i.result not in dropped]
    return rename_all(dataclasses.replace(program, instrs=instrs), alias)


def _through_reshapes(name: str, readers: int, producer: dict[str, Instr], uses: dict[str, int]) -> tuple[str, int]:
    """Follow reshapes that have ``readers`` readers (then one) back to the value they reshape."""
    while True:
        ins = producer.get(name)
        if ins is None or not isinstance(ins.call, C.Reshape) or uses[name] != readers:
            return name, readers
        name, readers = ins.call.x.name, 1


def _activation(
    ins: Instr, producer: dict[str, Instr], uses: dict[str, int]
) -> tuple[str, Ref, int, tuple[str, ...]] | None:
    """(function, the value it applies to, that value's expected readers, instructions it absorbs)."""
    c = ins.call
    if isinstance(c, C.Unary) and c.fn in ACTIVATIONS and isinstance(c.x, Ref):
        return c.fn, c.x, 1, ()
    if isinstance(c, C.Binary) and c.fn == "mul" and isinstance(c.x, Ref) and isinstance(c.y, Ref):
        for v, s in ((c.x, c.y), (c.y, c.x)):
            sig = producer.get(s.name)
            if sig is not None and isinstance(sig.call, C.Unary) and sig.call.fn == "sigmoid" and sig.call.x == v:
                if uses[s.name] == 1:
                    return "silu", v, 2, (s.name,)
    return None


def _attention_gqa(program: Program) -> Program:
    """Attention on keys and values repeated per query head (``repeat_kv``: unsqueeze, expand,
    reshape — a copy of K and V) → Attention on the unrepeated ones with ``gqa``, which the
    kernel broadcasts instead (query head ``h`` reads key head ``h // rep`` either way)."""
    producer = {i.result: i for i in program.instrs}
    values = program.values()
    changed: dict[str, Instr] = {}
    for ins in program.instrs:
        c = ins.call
        if not isinstance(c, C.Attention):
            continue
        k, v = _unrepeated(c.k, producer, values), _unrepeated(c.v, producer, values)
        if k is None or v is None or k[1] != v[1]:
            continue
        changed[ins.result] = dataclasses.replace(ins, call=dataclasses.replace(c, k=k[0], v=v[0], gqa=True))
    if not changed:
        return program
    return dataclasses.replace(program, instrs=[changed.get(i.result, i) for i in program.instrs])


def _unrepeated(r: Ref, producer: dict[str, Instr], values: dict[str, Value]) -> tuple[Ref, int] | None:
    """``(src, rep)`` when ``r`` is ``src [.., H, S, D]`` with each head repeated ``rep`` times
    in place (``src[.., :, None].expand(.., H, rep, S, D).reshape(.., H·rep, S, D)``)."""
    flat = producer.get(r.name)
    if flat is None or not isinstance(flat.call, C.Reshape):
        return None
    expand = producer.get(flat.call.x.name)
    if expand is None or not isinstance(expand.call, C.Expand) or not isinstance(expand.call.x, Ref):
        return None
    unsq = producer.get(expand.call.x.name)
    if unsq is None or not isinstance(unsq.call, C.Reshape):
        return None
    src = static_shape(values[unsq.call.x.name].shape)
    expanded = static_shape(expand.shape)
    if src is None or len(src) < 3 or expanded is None:
        return None
    lead, (h, s, d) = tuple(src[:-3]), tuple(src[-3:])
    rep = expanded[-3] if len(expanded) == len(src) + 1 else 0
    if (
        rep < 1
        or tuple(unsq.shape) != lead + (h, 1, s, d)
        or tuple(expand.shape) != lead + (h, rep, s, d)
        or tuple(flat.shape) != lead + (h * rep, s, d)
    ):
        return None
    return unsq.call.x, rep


# ── 3. elementwise chains ────────────────────────────────────────────────────
_ELEMENTWISE = (C.Unary, C.Binary, C.Where, C.Clamp, C.LeakyRelu, C.Cast)


def _step(call: Call, dtype: str, reg: Callable[[Operand | None], int | None]) -> Step:
    if isinstance(call, C.Unary):
        return Step(call.fn, (reg(call.x),), dtype)
    if isinstance(call, C.Binary):
        return Step(call.fn, (reg(call.x), reg(call.y)), dtype)
    if isinstance(call, C.Where):
        return Step("where", (reg(call.cond), reg(call.x), reg(call.y)), dtype)
    if isinstance(call, C.Clamp):
        return Step("clamp", (reg(call.x), reg(call.lo), reg(call.hi)), dtype)
    if isinstance(call, C.LeakyRelu):
        return Step("leaky_relu", (reg(call.x),), dtype, call.slope)
    if isinstance(call, C.Cast):
        return Step("cast", (reg(call.x),), dtype)
    if isinstance(call, C.Softmax):
        return Step("log_softmax" if call.log else "softmax", (reg(call.x),), dtype, call.axis)
    raise TypeError(call)


def _fusible(ins: Instr) -> bool:
    c = ins.call
    if isinstance(c, C.Unary):
        return c.fn != "identity"
    if isinstance(c, C.Clamp):
        return c.lo is not None or c.hi is not None
    return isinstance(c, _ELEMENTWISE)


def _elementwise_chains(program: Program) -> Program:
    uses = use_counts(program)
    outputs = {o.name for o in program.outputs if isinstance(o, Ref)}
    group: dict[str, list[Instr]] = {}  # chain root → its members in program order
    root_of: dict[str, str] = {}
    for ins in program.instrs:
        closes = isinstance(ins.call, C.Softmax)
        if not (_fusible(ins) or closes):
            continue
        members: list[Instr] = []
        for r in ins.call.refs():
            inner = root_of.get(r.name)
            if inner == r.name and uses[r.name] == 1 and r.name not in outputs and inner in group:
                members.extend(group.pop(inner))
        if closes and not members:
            continue
        members.append(ins)
        if closes:
            group[ins.result] = members  # nothing joins a chain after its softmax
            root_of[ins.result] = ""
        else:
            group[ins.result] = members
            root_of[ins.result] = ins.result
    position = {i.result: k for k, i in enumerate(program.instrs)}
    fused: dict[str, Instr] = {}
    absorbed: set[str] = set()
    for root, members in group.items():
        if len(members) < 2:
            continue
        fused[root] = _chain(sorted(members, key=lambda m: position[m.result]))
        absorbed.update(m.result for m in members[:-1])
    if not fused:
        return program
    instrs = [fused.get(i.result, i) for i in program.instrs if i.result not in absorbed]
    return dataclasses.replace(program, instrs=instrs)


def _chain(members: list[Instr]) -> Instr:
    """One ``Fused`` instruction for ``members`` (in program order; the last is the root)."""
    inputs: list[Operand] = []
    index: dict[str, int] = {m.result: k for k, m in enumerate(members)}
    # Inputs: every operand not produced inside the chain, in order of first appearance.
    for m in members:
        for f in m.call.operand_fields():
            v = getattr(m.call, f)
            if v is None or (isinstance(v, Ref) and v.name in index):
                continue
            if v not in inputs:
                inputs.append(v)
    n_in = len(inputs)

    def reg(v: Operand | None) -> int | None:
        if v is None:
            return None
        if isinstance(v, Ref) and v.name in index:
            return n_in + index[v.name]
        return inputs.index(v)

    steps = tuple(_step(m.call, m.dtype, reg) for m in members)
    last = members[-1]
    note = " + ".join(m.call.op if not hasattr(m.call, "fn") else m.call.fn for m in members)
    return dataclasses.replace(last, call=Fused(tuple(inputs), steps), note=f"fused {note}; {last.note}")


def _dtype(v: Operand, values: dict[str, Value]) -> str:
    return v.dtype if isinstance(v, Lit) else values[v.name].dtype


def _shape(v: Operand, values: dict[str, Value]) -> tuple:
    return () if isinstance(v, Lit) else tuple(values[v.name].shape)
