"""The OpenVINO engine (``engine="openvino"``: rlx's ONNX emission read by OpenVINO from memory,
weights as shared constants) against PyTorch.

The table of cases of the JAX and onnxruntime engines (every core Call in a real lowered program:
values, shapes, dtypes and NaN/inf), less the known mismatches below; precisions and their
refusals; errors; and that nothing imports openvino unless the engine is asked for. The examples,
conv/norm modules, a dynamic program compiled once and threads: tests/runtime/test_engines_shared.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import rlx
from rlx.errors import UsageError
from rlx.runtime.engines import supported_precisions

from helpers import (
    GroupedConv,
    SmallConvNet,
    assert_converts_and_matches,
    block_imports,
    convert,
    convert_example,
    pooling_specials,
    rand,
)

pytest.importorskip("openvino")
pytest.importorskip("onnx")
from rlx.runtime.openvino_engine import executor  # noqa: E402
from runtime.test_jax_engine import CASES, _params, check_case  # noqa: E402

F32 = torch.float32

# Known mismatches: case of the shared table → why OpenVINO's CPU plugin differs from PyTorch there
# (measured with OpenVINO 2026.4; the variants named fail, the case's others pass).
NAN_DROPPED = "OpenVINO's CPU kernels drop NaN (its JIT max/min and exp give a number for a NaN input)"
F64_AS_F32 = "OpenVINO's CPU plugin computes float64 in float32 (float32 rounding, overflow at float32's range)"
KNOWN = {
    "unary-f32": NAN_DROPPED + ": exp, expm1, relu, relu6, hardsigmoid, elu, selu, tanh-GELU of NaN",
    "unary-half": NAN_DROPPED + ": exp and tanh-GELU of NaN",
    "select-cast-produce": NAN_DROPPED + ": clamp of NaN; " + F64_AS_F32 + " (float64 inf)",
    "reduce": F64_AS_F32 + " (the float32 and half variants match)",
    "softmax": NAN_DROPPED + ": softmax of a row holding NaN or inf",
    "pools": NAN_DROPPED + ": max pooling of a window holding NaN (plain pooling)",
    "unary-f64": F64_AS_F32,
    "unary-f64-all": F64_AS_F32 + " (the slow run of every unary op: exp and friends of NaN too)",
    "binary-f64-f16": F64_AS_F32 + " (the float16 variants match)",
    "linalg": F64_AS_F32 + " (float64 matmul)",
    "int64-beyond-int32": "OpenVINO's CPU plugin computes int64 in int32: values beyond 2**31 wrap",
}


def _ov_cases(known: bool):
    """The shared table (``known``: only its known mismatches, else every case, a known mismatch
    expected to fail: strict, so one that starts to match shows up, to be taken off the list)."""
    for name, calls, variants, inputs, dtypes, *rest in CASES:
        if known and name not in KNOWN:
            continue
        levels = rest[0] if rest else ("high",)
        marks = list(rest[1]) if len(rest) > 1 and isinstance(rest[1], (list, tuple)) else rest[1:2]
        if name in KNOWN and not known:
            marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=KNOWN[name]))
        yield (name, calls, variants, inputs, dtypes, levels, marks)


@pytest.mark.parametrize("name,calls,variants,inputs,dtypes,levels", _params(list(_ov_cases(known=False))))
def test_calls_match_torch(name, calls, variants, inputs, dtypes, levels):
    # OpenVINO's own graph on every input, NaN and inf included (check_finite=False)
    check_case("openvino", name, calls, variants, inputs, dtypes, levels, {"check_finite": False})


@pytest.mark.parametrize("name,calls,variants,inputs,dtypes,levels", _params(list(_ov_cases(known=True))))
def test_known_mismatches_hold_for_finite_inputs_only(name, calls, variants, inputs, dtypes, levels):
    """By default a call whose inputs hold NaN or inf runs on the numpy engine: the known
    mismatches of NaN and of float64's range are PyTorch's answers there (float64 rounding and
    int64 beyond int32, on finite inputs, still differ)."""
    if KNOWN[name].startswith(NAN_DROPPED) or name in ("binary-f64-f16", "reduce", "unary-f64", "unary-f64-all"):
        check_case("openvino", name, calls, variants, inputs, dtypes, levels)
    else:
        with pytest.raises(AssertionError):
            check_case("openvino", name, calls, variants, inputs, dtypes, levels)


@pytest.mark.parametrize(
    "name,fn",
    [
        ("right_shift", lambda a, b: a >> b),
        ("floor_divide", lambda a, b: torch.div(a, b + 1, rounding_mode="floor")),
        ("remainder", lambda a, b: torch.remainder(a, b + 1)),
    ],
)
def test_int32_division_is_exact_below_2_to_24(name, fn):
    """A documented limit (docs/engines.md): OpenVINO's CPU plugin divides int32 through float32,
    so integer division, remainder and right shifts are exact below 2**24 and off by float32's
    rounding of the dividend above it (2**24 + 1 >> 0 gave 2**24; left shifts, products and sums
    stayed exact)."""
    a = torch.tensor(
        [100, -77, 2**24 - 1, -(2**24) + 5, 2**24 + 1, 2**30 + 3, -(2**24) - 3, 123456789], dtype=torch.int32
    )
    b = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3], dtype=torch.int32)
    model, _, _ = convert(fn, (a, b), engine="openvino")
    got, want = model(a.numpy(), b.numpy()), fn(a, b).numpy()
    assert got.dtype == want.dtype == np.int32 and got.shape == want.shape
    small = np.abs(a.numpy()) < 2**24
    np.testing.assert_array_equal(got[small], want[small], name)
    rounding = np.abs(a.numpy()[~small]).astype(np.float64) * 2.0**-23 + 1  # (one float32 ulp of the dividend)
    assert (np.abs(got[~small].astype(np.int64) - want[~small]) <= rounding).all(), (name, got, want)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("fn", ["sum", "amax", "amin"])
def test_integer_reductions_are_exact_below_2_to_24(fn, dtype):
    """A documented limit (docs/engines.md): OpenVINO's CPU plugin reduces integers through float32,
    so sums, maxima and minima are exact while values and partial sums stay below 2**24 and off
    by float32's rounding above (the max of 2**30 + 3 came back as 2**30)."""
    small = torch.tensor([[5, -7, 2**20 + 3, 11], [-(2**22) - 1, 9, 4, -3]], dtype=dtype)
    big = torch.tensor([[2**24 + 1, 2**30 + 3, -(2**24) - 3, 5], [2**24 + 3, 2**24 + 1, 7, -(2**30) - 1]], dtype=dtype)
    model, _, _ = convert(lambda x: getattr(x, fn)(1), (small,), engine="openvino")
    for x, exact in ((small, True), (big, False)):
        got, want = model(x.numpy()), getattr(x, fn)(1).numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        if exact:
            np.testing.assert_array_equal(got, want, fn)
        else:  # (float32's rounding of a value near 2**30: 64)
            assert (np.abs(got.astype(np.int64) - want) <= 128).all(), (fn, got, want)


