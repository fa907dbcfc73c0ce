"""Reading an ONNX model: protobuf, external data, opsets, local functions, types and graph order.

Everything a malformed file can get wrong is refused here with a one-line ``SchemaError`` before
any lowering starts: a truncated or garbage protobuf, an opset newer than the installed ``onnx``
knows, a node reading a value nothing produces, a cycle, an initializer whose data does not match
its declared type or shape, and value types other than tensors (sequence, optional, map).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlx.errors import SchemaError, UnsupportedOpError, UsageError
from rlx.frontends.onnx.boundary import check_text, load_external_data, one_line
from rlx.frontends.onnx.input_shapes import dim_param
from rlx.frontends.onnx.registry import OnnxNode
from rlx.ir.symbolic import Dim, Sym, Symbol

MIN_OPSET = 7
DEFAULT_HINT = 2  # example extent of a dynamic axis when no example inputs are given

# TensorProto.DataType → rlx dtype token (the types rlx has kernels for).
ELEM_TYPES = {
    1: "f32",
    2: "u8",
    3: "i8",
    4: "u16",
    5: "i16",
    6: "i32",
    7: "i64",
    9: "bool",
    10: "f16",
    11: "f64",
    12: "u32",
    13: "u64",
    14: "c64",
    15: "c128",
    16: "bf16",
    # storage-and-cast types (ml_dtypes): rlx moves and casts them, never computes on them
    17: "f8e4m3fn",
    18: "f8e4m3fnuz",
    19: "f8e5m2",
    20: "f8e5m2fnuz",
    21: "u4",
    22: "i4",
    23: "f4e2m1",
    24: "f8e8m0",
    25: "u2",
    26: "i2",
}
_TYPE_NAMES = {8: "string", 27: "float6e2m3", 28: "float6e3m2"}
_PACKED = {"u4": 2, "i4": 2, "f4e2m1": 2, "u2": 4, "i2": 4}  # elements per byte of raw data
TRAINING_DOMAIN = "ai.onnx.preview.training"


def onnx_module() -> Any:
    try:
        import onnx
    except ImportError:
        raise UsageError("ONNX import needs the onnx package: pip install 'rlx[onnx]'") from None
    return onnx


def elem_dtype(elem_type: int, where: str) -> str:
    tok = ELEM_TYPES.get(elem_type)
    if tok is None:
        name = _TYPE_NAMES.get(elem_type, f"type {elem_type}")
        raise UnsupportedOpError(f"{where}: element type {name} is not supported by rlx")
    return tok


@dataclass
class OnnxGraph:
    """A checked, topologically ordered ONNX graph ready to lower."""

    name: str
    opsets: dict[str, int]
    inputs: list[tuple[str, tuple[Dim, ...], str]]  # (name, shape, dtype)
    outputs: list[str]
    initializers: dict[str, np.ndarray]
    nodes: list[OnnxNode]
    symbols: list[Symbol]
    declared: dict[str, str | None] = field(default_factory=dict)  # value → dtype shape inference gives
    producer: str = ""

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            key = f"{n.domain + '::' if n.domain else ''}{n.op_type}"
            hist[key] = hist.get(key, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def load_proto(model: Any, base_dir: str | Path | None = None) -> Any:
    """A ``ModelProto`` from a path or a ``ModelProto``, with its external data read in.

    External data is read only from inside the model's directory (symlinks resolved): a file's
    own directory, or for a ``ModelProto`` the ``base_dir`` given (without one, a model that keeps
    data outside the protobuf is refused). A ``ModelProto`` passed in is never modified."""
    onnx = onnx_module()
    if isinstance(model, onnx.ModelProto):
        check_text(model, "model")
        return load_external_data(model, base_dir, model_name(model))
    if not isinstance(model, (str, os.PathLike)):
        raise UsageError(f"expected a path to an .onnx file or an onnx.ModelProto, found {type(model).__name__}")
    path = Path(model)
    if not path.is_file():
        raise UsageError(f"{path}: no such file; pass an .onnx model")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {one_line(e)}") from None
    try:
        proto = onnx.load_model_from_string(raw)
    except Exception as e:  # DecodeError, RuntimeWarning-as-error, …: the onnx package's boundary
        raise SchemaError(f"{path}: not a valid ONNX protobuf ({type(e).__name__}: {one_line(e, 120)})") from None
    _check_proto(proto, str(path))
    check_text(proto, str(path))
    return load_external_data(proto, path.parent if base_dir is None else base_dir, str(path))


def model_name(proto: Any) -> str:
    """How messages name a ``ModelProto`` that has no file: its graph's name, on one line."""
    return one_line(proto.graph.name, 80) or "model"


