"""Buffer reuse by liveness: a result is written into the storage of a value that is dead.

The pass sets the ``reuse`` operand of ``Gemm`` and ``Fused`` instructions (a plain ``MatMul``
becomes a ``Gemm``, a plain elementwise Unary/Binary a one-step ``Fused``, so they can take one):
the kernel then computes with ``out=`` into that buffer instead of allocating a fresh array.

Safety comes from a may-alias analysis. Values are grouped by storage: the result of a call whose
kernel always returns fresh memory (``FRESH``) starts its own group; any other result (a reshape,
a permute, a slice — or a kernel that might return a view) joins the groups of its operands. A
buffer is free at an instruction when no value of its group is read at or after it — except, for a
``Fused`` chain, when that instruction itself is the group's only last reader and reads the buffer
elementwise at full shape (the chain then overwrites it once it is done with it). Groups holding an
input, a weight or an output are never reused. Only the owner of a group (the fresh result itself,
not a view of it) is handed to a kernel, which checks at run time that the storage is
C-contiguous, writeable and of the right size and dtype before writing into it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

from rlx.ir import calls as C
from rlx.ir.program import Call, Instr, Lit, Operand, Program, Ref, Value
from rlx.ir.symbolic import Shape, is_static, static_shape
from rlx.runtime.numpy_engine.fused_calls import Fused, Gemm, Step

# Calls whose numpy kernel always returns newly allocated memory, never a view of an operand.
FRESH = (Gemm, Fused, C.MatMul, C.Linear, C.Conv, C.Softmax, C.LayerNorm, C.RmsNorm, C.GroupNorm, C.Attention,
         C.Binary, C.Where, C.Cast)  # fmt: skip


def _fresh(call: Call) -> bool:
    if isinstance(call, C.Unary):
        return call.fn != "identity"  # every other one computes a new array
    if isinstance(call, C.Clamp):
        return call.lo is not None or call.hi is not None
    return isinstance(call, FRESH)


_FLOATS = ("f32", "f64")
_ITEMSIZE = {"f32": 4, "f64": 8}
MIN_BYTES = 64 * 1024
_UNARY_OK = {"neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "relu", "sigmoid", "silu", "gelu",
             "gelu_tanh", "rsqrt", "square", "reciprocal", "floor", "ceil", "trunc", "expm1", "log1p"}  # fmt: skip
_BINARY_OK = {"add", "sub", "mul", "div", "maximum", "minimum"}


def reuse_buffers(program: Program) -> Program:
    if program.is_dynamic or not all(is_static(i.shape) for i in program.instrs):
        return program
    values = program.values()
    groups = _StorageGroups(program)
    pinned = {groups.find(v.name) for v in program.inputs} | {groups.find(w.name) for w in program.weights}
    pinned |= {groups.find(o.name) for o in program.outputs if isinstance(o, Ref)}
    last_read: dict[str, int] = {}
    for k, ins in enumerate(program.instrs):
        last_read.setdefault(groups.find(ins.result), k)
        for r in ins.call.refs():
            last_read[groups.find(r.name)] = k
    dies_after: dict[int, list[str]] = defaultdict(list)
    for owner in groups.owners:
        g = groups.find(owner)
        if g not in pinned:
            dies_after[last_read[g]].append(owner)
    pool: dict[tuple[str, int], list[str]] = defaultdict(list)  # (dtype, size) → dead owners
    instrs: list[Instr] = []
    for k, ins in enumerate(program.instrs):
        call = _reusable_form(ins, values)
        if call is not None and values[ins.result].dtype in _FLOATS:
            key = (ins.dtype, _numel(ins.shape))
            if pool.get(key):
                ins = dataclasses.replace(ins, call=dataclasses.replace(call, reuse=Ref(pool[key].pop())))
            elif isinstance(call, Fused):
                v = _in_place_input(call, ins, k, values, groups, pinned, last_read)
                if v is not None:
                    ins = dataclasses.replace(ins, call=dataclasses.replace(call, reuse=v))
                    dies_after[k].remove(v.name)  # its storage now holds this result
        instrs.append(ins)
        for owner in dies_after.pop(k, ()):
            dead = values[owner]
            pool[(dead.dtype, _numel(dead.shape))].append(owner)
    return dataclasses.replace(program, instrs=instrs)


class _StorageGroups:
    """Union-find of the values that may share storage; ``owners`` are the fresh results (the
    arrays a kernel may overwrite once their group is dead)."""

    def __init__(self, program: Program) -> None:
        self.parent: dict[str, str] = {}
        self.owners: set[str] = set()
        for ins in program.instrs:
            if _fresh(ins.call):
                self.owners.add(ins.result)
                continue
            for r in ins.call.refs():  # may be a view of any operand: one storage group
                ra, rb = self.find(ins.result), self.find(r.name)
                if ra != rb:
                    self.parent[ra] = rb

    def find(self, v: str) -> str:
        while self.parent.get(v, v) != v:
            v = self.parent[v]
        return v


def _in_place_input(
    call: Fused,
    ins: Instr,
    k: int,
    values: dict[str, Value],
    groups: _StorageGroups,
    pinned: set[str],
    last_read: dict[str, int],
) -> Ref | None:
    """An input the chain reads for the last time, at full shape, sharing its storage with no other
    operand: the chain can write its result there (in place)."""
    for v in call.inputs:
        if (
            isinstance(v, Ref)
            and v.name in groups.owners
            and values[v.name].shape == ins.shape
            and values[v.name].dtype == ins.dtype
            and groups.find(v.name) not in pinned
            and last_read[groups.find(v.name)] == k
            and all(not isinstance(o, Ref) or o == v or groups.find(o.name) != groups.find(v.name) for o in call.inputs)
        ):
            return v
    return None


def _numel(shape: Shape) -> int:
    """The element count of a shape this pass knows is static (it leaves dynamic programs alone)."""
    static = static_shape(shape)
    if static is None:
        raise ValueError(f"buffer reuse needs static shapes, found {list(shape)}")
    return math.prod(static)


def _reusable_form(ins: Instr, values: dict[str, Value]) -> Gemm | Fused | None:
    """The instruction as a call that takes a ``reuse`` buffer — if one pays for itself: small
    arrays come from numpy's allocation cache at no cost, so only results of ``MIN_BYTES`` or more."""
    c = ins.call
    if ins.dtype not in _FLOATS or not ins.shape or _numel(ins.shape) * _ITEMSIZE[ins.dtype] < MIN_BYTES:
        return None
    if isinstance(c, (Gemm, Fused)):
        return c if c.reuse is None else None
    if isinstance(c, C.MatMul) and all(
        len(values[r.name].shape) >= 2 and values[r.name].dtype == ins.dtype for r in (c.x, c.y)
    ):
        return Gemm(c.x, c.y, None, "")
    if isinstance(c, C.Unary) and c.fn in _UNARY_OK and _dtype(c.x, values) == ins.dtype:
        return Fused((c.x,), (Step(c.fn, (0,), ins.dtype),))
    if isinstance(c, C.Binary) and c.fn in _BINARY_OK and _dtype(c.x, values) == _dtype(c.y, values) == ins.dtype:
        inputs = (c.x,) if c.x == c.y else (c.x, c.y)
        return Fused(inputs, (Step(c.fn, (0, 0 if c.x == c.y else 1), ins.dtype),))
    return None


def _dtype(v: Operand, values: dict[str, Value]) -> str:
    return v.dtype if isinstance(v, Lit) else values[v.name].dtype