# OpenVINO 2026.4's messages for a graph it could not read or compile (abridged) → rlx's one line
OV_MESSAGES = [
    (
        "Exception from src/inference/src/cpp/core.cpp:105:\nCheck 'false' failed at src/frontends/common_translators/"
        "src/unconverted_ops_report.cpp:151:\nFrontEnd API failed with OpConversionFailure:\n-- ReduceSum-21 with a "
        "message:\nWhile validating ONNX node '<Node(ReduceSum): sum_1:ReduceSum:1>': Check 'is_axis_valid(axis, r)' "
        "failed at src/core/src/validation_util.cpp:336:\nAxis 1 out of the tensor rank range [-1, 0].\n\nSummary:\n"
        "-- Conversion is failed for: ReduceSum-21\n\n",
        "Axis 1 out of the tensor rank range [-1, 0]. (at sum_1)",
    ),
    (
        "Exception from src/inference/src/cpp/core.cpp:117:\nException from src/inference/src/dev/plugin.cpp:54:\n"
        "Check 'top_k >= 1' failed at src/plugins/intel_cpu/src/nodes/topk.cpp:2087:\nTopK node with name "
        "'topk__0:TopK:0' K (0) must be greater or equal to 1.\n\n\n",
        "TopK node with name 'topk__0:TopK:0' K (0) must be greater or equal to 1.",
    ),
    ("a plain message", "a plain message"),
]


@pytest.mark.parametrize("message,reason", OV_MESSAGES)
def test_openvino_errors_say_the_reason_and_the_instruction(message, reason):
    assert executor.ov_reason(RuntimeError(message)) == reason


@pytest.mark.parametrize(
    "name,fn", [("matmul", lambda a, b: a @ b), ("pow", lambda a, b: a ** (b % 2 + 1))], ids=["matmul", "pow"]
)
def test_integer_products_and_powers_are_exact_below_2_to_24(name, fn):
    """A documented limit (docs/engines.md): OpenVINO's CPU plugin computes int32 matrix products and
    powers through float32 (4097·4099 + 3·2 came back as 16793610, not 16793609)."""
    small = torch.tensor([[40, -3], [5, 41]], dtype=torch.int32), torch.tensor([[39, 1], [2, -37]], dtype=torch.int32)
    big = (
        torch.tensor([[4097, 3], [5, 4099]], dtype=torch.int32),
        torch.tensor([[4099, 1], [2, 4097]], dtype=torch.int32),
    )
    model, _, _ = convert(fn, small, engine="openvino")
    for (a, b), exact in ((small, True), (big, False)):
        got, want = model(a.numpy(), b.numpy()), fn(a, b).numpy()
        assert got.dtype == want.dtype == np.int32 and got.shape == want.shape
        if exact:
            np.testing.assert_array_equal(got, want, name)
        else:  # (one float32 rounding of a value near 2**24 .. 2**37)
            assert (np.abs(got.astype(np.int64) - want) <= np.abs(want.astype(np.int64)) * 2.0**-23 + 1).all()


def test_random_draws_are_refused_in_one_line():
    """OpenVINO computes rlx's generator (unsigned 32-bit integer arithmetic) wrongly: torch.rand
    drew from [-0.5, 0.5) there. The engine refuses a program that draws, in one line; onnxruntime
    runs the same graph right."""
    x = torch.zeros(1000)
    with pytest.raises(UsageError) as refused:
        convert(lambda t: t + torch.rand(1000), (x,), engine="openvino")
    message = str(refused.value)
    assert "\n" not in message and "draws random numbers" in message and "engine='numpy'" in message
    drawn = convert(lambda t: t + torch.rand(1000), (x,), engine="onnxruntime")[0](x.numpy())
    assert drawn.dtype == np.float32 and 0.0 <= drawn.min() and drawn.max() < 1.0 and 0.4 < drawn.mean() < 0.6


