"""The Program: a straight-line list of Calls over named values, each with a shape and dtype.

Operands are ``Ref`` (a named value) or ``Lit`` (a typed scalar literal). Calls are small frozen
dataclasses (see ``calls.py``); every instruction keeps a provenance note naming the aten node it
came from, so run-time errors, generated code and the parity debugger can point back at the source.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from rlx.errors import SchemaError
from rlx.ir import dtypes
from rlx.ir.symbolic import Shape, Sym, Symbol, dim_from_json, dim_json, evaluate, names, partial_dim

PROGRAM_FORMAT = "rlx-program"
PROGRAM_VERSION = 1


@dataclass(frozen=True)
class Ref:
    """A reference to a named value (input, weight or instruction result)."""

    name: str


@dataclass(frozen=True)
class Lit:
    """A scalar literal with an explicit dtype, so kernels never guess promotion."""

    value: bool | int | float | Sym  # Sym: a shape-derived integer known once inputs are bound
    dtype: str


Operand = Ref | Lit

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # (Python 3.10: only type checkers read it)

    def dataclass_transform(**_: Any) -> Callable[[type], type]:
        return lambda cls: cls


CALL_TYPES: dict[str, type[Call]] = {}  # the portable Calls by name: what a program.json may hold


@dataclass_transform(frozen_default=True)
@dataclass(frozen=True)
class Call:
    """Base of the Call vocabulary. Every subclass is made a frozen dataclass of the fields it
    declares (no decorator to forget: Calls are hashable and compared by value, which the passes'
    common-subexpression and cache keys rely on). Subclasses register themselves by class name in
    ``CALL_TYPES``; an engine's own Calls (``portable=False``: made by its load-time passes) do
    not, so a program.json cannot name them."""

    op: ClassVar[str] = "call"
    portable: ClassVar[bool] = True

    def __init_subclass__(cls, portable: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(frozen=True)(cls)
        cls.op = cls.__name__
        cls.portable = portable
        if portable:
            CALL_TYPES[cls.__name__] = cls

    @classmethod
    def operand_fields(cls) -> tuple[str, ...]:
        """Fields holding operands (values read at run time), in declaration order."""
        cached = cls.__dict__.get("_operand_fields")
        if cached is None:
            hints = typing.get_type_hints(cls)
            cached = tuple(f.name for f in dataclasses.fields(cls) if _holds_operands(hints[f.name]))
            cls._operand_fields = cached  # type: ignore[attr-defined]
        return cached

    def refs(self) -> Iterator[Ref]:
        """Every value this call reads, in field order."""
        for f in dataclasses.fields(self):
            yield from _refs_in(getattr(self, f.name))

    def replace_refs(self, mapping: dict[str, Ref | Lit]) -> Call:
        """A copy with references renamed through ``mapping`` (used by passes)."""
        changes = {f.name: _replace_in(getattr(self, f.name), mapping) for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **changes)


def _holds_operands(t: Any) -> bool:
    """Whether a field of type ``t`` holds values read at run time (a Ref or Lit, maybe in a tuple)."""
    return t in (Ref, Lit) or any(_holds_operands(a) for a in typing.get_args(t))


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def field_types(cls: type[Call]) -> dict[str, Any]:
    """The resolved type of every field of a Call class (resolved once per class)."""
    if cls not in _FIELD_TYPES:
        hints = typing.get_type_hints(cls)
        _FIELD_TYPES[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return _FIELD_TYPES[cls]


def resolve_operand(v: Any, env: Mapping[str, Any]) -> Any:
    """A Call operand from a value environment: Refs looked up, literals as 0-d numpy arrays,
    tuples as lists, absent optionals as None — the form every engine's kernels receive."""
    if isinstance(v, Ref):
        return env[v.name]
    if isinstance(v, Lit):
        return np.asarray(v.value, dtype=dtypes.to_numpy(v.dtype))
    if isinstance(v, tuple):
        return [resolve_operand(x, env) for x in v]
    return None


def _refs_in(v: Any) -> Iterator[Ref]:
    if isinstance(v, Ref):
        yield v
    elif isinstance(v, tuple):
        for item in v:
            yield from _refs_in(item)


