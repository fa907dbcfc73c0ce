"""The aten → Call registry and the Builder that handlers append Calls through.

A handler is registered next to its definition::

    @lowers("aten.relu.default")
    def relu(node: Node, b: Builder) -> Operand: ...

Names may be a full ``aten.<op>.<overload>`` or a bare ``aten.<op>`` meaning every overload.
The supported-op list, the README table and the up-front coverage check all read ``REGISTRY``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlx.errors import LoweringError, UnsupportedOpError
from rlx.formats.torch_ir import Node, Output, ScalarMeta, TensorMeta, TorchIR
from rlx.frontends.common import family_of
from rlx.ir import dtypes, symbolic
from rlx.ir.builder import InstrBuilder
from rlx.ir.calls import Arange, Binary, RandomBits
from rlx.ir.program import Call, Instr, Lit, Operand, Program, Ref, StateVar, Value, Weight
from rlx.ir.rng import RNG_KEY, RNG_STATE
from rlx.ir.symbolic import Dim, Sym, eval_shape

Result = Operand | Sequence[Operand | None] | None
Handler = Callable[[Node, "Builder"], Result]


@dataclass(frozen=True)
class Registration:
    name: str  # as registered: "aten.add.Tensor" or "aten.add" (every overload)
    handler: Handler
    family: str  # the Call family of the module that defines it (``family_of``): "movement", "nn", …


@dataclass(frozen=True)
class Unlowered:
    """A result its lowering leaves out (``None``): lowering fails, saying ``why``, only where
    something reads it."""

    why: str


REGISTRY: dict[str, Registration] = {}

# Export-only bookkeeping ops that compute nothing.
_NOOP_PREFIXES = ("aten._assert", "aten.sym_constrain_range", "aten._print")


def lowers(*names: str) -> Callable[[Handler], Handler]:
    """Register ``handler`` for each aten op name (``aten.<op>`` or ``aten.<op>.<overload>``)."""

    def register(handler: Handler) -> Handler:
        family = family_of(handler.__module__)
        for name in names:
            if name in REGISTRY:
                raise ValueError(f"{name} is registered twice ({REGISTRY[name].handler.__name__})")
            REGISTRY[name] = Registration(name, handler, family)
        return handler

    return register


def find(op: str) -> Registration | None:
    """The registration for a node's op: exact overload first, then the bare op."""
    if op in REGISTRY:
        return REGISTRY[op]
    parts = op.split(".")
    return REGISTRY.get(".".join(parts[:2])) if len(parts) == 3 else None


def is_noop(op: str) -> bool:
    return op.startswith(_NOOP_PREFIXES)


def supported_ops() -> list[str]:
    return sorted(REGISTRY)


def op_table_markdown() -> str:
    """The supported-op table for the README, one row per op family, derived from the registry."""
    families: dict[str, list[str]] = {}
    for name, reg in sorted(REGISTRY.items()):
        families.setdefault(reg.family, []).append(name.removeprefix("aten."))
    rows = ["| family | aten ops (`op` = every overload, `op.overload` = that one) |", "|---|---|"]
    for family, ops in sorted(families.items()):
        rows.append(f"| {family} ({len(ops)}) | {', '.join(f'`{op}`' for op in ops)} |")
    return "\n".join(rows)


