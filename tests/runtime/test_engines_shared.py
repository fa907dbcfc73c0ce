"""What every compiled engine (JAX, onnxruntime, OpenVINO) does alike, one test per behaviour
parametrized over the engines: every example matches PyTorch and the numpy engine; conv and norm
modules in float32 and bfloat16; a dynamic program runs at many sizes, compiled as often as the
engine's design says; a loaded bundle honours ``threads``, returns the numpy engine's output
structure and refuses bad inputs and settings. An engine whose library is not installed is skipped.

Each engine's own behaviour (its table of Call cases, threads, precisions, errors) stays in its
own file: tests/runtime/test_jax_engine.py, test_ort_engine.py, test_openvino_engine.py.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rlx
from rlx.errors import UsageError
from rlx.formats.bundle import bind_weights
from rlx.runtime.model import Model

from helpers import (
    LEVELS,
    assert_arrays_match,
    assert_converts_and_matches,
    convert,
    convert_example,
    exported_example,
    load_example,
    rand,
)

EXAMPLES = ("mlp", "transformer", "cnn", "decoder_lm")
# engine → (the libraries it needs, the levels every example is checked at, how many compilations
# three input-shape bindings cost: one per binding, or one dynamic compiled model for all).
ENGINES = {
    "jax": (("jax",), LEVELS, 3),
    "onnxruntime": (("onnxruntime", "onnx"), LEVELS, 3),
    "openvino": (("openvino", "onnx"), ("high",), 1),
}


def _installed(engine: str) -> str:
    for library in ENGINES[engine][0]:
        pytest.importorskip(library)
    return engine


@pytest.mark.parametrize(
    "engine,name,level", [(e, n, lv) for e, (_, levels, _) in ENGINES.items() for n in EXAMPLES for lv in levels]
)
def test_examples_match_torch_and_numpy(engine, name, level):
    _installed(engine)
    exported, program = exported_example(name, level)
    weights = bind_weights(program, exported.weights, "weights")
    inputs = [exported.inputs[v.name] for v in program.inputs]
    model = Model(program, weights, engine=engine)
    assert (model.engine.name, model.precision) == (engine, "f32")
    got = model.run_flat(inputs)
    ref = Model(program, weights).run_flat(inputs)
    wants = [w for w in exported.outputs if w is not None]
    assert len(got) == len(wants)
    for k, (g, r, w) in enumerate(zip(got, ref, wants)):
        assert_arrays_match(g, w, f"{engine} {name}/{level} output {k} vs torch", rtol=1e-4, atol=1e-5)
        assert_arrays_match(g, r, f"{engine} {name}/{level} output {k} vs numpy", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_conv_and_norm_modules(engine, dtype):
    _installed(engine)
    from runtime.test_jax_engine import Convs, Norms  # (the module table the JAX cases use)

    x = rand((2, 4, 5, 5), dtype, seed=3)
    assert_converts_and_matches(Convs([dtype]), (x,), levels=("high",), engine=engine)
    assert_converts_and_matches(Norms([dtype]), (rand((2, 6, 4, 5), dtype),), levels=("high",), engine=engine)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_dynamic_shapes_compile_as_designed(engine):
    _installed(engine)
    module, (ids,) = load_example("decoder_lm").get_model()
    dim = torch.export.Dim
    model, program, _ = convert(
        module, (ids,), engine=engine, dynamic_shapes={"input_ids": {0: dim("batch", max=8), 1: dim("seq", max=64)}}
    )
    assert program.is_dynamic
    for batch, seq in [(1, 5), (3, 17), (2, 9), (3, 17), (1, 5)]:
        x = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
        got = model(x.numpy())
        with torch.no_grad():
            want = module(x).numpy()
        assert_arrays_match(got, want, f"{engine}: batch {batch} seq {seq}", rtol=1e-4, atol=1e-5)
    # Three bindings; the repeats reuse what their first run compiled.
    assert model.engine.compilations == ENGINES[engine][2]
    assert len(model._by_binding) == 3


_I64 = torch.int64


# Programs found wrong or refused on an ONNX engine by running the lowering tests on it (``pytest
# --engine``): (id, function, inputs). Ties, empty values and data-dependent sizes.
def _with_nan(x: torch.Tensor) -> torch.Tensor:
    """``x`` with NaN in about a third of its places and in all of its third row, ±inf once each."""
    x = torch.where(rand(x.shape, seed=3) > -1, x, float("nan"))
    x[2] = float("nan")
    x[0, 0], x[1, 1] = float("inf"), -float("inf")
    return x


class _AbsOfWeights(torch.nn.Module):
    """|c - w| of a 1-d weight and buffer: OpenVINO's CPU plugin computed such constant-only
    subgraphs without the Abs (|-w| came back as -w)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([-1.0, 0.5, 3.0, 5.0, -0.0]))
        self.register_buffer("k", torch.tensor([-4, 0, 2, 7, 1]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + (2 - self.w).abs() + (-self.w).abs().sqrt(), x.long() * (3 - self.k).abs()


GRAPH_CASES = [
    # empty values: an empty constant came back from OpenVINO as a scalar, a top-k of k = 0 and a
    # reduction of an empty constant failed to compile, an empty scan came back with a column
    ("empty_constant_output", lambda x: (x * 2, torch.zeros(0, 3), torch.ones(2, 0, dtype=_I64)), (rand((3, 4)),)),
    ("sum_of_empty_constant", lambda x: x + torch.zeros(0, 3).sum(0), (rand((2, 3)),)),
    ("top_k_of_none", lambda x: torch.topk(x, 0, dim=1), (rand((3, 4)),)),
    ("empty_scan_and_diagonal", lambda x: (x[:, :0].cumsum(1), torch.diagonal(x[:0])), (rand((3, 4)),)),
    # equal values keep their order: OpenVINO's TopK is unstable unless told
    ("stable_sort_of_ties", lambda x: torch.sort(x, stable=True), (rand((4, 20), _I64, low=0, high=2).float(),)),
    (
        "argsort_descending_ties",
        lambda x: torch.argsort(x, dim=1, descending=True, stable=True),
        (rand((3, 33), _I64, low=0, high=3),),
    ),
    # NaN sorts above every number (OpenVINO's TopK put it anywhere)
    (
        "nan_in_sorts",
        lambda x: (
            torch.sort(x, dim=1, stable=True),
            torch.sort(x.half(), dim=0, descending=True, stable=True),
            torch.topk(x, 4, 1).values,
            torch.topk(x, 3, 0, largest=False).values,
            torch.nanmedian(x[3:], 1),  # (the position PyTorch returns for a lane of NaNs is its sort's)
        ),
        (_with_nan(rand((6, 9))),),
    ),
    # sorts of long lanes with ties, NaN and ±inf (OpenVINO sorts them on unique integer keys, a
    # lane of 50257 in two passes: its stable TopK takes time quadratic in the lane)
    (
        "long_sorts_with_ties",
        lambda x, i: (
            torch.sort(x, dim=1, stable=True),
            torch.sort(x[:, :300], dim=0, descending=True, stable=True),
            torch.sort(i, dim=1, descending=True, stable=True),
            torch.topk(x, 2000, 1).values,
        ),
        (_with_nan(rand((3, 50257)).round(decimals=1)), rand((2, 500), _I64, low=-3, high=3)),
    ),
    # the max of a fully masked lane is -inf, its min +inf (OpenVINO's ReduceMax/Min gave the float
    # range's ends); a lane with NaN is NaN; the infinities made in the graph, from finite inputs
    (
        "extremes_of_masked_lanes",
        lambda x, keep: (
            x.masked_fill(~keep, -torch.inf).amax(1),
            x.masked_fill(~keep, torch.inf).amin((0, 2), keepdim=True),
            x.masked_fill(~keep, -torch.inf).half().max(2).values,
            x.masked_fill(~keep, torch.nan).masked_fill(keep, -torch.inf).amax(),
            (x.masked_fill(~keep, -torch.inf) * 0).amax(1),  # (-inf × 0: NaN beside -inf)
        ),
        (rand((3, 4, 5)), torch.tensor([[1, 0, 1, 0, 1], [0, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 1]]).bool()),
    ),
    # NaN made inside the model from finite inputs (log of a negative, 0 / 0) stays NaN through
    # exp, relu, clamp, elu, hardsigmoid and softmax (OpenVINO's kernels gave numbers), and a row
    # holding +inf, or only -inf, softmaxes to NaN
    (
        "nan_made_inside",
        lambda x, y: (
            x.log().relu(),
            x.log().exp(),
            x.log().clamp(-1, 1),
            F.elu(x.log()),
            F.hardsigmoid(x.log()),
            F.relu6(x.sqrt()),
            x.log().softmax(-1),
            (x / 0).softmax(-1),
            torch.log_softmax(x.log(), 0),
            # (a product of a flattened tensor runs on the N-d one: not past the NaN's select)
            (y.log().reshape(6, 4).relu() @ y[0].T).reshape(2, 3, 3),
        ),
        (
            torch.tensor([[0.5, -1.0, 2.0, 0.0], [1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 3.0, 0.5, 1.5]]),
            rand((2, 3, 4)),
        ),
    ),
    ("mode_of_integers", lambda x: torch.mode(x, 1), (torch.tensor([[1, 2, 2, 3], [5, 5, 1, 1], [-7, 4, -7, 4]]),)),
    # an index smaller than its source on another axis (OpenVINO dropped the crop)
    (
        "gather_smaller_index",
        lambda x, i: x.gather(-1, i[:2, :3]),
        (rand((4, 5, 6)), rand((4, 5, 1), _I64, low=0, high=5)),
    ),
    # integer averages round toward zero (OpenVINO's integer Div rounds to nearest)
    (
        "integer_average_pool",
        lambda x: (F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2, divisor_override=3)),
        (rand((2, 3, 7, 6), _I64, low=-50, high=49),),
    ),
    # integer max pooling, values and positions (onnxruntime's MaxPool takes floats and 8-bit integers)
    (
        "integer_max_pool",
        lambda x: (F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 2, 2, 0, 2, True, True)),
        (rand((2, 3, 7, 6), _I64, low=-50, high=49),),
    ),
    (
        "int32_max_pool_with_ties",
        lambda x: F.max_pool1d(x, 3, 1, 1, return_indices=True),
        (rand((2, 9), torch.int32, low=0, high=2),),
    ),
    # sizes that depend on the data, read from the value that has them
    (
        "nonzero_count",
        lambda x: torch.nonzero(x > 0).float().sum(0) * torch.nonzero(x > 0).shape[0],
        (rand((5, 4)),),
    ),
    ("where_as_indices", lambda x: torch.where(x > 0), (rand((3, 5)),)),
    # output padding past the stride, below the dilation (onnxruntime refused it at run time)
    (
        "conv_transpose_padded_past_stride",
        lambda x, w, b: F.conv_transpose2d(
            x, w, b, stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2, dilation=4
        ),
        (rand((2, 2, 4, 4)), rand((2, 2, 4, 5)), rand((4,))),
    ),
    # index arithmetic on literals is a constant (OpenVINO folded |2 - arange| wrongly: zeros)
    (
        "reflection_padding",
        lambda x: (F.pad(x, (1, 2, 0, 3), mode="reflect"), F.pad(x[0], (2, 1), mode="reflect")),
        (rand((1, 2, 5, 6)),),
    ),
    ("abs_of_weights", _AbsOfWeights(), (rand((3, 5)),)),
    # a product over an empty axis is zeros (OpenVINO failed to compile it)
    (
        "product_over_nothing",
        lambda a, b: (a @ b, (a.float() @ b.float()).sum(0)),
        (rand((5, 0), _I64), rand((0, 10), _I64)),
    ),
    # 0-d shifts stay 0-d (OpenVINO's reader made them [1])
    ("scalar_shifts", lambda a, b: (a << b, a >> b, -a >> b), (torch.tensor(5), torch.tensor(2))),
    # nothing to compute (onnxruntime refused to load a graph without outputs)
    ("no_outputs", lambda x: torch.broadcast_shapes((), ()), (rand((2,)),)),
    # (onnxruntime has no boolean Where kernel)
    ("masked_select_of_booleans", torch.masked_select, (rand((3, 4), torch.bool), rand((3, 4), torch.bool, seed=1))),
]


