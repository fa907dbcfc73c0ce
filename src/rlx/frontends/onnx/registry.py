"""The ONNX → Call registry and the builder that ONNX handlers append Calls through.

A handler is registered next to its definition, keyed by (domain, op_type)::

    @onnx_op("Relu")
    def relu(node: OnnxNode, b: OnnxBuilder) -> Value: ...

The supported-op list, the README table and the up-front coverage check all read ``REGISTRY``.

Values in the builder's environment are either a ``Ref`` (a tensor computed at run time) or a
``numpy.ndarray`` known while converting: initializers, ``Constant`` nodes and shape arithmetic.
Shape arithmetic over dynamic extents is kept as an object array whose entries are ``int`` or
``Sym``, so ``Shape → Gather → Concat → Reshape`` chains resolve to symbolic shapes instead of
run-time data. A known array becomes a weight (keyed by its ONNX name) or a literal only when a
Call reads it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from rlx.errors import LoweringError, UnsupportedOpError
from rlx.frontends.common import family_of
from rlx.frontends.onnx.boundary import one_line
from rlx.ir import dtypes, rules, symbolic
from rlx.ir.builder import InstrBuilder
from rlx.ir.calls import Concat, Expand
from rlx.ir.program import Call, Instr, Lit, Operand, Program, Ref, Value, Weight
from rlx.ir.symbolic import Dim, Shape, Sym, Symbol, is_static

Known = np.ndarray
Env = Ref | Known
Out = Env | Lit  # one handler output: ``lower_node`` expands a Lit to a 0-d tensor
Result = Out | Sequence[Out | None] | None


@dataclass
class OnnxNode:
    """One ONNX node with its attributes decoded (tensors as numpy arrays, graphs left as protos)."""

    name: str
    op_type: str
    domain: str  # "" for ai.onnx
    opset: int  # the model's opset for this node's domain
    inputs: list[str]  # "" = an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How errors name this node."""
        return f"node {self.name} ({self.op_type})"

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def has_input(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] != ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op_type)


Handler = Callable[[OnnxNode, "OnnxBuilder"], Result]
# (body graph proto, opsets, names visible from outside, where) → its initializers and ordered nodes
BodyReader = Callable[[Any, dict[str, int], set[str], str], tuple[dict[str, np.ndarray], list[OnnxNode]]]


@dataclass(frozen=True)
class Registration:
    domain: str
    op_type: str
    handler: Handler
    family: str  # the Call family of the module that defines it (``family_of``): "movement", "nn", …


REGISTRY: dict[tuple[str, str], Registration] = {}


def onnx_op(*op_types: str, domain: str = "") -> Callable[[Handler], Handler]:
    """Register ``handler`` for each ``op_type`` of ``domain`` (``""`` is the default ai.onnx domain)."""

    def register(handler: Handler) -> Handler:
        family = family_of(handler.__module__)
        for op in op_types:
            if (domain, op) in REGISTRY:
                raise ValueError(f"{domain or 'ai.onnx'}::{op} is registered twice")
            REGISTRY[(domain, op)] = Registration(domain, op, handler, family)
        return handler

    return register


def supported_ops() -> list[str]:
    return sorted(f"{d + '::' if d else ''}{op}" for d, op in REGISTRY)


def op_table_markdown() -> str:
    """The supported ONNX op table for the README, one row per family, derived from the registry."""
    families: dict[str, list[str]] = {}
    for (domain, op), reg in sorted(REGISTRY.items(), key=lambda kv: kv[0][1]):
        families.setdefault(reg.family, []).append(f"{domain}::{op}" if domain else op)
    rows = ["| family | ONNX ops (ai.onnx) |", "|---|---|"]
    for family, ops in sorted(families.items()):
        rows.append(f"| {family} ({len(ops)}) | {', '.join(f'`{op}`' for op in ops)} |")
    return "\n".join(rows)


def check_coverage(nodes: Sequence[OnnxNode]) -> None:
    """Raise one ``UnsupportedOpError`` listing every op the registry lacks, before lowering."""
    missing: dict[str, list[str]] = {}
    for n in nodes:
        if n.key not in REGISTRY:
            domain = n.domain or "ai.onnx"
            key = f"{one_line(n.op_type, 80)} (domain {one_line(domain, 80)}, opset {n.opset})"  # a file's text
            missing.setdefault(key, []).append(n.name)
    if missing:
        parts = []
        for op, names in sorted(missing.items()):
            first = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
            parts.append(f"{op} ×{len(names)} (nodes {first})")
        training = any("preview.training" in op for op in missing)
        hint = (
            "training ops are not supported; export the inference graph" if training else "file an issue with this line"
        )
        raise UnsupportedOpError(f"unsupported ONNX ops ({len(missing)}): {'; '.join(parts)}. {hint}", missing)