class Builder(InstrBuilder):
    """Collects instructions for one Program while lowering nodes in order."""

    def __init__(self, program: Program) -> None:
        info = {v.name: v for v in program.inputs}
        info.update({w.name: Value(w.name, w.shape, w.dtype) for w in program.weights})
        super().__init__(program, info, {s.name: s.hint for s in [*program.symbols, *program.data_symbols]})
        self.env: dict[str, Any] = {}  # aten value id → Operand, or a tuple of them for multi-output nodes
        self._node: Node | None = None
        self.item_symbols: set[str] = set()  # symbols naming item() values (data, lowered as 0-d tensors)
        self.draws = 0  # random draws so far: each one is its own stream of the generator

    # ── reading the node ─────────────────────────────────────────────────────
    def input(self, node: Node, index: int, name: str | None = None) -> Ref:
        """Tensor argument ``index`` as a Ref (errors if it is not a tensor)."""
        op = self.operand(node.arg(index, name), None)
        if not isinstance(op, Ref):
            raise LoweringError(f"node {node.id} ({node.op}): argument {index} must be a tensor, found {op!r}")
        return op

    def tensor(self, node: Node, arg: Any) -> Ref:
        """An element of a tensor-list argument (``cat``'s tensors, ``index``'s indices) as a Ref."""
        op = self.operand(arg, None)
        if not isinstance(op, Ref):
            raise LoweringError(f"node {node.id} ({node.op}): expected a tensor in the list, found {op!r}")
        return op

    def optional_input(self, node: Node, index: int, name: str | None = None) -> Ref | None:
        arg = node.arg(index, name)
        return None if arg is None else self.input(node, index, name)

    def operand(self, arg: Any, dtype: str | None) -> Operand:
        """A node argument as an operand: refs resolve through the environment, numbers become
        literals of ``dtype`` (or of their own Python type when ``dtype`` is None)."""
        if isinstance(arg, Ref):
            try:
                value = self.env[arg.name]
            except KeyError:
                raise LoweringError(f"value {arg.name!r} is used but was never produced") from None
            if isinstance(value, Unlowered):
                raise LoweringError(value.why)
            return self.value_operand(value, dtype)
        if isinstance(arg, (bool, int, float)):
            return self.lit(arg, dtype or dtypes.scalar_dtype(arg))
        raise LoweringError(f"expected a tensor or a number, found {arg!r}")

    def value_operand(self, value: Any, dtype: str | None) -> Operand:
        """An environment value (shape arithmetic results are ints or ``Sym``) as an operand."""
        if isinstance(value, Sym):
            return Lit(value, dtype or "i64")
        if isinstance(value, (bool, int, float)):
            return self.lit(value, dtype or dtypes.scalar_dtype(value))
        return value

    def integer(self, value: bool | int | float, dtype: str) -> int:
        if isinstance(value, float) and not value.is_integer():
            raise LoweringError(f"scalar {value} cannot be represented as {dtype}")
        return int(value)

    def scalar(self, node: Node, index: int, name: str | None = None, default: Any = None) -> Any:
        """A non-tensor argument; a reference to shape arithmetic resolves to its int or ``Sym``."""
        arg = node.arg(index, name, default)
        if isinstance(arg, Ref):
            value = self.env.get(arg.name)
            if isinstance(value, (int, float, Sym)):
                return value
            raise LoweringError(f"node {node.id} ({node.op}): argument {index} must be a number, found a tensor")
        if isinstance(arg, tuple):
            return tuple(self.env.get(a.name) if isinstance(a, Ref) else a for a in arg)
        return arg

    # ── emitting ─────────────────────────────────────────────────────────────
    def where(self) -> str:
        node = self._node
        return f"node {node.id} ({node.op})" if node else "the program's epilogue"

    def fresh_name(self) -> str:
        """``<node>__<k>`` until the handler returns; the value it returns is then renamed to the node id."""
        name = f"{self._node.id if self._node else 'v'}__{len(self._emitted)}"
        while name in self._names:
            name += "_"
        self._names.add(name)
        return name

    def origin(self) -> str:
        return self._node.id if self._node else ""

    def emit_like(self, call: Call, meta: TensorMeta) -> Ref:
        return self.emit(call, meta.shape, meta.dtype)

    def random_bits(self, shape: Sequence[Dim]) -> Ref:
        """Uniform random 32-bit words (``u32``) of ``shape``, a stream of their own. The first draw
        gives the program its generator state (``rlx.ir.rng``): an input the runtime carries."""
        if not self.draws:
            self.program.inputs.append(Value(RNG_STATE, (2,), "i64"))
            self.info[RNG_STATE] = self.program.inputs[-1]
            self._names.add(RNG_STATE)
        self.draws += 1
        return self.emit(RandomBits(Ref(RNG_STATE), tuple(shape), self.draws - 1), shape, "u32")

    def advance_rng(self) -> None:
        """After the last node: the program returns its generator state advanced by one call."""
        if not self.draws:
            return
        self._node, self._emitted = None, []
        steps = self.emit(Arange(0, 2, 1, "i64"), (2,), "i64")  # the counter moves, the key stays
        new = self.emit(Binary("add", Ref(RNG_STATE), steps), (2,), "i64")
        self.commit("generator state, advanced by one call")
        self.program.state.append(StateVar(RNG_STATE, RNG_KEY, len(self.program.outputs)))
        self.program.outputs.append(new)

    # ── driving one node ─────────────────────────────────────────────────────
    def lower_node(self, node: Node, handler: Handler) -> None:
        self._node = node
        result = self.collect(lambda: handler(node, self))
        if isinstance(result, (Ref, Lit)):
            result = self._rename_final(node, result, self._emitted)
        elif isinstance(result, (list, tuple)):
            result = tuple(result)
        self.commit(self._note(node))
        self.env[node.id] = result
        self._check_result(node, result)
        self._node = None

    def _rename_final(self, node: Node, result: Operand, emitted: list[Instr]) -> Operand:
        # Readable programs: the value a node produces carries the node's own name.
        if isinstance(result, Ref) and emitted and emitted[-1].result == result.name and node.id not in self._names:
            old = emitted[-1]
            self._names.discard(old.result)
            self._names.add(node.id)
            old.result = node.id
            self.info[node.id] = self.info.pop(result.name)
            self.info[node.id] = Value(node.id, old.shape, old.dtype)
            return Ref(node.id)
        return result

    def _check_result(self, node: Node, result: Any) -> None:
        # The handler must agree with the shape/dtype torch recorded: catches lowering bugs
        # at conversion time instead of as wrong numbers at run time.
        if isinstance(result, tuple):
            pairs = [(r, m) for r, m in zip(result, node.out) if r is not None]
        else:
            pairs = [(result, node.out[0] if node.out else None)]
        for r, m in pairs:
            if not isinstance(m, TensorMeta) or not isinstance(r, (Ref, Lit)):
                continue
            # Symbolic extents may be spelled differently (s0*s1 vs s1*s0): compare their values
            # at the example binding.
            if self._concrete(self.shape(r)) != self._concrete(m.shape) or self.dtype(r) != m.dtype:
                raise LoweringError(
                    f"node {node.id} ({node.op}): lowered to {list(self.shape(r))} {self.dtype(r)}, "
                    f"but torch recorded {list(m.shape)} {m.dtype}"
                )

    def _concrete(self, shape: Sequence[Dim]) -> tuple[int, ...]:
        return eval_shape(shape, self.hints)

    def _note(self, node: Node) -> str:
        ins = []
        for a in node.args:
            for r in _refs(a):
                val = self.env.get(r.name)
                shape = self.shape(val) if isinstance(val, (Ref, Lit)) else None
                ins.append(f"{r.name}{_fmt_shape(shape)}" if shape is not None else r.name)
        outs = [f"{_fmt_shape(m.shape)} {m.dtype}" for m in node.out if isinstance(m, TensorMeta)]
        return f"{node.op} ({', '.join(ins)}) -> {', '.join(outs) or '()'}"