def mentions_sym(v: Any) -> bool:
    """Whether a Call (or a field of one) mentions a symbolic size: its value is known only at run time."""
    if isinstance(v, Sym):
        return True
    if isinstance(v, Lit):
        return isinstance(v.value, Sym)
    if isinstance(v, tuple):
        return any(mentions_sym(x) for x in v)
    if dataclasses.is_dataclass(v) and not isinstance(v, (Ref, type)):
        return any(mentions_sym(getattr(v, f.name)) for f in dataclasses.fields(v))
    return False


def _replace_in(v: Any, mapping: dict[str, Ref | Lit]) -> Any:
    if isinstance(v, Ref):
        return mapping.get(v.name, v)
    if isinstance(v, tuple):
        return tuple(_replace_in(item, mapping) for item in v)
    return v


@dataclass(frozen=True)
class Value:
    """A named tensor with a static shape and a dtype token."""

    name: str
    shape: Shape
    dtype: str


@dataclass(frozen=True)
class Weight:
    """A parameter, buffer or lifted constant, stored in ``weights.safetensors`` under ``key``."""

    name: str
    key: str
    shape: Shape
    dtype: str


@dataclass
class Instr:
    """``result = call`` with the result's shape/dtype and where it came from."""

    result: str
    call: Call
    shape: Shape
    dtype: str
    node: str = ""  # id of the source aten node
    note: str = ""  # "aten.op.overload (x[2,3], y[3]) -> [2,3] f32"


@dataclass(frozen=True)
class StateVar:
    """A buffer the program updates on every call (a KV cache): the input ``name`` carries its
    current value in, output ``output`` its new value out; ``key`` names its initial value in
    ``weights.safetensors``."""

    name: str
    key: str
    output: int


@dataclass
class Program:
    name: str
    inputs: list[Value]
    weights: list[Weight]
    instrs: list[Instr]
    outputs: list[Operand]
    output_tree: Any = None  # nested {"tuple"|"list": [...]} / {"dict": [[k, v]...]} / {"out": i} / {"const": x}
    source_histogram: dict[str, int] = field(default_factory=dict)
    source_format: str = "rlx-torch-ir/1"
    symbols: list[Symbol] = field(default_factory=list)  # input symbols of dynamic shapes
    # aten value id → the program value holding it, for every aten value that is one tensor
    # (the parity debugger compares them; the code generator names values after them).
    value_map: dict[str, str] = field(default_factory=dict)
    guards: list[str] = field(default_factory=list)  # boolean expressions torch asserted over them
    # Sizes known only once the data is (nonzero's row count …): bound at run time by the
    # instruction whose result first has that extent.
    data_symbols: list[Symbol] = field(default_factory=list)
    state: list[StateVar] = field(default_factory=list)
    # Inputs the model updates in place (``x.add_(1)`` on an argument): input name → the output
    # holding the new value, which the runtime writes back into the caller's array.
    input_updates: dict[str, int] = field(default_factory=dict)

    @property
    def is_dynamic(self) -> bool:
        return bool(self.symbols)

    @property
    def user_inputs(self) -> list[Value]:
        """The inputs a caller passes (state inputs are carried by the runtime)."""
        carried = {s.name for s in self.state}
        return [v for v in self.inputs if v.name not in carried]

    @property
    def n_user_outputs(self) -> int:
        """Outputs before the state and input updates (which come last)."""
        return len(self.outputs) - len(self.state) - len(self.input_updates)

    def values(self) -> dict[str, Value]:
        """Every named value of the program with its shape and dtype."""
        out: dict[str, Value] = {v.name: v for v in self.inputs}
        out.update({w.name: Value(w.name, w.shape, w.dtype) for w in self.weights})
        out.update({i.result: Value(i.result, i.shape, i.dtype) for i in self.instrs})
        return out

    def call_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for ins in self.instrs:
            hist[ins.call.op] = hist.get(ins.call.op, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))

    # ── JSON ────────────────────────────────────────────────────────────────
    def to_json(self) -> dict[str, Any]:
        doc = self._core_json()
        # Written only when present, so programs without them stay byte-identical to older ones.
        if self.data_symbols:
            doc["data_symbols"] = [_symbol_json(s) for s in self.data_symbols]
        if self.state:
            doc["state"] = [{"name": s.name, "key": s.key, "output": s.output} for s in self.state]
        if self.input_updates:
            doc["input_updates"] = [{"name": n, "output": k} for n, k in self.input_updates.items()]
        return doc

    def _core_json(self) -> dict[str, Any]:
        return {
            "format": PROGRAM_FORMAT,
            "version": PROGRAM_VERSION,
            "name": self.name,
            "source_format": self.source_format,
            "inputs": [_value_json(v) for v in self.inputs],
            "weights": [
                {"name": w.name, "key": w.key, "shape": _shape_json(w.shape), "dtype": w.dtype} for w in self.weights
            ],
            "instrs": [
                {
                    "result": i.result,
                    "op": i.call.op,
                    "args": {f.name: encode(getattr(i.call, f.name)) for f in dataclasses.fields(i.call)},
                    "shape": _shape_json(i.shape),
                    "dtype": i.dtype,
                    "node": i.node,
                    "note": i.note,
                }
                for i in self.instrs
            ],
            "outputs": [encode(o) for o in self.outputs],
            "output_tree": self.output_tree,
            "value_map": self.value_map,
            "source_histogram": self.source_histogram,
            "symbols": [_symbol_json(s) for s in self.symbols],
            "guards": list(self.guards),
        }

    def dumps(self) -> str:
        return dumps_json(self.to_json())

    @classmethod
    def from_json(
        cls, doc: Any, where: str = "program.json", engine_calls: Mapping[str, type[Call]] | None = None
    ) -> Program:
        """The Program of ``doc``; its instructions may name the portable Calls (``CALL_TYPES``)
        and, to read back an engine's rewritten program, that engine's own ``engine_calls``."""
        return _program_from_json(doc, where, {**CALL_TYPES, **(engine_calls or {})})


