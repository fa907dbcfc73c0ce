"""Symbolic dimensions: shapes whose extents are expressions over the input symbols.

A dimension is an ``int`` or a ``Sym`` holding an expression string exactly as torch.export's
SymInts print it (``s0*s1``, ``2*seq``, ``(seq//2)``, ``Max(1, seq - 1)``). Expressions are
recorded, never re-derived, and evaluated with a small safe evaluator (no ``eval``): names,
integers, arithmetic, comparisons and a handful of sympy functions.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rlx.errors import SchemaError


class UnboundSymbolError(SchemaError, KeyError):
    """An expression reads a symbol nothing binds (a damaged symbol table, or a data-dependent size
    read before the instruction that produces it). A ``KeyError`` too, for callers that skip such
    expressions."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Sym:
    """A symbolic integer expression over input symbols."""

    expr: str

    def __str__(self) -> str:
        return self.expr


Dim = int | Sym
Shape = tuple[Dim, ...]


@dataclass(frozen=True)
class Symbol:
    """An input symbol with its range (inclusive) and the extent it had in the example."""

    name: str
    min: int
    max: int | None
    hint: int


_FUNCS: dict[str, Callable[..., Any]] = {
    "Max": max,
    "Min": min,
    "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b,
    "FloorDiv": lambda a, b: a // b,
    "CeilDiv": lambda a, b: -(-a // b),
    "floor": math.floor,
    "ceiling": math.ceil,
    "FloorToInt": math.floor,
    "CeilToInt": math.ceil,
    "TruncToInt": math.trunc,
    "IntTrueDiv": lambda a, b: a / b,
    "ToFloat": float,
    "Abs": abs,
    "Eq": lambda a, b: a == b,
    "Ne": lambda a, b: a != b,
    "And": lambda *a: all(a),
    "Or": lambda *a: any(a),
    "Not": lambda a: not a,
}
_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
    ast.BitAnd: lambda a, b: a and b,
    ast.BitOr: lambda a, b: a or b,
}
_CMPOPS = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}


@lru_cache(maxsize=4096)
def parse(expr: str) -> ast.Expression:
    """Parse and check an expression: only the node types the evaluator knows are accepted."""
    if len(expr) > 10_000:
        raise SchemaError(f"symbolic expression too long ({len(expr)} characters)")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise SchemaError(f"invalid symbolic expression {expr!r}") from None
    for node in ast.walk(tree):
        ok = (
            isinstance(
                node,
                (
                    ast.Expression,
                    ast.Name,
                    ast.Load,
                    ast.BinOp,
                    ast.UnaryOp,
                    ast.USub,
                    ast.UAdd,
                    ast.Not,
                    ast.Compare,
                    ast.BoolOp,
                    ast.And,
                    ast.Or,
                    ast.Call,
                ),
            )
            or type(node) in _BINOPS
            or (type(node) in _CMPOPS)
        )
        if isinstance(node, ast.Constant):
            ok = isinstance(node.value, (int, float, bool))
        if isinstance(node, ast.Call):
            ok = isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords
        if not ok:
            raise SchemaError(f"symbolic expression {expr!r}: {type(node).__name__} is not allowed")
    return tree


