"""Structured fuzzing of every file a user can hand rlx, one deterministic case per (format, seed).

Each case takes a valid artifact, applies 1–3 *structured* mutations (not only bit flips: dims,
element types, names, attribute types, opsets, dim_params, initializer data and external data
entries of an ONNX model; field types, missing and extra fields, shapes and dtypes of program.json,
meta.json and torch-ir.json; shapes, dtypes and offsets of safetensors headers), hands the result to
rlx at the boundary a user would (``rlx.from_onnx``, ``rlx.load`` + a run, ``rlx.verify_bundle``,
``build_program``) and classifies what happened: ``ok``, ``rlx`` (an ``RlxError`` of one line) or
``raw`` (anything else: a bug).

Cases run in a child process (``python structured.py FORMAT START COUNT BASE OUT``) under an
address-space limit; the child writes one JSON line per case as it goes, so the parent (``run_cases``)
knows which seed crashed or hung the child and restarts after it. Formats: ``FORMATS``.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ("onnx", "program.json", "meta.json", "safetensors", "reference", "npy-input", "inspect", "torch-ir")
MEMORY_LIMIT = 4 * 1024**3  # address space of the child, bytes
CASE_TIMEOUT_S = 10.0


# ── hostile values ───────────────────────────────────────────────────────────
HOSTILE_STRINGS = ["", "f8", "q4", "x" * 300, "../../etc/passwd", "/etc/passwd", "a\nb", "бат", "\x00", "s0*s1",
                   "__import__('os')", "nan", "inf", "-1", "0", "aten.frobnicate.default", "Teleport", " ", "1e400",
                   "s0//0", "2**10**9", "Max()", "FloorDiv(s0, 0)"]  # fmt: skip
HOSTILE_INTS = [0, -1, 1, 2, 3, 7, 2**31, 2**31 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64, -(2**63), 10**15, -(10**15)]


def hostile(r: random.Random, depth: int = 0) -> Any:
    """A JSON value of any type, biased towards the ones parsers get wrong."""
    kind = r.randrange(10 if depth < 2 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return r.choice([True, False])
    if kind == 2:
        return r.choice(HOSTILE_INTS)
    if kind == 3:
        return r.choice([0.5, -0.0, 1e308, -1e308, 3.0, 1e-320])
    if kind == 4:
        return r.choice(HOSTILE_STRINGS)
    if kind == 5:
        return "".join(chr(r.randrange(0x20, 0x3000)) for _ in range(r.randrange(6)))
    if kind == 6:
        return r.randrange(-3, 10)
    if kind == 7:
        return [hostile(r, depth + 1) for _ in range(r.randrange(4))]
    if kind == 8:
        return {
            r.choice(["ref", "int", "float", "list", "sym", "lit", "dtype", "out", "record"]): hostile(r, depth + 1)
        }
    return [r.choice(HOSTILE_INTS) for _ in range(r.randrange(1, 4))]


def json_paths(doc: Any) -> list[tuple[Any, ...]]:
    """Every key path in ``doc``, parents before children (pre-order). Iterative: a recursive
    generator pays for every level on every yield, which dominated a case on a large program.json."""
    paths: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while stack:
        prefix, node = stack.pop()
        paths.append(prefix)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack.extend(reversed([(prefix + (k,), v) for k, v in items]))
    return paths


SHAPE_KEYS = {"shape", "dims", "sizes", "perm", "axes", "dim", "stride", "padding"}
DTYPE_TOKENS = ["f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "u8", "bool", "c64", "c128", "u4", "f8e4m3fn",
                "F32", "float32", "", "q4"]  # fmt: skip


def mutate_json(doc: Any, r: random.Random) -> Any:
    """1–3 structured mutations: a value of another type, a dropped or extra field, a duplicated or
    dropped list item, a wrapped value, or (targeted) a wrong shape or dtype."""
    doc = json.loads(json.dumps(doc))  # a JSON document: a round trip copies it 5x faster than deepcopy
    for _ in range(r.randint(1, 3)):
        all_paths = [p for p in json_paths(doc) if p]
        if not all_paths:
            return doc
        path = r.choice(all_paths)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = r.choice(["replace", "replace", "drop", "duplicate", "wrap", "extra", "shape", "dtype", "swap"])
        if action == "replace":
            parent[key] = hostile(r)
        elif action == "drop":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif action == "extra" and isinstance(parent, dict):
            parent[r.choice(["extra", "shape", "dtype", "args", "guards", "state", "value_map", "__proto__"])] = (
                hostile(r)
            )
        elif action == "shape":
            shapes = [p for p in all_paths if p[-1] in SHAPE_KEYS]
            if shapes:
                p = r.choice(shapes)
                target = doc
                for k in p[:-1]:
                    target = target[k]
                target[p[-1]] = r.choice([[], [0], [2**63, 2**63, 0], [-1], [1, 2, 3, 4, 5], ["s0"], ["s0*0"],
                                          [2**40], ["nope"], [1.5], [True], [0, 2**63]])  # fmt: skip
        elif action == "dtype":
            toks = [p for p in all_paths if p[-1] == "dtype"]
            if toks:
                p = r.choice(toks)
                target = doc
                for k in p[:-1]:
                    target = target[k]
                target[p[-1]] = r.choice(DTYPE_TOKENS)
        elif action == "swap" and isinstance(parent, list) and len(parent) > 1:
            j = r.randrange(len(parent))
            parent[key], parent[j] = parent[j], parent[key]
        else:
            parent[key] = [parent[key]]
    return doc


# ── safetensors ──────────────────────────────────────────────────────────────
def st_parts(raw: bytes) -> tuple[dict[str, Any], bytes]:
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def st_join(header: Any, payload: bytes, r: random.Random | None = None) -> bytes:
    head = json.dumps(header).encode()
    n = len(head)
    if r is not None and r.random() < 0.05:
        n = r.choice([0, 7, n - 1, n + 1, 2**63, 2**64 - 1, len(payload) + n + 8])
    return struct.pack("<Q", n % 2**64) + head + payload


def mutate_safetensors(raw: bytes, r: random.Random) -> bytes:
    header, payload = st_parts(raw)
    names = [k for k in header if k != "__metadata__"]
    for _ in range(r.randint(1, 3)):
        action = r.randrange(12)
        names = [k for k in header if k != "__metadata__"]
        name = r.choice(names) if names else None
        entry = header.get(name) if name else None
        if action == 0 and isinstance(entry, dict):
            entry["shape"] = r.choice([[0, 2**63, 2**63], [2**63], [2**64], [-1], [], [0], [1] * 40, [2**31, 2**31],
                                       [3, 0, 2**62], ["2"], [1.0], None, [True, 2]])  # fmt: skip
        elif action == 1 and isinstance(entry, dict):
            entry["dtype"] = r.choice(["F32", "F16", "BF16", "F64", "I64", "BOOL", "U8", "C64", "F8_E4M3", "f32", "Q4",
                                       "", None, 3, "U64", "C128", "F8_E5M2"])  # fmt: skip
        elif action == 2 and isinstance(entry, dict):
            offsets = entry.get("data_offsets")
            ok = isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
            b, e = offsets if ok else (0, 0)
            entry["data_offsets"] = r.choice([[e, b], [b, e + 4], [b - 4, e - 4], [-1, e], [b, 2**63], [0, 0],
                                              [b], [b, e, 0], "0", [b * 1.0, e], [2**64, 2**64 + 4]])  # fmt: skip
        elif action == 3 and name:
            del header[name]
        elif action == 4 and name:
            header[name + "_extra" if r.random() < 0.5 else "x\ny"] = copy.deepcopy(entry)
        elif action == 5:
            header["__metadata__"] = r.choice([None, 3, [], {"a": 1}, {"format": "pt"}, "x"])
        elif action == 6:
            payload = payload[: r.randrange(len(payload) + 1)]
        elif action == 7:
            payload = payload + bytes(r.randrange(1, 64))
        elif action == 8 and payload:
            k = r.randrange(len(payload))
            payload = payload[:k] + bytes([payload[k] ^ (1 << r.randrange(8))]) + payload[k + 1 :]
        elif action == 9 and isinstance(entry, dict):
            entry[r.choice(["shape", "dtype", "data_offsets"])] = hostile(r)
        elif action == 10 and name:
            header[name] = hostile(r)
        else:
            header = mutate_json(header, r)
            if not isinstance(header, dict):
                return st_join(header, payload, r)
    return st_join(header, payload, r)


# ── .npy inputs (`rlx run -i NAME=FILE.npy`) ──────────────────────────────────
def mutate_npy(raw: bytes, r: random.Random) -> bytes:
    """A damaged or hostile .npy: header dict fields (descr, shape, fortran_order), its length and
    version bytes, the data's length, and bit flips."""
    magic, rest = raw[:8], raw[8:]
    (hlen,) = struct.unpack("<H", rest[:2])
    header, data = rest[2 : 2 + hlen].decode("latin1"), rest[2 + hlen :]
    for _ in range(r.randint(1, 3)):
        action = r.randrange(9)
        if action == 0:
            header = re_sub_field(header, "shape", r.choice(["()", "(0,)", "(2**63,)", "(-1, 8)", "(3, 8)", "(2, 8, 1)",
                                                             "(9999999999999,)", "'x'", "(1.5,)", "(" * 200]))  # fmt: skip
        elif action == 1:
            header = re_sub_field(header, "descr", r.choice(["'<f8'", "'>f4'", "'|O'", "'<U3'", "'|b1'", "'V8'",
                                                             "[('a', '<f4')]", "'<f2'", "'x'", "3"]))  # fmt: skip
        elif action == 2:
            header = re_sub_field(header, "fortran_order", r.choice(["True", "None", "1", "'x'"]))
        elif action == 3:
            data = data[: r.randrange(len(data) + 1)]
        elif action == 4:
            data += bytes(r.randrange(1, 16))
        elif action == 5:
            magic = magic[:6] + bytes([r.choice([1, 2, 3, 0, 9]), 0])
        elif action == 6:
            header = header[: r.randrange(len(header) + 1)]
        elif action == 7 and data:
            k = r.randrange(len(data))
            data = data[:k] + bytes([data[k] ^ 0xFF]) + data[k + 1 :]
        elif header:
            k = r.randrange(len(header))
            header = header[:k] + chr(r.randrange(32, 127)) + header[k + 1 :]
    head = header.encode("latin1", "replace")
    hl = len(head) if r.random() > 0.05 else r.choice([0, 65535, len(head) + 3])
    return magic + struct.pack("<H", hl) + head + data


