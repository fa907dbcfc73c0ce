"""Program verifier: every value defined once before use, declared dtypes and shapes consistent."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlx.errors import SchemaError, UnsupportedOpError
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Call, Instr, Program, Ref, Value
from rlx.ir.rules import DtypeRuleError, RuleError, TensorType, Types, describe, infer, mismatch, operand_types
from rlx.ir.symbolic import Shape, static_shape

MAX_ELEMENTS = 2**36  # per value; far beyond any real model, small enough to refuse absurd headers
# The Calls that may read or produce a low-bit (float8/float4/int4/int2) value: casts and moves (and
# an engine's own Calls, made by its passes only of Calls that passed this check before).
LOW_BIT_CALLS = (C.Cast, C.Bitcast, C.Reshape, C.Permute, C.Expand, C.Slice, C.Concat, C.IndexSelect, C.Flip)


def validate(program: Program, source: str = "program", *, rules: bool = False) -> list[TensorType | None]:
    """Raise ``SchemaError`` naming the first instruction that breaks an invariant. With ``rules``,
    each instruction's declared shape is also checked against its Call's rule before the next
    instruction is looked at, so a damaged extent is blamed on the instruction that declares it,
    not on the first one that reads it (dtypes: ``check_program``, given the rule types returned)."""
    known = program.values()
    t = operand_types(known)
    hints = _hints(program)
    inferred: list[TensorType | None] = []
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
        static = static_shape(ins.shape)
        if static is not None and math.prod(static) > MAX_ELEMENTS:
            raise SchemaError(
                f"{where}: declares {math.prod(static):,} elements, more than rlx allows ({MAX_ELEMENTS:,})"
            )
        _check_call(ins.call, ins.shape, ins.dtype, known, where)
        _check_low_bit(ins.call, ins.dtype, known, where)
        problem = _rule_problem(ins, t, hints, dtypes=False, out=inferred) if rules else None
        if problem:
            raise SchemaError(_located(where, problem))
        defined.add(ins.result)
    for k, o in enumerate(program.outputs):
        if isinstance(o, Ref) and o.name not in defined:
            raise SchemaError(f"{source}: outputs[{k}] names undefined value {o.name!r}")
    return inferred


def check_program(program: Program, source: str = "program", inferred: Sequence[TensorType | None] = ()) -> None:
    """Check every instruction's declared result shape and dtype against its Call's rule
    (``rlx.ir.rules``); raise ``SchemaError`` naming the first instruction that disagrees. Loading
    a bundle runs this, so a damaged or hand-edited program.json is refused before any kernel runs.
    Run after ``validate``, which guarantees every operand is defined (and with ``rules`` returns the
    rule types, ``inferred``, so they are not computed twice)."""
    t = operand_types(program.values())
    hints = _hints(program)
    for k, ins in enumerate(program.instrs):
        known = inferred[k] if k < len(inferred) else None
        problem = _rule_problem(ins, t, hints, dtypes=True, rule=known)
        if problem:
            raise SchemaError(_located(f"{source}: instrs[{k}] ({ins.result} = {ins.call.op})", problem))


def _hints(program: Program) -> dict[str, int]:
    return {s.name: s.hint for s in [*program.symbols, *program.data_symbols]}


def _located(where: str, problem: str) -> str:
    return f"{where} {problem}" if problem.startswith("declares") else f"{where}: {problem}"


def _rule_problem(
    ins: Instr,
    t: Types,
    hints: dict[str, int],
    dtypes: bool,
    rule: TensorType | None = None,
    out: list[TensorType | None] | None = None,
) -> str | None:
    """Why ``ins`` disagrees with its Call's rule (``dtypes=False``: its shape only), or None;
    the rule's type is appended to ``out`` (None where only a dtype requirement failed)."""
    if rule is None:
        try:
            rule = infer(ins.call, t)
        except DtypeRuleError as e:
            if out is not None:
                out.append(None)
            return str(e) if dtypes else None
        except RuleError as e:
            return str(e)
    if out is not None:
        out.append(rule)
    if mismatch(ins.shape, ins.dtype if dtypes else rule.dtype, rule, hints):
        return f"{describe(ins.shape, ins.dtype, rule)}; the file is damaged or was edited: convert the model again"
    return None


def _check_low_bit(call: Call, dtype: str, known: dict[str, Value], where: str) -> None:
    """float8/float4/int4/int2 values are stored, moved and cast, never computed on."""
    if isinstance(call, LOW_BIT_CALLS) or not call.portable:
        return
    low = [t for t in (dtype, *(known[r.name].dtype for r in call.refs() if r.name in known)) if dtypes.is_low_bit(t)]
    if low:
        raise UnsupportedOpError(f"{where}: computes on {low[0]} values; rlx only stores and casts that type")


