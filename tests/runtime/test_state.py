"""Mutable state: buffers a model updates in place (a KV cache) are carried by the runtime across
calls, on the numpy and JAX engines and in the generated package; and every failure on programs
with data-dependent sizes or damaged symbol tables is one RlxError line."""

from __future__ import annotations

import importlib
import json
import sys

import numpy as np
import pytest
import torch

import rlx
from rlx.errors import InputError, RlxError


class RingCache(torch.nn.Module):
    """A hand-written KV cache: ``index_copy_`` into a buffer, plus a step counter."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(6, 4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(0, pos, x)
        self.steps.add_(1)
        return self.cache.cumsum(0)[-1] * self.steps


def _steps(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(1, 4, generator=g), torch.tensor([k % 6])) for k in range(n)]


def _torch_run(n: int) -> list[np.ndarray]:
    module = RingCache()
    with torch.no_grad():
        return [module(x, p).numpy() for x, p in _steps(n)]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("ring") / "out"
    module = RingCache()
    report = rlx.from_torch(module, _steps(1)[0], out, write=("bundle", "package"))
    assert report.passed
    assert float(module.cache.abs().sum()) == 0.0 and int(module.steps) == 0  # conversion left the module as it was
    return out


def test_state_is_carried_across_calls(converted) -> None:
    model = rlx.load(converted)
    assert model.input_names == ["x", "pos"]
    assert sorted(model.state) == ["b_cache", "b_steps"] and int(model.state["b_steps"]) == 0
    for k, ((x, p), want) in enumerate(zip(_steps(8), _torch_run(8))):
        got = model(x.numpy(), p.numpy())
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"step {k}")
        assert got.dtype == want.dtype
    assert int(model.state["b_steps"]) == 8


def test_reset_and_fork(converted) -> None:
    model = rlx.load(converted)
    (x, p), *_ = _steps(1)
    first = model(x.numpy(), p.numpy())
    twin = model.fork()  # shares weights and plans, starts from the initial state
    np.testing.assert_array_equal(twin(x.numpy(), p.numpy()), first)
    assert int(model.state["b_steps"]) == 1 and int(twin.state["b_steps"]) == 1
    model.state["b_steps"][...] = 99  # a copy: the model's own state is untouched
    model.reset()
    assert int(model.state["b_steps"]) == 0 and float(np.abs(model.state["b_cache"]).sum()) == 0.0
    np.testing.assert_array_equal(model(x.numpy(), p.numpy()), first)


def test_formats_record_the_state(converted) -> None:
    ir = json.loads((converted / "torch-ir.json").read_text())
    updates = {o["state"]: k for k, o in enumerate(ir["outputs"]) if "state" in o}
    assert updates == {"b_cache": 1, "b_steps": 2} and ir["output_tree"] == {"out": 0}
    program = json.loads((converted / "bundle" / "program.json").read_text())
    assert program["state"] == [
        {"name": "b_cache", "key": "cache", "output": 1},
        {"name": "b_steps", "key": "steps", "output": 2},
    ]


def test_generated_package_carries_state(converted, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(converted / "rlx_ring_cache"))
    sys.modules.pop("rlx_ring_cache", None)
    package = importlib.import_module("rlx_ring_cache")
    model = package.load()
    for k, ((x, p), want) in enumerate(zip(_steps(5), _torch_run(5))):
        np.testing.assert_allclose(model(x.numpy(), p.numpy()), want, rtol=1e-6, err_msg=f"step {k}")
    model.reset()
    np.testing.assert_allclose(model(*[t.numpy() for t in _steps(1)[0]]), _torch_run(1)[0], rtol=1e-6)


def test_jax_engine_carries_state(converted) -> None:
    pytest.importorskip("jax")
    model = rlx.load(converted, engine="jax")
    for k, ((x, p), want) in enumerate(zip(_steps(4), _torch_run(4))):
        np.testing.assert_allclose(model(x.numpy(), p.numpy()), want, rtol=1e-6, err_msg=f"step {k}")


class Bump(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.add_(y)
        return x * 2, y.sum()


@pytest.mark.parametrize("engine", ["numpy", "jax", "package"])
def test_inputs_updated_in_place_are_written_back(engine, tmp_path, monkeypatch) -> None:
    if engine == "jax":
        pytest.importorskip("jax")
    x0, y = torch.ones(3), torch.arange(3.0)
    report = rlx.from_torch(Bump(), (x0, y), tmp_path / "bump", write=("bundle", "package"))
    assert report.passed and torch.equal(x0, torch.ones(3))  # the conversion left the example as it was
    if engine == "package":
        monkeypatch.syspath_prepend(str(tmp_path / "bump" / "rlx_bump"))
        sys.modules.pop("rlx_bump", None)
        model = importlib.import_module("rlx_bump").load()
    else:
        model = rlx.load(tmp_path / "bump", engine=engine)
    x = np.ones(3, np.float32)
    doubled, total = model(x, y.numpy())
    x_torch = torch.ones(3)
    want_doubled, want_total = Bump()(x_torch, y)
    np.testing.assert_array_equal(x, x_torch.numpy())  # written back, as PyTorch did to its tensor
    np.testing.assert_array_equal(np.asarray(doubled), want_doubled.numpy())
    np.testing.assert_array_equal(np.asarray(total), want_total.numpy())


def test_read_only_input_updated_in_place_fails_in_one_line(tmp_path) -> None:
    rlx.from_torch(Bump(), (torch.ones(3), torch.arange(3.0)), tmp_path / "bump")
    x = np.ones(3, np.float32)
    x.flags.writeable = False
    with pytest.raises(InputError) as err:
        rlx.load(tmp_path / "bump")(x, np.arange(3, dtype=np.float32))
    assert "read-only" in str(err.value) and "\n" not in str(err.value)


# ── programs with data-dependent sizes, and damaged ones ─────────────────────
@pytest.fixture(scope="module")
def selecting(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("sel") / "out"
    rlx.from_torch(lambda_module(), (torch.randn(3, 4),), out)
    return out


def lambda_module() -> torch.nn.Module:
    class Select(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[x > 0] * torch.nonzero(x > 0).shape[0]

    return Select()


def _damaged_build(src, tmp_path, edit) -> RlxError:
    doc = json.loads((src / "torch-ir.json").read_text())
    edit(doc)
    work = tmp_path / "work"
    work.mkdir()
    (work / "torch-ir.json").write_text(json.dumps(doc))
    (work / "weights.safetensors").write_bytes((src / "weights.safetensors").read_bytes())
    with pytest.raises(RlxError) as err:
        rlx.build(work)
    return err.value


def _drop_data_symbols(doc: dict) -> None:
    doc.pop("data_symbols")


def _rename_data_symbol(doc: dict) -> None:
    doc["data_symbols"][0]["name"] = "u99"


def _symbol_in_both_tables(doc: dict) -> None:
    doc["symbols"] = [dict(doc["data_symbols"][0])]


@pytest.mark.parametrize("edit", [_drop_data_symbols, _rename_data_symbol, _symbol_in_both_tables])
def test_damaged_symbol_tables_fail_in_one_line(selecting, tmp_path, edit) -> None:
    message = str(_damaged_build(selecting, tmp_path, edit))
    assert message and "\n" not in message and "KeyError" not in message


def _damaged_program(src, tmp_path, edit) -> RlxError:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for name in ("meta.json", "weights.safetensors"):
        (bundle / name).write_bytes((src / "bundle" / name).read_bytes())
    doc = json.loads((src / "bundle" / "program.json").read_text())
    edit(doc)
    (bundle / "program.json").write_text(json.dumps(doc))
    with pytest.raises(RlxError) as err:
        model = rlx.load(bundle)
        model(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    return err.value


def _unknown_size_in_shape(doc: dict) -> None:
    doc["instrs"][-1]["shape"] = ["u7 + 1"]


def _size_read_before_it_is_produced(doc: dict) -> None:
    doc["instrs"] = [i for i in doc["instrs"] if i["op"] not in ("Nonzero", "Index")] + doc["instrs"][-1:]


@pytest.mark.parametrize("edit", [_unknown_size_in_shape, _size_read_before_it_is_produced])
def test_damaged_programs_fail_in_one_line(selecting, tmp_path, edit) -> None:
    message = str(_damaged_program(selecting, tmp_path, edit))
    assert message and "\n" not in message and "KeyError" not in message


def test_data_dependent_bundle_runs_on_new_data(selecting) -> None:
    model = rlx.load(selecting)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)
        want = lambda_module()(torch.from_numpy(x)).numpy()
        got = model(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
