"""One test per raw exception the fuzzers found (issue 29): each input is now either run or refused
with one ``RlxError`` line naming the file, checked through the API and the CLI (exit 2)."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rlx  # noqa: E402
from rlx.cli import main  # noqa: E402
from rlx.errors import BundleError, LoweringError, RlxError, SchemaError, UsageError, WeightsError  # noqa: E402
from rlx.formats import safetensors_io  # noqa: E402
from rlx.ir import symbolic  # noqa: E402

R = np.random.default_rng(3)
W = R.standard_normal((8, 4)).astype(np.float32)


def mlp(batch: object = "batch", inits: dict[str, np.ndarray] | None = None) -> Any:
    """x[batch, 8] @ w[8, 4] + b."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    inits = inits or {"w": W, "b": np.arange(4, dtype=np.float32)}
    g = helper.make_graph(
        nodes,
        "reg_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        [numpy_helper.from_array(a, k) for k, a in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def refused(fn: Any, kind: type[RlxError] | tuple[type[RlxError], ...] = RlxError, *needles: str) -> str:
    """``fn()`` raises ``kind`` with a one-line message containing every needle; the message."""
    with pytest.raises(kind) as e:
        fn()
    msg = str(e.value)
    assert msg and "\n" not in msg, f"not one line: {msg!r}"
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg


def cli_refuses(path: Path, out: Path, capsys: Any, *needles: str) -> None:
    assert main(["import", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlx: ") and "\n" not in err and "Traceback" not in err and "internal error" not in err
    for n in needles:
        assert n in err
    assert not out.exists()


# ── ONNX: onnxruntime's errors during the parity check ──────────────────────
def reversed_initializer_dims() -> Any:
    """x[2, 8] @ w with w's dims reversed to [4, 8] (same bytes): rlx reads it, onnxruntime refuses."""
    m = mlp(2)
    m.graph.initializer[0].dims[:] = [4, 8]
    del m.graph.node[1]
    m.graph.output[0].name = "h"
    return m


def test_reversed_initializer_dims_are_refused_in_one_line_naming_the_file(tmp_path, capsys):
    # rlx's MatMul shape rule refuses it while lowering (before, onnxruntime's InvalidArgument escaped raw
    # from the parity check); either refusal is one line naming the file.
    path = tmp_path / "rev.onnx"
    path.write_bytes(reversed_initializer_dims().SerializeToString())
    msg = refused(lambda: rlx.from_onnx(path, tmp_path / "o"), (SchemaError, LoweringError), str(path))
    assert "verify" in msg or "MatMul" in msg
    cli_refuses(path, tmp_path / "cli", capsys, "rev.onnx")


@pytest.mark.parametrize("dim_param", ["бат", "a b", "x\ny", "1", "€"])
def test_non_ascii_dim_param_runs_and_matches_onnxruntime(tmp_path, dim_param):
    m = mlp(dim_param)
    report = rlx.from_onnx(m, tmp_path / "o")
    assert report.passed
    x = R.standard_normal((3, 8)).astype(np.float32)
    got = rlx.load(tmp_path / "o")(x)
    np.testing.assert_allclose(got, x @ W + np.arange(4, dtype=np.float32), rtol=1e-5, atol=1e-5)
    assert got.shape == (3, 4) and got.dtype == np.float32


@pytest.mark.parametrize(
    "attr",
    [
        helper.make_attribute("axis", 0.5),  # FLOAT where Gather wants INT
        helper.make_attribute("axis", "zero"),  # STRING
        helper.make_attribute("axis", [0, 1]),  # INTS
    ],
    ids=["float", "string", "ints"],
)
def test_gather_attribute_of_the_wrong_type(tmp_path, attr):
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"])]
    nodes[0].attribute.append(attr)
    g = helper.make_graph(
        nodes,
        "gather",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([0, 2], np.int64), "i")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    refused(lambda: rlx.from_onnx(m, tmp_path / "o"), RlxError, "gather")


def test_attribute_whose_type_and_value_disagree(tmp_path):
    m = mlp(2)
    c = helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones(2, np.float32)))
    c.attribute[0].t.dims[:] = [5]  # 2 values declared as 5
    m.graph.node.append(c)
    refused(lambda: rlx.from_onnx(m, tmp_path / "o"), SchemaError, "attribute 'value'")


# ── ir/symbolic: arithmetic a file can make fail ─────────────────────────────
@pytest.mark.parametrize(
    "expr, why",
    [("s0//0", "division by zero"), ("s0 % (s0 - 3)", "division by zero"), ("FloorDiv(s0, 0)", "FloorDiv"),
     ("s0**(10**9)", "exponent"), ("Max()", "Max"), ("CeilDiv(s0, s0 - 3)", "CeilDiv")],
)  # fmt: skip
def test_symbolic_arithmetic_errors_are_schema_errors(expr, why):
    refused(lambda: symbolic.evaluate(expr, {"s0": 3}), SchemaError, why)


@pytest.mark.parametrize("allowzero", [1, 2])
def test_reshape_allowzero_with_minus_one_over_zero_extent(tmp_path, allowzero):
    """Reshape(allowzero=1/2) to [0, -1] of a symbolic [n, 4]: the -1 divides by zero."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=allowzero)]
    g = helper.make_graph(
        nodes,
        "az",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([0, -1], np.int64), "s")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    refused(lambda: rlx.from_onnx(m, tmp_path / "o"), RlxError, "az")


def test_invalid_utf8_in_a_name_is_refused(tmp_path):
    """protobuf hands a string field holding invalid UTF-8 back as bytes (a bit flip in a name)."""
    raw = mlp(2).SerializeToString().replace(b"reg_graph", b"reg\xffgraph")
    path = tmp_path / "m.onnx"
    path.write_bytes(raw)
    refused(lambda: rlx.from_onnx(path, tmp_path / "o"), SchemaError, "graph.name", "UTF-8", "m.onnx")


# ── one line, whatever the model's text holds ────────────────────────────────
def test_unsupported_op_named_with_a_newline_is_one_line(tmp_path):
    m = mlp(2)
    m.graph.node[1].op_type = "Frob\nnicate"
    refused(lambda: rlx.from_onnx(m, tmp_path / "o"), RlxError, "Frob nicate")


def test_node_name_with_a_newline_is_one_line(tmp_path):
    m = mlp(2)
    m.graph.node[0].name = "line1\nline2"
    m.graph.node[0].input[1] = "missing"
    refused(lambda: rlx.from_onnx(m, tmp_path / "o"), SchemaError, "missing")


def test_torch_ir_op_named_with_a_newline_is_one_line(tmp_path):
    """Fuzz finding (torch-ir seed 58961): an op name read from torch-ir.json broke the message."""
    torch = pytest.importorskip("torch")
    d = tmp_path / "ir"
    rlx.export(torch.nn.Linear(3, 2), (torch.randn(1, 3),), d)
    doc = json.loads((d / "torch-ir.json").read_text())
    doc["nodes"][0]["op"] = "my\nop.default"
    (d / "torch-ir.json").write_text(json.dumps(doc))
    refused(lambda: rlx.build(d, tmp_path / "o"), RlxError, "my\\nop.default")
    assert not (tmp_path / "o").exists()


def test_library_messages_are_flattened():
    from rlx.frontends.onnx.boundary import one_line

    assert one_line("a\n  b\r\n\tc") == "a b c"
    assert len(one_line("x" * 1000)) == 200


# ── bundles and safetensors ──────────────────────────────────────────────────
@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reg") / "o"
    rlx.from_onnx(mlp(2), out)
    return out / "bundle"


@pytest.mark.parametrize(
    "field, value", [("guards", 3), ("guards", {"a": 1}), ("symbols", 1.5), ("state", "x"), ("value_map", [])]
)
def test_program_json_field_of_the_wrong_type(tmp_path, bundle, field, value):
    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    doc = json.loads((b / "program.json").read_text())
    doc[field] = value
    (b / "program.json").write_text(json.dumps(doc))
    refused(lambda: rlx.load(b), BundleError, "program.json", field)
    assert main(["run", str(b)]) == 2


def safetensors_bytes(header: dict[str, Any], payload: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + payload


@pytest.mark.parametrize(
    "shape", [[0, 2**63, 2**63], [0, 2**62, 2**62], [2**63, 0], [0, 2**49]], ids=["2^63", "2^62", "first", "2^49"]
)
def test_empty_tensor_with_huge_extents_is_refused(tmp_path, shape):
    path = tmp_path / "w.safetensors"
    path.write_bytes(safetensors_bytes({"t": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}))
    refused(lambda: safetensors_io.read(path), WeightsError, "w.safetensors", "'t'", "too large")


@pytest.mark.parametrize("shape", [[0], [0, 7], [3, 0, 2**20]])
def test_empty_tensors_of_sensible_shape_still_read(tmp_path, shape):
    path = tmp_path / "w.safetensors"
    path.write_bytes(safetensors_bytes({"t": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}))
    tensors, _ = safetensors_io.read(path)
    assert tensors["t"].shape == tuple(shape) and tensors["t"].dtype == np.float32


# ── external data ────────────────────────────────────────────────────────────
def external_model(
    tmp_path: Path, location: str, *, offset: int = 0, length: int | None = None, pad: int | None = None
) -> Any:
    """mlp whose ``w`` lives in tmp_path/model/w.bin after ``pad`` bytes (default ``offset``), its
    entry pointing at ``location``, ``offset``, ``length``."""
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "w.bin").write_bytes(b"\0" * (offset if pad is None else pad) + W.tobytes())
    m = mlp(2)
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset), "length": str(W.nbytes if length is None else length)}
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return m


def test_external_data_of_a_model_proto_needs_base_dir(tmp_path, monkeypatch):
    m = external_model(tmp_path, "w.bin")
    monkeypatch.chdir(tmp_path / "model")  # before: resolved against the working directory and read
    refused(lambda: rlx.from_onnx(m, tmp_path / "o"), UsageError, "external data needs the model's directory (pass base_dir=)", "'w'")  # fmt: skip
    assert m.graph.initializer[0].data_location == TensorProto.EXTERNAL  # the caller's proto is untouched


@pytest.mark.parametrize("as_path", [False, True], ids=["proto+base_dir", "file"])
def test_external_data_inside_the_directory_is_read(tmp_path, as_path):
    m = external_model(tmp_path, "w.bin", offset=16)
    if as_path:
        path = tmp_path / "model" / "m.onnx"
        path.write_bytes(m.SerializeToString())
        report = rlx.from_onnx(path, tmp_path / "o")
    else:
        report = rlx.from_onnx(m, tmp_path / "o", base_dir=tmp_path / "model")
    assert report.passed
    x = R.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(rlx.load(tmp_path / "o")(x), x @ W + np.arange(4), rtol=1e-5, atol=1e-5)


def hostile_locations(tmp_path: Path) -> dict[str, tuple[str, dict[str, int], str]]:
    """name → (location, entry overrides, words the refusal must hold)."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "w.bin").write_bytes(np.full(W.shape, 7, np.float32).tobytes())
    (tmp_path / "model").mkdir(exist_ok=True)
    link = tmp_path / "model" / "linked"
    if not link.exists():
        link.symlink_to(outside, target_is_directory=True)
    (tmp_path / "model" / "short.bin").write_bytes(b"\0" * 10)
    return {
        "absolute": (str(outside / "w.bin"), {}, "absolute path"),
        "dotdot": ("../outside/w.bin", {}, "escapes the model's directory"),
        "symlink": ("linked/w.bin", {}, "symlink out"),
        "missing": ("nope.bin", {}, "missing"),
        "short": ("short.bin", {}, "outside 'short.bin'"),
        "offset": ("w.bin", {"offset": W.nbytes + 1, "pad": 0}, "offset"),
        "length": ("w.bin", {"length": W.nbytes + 4}, "length"),
        "directory": ("linked", {}, "symlink out"),
    }


@pytest.mark.parametrize("case", ["absolute", "dotdot", "symlink", "missing", "short", "offset", "length", "directory"])
@pytest.mark.parametrize("as_path", [False, True], ids=["proto+base_dir", "file"])
def test_external_data_refusals_name_tensor_and_why(tmp_path, capsys, case, as_path):
    location, over, why = hostile_locations(tmp_path)[case]
    m = external_model(tmp_path, location, **over)
    if as_path:
        path = tmp_path / "model" / "m.onnx"
        path.write_bytes(m.SerializeToString())
        refused(lambda: rlx.from_onnx(path, tmp_path / "o"), SchemaError, "initializer 'w'", why, "m.onnx")
        cli_refuses(path, tmp_path / "cli", capsys, why)
    else:
        refused(lambda: rlx.from_onnx(m, tmp_path / "o", base_dir=tmp_path / "model"), SchemaError, "'w'", why)


def test_base_dir_itself_a_symlink_is_resolved_once(tmp_path):
    """base_dir may be a symlink to the model's directory: containment is checked on real paths."""
    m = external_model(tmp_path, "w.bin")
    alias = tmp_path / "alias"
    alias.symlink_to(tmp_path / "model", target_is_directory=True)
    assert rlx.from_onnx(m, tmp_path / "o", base_dir=alias).passed


def test_constant_attribute_with_external_data_is_checked_too(tmp_path, monkeypatch):
    m = mlp(2)
    c = helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones(2, np.float32)))
    t = c.attribute[0].t
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", "/etc/hostname"
    m.graph.node.append(c)
    monkeypatch.chdir(tmp_path)
    refused(lambda: rlx.from_onnx(m, tmp_path / "o", base_dir=tmp_path), SchemaError, "attribute value", "absolute")
    assert os.path.isabs("/etc/hostname")


