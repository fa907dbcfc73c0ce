"""Fixing chosen input dimensions of an exported torch-ir.json graph while building (``input_shapes``).

The same contract as the ONNX import's: a dimension given a size becomes that static extent, one
given ``None`` stays as exported. A dynamic axis is a symbol (``s0``), so fixing it fixes every axis
and every size computed from that symbol, on every input, node shape and symbolic scalar; the size
must lie in the symbol's exported range. A derived axis (``2*s0``) cannot be fixed on its own: fix
its symbol.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from rlx.errors import UsageError
from rlx.formats.torch_ir import Input, ScalarMeta, TensorMeta, TorchIR
from rlx.ir.symbolic import Dim, Sym, partial_dim

InputShapes = Mapping[str, Sequence[int | None]]


def fix_input_shapes(ir: TorchIR, input_shapes: InputShapes, where: str) -> tuple[TorchIR, dict[str, int]]:
    """A copy of ``ir`` with the chosen dimensions static, and the size each fixed symbol got."""
    bindings = _bindings(ir, input_shapes, where)
    if not bindings:
        return ir, bindings

    def shape(s: Sequence[Dim]) -> tuple[Dim, ...]:
        return tuple(partial_dim(d, bindings) for d in s)

    def meta(m: Any) -> Any:
        if isinstance(m, TensorMeta):
            return TensorMeta(shape(m.shape), m.dtype)
        if isinstance(m, ScalarMeta) and isinstance(m.value, Sym):
            return ScalarMeta(partial_dim(m.value, bindings))
        return m

    fixed = dataclasses.replace(
        ir,
        inputs=[Input(id=i.id, shape=shape(i.shape), dtype=i.dtype) for i in ir.inputs],
        nodes=[dataclasses.replace(n, out=tuple(meta(m) for m in n.out)) for n in ir.nodes],
        outputs=[dataclasses.replace(o, shape=None if o.shape is None else shape(o.shape)) for o in ir.outputs],
        symbols=[s for s in ir.symbols if s.name not in bindings],
    )
    return fixed, bindings


def _bindings(ir: TorchIR, input_shapes: InputShapes, where: str) -> dict[str, int]:
    """Check ``input_shapes`` against the graph's inputs; the size each fixed symbol gets."""
    inputs = {i.id: i for i in ir.inputs}
    symbols = {s.name: s for s in ir.symbols}
    bindings: dict[str, int] = {}
    for name, dims in input_shapes.items():
        inp = inputs.get(name)
        if inp is None:
            names = ", ".join(sorted(inputs)) or "none"
            raise UsageError(f"{where}: input_shapes names {name!r}, which is not an input (inputs: {names})")
        if len(dims) != len(inp.shape):
            raise UsageError(
                f"{where}: input_shapes gives {name!r} {len(dims)} dimensions, the graph has {len(inp.shape)}"
            )
        for axis, (size, d) in enumerate(zip(dims, inp.shape)):
            if size is None:
                continue
            what = f"{where}: input_shapes {name!r} axis {axis}"
            if size < 0:
                raise UsageError(f"{what}: size {size} is negative")
            if isinstance(d, int):
                if d != size:
                    raise UsageError(f"{what}: the graph fixes it to {d}, not {size}")
                continue
            sym = symbols.get(d.expr)
            if sym is None:
                raise UsageError(f"{what} is {d.expr}, computed from other sizes: fix the size it is computed from")
            if size < sym.min or (sym.max is not None and size > sym.max):
                top = "inf" if sym.max is None else sym.max
                raise UsageError(f"{what}: {size} is outside the range {sym.name} was exported for, [{sym.min}, {top}]")
            if bindings.setdefault(sym.name, size) != size:
                raise UsageError(f"{where}: input_shapes gives {sym.name} two sizes, {bindings[sym.name]} and {size}")
    return bindings


__all__ = ["InputShapes", "fix_input_shapes"]