def _refs(a: Any) -> list[Ref]:
    if isinstance(a, Ref):
        return [a]
    if isinstance(a, tuple):
        return [r for x in a for r in _refs(x)]
    return []


def _fmt_shape(shape: Sequence[Dim] | None) -> str:
    return "[" + ",".join(str(d) for d in shape or ()) + "]"


def unsupported_ops(ir: TorchIR) -> dict[str, list[str]]:
    """Every op of the graph the registry cannot lower, with the ids of the nodes using it."""
    missing: dict[str, list[str]] = {}
    for n in ir.nodes:
        if n.op == "_getitem" or is_noop(n.op) or find(n.op) or is_shape_arithmetic(n) or n.op in _GUARD_OPS:
            continue
        missing.setdefault(n.op, []).append(n.id)
    return missing


def check_coverage(ir: TorchIR) -> None:
    """Raise one ``UnsupportedOpError`` listing every op the registry lacks, before lowering."""
    missing = unsupported_ops(ir)
    if missing:
        parts = []
        for op, ids in sorted(missing.items()):
            first = ", ".join(ids[:3]) + (", …" if len(ids) > 3 else "")
            parts.append(f"{op} ×{len(ids)} (nodes {first})")
        custom = sorted(op for op in missing if not op.startswith(("aten.", "prims.")))
        advice = (
            f"custom op(s) {', '.join(custom)} have no implementation rlx can trace: register a decomposition "
            "or a traceable Python implementation with torch.library (custom_op / register_decomposition)"
            if custom
            else "Try --decomposition core, or file an issue with this line"
        )
        raise UnsupportedOpError(f"unsupported ops ({len(missing)}): {'; '.join(parts)}. {advice}", missing)


