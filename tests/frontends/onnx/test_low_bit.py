"""Low-bit storage types (float8, float8e8m0, float4, int4, int2): dtype tokens, ONNX casts and
quantization against the ONNX reference bit for bit, packed initializers, and the one-line
refusals of arithmetic, the JAX engine, the ONNX emitter and safetensors names that do not exist."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from frontends.onnx.onnx_helpers import TensorProto, helper, model, run_rlx
from rlx.errors import RlxError, UnsupportedOpError, UsageError, WeightsError
from rlx.formats import safetensors_io
from rlx.ir import dtypes

ONNX_TYPE = {
    "f8e4m3fn": TensorProto.FLOAT8E4M3FN, "f8e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
    "f8e5m2": TensorProto.FLOAT8E5M2, "f8e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ, "f8e8m0": TensorProto.FLOAT8E8M0,
    "f4e2m1": TensorProto.FLOAT4E2M1, "i4": TensorProto.INT4, "u4": TensorProto.UINT4, "i2": TensorProto.INT2,
    "u2": TensorProto.UINT2,
}  # fmt: skip
# Specials, overflow, ties, tiny and negative values, and the float32 exponent edges.
X = np.array(
    [0.0, -0.0, 0.3, -1.7, 2.5, 3.5, 7.0, 17.0, -300.0, 449.0, 1e5, -1e9, 1e-9, np.inf, -np.inf, np.nan,
     0.0625, 1.5, 3.0, 2.0**127 * 1.5, 2.0**-127, float(np.finfo(np.float32).max)],
    np.float32,
)  # fmt: skip


def reference(m, feed):
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(o) for o in ReferenceEvaluator(m).run(None, feed)]


def assert_same_bits(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    assert got.tobytes() == want.tobytes(), f"{got} != {want}"


@pytest.mark.parametrize("tok", dtypes.LOW_BIT)
def test_tokens_round_trip_and_refuse_promotion(tok):
    dt = dtypes.to_numpy(tok)
    assert dtypes.from_numpy(dt) == tok
    assert dtypes.is_low_bit(tok) and not dtypes.is_float(tok) and not dtypes.is_int(tok)
    assert dtypes.check(tok) == tok
    with pytest.raises(UnsupportedOpError, match="cast to float32 first"):
        dtypes.promote_types(tok, "f32")


@pytest.mark.parametrize("source", [TensorProto.FLOAT, TensorProto.FLOAT16])
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("tok", dtypes.LOW_BIT)
def test_cast_there_and_back_matches_reference(tok, saturate, source):
    with np.errstate(over="ignore"):
        x = X if source == TensorProto.FLOAT else X.astype(np.float16)
    back = helper.make_node("Cast", ["y"], ["z"], to=source)
    cast = helper.make_node("Cast", ["x"], ["y"], to=ONNX_TYPE[tok], saturate=saturate)
    m = model([cast, back], {"x": (source, [X.size])}, ["y", "z"], opset=25)
    got, want = run_rlx(m, {"x": x}), reference(m, {"x": x})
    assert got[0].dtype == dtypes.to_numpy(tok)
    for g, w in zip(got, want):
        assert_same_bits(g, w)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_e8m0_round_modes(round_mode, saturate):
    cast = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate, round_mode=round_mode)
    m = model([cast], {"x": (TensorProto.FLOAT, [X.size])}, ["y"], opset=25)
    got, want = run_rlx(m, {"x": X}), reference(m, {"x": X})
    assert_same_bits(got[0], want[0])
    bits = got[0].view(np.uint8)
    # 2.5 = 1.25·2¹ and 3 = 1.5·2¹: "up" gives 2², "down" 2¹, "nearest" 2¹ and 2².
    assert bits[X.tolist().index(2.5)] == {"up": 129, "down": 128, "nearest": 128}[round_mode]
    assert bits[X.tolist().index(3.0)] == {"up": 129, "down": 128, "nearest": 129}[round_mode]
    assert bits[X.tolist().index(np.inf)] == 255 and bits[X.tolist().index(0.0625)] == 123


def test_constant_casts_fold_like_the_graph():
    # The same cast of a known array (folded while converting) and of an input (a Clamp + Cast).
    const = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.FLOAT, [X.size], X))
    nodes = [const, *(helper.make_node("Cast", [s], [f"{s}8"], to=TensorProto.FLOAT8E4M3FN) for s in ("c", "x"))]
    nodes += [helper.make_node("Cast", [s], [f"{s}m"], to=TensorProto.FLOAT8E8M0) for s in ("c", "x")]
    m = model(nodes, {"x": (TensorProto.FLOAT, [X.size])}, ["c8", "x8", "cm", "xm"], opset=25)
    c8, x8, cm, xm = run_rlx(m, {"x": X})
    assert_same_bits(c8, x8)
    assert_same_bits(cm, xm)
    assert float(x8[X.tolist().index(449.0)]) == 448.0  # saturated, not NaN
    assert np.isnan(float(x8[-7]))  # NaN stays NaN


@pytest.mark.parametrize("tok", ["i4", "u4", "i2", "u2", "f4e2m1", "f8e5m2"])
def test_packed_initializers_read(tok):
    values = np.array([0, 1, -1, 2, 1, 0, -2], np.float32)  # odd count: the last byte is half used
    if tok.startswith("u"):
        values = np.abs(values)
    if tok.endswith("2") and tok != "f8e5m2":
        values = np.clip(values, -2, 1 if tok == "i2" else 3)
    arr = values.astype(dtypes.to_numpy(tok))
    from onnx import numpy_helper

    init = numpy_helper.from_array(arr, "w")
    assert init.data_type == ONNX_TYPE[tok]
    nodes = [helper.make_node("Cast", ["w"], ["y"], to=TensorProto.FLOAT), helper.make_node("Add", ["y", "x"], ["z"])]
    m = model(nodes, {"x": np.zeros(7, np.float32)}, ["z"], {}, opset=25)
    m.graph.initializer.append(init)
    (got,) = run_rlx(m, {"x": np.zeros(7, np.float32)})
    np.testing.assert_array_equal(got, values)


@pytest.mark.parametrize("tok", ["i4", "u4", "i2", "u2", "u16", "f8e4m3fn", "f8e5m2", "f4e2m1"])
def test_quantize_dequantize_matches_reference(tok):
    x = (np.random.default_rng(3).standard_normal((3, 8)) * 6).astype(np.float32)
    zp = np.array([1, 0, 1], dtypes.to_numpy(tok)) if tok in ("i4", "u4", "u2", "u16") else None
    scale = np.array([0.5, 1.0, 2.0], np.float32)
    inits = {"s": scale, **({"z": zp} if zp is not None else {})}
    names = ["x", "s", *(["z"] if zp is not None else [])]
    attrs = {} if zp is not None else {"output_dtype": ONNX_TYPE.get(tok, TensorProto.UINT16)}
    nodes = [
        helper.make_node("QuantizeLinear", names, ["q"], axis=0, **attrs),
        helper.make_node("DequantizeLinear", ["q", *names[1:]], ["y"], axis=0),
    ]
    m = model(nodes, {"x": x}, ["q", "y"], {}, opset=25)
    from onnx import numpy_helper

    m.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in inits.items())
    got, want = run_rlx(m, {"x": x}), reference(m, {"x": x})
    assert got[0].dtype == dtypes.to_numpy(tok)
    for g, w in zip(got, want):
        assert_same_bits(g, w)


def test_arithmetic_on_low_bit_values_is_refused():
    m = model([helper.make_node("Add", ["x", "x"], ["y"])], {"x": (TensorProto.FLOAT8E4M3FN, [3])}, ["y"], opset=21)
    with pytest.raises(RlxError, match="f8e4m3fn") as e:
        run_rlx(m, {"x": np.zeros(3, ml_dtypes.float8_e4m3fn)})
    assert "\n" not in str(e.value)


def _cast_program():
    from rlx.app.onnx_convert import lower_graph
    from rlx.app.pipeline import finish_program
    from rlx.frontends.onnx import reader

    cast = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E5M2)
    m = model([cast], {"x": (TensorProto.FLOAT, [4])}, ["y"], opset=21)
    program, _ = lower_graph(reader.read(m, {"x": (4,)}))
    return finish_program(program)


def test_jax_engine_and_onnx_emitter_refuse_in_one_line():
    program = _cast_program()
    from rlx.exporters.onnx.build import check_coverage as onnx_coverage
    from rlx.exporters.onnx.registry import EmitError

    with pytest.raises(EmitError, match="f8e5m2"):
        onnx_coverage(program)
    pytest.importorskip("jax")
    from rlx.runtime.jax_engine.executor import check_coverage as jax_coverage

    with pytest.raises(UsageError, match="f8e5m2 values.*engine='numpy'"):
        jax_coverage(program)


def test_safetensors_float8_names_and_refusals(tmp_path):
    a = np.array([0.5, -448.0, np.nan], ml_dtypes.float8_e4m3fn)
    b = np.array([57344.0, -1.0], ml_dtypes.float8_e5m2)
    safetensors_io.write(tmp_path / "w.safetensors", {"a": a, "b": b})
    raw = (tmp_path / "w.safetensors").read_bytes()
    assert b'"F8_E4M3"' in raw and b'"F8_E5M2"' in raw
    back, _ = safetensors_io.read(tmp_path / "w.safetensors")
    assert_same_bits(back["a"], a)
    assert_same_bits(back["b"], b)
    with pytest.raises(WeightsError, match="i4, which safetensors has no name for"):
        safetensors_io.write(tmp_path / "x.safetensors", {"q": np.zeros(4, ml_dtypes.int4)})