def re_sub_field(header: str, key: str, value: str) -> str:
    import re

    return re.sub(rf"'{key}': (\([^)]*\)|'[^']*'|[^,}}]+)", f"'{key}': {value}", header, count=1)


# ── ONNX ─────────────────────────────────────────────────────────────────────
def base_onnx_models() -> list[Any]:
    """Small models covering what a mutation can reach: dynamic dims, initializers, shape arithmetic,
    Gather/Reshape/Concat attributes, Conv, a Constant tensor attribute, an If subgraph."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def make(
        nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: dict[str, np.ndarray], opset: int = 18
    ) -> Any:
        init = [numpy_helper.from_array(a, k) for k, a in inits.items()]
        g = helper.make_graph(nodes, "fuzz_graph", inputs, outputs, init)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="fuzz")
        m.ir_version = 8
        return m

    f = TensorProto.FLOAT
    mlp = make(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Add", ["h", "b"], ["h2"], name="add"),
            helper.make_node("Relu", ["h2"], ["a"], name="relu"),
            helper.make_node("Shape", ["a"], ["s"], name="shape", end=1),
            helper.make_node("Concat", ["s", "m1"], ["target"], name="cat", axis=0),
            helper.make_node("Reshape", ["a", "target"], ["y"], name="reshape"),
        ],
        [helper.make_tensor_value_info("x", f, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", f, ["batch", None])],
        {
            "w": rng.standard_normal((8, 4)).astype(np.float32),
            "b": rng.standard_normal(4).astype(np.float32),
            "m1": np.array([-1], np.int64),
        },  # fmt: skip
    )
    gather = make(
        [
            helper.make_node("Gather", ["emb", "ids"], ["e"], name="gather", axis=0),
            helper.make_node(
                "Constant", [], ["scale"], name="const", value=numpy_helper.from_array(np.array([0.5], np.float32))
            ),  # fmt: skip
            helper.make_node("Mul", ["e", "scale"], ["m"], name="mul"),
            helper.make_node("ReduceSum", ["m", "axes"], ["r"], name="sum", keepdims=0),
            helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1),
        ],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, "n"])],
        [helper.make_tensor_value_info("y", f, [2, "n"])],
        {"emb": rng.standard_normal((5, 3)).astype(np.float32), "axes": np.array([2], np.int64)},
    )
    conv = make(
        [
            helper.make_node("Conv", ["x", "k", "kb"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
            helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Cast", ["p"], ["y"], name="cast", to=TensorProto.DOUBLE),
        ],
        [helper.make_tensor_value_info("x", f, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [1, 3, 2, 2])],
        {"k": rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "kb": np.zeros(3, np.float32)},
        opset=13,
    )
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", f, [3])])  # fmt: skip
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", f, [3])])  # fmt: skip
    cond = make(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        [helper.make_tensor_value_info("x", f, [3])],
        [helper.make_tensor_value_info("y", f, [3])],
        {"c": np.array(True)},
    )
    return [mlp, gather, conv, cond]


ELEM_CHOICES = [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 13, 14, 16, 17, 21, 23, 27, 40, -1]
OP_CHOICES = ["Relu", "Gather", "Reshape", "Frobnicate", "Loop", "If", "Conv", "MatMul", "Attention", "Identity",
              "Softmax", "Split", "Resize", "\n", "Einsum", "ScatterND", "TopK", "Cast", "Range", "Expand"]  # fmt: skip


def _tensors(m: Any) -> list[Any]:
    out = list(m.graph.initializer)
    for n in m.graph.node:
        for a in n.attribute:
            if a.HasField("t"):
                out.append(a.t)
    return out


def mutate_onnx(m: Any, r: random.Random, workdir: Path) -> tuple[Any, dict[str, Any]]:
    """A mutated copy of ``m`` and the keyword arguments to convert it with (``base_dir``)."""
    import onnx
    from onnx import AttributeProto

    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    g = m2.graph
    kwargs: dict[str, Any] = {}
    for _ in range(r.randint(1, 3)):
        action = r.randrange(24)  # 17..23: a bit flip, now and then
        values = [v for v in [*g.input, *g.output] if v.type.HasField("tensor_type")]
        tensors = _tensors(m2)
        nodes = list(g.node)
        if action == 0 and values:  # dims of an input/output
            v = r.choice(values)
            dims = v.type.tensor_type.shape.dim
            if dims and r.random() < 0.7:
                d = r.choice(dims)
                choice = r.randrange(4)
                if choice == 0:
                    d.dim_value = r.choice([0, 1, 3, 2**31, 2**40, 2**62])
                elif choice == 1:
                    d.dim_param = r.choice(["бат", "", "a b", "1x", "x\ny", "batch", "seq", "\x00", "n" * 500])
                elif choice == 2:
                    d.Clear()
                else:
                    dims.remove(d)
            else:
                dims.add().dim_value = r.choice([1, 2, 0])
        elif action == 1 and values:  # element type of an input/output
            r.choice(values).type.tensor_type.elem_type = r.choice(ELEM_CHOICES)
        elif action == 2 and tensors:  # initializer dims
            t = r.choice(tensors)
            pick = r.randrange(5)
            if pick == 0:
                t.dims[:] = list(reversed(t.dims))
            elif pick == 1 and t.dims:
                del t.dims[-1]
            elif pick == 2:
                t.dims.append(r.choice([1, 0, 2]))
            elif pick == 3 and t.dims:
                t.dims[r.randrange(len(t.dims))] = r.choice([0, -1, 2**62, 2**63 - 1])
            else:
                t.dims[:] = [int(np.prod(t.dims))] if t.dims else [1]
        elif action == 3 and tensors:  # initializer element type
            r.choice(tensors).data_type = r.choice(ELEM_CHOICES)
        elif action == 4 and tensors:  # initializer data
            t = r.choice(tensors)
            data = bytes(t.raw_data)
            pick = r.randrange(4)
            if pick == 0:
                t.raw_data = data[: r.randrange(len(data) + 1)]
            elif pick == 1:
                t.raw_data = data + bytes(r.randrange(1, 9))
            elif pick == 2 and data:
                t.raw_data = np.frombuffer(data, np.uint8)[::-1].tobytes()  # NaN/inf/denormal patterns
            else:
                t.ClearField("raw_data")
                t.float_data.extend([1.0] * r.randrange(5))
        elif action == 5:  # names: rename a value where it is produced or read
            targets = [*g.input, *g.output, *g.initializer]
            if nodes and r.random() < 0.5:
                n = r.choice(nodes)
                seq = n.input if (n.input and r.random() < 0.5) or not n.output else n.output
                if seq:
                    seq[r.randrange(len(seq))] = r.choice(["", "x", "y", "nope", "бат", "a\nb", "h", "w"])
            elif targets:
                r.choice(targets).name = r.choice(["", "x", "y", "nope", "бат", "a\nb", "w", "ids"])
        elif action == 6 and nodes:  # attribute type or value
            n = r.choice(nodes)
            if n.attribute:
                a = r.choice(list(n.attribute))
                pick = r.randrange(5)
                if pick == 0:
                    a.type = r.choice([AttributeProto.FLOAT, AttributeProto.INT, AttributeProto.STRING,
                                       AttributeProto.INTS, AttributeProto.TENSOR, AttributeProto.GRAPH, 0])  # fmt: skip
                elif pick == 1:
                    a.ClearField("i")
                    a.type = AttributeProto.FLOAT
                    a.f = r.choice([0.5, float("nan"), float("inf"), 1e30])
                elif pick == 2:
                    a.i = r.choice([-(2**63), 2**63 - 1, -1, 0, 2, 99])
                elif pick == 3:
                    del a.ints[:]
                    a.ints.extend([r.choice([-1, 0, 1, 2, 2**40]) for _ in range(r.randrange(5))])
                else:
                    n.attribute.remove(a)
            else:
                n.attribute.add().CopyFrom(onnx.helper.make_attribute(r.choice(["axis", "allowzero", "to", "perm"]),
                                                                        r.choice([2, -5, 0.5, "x", [1, 0]])))  # fmt: skip
        elif action == 7 and nodes:  # an attribute real models use, with hostile values
            n = r.choice(nodes)
            name = r.choice(["axis", "allowzero", "keepdims", "to", "kernel_shape", "pads", "strides", "group", "end"])
            for a in list(n.attribute):
                if a.name == name:
                    n.attribute.remove(a)
            value = r.choice([2, -3, 0, 1, 99, 2**40, [0, 0], [1, 1, 1, 1], [-1, 2], [0], 0.25, "x"])
            n.attribute.add().CopyFrom(onnx.helper.make_attribute(name, value))
        elif action == 8:  # opsets
            if m2.opset_import and r.random() < 0.8:
                m2.opset_import[0].version = r.choice([0, 1, 6, 7, 9, 11, 13, 17, 18, 21, 22, 99, -1])
                if r.random() < 0.2:
                    m2.opset_import[0].domain = r.choice(["ai.onnx", "com.microsoft", "x"])
            else:
                m2.opset_import.add().CopyFrom(onnx.helper.make_opsetid(r.choice(["", "com.microsoft", "ai.onnx.ml"]),
                                                                         r.choice([1, 18, 3])))  # fmt: skip
        elif action == 9 and nodes:  # op type or domain
            n = r.choice(nodes)
            if r.random() < 0.8:
                n.op_type = r.choice(OP_CHOICES)
            else:
                n.domain = r.choice(["com.microsoft", "ai.onnx.preview.training", "x.y", "ai.onnx"])
        elif action == 10 and nodes:  # drop, duplicate or reorder nodes
            pick = r.randrange(3)
            if pick == 0:
                g.node.remove(r.choice(nodes))
            elif pick == 1:
                g.node.add().CopyFrom(r.choice(nodes))
            else:
                shuffled = nodes[:]
                r.shuffle(shuffled)
                del g.node[:]
                g.node.extend(shuffled)
        elif action == 11 and tensors:  # external data entries
            kwargs.update(external_entry(r.choice(tensors), r, workdir))
        elif action == 12:  # IR version, graph outputs, value info
            pick = r.randrange(3)
            if pick == 0:
                m2.ir_version = r.choice([0, 1, 3, 4, 7, 10, 99])
            elif pick == 1 and g.output:
                g.output.remove(g.output[0])
            else:
                g.output.add().CopyFrom(onnx.helper.make_tensor_value_info(r.choice(["h", "a", "x", "zz"]), 1, None))
        elif action == 13 and values:  # sequence/optional/map value types
            v = r.choice(values)
            v.type.CopyFrom(onnx.helper.make_sequence_type_proto(onnx.helper.make_tensor_type_proto(1, [2])))
        elif action == 14 and nodes:  # node inputs: add, drop, empty
            n = r.choice(nodes)
            pick = r.randrange(3)
            if pick == 0:
                n.input.append(r.choice(["", "x", "w", "b"]))
            elif pick == 1 and n.input:
                del n.input[-1]
            elif n.output:
                n.output.append(r.choice(["", "extra_out"]))
        elif action == 15:  # a local function that is wrong in some way
            body = [onnx.helper.make_node(r.choice(["Relu", "Frob"]), ["a"], ["b"])]
            fn = onnx.helper.make_function("local", "F", ["a"], [r.choice(["b", "c"])], body,
                                           [onnx.helper.make_opsetid("", r.choice([18, 5]))])  # fmt: skip
            m2.functions.append(fn)
            if nodes:
                n = r.choice(nodes)
                n.op_type, n.domain = "F", "local"
            m2.opset_import.add().CopyFrom(onnx.helper.make_opsetid("local", 1))
        elif action == 16:  # sparse initializer
            from onnx import numpy_helper

            s = g.sparse_initializer.add()
            s.values.CopyFrom(numpy_helper.from_array(np.ones(1, np.float32), "sp"))
            s.indices.CopyFrom(numpy_helper.from_array(np.zeros(1, np.int64), "sp_i"))
            s.dims.extend([2])
        elif action == 17 and nodes:  # Reshape with allowzero (a zero extent and a -1 divide by zero)
            n = r.choice(nodes)
            n.attribute.add().CopyFrom(onnx.helper.make_attribute("allowzero", r.choice([1, 2, -1])))
        elif action == 18 and g.initializer:  # a zero in a shape-valued initializer
            t = r.choice(list(g.initializer))
            if t.data_type == 7 and t.raw_data:
                t.raw_data = np.zeros(len(t.raw_data) // 8, np.int64).tobytes()
        elif action < 23:
            continue
        else:  # bit flips in the serialized model
            raw = bytearray(m2.SerializeToString())
            for _ in range(r.randint(1, 4)):
                k = r.randrange(len(raw))
                raw[k] ^= 1 << r.randrange(8)
            m3 = onnx.ModelProto()
            try:
                m3.ParseFromString(bytes(raw))
            except Exception:
                return raw, kwargs  # bytes: written to a file and imported from there
            m2 = m3
            g = m2.graph
    return m2, kwargs


def external_entry(t: Any, r: random.Random, workdir: Path) -> dict[str, Any]:
    """Move ``t``'s bytes to an external file with valid or hostile entries (absolute, ``..``,
    through a symlinked directory, missing, short, out-of-range offset/length, bad integers)."""
    data = bytes(t.raw_data)
    inside = workdir / "model_dir"
    outside = workdir / "outside"
    inside.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    (inside / "w.bin").write_bytes(b"\0" * 8 + data)
    (outside / "w.bin").write_bytes(b"\1" * 8 + data)
    link = inside / "linked"
    if not link.is_symlink():
        link.symlink_to(outside, target_is_directory=True)
    del t.external_data[:]
    t.ClearField("raw_data")
    t.data_location = 1
    location = r.choice(["w.bin", "w.bin", str(outside / "w.bin"), "../outside/w.bin", "linked/w.bin", "missing.bin",
                         "", ".", "sub/../w.bin", "w.bin\x00x", "\\w.bin", "model_dir"])  # fmt: skip
    entries = {"location": location, "offset": "8", "length": str(len(data))}
    pick = r.randrange(6)
    if pick == 1:
        entries["offset"] = r.choice(["-1", "x", "99999999", "8" * 30, "٣", ""])
    elif pick == 2:
        entries["length"] = r.choice(["-1", str(len(data) + 1), str(2**63), "0", "1e3"])
    elif pick == 3:
        del entries["length"]
    elif pick == 4:
        entries["checksum"] = "0"
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    if r.random() < 0.1:
        e = t.external_data.add()
        e.key, e.value = "location", "w.bin"
    return {"base_dir": r.choice([inside, inside, None, workdir, str(inside / "w.bin")])}


# ── the cases ────────────────────────────────────────────────────────────────
@dataclass
class Base:
    """The valid artifacts every case starts from (made once per child)."""

    dir: Path  # holds onnx_out/ (from an ONNX model, with bundle/ and reference.safetensors) and torch_out/
    models: list[Any]


def make_base(base: Path) -> None:
    """Valid artifacts to mutate: an ONNX conversion (bundle + reference) and, when torch is
    importable, a torch-ir.json export of the transformer example."""
    import rlx

    models = base_onnx_models()
    if not (base / "onnx_out").exists():
        rlx.from_onnx(models[0], base / "onnx_out", force=True)
    if not (base / "torch_out").exists():
        try:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from helpers import load_example

            model, inputs = load_example("transformer").get_model()
            rlx.from_torch(model, inputs, base / "torch_out")
        except ImportError:
            pass


def zeros_for(inputs: Any) -> list[np.ndarray]:
    from rlx.ir.dtypes import to_numpy

    return [np.zeros(tuple(d if isinstance(d, int) else 2 for d in v.shape), to_numpy(v.dtype)) for v in inputs]


def run_bundle(b: Path) -> None:
    import rlx

    model = rlx.load(b)
    model(*zeros_for(model.inputs))


def fresh(work: Path, name: str) -> Path:
    d = work / name
    if d.exists():
        shutil.rmtree(d)
    return d


def case(fmt: str, seed: int, base: Base, work: Path) -> Callable[[], None]:
    """The action for one case: mutate with ``random.Random(seed)`` and hand rlx the result."""
    import rlx

    r = random.Random(f"{fmt}:{seed}")
    onnx_out = base.dir / "onnx_out"
    if fmt == "onnx":
        m = r.choice(base.models)
        mutated, kwargs = mutate_onnx(m, r, fresh(work, "ext"))
        out = fresh(work, "out")
        if isinstance(mutated, (bytes, bytearray)) or r.random() < 0.3:
            path = work / "ext" / "model_dir" / "m.onnx"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bytes(mutated) if isinstance(mutated, (bytes, bytearray)) else mutated.SerializeToString())
            kwargs.pop("base_dir", None)
            return lambda: rlx.from_onnx(path, out, **kwargs)
        return lambda: rlx.from_onnx(mutated, out, **kwargs)
    if fmt in ("program.json", "meta.json", "safetensors"):
        b = fresh(work, "b")
        bundles = [onnx_out / "bundle", base.dir / "torch_out" / "bundle"]  # an MLP; a transformer (more Calls)
        shutil.copytree(r.choice([d for d in bundles if d.is_dir()]), b)
        if fmt == "safetensors":
            raw = (b / "weights.safetensors").read_bytes()
            (b / "weights.safetensors").write_bytes(mutate_safetensors(raw, r))
        else:
            doc = json.loads((b / fmt).read_text())
            (b / fmt).write_text(json.dumps(mutate_json(doc, r)))
        return lambda: run_bundle(b)
    if fmt == "reference":
        ref = fresh(work, "ref")
        ref.mkdir()
        raw = (onnx_out / "reference.safetensors").read_bytes()
        (ref / "reference.safetensors").write_bytes(mutate_safetensors(raw, r))
        return lambda: rlx.verify_bundle(onnx_out, ref / "reference.safetensors")
    if fmt == "npy-input":
        import io

        d = fresh(work, "npy")
        d.mkdir()
        buf = io.BytesIO()
        np.save(buf, np.random.default_rng(seed).standard_normal((2, 3, 8)).astype(np.float32))
        (d / "x.npy").write_bytes(mutate_npy(buf.getvalue(), r))
        return lambda: run_cli(["run", str(onnx_out), "-i", f"x={d / 'x.npy'}"])
    if fmt == "inspect":  # `rlx inspect` of a bundle with a mutated program.json or meta.json
        d = fresh(work, "insp")
        shutil.copytree(
            r.choice([p for p in (onnx_out / "bundle", base.dir / "torch_out" / "bundle") if p.is_dir()]), d
        )
        name = r.choice(["program.json", "meta.json"])
        (d / name).write_text(json.dumps(mutate_json(json.loads((d / name).read_text()), r)))
        return lambda: run_cli(["inspect", str(d)])
    if fmt == "torch-ir":
        src = base.dir / "torch_out"
        if not src.exists():
            return lambda: None
        d = fresh(work, "tir")
        d.mkdir()
        doc = json.loads((src / "torch-ir.json").read_text())
        (d / "torch-ir.json").write_text(json.dumps(mutate_json(doc, r)))
        try:
            os.link(src / "weights.safetensors", d / "weights.safetensors")
        except OSError:  # the scratch folder is on another filesystem (/dev/shm)
            shutil.copyfile(src / "weights.safetensors", d / "weights.safetensors")

        def build() -> None:
            from rlx.app.convert import build_program
            from rlx.formats import torch_ir
            from rlx.formats.bundle import bind_weights
            from rlx.runtime.model import Model

            ir = torch_ir.parse(json.loads((d / "torch-ir.json").read_text()))
            program = build_program(ir)
            weights, _ = rlx.formats.safetensors_io.read(d / "weights.safetensors")
            model = Model(program, bind_weights(program, weights, d / "weights.safetensors"))
            model.run_flat(model.bind(tuple(zeros_for(program.user_inputs)), {}))

        return build
    raise ValueError(f"unknown format {fmt!r}")


def run_cli(argv: list[str]) -> None:
    """``rlx ARGV`` as a user runs it: exit 0, or exit 2 with one ``rlx: …`` line that is not an
    internal error (raised here as an RlxError so it counts as a refusal)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from rlx.cli import main
    from rlx.errors import RlxError

    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = main(argv)
    text = err.getvalue().strip()
    if code != 0 and (code != 2 or "\n" in text or "internal error" in text or not text.startswith("rlx: ")):
        raise AssertionError(f"rlx {argv[0]} exited {code}: {text[:300]}")
    if code:
        raise RlxError(text.removeprefix("rlx: "))