def test_determinants_are_refused_in_one_line():
    """OpenVINO's ONNX reader has no Det (it failed to read the graph with a pointer to its
    extension documentation); onnxruntime computes it."""
    x = rand((2, 3, 3))
    with pytest.raises(UsageError) as refused:
        convert(torch.linalg.det, (x,), engine="openvino")
    message = str(refused.value)
    assert "\n" not in message and "determinant" in message and "engine='numpy'" in message
    got = convert(torch.linalg.det, (x,), engine="onnxruntime")[0](x.numpy())
    np.testing.assert_allclose(got, torch.linalg.det(x).numpy(), rtol=1e-5, atol=1e-6)


def test_known_mismatches_name_real_cases():
    names = {c[0] for c in CASES}
    assert set(KNOWN) <= names, sorted(set(KNOWN) - names)


def test_infinities_and_nan_through_a_linear_model():
    # NaN and ±inf through matmul, add and a non-NaN-dropping activation keep PyTorch's pattern.
    x = rand((4, 6), F32, seed=2)
    x[0, 1], x[2, 3], x[3, 0] = float("nan"), float("inf"), float("-inf")
    lin = torch.nn.Linear(6, 5)
    assert_converts_and_matches(lambda t: (lin(t), torch.tanh(t) * 2 - t, t.abs().sqrt()), (x,), levels=("high",),
                                engine="openvino")  # fmt: skip


@pytest.fixture(scope="module")
def transformer_out(tmp_path_factory):
    out, _, inputs = convert_example(tmp_path_factory, "transformer", engine="openvino")  # parity on OpenVINO
    return out, [t.numpy() for t in inputs]


@pytest.mark.parametrize("precision", ["bf16", "f16"])
def test_lower_precision_is_close_or_refused_in_one_line(transformer_out, precision):
    out, arrays = transformer_out
    if precision not in supported_precisions("openvino"):
        with pytest.raises(UsageError, match=rf"^OpenVINO cannot run {precision} on this CPU \(.*\): it lacks "):
            rlx.load(out, engine="openvino", precision=precision)
        return
    model = rlx.load(out, engine="openvino", precision=precision)
    assert model.precision == precision
    got, want = model(*arrays), rlx.load(out)(*arrays)
    g, w = np.ravel(got).astype(np.float64), np.ravel(want).astype(np.float64)
    cosine = g @ w / (np.linalg.norm(g) * np.linalg.norm(w))
    assert 0.999 < cosine < 1.0 and got.dtype == want.dtype  # close, and not float32's exact result
    assert np.abs(g - w).max() > 1e-5


@pytest.mark.parametrize(
    "engine,precision,message",
    [
        (
            "openvino",
            "int8",
            r"^the openvino engine has no int8 mode \(it runs f32, bf16, f16, int8-static\); "
            r"int8 runs on engine='onnxruntime'$",
        ),
        ("numpy", "bf16", r"^the numpy engine has no bf16 mode \(it runs f32\); bf16 runs on engine='openvino'$"),
        ("onnxruntime", "f64", r"^unknown precision 'f64'; choose one of f32, bf16, f16, int8, int8-static$"),
    ],
)
def test_unsupported_precision_is_one_line(transformer_out, engine, precision, message):
    with pytest.raises(UsageError, match=message):
        rlx.load(transformer_out[0], engine=engine, precision=precision)


def test_sorts_run_unstable_top_ks_on_unique_keys():
    """OpenVINO's stable TopK takes time quadratic in the lane (7.8 s to sort 50257 values): a
    sort of a long lane orders its ties by position on unique integer keys, a top-k by any tie
    order (as PyTorch's), so both run unstable TopKs; a short lane's sort stays one stable TopK."""
    x = rand((2, 3000), seed=5).round(decimals=1)  # (ties)
    x[0, :7] = torch.tensor([float("nan"), float("inf"), -float("inf"), float("nan"), 0.0, -0.0, float("inf")])
    fn = lambda x: (torch.topk(x, 5, 1), torch.sort(x, dim=1, stable=True), torch.sort(x[:, :40], dim=1, stable=True))  # noqa: E731
    model, program, _ = convert(fn, (x,), engine="openvino", engine_options={"check_finite": False})
    (values, positions), *sorts = model(x.numpy())
    (want_values, _), *want_sorts = fn(x)
    np.testing.assert_array_equal(values, want_values.numpy())
    np.testing.assert_array_equal(np.take_along_axis(x.numpy(), positions, 1), values)  # (any of the tied)
    for (sorted_values, order), (want_sorted, want_order) in zip(sorts, want_sorts):
        np.testing.assert_array_equal(sorted_values, want_sorted.numpy())
        np.testing.assert_array_equal(order, want_order.numpy())
    ov_model, _ = model.engine.ov_model(program)
    stable = [op.get_attributes()["stable"] for op in ov_model.get_ordered_ops() if op.get_type_name() == "TopK"]
    assert sorted(stable) == [False] * 5 + [True], stable  # (a short sort takes its candidates stably)