def dumps_json(doc: Any) -> str:
    """Deterministic, strict JSON (non-finite floats are encoded by ``encode`` beforehand)."""
    return json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n"


def _symbol_json(s: Symbol) -> dict[str, Any]:
    return {"name": s.name, "min": s.min, "max": s.max, "hint": s.hint}


def _value_json(v: Value) -> dict[str, Any]:
    return {"name": v.name, "shape": _shape_json(v.shape), "dtype": v.dtype}


def _shape_json(shape: Shape) -> list[int | str]:
    return [dim_json(d) for d in shape]


# ── generic encoding of call fields ──────────────────────────────────────────
def encode_float(x: float) -> float | str:
    """JSON has no inf/NaN: they travel as the strings "inf", "-inf", "nan"."""
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def decode_float(x: Any) -> float:
    if isinstance(x, str) and x in ("inf", "-inf", "nan", "Infinity", "-Infinity", "NaN"):
        return float(x.replace("Infinity", "inf").replace("NaN", "nan"))
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    raise ValueError(f"not a float: {x!r}")


def encode(v: Any) -> Any:
    if isinstance(v, Ref):
        return {"ref": v.name}
    if isinstance(v, Lit):
        val = encode_float(v.value) if isinstance(v.value, float) else v.value
        return {"lit": encode(val) if isinstance(val, Sym) else val, "dtype": v.dtype}
    if isinstance(v, Sym):
        return {"sym": v.expr}
    if isinstance(v, tuple):
        return [encode(x) for x in v]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):  # a record field (a fused step)
        return {"record": {f.name: encode(getattr(v, f.name)) for f in dataclasses.fields(v)}}
    if isinstance(v, float):
        return encode_float(v) if not math.isfinite(v) else v
    return v


def _decode_lit(raw: Any, tok: str, where: str) -> Lit:
    if isinstance(raw, dict) and set(raw) == {"sym"} and isinstance(raw["sym"], str):
        return Lit(dim_from_json(raw["sym"], f"{where}.lit"), tok)
    if dtypes.is_float(tok) or dtypes.is_complex(tok):
        return Lit(_or_schema(decode_float, raw, where), tok)
    if tok == "bool":
        if not isinstance(raw, bool):
            raise SchemaError(f"{where}: bool literal expected, found {raw!r}")
        return Lit(raw, tok)
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise SchemaError(f"{where}: integer literal expected, found {raw!r}")
    return Lit(raw, tok)


def _decode(v: Any, where: str) -> Any:
    if isinstance(v, dict):
        if set(v) == {"ref"} and isinstance(v["ref"], str):
            return Ref(v["ref"])
        if set(v) == {"sym"} and isinstance(v["sym"], str):
            dim = dim_from_json(v["sym"], where)
            return dim
        if set(v) == {"lit", "dtype"}:
            return _decode_lit(v["lit"], dtypes.check(v["dtype"], f"{where}.dtype"), where)
        if set(v) == {"record"} and isinstance(v["record"], dict):
            return _Record({k: _decode(x, f"{where}.{k}") for k, x in v["record"].items()})
        raise SchemaError(f"{where}: unexpected object {sorted(v)}")
    if isinstance(v, list):
        return tuple(_decode(x, f"{where}[{k}]") for k, x in enumerate(v))
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    return v