def classify(fn: Callable[[], None]) -> dict[str, Any]:
    from rlx.errors import RlxError

    t0 = time.perf_counter()
    try:
        fn()
        result: dict[str, Any] = {"status": "ok"}
    except RlxError as e:
        msg = str(e)
        if _memory_error_in_chain(e):  # a blow-up the limit stopped, then reported as a refusal
            result = {"status": "memory", "error": type(e).__name__, "message": msg[:300]}
        elif not msg or "\n" in msg or "\r" in msg:
            result = {"status": "raw", "error": f"{type(e).__name__} (not one line)", "message": msg[:2000]}
        else:
            result = {"status": "rlx", "error": type(e).__name__, "message": msg[:300]}
    except MemoryError:
        result = {"status": "memory", "error": "MemoryError", "message": ""}
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        site = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb) if "/rlx/" in f.filename),
                    f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?")  # fmt: skip
        result = {"status": "raw", "error": type(e).__name__, "message": str(e)[:300], "site": site}
    result["elapsed"] = round(time.perf_counter() - t0, 3)
    return result


def _memory_error_in_chain(e: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, MemoryError):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return "MemoryError" in str(e) or "Unable to allocate" in str(e)


def child(fmt: str, start: int, count: int, base_dir: Path, out: Path) -> None:
    """Run cases ``start .. start+count-1`` of ``fmt``, one JSON line each (a "start" line first, so
    a crash or hang names its seed)."""
    import warnings

    warnings.simplefilter("ignore")
    base = Base(base_dir, base_onnx_models())
    # In memory where the machine has it: every case copies and deletes a bundle, and on disk the
    # unlinks alone cost more than rlx's checks.
    scratch = os.environ.get("TMPDIR") or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    work = Path(scratch) / f"rlx-fuzz-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        with open(out, "a", encoding="utf-8") as f:
            for seed in range(start, start + count):
                f.write(json.dumps({"seed": seed, "status": "start"}) + "\n")
                f.flush()
                try:
                    action = case(fmt, seed, base, work)
                except Exception as e:  # the mutator itself: a bug in the fuzzer, reported as such
                    res = {"status": "fuzzer-bug", "error": type(e).__name__, "message": str(e)[:300]}
                else:
                    res = classify(action)
                f.write(json.dumps({"seed": seed, **res}) + "\n")
                f.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ── the parent side ──────────────────────────────────────────────────────────