def test_nan_inputs_run_on_the_numpy_engine_unless_told(transformer_out):
    out, arrays = transformer_out
    x = arrays[0].copy()
    if x.dtype.kind != "f":
        pytest.skip("the transformer example takes no float input")
    x.flat[3] = np.nan
    default, unchecked = (rlx.load(out, engine="openvino", engine_options=o) for o in ({}, {"check_finite": False}))
    want = rlx.load(out)(x, *arrays[1:])
    got = default(x, *arrays[1:])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert default.executor_for([x, *arrays[1:]])._on_numpy is not None
    unchecked(x, *arrays[1:])
    assert unchecked.executor_for([x, *arrays[1:]])._on_numpy is None
    with pytest.raises(UsageError, match="^check_finite must be True or False"):
        rlx.load(out, engine="openvino", engine_options={"check_finite": "yes"})


def test_cli_run_engine_openvino(transformer_out, tmp_path, capsys):
    from rlx.cli import main

    out, arrays = transformer_out
    for k, a in enumerate(arrays):
        np.save(tmp_path / f"in{k}.npy", a)
    names = rlx.load(out).input_names
    flags = [f"--input={n}={tmp_path / f'in{k}.npy'}" for k, n in enumerate(names)]
    assert main(["run", str(out), "--engine", "openvino", *flags, "-o", str(tmp_path / "o")]) == 0
    assert "out0: shape [2, 8, 64] dtype float32" in capsys.readouterr().out
    want = rlx.load(out)(*arrays)
    np.testing.assert_allclose(
        np.load(tmp_path / "o" / "out0.npy"), np.ravel(want).reshape(2, 8, 64), rtol=1e-4, atol=1e-5
    )


def test_a_binding_that_takes_other_arguments_falls_back_to_the_public_call(transformer_out):
    """The engine calls OpenVINO's binding-level infer; where a version's takes other arguments
    (TypeError), the executor switches to the public call for good, with the same answer."""
    out, inputs = transformer_out
    model = rlx.load(out, engine="openvino")
    want = model(*inputs)
    executor = model.executor_for(list(inputs))
    calls = []

    def other_signature(*args):
        calls.append(len(args))
        raise TypeError("incompatible function arguments")

    executor._binding_infer = other_signature
    got = model(*inputs)
    assert calls == [4] and executor._binding_infer is None
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(model(*inputs), want)
    assert calls == [4]


