"""What the aten and ONNX front-ends' builders share: the type of every value so far, and appending
an instruction that is held to its Call's shape/dtype rule (``rlx.ir.rules``).

A front-end's builder says where it is (the node being lowered, for error messages), how a new
result is named and which source node an instruction records; the rest is here, once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar, overload

from rlx.errors import LoweringError, RlxError
from rlx.ir import dtypes
from rlx.ir.calls import Cast
from rlx.ir.program import Call, Instr, Lit, Operand, Program, Ref, Value
from rlx.ir.rules import emit_problem, operand_types
from rlx.ir.symbolic import Dim, Shape, Sym

T = TypeVar("T")


class InstrBuilder:
    """Collects the instructions of the node being lowered into ``program``."""

    def __init__(self, program: Program, info: dict[str, Value], hints: dict[str, int]) -> None:
        self.program = program
        self.info = info  # every value's type, by name
        self.hints = hints  # each symbol's example extent (the rules evaluate symbolic sizes with it)
        self._names: set[str] = set(info)
        self._emitted: list[Instr] = []

    # ── what a front-end says about itself ──────────────────────────────────
    def where(self) -> str:
        """The node being lowered, as an error message names it."""
        raise NotImplementedError

    def fresh_name(self) -> str:
        """A name for the next result, not taken yet (and now taken)."""
        raise NotImplementedError

    def origin(self) -> str:
        """The source node an instruction records."""
        raise NotImplementedError

    def detail(self, e: Exception) -> str:
        """How an error a handler trips over is quoted in the one-line message."""
        return str(e)

    def integer(self, value: bool | int | float, dtype: str) -> int:
        """The value a literal of the integer ``dtype`` holds for ``value``."""
        return int(value)

    def scalar_as(self, value: bool | int | float, dtype: str) -> bool | int | float:
        """A literal's value converted to ``dtype`` by a Cast (``lit`` then types it)."""
        return value

    def lit(self, value: bool | int | float | Sym, dtype: str) -> Lit:
        """``value`` as a literal of ``dtype`` (a symbolic size stays symbolic)."""
        if isinstance(value, Sym):
            return Lit(value, dtype)
        if dtypes.is_float(dtype):
            return Lit(float(value), dtype)
        if dtype == "bool":
            return Lit(bool(value), dtype)
        return Lit(self.integer(value, dtype), dtype)

    # ── types ────────────────────────────────────────────────────────────────
    def shape(self, x: Operand) -> Shape:
        return () if isinstance(x, Lit) else self.info[x.name].shape

    def dtype(self, x: Operand) -> str:
        return x.dtype if isinstance(x, Lit) else self.info[x.name].dtype

    def rank(self, x: Operand) -> int:
        return len(self.shape(x))

    # ── emitting ─────────────────────────────────────────────────────────────
    def emit(self, call: Call, shape: Sequence[Dim], dtype: str) -> Ref:
        """Append ``call`` with the result type its handler computed, and return its result."""
        # Every handler's hand-computed type is held to the Call's rule, so the lowerings and the
        # rules check each other on every conversion.
        problem = emit_problem(call, shape, dtype, operand_types(self.info), self.hints)
        if problem:
            raise LoweringError(f"{self.where()}: {call.op} {problem}")
        name = self.fresh_name()
        ins = Instr(name, call, tuple(d if isinstance(d, Sym) else int(d) for d in shape), dtype, self.origin(), "")
        self._emitted.append(ins)
        self.info[name] = Value(name, ins.shape, dtype)
        return Ref(name)

    # A tensor stays a tensor (it is returned as is or cast by a new instruction), so handlers
    # that cast a Ref can pass the result on to Calls whose fields only accept a Ref.
    @overload
    def cast(self, x: Ref, dtype: str) -> Ref: ...
    @overload
    def cast(self, x: Lit, dtype: str) -> Lit: ...
    @overload
    def cast(self, x: Operand, dtype: str) -> Operand: ...
    def cast(self, x: Operand, dtype: str) -> Operand:
        """``x`` in ``dtype``; literals are converted in place, tensors get a Cast when needed."""
        if self.dtype(x) == dtype:
            return x
        if isinstance(x, Lit):
            return Lit(x.value, dtype) if isinstance(x.value, Sym) else self.lit(self.scalar_as(x.value, dtype), dtype)
        return self.emit(Cast(x, dtype), self.shape(x), dtype)

    # ── lowering one node ────────────────────────────────────────────────────
    def collect(self, handler: Callable[[], T]) -> T:
        """Run a node's handler, collecting the instructions it emits; whatever it trips over (other
        than an rlx error, which says what it is already) is reported at the node."""
        self._emitted = []
        try:
            return handler()
        except RlxError:
            raise
        except Exception as e:  # the user needs the node it happened at
            raise LoweringError(f"{self.where()}: cannot lower: {type(e).__name__}: {self.detail(e)}") from e

    def commit(self, note: str) -> None:
        """Append the instructions collected so far to the program, each noting where it came from."""
        for ins in self._emitted:
            ins.note = note
        self.program.instrs.extend(self._emitted)
        self._emitted = []
