"""Quantization ops, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import assert_matches_ort, helper, model

R = np.random.default_rng(5)
X = (R.standard_normal((2, 3, 4)) * 4).astype(np.float32)


@pytest.mark.parametrize("zp", [np.uint8(128), np.int8(-3), np.int16(100), None])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize_round_trip(zp, per_axis):
    scale = np.array([0.05, 0.1, 0.2], np.float32) if per_axis else np.array(0.07, np.float32)
    inits = {"s": scale}
    ins = ["x", "s"]
    if zp is not None:
        inits["z"] = np.full(scale.shape, zp, type(zp))
        ins.append("z")
    nodes = [
        helper.make_node("QuantizeLinear", ins, ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", *ins[1:]], ["y"], axis=1),
    ]
    m = model(nodes, {"x": X}, ["q", "y"], inits, opset=21)
    got = assert_matches_ort(m, {"x": X})
    assert got[0].dtype == (np.dtype(type(zp)) if zp is not None else np.uint8)


def test_blocked_quantization():
    scale = (R.random((2, 3, 2)) + 0.1).astype(np.float32)
    m = model(
        [helper.make_node("QuantizeLinear", ["x", "s"], ["y"], axis=2, block_size=2)],
        {"x": X},
        ["y"],
        {"s": scale},
        opset=21,
    )
    assert_matches_ort(m, {"x": X})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul_and_matmul_integer(dtype):
    info = np.iinfo(dtype)
    a = R.integers(info.min, info.max, (3, 4)).astype(dtype)
    b = R.integers(info.min, info.max, (4, 5)).astype(dtype)
    zp = {"az": np.array(3, dtype), "bz": np.array(5, dtype), "yz": np.array(7, dtype)}
    scales = {"as": np.array(0.02, np.float32), "bs": np.array(0.03, np.float32), "ys": np.array(0.5, np.float32)}
    nodes = [
        helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["q"]),
        helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["i"]),
    ]
    m = model(nodes, {"a": a, "b": b}, ["q", "i"], {**zp, **scales})
    got = assert_matches_ort(m, {"a": a, "b": b})
    assert got[1].dtype == np.int32


def test_conv_integer_and_qlinear_conv():
    x = R.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = R.integers(0, 255, (3, 2, 3, 3)).astype(np.uint8)
    inits = {"w": w, "xz": np.array(10, np.uint8), "wz": np.array(120, np.uint8),
             "xs": np.array(0.01, np.float32), "ws": np.array([0.02, 0.03, 0.04], np.float32),
             "ys": np.array(2.0, np.float32), "yz": np.array(9, np.uint8), "wz3": np.array([120, 120, 120], np.uint8)}  # fmt: skip
    nodes = [
        helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["i"], pads=[1, 1, 1, 1]),
        helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz3", "ys", "yz"], ["q"], strides=[2, 2]),
    ]
    m = model(nodes, {"x": x}, ["i", "q"], inits, opset=10)
    assert_matches_ort(m, {"x": x})