def type_name(t: Any) -> str:
    """``int | Sym``, ``tuple[int, ...]``: a field type as the error messages spell it."""
    args = typing.get_args(t)
    if _is_union(t):
        return " | ".join(type_name(a) for a in args)
    if typing.get_origin(t) is tuple:
        return "tuple[" + ", ".join("..." if a is Ellipsis else type_name(a) for a in args) + "]"
    return "None" if t is type(None) else getattr(t, "__name__", str(t))


def _is_union(t: Any) -> bool:
    return isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union


def conform(value: Any, t: Any, where: str) -> Any:
    """Check a decoded call field against its type (``tuple[Dim, ...]``, ``Ref | None`` …), so a
    hand-edited or hostile program.json fails here with its JSON path, not in a kernel."""
    if not _is_union(t):
        return _conform_one(value, t, where)
    errors = []
    for option in typing.get_args(t):
        try:
            return _conform_one(value, option, where)
        except SchemaError as e:
            errors.append(e)
    raise SchemaError(f"{where}: expected {type_name(t)}, found {value!r}"[:300])


@dataclass(frozen=True)
class _Record:
    """A decoded record field, before its type (known from the Call's annotation) builds it."""

    fields: dict[str, Any]


def _conform_record(value: Any, t: type, where: str) -> Any:
    hints = typing.get_type_hints(t)
    names = [f.name for f in dataclasses.fields(t)]
    if not isinstance(value, _Record) or set(value.fields) != set(names):
        raise SchemaError(f"{where}: expected a {t.__name__} record with fields {names}, found {value!r}"[:300])
    return t(**{n: conform(value.fields[n], hints[n], f"{where}.{n}") for n in names})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Scalar field types: the check a decoded value must pass, and what it becomes.
_SCALARS: dict[Any, tuple[Callable[[Any], bool], Callable[[Any], Any]]] = {
    type(None): (lambda v: v is None, lambda v: v),
    Ref: (lambda v: isinstance(v, Ref), lambda v: v),
    Lit: (lambda v: isinstance(v, Lit), lambda v: v),
    Sym: (lambda v: isinstance(v, Sym), lambda v: v),
    int: (_is_int, lambda v: v),
    float: (lambda v: _is_int(v) or isinstance(v, float), float),
    bool: (lambda v: isinstance(v, bool), lambda v: v),
    str: (lambda v: isinstance(v, str), lambda v: v),
}


def _conform_one(value: Any, t: Any, where: str) -> Any:
    def bad() -> SchemaError:
        return SchemaError(f"{where}: expected {type_name(t)}, found {value!r}"[:300])

    if t in _SCALARS:
        check, convert = _SCALARS[t]
        if not check(value):
            raise bad()
        return convert(value)
    if _is_union(t):
        return conform(value, t, where)
    if dataclasses.is_dataclass(t) and isinstance(t, type):
        return _conform_record(value, t, where)
    if typing.get_origin(t) is tuple:
        inner = typing.get_args(t)
        if not isinstance(value, tuple):
            raise bad()
        if len(inner) == 2 and inner[1] is Ellipsis:
            return tuple(conform(v, inner[0], f"{where}[{k}]") for k, v in enumerate(value))
        if len(value) != len(inner):
            raise bad()
        return tuple(conform(v, ti, f"{where}[{k}]") for k, (v, ti) in enumerate(zip(value, inner)))
    raise SchemaError(f"{where}: a {type_name(t)} field cannot be read from JSON")


def _or_schema(fn: Any, raw: Any, where: str) -> Any:
    try:
        return fn(raw)
    except ValueError as e:
        raise SchemaError(f"{where}: {e}") from None


def _shape(raw: Any, where: str) -> Shape:
    if not isinstance(raw, list):
        raise SchemaError(f"{where}: shape must be a list, found {type(raw).__name__}")
    return tuple(dim_from_json(d, f"{where}[{k}]") for k, d in enumerate(raw))


