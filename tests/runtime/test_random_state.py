"""A model with random ops (a VAE's reparameterisation, dropout in training, sampling): the
generator is state the runtime carries. Same seed → same random bits on the numpy engine, the JAX
engine and the generated numpy and JAX packages: draws computed exactly from them (uniforms,
integers, masks, sampled indices) are bit-identical everywhere; normal draws go through log and
cos, which XLA rounds differently from numpy by an ulp, so the JAX side matches them to float32
rounding. reset() replays; fork() draws a stream of its own; parity reports the drawn outputs as
not comparable and compares the rest."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import numpy as np
import pytest
import torch

import rlx
from rlx.errors import UsageError
from rlx.ir.rng import RNG_STATE, random_values


class Sampler(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.enc = torch.nn.Linear(6, 8)
        self.dec = torch.nn.Linear(4, 6)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mu, logvar = self.enc(x).chunk(2, -1)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        recon = torch.nn.functional.dropout(self.dec(z), 0.25, training=True)
        picks = torch.multinomial(x.abs() + 0.1, 2)
        noise = torch.rand(3, dtype=torch.float64) + torch.randint(0, 5, (3,))
        return recon, mu, picks, noise


X = torch.randn(5, 6, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("sampler")
    report = rlx.from_torch(Sampler(), (X,), out / "np", write=("bundle", "package"), keep_exported=True)
    rlx.from_torch(Sampler(), (X,), out / "jx", write=("package",), package_style="jax", verify=False)
    return out, report


def _runs(model, n: int = 3) -> list[list[np.ndarray]]:
    return [[np.asarray(o) for o in model(X.numpy())] for _ in range(n)]


def _package(root, name: str, monkeypatch: pytest.MonkeyPatch, **kwargs):
    monkeypatch.syspath_prepend(str(root))
    sys.modules.pop(name, None)
    for key in [k for k in sys.modules if k.startswith(name + ".")]:
        sys.modules.pop(key)
    return importlib.import_module(name).load(**kwargs)


EXACT = (2, 3)  # outputs computed exactly from the random bits (indices; uniforms plus integers)


def _assert_same(a: list[list[np.ndarray]], b: list[list[np.ndarray]], what: str, exact: bool = True) -> None:
    """Bit for bit; with ``exact=False``, the outputs that pass through transcendental functions
    (log, cos, exp of Box-Muller and the layers) to float32 rounding, the rest still bit for bit."""
    for k, (ra, rb) in enumerate(zip(a, b)):
        for j, (x, y) in enumerate(zip(ra, rb)):
            assert x.dtype == y.dtype and x.shape == y.shape, f"{what}: call {k} output {j}"
            if exact or j in EXACT:
                np.testing.assert_array_equal(x, y, err_msg=f"{what}: call {k} output {j}")
            else:
                np.testing.assert_array_equal(x == 0, y == 0, err_msg=f"{what}: call {k} output {j}: dropout mask")
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=f"{what}: call {k} output {j}")


def test_parity_reports_drawn_outputs_as_not_comparable(converted) -> None:
    _, report = converted
    assert report.passed
    flags = [o.random for o in report.parity.outputs]
    assert flags == [True, False, True, True]  # mu does not depend on a draw: compared with PyTorch's
    mu = report.parity.outputs[1]
    assert mu.cosine is not None and mu.cosine > 0.99999
    assert "random: shape/dtype checked, values not comparable" in report.parity.table()


def test_a_drawn_output_with_the_wrong_shape_still_fails() -> None:
    from rlx.app.verify import compare

    got = compare(0, np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), random=True)
    assert not got.passed and got.reason == "shape differs"
    assert not compare(0, np.zeros(3, np.float32), np.zeros(3, np.float64), random=True).passed


def test_draws_are_reproducible_and_advance(converted) -> None:
    out, _ = converted
    model = rlx.load(out / "np" / "bundle")
    first = _runs(model)
    assert not np.array_equal(first[0][0], first[1][0]), "two calls drew the same values"
    _assert_same(first, _runs(rlx.load(out / "np" / "bundle")), "a second load, same default seed")
    model.reset()
    _assert_same(first, _runs(model), "after reset()")
    other = _runs(rlx.load(out / "np" / "bundle", seed=7))
    assert not np.array_equal(other[0][0], first[0][0])
    _assert_same(other, _runs(rlx.load(out / "np" / "bundle", seed=7)), "seed 7 twice")
    assert model.state[RNG_STATE].dtype == np.int64


def test_fork_draws_a_stream_of_its_own(converted) -> None:
    out, _ = converted
    model = rlx.load(out / "np" / "bundle", seed=3)
    parent = _runs(model, 1)
    a, b = model.fork(), model.fork()
    ra, rb = _runs(a, 1), _runs(b, 1)
    assert not np.array_equal(ra[0][0], parent[0][0]) and not np.array_equal(ra[0][0], rb[0][0])
    again = rlx.load(out / "np" / "bundle", seed=3)
    _assert_same(ra, _runs(again.fork(), 1), "the first fork of a model with the same seed")
    a.reset()
    _assert_same(ra, _runs(a, 1), "a fork after reset()")


def test_seed_must_be_an_int(converted) -> None:
    out, _ = converted
    with pytest.raises(UsageError, match="seed must be an int"):
        rlx.load(out / "np" / "bundle", seed=1.5)  # type: ignore[arg-type]


def test_engines_and_packages_draw_the_same_bits(converted, monkeypatch) -> None:
    pytest.importorskip("jax")
    out, _ = converted
    want = _runs(rlx.load(out / "np" / "bundle"))
    jax_engine = _runs(rlx.load(out / "np" / "bundle", engine="jax"))
    _assert_same(want, jax_engine, "JAX engine", exact=False)
    _assert_same(want, _runs(_package(out / "np" / "rlx_sampler", "rlx_sampler", monkeypatch)), "numpy package")
    jax_package = _runs(_package(out / "jx" / "rlx_sampler", "rlx_sampler", monkeypatch))
    _assert_same(want, jax_package, "JAX package", exact=False)
    _assert_same(jax_engine, jax_package, "JAX package against the JAX engine", exact=False)
    seeded = _runs(rlx.load(out / "np" / "bundle", seed=11))
    _assert_same(
        seeded, _runs(_package(out / "jx" / "rlx_sampler", "rlx_sampler", monkeypatch, seed=11)), "seed 11", exact=False
    )
    forked = _runs(rlx.load(out / "np" / "bundle", seed=11).fork(), 1)
    pkg = _package(out / "np" / "rlx_sampler", "rlx_sampler", monkeypatch, seed=11)
    _assert_same(forked, _runs(pkg.fork(), 1), "the first fork, numpy package")


def test_onnx_export_draws_the_same_bits(converted, tmp_path) -> None:
    """The generator as ai.onnx integer ops: the exported model passes onnx's checker and, on
    onnxruntime, draws what the numpy engine draws (the state carried by the runtime as ever)."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from rlx.exporters.onnx import write_onnx
    from rlx.formats.bundle import read_bundle

    out, _ = converted
    path = write_onnx(*read_bundle(out / "np" / "bundle")[:2], tmp_path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"BitShift", "BitwiseXor", "Range"} <= ops and not ops & {"RandomUniform", "RandomNormal"}
    ort = rlx.load(out / "np" / "bundle", engine="onnxruntime", seed=5)
    _assert_same(_runs(rlx.load(out / "np" / "bundle", seed=5)), _runs(ort), "onnxruntime engine", exact=False)