# ── .npy inputs (`rlx run -i NAME=FILE.npy`) ─────────────────────────────────
def npy_bytes(header: str, data: bytes) -> bytes:
    head = header.encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + data


@pytest.mark.parametrize(
    "header, data, why",
    [
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 8", b"\0" * 64, "not a readable .npy"),  # TokenError
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (9999999999999,), }", b"\0" * 64, "declares"),  # 36 TiB
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 8), }", b"\0" * 60, "damaged"),  # short
        ("{'descr': '|O', 'fortran_order': False, 'shape': (2, 8), }", b"\0" * 128, "objects"),
        ("{'descr': 'x', 'fortran_order': False, 'shape': (2, 8), }", b"\0" * 64, "not a readable .npy"),
        ("", b"", "not a readable .npy"),
    ],
    ids=["token-error", "huge-shape", "short", "object", "bad-descr", "empty"],
)
def test_damaged_npy_input_is_one_line(tmp_path, capsys, bundle, header, data, why):
    from rlx.formats.npy_io import read_npy

    path = tmp_path / "x.npy"
    path.write_bytes(npy_bytes(header, data))
    refused(lambda: read_npy(path, "input 'x'"), RlxError, "input 'x'", "x.npy", why)
    assert main(["run", str(bundle), "-i", f"x={path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlx: input 'x'") and "\n" not in err and "internal error" not in err


def test_valid_npy_input_runs(tmp_path, capsys, bundle):
    x = R.standard_normal((2, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(bundle), "-i", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "o")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "o" / "out0.npy"), x @ W + np.arange(4), rtol=1e-5, atol=1e-5)


