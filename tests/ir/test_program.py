"""Program JSON round-trip, determinism and the verifier."""

from __future__ import annotations

import json

import pytest
import torch

from rlx.errors import SchemaError
from rlx.ir.calls import Binary, Cast, Reshape
from rlx.ir.program import Instr, Lit, Program, Ref, Value
from rlx.ir.validate import validate

from helpers import convert


def tiny_program(instrs):
    return Program("p", [Value("x", (2, 3), "f32")], [], instrs, [Ref(instrs[-1].result)])


def test_round_trip_of_a_real_program():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.softmax(x.masked_fill(x > 1, float("-inf")), dim=-1), x.sum(0)

    _, program, _ = convert(M(), (torch.randn(3, 4),), decomposition="aten")
    text = program.dumps()
    again = Program.from_json(json.loads(text))
    assert again.dumps() == text
    assert again.instrs == program.instrs
    assert any(isinstance(i.call, type(program.instrs[0].call)) for i in again.instrs)
    assert all(i.note.startswith("aten.") for i in program.instrs)
    assert program.source_histogram["aten.masked_fill.Scalar"] == 1


def test_non_finite_literals_survive_json():
    p = tiny_program([Instr("y", Binary("add", Ref("x"), Lit(float("-inf"), "f32")), (2, 3), "f32")])
    text = p.dumps()
    assert "-Infinity" not in text and '"-inf"' in text
    assert Program.from_json(json.loads(text)).instrs[0].call.y == Lit(float("-inf"), "f32")


@pytest.mark.parametrize(
    "instrs,message",
    [
        ([Instr("y", Binary("add", Ref("x"), Ref("z")), (2, 3), "f32")], "reads 'z' before it is defined"),
        ([Instr("y", Cast(Ref("x"), "f16"), (2, 3), "f32")], "casts to f16 but declares f32"),
        ([Instr("y", Reshape(Ref("x"), (4, 2)), (4, 2), "f32")], "reshapes [2, 3] to [4, 2]"),
        ([Instr("x", Cast(Ref("x"), "f32"), (2, 3), "f32")], "defined twice"),
        ([Instr("y", Binary("frobnicate", Ref("x"), Ref("x")), (2, 3), "f32")], "unknown binary function"),
    ],
)
def test_verifier_rejects(instrs, message):
    with pytest.raises(SchemaError) as info:
        validate(tiny_program(instrs))
    assert message in str(info.value)


def test_unknown_call_in_json_is_a_schema_error():
    doc = tiny_program([Instr("y", Cast(Ref("x"), "f32"), (2, 3), "f32")]).to_json()
    doc["instrs"][0]["op"] = "Teleport"
    with pytest.raises(SchemaError, match="unknown call 'Teleport'"):
        Program.from_json(doc)
