"""``torch-ir.json`` (format "rlx-torch-ir", version 1): typed objects and a validating loader.

This module needs no torch: ``rlx build`` reads files that any producer of the schema wrote.
Every problem is reported as a ``SchemaError`` naming the JSON path, e.g. ``nodes[12].args[1]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlx.errors import SchemaError
from rlx.ir import dtypes
from rlx.ir.program import Ref, decode_float, encode_float
from rlx.ir.symbolic import Shape, Sym, Symbol, dim_from_json, dim_json, eval_shape, is_static

FORMAT = "rlx-torch-ir"
VERSION = 1
MAX_SYMBOLS = 1024
MAX_JSON_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class DtypeArg:
    """A ``torch.dtype`` passed as an argument (e.g. ``_to_copy(x, dtype=torch.float16)``)."""

    dtype: str


Arg = Any  # Ref | int | float | bool | str | None | DtypeArg | tuple[Arg, ...]


@dataclass(frozen=True)
class TensorMeta:
    shape: Shape  # symbolic where the extent depends on an input symbol
    dtype: str


@dataclass(frozen=True)
class ScalarMeta:
    """A non-tensor node result: a number, or a symbolic int (``sym_size``, shape arithmetic)."""

    value: Any


@dataclass(frozen=True)
class Input(TensorMeta):
    """A graph input: its id and its tensor's shape and dtype."""

    id: str


@dataclass(frozen=True)
class TorchWeight:
    id: str
    key: str
    shape: tuple[int, ...]
    dtype: str
    kind: str = "param"


@dataclass(frozen=True)
class Node:
    id: str
    op: str  # "aten.<name>.<overload>" or "_getitem"
    args: tuple[Arg, ...]
    kwargs: dict[str, Arg]
    out: tuple[TensorMeta | ScalarMeta | None, ...]  # one entry per result
    multi: bool  # the op returns a tuple (out was a list in the file)

    @property
    def label(self) -> str:
        """How errors name this node."""
        return f"node {self.id} ({self.op})"

    @property
    def base(self) -> str:
        """``aten.add.Tensor`` → ``add``."""
        parts = self.op.split(".")
        return parts[1] if len(parts) > 1 and parts[0] == "aten" else self.op

    @property
    def overload(self) -> str:
        parts = self.op.split(".")
        return parts[2] if len(parts) > 2 else ""

    def arg(self, index: int, name: str | None = None, default: Any = None) -> Arg:
        """Positional arg ``index``, else keyword ``name``, else ``default``."""
        if index < len(self.args):
            return self.args[index]
        if name is not None and name in self.kwargs:
            return self.kwargs[name]
        return default

    @property
    def meta(self) -> TensorMeta:
        """The (first) tensor result."""
        m = self.out[0] if self.out else None
        if not isinstance(m, TensorMeta):
            raise SchemaError(f"node {self.id} ({self.op}) has no tensor output recorded")
        return m

    def meta_at(self, k: int) -> TensorMeta:
        """Tensor result ``k`` of a multi-output node."""
        m = self.out[k] if k < len(self.out) else None
        if not isinstance(m, TensorMeta):
            raise SchemaError(f"node {self.id} ({self.op}) has no tensor recorded for result {k}")
        return m


@dataclass(frozen=True)
class Output:
    ref: str | None
    const: Arg = None
    shape: Shape | None = None
    dtype: str | None = None