@dataclass
class Summary:
    fmt: str
    cases: int
    counts: dict[str, int]
    problems: list[dict[str, Any]]  # raw exceptions, crashes, hangs, fuzzer bugs (with seeds)


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_cases(fmt: str, start: int, count: int, base_dir: Path, log: Path, *, chunk: int = 2000) -> Summary:
    """Run ``count`` cases of ``fmt`` from seed ``start`` in children under the memory limit; a child
    that dies or stops answering for CASE_TIMEOUT_S is recorded against the seed it was on and the
    run goes on after it."""
    counts: dict[str, int] = {}
    problems: list[dict[str, Any]] = []
    seed, end = start, start + count
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    while seed < end:
        n = min(chunk, end - seed)
        part = log.with_suffix(f".{seed}.jsonl")
        part.unlink(missing_ok=True)
        cmd = [sys.executable, __file__, fmt, str(seed), str(n), str(base_dir), str(part)]
        proc = subprocess.Popen(cmd, env=env, preexec_fn=_limit_memory, stdout=subprocess.DEVNULL,  # noqa: PLW1509
                                stderr=subprocess.PIPE)  # fmt: skip
        last_size, last_change = -1, time.monotonic()
        startup = 60.0  # the first case also imports rlx, onnx, onnxruntime
        while proc.poll() is None:
            time.sleep(0.2)
            size = part.stat().st_size if part.exists() else 0
            if size != last_size:
                if last_size > 0:
                    startup = 0.0
                last_size, last_change = size, time.monotonic()
            elif time.monotonic() - last_change > CASE_TIMEOUT_S + startup:
                proc.kill()
                proc.wait()
                break
        stderr = proc.stderr.read().decode("utf-8", "replace")[-500:] if proc.stderr else ""
        lines = [json.loads(x) for x in part.read_text().splitlines() if x.strip()] if part.exists() else []
        done: dict[int, dict[str, Any]] = {}
        started = None
        for row in lines:
            if row["status"] == "start":
                started = row["seed"]
            else:
                done[row["seed"]] = row
                started = None
        chunk_counts: dict[str, int] = {}
        chunk_problems: list[dict[str, Any]] = []
        for s, row in done.items():
            status = row["status"]
            if status == "ok" or status == "rlx":
                if row.get("elapsed", 0) > CASE_TIMEOUT_S:
                    status = "slow"
                    chunk_problems.append({"format": fmt, "seed": s, "status": "slow", "elapsed": row["elapsed"]})
            else:
                chunk_problems.append({"format": fmt, **row})
            chunk_counts[status] = chunk_counts.get(status, 0) + 1
        if started is not None:  # the child died or hung on this seed
            kind = "hang" if proc.returncode in (-9,) and time.monotonic() - last_change > CASE_TIMEOUT_S else "crash"
            chunk_problems.append({"format": fmt, "seed": started, "status": kind, "returncode": proc.returncode,
                                   "stderr": stderr})  # fmt: skip
            chunk_counts[kind] = chunk_counts.get(kind, 0) + 1
        with open(log, "a", encoding="utf-8") as f:  # as it goes, so an interrupted run still reports
            f.write(json.dumps({"format": fmt, "chunk": seed, "cases": sum(chunk_counts.values()),
                                "counts": chunk_counts, "problems": chunk_problems[:100]}) + "\n")  # fmt: skip
        problems += chunk_problems
        for k, v in chunk_counts.items():
            counts[k] = counts.get(k, 0) + v
        if started is not None:
            seed = started + 1
        elif not lines and proc.returncode:
            raise RuntimeError(f"fuzz child for {fmt} failed to start (exit {proc.returncode}): {stderr}")
        else:
            seed += n
        part.unlink(missing_ok=True)
    return Summary(fmt, sum(counts.values()), counts, problems)


def describe(p: dict[str, Any]) -> str:
    return (f"{p['format']} seed {p['seed']}: {p['status']} {p.get('error', '')} at {p.get('site', '?')}: "
            f"{p.get('message', p.get('stderr', ''))}")[:400]  # fmt: skip


if __name__ == "__main__":
    fmt_arg, start_arg, count_arg, base_arg, out_arg = sys.argv[1:6]
    child(fmt_arg, int(start_arg), int(count_arg), Path(base_arg), Path(out_arg))