def lower(ir: TorchIR) -> Program:
    """Lower a parsed torch-ir graph to a Program (coverage is checked first, all at once).

    Buffers the graph updates in place become state: program inputs that the runtime feeds with
    their current value (initially the stored weight) and replaces with the output that updates
    them after every call."""
    check_coverage(ir)
    state_buffers = _state_buffers(ir)
    program = Program(
        name=ir.model_name,
        inputs=[Value(i.id, i.shape, i.dtype) for i in ir.inputs]
        + [Value(w.id, w.shape, w.dtype) for w in ir.weights if w.id in state_buffers],
        weights=[Weight(w.id, w.key, w.shape, w.dtype) for w in ir.weights if w.id not in state_buffers],
        instrs=[],
        outputs=[],
        output_tree=ir.output_tree,
        source_histogram=ir.op_histogram(),
        symbols=list(ir.symbols),
        data_symbols=list(ir.data_symbols),
        state=[StateVar(w.id, w.key, ir.state_updates[w.id]) for w in ir.weights if w.id in state_buffers],
        input_updates={i.id: ir.state_updates[i.id] for i in ir.inputs if i.id in ir.state_updates},
    )
    b = Builder(program)
    for v in program.inputs:
        b.env[v.name] = Ref(v.name)
    for w in program.weights:
        b.env[w.name] = Ref(w.name)
    known_symbols = {s.name for s in [*ir.symbols, *ir.data_symbols]}
    for node in ir.nodes:
        _lower_one(node, b, program, known_symbols)
    program.value_map = {key: v.name for key, v in b.env.items() if isinstance(v, Ref)}
    program.outputs.extend(_output_operand(k, out, b) for k, out in enumerate(ir.outputs))
    b.advance_rng()
    program.state.sort(key=lambda s: s.output)
    if program.output_tree is None:  # producers that do not record it: one output bare, several as a tuple
        n = program.n_user_outputs
        program.output_tree = {"out": 0} if n == 1 else {"tuple": [{"out": k} for k in range(n)]}
    return program


def _state_buffers(ir: TorchIR) -> set[str]:
    """The buffers the graph updates (the other updated targets are inputs)."""
    n_user = len(ir.outputs) - len(ir.state_updates)
    if any(k < n_user for k in ir.state_updates.values()):
        raise LoweringError("torch-ir.json: state updates must be the last outputs")
    return set(ir.state_updates) & {w.id for w in ir.weights}


def _lower_one(node: Node, b: Builder, program: Program, known_symbols: set[str]) -> None:
    """Dispatch one node: guards, no-ops, shape arithmetic and ``_getitem`` are resolved here;
    everything else goes through its registered handler."""
    if node.op in _GUARD_OPS:
        _guard(node, b, program)
        return
    if is_noop(node.op):
        return
    if is_shape_arithmetic(node) and node.op not in _DATA_READS:
        if _reads_item(node, b):
            b.env[node.id] = _ITEM_FACT  # arithmetic on an item() value, asserted by torch at export
            return
        b.env[node.id] = _shape_value(node, known_symbols)
        return
    if node.op in _DATA_READS and isinstance(node.out[0], ScalarMeta) and isinstance(node.out[0].value, Sym):
        b.item_symbols.add(node.out[0].value.expr)
    if node.op == "_getitem":
        b.env[node.id] = _getitem(node, b)
        return
    reg = find(node.op)
    assert reg is not None  # check_coverage guarantees it
    b.lower_node(node, reg.handler)


