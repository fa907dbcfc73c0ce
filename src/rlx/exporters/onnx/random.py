"""RandomBits: rlx's generator (Threefry-2x32-20) as ai.onnx integer ops, so an exported model draws
the same words as every other engine (ai.onnx's RandomUniform/RandomNormal would not).

The Threefry rounds are the shared definition itself (``rlx.kernels.random.threefry2x32``), run on
``Words``: uint32 graph tensors whose ``+ ^ | << >>`` append Add, BitwiseXor, BitwiseOr and
BitShift nodes (uint32 addition wraps in ONNX as it does in numpy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx.exporters.onnx.movement import slice_axis
from rlx.exporters.onnx.registry import OnnxGraph, T, emits
from rlx.ir import calls as C
from rlx.ir import symbolic
from rlx.ir.program import Instr
from rlx.kernels.random import threefry2x32

_LOW32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Words:
    """A uint32 tensor of graph ``g``; operators build its nodes (the other side: Words or a number)."""

    g: OnnxGraph
    t: T

    def _other(self, v: Any) -> T:
        return v.t if isinstance(v, Words) else self.g.const(np.asarray(v, dtype=np.uint32), "u32")

    def _op(self, op_type: str, v: Any, **attrs: Any) -> Words:
        return Words(self.g, self.g.op(op_type, [self.t, self._other(v)], "u32", **attrs))

    def __add__(self, v: Any) -> Words:
        return self._op("Add", v)

    def __xor__(self, v: Any) -> Words:
        return self._op("BitwiseXor", v)

    def __or__(self, v: Any) -> Words:
        return self._op("BitwiseOr", v)

    def __lshift__(self, v: Any) -> Words:
        return self._op("BitShift", v, direction="LEFT")

    def __rshift__(self, v: Any) -> Words:
        return self._op("BitShift", v, direction="RIGHT")


def _words(g: OnnxGraph, v: T) -> tuple[Words, Words]:
    """An int64 tensor as its low and high uint32 words (through uint64, whose shift is logical)."""
    u = g.cast(v, "u64")
    low = g.op("BitwiseAnd", [u, g.const(np.uint64(_LOW32), "u64")], "u64")
    high = g.op("BitShift", [u, g.const(np.uint64(32), "u64")], "u64", direction="RIGHT")
    return Words(g, g.cast(low, "u32")), Words(g, g.cast(high, "u32"))


@emits(C.RandomBits)
def random_bits(g: OnnxGraph, c: C.RandomBits, out: Instr, state: T) -> T:
    key = _words(g, slice_axis(g, state, 0, 0, 1))
    key = threefry2x32(key, _words(g, slice_axis(g, state, 0, 1, 2)))
    stream = (
        Words(g, g.const(np.array([c.stream], np.uint32), "u32")),
        Words(g, g.const(np.zeros(1, np.uint32), "u32")),
    )
    key = threefry2x32(key, stream)
    n = symbolic.numel(c.shape)
    count = g.dim(n)  # [1] int64
    blocks = g.op("Div", [g.op("Add", [count, g.ints([1])], "i64"), g.ints([2])], "i64")  # ⌈n / 2⌉
    limit = g.op("Squeeze", [blocks], "i64")
    index = g.op("Range", [g.ints(0), limit, g.ints(1)], "i64")
    zeros = g.op("Mul", [index, g.ints(0)], "i64")
    x0, x1 = threefry2x32(key, (Words(g, g.cast(index, "u32")), Words(g, g.cast(zeros, "u32"))))
    pairs = [g.op("Unsqueeze", [w.t, g.ints([1])], "u32") for w in (x0, x1)]
    flat = g.op("Reshape", [g.op("Concat", pairs, "u32", axis=1), g.ints([-1])], "u32")
    first = g.op("Slice", [flat, g.ints([0]), count, g.ints([0])], "u32")
    return g.op("Reshape", [first, g.dims(c.shape)], "u32", out.shape)