def _check_proto(proto: Any, where: str) -> None:
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.graph.output:
        raise SchemaError(f"{where}: not an ONNX model (no IR version or no graph outputs); is the file truncated?")


def read(
    model: Any,
    example_shapes: dict[str, tuple[int, ...]] | None = None,
    freeze: dict[str, np.ndarray] | None = None,
    base_dir: str | Path | None = None,
    name: str | None = None,
) -> OnnxGraph:
    """Load, check, inline and order a model (``model`` is a path or a ``ModelProto``; ``base_dir``:
    where a ``ModelProto``'s external data lives).

    ``freeze`` fixes inputs to given values: they become initializers, so shape parameters fed as
    inputs (axes, target shapes, pads) are known while converting. ``name``: how messages name the
    model (default: its path, or its graph's name)."""
    onnx = onnx_module()
    proto = load_proto(model, base_dir)
    where = name or (str(model) if not isinstance(model, onnx.ModelProto) else model_name(proto))
    _check_proto(proto, where)
    proto = _upgrade(proto, where)
    opsets = _opsets(proto, where)
    if proto.functions:
        try:
            from onnx import inliner

            proto = inliner.inline_local_functions(proto)
        except Exception as e:
            raise SchemaError(f"{where}: cannot inline its local functions: {one_line(e)}") from None
    proto = expand_schema_functions(proto, where)
    declared = _declared_types(proto)
    g = proto.graph
    initializers = {t.name: _initializer(t) for t in g.initializer}
    for name, value in (freeze or {}).items():
        if name not in {vi.name for vi in g.input}:
            raise UsageError(f"freeze: the model has no input named {name!r}")
        initializers[name] = np.asarray(value)
    if g.sparse_initializer:
        raise UnsupportedOpError(f"{where}: sparse initializers are not supported")
    symbols: dict[str, Symbol] = {}
    inputs = []
    for vi in g.input:
        if vi.name in initializers:
            continue  # IR < 4 lists initializers as inputs too
        shape, dtype = _value_type(vi, symbols, (example_shapes or {}).get(vi.name))
        inputs.append((vi.name, shape, dtype))
    nodes = _ordered_nodes(g, opsets, set(initializers) | {i[0] for i in inputs}, where)
    produced = {o for n in nodes for o in n.outputs if o} | set(initializers) | {i[0] for i in inputs}
    outputs = [o.name for o in g.output]
    for o in g.output:
        _value_type(o, {}, None, output=True)
        if not o.name:
            raise SchemaError(f"{where}: a graph output has no name")
        if o.name not in produced:
            raise SchemaError(f"{where}: graph output {o.name!r} is never produced")
    return OnnxGraph(
        name=g.name or "onnx_model",
        opsets=opsets,
        inputs=inputs,
        outputs=outputs,
        initializers=initializers,
        nodes=nodes,
        symbols=list(symbols.values()),
        declared=declared,
        producer=f"{proto.producer_name} {proto.producer_version}".strip(),
    )


def _upgrade(proto: Any, where: str) -> Any:
    """Models older than opset 7 are converted to opset 7 with onnx's version converter."""
    version = next((int(i.version) for i in proto.opset_import if i.domain in ("", "ai.onnx")), None)
    if version is None or version >= MIN_OPSET:
        return proto
    from onnx import version_converter

    try:
        return version_converter.convert_version(proto, MIN_OPSET)
    except Exception as e:
        raise SchemaError(
            f"{where}: opset {version} could not be converted to opset {MIN_OPSET}: {one_line(e, 150)}"
        ) from None