@pytest.mark.parametrize("name,fn,inputs", GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_ties_empty_values_and_data_dependent_sizes(engine, name, fn, inputs):
    _installed(engine)
    # (OpenVINO's own graph, NaN inputs included: by default they would run on the numpy engine)
    options = {"check_finite": False} if engine == "openvino" else None
    assert_converts_and_matches(fn, inputs, levels=("high",), engine=engine, engine_options=options)


@pytest.fixture(scope="module")
def transformer_out(tmp_path_factory):
    out, _, inputs = convert_example(tmp_path_factory, "transformer")
    return out, [t.numpy() for t in inputs]


@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_threads_output_structure_and_errors(engine, transformer_out):
    _installed(engine)
    out, arrays = transformer_out
    model = rlx.load(out, engine=engine, threads=1)
    ref = rlx.load(out)
    assert model.engine.threads == 1 and ref.engine.name == "numpy"
    got, want = model(*arrays), ref(*arrays)
    assert type(got) is type(want)
    assert_arrays_match(got, want, f"{engine} transformer", rtol=1e-4, atol=1e-5)
    with pytest.raises(rlx.RlxError, match="has dtype"):
        model(arrays[0].astype(np.float64), arrays[1])
    with pytest.raises(UsageError, match="threads"):
        rlx.load(out, engine=engine, threads=0)
    # an option the engine does not take: one line naming it and the ones it does take
    with pytest.raises(UsageError, match=rf"^unknown {engine} engine option\(s\) bogus; it takes \w+") as e:
        rlx.load(out, engine=engine, engine_options={"bogus": 1})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.bool]
)
@pytest.mark.parametrize("case", ["finite", "huge", "nan", "inf", "-inf", "strided", "scalar", "empty"])
def test_inputs_checked_for_nan_and_inf_before_a_run(dtype, case):
    """The host check of the graph inputs that alone can make a pooled value NaN (onnxruntime and
    OpenVINO): the same answer as torch.isfinite(x).all() for every dtype, where squares overflow
    (the fast dot product's only false alarm) and on strided, 0-d and empty arrays."""
    from rlx.runtime.onnx_graph import all_finite

    x = (rand((3, 4, 5), torch.float64, seed=8) * 10).to(dtype)
    if case == "huge":
        x = x * (1e30 if dtype in (torch.float32, torch.float64, torch.bfloat16) else 60)
    elif case in ("nan", "inf", "-inf") and dtype.is_floating_point:
        x[1, 2, 3] = float(case)
    elif case == "strided":
        x = x[:, ::2, 1:]
    elif case == "scalar":
        x = x[0, 0, 0]
    elif case == "empty":
        x = x[:0]
    arr = x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if dtype == torch.bfloat16 else x.numpy()
    assert all_finite(arr) is bool(torch.isfinite(x).all())