def _output_operand(k: int, out: Output, b: Builder) -> Operand:
    """Graph output ``k`` as a program output: a number literal, or the single tensor it names."""
    if out.ref is None:
        const = out.const
        if isinstance(const, (bool, int, float)):
            return b.lit(const, dtypes.scalar_dtype(const))
        raise LoweringError(f"outputs[{k}]: constant output {const!r} is not a number")
    val = b.env.get(out.ref)
    if isinstance(val, Unlowered):
        raise LoweringError(val.why)
    if not isinstance(val, (Ref, Lit)):
        raise LoweringError(f"outputs[{k}]: {out.ref!r} is not a single tensor")
    return val


_GUARD_OPS = ("aten._assert_scalar.default",)
_ITEM_FACT = object()  # env marker: a scalar computed from an item() value, never a size


def _reads_item(node: Node, b: Builder) -> bool:
    meta = node.out[0]
    if not b.item_symbols or not isinstance(meta, ScalarMeta) or not isinstance(meta.value, Sym):
        return False
    return bool(set(re.findall(r"[A-Za-z_]\w*", meta.value.expr)) & b.item_symbols)


# Scalars read from a tensor's data (``item()``): lowered as a 0-d tensor, not resolved as a size.
_DATA_READS = ("aten._local_scalar_dense.default",)


def is_shape_arithmetic(node: Node) -> bool:
    """Nodes computing one scalar (``sym_size``, ``s0 * s1`` …): torch recorded the resulting
    expression, so they are resolved from it instead of being lowered."""
    return len(node.out) == 1 and isinstance(node.out[0], ScalarMeta) and not node.multi


def _shape_value(node: Node, known_symbols: set[str]) -> int | float | bool | Sym:
    meta = node.out[0]
    if not isinstance(meta, ScalarMeta):  # is_shape_arithmetic checked it; this narrows the type
        raise LoweringError(f"node {node.id} ({node.op}): expected a scalar result")
    value = meta.value
    if isinstance(value, Sym):
        unknown = symbolic.names(value.expr) - known_symbols
        if unknown:
            raise LoweringError(
                f"node {node.id} ({node.op}) reads {', '.join(sorted(unknown))}, which neither `symbols` nor "
                "`data_symbols` of torch-ir.json defines; re-export the model"
            )
        return value
    if isinstance(value, (bool, int, float)):
        return value
    raise LoweringError(f"node {node.id} ({node.op}): cannot use its scalar result {value!r}")


def _guard(node: Node, b: Builder, program: Program) -> None:
    """``_assert_scalar(cond, msg)``: a check torch wants at run time, kept as a bind-time guard."""
    cond = node.arg(0)
    value = b.env.get(cond.name) if isinstance(cond, Ref) else cond
    if value is _ITEM_FACT:
        return  # a range torch asserts on an item() value (a bool's 0 ≤ u0 ≤ 1): the value is data, not bound
    if isinstance(value, Sym):
        program.guards.append(value.expr)
    elif value is False:
        raise LoweringError(f"node {node.id}: the exported graph asserts a condition that is false: {node.arg(1)}")


def _getitem(node: Node, b: Builder) -> Operand | Unlowered:
    src, index = node.arg(0), node.arg(1)
    if not isinstance(src, Ref) or not isinstance(index, int) or isinstance(index, bool):
        raise LoweringError(f"node {node.id} (_getitem): expected (tuple ref, int), found {node.args!r}")
    parts = b.env.get(src.name)
    if not isinstance(parts, tuple) or not -len(parts) <= index < len(parts):
        raise LoweringError(f"node {node.id} (_getitem): {src.name} has no result {index}")
    value = parts[index]
    if value is None:  # an error only where something reads it (results that serve the backward pass)
        return Unlowered(f"node {node.id} (_getitem): result {index} of {src.name} is not supported by its lowering")
    return value