def _opsets(proto: Any, where: str) -> dict[str, int]:
    onnx = onnx_module()
    newest = onnx.defs.onnx_opset_version()
    opsets = {}
    for imp in proto.opset_import:
        domain = "" if imp.domain in ("", "ai.onnx") else imp.domain
        opsets[domain] = int(imp.version)
    if "" not in opsets:
        if proto.ir_version >= 3:
            raise SchemaError(f"{where}: no ai.onnx opset import")
        opsets[""] = 1
    v = opsets[""]
    if v > newest:
        raise SchemaError(f"{where}: opset {v} is newer than the installed onnx package knows ({newest}); upgrade onnx")
    if v < MIN_OPSET:
        raise SchemaError(
            f"{where}: opset {v} is older than rlx reads ({MIN_OPSET}); convert it with onnx.version_converter"
        )
    if TRAINING_DOMAIN in opsets and any(n.domain == TRAINING_DOMAIN for n in proto.graph.node):
        raise UnsupportedOpError(
            f"{where}: training ops ({TRAINING_DOMAIN}) are not supported; export the inference graph"
        )
    return opsets


def _declared_types(proto: Any) -> dict[str, str | None]:
    """Element types of intermediate values from onnx shape inference (None where unknown)."""
    onnx = onnx_module()
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        return {}
    out: dict[str, str | None] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type
        if t.HasField("tensor_type") and t.tensor_type.elem_type:
            out[vi.name] = ELEM_TYPES.get(t.tensor_type.elem_type)
    return out


def _initializer(t: Any) -> np.ndarray:
    from onnx import numpy_helper

    where = f"initializer {t.name!r}"
    dims = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in dims):
        raise SchemaError(f"{where}: negative dimension in {list(dims)}")
    dtype = elem_dtype(t.data_type, where)
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if t.HasField("raw_data"):
        per_byte = _PACKED.get(dtype, 0)
        need = -(-n // per_byte) if per_byte else n * np.dtype(_np_type(dtype)).itemsize
        if len(t.raw_data) != need:
            raise SchemaError(
                f"{where}: {len(t.raw_data)} bytes of data, its type {dtype} and shape {list(dims)} need {need}"
            )
    try:
        arr = numpy_helper.to_array(t)
    except Exception as e:
        raise SchemaError(
            f"{where}: data does not match its type {dtype} and shape {list(dims)} ({one_line(e)})"
        ) from None
    if tuple(arr.shape) != dims:
        raise SchemaError(f"{where}: data has shape {list(arr.shape)}, declared {list(dims)}")
    return np.array(arr, dtype=_np_type(dtype), order="C")


def _np_type(tok: str) -> np.dtype:
    from rlx.ir import dtypes

    return dtypes.to_numpy(tok)


def _symbol_name(raw: str, used: dict[str, Symbol]) -> str:
    name = re.sub(r"\W+", "_", raw).strip("_") or "dim"
    return name if not name[0].isdigit() else "d_" + name


def _value_type(
    vi: Any, symbols: dict[str, Symbol], example: tuple[int, ...] | None, output: bool = False
) -> tuple[tuple[Dim, ...], str]:
    where = f"{'output' if output else 'input'} {vi.name!r}"
    t = vi.type
    kind = t.WhichOneof("value")
    if kind != "tensor_type":
        what = {"sequence_type": "sequence", "optional_type": "optional", "map_type": "map"}.get(kind, str(kind))
        raise UnsupportedOpError(f"{where}: {what} types are not supported (tensors only)")
    tt = t.tensor_type
    dtype = elem_dtype(tt.elem_type, where) if tt.elem_type or not output else "f32"
    if output or not tt.HasField("shape"):
        if not output and not tt.HasField("shape"):
            raise SchemaError(f"{where}: no shape (rank unknown); rlx needs the rank of every input")
        return (), dtype
    shape: list[Dim] = []
    for axis, d in enumerate(tt.shape.dim):
        hint = example[axis] if example is not None and axis < len(example) else None
        if d.HasField("dim_value") and d.dim_value >= 0:
            shape.append(int(d.dim_value))
            continue
        raw = dim_param(d) or f"{vi.name}_{axis}"
        name = _symbol_name(raw, symbols)
        if name not in symbols:
            symbols[name] = Symbol(name, 0, None, hint if hint is not None else DEFAULT_HINT)
        shape.append(Sym(name))
    return tuple(shape), dtype


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper, numpy_helper

    out = {}
    for a in node.attribute:
        where = f"node {one_line(node.name or node.op_type, 80)} ({one_line(node.op_type, 40)}) attribute {a.name!r}"
        if a.ref_attr_name:
            raise SchemaError(f"{where} refers to a function attribute")
        try:  # the onnx package's boundary: an attribute whose type and value disagree
            v = helper.get_attribute_value(a)
            if a.type == a.TENSOR:
                v = numpy_helper.to_array(v)  # external data was read in (or refused) by load_proto
        except Exception as e:
            raise SchemaError(f"{where}: cannot read its value ({type(e).__name__}: {one_line(e, 120)})") from None
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode("utf-8", "replace") for x in v]
        out[a.name] = v
    return out