def ident(name: str) -> str:
    """An ONNX value name (``/layer1/Conv_output_0``, ``onnx::Add_7``) as a readable identifier."""
    out = re.sub(r"\W+", "_", name).strip("_") or "v"
    return out if not out[0].isdigit() else "v" + out


class OnnxBuilder(InstrBuilder):
    """Collects instructions for one Program while lowering ONNX nodes in order."""

    def __init__(
        self, program: Program, initializers: dict[str, np.ndarray], read_body: BodyReader | None = None
    ) -> None:
        """``read_body``: how a control-flow body is read (``rlx.frontends.onnx.reader.subgraph``; the
        reader sits above this module, since it asks ``REGISTRY`` which ops need expanding)."""
        super().__init__(program, {v.name: v for v in program.inputs}, {s.name: s.hint for s in program.symbols})
        self.read_body = read_body
        self.env: dict[str, Env] = {}
        self.weights: dict[str, np.ndarray] = {}  # weight key (ONNX name) → array
        self.initializers = initializers
        self.opsets: dict[str, int] = {}  # the model's opset per domain, for control-flow bodies
        self._node: OnnxNode | None = None
        self._materialized: dict[int, Operand] = {}  # id(array) → its weight / literal
        self._keep_alive: list[np.ndarray] = []  # the arrays keyed by id() above stay alive
        # Shape arithmetic is an object array of int | Sym, which has no integer width of its own:
        # the ONNX type of one that is not int64 (``Shape → Cast(to=int32)``), keyed like the above.
        self._int_types: dict[int, str] = {}

    # ── control-flow bodies ──────────────────────────────────────────────────
    def lower_body(self, node: OnnxNode, graph: Any, inputs: Sequence[Env]) -> list[Env]:
        """Lower the subgraph ``graph`` (a branch or loop body of ``node``) inline with ``inputs`` bound
        to its formal inputs; the values it computes stay out of the enclosing environment."""
        if self.read_body is None:
            raise LoweringError(f"node {node.name} ({node.op_type}): this builder was given no reader for bodies")
        if len(inputs) != len(graph.input):
            raise LoweringError(
                f"node {node.name} ({node.op_type}): its body takes {len(graph.input)} inputs, {len(inputs)} given"
            )
        saved_env, saved_node = dict(self.env), self._node
        self.program.instrs.extend(self._emitted)  # the node's own Calls so far come first
        self._emitted = []
        opsets = self.opsets or {"": node.opset}
        try:
            initializers, nodes = self.read_body(
                graph, opsets, set(self.env), f"node {node.name} ({node.op_type}) body"
            )
            check_coverage(nodes)
            self.env.update(initializers)
            self.env.update({vi.name: v for vi, v in zip(graph.input, inputs)})
            for n in nodes:
                self.lower_node(n, REGISTRY[n.key].handler, {})
            return [self.env[o.name] for o in graph.output]
        finally:
            self.env, self._node, self._emitted = saved_env, saved_node, []

    # ── reading the node ─────────────────────────────────────────────────────
    def get(self, node: OnnxNode, index: int) -> Env | None:
        """Input ``index`` as it is in the environment (``None`` when omitted)."""
        if not node.has_input(index):
            return None
        name = node.inputs[index]
        if name not in self.env:
            raise LoweringError(f"node {node.name} ({node.op_type}): input {name!r} is never produced")
        return self.env[name]

    def required(self, node: OnnxNode, index: int) -> Env:
        """Input ``index`` as it is in the environment; an omitted input is an error."""
        v = self.get(node, index)
        if v is None:
            raise LoweringError(f"node {node.name} ({node.op_type}): input {index} is required")
        return v

    def input(self, node: OnnxNode, index: int) -> Operand:
        """Input ``index`` as an operand (a known array becomes a weight or a literal)."""
        v = self.get(node, index)
        if v is None:
            raise LoweringError(f"node {node.name} ({node.op_type}): input {index} is required")
        return self.operand(v, node.inputs[index])

    def ref(self, node: OnnxNode, index: int) -> Ref:
        """Input ``index`` as a Ref (a 0-d literal is expanded to a 0-d tensor)."""
        return self.as_ref(self.input(node, index))

    def optional(self, node: OnnxNode, index: int) -> Operand | None:
        return None if self.get(node, index) is None else self.input(node, index)

    def const(self, node: OnnxNode, index: int, default: Any = None) -> Known | None:
        """Input ``index`` as a known array (``default`` when omitted); a run-time value whose inputs
        are all known is evaluated here."""
        v = self.get(node, index)
        if v is None:
            return None if default is None else np.asarray(default)
        if isinstance(v, np.ndarray):
            return v
        folded = self.evaluate(v)
        if folded is None:
            raise LoweringError(
                f"node {node.name} ({node.op_type}): input {index} ({node.inputs[index]!r}) must be known "
                "while converting (it depends on the model's inputs: data-dependent shapes are not supported)"
            )
        return folded

    def required_const(self, node: OnnxNode, index: int) -> Known:
        """Input ``index`` as a known array; an omitted input is an error."""
        arr = self.const(node, index)
        if arr is None:
            raise LoweringError(f"node {node.name} ({node.op_type}): input {index} is required")
        return arr

    def ints(self, node: OnnxNode, index: int, attr: str | None = None) -> list[Dim] | None:
        """A 1-D integer input (or the attribute ``attr`` of older opsets) as a list of dims."""
        if attr is not None and attr in node.attrs:
            return [int(a) for a in node.attrs[attr]]
        arr = self.const(node, index)
        if arr is None:
            return None
        return [int(a) if not isinstance(a, Sym) else a for a in np.asarray(arr).reshape(-1).tolist()]

    def required_ints(self, node: OnnxNode, index: int, attr: str | None = None) -> list[Dim]:
        """``ints`` for an input (or attribute) the op cannot do without."""
        dims = self.ints(node, index, attr)
        if dims is None:
            what = f"input {index}" if attr is None else f"input {index} (or attribute {attr!r})"
            raise LoweringError(f"node {node.name} ({node.op_type}): {what} is required")
        return dims

    def shape(self, x: Operand | Known) -> Shape:
        if isinstance(x, np.ndarray):
            return tuple(x.shape)
        return () if isinstance(x, Lit) else self.info[x.name].shape

    def dtype(self, x: Operand | Known) -> str:
        if isinstance(x, np.ndarray):
            return self._int_types.get(id(x), "i64") if x.dtype == object else dtypes.from_numpy(x.dtype)
        return x.dtype if isinstance(x, Lit) else self.info[x.name].dtype

    def rank(self, x: Operand | Known) -> int:
        return len(self.shape(x))

    def in_dtype(self, node: OnnxNode, index: int) -> str:
        v = self.get(node, index)
        if v is None:
            raise LoweringError(f"node {node.name} ({node.op_type}): input {index} is required")
        return self.dtype(v)

    def in_shape(self, node: OnnxNode, index: int) -> Shape:
        v = self.get(node, index)
        if v is None:
            raise LoweringError(f"node {node.name} ({node.op_type}): input {index} is required")
        return self.shape(v)

    def decide_at_hints(self, condition: Any) -> bool:
        """A condition on sizes (a ``Sym``), decided at the example's sizes; the choice becomes a guard
        that every run checks. A known bool is itself."""
        if not isinstance(condition, Sym):
            return bool(condition)
        taken = bool(symbolic.evaluate(condition.expr, self.hints))
        self.program.guards.append(condition.expr if taken else f"Not({condition.expr})")
        return taken

    # ── known arrays as operands ─────────────────────────────────────────────
    def operand(self, v: Env, name: str = "const") -> Operand:
        if isinstance(v, Ref):
            return v
        key = id(v)
        if key in self._materialized:
            return self._materialized[key]
        op = self._materialize(v, name)
        self._materialized[key] = op
        self._keep_alive.append(v)
        return op

    def tag_ints(self, arr: Known, dtype: str) -> Known:
        """The symbolic integer array ``arr`` typed as ``dtype`` (a copy: ``arr`` keeps its type)."""
        if self.dtype(arr) == dtype:
            return arr
        out = arr.copy()
        self._int_types[id(out)] = dtype
        self._keep_alive.append(out)
        return out

    def _materialize(self, arr: np.ndarray, name: str) -> Operand:
        if arr.dtype == object:
            tok = self.dtype(arr)
            values = arr.reshape(-1).tolist()
            if all(isinstance(d, int) for d in values):
                return self._materialize(np.asarray(values, dtypes.to_numpy(tok)).reshape(arr.shape), name)
            if arr.ndim == 0:
                return Lit(values[0], tok)
            parts = tuple(
                self.as_ref(Lit(d, "i64") if isinstance(d, Sym) else Lit(int(d), "i64"), (1,)) for d in values
            )
            flat = self.cast(self.emit(Concat(parts, 0), (len(values),), "i64"), tok)
            return flat if arr.ndim == 1 else self.reshape(flat, arr.shape)
        tok = dtypes.from_numpy(arr.dtype)
        if arr.ndim == 0:
            return self.lit(arr.item(), tok)
        key = name if name not in self.weights else f"{name}#{len(self.weights)}"
        wname = self.unique(ident(key))
        self.weights[key] = np.ascontiguousarray(arr)
        self.program.weights.append(Weight(wname, key, tuple(arr.shape), tok))
        self.info[wname] = Value(wname, tuple(arr.shape), tok)
        return Ref(wname)

    def integer(self, value: bool | int | float, dtype: str) -> int:
        if dtypes.is_complex(dtype):
            raise LoweringError("complex scalars cannot be literals")
        return int(value)

    def as_ref(self, x: Operand, shape: Shape = ()) -> Ref:
        """``x`` as a tensor Ref (a literal becomes an Expand of itself to ``shape``)."""
        if isinstance(x, Ref):
            return x
        return self.emit(Expand(x, tuple(shape)), tuple(shape), x.dtype)

    # ── evaluating known subgraphs ───────────────────────────────────────────
    def evaluate(self, ref: Ref) -> Known | None:
        """The value of ``ref`` when it depends on weights only (run on the numpy runtime), else None."""
        by_result = {ins.result: ins for ins in [*self.program.instrs, *self._emitted]}
        weight_names = {w.name for w in self.program.weights}
        needed: list[Instr] = []
        seen: set[str] = set()
        stack = [ref.name]
        while stack:
            name = stack.pop()
            if name in seen or name in weight_names:
                continue
            seen.add(name)
            ins = by_result.get(name)
            if ins is None or not is_static(ins.shape) or _reads_symbols(ins.call):
                return None  # a model input (or a dynamic shape or size): not known while converting
            needed.append(ins)
            stack.extend(r.name for r in ins.call.refs())
        from rlx.interpret import evaluate

        order = {ins.result: k for k, ins in enumerate(by_result.values())}
        needed.sort(key=lambda ins: order[ins.result])
        used = {r.name for ins in needed for r in ins.call.refs()} & weight_names
        ws = [w for w in self.program.weights if w.name in used]
        sub = Program("fold", [], ws, list(needed), [ref])
        out = evaluate(sub, {w.key: self.weights[w.key] for w in ws})
        return np.asarray(out[0])

    # ── emitting ─────────────────────────────────────────────────────────────
    def unique(self, base: str) -> str:
        name, k = base, 0
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def data_dim(self, hint: int) -> Sym:
        """A fresh size that only the data decides (``u0`` …): the runtime binds it from the first
        result that has it and checks it on the others."""
        taken = {s.name for s in [*self.program.symbols, *self.program.data_symbols]}
        k = len(self.program.data_symbols)
        while f"u{k}" in taken:
            k += 1
        self.program.data_symbols.append(Symbol(f"u{k}", 0, None, hint))
        self.hints[f"u{k}"] = hint
        return Sym(f"u{k}")

    def where(self) -> str:
        node = self._node
        return f"node {node.name} ({node.op_type})" if node else "a constant"

    def origin(self) -> str:
        return ident(self._node.name) if self._node else "v"

    def fresh_name(self) -> str:
        return self.unique(f"{self.origin()}__{len(self._emitted)}")

    def detail(self, e: Exception) -> str:
        return one_line(e)

    def scalar_as(self, value: bool | int | float, dtype: str) -> bool | int | float:
        return np_cast(value, dtype)  # as numpy's astype converts (ONNX Cast's semantics)

    def reshape(self, x: Operand, shape: Sequence[Dim]) -> Ref:
        from rlx.ir.calls import Reshape

        x = self.as_ref(x)
        if tuple(self.shape(x)) == tuple(shape):
            return x
        return self.emit(Reshape(x, tuple(shape)), tuple(shape), self.dtype(x))

    def graph_outputs(self, names: Sequence[str]) -> list[Operand]:
        """The graph outputs ``names`` as program operands (a constant becomes a weight), with the
        instructions that takes appended to the program."""
        self._node, self._emitted = None, []
        outputs: list[Operand] = []
        for name in names:
            op = self.operand(self.env[name], name)
            outputs.append(self.as_ref(op) if isinstance(op, Lit) else op)
        self.program.instrs.extend(self._emitted)
        self._emitted = []
        return outputs

    # ── driving one node ─────────────────────────────────────────────────────
    def lower_node(self, node: OnnxNode, handler: Handler, declared: dict[str, str | None]) -> None:
        self._node = node
        result = self.collect(lambda: handler(node, self))
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        for k, out in enumerate(node.outputs):
            if not out:
                continue
            value = results[k] if k < len(results) else None
            if value is None:
                raise LoweringError(f"node {node.name} ({node.op_type}): output {k} ({out!r}) is not supported")
            if isinstance(value, Lit):
                value = self.as_ref(value)
            elif not isinstance(value, (Ref, np.ndarray)):  # a numpy scalar or a lone Sym from folding
                value = np.asarray(value, dtype=object if isinstance(value, Sym) else None)
            if isinstance(value, Ref):
                value = self._rename(value, out, node)
            want = declared.get(out)
            if isinstance(value, np.ndarray) and value.dtype == object and want is not None and dtypes.is_int(want):
                value = self.tag_ints(value, want)  # folded shape arithmetic has the width ONNX declares
            got = self.dtype(value)
            if want is not None and got != want:
                raise LoweringError(
                    f"node {node.name} ({node.op_type}): output {out!r} lowered to {got}, ONNX declares {want}"
                )
            self.env[out] = value
        self.commit(self._note(node))
        self._node = None

    def _rename(self, value: Ref, out: str, node: OnnxNode) -> Ref:
        # Readable programs: a node's result carries its ONNX output name when this node made it.
        emitted = {ins.result: ins for ins in self._emitted}
        ins = emitted.get(value.name)
        if ins is None or not ins.result.startswith(ident(node.name) + "__"):
            return value
        new = self.unique(ident(out))
        old = ins.result
        ins.result = new
        self.info[new] = Value(new, ins.shape, ins.dtype)
        mapping: dict[str, Operand] = {old: Ref(new)}
        for other in self._emitted:
            other.call = other.call.replace_refs(mapping)
        return Ref(new)

    def _note(self, node: OnnxNode) -> str:
        ins = []
        for name in node.inputs:
            v = self.env.get(name) if name else None
            ins.append(f"{name}{_fmt(self.shape(v))}" if v is not None else (name or "_"))
        outs = [f"{o}{_fmt(self.shape(self.env[o]))} {self.dtype(self.env[o])}" for o in node.outputs if o in self.env]
        return f"{node.domain or 'ai.onnx'}.{node.op_type} ({', '.join(ins)}) -> {', '.join(outs)}"