class MaskedScale(torch.nn.Module):
    """A float batch, a boolean mask, a 0-d scale and integer positions: the input kinds an engine
    hands over (each as a tensor on the array's memory where it can)."""

    def forward(self, x, mask, scale, positions):
        picked = torch.where(mask, x * scale, -x)
        return picked.sum(-1) + positions.to(torch.float32), mask.logical_not()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_inputs_as_users_hand_them(engine, tmp_path):
    """Read-only (a memory-mapped .npy), strided, boolean, 0-d and integer inputs give PyTorch's
    answer, and no input is written to."""
    _installed(engine)
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(3, 4, generator=g), torch.rand(3, 4, generator=g) > 0.5, torch.tensor(1.5),
            torch.arange(3))  # fmt: skip
    out = tmp_path / "masked"
    rlx.from_torch(MaskedScale().eval(), args, out, verify=False)
    model = rlx.load(out, engine=engine)
    x = torch.randn(3, 4, generator=g)
    np.save(tmp_path / "x.npy", x.numpy())
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")  # (read-only)
    strided = np.asfortranarray(torch.rand(3, 4, generator=g).numpy() > 0.5)
    scale, positions = np.array(-2.0, dtype=np.float32), np.array([4, -1, 7])
    before = [np.array(a) for a in (mapped, strided, scale, positions)]
    got = model(mapped, strided, scale, positions)
    with torch.no_grad():
        want = MaskedScale()(x, torch.from_numpy(strided), torch.tensor(-2.0), torch.tensor([4, -1, 7]))
    assert [a.dtype for a in got] == [np.float32, np.bool_] and [a.shape for a in got] == [(3,), (3, 4)]
    np.testing.assert_allclose(got[0], want[0].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got[1], want[1].numpy())
    for a, b in zip((mapped, strided, scale, positions), before):
        np.testing.assert_array_equal(a, b)