def _symbols(raw: Any, where: str, key: str = "symbols") -> list[Symbol]:
    out = []
    for k, s in enumerate(raw if isinstance(raw, list) else []):
        at = f"{where}.{key}[{k}]"
        name, lo, hi, hint = _get(s, "name", at, str), _get(s, "min", at, int), s.get("max"), _get(s, "hint", at, int)
        if not name.isidentifier() or (hi is not None and (not isinstance(hi, int) or isinstance(hi, bool))):
            raise SchemaError(f"{at}: expected an identifier name and an int or null max")
        out.append(Symbol(name, lo, hi, hint))
    return out


def _get(d: Any, key: str, where: str, typ: type | tuple[type, ...]) -> Any:
    if not isinstance(d, dict):
        raise SchemaError(f"{where}: expected an object, found {type(d).__name__}")
    if key not in d:
        raise SchemaError(f"{where}.{key}: missing")
    v = d[key]
    if not isinstance(v, typ) or (isinstance(v, bool) and typ is int):
        raise SchemaError(f"{where}.{key}: expected {getattr(typ, '__name__', typ)}, found {type(v).__name__}")
    return v


def _program_from_json(doc: Any, where: str, call_types: Mapping[str, type[Call]]) -> Program:
    if _get(doc, "format", where, str) != PROGRAM_FORMAT:
        raise SchemaError(f"{where}.format: expected {PROGRAM_FORMAT!r}, found {doc['format']!r}")
    version = _get(doc, "version", where, int)
    if version != PROGRAM_VERSION:
        raise SchemaError(f"{where}.version: this rlx reads version {PROGRAM_VERSION}, found {version}; upgrade rlx")
    inputs = [
        Value(
            _get(v, "name", f"{where}.inputs[{k}]", str),
            _shape(_get(v, "shape", f"{where}.inputs[{k}]", list), f"{where}.inputs[{k}].shape"),
            dtypes.check(_get(v, "dtype", f"{where}.inputs[{k}]", str), f"{where}.inputs[{k}].dtype"),
        )
        for k, v in enumerate(_get(doc, "inputs", where, list))
    ]
    weights = [
        Weight(
            _get(w, "name", f"{where}.weights[{k}]", str),
            _get(w, "key", f"{where}.weights[{k}]", str),
            _shape(_get(w, "shape", f"{where}.weights[{k}]", list), f"{where}.weights[{k}].shape"),
            dtypes.check(_get(w, "dtype", f"{where}.weights[{k}]", str), f"{where}.weights[{k}].dtype"),
        )
        for k, w in enumerate(_get(doc, "weights", where, list))
    ]
    instrs = []
    for k, raw in enumerate(_get(doc, "instrs", where, list)):
        at = f"{where}.instrs[{k}]"
        op = _get(raw, "op", at, str)
        cls = call_types.get(op)
        if cls is None:
            raise SchemaError(f"{at}.op: unknown call {op!r}; this bundle needs a newer rlx")
        args = _get(raw, "args", at, dict)
        names = {f.name for f in dataclasses.fields(cls)}
        optional = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        if not set(args) <= names or names - optional - set(args):
            raise SchemaError(f"{at}.args: {op} takes {sorted(names)}, found {sorted(args)}")
        hints = field_types(cls)
        call = cls(**{n: conform(_decode(args[n], f"{at}.args.{n}"), hints[n], f"{at}.args.{n}") for n in args})
        instrs.append(
            Instr(
                result=_get(raw, "result", at, str),
                call=call,
                shape=_shape(_get(raw, "shape", at, list), f"{at}.shape"),
                dtype=dtypes.check(_get(raw, "dtype", at, str), f"{at}.dtype"),
                node=raw.get("node", "") if isinstance(raw.get("node", ""), str) else "",
                note=raw.get("note", "") if isinstance(raw.get("note", ""), str) else "",
            )
        )
    outputs = []
    for k, o in enumerate(_get(doc, "outputs", where, list)):
        dec = _decode(o, f"{where}.outputs[{k}]")
        if not isinstance(dec, (Ref, Lit)):
            raise SchemaError(f"{where}.outputs[{k}]: expected a ref or literal")
        outputs.append(dec)
    hist = doc.get("source_histogram", {})
    return Program(
        name=_get(doc, "name", where, str),
        inputs=inputs,
        weights=weights,
        instrs=instrs,
        outputs=outputs,
        output_tree=doc.get("output_tree"),
        value_map=_value_map(doc.get("value_map", {}), where),
        source_histogram=hist if isinstance(hist, dict) else {},
        source_format=doc.get("source_format", "") if isinstance(doc.get("source_format", ""), str) else "",
        symbols=_symbols(doc.get("symbols", []), where),
        guards=[_guard(g, f"{where}.guards[{k}]") for k, g in enumerate(doc.get("guards", []) or [])],
        data_symbols=_symbols(doc.get("data_symbols", []), where, "data_symbols"),
        state=_state(doc.get("state", []), where, inputs, len(outputs)),
        input_updates=_input_updates(doc.get("input_updates", []), where, inputs, len(outputs)),
    )


