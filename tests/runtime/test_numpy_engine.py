"""The numpy engine's hand-written fast kernels against PyTorch and against float64 truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlx.ir import calls as C
from rlx.ir.program import Ref
from rlx.runtime.numpy_engine import fused
from rlx.runtime.numpy_engine.kernels import KERNELS
from rlx.runtime.numpy_engine.namespace import gelu_float32

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
@pytest.mark.parametrize("shape,ndim", [((2, 5, 16), 1), ((3, 4, 6), 2), ((1, 64), 1)])
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
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)
