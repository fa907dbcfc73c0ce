"""The numpy engine's hand-written fast kernels against PyTorch and against float64 truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlx.ir import calls as C
from rlx.ir.program import Ref
from rlx.kernels.numpy.kernels import KERNELS
from rlx.kernels.numpy.namespace import gelu_float32
from rlx.runtime.numpy_engine import fused

from helpers import assert_arrays_match

SCALES = [0.01, 0.3, 1.0, 3.0, 8.0]


def _true_gelu(x: np.ndarray) -> np.ndarray:
    return np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64).tolist()])


@pytest.mark.parametrize("size", [7, 300, 5000])  # the per-element path and the polynomial one
@pytest.mark.parametrize("scale", SCALES)
def test_gelu_float32_is_within_a_few_ulps_of_the_true_gelu(size: int, scale: float) -> None:
    x = (torch.randn(size, generator=torch.Generator().manual_seed(size)) * scale).numpy()
    got = gelu_float32(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    truth = _true_gelu(x)
    ulp = np.spacing(np.abs(truth).astype(np.float32)).astype(np.float64)
    # x·½·(1 + erf) in float32 carries an error of about ulp(1)·|x|/2 from rounding 1 + erf, which
    # dominates where 1 + erf cancels (x < 0): the bound has that term and a few ulps of the result.
    bound = 4 * ulp + 1.2e-7 * np.abs(x)
    assert np.all(np.abs(got.astype(np.float64) - truth) <= bound)
    # PyTorch's float32 GELU is less accurate where 1 + erf cancels (about 1e-6 at x = -5).
    ref = torch.nn.functional.gelu(torch.from_numpy(x)).numpy().astype(np.float64)
    assert np.all(np.abs(got - ref) <= 8 * ulp + 3e-7 * np.abs(x))


@pytest.mark.parametrize("size", [8, 4096])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf·0 and x² overflow, as in PyTorch
def test_gelu_float32_special_values_and_in_place(size: int) -> None:
    specials = np.array([np.nan, -np.inf, -20.0, -0.0, 0.0, 1e30, -1e30, 12.0], np.float32)
    x = np.resize(specials, size)
    got = gelu_float32(x)
    ref = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, ref)
    # GELU(±0) = ±0 exactly (torch's AVX-512 kernel agrees; its AVX2 kernel returns +0 for -0, and
    # the two disagree on the sign of an underflowing negative tail, so signs are checked on zeros only).
    zero = x == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(x[zero]))
    buf = x.copy()
    assert fused._gelu(buf, buf) is buf
    np.testing.assert_array_equal(buf, got)


@pytest.mark.parametrize("size", [8, 4096])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf/inf, inf·0
def test_gelu_float32_positive_infinity(size: int, in_place: bool) -> None:
    # GELU(+inf) = +inf (the erf definition; this PyTorch build's vectorised kernel returns NaN):
    # the polynomial path computes NaN there (u = inf/inf) and puts +inf back, also when the
    # result overwrites its input, and also next to a NaN.
    x = (torch.randn(size, generator=torch.Generator().manual_seed(3)) * 3).numpy()
    x[[1, size // 2, size - 1]] = [np.inf, np.nan, np.inf]
    finite = np.isfinite(x)
    want = gelu_float32(np.where(finite, x, 0).astype(np.float32))
    got = gelu_float32(x, x) if in_place else gelu_float32(x)
    assert np.isposinf(got[[1, size - 1]]).all() and np.isnan(got[size // 2])
    np.testing.assert_array_equal(got[finite], want[finite])
    assert not np.isinf(gelu_float32(np.full(size, 1e30, np.float32))).any()


@pytest.mark.parametrize("layout", ["transposed", "sliced", "broadcast"])
@pytest.mark.parametrize("dest", ["new", "buffer", "in place"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf/inf, inf·0
def test_gelu_float32_of_views_is_the_contiguous_result(layout: str, dest: str) -> None:
    # A transposed view (SegFormer's GELU reads its conv's output through a permute) runs over its
    # buffer in memory order; other views on a contiguous copy. Same bits as the contiguous input.
    memory = (torch.randn(3, 40, 24, generator=torch.Generator().manual_seed(5)) * 3).numpy()
    memory[0, 1, 2], memory[1, 2, 3], memory[2, 3, 4] = np.inf, np.nan, -0.0
    x = {
        "transposed": memory.transpose(2, 0, 1),
        "sliced": memory[:, ::2, 1:],
        "broadcast": np.broadcast_to(memory[:1], memory.shape),
    }[layout]
    assert not x.flags.c_contiguous
    want = gelu_float32(np.ascontiguousarray(x))
    if dest == "in place" and layout == "broadcast":
        pytest.skip("a broadcast view is read-only")
    if dest == "in place":
        x = x.copy(order="K") if layout == "sliced" else x  # its own buffer, same layout
        out = x
    else:
        out = None if dest == "new" else np.empty(x.shape, np.float32)
    got = gelu_float32(x, out)
    assert got.shape == want.shape and got.dtype == np.float32
    assert out is None or got is out
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("fn", ["sigmoid", "silu"])
@pytest.mark.parametrize("scale", SCALES + [40.0])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # exp overflows at the far negative end
def test_sigmoid_and_silu_match_torch(fn: str, scale: float) -> None:
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 88.0, -88.0, -100.0, 1e30, -1e30], np.float32)
    x = np.concatenate([specials, (torch.randn(5000, generator=torch.Generator().manual_seed(7)) * scale).numpy()])
    ref = (torch.sigmoid if fn == "sigmoid" else torch.nn.functional.silu)(torch.from_numpy(x)).numpy()
    got = KERNELS["Unary"](C.Unary(fn, Ref("x")), x)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(got[np.isinf(x)], ref[np.isinf(x)])
    ok = ~np.isnan(ref) & np.isfinite(x)
    assert np.all(np.abs(got[ok] - ref[ok]) <= 4 * np.spacing(np.abs(ref[ok])))
    buf = x.copy()  # the executor's in-place form: the same values
    assert fused.FLOAT_UNARY[fn](buf, buf) is buf
    np.testing.assert_array_equal(buf, got)


@pytest.mark.parametrize("shape", [(3, 4, 7), (64, 4, 16), (32, 4, 100)])  # short rows from 4096 elements
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a row of -inf: -inf - -inf
def test_bound_softmax_matches_torch(shape, log) -> None:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(shape[-1])) * 3
    x[0, 1] = -math.inf  # a row with no finite entry: NaN, as in PyTorch
    x[1, 2, 3] = math.nan
    x[2, 0, : shape[-1] // 2] = -math.inf
    ref = (torch.log_softmax if log else torch.softmax)(x, -1).numpy()
    got = _bound(C.Softmax(Ref("x"), -1, log), ref, x.numpy())(x.numpy())
    assert got.dtype == np.float32 and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


ATTENTION_SHAPES = [  # q, k shapes: small scores (numpy's reductions) and large ones (pairwise halving)
    ((2, 3, 5, 8), (2, 3, 7, 8)),
    ((64, 2, 16, 16), (64, 2, 16, 16)),
    ((2, 4, 100, 32), (2, 4, 37, 32)),
]


@pytest.mark.parametrize("q_shape,k_shape", ATTENTION_SHAPES)
@pytest.mark.parametrize("mask_kind", [None, "bool", "float", "causal"])
# Peaked: scores spread over ±100 and more, so most weights fall below float32's normal range (subnormal or
# zero), as in a trained model's sharp attention.
@pytest.mark.parametrize("q_scale", [2.0, 20.0], ids=["spread", "peaked"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a query that attends nowhere: -inf - -inf
def test_float32_attention_matches_torch(q_shape, k_shape, mask_kind, q_scale) -> None:
    g = torch.Generator().manual_seed(q_shape[-2])
    q, k, v = (
        torch.randn(q_shape, generator=g) * q_scale,
        torch.randn(k_shape, generator=g),
        torch.randn(k_shape, generator=g),
    )
    big_l, big_s = q_shape[-2], k_shape[-2]
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(big_l, big_s, generator=g) > 0.3
        mask[1] = False  # a query that may attend nowhere: zeros
    elif mask_kind == "float":
        mask = torch.randn(1, 1, big_l, big_s, generator=g)
        mask[..., 0, : big_s // 2] = -math.inf
    causal = mask_kind == "causal"
    scale = 0.3
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask, is_causal=causal, scale=scale)
    call = C.Attention(Ref("q"), Ref("k"), Ref("v"), None if mask is None else Ref("m"), causal, scale, False)
    got = KERNELS["Attention"](call, q.numpy(), k.numpy(), v.numpy(), None if mask is None else mask.numpy())
    assert got.dtype == np.float32 and got.shape == ref.shape
    # A rounding of each score by ε·|score| (torch scales q and k before their product, rlx after)
    # moves the weights by as much: the tolerance grows with the largest score.
    largest_score = float((q @ k.transpose(-1, -2)).abs().max()) * scale
    np.testing.assert_allclose(got, ref.numpy(), rtol=2e-5, atol=2e-6 + 2e-7 * largest_score)
    if mask_kind == "bool":
        assert not got[..., 1, :].any()  # zeros for the query that attends nowhere, as PyTorch gives


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("mask_kind", [None, "float"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_attention_with_a_nonfinite_input_matches_torch(dtype, where, value, mask_kind) -> None:
    # One NaN or inf in Q, K or V reaches the outputs PyTorch's does (the normalisation runs on the
    # output, after the product with V: a NaN or inf there must not spread beyond its rows/columns),
    # with queries, keys and values given as strided views of one projection, as models give them.
    g = torch.Generator().manual_seed(7)
    qkv = torch.randn(2, 40, 3 * 4 * 16, generator=g, dtype=dtype)
    q, k, v = (t.reshape(2, 40, 4, 16).transpose(1, 2) for t in qkv.split(64, dim=-1))
    {"q": q, "k": k, "v": v}[where][1, 2, 5, 3] = value
    mask = None
    if mask_kind == "float":
        mask = torch.randn(1, 4, 40, 40, generator=g, dtype=dtype)
        mask[..., 7, :] = -math.inf  # a query that attends nowhere: zeros in both
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask, scale=0.25)
    call = C.Attention(Ref("q"), Ref("k"), Ref("v"), None if mask is None else Ref("m"), False, 0.25, False)
    got = KERNELS["Attention"](call, q.numpy(), k.numpy(), v.numpy(), None if mask is None else mask.numpy())
    assert_arrays_match(got, ref.numpy(), rtol=2e-5, atol=2e-6)


# ── bound fast paths: the same numbers as the generic kernel, and as PyTorch ──────────────────────
def _bound(call, result: np.ndarray, *operands: np.ndarray | None):
    """The executor's fast path for ``call`` on operands of these types (it must exist)."""
    args = tuple(None if o is None else fused.TensorType(o.shape, o.dtype) for o in operands)
    site = fused.Site(call, result.shape, result.dtype, args)
    fn = fused.BINDERS[call.op](site)
    assert fn is not None, f"no fast path bound for {call}"
    return fn


