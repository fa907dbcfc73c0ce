"""Dynamic shapes: export once, run at many batch sizes and sequence lengths, with clear errors
for bindings torch.export would reject."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import rlx
from rlx.cli import main, parse_dynamic
from rlx.errors import InputError, UsageError
from rlx.frontends.torch import dynamic_shapes_from_cli
from rlx.ir.symbolic import Sym

from helpers import assert_arrays_match, convert, load_example

Dim = torch.export.Dim


def make_inputs(name: str, batch: int, seq: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    if name == "mlp":
        return (torch.randn(batch, 32, generator=g),)
    if name == "cnn":
        return (torch.randn(batch, 3, 32, 32, generator=g),)
    if name == "transformer":
        mask = torch.rand(batch, seq, generator=g) > 0.3
        mask[:, 0] = True  # at least one real token per row
        return torch.randn(batch, seq, 64, generator=g), mask
    return (torch.randint(0, 100, (batch, seq), generator=g),)


CASES = {
    # name: (dynamic_shapes factory, (batch, seq) pairs incl. 1 and the range ends)
    "mlp": (lambda b, s: {"x": {0: b}}, [(1, 0), (2, 0), (5, 0), (16, 0), (9, 0)]),
    "cnn": (lambda b, s: {"images": {0: b}}, [(1, 0), (3, 0), (16, 0), (7, 0), (2, 0)]),
    "transformer": (
        lambda b, s: {"x": {0: b, 1: s}, "padding_mask": {0: b, 1: s}},
        [(1, 2), (1, 64), (16, 2), (16, 64), (3, 7), (2, 33)],
    ),
    "decoder_lm": (lambda b, s: {"input_ids": {0: b, 1: s}}, [(1, 2), (1, 64), (16, 2), (16, 64), (4, 9), (2, 1 + 30)]),
}


@pytest.mark.parametrize("level", ["high", "core"])
@pytest.mark.parametrize("name", list(CASES))
def test_one_export_runs_at_every_size(name, level):
    spec, sizes = CASES[name]
    model, example = load_example(name).get_model()
    runtime, program, _ = convert(
        model, example, decomposition=level, dynamic_shapes=spec(Dim("batch", min=1, max=16), Dim("seq", min=2, max=64))
    )
    assert program.is_dynamic
    for k, (batch, seq) in enumerate(sizes):
        inputs = make_inputs(name, batch, seq, seed=k)
        with torch.no_grad():
            want = model(*inputs).numpy()
        got = runtime(*[t.numpy() for t in inputs])
        assert_arrays_match(got, want, f"{name} batch={batch} seq={seq}", rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def transformer_runtime():
    model, example = load_example("transformer").get_model()
    spec = CASES["transformer"][0](Dim("batch", min=1, max=16), Dim("seq", min=2, max=64))
    runtime, _, _ = convert(model, example, dynamic_shapes=spec)
    return runtime


@pytest.mark.parametrize(
    "shapes,message",
    [
        (((2, 70, 64), (2, 70)), "input 'x' axis 1 (symbol seq) = 70, outside 2..64"),
        (((17, 8, 64), (17, 8)), "input 'x' axis 0 (symbol batch) = 17, outside 1..16"),
        (((2, 8, 64), (2, 9)), "input 'padding_mask' axis 1 (symbol seq) = 9, but input 'x' axis 1 gives seq = 8"),
        (((2, 8, 63), (2, 8)), "input 'x' has shape [2, 8, 63], expected [batch, seq, 64]"),
        (((2, 8), (2, 8)), "input 'x' has shape [2, 8], expected [batch, seq, 64]"),
    ],
)
def test_bad_bindings_give_one_line_errors(transformer_runtime, shapes, message):
    x = np.zeros(shapes[0], np.float32)
    mask = np.ones(shapes[1], bool)
    with pytest.raises(InputError) as info:
        transformer_runtime(x, mask)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


class Derived(torch.nn.Module):
    def forward(self, x, y):
        half = x[:, : x.shape[1] // 2]
        return half * y[:, 1:], torch.arange(x.shape[1]).float() + 0.5


def test_derived_dims_bind_through_their_expression():
    seq = Dim("seq", min=2, max=32)
    dyn = {"x": {1: 2 * seq}, "y": {1: seq + 1}}
    runtime, program, _ = convert(Derived(), (torch.randn(3, 8), torch.randn(3, 5)), dynamic_shapes=dyn)
    assert {s.name for s in program.symbols} == {"seq"}
    for s in (2, 3, 17, 32):
        x, y = torch.randn(3, 2 * s), torch.randn(3, s + 1)
        got = runtime(x.numpy(), y.numpy())
        want = Derived()(x, y)
        for g, w in zip(got, want):
            assert_arrays_match(g, w.numpy())
    with pytest.raises(InputError, match=r"no integer seq satisfies 2\*seq = 7"):
        runtime(np.zeros((3, 7), np.float32), np.zeros((3, 4), np.float32))
    with pytest.raises(InputError, match=r"input 'y' axis 1 \(seq \+ 1\) = 6, but seq \+ 1 = 5 with seq=4"):
        runtime(np.zeros((3, 8), np.float32), np.zeros((3, 6), np.float32))


def test_plan_cache_is_bounded(transformer_runtime):
    from rlx.runtime.model import PLAN_CACHE_SIZE

    for seq in range(2, 2 + PLAN_CACHE_SIZE + 5):
        transformer_runtime(np.zeros((1, seq, 64), np.float32), np.ones((1, seq), bool))
    assert len(transformer_runtime._by_binding) == PLAN_CACHE_SIZE


def test_bundle_records_symbols_and_cli(tmp_path, capsys):
    example = str(load_example("decoder_lm").__file__)
    out = tmp_path / "lm"
    rc = main(
        ["import", example, "-o", str(out), "--dynamic", "input_ids:0=batch:1:8", "--dynamic", "input_ids:1=seq:2:64"]
    )
    assert rc == 0
    meta = json.loads((out / "bundle" / "meta.json").read_text())
    assert meta["inputs"][0]["shape"] == ["batch", "seq"]
    assert meta["outputs"][0]["shape"] == ["batch", "seq", 100]
    assert {s["name"]: (s["min"], s["max"]) for s in meta["symbols"]} == {"batch": (1, 8), "seq": (2, 64)}
    ir = json.loads((out / "torch-ir.json").read_text())
    assert ir["inputs"][0]["shape"] == [2, 12] and ir["inputs"][0]["dynamic"] == [0, 1]
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "[batch, seq]" in text and "seq in 2..64 (example 12)" in text
    ids = np.random.default_rng(0).integers(0, 100, (3, 40))
    np.save(tmp_path / "ids.npy", ids)
    assert main(["run", str(out), "--input", f"input_ids={tmp_path / 'ids.npy'}"]) == 0
    assert "out0: shape [3, 40, 100] dtype float32" in capsys.readouterr().out
    model, _ = load_example("decoder_lm").get_model()
    with torch.no_grad():
        want = model(torch.from_numpy(ids)).numpy()
    assert_arrays_match(rlx.load(out)(ids), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "text,parsed",
    [
        ("input_ids:1", ("input_ids", 1, "input_ids_1", None, None)),
        ("x:0=batch", ("x", 0, "batch", None, None)),
        ("x:1=seq:2:512", ("x", 1, "seq", 2, 512)),
    ],
)
def test_parse_dynamic(text, parsed):
    assert parse_dynamic(text) == parsed


@pytest.mark.parametrize("text", ["x", "x:a", "x:1=", "x:1=seq:5", "x:1=seq:9:2", "x:1=2seq"])
def test_parse_dynamic_rejects(text):
    with pytest.raises(UsageError, match="expected NAME:AXIS"):
        parse_dynamic(text)


def test_same_symbol_ties_axes():
    spec = dynamic_shapes_from_cli([("x", 0, "batch", 1, 8), ("mask", 0, "batch", 1, 8)])
    assert spec["x"][0] is spec["mask"][0]


class NeedsEven(torch.nn.Module):
    def forward(self, x):
        return x.reshape(-1, 2, x.shape[1]).sum(1)


def test_export_constraint_violation_is_one_line_with_torchs_fix(tmp_path):
    from rlx.errors import ExportError

    with pytest.raises(ExportError) as info:
        rlx.from_torch(NeedsEven(), (torch.randn(4, 3),), tmp_path / "o", dynamic_shapes={"x": {0: Dim("n", max=64)}})
    msg = str(info.value)
    assert "\n" not in msg
    assert "Constraints violated (n)" in msg and "torch suggests:" in msg and "n = 2*_n" in msg
    assert not (tmp_path / "o").exists()


# ── fixing chosen dimensions of an exported directory while building ─────────
class _Mix(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fc(x).sum(1) + y[:, :1]


@pytest.fixture(scope="module")
def exported_mix(tmp_path_factory):
    out = tmp_path_factory.mktemp("mix") / "out"
    module = _Mix().eval()
    batch, seq = Dim("batch", min=1, max=16), Dim("seq", min=2, max=64)
    rlx.from_torch(module, (torch.randn(2, 5, 4), torch.randn(2, 2 * 5)), out,
                   dynamic_shapes={"x": {0: batch, 1: seq}, "y": {0: batch, 1: 2 * seq}})  # fmt: skip
    return out, module


def test_build_fixes_chosen_dims_of_an_exported_dir(exported_mix, tmp_path):
    # seq fixed at its example size (so --verify still compares with reference.safetensors): fixed
    # on x and on y's derived axis alike; batch stays dynamic.
    src, module = exported_mix
    assert main(["build", str(src), "-o", str(tmp_path / "a"), "--verify", "--input-shape", "x=?,5,4"]) == 0
    model = rlx.load(tmp_path / "a")
    assert [s.name for s in model.program.symbols] == ["batch"]
    assert [v.shape for v in model.program.inputs] == [(Sym("batch"), 5, 4), (Sym("batch"), 10)]
    for n in (1, 3, 7):
        x, y = torch.randn(n, 5, 4), torch.randn(n, 10)
        with torch.no_grad():
            assert_arrays_match(model(x.numpy(), y.numpy()), module(x, y).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError):  # the fixed extent is checked at run time
        model(np.zeros((2, 6, 4), np.float32), np.zeros((2, 12), np.float32))
    # Another size than the example's builds without --verify and runs at it.
    rlx.build(src, tmp_path / "b", input_shapes={"x": (3, 9, None)})
    x, y = torch.randn(3, 9, 4), torch.randn(3, 18)
    with torch.no_grad():
        assert_arrays_match(rlx.load(tmp_path / "b")(x.numpy(), y.numpy()), module(x, y).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("shapes", "verify", "message"),
    [
        ({"x": (None, 9, 4)}, True, "recorded at seq = 5; fixing it to 9 needs a build without --verify"),
        ({"y": (None, 10)}, False, "axis 1 is 2\\*seq, computed from other sizes"),
        ({"x": (None, 99, 4)}, False, "99 is outside the range seq was exported for, \\[2, 64\\]"),
        ({"x": (None, 5, 3)}, False, "the graph fixes it to 4, not 3"),
        ({"z": (1,)}, False, "not an input \\(inputs: x, y\\)"),
    ],
)
def test_bad_build_input_shapes_are_one_line(exported_mix, tmp_path, shapes, verify, message):
    with pytest.raises(UsageError, match=message) as err:
        rlx.build(exported_mix[0], tmp_path / "c", input_shapes=shapes, verify=verify)
    assert "\n" not in str(err.value)
