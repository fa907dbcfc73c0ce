"""Every example matches PyTorch with all passes on, all off, and each pass off alone; the
rewritten programs stay valid Programs; plans are cached per binding for dynamic programs."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch
from pass_cases import example

import rlx
from rlx.errors import UsageError
from rlx.ir.program import Program
from rlx.runtime.model import Model
from rlx.runtime.numpy_engine.fused_calls import ENGINE_CALLS
from rlx.runtime.numpy_engine.passes import optimize as pipeline

from helpers import convert, load_example

EXAMPLES = [("mlp", "high"), ("transformer", "high"), ("cnn", "high"), ("decoder_lm", "high")]
# Core ATen spells attention and linear layers out op by op: other patterns for the passes.
CORE = [("transformer", "core"), ("decoder_lm", "core"), ("cnn", "core")]
SETTINGS = ["all-on", "all-off"] + [f"no-{p}" for p in pipeline.PASS_NAMES]


def _kwargs(setting: str) -> dict:
    if setting == "all-on":
        return {}
    if setting == "all-off":
        return {"optimize": False}
    return {"disable_passes": (setting[3:],)}


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("name,level", EXAMPLES, ids=lambda v: v)
def test_example_matches_torch(name, level, setting):
    case = example(name, level)
    model = case.model(**_kwargs(setting))
    case.check(model(*case.inputs), f"{name}/{level}/{setting}")
    case.check(model(*case.inputs), f"{name}/{level}/{setting} (second run)")  # the plan is reusable


@pytest.mark.parametrize("setting", ["all-on", "all-off"])
@pytest.mark.parametrize("name,level", CORE, ids=lambda v: v)
def test_core_level_example_matches_torch(name, level, setting):
    case = example(name, level)
    case.check(case.model(**_kwargs(setting))(*case.inputs), f"{name}/{level}/{setting}")


@pytest.mark.parametrize("name,level", EXAMPLES + CORE, ids=lambda v: v)
def test_optimised_program_is_a_valid_program(name, level):
    """The rewritten program verifies and survives a JSON round trip, fused Calls included (read
    with the engine's own Calls: a program.json cannot name them)."""
    case = example(name, level)
    planned, weights = pipeline.optimize(case.program, case.weights)
    doc = json.loads(planned.dumps())
    again = Program.from_json(doc, engine_calls=ENGINE_CALLS)
    assert again.dumps() == planned.dumps()
    case.check(case.run_program(again, dict(weights)))
    assert len(planned.instrs) < len(case.program.instrs)


def test_optimisation_shrinks_the_plan():
    case = example("decoder_lm")
    on, off = case.model(), case.model(optimize=False)
    assert on._static.n_steps < 0.6 * off._static.n_steps
    hist = on._static.program.call_histogram()
    # Per layer: q, k, v merged into one Gemm, the output projection, the MLP's two (the first with
    # its GELU); only the tied head, which has no bias, stays a MatMul.
    assert hist.get("Gemm", 0) == 2 * 4 and hist.get("MatMul", 0) == 1


def test_unknown_pass_is_a_usage_error():
    case = example("mlp")
    with pytest.raises(UsageError, match="unknown pass.*fusoin.*constant_folding"):
        case.model(disable_passes=("fusoin",))


@functools.cache
def _dynamic_decoder():
    model, example_inputs = load_example("decoder_lm").get_model()
    dims = {"input_ids": {0: torch.export.Dim("b", min=1, max=8), 1: torch.export.Dim("s", min=2, max=32)}}
    runtime, program, _ = convert(model, example_inputs, dynamic_shapes=dims)
    g = torch.Generator().manual_seed(0)
    cases = []
    for batch, seq in [(1, 5), (3, 17), (1, 5), (2, 32)]:
        ids = torch.randint(0, 100, (batch, seq), generator=g)
        with torch.no_grad():
            cases.append((ids.numpy(), model(ids).numpy()))
    return program, runtime.weights, cases


@pytest.mark.parametrize("setting", ["all-on", "all-off", "no-constant_folding", "no-fusion"])
def test_dynamic_plans_are_cached_per_binding(setting):
    program, weights, cases = _dynamic_decoder()
    runtime = Model(program, weights, **_kwargs(setting))
    for ids, want in cases:
        np.testing.assert_allclose(runtime(ids), want, rtol=1e-4, atol=1e-5)
    assert len(runtime._by_binding) == 3  # (1, 5) twice: one plan
    if setting in ("all-off", "no-constant_folding"):
        return
    # Weights folded and packed once, on the program as written, and shared by every binding's plan.
    plans = list(runtime._by_binding.values())
    # Slots 0 and 1 hold None and the run's data-dependent sizes; then the inputs, then the weights.
    packed = [
        {w.name: id(p._base[2 + len(p.program.inputs) + k]) for k, w in enumerate(p.program.weights)} for p in plans
    ]
    once = set(packed[0]) & set(packed[1]) & set(runtime.engine.weights)  # not per-binding ones (arange(seq))
    assert any("permute" in n for n in once)  # a packed weight
    assert all(packed[0][n] == packed[1][n] == id(runtime.engine.weights[n]) for n in once)


def test_run_cli_disable_pass(tmp_path, capsys):
    model, inputs = load_example("mlp").get_model()
    rlx.from_torch(model, inputs, tmp_path / "m", verify=False)
    x = tmp_path / "x.npy"
    np.save(x, inputs[0].numpy())
    from rlx.cli import main

    assert (
        main(
            [
                "run",
                str(tmp_path / "m"),
                "--input",
                f"x={x}",
                "--disable-pass",
                "fusion",
                "--disable-pass",
                "alias",
                "-o",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    with torch.no_grad():
        np.testing.assert_allclose(np.load(tmp_path / "o" / "out0.npy"), model(*inputs).numpy(), rtol=1e-5, atol=1e-6)
    assert main(["run", str(tmp_path / "m"), "--input", f"x={x}", "--disable-pass", "nope"]) != 0
    assert "unknown pass" in capsys.readouterr().err
