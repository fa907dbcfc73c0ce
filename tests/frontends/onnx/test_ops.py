"""ONNX ops against onnxruntime, one row per ONNX semantic that differs from PyTorch's or numpy's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import assert_matches_ort, helper, model, run_rlx

R = np.random.default_rng(0)
F = R.standard_normal((2, 3, 4)).astype(np.float32)
IMG = R.standard_normal((1, 2, 6, 7)).astype(np.float32)
I_NUM = np.array([7, -7, 7, -7, 0], np.int64)
I_DEN = np.array([2, 2, -2, -2, 3], np.int64)


@dataclass
class Case:
    name: str
    nodes: list[Any]
    inputs: dict[str, np.ndarray]
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: tuple[str, ...] = ("y",)
    opset: int = 18

    def __str__(self) -> str:
        return self.name


def n(op: str, ins: list[str], outs: list[str] | None = None, **attrs: Any) -> Any:
    return helper.make_node(op, ins, outs or ["y"], **attrs)


CASES = [
    Case("div_int_truncates", [n("Div", ["a", "b"])], {"a": I_NUM, "b": I_DEN}),
    Case("mod_int_follows_divisor", [n("Mod", ["a", "b"])], {"a": I_NUM, "b": I_DEN}),
    Case("mod_fmod_follows_dividend", [n("Mod", ["a", "b"], fmod=1)], {"a": I_NUM, "b": I_DEN}),
    Case("add_broadcast", [n("Add", ["x", "b"])], {"x": F, "b": np.ones((3, 1), np.float32)}),
    Case("pow_float_int_exponent", [n("Pow", ["x", "e"])], {"x": F, "e": np.array(2, np.int64)}),
    Case(
        "gather_negative_indices", [n("Gather", ["x", "i"], axis=1)], {"x": F}, {"i": np.array([-1, 0, -3], np.int64)}
    ),
    Case(
        "gather_elements",
        [n("GatherElements", ["x", "i"], axis=2)],
        {"x": F},
        {"i": np.array(R.integers(-4, 4, (2, 3, 2)), np.int64)},
    ),  # fmt: skip
    Case(
        "slice_int_max_end",
        [n("Slice", ["x", "s", "e", "a"])],
        {"x": F},
        {"s": np.array([1], np.int64), "e": np.array([2**63 - 1], np.int64), "a": np.array([2], np.int64)},
    ),  # fmt: skip
    Case(
        "slice_negative_step",
        [n("Slice", ["x", "s", "e", "a", "t"])],
        {"x": F},
        {
            "s": np.array([-1], np.int64),
            "e": np.array([-(2**63)], np.int64),
            "a": np.array([2], np.int64),
            "t": np.array([-2], np.int64),
        },
    ),  # fmt: skip
    Case("reshape_zero_and_minus_one", [n("Reshape", ["x", "s"])], {"x": F}, {"s": np.array([0, -1], np.int64)}),
    Case(
        "reshape_allowzero_empty",
        [n("Reshape", ["x", "s"], allowzero=1)],
        {"x": np.zeros((0, 3), np.float32)},
        {"s": np.array([3, 0], np.int64)},
    ),  # fmt: skip
    Case("cast_float_to_int_truncates", [n("Cast", ["x"], to=7)], {"x": (F * 3).astype(np.float32)}),
    Case("cast_to_bool", [n("Cast", ["x"], to=9)], {"x": np.array([0.0, -0.5, 2.0, np.nan], np.float32)}),
    Case(
        "where_broadcast",
        [n("Greater", ["x", "z"], ["c"]), n("Where", ["c", "x", "z"])],
        {"x": F},
        {"z": np.array(0.0, np.float32)},
    ),  # fmt: skip
    Case(
        "clip_inputs",
        [n("Clip", ["x", "lo", "hi"])],
        {"x": F},
        {"lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)},
    ),
    Case("clip_opset6_attrs", [n("Clip", ["x"], min=-0.5, max=0.5)], {"x": F}, opset=7),
    Case("softmax_opset11_coerces_2d", [n("Softmax", ["x"], axis=1)], {"x": F}, opset=11),
    Case("softmax_opset13", [n("Softmax", ["x"], axis=1)], {"x": F}, opset=13),
    Case(
        "reduce_sum_axes_input", [n("ReduceSum", ["x", "a"], keepdims=0)], {"x": F}, {"a": np.array([-1, 0], np.int64)}
    ),
    Case("reduce_mean_attr_axes", [n("ReduceMean", ["x"], axes=[1])], {"x": F}, opset=13),
    Case("reduce_logsumexp", [n("ReduceLogSumExp", ["x"], keepdims=1)], {"x": F}),
    Case(
        "argmax_select_last",
        [n("ArgMax", ["x"], axis=0, select_last_index=1)],
        {"x": np.array([[1, 3], [3, 3]], np.float32)},
    ),
    Case(
        "conv_asymmetric_pads",
        [n("Conv", ["x", "w"], pads=[0, 1, 2, 1], strides=[2, 1])],
        {"x": IMG},
        {"w": R.standard_normal((3, 2, 3, 3)).astype(np.float32)},
    ),  # fmt: skip
    Case(
        "conv_same_upper_groups",
        [n("Conv", ["x", "w", "b"], auto_pad="SAME_UPPER", group=2, strides=[2, 2])],
        {"x": IMG},
        {"w": R.standard_normal((4, 1, 3, 3)).astype(np.float32), "b": np.arange(4, dtype=np.float32)},
    ),  # fmt: skip
    Case(
        "conv_transpose",
        [n("ConvTranspose", ["x", "w"], strides=[2, 2], pads=[1, 0, 0, 1], output_padding=[1, 1])],
        {"x": IMG},
        {"w": R.standard_normal((2, 3, 3, 3)).astype(np.float32)},
    ),  # fmt: skip
    Case(
        "maxpool_ceil_asymmetric",
        [n("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1], ceil_mode=1)],
        {"x": IMG},
    ),
    Case("avgpool_exclude_pad_uneven", [n("AveragePool", ["x"], kernel_shape=[3, 3], pads=[1, 0, 0, 1])], {"x": IMG}),
    Case("global_average_pool", [n("GlobalAveragePool", ["x"])], {"x": IMG}),
    Case(
        "batchnorm",
        [n("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)],
        {"x": IMG},
        {
            "s": np.array([1.5, 0.5], np.float32),
            "b": np.array([0.1, -0.1], np.float32),
            "m": np.array([0.2, 0.3], np.float32),
            "v": np.array([1.1, 0.9], np.float32),
        },
    ),  # fmt: skip
    Case(
        "layernorm_axis",
        [n("LayerNormalization", ["x", "s", "b"], axis=-2)],
        {"x": F},
        {"s": np.ones((3, 4), np.float32) * 2, "b": np.zeros((3, 4), np.float32)},
    ),  # fmt: skip
    Case(
        "instance_norm",
        [n("InstanceNormalization", ["x", "s", "b"])],
        {"x": IMG},
        {"s": np.array([1.0, 2.0], np.float32), "b": np.array([0.0, 1.0], np.float32)},
    ),  # fmt: skip
    Case(
        "gemm_trans_alpha_beta",
        [n("Gemm", ["a", "w", "c"], transB=1, alpha=0.5, beta=2.0)],
        {"a": R.standard_normal((3, 5)).astype(np.float32)},
        {"w": R.standard_normal((4, 5)).astype(np.float32), "c": np.arange(4, dtype=np.float32)},
    ),  # fmt: skip
    Case("matmul_batched_1d", [n("MatMul", ["x", "v"])], {"x": F}, {"v": np.arange(4, dtype=np.float32)}),
    Case(
        "resize_nearest_default",
        [n("Resize", ["x", "", "s"])],
        {"x": IMG},
        {"s": np.array([1, 1, 0.5, 1.5], np.float32)},
    ),
    Case(
        "resize_linear_align_corners",
        [n("Resize", ["x", "", "", "z"], mode="linear", coordinate_transformation_mode="align_corners")],
        {"x": IMG},
        {"z": np.array([1, 2, 9, 5], np.int64)},
    ),  # fmt: skip
    Case(
        "resize_cubic_half_pixel",
        [n("Resize", ["x", "", "s"], mode="cubic")],
        {"x": IMG},
        {"s": np.array([1, 1, 2, 2], np.float32)},
    ),  # fmt: skip
    Case(
        "pad_reflect", [n("Pad", ["x", "p"], mode="reflect")], {"x": F}, {"p": np.array([0, 1, 2, 0, 1, 3], np.int64)}
    ),
    Case("pad_edge", [n("Pad", ["x", "p"], mode="edge")], {"x": F}, {"p": np.array([0, 0, 2, 0, 1, 1], np.int64)}),
    Case(
        "split_outputs",
        [n("Split", ["x", "s"], ["a", "b"], axis=2)],
        {"x": F},
        {"s": np.array([1, 3], np.int64)},
        ("a", "b"),
    ),
    Case(
        "topk_values_indices",
        [n("TopK", ["x", "k"], ["v", "i"], axis=-1)],
        {"x": F},
        {"k": np.array([2], np.int64)},
        ("v", "i"),
    ),
    Case(
        "cumsum_exclusive_reverse",
        [n("CumSum", ["x", "a"], exclusive=1, reverse=1)],
        {"x": F},
        {"a": np.array(2, np.int64)},
    ),
    Case("tile", [n("Tile", ["x", "r"])], {"x": F}, {"r": np.array([1, 2, 3], np.int64)}),
    Case("transpose_default_perm", [n("Transpose", ["x"])], {"x": F}),
    Case(
        "depth_to_space_crd",
        [n("DepthToSpace", ["x"], blocksize=2, mode="CRD")],
        {"x": R.standard_normal((1, 8, 2, 3)).astype(np.float32)},
    ),
    Case(
        "expand_bidirectional",
        [n("Expand", ["x", "s"])],
        {"x": np.ones((3, 1), np.float32)},
        {"s": np.array([2, 1, 4], np.int64)},
    ),
    Case(
        "hardsigmoid_leaky_elu",
        [n("HardSigmoid", ["x"], ["h"]), n("LeakyRelu", ["h"], ["l"], alpha=0.3), n("Elu", ["l"], alpha=0.7)],
        {"x": F},
    ),
    Case("gelu_tanh", [n("Gelu", ["x"], approximate="tanh")], {"x": F}, opset=20),
    Case(
        "einsum_free_shape_chain",
        [n("Shape", ["x"], ["s"]), n("ConstantOfShape", ["s"], value=helper.make_tensor("v", 7, [1], [3]))],
        {"x": F},
    ),
    Case("trilu_upper_k", [n("Trilu", ["x", "k"], upper=1)], {"x": F}, {"k": np.array(1, np.int64)}),
    Case(
        "onehot",
        [n("OneHot", ["i", "d", "v"], axis=0)],
        {"i": np.array([0, 2, -1], np.int64)},
        {"d": np.array(4, np.int64), "v": np.array([0.0, 5.0], np.float32)},
    ),  # fmt: skip
    Case(
        "grid_sample_modes",
        [
            n("GridSample", ["x", "g"], ["y1"], mode="linear", padding_mode="border", align_corners=1),
            n("GridSample", ["x", "g"], ["y2"], mode="nearest", padding_mode="zeros"),
            n("GridSample", ["x", "g"], ["y3"], mode="cubic", padding_mode="reflection"),
        ],
        {"x": IMG},
        {"g": (R.random((1, 3, 5, 2)) * 2.4 - 1.2).astype(np.float32)},
        outputs=("y1", "y2", "y3"),
        opset=20,
    ),  # fmt: skip
    Case("lp_pool", [n("LpPool", ["x"], kernel_shape=[3, 2], p=3, strides=[2, 1], pads=[1, 0, 1, 1])], {"x": IMG}),
    Case(
        "avgpool_dilated_ceil",
        [
            n(
                "AveragePool",
                ["x"],
                kernel_shape=[2, 3],
                dilations=[2, 2],
                ceil_mode=1,
                strides=[2, 2],
                pads=[1, 1, 0, 1],
            )
        ],
        {"x": IMG},
        opset=19,
    ),  # fmt: skip
    Case(
        "avgpool_dilated_count_pad",
        [n("AveragePool", ["x"], kernel_shape=[3, 3], dilations=[2, 1], count_include_pad=1, pads=[1, 1, 1, 1])],
        {"x": IMG},
        opset=19,
    ),  # fmt: skip
    Case(
        "scatternd_max_min_mul",
        [
            n("ScatterND", ["x", "i", "u"], ["a"], reduction="max"),
            n("ScatterND", ["x", "i", "u"], ["b"], reduction="min"),
            n("ScatterND", ["x", "i", "u"], ["c"], reduction="mul"),
        ],
        {"x": F},
        {"i": np.array([[1, 2], [0, 0], [1, 2]], np.int64), "u": R.standard_normal((3, 4)).astype(np.float32)},
        outputs=("a", "b", "c"),
    ),  # fmt: skip
    Case(
        "reverse_sequence",
        [n("ReverseSequence", ["x", "l"], batch_axis=0, time_axis=1)],
        {"x": F},
        {"l": np.array([3, 1], np.int64)},
    ),  # fmt: skip
    Case(
        "bitshift_uint8",
        [n("BitShift", ["a", "s"], ["l"], direction="LEFT"), n("BitShift", ["a", "s"], ["r"], direction="RIGHT")],
        {"a": np.array([1, 200, 7, 3, 255], np.uint8)},
        {"s": np.array([3, 1, 2, 0, 7], np.uint8)},
        outputs=("l", "r"),
    ),  # fmt: skip
    Case(
        "tensor_scatter_circular",
        [n("TensorScatter", ["c", "u", "w"], mode="circular")],
        {"c": np.zeros((2, 3, 4, 5), np.float32), "u": R.standard_normal((2, 3, 2, 5)).astype(np.float32)},
        {"w": np.array([3, 1], np.int64)},
        opset=24,
    ),  # fmt: skip
    Case(
        "maxpool_indices_then_unpool",
        [
            n("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
            n("MaxUnpool", ["p", "i", "s"], kernel_shape=[2, 2], strides=[2, 2]),
        ],
        {"x": IMG[..., :6].copy()},
        {"s": np.array([1, 2, 7, 8], np.int64)},
        outputs=("i", "y"),
    ),  # fmt: skip
    Case(
        "maxpool_indices_padded_column_major",
        [n("MaxPool", ["x"], ["p", "i"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], storage_order=1)],
        {"x": IMG},
        outputs=("p", "i"),
    ),  # fmt: skip
    Case(
        "col2im_strided_padded",
        [n("Col2Im", ["x", "img", "blk"], strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2])],
        {"x": R.standard_normal((1, 2 * 6, 3 * 4)).astype(np.float32)},
        {"img": np.array([5, 7], np.int64), "blk": np.array([2, 3], np.int64)},
    ),  # fmt: skip
    Case(
        "batchnorm_training",
        [n("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1, momentum=0.8)],
        {"x": IMG},
        {
            "s": np.array([1.5, 0.5], np.float32),
            "b": np.array([0.1, -0.2], np.float32),
            "m": np.array([0.3, 0.1], np.float32),
            "v": np.array([1.2, 0.9], np.float32),
        },
        outputs=("y", "rm", "rv"),
        opset=15,
    ),  # fmt: skip
    Case("lpnorm_zero_vector", [n("LpNormalization", ["x"], axis=0)], {"x": np.array([[0, 3], [0, 4]], np.float32)}),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_onnxruntime(case: Case) -> None:
    m = model(case.nodes, case.inputs, case.outputs, case.inits, case.opset)
    got = assert_matches_ort(m, dict(case.inputs))
    assert all(g.size >= 0 for g in got)


def test_bitcast_reinterprets_bits():
    # onnxruntime has no BitCast kernel for every pair: numpy's view is the reference
    x = np.array([1.5, -0.0, np.inf, np.nan], np.float32)
    flags = np.array([True, False])
    nodes = [n("BitCast", ["x"], ["i"], to=6), n("BitCast", ["i"], ["f"], to=1), n("BitCast", ["b"], ["u"], to=2)]
    m = model(nodes, {"x": x, "b": flags}, ["i", "f", "u"], opset=26)
    i, f, u = run_rlx(m, {"x": x, "b": flags})
    np.testing.assert_array_equal(i, x.view(np.int32))
    assert i.dtype == np.int32 and f.dtype == np.float32 and u.dtype == np.uint8
    np.testing.assert_array_equal(f.view(np.int32), x.view(np.int32))
    np.testing.assert_array_equal(u, flags.view(np.uint8))