def _input_updates(raw: Any, where: str, inputs: list[Value], n_outputs: int) -> dict[str, int]:
    if not isinstance(raw, list):
        raise SchemaError(f"{where}.input_updates: expected a list")
    names = {v.name for v in inputs}
    out: dict[str, int] = {}
    for k, u in enumerate(raw):
        at = f"{where}.input_updates[{k}]"
        name, output = _get(u, "name", at, str), _get(u, "output", at, int)
        if name not in names or name in out or not 0 <= output < n_outputs:
            raise SchemaError(f"{at}: expected a distinct input name and an output index below {n_outputs}")
        out[name] = output
    return out


def _state(raw: Any, where: str, inputs: list[Value], n_outputs: int) -> list[StateVar]:
    if not isinstance(raw, list):
        raise SchemaError(f"{where}.state: expected a list")
    names = {v.name for v in inputs}
    out = []
    for k, s in enumerate(raw):
        at = f"{where}.state[{k}]"
        var = StateVar(_get(s, "name", at, str), _get(s, "key", at, str), _get(s, "output", at, int))
        if var.name not in names:
            raise SchemaError(f"{at}.name: {var.name!r} is not an input of the program")
        if not n_outputs - len(raw) <= var.output < n_outputs:
            raise SchemaError(f"{at}.output: {var.output} is not one of the last {len(raw)} outputs")
        out.append(var)
    if len({s.name for s in out}) != len(out) or len({s.output for s in out}) != len(out):
        raise SchemaError(f"{where}.state: a state input or output is listed twice")
    return out


def _value_map(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise SchemaError(f"{where}.value_map: expected an object of strings")
    return raw


def _guard(raw: Any, where: str) -> str:
    if not isinstance(raw, str):
        raise SchemaError(f"{where}: expected an expression string")
    dim_from_json(raw, where)  # parses and checks the expression
    return raw


def _subst_dims(v: Any, bindings: Mapping[str, int]) -> Any:
    """``v`` with the bound symbols evaluated; expressions reading a data-dependent size (not
    bound yet) keep that part symbolic."""
    if isinstance(v, Sym):
        return partial_dim(v, bindings)
    if isinstance(v, Lit) and isinstance(v.value, Sym):
        if not names(v.value.expr) <= bindings.keys():
            return Lit(partial_dim(v.value, bindings), v.dtype)
        if dtypes.is_float(v.dtype):  # a symbolic float (e.g. a scale in/out): no integrality check
            return Lit(float(evaluate(v.value.expr, bindings)), v.dtype)
        return Lit(partial_dim(v.value, bindings), v.dtype)
    if isinstance(v, tuple):
        return tuple(_subst_dims(x, bindings) for x in v)
    return v


def subst_call(call: Call, bindings: Mapping[str, int]) -> Call:
    """``call`` with its symbolic fields evaluated (as far as ``bindings`` reach)."""
    changes = {}
    for f in dataclasses.fields(call):
        v = getattr(call, f.name)
        new = _subst_dims(v, bindings)
        if new is not v:
            changes[f.name] = new
    return dataclasses.replace(call, **changes) if changes else call


def specialize(program: Program, bindings: dict[str, int]) -> Program:
    """The program with every symbolic extent evaluated for one binding of the input symbols
    (extents that depend on data stay symbolic until the run computes them)."""
    instrs = [
        Instr(ins.result, subst_call(ins.call, bindings), _partial_shape(ins.shape, bindings), ins.dtype, ins.node,
              ins.note)
        for ins in program.instrs
    ]  # fmt: skip
    return dataclasses.replace(
        program,
        inputs=[Value(v.name, _partial_shape(v.shape, bindings), v.dtype) for v in program.inputs],
        instrs=instrs,
        symbols=[],
        guards=[],
    )


def _partial_shape(shape: Shape, bindings: Mapping[str, int]) -> Shape:
    return tuple(partial_dim(d, bindings) for d in shape)