def _label(n: Any, k: int | None = None) -> str:
    """How messages name a node: its name (one line), else its op type and index."""
    return one_line(n.name or (n.op_type if k is None else f"{n.op_type}_{k}"), 120)


def _producers(raw: list[Any], known: set[str], where: str) -> dict[str, int]:
    """Value name → the index of the node producing it; every value produced once and defined before use."""
    producer: dict[str, int] = {}
    for k, n in enumerate(raw):
        for o in n.output:
            if o and (o in producer or o in known):
                raise SchemaError(f"{where}: value {o!r} is produced twice (node {_label(n)})")
            if o:
                producer[o] = k
    for k, n in enumerate(raw):
        for i in n.input:
            if i and i not in producer and i not in known:
                raise SchemaError(
                    f"{where}: node {_label(n, k)} ({one_line(n.op_type, 60)}) reads {i!r}, which nothing produces"
                )
    return producer


def _ordered_nodes(g: Any, opsets: dict[str, int], known: set[str], where: str) -> list[OnnxNode]:
    """The graph's nodes in an order where every value is produced before it is read."""
    raw = list(g.node)
    producer = _producers(raw, known, where)
    order: list[int] = []
    state = [0] * len(raw)  # 0 new, 1 on the stack, 2 done
    for root in range(len(raw)):
        if state[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            k, pos = stack.pop()
            ins = [i for i in raw[k].input if i in producer]
            if pos < len(ins):
                stack.append((k, pos + 1))
                dep = producer[ins[pos]]
                if state[dep] == 1:
                    raise SchemaError(f"{where}: the graph has a cycle through node {_label(raw[dep])}")
                if state[dep] == 0:
                    state[dep] = 1
                    stack.append((dep, 0))
                continue
            state[k] = 2
            order.append(k)
    nodes = []
    names: set[str] = set()
    for k in order:
        n = raw[k]
        name = one_line(n.name or f"{n.op_type}_{k}", 200)  # names reach messages, which are one line
        while name in names:
            name += "_"
        names.add(name)
        domain = "" if n.domain in ("", "ai.onnx") else n.domain
        nodes.append(OnnxNode(name, n.op_type, domain, opsets.get(domain, 1), list(n.input), list(n.output), _attrs(n)))
    return nodes


def example_shapes(
    inputs: Sequence[Any] | Mapping[str, Any] | None, names: Sequence[str]
) -> dict[str, tuple[int, ...]]:
    if inputs is None:
        return {}
    if isinstance(inputs, Mapping):
        return {k: tuple(np.shape(v)) for k, v in inputs.items()}
    return {n: tuple(np.shape(v)) for n, v in zip(names, inputs)}


# ── ops without a handler that ONNX defines by a function body ───────────────
MAX_EXPANSION_ROUNDS = 4  # SoftmaxCrossEntropyLoss → NegativeLogLikelihoodLoss → primitives


def expand_schema_functions(proto: Any, where: str) -> Any:
    """Replace every node whose op has no rlx handler but whose ONNX schema defines it by a function
    body (Attention, the loss ops, RotaryEmbedding, the window ops …) by that body, inlined.

    The body is ONNX's own definition of the op in primitive ops, so it is lowered by the same
    handlers as any other graph; ops whose body needs the node's input types (context-dependent
    functions) get them from shape inference."""
    from rlx.frontends.onnx.registry import REGISTRY

    for _ in range(MAX_EXPANSION_ROUNDS):
        expandable = [
            k
            for k, n in enumerate(proto.graph.node)
            if ("" if n.domain in ("", "ai.onnx") else n.domain, n.op_type) not in REGISTRY
        ]
        if not expandable:
            return proto
        expanded = _expand_round(proto, expandable, where)
        if expanded is None:
            return proto
        proto = expanded
    return proto


def _input_types(proto: Any) -> dict[str, Any]:
    onnx = onnx_module()
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        inferred = proto
    g = inferred.graph
    types = {vi.name: vi.type for vi in [*g.input, *g.value_info, *g.output]}
    for t in g.initializer:
        types[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
    return types


def _expand_round(proto: Any, indices: list[int], where: str) -> Any | None:
    onnx = onnx_module()
    from onnx import inliner

    opsets = _opsets(proto, where)
    types: dict[str, Any] | None = None
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    added = 0
    for k in indices:
        node = model.graph.node[k]
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        try:
            schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
        except Exception:
            continue
        if types is None and schema.context_dependent_function_opset_versions:
            types = _input_types(proto)
        body = _function_body(schema, node, opsets.get(domain, 1), types or {})
        if body is None:
            continue
        for name, attr in schema.attributes.items():  # the body reads defaults through ref_attr_name
            if name not in {a.name for a in node.attribute} and attr.default_value.name:
                node.attribute.append(attr.default_value)
        body.name, body.domain = f"{node.op_type}_{k}", EXPANSION_DOMAIN
        node.op_type, node.domain = body.name, EXPANSION_DOMAIN
        model.functions.append(body)
        added += 1
    if not added:
        return None
    model.opset_import.append(onnx.helper.make_opsetid(EXPANSION_DOMAIN, 1))
    try:
        inlined = inliner.inline_local_functions(model)
    except Exception as e:
        raise SchemaError(f"{where}: cannot expand ONNX function bodies: {one_line(e)}") from None
    del inlined.opset_import[:]
    inlined.opset_import.extend(i for i in proto.opset_import)
    return inlined


EXPANSION_DOMAIN = "rlx.expanded"


def _function_body(schema: Any, node: Any, opset: int, types: dict[str, Any]) -> Any | None:
    """The schema's function body for ``opset`` (the newest defined at or before it), or None."""
    onnx = onnx_module()
    plain = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    body = onnx.FunctionProto()
    if dependent and (not plain or max(dependent) >= max(plain)):
        if any(i and i not in types for i in node.input):
            return None
        arg_types = [types[i].SerializeToString() if i else onnx.TypeProto().SerializeToString() for i in node.input]
        try:
            raw = schema.get_context_dependent_function_with_opset_version(
                max(dependent), node.SerializeToString(), arg_types
            )
        except Exception:
            return None
    elif plain:
        raw = schema.get_function_with_opset_version(max(plain))
    else:
        return None
    body.ParseFromString(raw)
    return body if body.node else None


def subgraph(
    g: Any, opsets: dict[str, int], outer: set[str], where: str
) -> tuple[dict[str, np.ndarray], list[OnnxNode]]:
    """A control-flow body (If branch, Loop / Scan body): its initializers and its nodes in order.

    ``outer`` holds the names visible from the enclosing graphs, which a body may read directly."""
    if g.sparse_initializer:
        raise UnsupportedOpError(f"{where}: sparse initializers are not supported")
    initializers = {t.name: _initializer(t) for t in g.initializer}
    known = outer | set(initializers) | {vi.name for vi in g.input}
    return initializers, _ordered_nodes(g, opsets, known, where)