def test_openvino_is_imported_only_when_asked_for(transformer_out):
    out, arrays = transformer_out
    script = block_imports("openvino") + textwrap.dedent(
        f"""
        import numpy as np
        import rlx
        from rlx.cli import main
        model = rlx.load({str(out)!r})  # the numpy engine never imports openvino
        assert "openvino" not in sys.modules
        try:
            rlx.load({str(out)!r}, engine="openvino")
            raise SystemExit("no error")
        except rlx.RlxError as e:
            assert str(e) == "the openvino engine needs openvino: pip install 'rlx[openvino]'", str(e)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_state_and_inputs_updated_in_place(tmp_path):
    from runtime.test_state import Bump, RingCache, _steps, _torch_run

    rlx.from_torch(RingCache(), _steps(1)[0], tmp_path / "ring")
    model = rlx.load(tmp_path / "ring", engine="openvino")
    for k, ((x, p), want) in enumerate(zip(_steps(8), _torch_run(8))):
        np.testing.assert_allclose(model(x.numpy(), p.numpy()), want, rtol=1e-6, err_msg=f"step {k}")
    assert int(model.state["b_steps"]) == 8
    model.reset()
    np.testing.assert_allclose(model(*[t.numpy() for t in _steps(1)[0]]), _torch_run(1)[0], rtol=1e-6)

    rlx.from_torch(Bump(), (torch.ones(3), torch.arange(3.0)), tmp_path / "bump")
    x = np.ones(3, np.float32)
    doubled, total = rlx.load(tmp_path / "bump", engine="openvino")(x, np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(x, [1, 2, 3])  # written back, as PyTorch's in-place add would
    np.testing.assert_array_equal(doubled, [2, 4, 6])
    assert float(total) == 3.0


class Pools(torch.nn.Module):
    """Max pooling with overlapping padded windows, ceil mode and 1-d, after a NaN-keeping scale
    (OpenVINO's ReLU drops NaN: see KNOWN)."""

    def forward(self, x):
        y = x * 2
        return (
            torch.nn.functional.max_pool2d(y, 2),
            torch.nn.functional.max_pool2d(y, 3, stride=2, padding=1),
            torch.nn.functional.max_pool2d(y, 2, stride=2, ceil_mode=True),
            torch.nn.functional.max_pool1d(y.flatten(2), 4),
        )


class DividedPools(Pools):
    """``Pools``, and a pooled quotient: a NaN the image's finiteness does not rule out (0 / 0)."""

    def forward(self, x):
        return (*super().forward(x), torch.nn.functional.max_pool2d(x / x.flip(-1), 2))


@pytest.mark.parametrize("case", ["finite", "nan", "inf"])
def test_max_pool_is_plain_and_checked(case, tmp_path):
    x = rand((2, 3, 9, 9), F32, seed=4)
    rlx.from_torch(DividedPools(), (x,), tmp_path / "pools")
    model = rlx.load(tmp_path / "pools", engine="openvino")
    inputs = pooling_specials(x, case)
    got = model(inputs.numpy())
    with torch.no_grad():
        want = DividedPools()(inputs)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, atol=0, err_msg=f"{case} pool {k}")
        assert g.dtype == np.float32 and g.shape == tuple(w.shape)
    executor = model.executor_for([inputs.numpy()])
    # The plain-MaxPool model ran alone unless the image or a pooled value held NaN or inf; then
    # the numpy engine ran the call. The quotient is checked in the graph, the image before the run.
    assert executor._checked and executor._finite_inputs == (0,)
    assert (executor._on_numpy is not None) == (case != "finite")
    if case != "finite":
        assert type(executor._on_numpy).__module__.startswith("rlx.runtime.numpy_engine")


def test_max_pool_at_f16_is_plain(tmp_path):
    # float16 would overflow the check's sum on ordinary activations (every run flagged, run twice),
    # and OpenVINO's f16 turns the NaN mask's constant into 65504: plain MaxPool, one run
    if "f16" not in supported_precisions("openvino"):
        pytest.skip("this CPU has no float16 inference for OpenVINO")
    x = rand((2, 3, 9, 9), F32, seed=4) * 300  # finite, summing past float16's range
    rlx.from_torch(Pools(), (x,), tmp_path / "pools")
    model = rlx.load(tmp_path / "pools", engine="openvino", precision="f16")
    got = model(x.numpy())
    with torch.no_grad():
        want = Pools()(x)
    for g, w in zip(got, want):
        assert g.dtype == np.float32 and g.shape == tuple(w.shape)
        np.testing.assert_allclose(g, w.numpy(), rtol=2e-3, atol=0)
    executor = model.executor_for([x.numpy()])
    assert not executor._checked and executor._finite_inputs == (0,) and executor._on_numpy is None


def test_int8_static_runs_quantized_kernels(tmp_path):
    """int8-static on OpenVINO: onnxruntime's QDQ graph with the bundle's calibration, run by the
    CPU plugin as int8 kernels, per input shape of a dynamic model; close to PyTorch, not float32's
    answer; inputs holding NaN or inf run on the numpy engine, with PyTorch's answer (quantizing
    would make NaN a number, and OpenVINO's ReLU drops NaN: see KNOWN)."""
    pytest.importorskip("onnxruntime")
    from torch.export import Dim

    from rlx.formats.bundle import read_bundle
    from rlx.formats.layout import CALIBRATION_FILE
    from rlx.runtime.engines import calibrate

    if "int8-static" not in supported_precisions("openvino"):
        pytest.skip("OpenVINO has no int8 on this CPU")
    module = SmallConvNet().eval()
    out = tmp_path / "cnn"
    rlx.from_torch(module, (torch.randn(2, 3, 16, 16),), out, dynamic_shapes=({0: Dim("batch", max=64)},))
    with pytest.raises(UsageError, match=r"^int8-static needs the activation ranges of a calibration run \(no "):
        rlx.load(out, engine="openvino", precision="int8-static")
    program, weights, _ = read_bundle(out / "bundle")
    calibration = out / "bundle" / CALIBRATION_FILE
    calibrate(program, weights, [[torch.randn(2, 3, 16, 16).numpy()] for _ in range(8)], calibration)
    model = rlx.load(out, engine="openvino", precision="int8-static", engine_options={"calibration": calibration})
    f32 = rlx.load(out, engine="openvino")
    for batch in (2, 5):
        x = torch.randn(batch, 3, 16, 16)
        with torch.no_grad():
            want = module(x).numpy()
        got = model(x.numpy())
        assert got.shape == want.shape and got.dtype == np.float32
        cosine = float(np.ravel(got) @ np.ravel(want) / (np.linalg.norm(got) * np.linalg.norm(want)))
        assert cosine > 0.999 and np.abs(got - f32(x.numpy())).max() > 1e-4  # close; quantized
        runtime = model.executor_for([x.numpy()])._compiled.get_runtime_model()
        kinds = {op.get_rt_info()["runtimePrecision"].astype(str) for op in runtime.get_ordered_ops()}
        assert {"u8", "i8"} & kinds, kinds  # int8 kernels ran
    x = torch.randn(3, 3, 16, 16)
    x[0, 1, 2, 3], x[1, 0, 5, 5] = float("nan"), float("inf")
    with torch.no_grad():
        want = module(x).numpy()
    got = model(x.numpy())
    assert np.isnan(want[:2]).any() and not np.isnan(want[2]).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class _AbsAndTopK(torch.nn.Module):
    """A product whose scale is |2 - w| of a weight crossing 2, and a top-k of its output."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.w = torch.nn.Parameter(torch.linspace(-1.0, 5.0, 16))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.linear(x) * (2 - self.w).abs()
        return y, torch.topk(y, 3, 1).indices


def test_int8_static_keeps_abs_of_weights_and_runs_top_k_unstable(tmp_path):
    """The int8-static graph is not constant-folded (that would undo its int8 weights): |2 - w|
    comes in as a constant (OpenVINO computed 2 - w), and a top-k's pass over the whole lane runs
    unstable, as on float32."""
    pytest.importorskip("onnxruntime")
    from rlx.formats.bundle import read_bundle
    from rlx.formats.layout import CALIBRATION_FILE
    from rlx.runtime.engines import calibrate

    if "int8-static" not in supported_precisions("openvino"):
        pytest.skip("OpenVINO has no int8 on this CPU")
    module = _AbsAndTopK().eval()
    out = tmp_path / "abs"
    rlx.from_torch(module, (torch.randn(4, 16),), out)
    program, weights, _ = read_bundle(out / "bundle")
    calibration = out / "bundle" / CALIBRATION_FILE
    calibrate(program, weights, [[torch.randn(4, 16).numpy()] for _ in range(8)], calibration)
    model = rlx.load(out, engine="openvino", precision="int8-static", engine_options={"calibration": calibration})
    x = torch.randn(4, 16)
    got, _ = model(x.numpy())
    with torch.no_grad():
        want = module(x)[0].numpy()
    cosine = float(np.ravel(got) @ np.ravel(want) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine > 0.99, cosine  # (with |2 - w| read as 2 - w, a third of the columns flip sign)
    ov_model, _ = model.engine.ov_model(program)
    stable = [op.get_attributes()["stable"] for op in ov_model.get_ordered_ops() if op.get_type_name() == "TopK"]
    assert sorted(stable) == [False, True], stable  # (the pass over the k candidates by is-NaN: stable)


@pytest.fixture(scope="module")
def grouped_conv(tmp_path_factory):
    x = torch.randn(2, 40, 64, generator=torch.Generator().manual_seed(0))
    out = tmp_path_factory.mktemp("grouped") / "grouped"
    rlx.from_torch(GroupedConv().eval(), (x,), out)
    return out, x.numpy()


def _runtime_kernels(model, x) -> dict[str, tuple[str, str]]:
    """{original node name: (kernel, precision)} that OpenVINO's CPU plugin runs the convolutions
    and products with (their nodes' names start with their instruction's)."""
    runtime = model.executor_for([x])._compiled.get_runtime_model()
    found = {}
    for op in runtime.get_ordered_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) in ("Convolution", "FullyConnected", "MatMul"):
            kernel = (info["primitiveType"].astype(str), info["runtimePrecision"].astype(str))
            found[op.get_friendly_name().split(":", 1)[0]] = kernel
    return found


def _runtime_precisions(model, x) -> dict[str, str]:
    """{original node name: the precision OpenVINO's CPU plugin runs it at} (``_runtime_kernels``)."""
    return {name: precision for name, (_, precision) in _runtime_kernels(model, x).items()}


@pytest.mark.parametrize("precision", ["bf16", "f16"])
def test_instructions_kept_in_float32_at_a_lower_precision(grouped_conv, precision, monkeypatch):
    """``float32=`` at bf16/f16 (mixed precision): the named instructions' nodes run in float32 (a
    runtime mark the IR reader sets), the others at the hint; at bf16, keeping the grouped
    convolution (where OpenVINO's bf16 loses the most) brings the answer far closer to float32's. (A node that
    OpenVINO's own fusions rebuild, such as a product with its bias, loses the mark: see the docs.)"""
    if precision not in supported_precisions("openvino"):
        pytest.skip(f"OpenVINO runs no {precision} here")
    monkeypatch.setattr(executor, "bf16_grouped_conv_is_wrong", lambda: False)  # (the lossy conv as it is)
    out, x = grouped_conv
    program = rlx.load(out).program
    conv = next(i.result for i in program.instrs if i.call.op == "Conv")
    f32 = rlx.load(out, engine="openvino")(x)
    low = rlx.load(out, engine="openvino", precision=precision)
    kept = rlx.load(out, engine="openvino", precision=precision, engine_options={"float32": [conv]})
    low_runs = _runtime_precisions(low, x)
    if low_runs[conv] == "f32":
        pytest.skip(f"OpenVINO runs this convolution in float32 at {precision} on this CPU anyway")
    runs = _runtime_precisions(kept, x)
    assert runs[conv] == "f32", runs
    others = {name: p for name, p in runs.items() if name != conv}
    assert others == {name: p for name, p in low_runs.items() if name != conv}  # (the product as before)
    low_error, kept_error = np.abs(low(x) - f32).max(), np.abs(kept(x) - f32).max()
    if precision == "bf16" and low_error > 1e-2:  # (where OpenVINO's bf16 grouped convolution is lossy, as on AMX)
        assert 0 < kept_error < low_error / 2, (kept_error, low_error)
    with pytest.raises(UsageError, match=r"^float32= keeps instructions out of a lower precision; it needs "
                                         r"precision='bf16' or 'f16' or 'int8-static'$"):  # fmt: skip
        rlx.load(out, engine="openvino", engine_options={"float32": [conv]})


class BiasAfterReshape(torch.nn.Module):
    """``x @ W.T + b`` on a sequence: the product on rows, viewed back, then the bias added."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w, self.b = torch.nn.Parameter(torch.randn(128, 64) / 8), torch.nn.Parameter(torch.randn(128))
        self.out = torch.nn.Linear(128, 16)

    def forward(self, x):
        return self.out(torch.relu(x @ self.w.t() + self.b))


def _two_linears() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16)).eval()


@pytest.mark.parametrize("precision", ["bf16", "f16"])
@pytest.mark.parametrize(
    "make, shape",
    [(_two_linears, (8, 64)), (_two_linears, (2, 5, 64)), (BiasAfterReshape, (2, 5, 64))],
    ids=["rows", "sequence", "bias-after-reshape"],
)
def test_linears_kept_in_float32_compute_in_float32(tmp_path, precision, make, shape):
    """A kept Linear (named by its product or by its bias add) runs as a FullyConnected in float32,
    though OpenVINO rebuilds the product by a transposed weight and fuses its bias (either would
    drop the mark); the other Linear runs as without the mark; with every instruction kept, each
    batch size of the one dynamic compilation gets float32's answer (output included)."""
    from torch.export import Dim

    if precision not in supported_precisions("openvino"):
        pytest.skip(f"OpenVINO runs no {precision} here")
    module = make().eval()
    out = tmp_path / "mlp"
    rlx.from_torch(module, (torch.randn(*shape),), out, dynamic_shapes=({0: Dim("n", max=64)},), verify=False)
    program = rlx.load(out).program
    products = [i.result for i in program.instrs if i.call.op == "MatMul"]
    adds = [i.result for i in program.instrs if i.call.op == "Binary"]  # (each Linear's bias add)
    assert len(products) == len(adds) == 2
    x = torch.randn(*shape).numpy()

    def fully_connected(model) -> list[str]:
        """The precision each Linear's FullyConnected node runs at, in order."""
        runs = _runtime_precisions(model, x)
        return [next(runs[n] for n in (p, a) if n in runs) for p, a in zip(products, adds)]

    low = rlx.load(out, engine="openvino", precision=precision)
    plain = fully_connected(low)
    if "f32" in plain:
        pytest.skip(f"OpenVINO runs these products in float32 at {precision} on this CPU anyway")
    for named in (adds[0], products[0]):
        kept = rlx.load(out, engine="openvino", precision=precision, engine_options={"float32": [named]})
        assert fully_connected(kept) == ["f32", plain[1]]
    f32 = rlx.load(out, engine="openvino")
    every = [i.result for i in program.instrs]
    kept = rlx.load(out, engine="openvino", precision=precision, engine_options={"float32": every})
    assert fully_connected(kept) == ["f32", "f32"]
    for n in (shape[0], 3):
        x = np.random.default_rng(n).standard_normal((n, *shape[1:])).astype(np.float32)
        want, got = f32(x), kept(x)
        assert got.shape == want.shape == (n, *shape[1:-1], 16) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert np.abs(low(x) - want).max() > 1e-4  # (the lower precision alone is visibly off)


def test_wrong_bf16_grouped_convolutions_run_in_float32(grouped_conv, monkeypatch):
    """OpenVINO's bf16 grouped convolution is probed once per process (``bf16_grouped_conv_is_wrong``);
    where it is wrong (oneDNN on AMX: cosine near 0 at 4 channels a group), a bf16 model computes
    its grouped convolutions in float32 and stays within tolerance; the probe agrees with what the
    model's own convolution does at bf16 without it."""
    from rlx.runtime.openvino_engine.hints import bf16_grouped_conv_is_wrong

    if "bf16" not in supported_precisions("openvino"):
        pytest.skip("OpenVINO runs no bf16 here")
    out, x = grouped_conv
    program = rlx.load(out).program
    conv = next(i.result for i in program.instrs if i.call.op == "Conv")
    f32 = rlx.load(out, engine="openvino")
    guarded = rlx.load(out, engine="openvino", precision="bf16")

    def cosine(a, b):
        a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    wrong = bf16_grouped_conv_is_wrong()
    with monkeypatch.context() as patched:
        patched.setattr(executor, "bf16_grouped_conv_is_wrong", lambda: False)
        raw = rlx.load(out, engine="openvino", precision="bf16")
        raw_runs = _runtime_precisions(raw, x)
        conv_raw = trace_conv(raw, program, out, x, conv)
    assert wrong == (cosine(conv_raw, trace_conv(f32, program, out, x, conv)) < 0.999)
    runs = _runtime_precisions(guarded, x)
    assert runs[conv] == ("f32" if wrong else raw_runs[conv])
    assert {n: p for n, p in runs.items() if n != conv} == {n: p for n, p in raw_runs.items() if n != conv}
    assert cosine(guarded(x), f32(x)) > 0.999


def test_convolutions_on_a_slow_bf16_kernel_compute_in_float32(tmp_path, monkeypatch):
    """Where OpenVINO's bf16 compilation runs a convolution on a fallback kernel (without AMX, the
    grouped one of a small wav2vec2 runs on im2col + gemm, 10-50x its float32 time), the engine
    compiles again with that convolution in float32; every other node runs as before, one
    compilation serves the later bindings, and the answer stays within tolerance of float32's.
    (Where the bf16 grouped convolution is wrong, on AMX, that guard has it in float32 already, with
    the slow-kernel guard or without: nothing changes.)"""
    from torch.export import Dim

    if "bf16" not in supported_precisions("openvino"):
        pytest.skip("OpenVINO runs no bf16 here")
    out = tmp_path / "positional"
    x = torch.randn(2, 40, 128, generator=torch.Generator().manual_seed(0))
    module = GroupedConv(channels=128, kernel=128, groups=16).eval()
    rlx.from_torch(module, (x,), out, dynamic_shapes=({0: Dim("n", max=8)},), verify=False)
    x = x.numpy()
    conv = next(i.result for i in rlx.load(out).program.instrs if i.call.op == "Conv")
    with monkeypatch.context() as patched:
        patched.setattr(executor, "SLOW_CONVOLUTION_KERNELS", ())  # (OpenVINO's own choice)
        raw = _runtime_kernels(rlx.load(out, engine="openvino", precision="bf16"), x)
    guarded = rlx.load(out, engine="openvino", precision="bf16")
    runs = _runtime_kernels(guarded, x)
    slow = raw[conv][0].startswith(executor.SLOW_CONVOLUTION_KERNELS) and raw[conv][1] != "f32"
    assert runs[conv][1] == ("f32" if slow else raw[conv][1]), (raw, runs)
    assert not runs[conv][0].startswith(executor.SLOW_CONVOLUTION_KERNELS) or runs[conv][1] == "f32"
    assert {n: k for n, k in runs.items() if n != conv} == {n: k for n, k in raw.items() if n != conv}
    engine = guarded.executor_for([x])._engine
    assert engine._slow_convolutions == ({conv} if slow else set())
    f32 = rlx.load(out, engine="openvino")
    for n in (2, 5):  # (a second batch size: the one dynamic compilation, conv still in float32)
        xs = np.random.default_rng(n).standard_normal((n, 40, 128)).astype(np.float32)
        got, want = guarded(xs), f32(xs)
        assert got.shape == want.shape == (n, 40, 64) and got.dtype == np.float32
        cosine = float(np.ravel(got) @ np.ravel(want) / (np.linalg.norm(got) * np.linalg.norm(want)))
        assert cosine > 0.999 and np.abs(got - want).max() < 5e-2, (cosine, np.abs(got - want).max())
    assert _runtime_kernels(guarded, xs)[conv] == runs[conv]


def test_a_compiled_model_that_cannot_show_its_kernels_loads_as_it_is(grouped_conv, monkeypatch):
    """The slow-kernel guard reads the compiled model's kernels; where OpenVINO cannot show them,
    the model loads and runs as compiled (the guard is for speed), with no error."""
    import openvino

    if "bf16" not in supported_precisions("openvino"):
        pytest.skip("OpenVINO runs no bf16 here")

    def refuse(self):
        raise RuntimeError("no runtime model here")

    out, x = grouped_conv
    want = rlx.load(out, engine="openvino")(x)
    monkeypatch.setattr(openvino.CompiledModel, "get_runtime_model", refuse)
    model = rlx.load(out, engine="openvino", precision="bf16")
    got = model(x)
    assert got.shape == want.shape and got.dtype == np.float32
    cosine = float(np.ravel(got) @ np.ravel(want) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine > 0.999
    assert model.executor_for([x])._engine._slow_convolutions == set()


def test_a_probe_that_cannot_run_keeps_grouped_convolutions_in_float32(monkeypatch):
    """Where OpenVINO cannot compile the bf16 probe, the verdict is "wrong" (grouped convolutions
    then compute in float32: slower, never a wrong answer), not an exception at load."""
    import openvino

    from rlx.runtime.openvino_engine import hints

    def refuse(self, *args, **kwargs):
        raise RuntimeError("no bf16 here")

    hints.bf16_grouped_conv_is_wrong.cache_clear()
    monkeypatch.setattr(openvino.Core, "compile_model", refuse)
    try:
        assert hints.bf16_grouped_conv_is_wrong() is True
    finally:
        hints.bf16_grouped_conv_is_wrong.cache_clear()  # (the real verdict for the tests after)


def trace_conv(model, program, out, x, conv):
    """The convolution's own value on ``model``'s engine and precision (traced as an output)."""
    from rlx.formats.bundle import read_bundle
    from rlx.runtime.engines import trace

    _, weights, _ = read_bundle(out / "bundle")
    return trace("openvino", program, weights, [x], [conv], model.precision)[conv]


def test_openvino_returns_every_intermediate_value(grouped_conv, monkeypatch):
    """``trace`` on OpenVINO (the per-node view of a lower precision): every float instruction it
    has a tensor for, float32's values at f32; at bf16 close to them, not equal."""
    from rlx.app.node_compare import run_whole
    from rlx.formats.bundle import read_bundle
    from rlx.runtime.engines import trace

    monkeypatch.setattr(executor, "bf16_grouped_conv_is_wrong", lambda: False)  # (bf16's own conv, even if wrong)
    out, x = grouped_conv
    program, weights, _ = read_bundle(out / "bundle")
    whole = run_whole(program, [x], weights)
    names = [i.result for i in whole.program.instrs if i.dtype == "f32"]
    traced = trace("openvino", program, weights, [x], names, "f32")
    assert len([n for n in names if n in traced]) >= len(names) // 2
    for name in names:
        if name in traced:
            np.testing.assert_allclose(traced[name], whole.values[name], rtol=1e-4, atol=1e-4, err_msg=name)
    if "bf16" in supported_precisions("openvino"):
        low = trace("openvino", program, weights, [x], names, "bf16")
        conv = next(i.result for i in program.instrs if i.call.op == "Conv")
        assert low[conv].shape == whole.values[conv].shape and not np.array_equal(low[conv], traced[conv])
