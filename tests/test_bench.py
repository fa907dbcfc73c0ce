"""``rlx bench``: every engine timed in its own process on the bundle's inputs, parity against the
numpy engine, a table, and the fastest passing engine named."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import rlx
from rlx.app.bench import bench, example_inputs
from rlx.cli import main
from rlx.errors import UsageError
from rlx.formats.bundle import read_bundle

from helpers import load_example

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def mlp_out(tmp_path_factory):
    module, inputs = load_example("mlp").get_model()
    out = tmp_path_factory.mktemp("bench") / "mlp"
    batch = torch.export.Dim("batch", max=64)
    rlx.from_torch(module, inputs, out, dynamic_shapes=({0: batch},))
    return out


def test_bench_times_engines_checks_parity_and_names_the_fastest(mlp_out, capsys):
    assert main(["bench", str(mlp_out), "--engines", "onnxruntime", "--runs", "3", "--warmup", "1"]) == 0
    text = capsys.readouterr().out
    assert "reference.safetensors" in text  # the bundle's example inputs
    lines = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert lines["numpy"].endswith("pass") and lines["onnxruntime"].endswith("pass")  # numpy: the reference
    assert "fastest passing engine:" in text


def test_bench_random_inputs_and_batch(mlp_out, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(mlp_out / "bundle", bundle)  # no reference.safetensors beside it: random inputs
    program, _, _ = read_bundle(bundle)
    arrays, origin = example_inputs(bundle, program, batch=5, seed=0)
    assert origin.startswith("random") and arrays[program.inputs[0].name].shape[0] == 5
    report = bench(bundle, engines=["numpy", "onnxruntime"], batch=5, threads=1, runs=2, warmup=0)
    assert [r.engine for r in report.results] == ["numpy", "onnxruntime"]
    for r in report.results:
        assert not r.error and r.passed and r.median_ms > 0 and r.p90_ms >= r.median_ms and r.peak_mb > 0
        assert r.min_cosine is not None and r.min_cosine > 0.9999
    assert report.fastest is not None


def test_bench_errors(mlp_out, tmp_path):
    with pytest.raises(UsageError, match="unknown engine"):
        bench(mlp_out, engines=["tvm"])
    module, inputs = load_example("mlp").get_model()
    rlx.from_torch(module, inputs, tmp_path / "static", verify=False)
    with pytest.raises(UsageError, match="dynamic"):
        bench(tmp_path / "static", engines=["numpy"], batch=4)
    assert main(["bench", str(tmp_path / "static"), "--batch", "4"]) != 0


def test_example_inputs_match_the_reference(mlp_out):
    program, _, _ = read_bundle(mlp_out)
    arrays, origin = example_inputs(mlp_out / "bundle", program, None, 0)
    from rlx.formats import safetensors_io

    ref, _ = safetensors_io.read(mlp_out / "reference.safetensors")
    for name, arr in arrays.items():
        np.testing.assert_array_equal(arr, ref[f"in::{name}"])


def test_interleaved_times_each_call_in_alternating_blocks_of_a_duration():
    """``rlx tune``'s race and benchmarks/bench.py time engines this way: every round runs each call
    once, in a block of about ``block_s`` (at least three calls), one block after the other."""
    import time

    from rlx.app.bench import MIN_BLOCK, interleaved

    ran: list[str] = []

    def quick():
        ran.append("quick")

    def slow():
        ran.append("slow")
        time.sleep(0.002)

    medians = interleaved([quick, slow], rounds=3, block_s=0.01, pause_s=0.0)
    timed = ran[6:]  # (three calls each size the blocks)
    assert ran[:6] == ["quick"] * 3 + ["slow"] * 3
    size = {"quick": timed.count("quick") // 3, "slow": timed.count("slow") // 3}
    assert size["quick"] > 100 and MIN_BLOCK <= size["slow"] <= 5  # 10 ms of each
    assert timed[: size["quick"] + size["slow"]] == ["quick"] * size["quick"] + ["slow"] * size["slow"]  # (given order)
    at = 0
    for _ in range(3):  # each round: one whole block of each call
        names = []
        for _ in range(2):
            names.append(timed[at])
            assert timed[at : at + size[timed[at]]] == [timed[at]] * size[timed[at]]
            at += size[names[-1]]
        assert sorted(names) == ["quick", "slow"]
    assert at == len(timed)
    assert medians[1] >= 2.0 > medians[0] > 0


def test_interleaved_rounds_vary_which_call_goes_before_which():
    """No call follows the same call in every round (a neighbour's spinning workers would slow it
    every time), and the orders are the same in every run."""
    from rlx.app.bench import MIN_BLOCK, interleaved_rounds

    def orders() -> list[list[int]]:
        ran: list[int] = []
        interleaved_rounds([lambda k=k: ran.append(k) for k in range(4)], rounds=12, block_s=0.0, pause_s=0.0)
        blocks = ran[4 * 3 :: MIN_BLOCK]  # (after the sizing calls: blocks of MIN_BLOCK calls)
        return [blocks[r * 4 : r * 4 + 4] for r in range(12)]

    rounds = orders()
    assert rounds[0] == [0, 1, 2, 3] and all(sorted(r) == [0, 1, 2, 3] for r in rounds)
    for k in range(4):
        before = {r[r.index(k) - 1] for r in rounds if r.index(k) > 0}
        assert len(before) >= 2, (k, rounds)
    assert orders() == rounds


def test_interleaved_rounds_returns_each_calls_runs_per_round():
    from rlx.app.bench import MIN_BLOCK, interleaved_rounds

    calls = [lambda: None, lambda: sum(range(1000))]
    runs = interleaved_rounds(calls, rounds=4, block_s=0.005, pause_s=0.0)
    assert len(runs) == 2 and all(len(per_call) == 4 for per_call in runs)
    assert all(len(block) >= MIN_BLOCK and all(t > 0 for t in block) for per_call in runs for block in per_call)
    assert len({len(block) for block in runs[0]}) == 1  # (one block size per call, fixed before the rounds)


def test_steady_medians_see_through_a_change_of_machine_speed():
    """tune's race: the same machine as below (a meets the slow state in 5 rounds, b in 4, a third
    call c in 4). The medians over all runs put a behind b; the steady medians keep b 10% and c 20%
    behind a, and a race slowed 1.5x all through reads 1.5x slower as a whole."""
    from rlx.app.bench import steady_medians

    slow = {"a": [1.6] * 5 + [1.0] * 4, "b": [1.6] * 4 + [1.0] * 5, "c": [1.6] * 4 + [1.0] * 5}
    speed = {"a": 1.0, "b": 1.1, "c": 1.2}
    rounds = [[[28e-6 * speed[k] * s] * 3 for s in slow[k]] for k in "abc"]  # (three runs a block)
    assert np.median(rounds[0]) > np.median(rounds[1])
    a, b, c = steady_medians(rounds)
    assert (b / a, c / a) == (pytest.approx(1.1), pytest.approx(1.2))
    slowed = steady_medians([[[t * 1.5 for t in block] for block in blocks] for blocks in rounds])
    assert slowed == pytest.approx([1.5 * m for m in (a, b, c)])


def test_a_paired_ratio_sees_through_a_change_of_machine_speed():
    """b runs 10% slower than a. The machine runs 1.6x slower until round 5, and turns fast again
    after a's block of that round: a meets the slow state in 5 rounds, b in 4. The medians over all
    runs put a 1.45x behind b; the median of the per-round ratios gives the true ratio."""
    from rlx.app.bench import paired_ratio

    a = [28e-6 * s for s in [1.6] * 5 + [1.0] * 4]
    b = [28e-6 * 1.1 * s for s in [1.6] * 4 + [1.0] * 5]
    assert np.median(a) / np.median(b) == pytest.approx(1.6 / 1.1)
    assert paired_ratio(a, b) == pytest.approx(1 / 1.1)
    assert paired_ratio(b, a) == pytest.approx(1.1)
    with pytest.raises(ValueError):
        paired_ratio(a, b[:-1])