@dataclass
class TorchIR:
    model_name: str
    inputs: list[Input]
    weights: list[TorchWeight]
    nodes: list[Node]
    outputs: list[Output]
    producer: str = ""
    decomposition: str = ""
    output_tree: Any = None
    symbols: list[Symbol] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # Sizes that depend on data (torch's unbacked symbols u0, u1 …: nonzero's row count, unique's
    # length), with their range and the value they had in the example run.
    data_symbols: list[Symbol] = field(default_factory=list)
    # Buffers (kind "buffer" weights) and inputs the graph updates in place: target id → the index
    # in ``outputs`` of the new value. Those outputs come after the model's own outputs and carry
    # ``"state": target`` in the file, so readers that do not know state still read the rest.
    state_updates: dict[str, int] = field(default_factory=dict)

    @property
    def hints(self) -> dict[str, int]:
        """The example extent of every symbol (data-dependent ones included)."""
        return {s.name: s.hint for s in [*self.symbols, *self.data_symbols]}

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            hist[n.op] = hist.get(n.op, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))

    # ── writing ──────────────────────────────────────────────────────────────
    def to_json(self) -> dict[str, Any]:
        hints = self.hints
        doc: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "model_name": self.model_name,
            "producer": self.producer,
            "decomposition": self.decomposition,
            "inputs": [_input_json(i, self.symbols) for i in self.inputs],
            "weights": [
                {"id": w.id, "key": w.key, "shape": list(w.shape), "dtype": w.dtype, "kind": w.kind}
                for w in self.weights
            ],
            "nodes": [
                {
                    "id": n.id,
                    "op": n.op,
                    "args": [encode_arg(a) for a in n.args],
                    "kwargs": {k: encode_arg(v) for k, v in n.kwargs.items()},
                    "out": _out_json(n, hints),
                }
                for n in self.nodes
            ],
            "outputs": [_output_json(o, hints) for o in self.outputs],
        }
        for target, k in self.state_updates.items():
            doc["outputs"][k]["state"] = target
        if self.symbols:
            doc["symbols"] = [{"name": s.name, "min": s.min, "max": s.max, "hint": s.hint} for s in self.symbols]
        if self.data_symbols:
            doc["data_symbols"] = [
                {"name": s.name, "min": s.min, "max": s.max, "hint": s.hint} for s in self.data_symbols
            ]
        if self.output_tree is not None:
            doc["output_tree"] = self.output_tree
        return doc

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n"


def _shape_json(shape: Shape, hints: dict[str, int]) -> dict[str, Any]:
    """``shape`` holds the example extents (what readers of static graphs use); ``sym_shape``,
    present only when some extent is symbolic, holds the expressions."""
    out: dict[str, Any] = {"shape": list(eval_shape(shape, hints))}
    if not is_static(shape):
        out["sym_shape"] = [dim_json(d) for d in shape]
    return out


def _input_json(i: Input, symbols: list[Symbol]) -> dict[str, Any]:
    hints = {s.name: s.hint for s in symbols}
    d: dict[str, Any] = {"id": i.id, **_shape_json(i.shape, hints), "dtype": i.dtype}
    if not is_static(i.shape):
        index = {s.name: k for k, s in enumerate(symbols)}
        d["dynamic"] = [index.get(dim.expr, -1) if isinstance(dim, Sym) else -1 for dim in i.shape]
    return d


def _meta_json(m: TensorMeta | ScalarMeta | None, hints: dict[str, int]) -> Any:
    if m is None:
        return None
    if isinstance(m, ScalarMeta):
        if isinstance(m.value, Sym):
            return {"scalar": {"sym": m.value.expr}}
        return {"scalar": encode_arg(m.value) if isinstance(m.value, (bool, int, float)) else m.value}
    return {**_shape_json(m.shape, hints), "dtype": m.dtype}


def _out_json(n: Node, hints: dict[str, int]) -> Any:
    if n.multi:
        return [_meta_json(m, hints) for m in n.out]
    return _meta_json(n.out[0], hints) if n.out else None


def _output_json(o: Output, hints: dict[str, int]) -> dict[str, Any]:
    if o.ref is None:
        return {"const": encode_arg(o.const)}
    return {"ref": o.ref, **_shape_json(o.shape or (), hints), "dtype": o.dtype}


def encode_arg(a: Arg) -> dict[str, Any]:
    if isinstance(a, Ref):
        return {"ref": a.name}
    if a is None:
        return {"none": True}
    if isinstance(a, bool):
        return {"bool": a}
    if isinstance(a, int):
        return {"int": a}
    if isinstance(a, float):
        return {"float": encode_float(a)}
    if isinstance(a, str):
        return {"str": a}
    if isinstance(a, DtypeArg):
        return {"dtype": a.dtype}
    if isinstance(a, (tuple, list)):
        return {"list": [encode_arg(x) for x in a]}
    raise TypeError(f"cannot encode argument {a!r} of type {type(a).__name__}")