def _check_call(call: Call, shape: Shape, dtype: str, known: dict[str, Value], where: str) -> None:
    """Cheap structural checks of a call against its declared result."""
    problem = _function_problem(call, dtype) or _axis_problem(call, shape, known) or _shape_problem(call, shape, known)
    if problem:
        raise SchemaError(f"{where}: {problem}")


def _function_problem(call: Call, dtype: str) -> str | None:
    """A cast whose target is not the declared dtype, or a function name outside the vocabulary."""
    if isinstance(call, C.Cast) and call.dtype != dtype:
        return f"casts to {call.dtype} but declares {dtype}"
    if isinstance(call, C.Binary) and call.fn not in C.BINARY_FNS:
        return f"unknown binary function {call.fn!r}"
    if isinstance(call, C.Unary) and call.fn not in C.UNARY_FNS:
        return f"unknown unary function {call.fn!r}"
    if isinstance(call, C.Special) and call.fn not in (
        C.SPECIAL_BINARY_FNS if call.y is not None else C.SPECIAL_UNARY_FNS
    ):
        return f"unknown special function {call.fn!r} of {1 if call.y is None else 2} operand(s)"
    if isinstance(call, C.Reduce) and call.fn not in C.REDUCE_FNS:
        return f"unknown reduction {call.fn!r}"
    return None


def _axis_problem(call: Call, shape: Shape, known: dict[str, Value]) -> str | None:
    """An ``axis``/``axes`` argument far outside every rank the call sees: a damaged program (a
    kernel given axis 2**31 builds an index of that length before failing: gigabytes)."""
    axes = [getattr(call, f) for f in ("axis", "axes") if hasattr(call, f)]
    flat = [a for v in axes for a in (v if isinstance(v, tuple) else (v,)) if a is not None]
    if not flat:
        return None
    rank = max([len(shape), *(len(known[r.name].shape) for r in call.refs() if r.name in known)], default=0)
    bound = max(rank, 1)
    bad = [a for a in flat if not isinstance(a, int) or not -bound - 1 <= a <= bound]
    if bad:
        return f"axis {bad[0]!r} is out of range for rank {rank}"
    return None


def _shape_problem(call: Call, shape: Shape, known: dict[str, Value]) -> str | None:
    """Where the declared shape disagrees with what the call computes from its operands."""
    if isinstance(call, C.Reshape):
        return _reshape_problem(call, shape, known[call.x.name].shape)
    if isinstance(call, C.Permute):
        src = known[call.x.name].shape
        if sorted(call.perm) != list(range(len(src))) or tuple(src[p] for p in call.perm) != shape:
            return f"permutation {list(call.perm)} of {list(src)} does not give {list(shape)}"
    if isinstance(call, (C.Full, C.Expand)) and tuple(call.shape) != shape:
        return f"produces {list(call.shape)}, declared {list(shape)}"
    if isinstance(call, C.Arange):
        return _arange_problem(call, shape)
    if isinstance(call, C.Pad):
        return _pad_problem(call, shape, known[call.x.name].shape)
    return None


def _reshape_problem(call: C.Reshape, shape: Shape, src: Shape) -> str | None:
    static_src, static_dst = static_shape(src), static_shape(shape)
    sizes_differ = static_src is not None and static_dst is not None and math.prod(static_src) != math.prod(static_dst)
    if sizes_differ or tuple(call.shape) != shape:
        return f"reshapes {list(src)} to {list(call.shape)}, declared {list(shape)}"
    return None


def _arange_problem(call: C.Arange, shape: Shape) -> str | None:
    # Only numeric bounds can be checked here; symbolic ones are checked once the inputs are bound.
    start, end, step = call.start, call.end, call.step
    if not (isinstance(start, (int, float)) and isinstance(end, (int, float)) and isinstance(step, (int, float))):
        return None
    if step == 0 or not all(math.isfinite(v) for v in (start, end, step)):
        return f"arange({start}, {end}, {step}) is not a finite range"
    n = max(0, math.ceil((end - start) / step))
    if (n,) != shape:
        return f"arange gives {n} elements, declared {list(shape)}"
    return None


def _pad_problem(call: C.Pad, shape: Shape, src: Shape) -> str | None:
    if len(call.pads) != len(src) or len(shape) != len(src):
        return f"pads {list(call.pads)} do not match rank {len(src)}"
    static_src = static_shape(src)
    pads = [(lo, hi) for lo, hi in call.pads if isinstance(lo, int) and isinstance(hi, int)]
    if static_src is not None and len(pads) == len(call.pads):
        want = tuple(d + lo + hi for d, (lo, hi) in zip(static_src, pads))
        if want != shape:
            return f"padding {list(src)} by {list(call.pads)} gives {list(want)}, declared {list(shape)}"
    return None