def _reads_symbols(call: Call) -> bool:
    """Whether a field of ``call`` is a symbolic extent (or a literal of one): its value is only
    known once the sizes are."""

    def symbolic(v: Any) -> bool:
        if isinstance(v, tuple):
            return any(symbolic(x) for x in v)
        return isinstance(v, Sym) or (isinstance(v, Lit) and isinstance(v.value, Sym))

    return any(symbolic(getattr(call, f.name)) for f in fields(call))


def _fmt(shape: Sequence[Dim]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def np_cast(value: Any, dtype: str) -> Any:
    """A Python number converted to ``dtype`` the way numpy's astype does."""
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(dtypes.to_numpy(dtype)).item()


def numel(shape: Sequence[Dim]) -> Dim:
    from rlx.ir.symbolic import numel as _numel

    return _numel(shape)


def static_numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


# ── shape arithmetic over ints and symbols (one copy: rlx.ir.symbolic) ──────
def _truncdiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):  # exact on ints of any size
        return int(a / b) if abs(a) < 2**52 and abs(b) < 2**52 else -(-a // b) if (a < 0) != (b < 0) else a // b
    return symbolic.floordiv(a, b)  # extents are non-negative: truncating and flooring agree


_DIM_OPS: dict[str, Callable[[Dim, Dim], Dim]] = {
    "add": symbolic.add,
    "sub": symbolic.sub,
    "mul": symbolic.mul,
    "floordiv": symbolic.floordiv,
    "truncdiv": _truncdiv,
    "mod": symbolic.mod,
    "max": symbolic.maximum,
    "min": symbolic.minimum,
}


def dim_op(fn: str, a: Any, b: Any) -> Any:
    """``fn(a, b)`` on ints (exact) or symbolic extents (an expression)."""
    a = a if isinstance(a, Sym) else int(a)
    b = b if isinstance(b, Sym) else int(b)
    return _DIM_OPS[fn](a, b)


def broadcast(*shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    """numpy broadcasting of shapes whose extents may be symbolic: the Call rules' own
    (``rlx.ir.rules``), refusing with a ``LoweringError``."""
    return rules.broadcast(*shapes, error=LoweringError)


def norm_axis(axis: int, rank: int) -> int:
    return rules.norm_axis(axis, rank, LoweringError)