CONVS = [  # x shape, weight shape, stride, padding, dilation, groups
    ((1, 3, 9, 9), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 11, 10), (6, 2, 3, 2), (2, 1), (0, 2), (1, 2), 2),
    ((1, 3, 16, 16), (5, 3, 4, 4), (4, 4), (0, 0), (1, 1), 1),  # patchify
    ((2, 4, 6, 6), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), 4),  # depthwise
    ((1, 6, 5, 5), (3, 6, 1, 1), (1, 1), (0, 0), (1, 1), 1),  # pointwise
    ((2, 2, 12), (3, 2, 5), (3,), (2,), (2,), 1),  # 1-d
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,groups", CONVS)
def test_bound_conv_matches_generic_kernel_and_torch(
    x_shape, w_shape, stride, padding, dilation, groups, dtype
) -> None:
    g = torch.Generator().manual_seed(len(x_shape) + groups)
    x, w, b = torch.randn(x_shape, generator=g, dtype=dtype), torch.randn(w_shape, generator=g, dtype=dtype), \
        torch.randn(w_shape[0], generator=g, dtype=dtype)  # fmt: skip
    conv = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d}[len(x_shape)]
    ref = conv(x, w, b, stride, padding, dilation, groups).numpy()
    call = C.Conv(Ref("x"), Ref("w"), Ref("b"), stride, padding, dilation, groups, False, (0,) * len(stride))
    xs, ws, bs = x.numpy(), w.numpy(), b.numpy()
    generic = KERNELS["Conv"](call, xs, ws, bs)
    fast = _bound(call, ref, xs, ws, bs)(xs, ws, bs)
    np.testing.assert_array_equal(fast, generic)
    assert fast.shape == ref.shape and fast.dtype == ref.dtype
    np.testing.assert_allclose(
        fast, ref, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-5 if dtype == torch.float32 else 1e-12
    )