class Lone(torch.nn.Module):
    def forward(self, x):
        return x * 2.0 + x.sum()


@pytest.mark.parametrize("kind", ["read-only", "fortran", "0-d"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_lone_input_as_users_hand_it(engine, kind, tmp_path):
    """A one-input model (OpenVINO hands it over as a lone tensor, not a dict) gives PyTorch's
    answer on a read-only, a Fortran-order and a 0-d input, and does not write to it."""
    _installed(engine)
    x = torch.randn(()) if kind == "0-d" else torch.randn(3, 4)
    rlx.from_torch(Lone().eval(), (x,), tmp_path / "lone", verify=False)
    model = rlx.load(tmp_path / "lone", engine=engine)
    arr = x.numpy()
    if kind == "read-only":
        np.save(tmp_path / "x.npy", arr)
        arr = np.load(tmp_path / "x.npy", mmap_mode="r")
    elif kind == "fortran":
        arr = np.asfortranarray(arr)
    before = np.array(arr)
    got = model(arr)
    want = Lone()(x).numpy()
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(arr, before)


def test_lowering_tests_run_on_the_engine_pytest_names(monkeypatch):
    """``pytest --engine E`` (tests/conftest.py) binds every program a test does not bind itself
    to E, and skips one that E refuses, with E's reason; a test naming its engine keeps it."""
    pytest.importorskip("onnxruntime")
    import helpers

    monkeypatch.setattr(helpers, "DEFAULT_ENGINE", "onnxruntime")
    x = torch.randn(3)
    model, _, _ = helpers.convert(lambda a: a * 2, (x,))
    assert model.engine.name == "onnxruntime"
    assert helpers.convert(lambda a: a * 2, (x,), engine="numpy")[0].engine.name == "numpy"
    with pytest.raises(pytest.skip.Exception, match=r"^onnxruntime refuses this program: .*Binary copysign"):
        helpers.convert(lambda a: torch.copysign(a, -a), (x,))


@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_softplus_family_is_precise_in_the_tail(engine):
    """softplus, mish and logsigmoid (torch writes them with log1p(exp(x))) to float32's precision
    element by element, far into the tail where they are tiny: OpenVINO fused log(exp(x) + 1)
    into its own SoftPlus, 7× off near x = -16 (absolute error 1e-6: only a relative check sees it)."""
    _installed(engine)
    x = torch.linspace(-30, 30, 6001)
    fns = (F.softplus, F.mish, lambda t: -F.logsigmoid(-t), lambda t: torch.log1p(torch.exp(t)))
    model, _, _ = convert(lambda t: tuple(f(t) for f in fns), (x,), engine=engine)
    for k, (got, f) in enumerate(zip(model(x.numpy()), fns)):
        want = f(x.double()).numpy()
        assert got.dtype == np.float32 and got.shape == want.shape
        rel = np.abs(got - want) / np.abs(want)
        assert rel.max() < 2e-6, (k, float(x[rel.argmax()]), float(rel.max()))