def names(expr: str) -> set[str]:
    """The symbols an expression reads."""
    tree = parse(expr)
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate(expr: str, bindings: Mapping[str, int]) -> Any:
    """Evaluate ``expr`` with the symbols bound (raises ``UnboundSymbolError``, a ``KeyError``,
    for an unbound symbol)."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in bindings:
                raise UnboundSymbolError(
                    f"symbolic size {expr} reads {node.id}, which no input or earlier result binds"
                )
            return bindings[node.id]
        if isinstance(node, ast.BinOp):
            return _binop(expr, node.op, ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else (not v if isinstance(node.op, ast.Not) else v)
        if isinstance(node, ast.Compare):
            return _compare(ev(node.left), [(op, ev(r)) for op, r in zip(node.ops, node.comparators)])
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # parse() admits no other callee
            args = [ev(a) for a in node.args]
            try:
                return _FUNCS[node.func.id](*args)
            except (ZeroDivisionError, OverflowError, TypeError, ValueError) as e:
                # A damaged file can hand Max() no argument, FloorDiv a zero, floor() an inf.
                raise SchemaError(f"symbolic size {expr}: {node.func.id}{tuple(args)} fails ({e})"[:300]) from None
        raise SchemaError(f"cannot evaluate {ast.dump(node)}")

    return ev(parse(expr))


MAX_EXPONENT = 64  # sizes are products of extents; a larger power is a damaged file (and 2**10**9 never ends)


def _binop(expr: str, op: ast.operator, a: Any, b: Any) -> Any:
    """One arithmetic step of a size expression; a division by zero, a huge power or an overflow
    is the file's fault and says which expression did it (sizes come from files: Reshape
    ``allowzero`` with a -1 over a zero extent divides by zero)."""
    if isinstance(op, ast.Pow) and (abs(b) > MAX_EXPONENT if isinstance(b, (int, float)) else True):
        raise SchemaError(f"symbolic size {expr}: exponent {b!r} is out of range"[:300])
    try:
        return _BINOPS[type(op)](a, b)
    except ZeroDivisionError:
        raise SchemaError(f"symbolic size {expr}: division by zero (with {a} / {b})"[:300]) from None
    except (OverflowError, TypeError, ValueError) as e:
        raise SchemaError(f"symbolic size {expr}: cannot compute {a!r} {type(op).__name__} {b!r} ({e})"[:300]) from None


def _compare(left: Any, rest: list[tuple[ast.cmpop, Any]]) -> bool:
    """A chained comparison ``a < b <= c`` (every operand evaluated, as the expressions are pure)."""
    for op, right in rest:
        if not _CMPOPS[type(op)](left, right):
            return False
        left = right
    return True


def _lookup(expr: str, name: str, bindings: Mapping[str, int]) -> int:
    if name not in bindings:
        raise UnboundSymbolError(f"symbolic size {expr} reads {name}, which no input or earlier result binds")
    return bindings[name]


def eval_dim(d: Dim, bindings: Mapping[str, int]) -> int:
    if isinstance(d, int):
        return d
    value = evaluate(d.expr, bindings)
    if isinstance(value, float):
        if not value.is_integer():
            raise SchemaError(f"symbolic dimension {d.expr} evaluated to the non-integer {value}")
        value = int(value)
    return int(value)


def partial_dim(d: Dim, bindings: Mapping[str, int]) -> Dim:
    """``d`` with the bound symbols substituted: an int once every symbol it reads is bound, else
    the rest of the expression (``u0*s0`` with ``s0=3`` → ``u0*3``), to be finished at run time
    when a data-dependent size (``u0``) is known."""
    if isinstance(d, int):
        return d
    free = names(d.expr)
    if free <= bindings.keys():
        return eval_dim(d, bindings)
    if not free & bindings.keys():
        return d

    class Substitute(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return ast.Constant(bindings[node.id]) if node.id in bindings and node.id in free else node

    return Sym(ast.unparse(Substitute().visit(ast.parse(d.expr, mode="eval"))))


def eval_shape(shape: Sequence[Dim], bindings: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(eval_dim(d, bindings) for d in shape)


def is_static(shape: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in shape)


def static_shape(shape: Sequence[Dim]) -> tuple[int, ...] | None:
    """``shape`` as ints (the typed form of ``is_static``), or None when some extent is symbolic."""
    out = tuple(d for d in shape if isinstance(d, int))
    return out if len(out) == len(shape) else None


def _wrap(d: Dim) -> str:
    return str(d) if isinstance(d, int) or d.expr.isidentifier() else f"({d.expr})"


def _combine(
    a: Dim, b: Dim, fold: Callable[[int, int], int], sign: str, right_unit: int | None, left_unit: int | None = None
) -> Dim:
    """``a sign b``: an int when both are, the other operand where one is the operation's unit
    (``right_unit``: ``a + 0``, ``a*1``; ``left_unit``: ``0 + b``, ``1*b``), else an expression."""
    if isinstance(a, int) and isinstance(b, int):
        return fold(a, b)
    if right_unit is not None and b == right_unit:
        return a
    if left_unit is not None and a == left_unit:
        return b
    return Sym(f"{_wrap(a)}{sign}{_wrap(b)}")


def add(a: Dim, b: Dim) -> Dim:
    return _combine(a, b, operator.add, " + ", 0, 0)


def mul(a: Dim, b: Dim) -> Dim:
    return _combine(a, b, operator.mul, "*", 1, 1)


def mod(a: Dim, b: Dim) -> Dim:
    return _combine(a, b, operator.mod, " % ", None)


def sub(a: Dim, b: Dim) -> Dim:
    return _combine(a, b, operator.sub, " - ", 0)


def floordiv(a: Dim, b: Dim) -> Dim:
    return _combine(a, b, operator.floordiv, "//", 1)


def ceildiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    if b == 1:
        return a
    return Sym(f"CeilDiv({a}, {b})")


def maximum(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return a if a == b else Sym(f"Max({a}, {b})")


def minimum(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return a if a == b else Sym(f"Min({a}, {b})")


def scale_floor(d: Dim, scale: float) -> Dim:
    """``floor(d * scale)``, an output extent from a scale factor (Resize, Upsample)."""
    if isinstance(d, int):
        return math.floor(d * scale)
    if float(scale).is_integer():
        return mul(d, int(scale))
    return Sym(f"floor({_wrap(d)}*{float(scale)!r})")


def conv_out(size: Dim, kernel: int, stride: int, dilation: int, pad: Dim, ceil: bool = False) -> Dim:
    """The output extent of a window op: ``(size + pad - span) / stride + 1``, rounded down (up with
    ``ceil``), where ``pad`` is the total padding of the axis and ``span = (kernel - 1)·dilation + 1``."""
    num = sub(add(size, pad), (kernel - 1) * dilation + 1)
    return add((ceildiv if ceil else floordiv)(num, stride), 1)


def same_pads(size: Dim, kernel: int, stride: int, dilation: int, upper: bool) -> tuple[Dim, Dim]:
    """(before, after) padding of ``auto_pad`` SAME_UPPER / SAME_LOWER (TensorFlow's "SAME"): the
    output has ``ceil(size / stride)`` elements; the odd one of an odd total goes after (UPPER) or
    before (LOWER)."""
    span = (kernel - 1) * dilation + 1
    total = maximum(sub(add(mul(sub(ceildiv(size, stride), 1), stride), span), size), 0)
    if stride == 1:  # the total is span - 1 whatever the size: keep it an int
        total = span - 1
    small = floordiv(total, 2)
    big = sub(total, small)
    return (small, big) if upper else (big, small)


def numel(shape: Sequence[Dim]) -> Dim:
    out: Dim = 1
    for d in shape:
        out = mul(out, d)
    return out


def dim_json(d: Dim) -> int | str:
    """Shapes in JSON: ints stay ints, symbolic extents are their expression strings."""
    return d if isinstance(d, int) else d.expr


def dim_from_json(v: Any, where: str) -> Dim:
    if isinstance(v, int) and not isinstance(v, bool):
        if v < 0:
            raise SchemaError(f"{where}: dimension must be non-negative, found {v}")
        return v
    if isinstance(v, str):
        parse(v)
        return Sym(v)
    raise SchemaError(f"{where}: dimension must be an int or an expression string, found {v!r}")


def format_shape(shape: Sequence[Dim]) -> str:
    """``[batch, seq*2, 64]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def format_symbol(s: Symbol) -> str:
    hi = "" if s.max is None else str(s.max)
    return f"{s.name} in {s.min}..{hi} (example {s.hint})"