# ── program.json: arguments that would make a kernel allocate gigabytes ──────
@pytest.mark.parametrize("op, field, value", [("Slice", "axis", 2**31), ("Reduce", "axes", [2**31]),
                                              ("Softmax", "axis", -(2**40))])  # fmt: skip
def test_axis_far_out_of_range_is_refused_before_running(tmp_path, op, field, value):
    """Found by the fuzzer: Slice axis 2**31 passed validation and the kernel built an index that
    long (19 GB resident before the machine's OOM killer stopped it)."""
    nodes = [
        helper.make_node("Slice", ["x", "st", "en", "ax"], ["s"]),
        helper.make_node("ReduceSum", ["s", "rax"], ["r"], keepdims=1),
        helper.make_node("Softmax", ["r"], ["y"], axis=1),
    ]
    inits = {"st": np.array([1]), "en": np.array([3]), "ax": np.array([1]), "rax": np.array([0])}
    g = helper.make_graph(
        nodes,
        "axes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(a.astype(np.int64), k) for k, a in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    rlx.from_onnx(m, tmp_path / "o")
    b = tmp_path / "o" / "bundle"
    doc = json.loads((b / "program.json").read_text())
    target = next(i for i in doc["instrs"] if i["op"] == op)
    target["args"][field] = value
    (b / "program.json").write_text(json.dumps(doc))
    refused(lambda: rlx.load(b), SchemaError, "program.json", "out of range")


def test_value_larger_than_memory_is_refused_at_load(tmp_path, bundle):
    """A program.json can declare a value of 2**36 elements (256 GiB of f32) that validation
    allows; loading refuses it instead of letting the run be killed by the OOM killer."""
    from rlx.runtime.model import physical_memory

    memory = physical_memory()
    if memory is None or memory >= 2**38:
        pytest.skip("this machine has the memory (or does not say how much)")
    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    doc = json.loads((b / "program.json").read_text())
    doc["instrs"][0]["shape"] = [2**18, 2**18]
    (b / "program.json").write_text(json.dumps(doc))
    # A size that disagrees with its Call's shape rule is refused by the rule check first; either way
    # nothing is allocated and the line names the instruction.
    msg = refused(lambda: rlx.load(b), (BundleError, SchemaError), doc["instrs"][0]["result"])
    assert "memory" in msg or "its rule gives" in msg


@pytest.mark.parametrize("field", ["source", "model_name", "outputs", "symbols", "state", "unused_weights"])
def test_optional_meta_field_written_as_null_reads_as_absent(tmp_path, capsys, bundle, field):
    """Fuzz finding (inspect seed 3914 and 42 more): `"source": null` in meta.json passed the type
    check (null is how JSON says absent) and `rlx inspect` then called .get on None."""
    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    meta = json.loads((b / "meta.json").read_text())
    meta[field] = None
    (b / "meta.json").write_text(json.dumps(meta))
    assert main(["inspect", str(b)]) == 0, capsys.readouterr().err
    assert "inputs:" in capsys.readouterr().out
    model = rlx.load(b)
    x = np.ones((2, 8), np.float32)
    np.testing.assert_array_equal(model(x), rlx.load(bundle)(x))


# ── `rlx inspect` reads the same checked files as `rlx.load` ────────────────
@pytest.mark.parametrize(
    "name, field, value, why",
    [("meta.json", "source", ["x"], "'source' must be an object"), ("meta.json", "outputs", 1.5, "'outputs'"),
     ("program.json", "source_histogram", {"aten.add": [1]}, "source_histogram"),
     ("program.json", "state", [{"name": "nope", "output": 0, "key": "k"}], "state")],
)  # fmt: skip
def test_inspect_refuses_damaged_bundle_files(tmp_path, capsys, bundle, name, field, value, why):
    """Found by the fuzzer: `rlx inspect` parsed program.json without validating it and trusted
    meta.json's field types ('internal error: AttributeError/TypeError/KeyError')."""
    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    doc = json.loads((b / name).read_text())
    doc[field] = value
    (b / name).write_text(json.dumps(doc))
    assert main(["inspect", str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlx: ") and "\n" not in err and "internal error" not in err and why in err
    with pytest.raises(RlxError):
        rlx.load(b)


def test_graph_output_with_an_empty_name(tmp_path):
    """Found by the fuzzer (onnx seed 59456): an output named '' that a node 'produces' (ONNX's
    empty name means 'no output') reached lowering and escaped as KeyError('')."""
    m = mlp(2)
    m.graph.node[1].output[0] = ""
    m.graph.output[0].name = ""
    refused(lambda: rlx.from_onnx(m, tmp_path / "o"), SchemaError, "no name", "reg_graph")


def test_npy_header_that_overflows_the_parser(tmp_path):
    """Found by the fuzzer (npy-input seed 1698): a header of nested parentheses makes Python's
    parser raise MemoryError (its stack, nothing allocated): refused as a damaged header."""
    import io
    import random

    import structured

    from rlx.formats.npy_io import read_npy

    buf = io.BytesIO()
    np.save(buf, np.zeros((2, 3, 8), np.float32))
    path = tmp_path / "x.npy"
    path.write_bytes(structured.mutate_npy(buf.getvalue(), random.Random("npy-input:1698")))
    msg = refused(lambda: read_npy(path, "input 'x'"), RlxError, "x.npy")
    assert "deeply" in msg or "not a readable" in msg
    assert "MemoryError" not in msg