POOLS = [  # x shape, kernel, stride, padding, dilation, ceil_mode
    ((1, 2, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((2, 3, 9, 7), (3, 3), (2, 2), (1, 1), (1, 1), True),
    ((1, 2, 10, 10), (3, 2), (1, 2), (1, 0), (2, 1), False),
    ((1, 2, 9), (1,), (1,), (0,), (1,), False),  # a 1-tap window: a copy, never a view of the input
]


@pytest.mark.parametrize("x_shape,kernel,stride,padding,dilation,ceil_mode", POOLS)
def test_bound_max_pool_matches_generic_kernel_and_torch(x_shape, kernel, stride, padding, dilation, ceil_mode) -> None:
    x = torch.randn(x_shape, generator=torch.Generator().manual_seed(3))
    x.view(-1)[5] = float("nan")
    pool = {3: torch.nn.functional.max_pool1d, 4: torch.nn.functional.max_pool2d}[len(x_shape)]
    ref = pool(x, kernel, stride, padding, dilation, ceil_mode).numpy()
    call = C.MaxPool(Ref("x"), kernel, stride, padding, dilation, ceil_mode)
    xs = x.numpy()
    fast = _bound(call, ref, xs)(xs)
    np.testing.assert_array_equal(fast, KERNELS["MaxPool"](call, xs))
    np.testing.assert_array_equal(fast, ref)  # a maximum is exact, NaN included
    assert not np.shares_memory(fast, xs)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize(
    "shape,ndim",
    [((2, 5, 16), 1), ((3, 4, 6), 2), ((1, 64), 1), ((4, 64, 128), 1), ((8, 16, 32, 16), 2)],  # last two: in place
)
def test_bound_norms_match_generic_kernel_and_torch(shape, ndim, rms) -> None:
    g = torch.Generator().manual_seed(ndim)
    x, w, b = (
        torch.randn(shape, generator=g) * 3 + 1,
        torch.randn(shape[-ndim:], generator=g),
        torch.randn(shape[-ndim:], generator=g),
    )
    if rms:
        ref = torch.nn.functional.rms_norm(x, shape[-ndim:], w, eps=1e-6).numpy()
        call, operands = C.RmsNorm(Ref("x"), Ref("w"), ndim, 1e-6), (x.numpy(), w.numpy())
        generic = KERNELS["RmsNorm"](call, *operands)
    else:
        ref = torch.nn.functional.layer_norm(x, shape[-ndim:], w, b, eps=1e-5).numpy()
        call, operands = C.LayerNorm(Ref("x"), Ref("w"), Ref("b"), ndim, 1e-5), (x.numpy(), w.numpy(), b.numpy())
        generic = KERNELS["LayerNorm"](call, *operands)
    fast = _bound(call, ref, *operands)(*operands)
    np.testing.assert_array_equal(fast, generic)
    assert fast.shape == ref.shape and fast.dtype == ref.dtype
    assert not any(np.shares_memory(fast, o) for o in operands)
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("channels", [32, 64, 128])  # rows shorter than LONG_ROWS stay views
@pytest.mark.parametrize("ndim", [1, 2])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the row with an inf: inf - inf
def test_bound_norms_of_a_transposed_view_match_torch(channels: int, ndim: int, rms: bool) -> None:
    # A channels-first LayerNorm exports as permute → LayerNorm → permute: the norm reads a
    # transposed view; long rows are copied row-major first. One row holds an inf, one a NaN.
    g = torch.Generator().manual_seed(channels)
    memory = torch.randn(2, channels, 5, 4, generator=g) * 3 + 1
    memory[0, 3, 1, 2], memory[1, 0, 4, 3] = float("inf"), float("nan")
    # ndim 1: over C, as ConvNeXt's; ndim 2: over [C, W]
    x = memory.numpy().transpose(0, 2, 3, 1) if ndim == 1 else memory.numpy().transpose(0, 2, 1, 3)
    assert not x.flags.c_contiguous
    norm_shape = x.shape[-ndim:]
    w, b = torch.randn(norm_shape, generator=g), torch.randn(norm_shape, generator=g)
    xt = torch.from_numpy(np.ascontiguousarray(x))
    if rms:
        ref = torch.nn.functional.rms_norm(xt, norm_shape, w, eps=1e-6).numpy()
        call, operands = C.RmsNorm(Ref("x"), Ref("w"), ndim, 1e-6), (x, w.numpy())
    else:
        ref = torch.nn.functional.layer_norm(xt, norm_shape, w, b, eps=1e-5).numpy()
        call, operands = C.LayerNorm(Ref("x"), Ref("w"), Ref("b"), ndim, 1e-5), (x, w.numpy(), b.numpy())
    fast = _bound(call, ref, *operands)(*operands)
    np.testing.assert_array_equal(fast, KERNELS[call.op](call, *operands))
    assert fast.shape == ref.shape and fast.dtype == ref.dtype
    assert not any(np.shares_memory(fast, o) for o in operands)
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(fast[ok], ref[ok], rtol=1e-5, atol=1e-5)
