"""Program verifier: every value defined once before use, declared dtypes and shapes consistent."""

from __future__ import annotations

import math

from rlx.errors import SchemaError
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Program, Ref
from rlx.ir.symbolic import is_static

MAX_ELEMENTS = 2**36  # per value; far beyond any real model, small enough to refuse absurd headers


def validate(program: Program, source: str = "program") -> None:
    """Raise ``SchemaError`` naming the first instruction that breaks an invariant."""
    known = program.values()
    defined = {v.name for v in program.inputs} | {w.name for w in program.weights}
    if len(defined) != len(program.inputs) + len(program.weights):
        raise SchemaError(f"{source}: an input and a weight share a name")
    for k, ins in enumerate(program.instrs):
        where = f"{source}: instrs[{k}] ({ins.result} = {ins.call.op})"
        for r in ins.call.refs():
            if r.name not in defined:
                raise SchemaError(f"{where}: reads {r.name!r} before it is defined")
        if ins.result in defined:
            raise SchemaError(f"{where}: {ins.result!r} is defined twice")
        dtypes.check(ins.dtype, f"{where}.dtype")
        if any(isinstance(d, int) and d < 0 for d in ins.shape):
            raise SchemaError(f"{where}: negative dimension in {list(ins.shape)}")
        if is_static(ins.shape) and math.prod(ins.shape) > MAX_ELEMENTS:
            raise SchemaError(
                f"{where}: declares {math.prod(ins.shape):,} elements, more than rlx allows ({MAX_ELEMENTS:,})"
            )
        _check_call(ins.call, ins.shape, ins.dtype, known, where)
        defined.add(ins.result)
    for k, o in enumerate(program.outputs):
        if isinstance(o, Ref) and o.name not in defined:
            raise SchemaError(f"{source}: outputs[{k}] names undefined value {o.name!r}")


def _check_call(call: object, shape: tuple[int, ...], dtype: str, known: dict, where: str) -> None:
    """Cheap structural checks of a call against its declared result."""

    def fail(msg: str) -> None:
        raise SchemaError(f"{where}: {msg}")

    if isinstance(call, C.Cast) and call.dtype != dtype:
        fail(f"casts to {call.dtype} but declares {dtype}")
    if isinstance(call, C.Binary) and call.fn not in C.BINARY_FNS:
        fail(f"unknown binary function {call.fn!r}")
    if isinstance(call, C.Unary) and call.fn not in C.UNARY_FNS:
        fail(f"unknown unary function {call.fn!r}")
    if isinstance(call, C.Reduce) and call.fn not in C.REDUCE_FNS:
        fail(f"unknown reduction {call.fn!r}")
    if isinstance(call, C.Reshape):
        src = known[call.x.name].shape
        sizes_known = is_static(src) and is_static(shape)
        if (sizes_known and math.prod(src) != math.prod(shape)) or tuple(call.shape) != shape:
            fail(f"reshapes {list(src)} to {list(call.shape)}, declared {list(shape)}")
    if isinstance(call, C.Permute):
        src = known[call.x.name].shape
        if sorted(call.perm) != list(range(len(src))) or tuple(src[p] for p in call.perm) != shape:
            fail(f"permutation {list(call.perm)} of {list(src)} does not give {list(shape)}")
    if isinstance(call, (C.Full, C.Expand)) and tuple(call.shape) != shape:
        fail(f"produces {list(call.shape)}, declared {list(shape)}")
    if isinstance(call, C.Arange) and all(isinstance(v, (int, float)) for v in (call.start, call.end, call.step)):
        if call.step == 0 or not all(math.isfinite(v) for v in (call.start, call.end, call.step)):
            fail(f"arange({call.start}, {call.end}, {call.step}) is not a finite range")
        n = max(0, math.ceil((call.end - call.start) / call.step))
        if (n,) != shape:
            fail(f"arange gives {n} elements, declared {list(shape)}")
    if isinstance(call, C.Pad):
        src = known[call.x.name].shape
        if len(call.pads) != len(src) or len(shape) != len(src):
            fail(f"pads {list(call.pads)} do not match rank {len(src)}")
        if is_static(src) and all(isinstance(p, int) for pair in call.pads for p in pair):
            want = tuple(d + lo + hi for d, (lo, hi) in zip(src, call.pads))
            if want != shape:
                fail(f"padding {list(src)} by {list(call.pads)} gives {list(want)}, declared {list(shape)}")
