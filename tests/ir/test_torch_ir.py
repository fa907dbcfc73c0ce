"""The torch-ir.json loader validates the schema and names the JSON path of every problem."""

from __future__ import annotations

import copy
import json

import pytest

from rlx.errors import SchemaError
from rlx.formats import torch_ir

VALID = {
    "format": "rlx-torch-ir",
    "version": 1,
    "model_name": "tiny",
    "inputs": [{"id": "x", "shape": [2, 3], "dtype": "f32"}],
    "weights": [{"id": "p_w", "key": "w", "shape": [3], "dtype": "f32", "kind": "param"}],
    "nodes": [
        {
            "id": "mul",
            "op": "aten.mul.Tensor",
            "args": [{"ref": "x"}, {"ref": "p_w"}],
            "kwargs": {},
            "out": {"shape": [2, 3], "dtype": "f32"},
        },
        {
            "id": "add",
            "op": "aten.add.Tensor",
            "args": [{"ref": "mul"}, {"float": "-inf"}],
            "kwargs": {"alpha": {"int": 1}},
            "out": {"shape": [2, 3], "dtype": "f32"},
        },
    ],
    "outputs": [{"ref": "add", "shape": [2, 3], "dtype": "f32"}],
}


def mutate(path, value):
    doc = copy.deepcopy(VALID)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


def test_valid_document_parses():
    ir = torch_ir.parse(copy.deepcopy(VALID))
    assert [n.op for n in ir.nodes] == ["aten.mul.Tensor", "aten.add.Tensor"]
    assert ir.nodes[1].args[1] == float("-inf")
    assert ir.nodes[1].kwargs == {"alpha": 1}
    assert ir.weights[0].key == "w"


def test_round_trip_is_stable():
    ir = torch_ir.parse(copy.deepcopy(VALID))
    again = torch_ir.parse(json.loads(ir.dumps()))
    assert again.dumps() == ir.dumps()


BAD = [
    (("format",), "onnx", "format: expected 'rlx-torch-ir'"),
    (("version",), 2, "version: this rlx reads version 1, found 2"),
    (("nodes", 0, "args", 1), {"ref": "later"}, "nodes[0].args[1]: reference to 'later' before it is defined"),
    (("nodes", 1, "args", 0), {"ref": "add"}, "nodes[1].args[0]: reference to 'add' before it is defined"),
    (("inputs", 0, "shape"), [2, -3], "inputs[0].shape[1]: dimension must be a non-negative int"),
    (("inputs", 0, "dtype"), "f8", "inputs[0].dtype: unknown dtype 'f8'"),
    (("weights", 0, "kind"), "gradient", "weights[0].kind: expected param, buffer or const"),
    (("nodes", 0, "out"), {"shape": [2, 3], "dtype": "q4"}, "nodes[0].out.dtype: unknown dtype 'q4'"),
    (("nodes", 1, "args", 1), {"float": "lots"}, "nodes[1].args[1].float: expected a number"),
    (
        ("nodes", 1, "kwargs", "alpha"),
        {"int": 1, "float": 2.0},
        "nodes[1].kwargs.alpha: an argument has exactly one key",
    ),
    (("nodes", 0, "id"), KeyError, "nodes[0].id: missing"),
    (("outputs", 0, "ref"), "ghost", "outputs[0].ref: 'ghost' is not defined"),
    (("nodes", 1, "id"), "mul", "nodes[1].id: id 'mul' defined twice"),
    (("nodes",), {"not": "a list"}, "nodes: expected list, found object"),
]


@pytest.mark.parametrize("path,value,message", BAD, ids=[m.split(":")[0] for _, _, m in BAD])
def test_errors_name_the_json_path(path, value, message):
    with pytest.raises(SchemaError) as info:
        torch_ir.parse(mutate(path, value))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_load_reports_bad_json_and_missing_file(tmp_path):
    (tmp_path / "t.json").write_text("{ not json")
    with pytest.raises(SchemaError, match=r"t.json: not valid JSON \(line 1"):
        torch_ir.load(tmp_path / "t.json")
    with pytest.raises(SchemaError, match="file not found"):
        torch_ir.load(tmp_path / "missing.json")


def test_unknown_extra_fields_are_ignored():
    doc = copy.deepcopy(VALID)
    doc["future_field"] = {"anything": 1}
    assert torch_ir.parse(doc).extra == {"future_field": {"anything": 1}}