# ── reading ──────────────────────────────────────────────────────────────────
def load(path: str | Path) -> TorchIR:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise SchemaError(f"{path}: {size} bytes is more than the {MAX_JSON_BYTES}-byte limit for torch-ir.json")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SchemaError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SchemaError(f"{path}: cannot read: {e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}") from None
    except RecursionError:
        raise SchemaError(f"{path}: JSON nested too deeply") from None
    return parse(doc, source=path.name)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, msg: str) -> SchemaError:
        return SchemaError(f"{self.source}: {where}: {msg}")

    def obj(self, v: Any, where: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, found {_kind(v)}")
        return v

    def entries(self, doc: dict[str, Any], key: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """The objects of the top-level list ``key``, each with where it is (``nodes[3]``)."""
        for k, raw in enumerate(self.field(doc, key, "", list)):
            yield f"{key}[{k}]", self.obj(raw, f"{key}[{k}]")

    def field(self, d: dict[str, Any], key: str, where: str, typ: type, optional: bool = False) -> Any:
        if key not in d:
            if optional:
                return None
            raise self.fail(f"{where}.{key}" if where else key, "missing")
        v = d[key]
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            raise self.fail(f"{where}.{key}" if where else key, f"expected {typ.__name__}, found {_kind(v)}")
        return v

    def shape(self, v: Any, where: str) -> tuple[int, ...]:
        if not isinstance(v, list):
            raise self.fail(where, f"shape must be a list, found {_kind(v)}")
        for k, d in enumerate(v):
            if not isinstance(d, int) or isinstance(d, bool) or d < 0:
                raise self.fail(f"{where}[{k}]", f"dimension must be a non-negative int, found {d!r}")
        return tuple(v)

    def dtype(self, v: Any, where: str) -> str:
        if not isinstance(v, str) or v not in dtypes.NUMPY_DTYPES:
            raise self.fail(where, f"unknown dtype {v!r}; expected one of {', '.join(dtypes.DTYPES)}")
        return v

    def sym_shape(self, d: dict[str, Any], where: str) -> Shape:
        """``sym_shape`` when present (same rank as ``shape``), else the concrete ``shape``."""
        shape = self.shape(d.get("shape"), f"{where}.shape")
        if d.get("sym_shape") is None:
            return shape
        raw = d["sym_shape"]
        if not isinstance(raw, list) or len(raw) != len(shape):
            raise self.fail(f"{where}.sym_shape", f"expected a list of {len(shape)} dimensions")
        try:
            return tuple(dim_from_json(x, f"{where}.sym_shape[{k}]") for k, x in enumerate(raw))
        except SchemaError as e:
            raise self.fail(f"{where}.sym_shape", str(e)) from None

    def meta(self, v: Any, where: str) -> TensorMeta | ScalarMeta | None:
        if v is None:
            return None
        d = self.obj(v, where)
        if "scalar" in d:
            raw = d["scalar"]
            if isinstance(raw, dict) and set(raw) == {"sym"} and isinstance(raw["sym"], str):
                return ScalarMeta(dim_from_json(raw["sym"], f"{where}.scalar.sym"))
            if isinstance(raw, dict) and len(raw) == 1 and next(iter(raw)) in ("int", "float", "bool"):
                return ScalarMeta(self.arg(raw, f"{where}.scalar", set()))
            return ScalarMeta(raw)
        return TensorMeta(self.sym_shape(d, where), self.dtype(d.get("dtype"), f"{where}.dtype"))

    def arg(self, v: Any, where: str, defined: set[str]) -> Arg:
        d = self.obj(v, where)
        if len(d) != 1:
            raise self.fail(where, f"an argument has exactly one key, found {sorted(d)}")
        ((key, val),) = d.items()
        if key == "ref":
            if not isinstance(val, str):
                raise self.fail(f"{where}.ref", f"expected str, found {_kind(val)}")
            if val not in defined:
                raise self.fail(where, f"reference to {val!r} before it is defined")
            return Ref(val)
        if key == "none":
            return None
        if key == "dtype":
            return DtypeArg(self.dtype(val, f"{where}.dtype"))
        if key == "list":
            if not isinstance(val, list):
                raise self.fail(f"{where}.list", f"expected a list, found {_kind(val)}")
            return tuple(self.arg(x, f"{where}.list[{k}]", defined) for k, x in enumerate(val))
        return self.scalar_arg(key, val, where)

    def scalar_arg(self, key: str, val: Any, where: str) -> Arg:
        """The number and string argument kinds (``{"int": 3}``, ``{"float": "inf"}`` …)."""
        if key == "int":
            if not isinstance(val, int) or isinstance(val, bool):
                raise self.fail(f"{where}.int", f"expected int, found {_kind(val)}")
            return val
        if key == "float":
            try:
                return decode_float(val)
            except ValueError:
                raise self.fail(f"{where}.float", f"expected a number, found {_kind(val)}") from None
        if key == "bool":
            if not isinstance(val, bool):
                raise self.fail(f"{where}.bool", f"expected bool, found {_kind(val)}")
            return val
        if key == "str":
            if not isinstance(val, str):
                raise self.fail(f"{where}.str", f"expected str, found {_kind(val)}")
            return val
        raise self.fail(where, f"unknown argument kind {key!r}")


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {dict: "object", list: "list", str: "str", bool: "bool", int: "int", float: "float"}.get(
        type(v), type(v).__name__
    )


def parse(doc: Any, source: str = "torch-ir.json") -> TorchIR:
    r = _Reader(source)
    doc = r.obj(doc, "(top level)")
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise r.fail("format", f"expected {FORMAT!r}, found {fmt!r}; is this a torch-ir.json file?")
    version = r.field(doc, "version", "", int)
    if version != VERSION:
        raise r.fail("version", f"this rlx reads version {VERSION}, found {version}; upgrade rlx")

    symbols = _parse_symbols(r, doc)
    data_symbols = _parse_symbols(r, doc, "data_symbols")
    clash = {s.name for s in symbols} & {s.name for s in data_symbols}
    if clash:
        raise r.fail("data_symbols", f"{', '.join(sorted(clash))} also named in symbols")
    defined: set[str] = set()  # ids of inputs, weights and nodes so far: references must point back
    inputs = _parse_inputs(r, doc, symbols, defined)
    weights = _parse_weights(r, doc, defined)
    nodes = _parse_nodes(r, doc, defined)
    outputs = _parse_outputs(r, doc, defined)
    state_updates = _parse_state_updates(r, doc, inputs, weights)

    known = {"format", "version", "model_name", "producer", "decomposition", "inputs", "weights", "nodes", "outputs",
             "output_tree", "symbols", "data_symbols"}  # fmt: skip
    return TorchIR(
        model_name=str(doc.get("model_name") or "model"),
        inputs=inputs,
        weights=weights,
        nodes=nodes,
        outputs=outputs,
        producer=str(doc.get("producer") or ""),
        decomposition=str(doc.get("decomposition") or ""),
        output_tree=doc.get("output_tree"),
        symbols=[sym for sym in symbols if sym.hint >= 0],
        extra={k: v for k, v in doc.items() if k not in known},
        data_symbols=data_symbols,
        state_updates=state_updates,
    )


def _parse_state_updates(
    r: _Reader, doc: dict[str, Any], inputs: list[Input], weights: list[TorchWeight]
) -> dict[str, int]:
    """``outputs[k].state``: the buffer or input that output ``k`` is the new value of."""
    targets = {w.id for w in weights if w.kind == "buffer"} | {i.id for i in inputs}
    updates: dict[str, int] = {}
    for k, raw in enumerate(doc["outputs"]):
        target = raw.get("state") if isinstance(raw, dict) else None
        if target is None:
            continue
        at = f"outputs[{k}].state"
        if not isinstance(target, str) or target not in targets:
            raise r.fail(at, f"{target!r} is not a buffer or input of this graph")
        if target in updates:
            raise r.fail(at, f"{target!r} is updated by two outputs")
        updates[target] = k
    return updates


def _define(r: _Reader, defined: set[str], name: str, where: str) -> None:
    if name in defined:
        raise r.fail(where, f"id {name!r} defined twice")
    defined.add(name)


def _parse_symbols(r: _Reader, doc: dict[str, Any], key: str = "symbols") -> list[Symbol]:
    symbols = []
    raw_list = doc.get(key) or []
    if not isinstance(raw_list, list):
        raise r.fail(key, f"expected a list, found {_kind(raw_list)}")
    for k, raw in enumerate(raw_list):
        at = f"{key}[{k}]"
        d = r.obj(raw, at)
        name = r.field(d, "name", at, str)
        if not name.isidentifier():
            raise r.fail(f"{at}.name", f"{name!r} is not an identifier")
        hi = d.get("max")
        if hi is not None and (not isinstance(hi, int) or isinstance(hi, bool)):
            raise r.fail(f"{at}.max", f"expected an int or null, found {_kind(hi)}")
        symbols.append(Symbol(name, r.field(d, "min", at, int), hi, r.field(d, "hint", at, int)))
    return symbols


def _parse_inputs(r: _Reader, doc: dict[str, Any], symbols: list[Symbol], defined: set[str]) -> list[Input]:
    """The inputs; a ``dynamic`` list marks symbolic axes, adding symbols the table lacks (in place)."""
    inputs = []
    for at, d in r.entries(doc, "inputs"):
        shape = r.sym_shape(d, at)
        dyn = d.get("dynamic")
        if dyn is not None:
            shape = _dynamic_shape(r, dyn, shape, symbols, at)
        inp = Input(id=r.field(d, "id", at, str), shape=shape, dtype=r.dtype(d.get("dtype"), f"{at}.dtype"))
        _define(r, defined, inp.id, f"{at}.id")
        inputs.append(inp)
    return inputs


def _dynamic_shape(r: _Reader, dyn: Any, shape: Shape, symbols: list[Symbol], at: str) -> Shape:
    if (
        not isinstance(dyn, list)
        or len(dyn) != len(shape)
        or not all(isinstance(s, int) and not isinstance(s, bool) and -1 <= s < MAX_SYMBOLS for s in dyn)
    ):
        raise r.fail(f"{at}.dynamic", "expected one int per axis: a symbol id or -1")
    for s, dim in zip(dyn, shape):
        # Producers without a `symbols` table (the reference's) get symbols s<id>, with
        # the example extent as hint and no upper bound.
        while s >= len(symbols):
            symbols.append(Symbol(f"s{len(symbols)}", 0, None, -1))
        if s >= 0 and symbols[s].hint < 0 and isinstance(dim, int):
            symbols[s] = Symbol(symbols[s].name, symbols[s].min, symbols[s].max, dim)
    # A bare symbol id marks the axis; derived extents come from sym_shape.
    return tuple(Sym(symbols[s].name) if s >= 0 else dim for s, dim in zip(dyn, shape))


def _parse_weights(r: _Reader, doc: dict[str, Any], defined: set[str]) -> list[TorchWeight]:
    weights = []
    for at, d in r.entries(doc, "weights"):
        kind = d.get("kind", "param")
        if kind not in ("param", "buffer", "const"):
            raise r.fail(f"{at}.kind", f"expected param, buffer or const, found {kind!r}")
        w = TorchWeight(
            r.field(d, "id", at, str),
            r.field(d, "key", at, str),
            r.shape(d.get("shape"), f"{at}.shape"),
            r.dtype(d.get("dtype"), f"{at}.dtype"),
            kind,
        )
        _define(r, defined, w.id, f"{at}.id")
        weights.append(w)
    return weights


def _parse_nodes(r: _Reader, doc: dict[str, Any], defined: set[str]) -> list[Node]:
    nodes = []
    for at, d in r.entries(doc, "nodes"):
        node_id = r.field(d, "id", at, str)
        op = r.field(d, "op", at, str)
        args = tuple(r.arg(a, f"{at}.args[{j}]", defined) for j, a in enumerate(r.field(d, "args", at, list)))
        kwargs_raw = d.get("kwargs", {})
        kwargs = {key: r.arg(v, f"{at}.kwargs.{key}", defined) for key, v in r.obj(kwargs_raw, f"{at}.kwargs").items()}
        out_raw = d.get("out")
        multi = isinstance(out_raw, list)
        if isinstance(out_raw, list):  # = multi, spelled out so the checker narrows out_raw
            out = tuple(r.meta(m, f"{at}.out[{j}]") for j, m in enumerate(out_raw))
        else:
            out = (r.meta(out_raw, f"{at}.out"),)
        _define(r, defined, node_id, f"{at}.id")
        nodes.append(Node(node_id, op, args, kwargs, out, multi))
    return nodes


def _parse_outputs(r: _Reader, doc: dict[str, Any], defined: set[str]) -> list[Output]:
    outputs = []
    for at, d in r.entries(doc, "outputs"):
        if "const" in d:
            outputs.append(Output(ref=None, const=r.arg(d["const"], f"{at}.const", defined)))
            continue
        ref = r.field(d, "ref", at, str)
        if ref not in defined:
            raise r.fail(f"{at}.ref", f"{ref!r} is not defined by any input, weight or node")
        shape = r.sym_shape(d, at) if "shape" in d else None
        dtype = r.dtype(d["dtype"], f"{at}.dtype") if "dtype" in d else None
        outputs.append(Output(ref, None, shape, dtype))
    return outputs
