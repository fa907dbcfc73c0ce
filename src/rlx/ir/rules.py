"""One shape and dtype rule per Call: the result type a Call computes from its fields and its
operands' types, as JAX declares a primitive's abstract evaluation next to it.

A rule is registered with ``@type_rule(C.MatMul)`` and receives the Call and ``t``, a function
giving any operand's ``TensorType``::

    @type_rule(C.MatMul)
    def matmul(c: C.MatMul, t: Types) -> TensorType: ...

Rules are symbolic-aware: extents may be ``Sym`` expressions (``rlx.ir.symbolic``). Where a rule
cannot decide an extent statically (a data-dependent size, two different symbols broadcast
against each other) it says ``None`` for that extent, which every check accepts: a rule never
refuses a valid program. Requirements between operands (inner dimensions of a matmul) are
checked only where both sides are known (``require``).

The shared helpers (``broadcast``, ``norm_axis``, ``promote``, ``window_out``) are the ones the
front-ends' builders are meant to use instead of their own copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rlx.errors import RlxError, SchemaError
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Call, Lit, Operand, Value
from rlx.ir.symbolic import Dim, Sym, UnboundSymbolError, eval_dim, format_shape
from rlx.ir.symbolic import add as dim_add

RuleDim = Dim | None  # None: only known at run time (data-dependent) or not decidable statically
RuleShape = tuple[RuleDim, ...]


@dataclass(frozen=True)
class TensorType:
    """The shape and dtype of a value (a rule's result may leave extents as ``None``)."""

    shape: RuleShape
    dtype: str

    def __str__(self) -> str:
        return f"{_fmt(self.shape)} {self.dtype}"


class RuleError(SchemaError):
    """A Call whose fields and operand types break its rule (inner dimensions differ, an axis out
    of range): the message says what, the caller adds where."""


class DtypeRuleError(RuleError):
    """A Call whose operands have dtypes its rule does not accept (a float index, a non-bool
    condition)."""


Types = Callable[[Operand], TensorType]
Rule = Callable[[Call, Types], TensorType]
RULES: dict[type[Call], Rule] = {}
RuleFn = TypeVar("RuleFn", bound=Callable[..., TensorType])


def type_rule(*classes: type[Call]) -> Callable[[RuleFn], RuleFn]:
    """Register the decorated function as the shape/dtype rule of each Call class in ``classes``."""

    def register(fn: RuleFn) -> RuleFn:
        twice = [cls.__name__ for cls in classes if cls in RULES]
        if twice:
            raise ValueError(f"{', '.join(twice)}: a second type rule ({fn.__name__})")
        RULES.update(dict.fromkeys(classes, fn))
        return fn

    return register


def infer(call: Call, t: Types) -> TensorType:
    """The result type ``call`` computes from its operands' types (``RuleError`` when they break
    its rule)."""
    rule = RULES.get(type(call))
    if rule is None:  # tests/ir/test_rules.py keeps every Call covered; this names a new one
        raise RuleError(f"{call.op} has no type rule (rlx.ir.rules)")
    try:
        return rule(call, t)
    except (IndexError, KeyError, ValueError, TypeError, AttributeError, ZeroDivisionError) as e:
        # A malformed call (an axis past the rank, a short tuple) reads out of range somewhere.
        raise RuleError(f"{call.op} does not fit its operands: {type(e).__name__}: {e}") from None


def operand_types(values: Mapping[str, Value]) -> Types:
    """``t`` over a table of named values; a literal is a 0-d tensor of its dtype."""

    cache: dict[str, TensorType] = {}  # loading checks every instruction: build each type once

    def t(x: Operand) -> TensorType:
        if isinstance(x, Lit):
            return TensorType((), x.dtype)
        got = cache.get(x.name)
        if got is None:
            v = values[x.name]
            got = cache[x.name] = TensorType(tuple(v.shape), v.dtype)
        return got

    return t


# ── comparing a declared type with a rule's ─────────────────────────────────
def dim_matches(declared: Dim, rule: RuleDim, hints: Mapping[str, int]) -> bool:
    """Whether a declared extent can be the one the rule gives: equal ints or expressions, or
    (spelled differently) equal at the symbols' example values; undecidable ones pass."""
    if rule is None or declared == rule:
        return True
    if isinstance(declared, int) and isinstance(rule, int):
        return False
    try:
        return eval_dim(declared, hints) == eval_dim(rule, hints)
    except (UnboundSymbolError, SchemaError, ArithmeticError, TypeError, ValueError):
        return True  # reads a size known only at run time: the run checks it


def mismatch(declared_shape: Sequence[Dim], declared_dtype: str, rule: TensorType, hints: Mapping[str, int]) -> bool:
    """Whether a declared shape/dtype disagrees with a rule's result."""
    if declared_dtype != rule.dtype or len(declared_shape) != len(rule.shape):
        return True
    if tuple(declared_shape) == rule.shape:
        return False
    return not all(dim_matches(d, r, hints) for d, r in zip(declared_shape, rule.shape))


def describe(declared_shape: Sequence[Dim], declared_dtype: str, rule: TensorType) -> str:
    return f"declares {format_shape(declared_shape)} {declared_dtype}, its rule gives {rule}"


def emit_problem(call: Call, shape: Sequence[Dim], dtype: str, t: Types, hints: Mapping[str, int]) -> str | None:
    """For a builder about to append ``call`` with the result type its handler computed: why that
    type disagrees with the Call's rule, or None when it agrees."""
    try:
        rule = infer(call, t)
    except RuleError as e:
        return str(e)
    return describe(shape, dtype, rule) if mismatch(shape, dtype, rule, hints) else None


# ── shared helpers (the front-ends use these) ────────────────────────────────
def require(ok: bool | None, message: str, error: type[RuleError] = RuleError) -> None:
    """Refuse only what is known to be wrong (``ok is None``: undecidable, accepted)."""
    if ok is False:
        raise error(message)


def same(a: RuleDim, b: RuleDim) -> bool | None:
    """Symbolic-aware equality: True, False, or None when it cannot be decided statically."""
    if a is None or b is None:
        return None
    if a == b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return False
    return None


def norm_axis(axis: int, rank: int, error: type[RlxError] = RuleError) -> int:
    """A possibly negative axis as a non-negative one (rank 0 accepts 0 and −1, as torch does)."""
    r = max(rank, 1)
    if not -r <= axis < r:
        raise error(f"axis {axis} is out of range for rank {rank}")
    return axis % r


def broadcast_dims(*shapes: Sequence[RuleDim], error: type[RlxError] = RuleError) -> RuleShape:
    """numpy/PyTorch broadcasting of shapes whose extents may be symbolic or unknown (``None``).

    Per axis: a static extent other than 1 wins (two different ones are an ``error``); otherwise a
    symbol; two different symbols give ``None`` (either may be 1 at run time)."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[RuleDim] = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        not_one = [d for d in dims if d != 1]
        static = {d for d in not_one if isinstance(d, int)}
        if len(static) > 1:
            raise error(f"shapes {' and '.join(_fmt(s) for s in shapes)} do not broadcast")
        symbolic = {d for d in not_one if not isinstance(d, int)}
        if static:
            out.append(static.pop())
        elif not not_one:
            out.append(1)
        else:
            out.append(symbolic.pop() if len(symbolic) == 1 else None)
    return tuple(out)


def broadcast(*shapes: Sequence[Dim], error: type[RlxError] = RuleError) -> tuple[Dim, ...]:
    """``broadcast_dims`` for builders, which need a Dim on every axis: of two different symbols the
    first is taken (the exporter recorded the real one; the rule check accepts either)."""
    decided = broadcast_dims(*shapes, error=error)
    out: list[Dim] = []
    for axis, d in enumerate(decided):
        if d is None:
            rank = len(decided)
            d = next(
                s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0 and s[axis - rank + len(s)] != 1
            )
        out.append(d)
    return tuple(out)


def promote(*toks: str) -> str:
    """``torch.promote_types`` folded over dtype tokens."""
    out = toks[0]
    for tok in toks[1:]:
        out = dtypes.promote_types(out, tok)
    return out


def expr(fn: Callable[..., int], fmt: str, *dims: RuleDim) -> RuleDim:
    """``fn(*dims)`` on ints; on symbolic extents the expression ``fmt`` (its ``{}`` filled with
    the extents, parenthesised); ``None`` when one is unknown."""
    if any(d is None for d in dims):
        return None
    if all(isinstance(d, int) for d in dims):
        return fn(*dims)
    return Sym(fmt.format(*(str(d) if isinstance(d, int) or str(d).isidentifier() else f"({d})" for d in dims)))


def window_out(size: RuleDim, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> RuleDim:
    """PyTorch's output extent of a conv/pool window along one axis (with its ceil_mode rule)."""
    if isinstance(size, int):
        span = size + 2 * p - d * (k - 1) - 1
        out = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside the input
            out -= 1
        return max(out, 0)
    if ceil_mode or size is None:
        return None
    return expr(lambda n: (n + 2 * p - d * (k - 1) - 1) // s + 1, f"({{}} + {2 * p - d * (k - 1) - 1})//{s} + 1", size)


def _fmt(shape: Sequence[RuleDim]) -> str:
    """``[2, s0, ?]``: a rule's shape, ``?`` where an extent is undecided."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _replace(shape: Sequence[RuleDim], axis: int, d: RuleDim) -> RuleShape:
    return (*shape[:axis], d, *shape[axis + 1 :])


def _check_int(tok: str, what: str) -> None:
    require(dtypes.is_int(tok), f"{what} must be an integer tensor, found {tok}", DtypeRuleError)


# ── elementwise ──────────────────────────────────────────────────────────────
_BOOL_UNARY = ("isnan", "isinf", "isfinite", "signbit", "logical_not")
_REAL_PART_UNARY = ("real", "imag", "abs", "angle")  # of a complex value: its part's real type
_BOOL_BINARY = ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor")


@type_rule(C.Unary)
def unary(c: C.Unary, t: Types) -> TensorType:
    x = t(c.x)
    if c.fn in _BOOL_UNARY:
        return TensorType(x.shape, "bool")
    if c.fn == "frexp_exponent":
        return TensorType(x.shape, "i32")
    if c.fn in _REAL_PART_UNARY:
        return TensorType(x.shape, dtypes.real_of(x.dtype))
    return x


@type_rule(C.Binary)
def binary(c: C.Binary, t: Types) -> TensorType:
    x, y = t(c.x), t(c.y)
    shape = broadcast_dims(x.shape, y.shape)
    if c.fn in _BOOL_BINARY:
        return TensorType(shape, "bool")
    if c.fn == "complex":
        return TensorType(shape, dtypes.complex_of(x.dtype))
    return TensorType(shape, x.dtype if x.dtype == y.dtype else promote(x.dtype, y.dtype))


@type_rule(C.Where)
def where(c: C.Where, t: Types) -> TensorType:
    cond, x, y = t(c.cond), t(c.x), t(c.y)
    require(cond.dtype == "bool", f"condition must be bool, found {cond.dtype}", DtypeRuleError)
    return TensorType(broadcast_dims(cond.shape, x.shape, y.shape), promote(x.dtype, y.dtype))


@type_rule(C.Clamp)
def clamp(c: C.Clamp, t: Types) -> TensorType:
    bounds = [t(b).shape for b in (c.lo, c.hi) if b is not None]
    x = t(c.x)
    return TensorType(broadcast_dims(x.shape, *bounds), x.dtype)


@type_rule(C.Special)
def special(c: C.Special, t: Types) -> TensorType:
    x = t(c.x)
    return TensorType(broadcast_dims(x.shape, t(c.y).shape) if c.y is not None else x.shape, x.dtype)


@type_rule(C.LeakyRelu, C.Conj, C.MatrixExp, C.Cholesky, C.Flip, C.Roll, C.IndexPut, C.Scatter)
def same_as_x(
    c: C.LeakyRelu | C.Conj | C.MatrixExp | C.Cholesky | C.Flip | C.Roll | C.IndexPut | C.Scatter, t: Types
) -> TensorType:
    return t(c.x)


@type_rule(C.Cast)
def cast(c: C.Cast, t: Types) -> TensorType:
    return TensorType(t(c.x).shape, c.dtype)


@type_rule(C.Bitcast)
def bitcast(c: C.Bitcast, t: Types) -> TensorType:
    x = t(c.x)
    a, b = dtypes.to_numpy(x.dtype).itemsize, dtypes.to_numpy(c.dtype).itemsize
    require(a == b, f"bitcast from {x.dtype} to {c.dtype} changes the width", DtypeRuleError)
    return TensorType(x.shape, c.dtype)


# ── producers ────────────────────────────────────────────────────────────────
@type_rule(C.Full)
def full(c: C.Full, t: Types) -> TensorType:
    return TensorType(tuple(c.shape), c.dtype)


@type_rule(C.Arange)
def arange(c: C.Arange, t: Types) -> TensorType:
    start, end, step = c.start, c.end, c.step
    if isinstance(start, Sym) or isinstance(end, Sym) or isinstance(step, Sym):
        if start == 0 and step == 1 and not isinstance(end, float):
            return TensorType((end,), c.dtype)
        return TensorType((None,), c.dtype)
    require(
        step != 0 and all(math.isfinite(v) for v in (start, end, step)),
        f"arange({start}, {end}, {step}) is not a finite range",
    )
    return TensorType((max(0, math.ceil((end - start) / step)),), c.dtype)


@type_rule(C.RandomBits)
def random_bits(c: C.RandomBits, t: Types) -> TensorType:
    return TensorType(tuple(c.shape), "u32")


# ── shape and data movement ──────────────────────────────────────────────────
def _numel(shape: Sequence[RuleDim]) -> int | None:
    return math.prod(d for d in shape if isinstance(d, int)) if all(isinstance(d, int) for d in shape) else None


@type_rule(C.Reshape)
def reshape(c: C.Reshape, t: Types) -> TensorType:
    x = t(c.x)
    a, b = _numel(x.shape), _numel(c.shape)
    require(
        None in (a, b) or a == b,
        f"cannot reshape {_fmt(x.shape)} ({a} elements) to {format_shape(c.shape)}",
    )
    return TensorType(tuple(c.shape), x.dtype)


@type_rule(C.Permute)
def permute(c: C.Permute, t: Types) -> TensorType:
    x = t(c.x)
    require(sorted(c.perm) == list(range(len(x.shape))), f"{list(c.perm)} is not a permutation of rank {len(x.shape)}")
    return TensorType(tuple(x.shape[p] for p in c.perm), x.dtype)


@type_rule(C.Expand)
def expand(c: C.Expand, t: Types) -> TensorType:
    x = t(c.x)
    require(len(x.shape) <= len(c.shape), f"cannot expand {_fmt(x.shape)} to {format_shape(c.shape)}")
    lead = len(c.shape) - len(x.shape)
    for d, want in zip(x.shape, c.shape[lead:]):
        require(
            d == 1 or same(d, want) is not False,
            f"cannot expand {_fmt(x.shape)} to {format_shape(c.shape)}",
        )
    return TensorType(tuple(c.shape), x.dtype)


@type_rule(C.Slice)
def slice_(c: C.Slice, t: Types) -> TensorType:
    x = t(c.x)
    require(c.step >= 1, f"slice step must be positive, found {c.step}")
    require(c.axis < len(x.shape), f"axis {c.axis} is out of range for rank {len(x.shape)}")
    step, size = c.step, x.shape[c.axis]
    if isinstance(size, int) and isinstance(c.start, int) and isinstance(c.stop, int):
        return TensorType(_replace(x.shape, c.axis, len(range(*slice(c.start, c.stop, step).indices(size)))), x.dtype)
    # Symbolic extents come with Python's bounds (a stop of 2**63 - 1 for "to the end", a negative
    # start counted from the end), as the kernels slice: clamp them to the axis.
    start, stop = _slice_bound(c.start, size), _slice_bound(c.stop, size)
    n = expr(lambda a, b: max(0, -((a - b) // step)), f"Max(0, -(({{}} - {{}})//{step}))", start, stop)
    return TensorType(_replace(x.shape, c.axis, n), x.dtype)


def _slice_bound(v: Dim, size: RuleDim) -> RuleDim:
    """A slice bound as Python reads it on an axis of ``size``: negative counts from the end."""
    if isinstance(v, int) and v < 0:
        return expr(lambda n: max(0, n + v), f"Max(0, {{}} - {-v})", size)
    return _min(v, size)


@type_rule(C.Concat)
def concat(c: C.Concat, t: Types) -> TensorType:
    parts = [t(x) for x in c.xs]
    require(bool(parts), "concatenates nothing")
    first = parts[0]
    require(c.axis < len(first.shape), f"axis {c.axis} is out of range for rank {len(first.shape)}")
    total: RuleDim = 0
    for p in parts:
        require(len(p.shape) == len(first.shape), "concatenates tensors of different ranks")
        require(p.dtype == first.dtype, f"concatenates {first.dtype} with {p.dtype}", DtypeRuleError)
        for k, (a, b) in enumerate(zip(p.shape, first.shape)):
            require(
                k == c.axis or same(a, b) is not False,
                f"extents differ off the axis: {_fmt(first.shape)} and {_fmt(p.shape)}",
            )
        d = p.shape[c.axis]
        total = None if total is None or d is None else dim_add(total, d)
    return TensorType(_replace(first.shape, c.axis, total), first.dtype)


@type_rule(C.Pad)
def pad(c: C.Pad, t: Types) -> TensorType:
    x = t(c.x)
    require(len(c.pads) == len(x.shape), f"{len(c.pads)} pads for rank {len(x.shape)}")
    shape = tuple(None if d is None else dim_add(dim_add(d, lo), hi) for d, (lo, hi) in zip(x.shape, c.pads))
    return TensorType(shape, x.dtype)


@type_rule(C.IndexSelect)
def index_select(c: C.IndexSelect, t: Types) -> TensorType:
    x, index = t(c.x), t(c.index)
    _check_int(index.dtype, "the index")
    require(c.axis < len(x.shape), f"axis {c.axis} is out of range for rank {len(x.shape)}")
    return TensorType((*x.shape[: c.axis], *index.shape, *x.shape[c.axis + 1 :]), x.dtype)


@type_rule(C.Gather)
def gather(c: C.Gather, t: Types) -> TensorType:
    x, index = t(c.x), t(c.index)
    _check_int(index.dtype, "the index")
    require(len(index.shape) == len(x.shape), f"index rank {len(index.shape)} differs from rank {len(x.shape)}")
    return TensorType(index.shape, x.dtype)


def _indexed(x: TensorType, indices: Sequence[TensorType | None]) -> RuleShape:
    """numpy's advanced indexing: the index shapes broadcast together (a bool mask stands for its
    ``True`` positions, a count known only at run time) replace the axes they index, in place when
    the indices are adjacent, else at the front."""
    widths = [1 if i is None or i.dtype != "bool" else len(i.shape) for i in indices]
    require(sum(widths) <= len(x.shape), f"{len(indices)} indices for rank {len(x.shape)}")
    used = [k for k, i in enumerate(indices) if i is not None]
    if not used:
        return x.shape
    picked = broadcast_dims(*((None,) if i.dtype == "bool" else i.shape for i in indices if i is not None))
    first, span = sum(widths[: used[0]]), sum(widths[k] for k in used)
    if used == list(range(used[0], used[-1] + 1)):
        return (*x.shape[:first], *picked, *x.shape[first + span :])
    starts = [sum(widths[:k]) for k in range(len(indices))]
    kept = [x.shape[starts[k]] for k, i in enumerate(indices) if i is None]
    return (*picked, *kept, *x.shape[sum(widths) :])


@type_rule(C.Index)
def index(c: C.Index, t: Types) -> TensorType:
    x = t(c.x)
    return TensorType(_indexed(x, [None if i is None else t(i) for i in c.indices]), x.dtype)


@type_rule(C.Diagonal)
def diagonal(c: C.Diagonal, t: Types) -> TensorType:
    x = t(c.x)
    a, b, off = x.shape[c.axis1], x.shape[c.axis2], c.offset
    if off >= 0:
        n = expr(lambda p, q: max(0, min(p, q - off)), f"Max(0, Min({{}}, {{}} - {off}))", a, b)
    else:
        n = expr(lambda p, q: max(0, min(p + off, q)), f"Max(0, Min({{}} - {-off}, {{}}))", a, b)
    kept = tuple(d for k, d in enumerate(x.shape) if k not in (c.axis1, c.axis2))
    return TensorType((*kept, n), x.dtype)


# ── linear algebra ───────────────────────────────────────────────────────────
def matmul_shape(a: RuleShape, b: RuleShape) -> RuleShape:
    """``numpy.matmul``'s result shape (1-d operands promoted and their axis dropped)."""
    require(len(a) >= 1 and len(b) >= 1, "matmul of a 0-d tensor")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    require(
        same(a2[-1], b2[-2]) is not False,
        f"inner dimensions differ: {_fmt(a)} @ {_fmt(b)}",
    )
    out = (*broadcast_dims(a2[:-2], b2[:-2]), a2[-2], b2[-1])
    if len(a) == 1:
        out = (*out[:-2], out[-1])
    if len(b) == 1:
        out = out[:-1]
    return out


@type_rule(C.MatMul)
def matmul(c: C.MatMul, t: Types) -> TensorType:
    x, y = t(c.x), t(c.y)
    return TensorType(matmul_shape(x.shape, y.shape), x.dtype)


@type_rule(C.Linear)
def linear(c: C.Linear, t: Types) -> TensorType:
    x, w = t(c.x), t(c.weight)
    require(len(w.shape) == 2, f"weight must be 2-d, found {_fmt(w.shape)}")
    require(
        same(x.shape[-1], w.shape[1]) is not False,
        f"inner dimensions differ: {_fmt(x.shape)} and weight {_fmt(w.shape)}",
    )
    return TensorType((*x.shape[:-1], w.shape[0]), x.dtype)


@type_rule(C.GroupedMatMul)
def grouped_matmul(c: C.GroupedMatMul, t: Types) -> TensorType:
    x, w = t(c.x), t(c.w)
    return TensorType((x.shape[0], w.shape[-1]), x.dtype)


def _mat(x: TensorType) -> tuple[RuleShape, RuleDim, RuleDim]:
    require(len(x.shape) >= 2, f"expects matrices in the last two axes, found {_fmt(x.shape)}")
    return x.shape[:-2], x.shape[-2], x.shape[-1]


def _min(a: RuleDim, b: RuleDim) -> RuleDim:
    return expr(min, "Min({}, {})", a, b)


@type_rule(C.Svd)
def svd(c: C.Svd, t: Types) -> TensorType:
    x = t(c.x)
    batch, m, n = _mat(x)
    k = _min(m, n)
    shapes = {"u": (m, m if c.full_matrices else k), "s": (k,), "vh": (n if c.full_matrices else k, n)}
    return TensorType((*batch, *shapes[c.part]), dtypes.real_of(x.dtype) if c.part == "s" else x.dtype)


@type_rule(C.Det)
def det(c: C.Det, t: Types) -> TensorType:
    x = t(c.x)
    return TensorType(_mat(x)[0], x.dtype)


@type_rule(C.LuFactor)
def lu_factor(c: C.LuFactor, t: Types) -> TensorType:
    x = t(c.x)
    batch, m, n = _mat(x)
    return {"lu": x, "pivots": TensorType((*batch, _min(m, n)), "i32"), "info": TensorType(batch, "i32")}[c.part]


@type_rule(C.LuPermutation)
def lu_permutation(c: C.LuPermutation, t: Types) -> TensorType:
    return TensorType((*t(c.pivots).shape[:-1], c.size), "i64")


def _solve(a: TensorType, b: TensorType) -> TensorType:
    batch_a, _, _ = _mat(a)
    batch_b, m, n = _mat(b)
    return TensorType((*broadcast_dims(batch_a, batch_b), m, n), b.dtype)


@type_rule(C.TriangularSolve)
def triangular_solve(c: C.TriangularSolve, t: Types) -> TensorType:
    return _solve(t(c.a), t(c.b))


@type_rule(C.LdlSolve)
def ldl_solve(c: C.LdlSolve, t: Types) -> TensorType:
    return _solve(t(c.ld), t(c.b))


@type_rule(C.Qr)
def qr(c: C.Qr, t: Types) -> TensorType:
    x = t(c.x)
    batch, m, n = _mat(x)
    k = _min(m, n)
    shape = (m, m if c.complete else k) if c.part == "q" else (m if c.complete else k, n)
    return TensorType((*batch, *shape), x.dtype)


@type_rule(C.Eigh)
def eigh(c: C.Eigh, t: Types) -> TensorType:
    x = t(c.x)
    batch, _, n = _mat(x)
    return TensorType((*batch, n), dtypes.real_of(x.dtype)) if c.part == "values" else x


@type_rule(C.Geqrf)
def geqrf(c: C.Geqrf, t: Types) -> TensorType:
    x = t(c.x)
    batch, m, n = _mat(x)
    return x if c.part == "a" else TensorType((*batch, _min(m, n)), x.dtype)


@type_rule(C.Eig)
def eig(c: C.Eig, t: Types) -> TensorType:
    x = t(c.x)
    batch, _, n = _mat(x)
    dtype = dtypes.complex_of(x.dtype)
    return TensorType((*batch, n), dtype) if c.part == "values" else TensorType(x.shape, dtype)


@type_rule(C.LdlFactor)
def ldl_factor(c: C.LdlFactor, t: Types) -> TensorType:
    x = t(c.x)
    batch, _, n = _mat(x)
    return {"ld": x, "pivots": TensorType((*batch, n), "i32"), "info": TensorType(batch, "i32")}[c.part]


# ── reductions ───────────────────────────────────────────────────────────────
def reduced_shape(shape: Sequence[RuleDim], axes: Sequence[int], keepdim: bool) -> RuleShape:
    """``shape`` reduced over ``axes`` (every axis when empty; a 0-d tensor stays 0-d)."""
    every = set(range(len(shape))) if not axes else set(axes)
    require(
        all(0 <= a < max(len(shape), 1) for a in every), f"axes {list(axes)} are out of range for rank {len(shape)}"
    )
    if keepdim:
        return tuple(1 if k in every else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in every)


@type_rule(C.Reduce)
def reduce(c: C.Reduce, t: Types) -> TensorType:
    x = t(c.x)
    return TensorType(reduced_shape(x.shape, c.axes, c.keepdim), x.dtype)


@type_rule(C.ReduceAxes)
def reduce_axes(c: C.ReduceAxes, t: Types) -> TensorType:
    x, axes = t(c.x), t(c.dims)
    require(len(axes.shape) == 1 and axes.dtype in ("i64", "i32"), f"axes must be 1-d integers, found {axes}")
    require(c.fn in ("sum", "mean", "prod", "amax", "amin"), f"unknown reduction {c.fn!r}")
    if c.keepdim:  # an axis of extent 1 stays 1 whether it is reduced or not; the others are the data's
        return TensorType(tuple(1 if d == 1 else None for d in x.shape), x.dtype)
    n = axes.shape[0]
    require(isinstance(n, int) and n <= len(x.shape), f"{n} axes of a rank-{len(x.shape)} input")
    assert isinstance(n, int)
    return TensorType((None,) * (len(x.shape) - n), x.dtype)


@type_rule(C.ArgReduce)
def arg_reduce(c: C.ArgReduce, t: Types) -> TensorType:
    x = t(c.x)
    if c.axis is None or not x.shape:
        return TensorType((1,) * len(x.shape) if c.keepdim else (), "i64")
    return TensorType(reduced_shape(x.shape, (c.axis,), c.keepdim), "i64")


# ── neural-network blocks ────────────────────────────────────────────────────
@type_rule(C.Softmax, C.LayerNorm, C.RmsNorm, C.BatchNorm, C.GroupNorm)
def normalised(c: C.Softmax | C.LayerNorm | C.RmsNorm | C.BatchNorm | C.GroupNorm, t: Types) -> TensorType:
    return t(c.x)


@type_rule(C.Conv)
def conv(c: C.Conv, t: Types) -> TensorType:
    x, w = t(c.x), t(c.weight)
    nd = len(w.shape) - 2
    require(
        len(x.shape) == nd + 2,
        f"input {_fmt(x.shape)} does not fit weight {_fmt(w.shape)}",
    )
    spatial: list[RuleDim] = []
    for k, size in enumerate(x.shape[2:]):
        kernel = w.shape[2 + k]
        if not isinstance(kernel, int):
            spatial.append(None)
            continue
        s, p, d = c.stride[k], c.padding[k], c.dilation[k]
        if c.transposed:
            op = c.output_padding[k] if c.output_padding else 0
            extra = d * (kernel - 1) + op + 1 - 2 * p
            spatial.append(_transposed_out(size, s, extra))
        else:
            spatial.append(window_out(size, kernel, s, p, d))
    out_ch = expr(lambda a: a * c.groups, f"{{}}*{c.groups}", w.shape[1]) if c.transposed else w.shape[0]
    return TensorType((x.shape[0], out_ch, *spatial), x.dtype)


def _transposed_out(size: RuleDim, stride: int, extra: int) -> RuleDim:
    """A transposed convolution's extent: ``(size - 1)·stride + dilation·(k - 1) + output_padding + 1 - 2·padding``."""
    return expr(lambda n: (n - 1) * stride + extra, f"({{}} - 1)*{stride} + {extra}", size)


def _pooled(
    x: TensorType,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
) -> RuleShape:
    nd = len(kernel)
    require(len(x.shape) >= nd, f"pools {nd} axes of {_fmt(x.shape)}")
    lead = len(x.shape) - nd
    out = (window_out(x.shape[lead + k], kernel[k], stride[k], padding[k], dilation[k], ceil_mode) for k in range(nd))
    return (*x.shape[:lead], *out)


@type_rule(C.MaxPool)
def max_pool(c: C.MaxPool, t: Types) -> TensorType:
    x = t(c.x)
    shape = _pooled(x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    return TensorType(shape, "i64" if c.indices else x.dtype)


@type_rule(C.AvgPool)
def avg_pool(c: C.AvgPool, t: Types) -> TensorType:
    x = t(c.x)
    return TensorType(_pooled(x, c.kernel, c.stride, c.padding, (1,) * len(c.kernel), c.ceil_mode), x.dtype)


def _resized(x: TensorType, size: Sequence[Dim]) -> TensorType:
    """``x`` with its trailing ``len(size)`` (spatial) axes resized to ``size``."""
    return TensorType((*x.shape[: len(x.shape) - len(size)], *size), x.dtype)


@type_rule(C.AdaptiveAvgPool)
def adaptive_avg_pool(c: C.AdaptiveAvgPool, t: Types) -> TensorType:
    return _resized(t(c.x), c.output_size)


@type_rule(C.Attention)
def attention(c: C.Attention, t: Types) -> TensorType:
    q, k, v = t(c.q), t(c.k), t(c.v)
    require(
        same(q.shape[-1], k.shape[-1]) is not False, f"query width {q.shape[-1]} differs from key width {k.shape[-1]}"
    )
    return TensorType((*q.shape[:-1], v.shape[-1]), q.dtype)


# Gates per cell and activation functions per direction, as ONNX defines them.
RECURRENT_CELLS = {"rnn": (1, 1), "gru": (3, 2), "lstm": (4, 3)}


@type_rule(C.Recurrent)
def recurrent(c: C.Recurrent, t: Types) -> TensorType:
    x, w, r = t(c.x), t(c.w), t(c.r)
    require(c.cell in RECURRENT_CELLS, f"unknown cell {c.cell!r}")
    gates, per = RECURRENT_CELLS[c.cell]
    dirs = 2 if c.direction == "bidirectional" else 1
    require(len(x.shape) == 3 and len(w.shape) == 3 and len(r.shape) == 3, "x, w and r must be 3-d")
    require(same(w.shape[0], dirs) is not False, f"w has {w.shape[0]} directions, {c.direction} needs {dirs}")
    require(same(w.shape[1], gates * c.hidden) is not False, f"w has {w.shape[1]} rows, not {gates} x {c.hidden}")
    require(same(w.shape[2], x.shape[2]) is not False, f"w takes {w.shape[2]} inputs, x has {x.shape[2]}")
    require(same(r.shape[2], c.hidden) is not False, f"r takes {r.shape[2]} inputs, not hidden {c.hidden}")
    n = per * dirs
    require(
        len(c.activations) == len(c.alphas) == len(c.betas) == n,
        f"{len(c.activations)} activations, {len(c.alphas)} alphas, {len(c.betas)} betas; {c.cell} x {dirs} needs {n}",
    )
    steps = None if x.shape[0] is None else dim_add(x.shape[0], 2)
    return TensorType((steps, dirs, x.shape[1], c.hidden), x.dtype)


# ── resampling ───────────────────────────────────────────────────────────────
@type_rule(C.Upsample)
def upsample(c: C.Upsample, t: Types) -> TensorType:
    return _resized(t(c.x), c.size)


@type_rule(C.GridSample)
def grid_sample(c: C.GridSample, t: Types) -> TensorType:
    x, grid = t(c.x), t(c.grid)
    return TensorType((x.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)


# ── ordering and scans ───────────────────────────────────────────────────────
@type_rule(C.ArgTopK)
def arg_top_k(c: C.ArgTopK, t: Types) -> TensorType:
    x = t(c.x)
    return TensorType(_replace(x.shape, c.axis, c.k) if x.shape else (), "i64")


@type_rule(C.ArgSort)
def arg_sort(c: C.ArgSort, t: Types) -> TensorType:
    return TensorType(t(c.x).shape, "i64")


@type_rule(C.SearchSorted)
def search_sorted(c: C.SearchSorted, t: Types) -> TensorType:
    return TensorType(t(c.values).shape, "i64")


@type_rule(C.CumReduce)
def cum_reduce(c: C.CumReduce, t: Types) -> TensorType:
    x = t(c.x)
    return TensorType(x.shape, "i64") if c.indices else x


# ── selection: results whose size depends on the data ─────────────────────────
@type_rule(C.Nonzero)
def nonzero(c: C.Nonzero, t: Types) -> TensorType:
    return TensorType((None, len(t(c.x).shape)), "i64")


@type_rule(C.NonzeroStatic)
def nonzero_static(c: C.NonzeroStatic, t: Types) -> TensorType:
    return TensorType((c.size, len(t(c.x).shape)), "i64")


@type_rule(C.MaskedSelect)
def masked_select(c: C.MaskedSelect, t: Types) -> TensorType:
    return TensorType((None,), t(c.x).dtype)


@type_rule(C.Unique)
def unique(c: C.Unique, t: Types) -> TensorType:
    x = t(c.x)
    if c.part == "values":
        return TensorType((None,) if c.axis is None else _replace(x.shape, c.axis, None), x.dtype)
    if c.part == "inverse":
        return TensorType(x.shape if c.axis is None else (x.shape[c.axis],), "i64")
    return TensorType((None,), "i64")


@type_rule(C.NonMaxSuppression)
def non_max_suppression(c: C.NonMaxSuppression, t: Types) -> TensorType:
    return TensorType((None, 3), "i64")


@type_rule(C.Bincount)
def bincount(c: C.Bincount, t: Types) -> TensorType:
    return TensorType((None,), "i64" if c.weights is None else t(c.weights).dtype)


@type_rule(C.Histc)
def histc(c: C.Histc, t: Types) -> TensorType:
    return TensorType((c.bins,), t(c.x).dtype)


# ── spectral ─────────────────────────────────────────────────────────────────
@type_rule(C.Fft)
def fft(c: C.Fft, t: Types) -> TensorType:
    x = t(c.x)
    if c.kind == "c2c":
        return TensorType(x.shape, x.dtype if dtypes.is_complex(x.dtype) else dtypes.complex_of(x.dtype))
    last = c.axes[-1] if c.axes else len(x.shape) - 1
    if c.kind == "r2c":
        n = expr(lambda d: d // 2 + 1, "{}//2 + 1", x.shape[last]) if c.onesided else x.shape[last]
        return TensorType(_replace(x.shape, last, n), dtypes.complex_of(x.dtype))
    require(c.last_size is not None, "a c2r transform needs last_size")
    return TensorType(_replace(x.shape, last, c.last_size), dtypes.real_of(x.dtype))


__all__ = [
    "RULES",
    "DtypeRuleError",
    "RuleError",
    "TensorType",
    "Types",
    "broadcast",
    "broadcast_dims",
    "infer",
    "matmul_shape",
    "norm_axis",
    "operand_types",
    "promote",
    "reduced_shape",
    "require",
    "same",
    "type_rule",
    "window_out",
]