def test_the_package_draws_without_rlx_or_torch(converted, tmp_path) -> None:
    """The numpy package, imported where torch and rlx cannot be: same draws as the engine, seeded."""
    import subprocess
    import textwrap

    from helpers import block_imports

    out, _ = converted
    block = block_imports("torch", "rlx")
    np.save(tmp_path / "x.npy", X.numpy())
    script = block + textwrap.dedent(f"""
        import numpy as np
        sys.path.insert(0, {str(out / "np" / "rlx_sampler")!r})
        import rlx_sampler
        model = rlx_sampler.load(seed=4).fork()
        outs = model(np.load({str(tmp_path / "x.npy")!r}))
        np.savez({str(tmp_path / "got.npz")!r}, *[np.asarray(o) for o in outs])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(tmp_path / "got.npz")
    want = _runs(rlx.load(out / "np" / "bundle", seed=4).fork(), 1)
    _assert_same(want, [[got[f"arr_{k}"] for k in range(len(got.files))]], "standalone package")


def test_random_values_follow_the_draws(converted) -> None:
    out, _ = converted
    program = rlx.load(out / "np" / "bundle").program
    drawn = random_values(program)
    assert {o.name for o in program.outputs[:4] if o.name in drawn} == {program.outputs[k].name for k in (0, 2, 3)}
    advanced = program.outputs[program.state[0].output]
    assert advanced.name not in drawn  # the advanced state depends on the state, not on a draw


def test_cli_run_takes_a_seed(converted, tmp_path) -> None:
    from rlx.cli import main

    out, _ = converted
    np.save(tmp_path / "x.npy", X.numpy())
    for seed, where in ((3, "a"), (3, "b"), (4, "c")):
        args = ["run", str(out / "np" / "bundle"), "-i", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / where)]
        assert main([*args, "--seed", str(seed)]) == 0
    a, b, c = (np.load(tmp_path / w / "out3.npy") for w in "abc")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, _runs(rlx.load(out / "np" / "bundle", seed=3), 1)[0][3])
    assert not np.array_equal(a, c)


def test_dynamic_shapes_draw_the_same_on_every_engine() -> None:
    """A draw whose shape follows a dynamic input: every engine specialises it and draws the same
    words (here: the dropout masks and the sampled indices, exact)."""
    from helpers import convert

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nn.functional.dropout(x, 0.5, True), torch.multinomial(x.abs() + 0.1, 2)

    dyn = (({0: torch.export.Dim("b", max=64)},),)
    engines = ["numpy"] + [b for b, mod in (("jax", "jax"), ("onnxruntime", "onnxruntime")) if _has(mod)]
    got = {}
    for engine in engines:
        model, _, _ = convert(fn, [torch.randn(4, 6)], dynamic_shapes=dyn, engine=engine)
        got[engine] = [[np.asarray(o) for o in model(np.ones((n, 6), np.float32))] for n in (3, 9)]
    for engine in engines[1:]:
        _assert_same(got["numpy"], got[engine], engine)
    assert [o[0].shape for o in got["numpy"]] == [(3, 6), (9, 6)]


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def test_debug_compares_what_does_not_depend_on_its_own_draw(converted) -> None:
    """`rlx debug`: nodes that draw are checked by shape and dtype; a node downstream of a draw is
    run on PyTorch's own draw (its local check) and compared by value; nothing diverges."""
    from rlx.app.debug import debug_dir

    out, _ = converted
    report = debug_dir(out / "np")
    assert report.first_divergent is None
    drawing = [n for n in report.nodes if n.op.startswith("aten.randn_like")]
    assert drawing and all(n.local.random and n.accumulated.random for n in drawing)
    downstream = [n for n in report.nodes if n.accumulated.random and not n.local.random]
    assert downstream and all(n.local.passed and n.local.cosine is not None for n in downstream)


def test_html_report_says_which_outputs_are_random(converted) -> None:
    from rlx.app.report import write_report

    out, _ = converted
    html = write_report(out / "np").read_text()
    assert html.count("random: shape/dtype checked, values not comparable") == 3
