"""The numpy engine's algorithms for grouped convolution — im2col + one batched GEMM, a dense matrix
per channel for depthwise convs on small maps, a banded GEMM per channel for 2-d depthwise convs,
and a multiply-add per kernel tap for large depthwise convs — each held to PyTorch on the same cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlx.ir import calls as C
from rlx.ir.program import Ref
from rlx.kernels.numpy import nn as numpy_nn

from helpers import assert_arrays_match

X = Ref("x")

# (x shape, weight shape, stride, padding, dilation, groups)
CASES = [
    ((2, 6, 9, 8), (6, 1, 3, 3), 1, 1, 1, 6),  # depthwise 3×3
    ((1, 4, 11, 10), (4, 1, 7, 7), 1, 3, 1, 4),  # ConvNeXt's 7×7
    ((2, 3, 12, 9), (6, 1, 5, 5), 2, 2, 1, 3),  # channel multiplier 2, strided
    ((1, 4, 9, 9), (4, 1, 3, 3), 1, 2, 2, 4),  # dilated
    ((2, 16, 40), (16, 2, 17), 1, 8, 1, 8),  # wav2vec2-like positional conv: 1-d, large kernel, groups
    ((1, 8, 30), (8, 1, 9), 3, 4, 1, 8),  # 1-d depthwise, strided
    ((3, 5, 6, 13), (5, 1, 3, 2), 2, 1, 2, 5),  # rectangular kernel, strided and dilated
    ((1, 2, 5, 5), (2, 1, 9, 9), 1, 4, 1, 2),  # a kernel larger than the map
    ((3, 5, 2, 2), (5, 1, 7, 7), 1, 3, 1, 5),  # ConvNeXt's last stage: 7×7 on a 2×2 map, taps clipped
    ((2, 4, 5, 7), (8, 1, 4, 3), (2, 1), (0, 2), 1, 4),  # multiplier 2, padding on one axis only
]


# path -> (DENSE_MAX_PLANE and DENSE_MAX_PER_TAP, BANDED_MAX_WASTE, TAP_BY_TAP_MIN_COLS): which
# algorithm a depthwise conv takes.
PATHS = {
    "dense": (2**62, 2**62, 2**62),
    "banded": (0, 2**62, 2**62),
    "gemm": (0, 0, 2**62),
    "tap-by-tap": (0, 0, 0),
}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(("x_shape", "w_shape", "stride", "padding", "dilation", "groups"), CASES)
def test_grouped_conv_paths_match_torch(monkeypatch, path, x_shape, w_shape, stride, padding, dilation, groups):
    monkeypatch.setattr(numpy_nn, "DENSE_MAX_PLANE", PATHS[path][0])
    monkeypatch.setattr(numpy_nn, "DENSE_MAX_PER_TAP", PATHS[path][0])
    monkeypatch.setattr(numpy_nn, "BANDED_MAX_WASTE", PATHS[path][1])
    monkeypatch.setattr(numpy_nn, "TAP_BY_TAP_MIN_COLS", PATHS[path][2])
    nd = len(w_shape) - 2
    stride, padding, dilation = (v if isinstance(v, tuple) else (v,) * nd for v in (stride, padding, dilation))
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(x_shape, generator=g), torch.randn(w_shape, generator=g), torch.randn(w_shape[0], generator=g)
    call = C.Conv(X, X, X, stride, padding, dilation, groups, False, (0,) * nd)
    conv = F.conv1d if nd == 1 else F.conv2d
    plan = numpy_nn.conv_plan(call, x_shape, w_shape, np.dtype(np.float32))
    expected = {"gemm": "im2col", "tap-by-tap": "by_tap"}.get(path, path)
    if nd == 2 or path in ("dense", "gemm", "tap-by-tap"):  # banded is 2-d only
        if groups == x_shape[1] and not (path == "tap-by-tap" and w_shape[0] // groups > 4):
            assert numpy_nn.conv_path(call, x_shape, w_shape) == expected
    weight = w.numpy()
    for bias in (b, None):  # twice with one weight array: the banded and dense paths cache their matrix
        got = plan(x.numpy(), weight, None if bias is None else bias.numpy())
        assert_arrays_match(got, conv(x, w, bias, stride, padding, dilation, groups).numpy(), rtol=1e-5, atol=1e-5)


# 1-d convs with long kernels (stride 1): (x shape, weight shape, padding, groups)
LONG = [
    ((1, 32, 50), (32, 2, 128), 64, 16),  # wav2vec2's positional conv (kernel 128, 16 groups)
    ((3, 8, 70), (16, 8, 48), 5, 1),  # dense, batch 3
    ((2, 4, 20), (4, 2, 60), 30, 2),  # a kernel longer than the input: taps clipped
]


@pytest.mark.parametrize("fft", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "padding", "groups"), LONG)
def test_long_kernel_conv1d_matches_torch(monkeypatch, fft, x_shape, w_shape, padding, groups):
    # The FFT path (float64 spectra) against the direct im2col + GEMM path and against PyTorch.
    monkeypatch.setattr(numpy_nn, "FFT_MIN_TAPS", 48 if fft else 2**62)
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(x_shape, generator=g), torch.randn(w_shape, generator=g), torch.randn(w_shape[0], generator=g)
    call = C.Conv(X, X, X, (1,), (padding,), (1,), groups, False, (0,))
    plan = numpy_nn.conv_plan(call, x_shape, w_shape, np.dtype(np.float32))
    weight = w.numpy()
    want = F.conv1d(x.double(), w.double(), b.double(), padding=padding, groups=groups).numpy()
    for _ in range(2):  # twice with one weight array: the FFT path caches the weight's spectrum
        got = plan(x.numpy(), weight, b.numpy())
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-5 if fft else 2e-4)


def test_long_kernel_conv1d_keeps_inf_and_nan_local():
    # One inf or NaN reaches only the outputs whose windows read it, as in PyTorch (an FFT would
    # spread it over the whole channel): such inputs and weights take the direct sum.
    x, w = torch.randn(1, 4, 90), torch.randn(4, 4, 64)
    x[0, 1, 5], x[0, 2, 80] = float("inf"), float("nan")
    call = C.Conv(X, X, X, (1,), (0,), (1,), 1, False, (0,))
    plan = numpy_nn.conv_plan(call, x.shape, w.shape, np.dtype(np.float32))
    assert_arrays_match(plan(x.numpy(), w.numpy(), None), F.conv1d(x, w).numpy(), rtol=1e-5, atol=1e-4)
    w[1, 0, 3] = float("nan")
    x = torch.randn(1, 4, 90)
    assert_arrays_match(plan(x.numpy(), w.numpy(), None), F.conv1d(x, w).numpy(), rtol=1e-5, atol=1e-4)


# ConvNeXt's 7×7 on a small map (dense) and a larger one (banded). A non-finite weight on the banded
# path is left out: there PyTorch's float32 conv skips the taps that read padding, while its float64
# conv, an explicitly padded input and every rlx path multiply them (0·inf = NaN).
@pytest.mark.parametrize(("path", "size", "where"), [("dense", 6, "x"), ("dense", 6, "w"), ("banded", 16, "x")])
def test_matrix_depthwise_keeps_inf_and_nan_local(path, size, where):
    # The dense matrix per channel (small maps) and the banded one per row hold zeros that would
    # turn one inf or NaN input into NaN over its whole plane or row: such inputs go tap by tap. An
    # inf or NaN weight sits only where its tap reads, as in PyTorch.
    x, w = torch.randn(2, 3, size, size), torch.randn(3, 1, 7, 7)
    if where == "x":
        x[0, 1, 2, 3], x[1, 2, 0, 0] = float("inf"), float("nan")
    else:
        w[1, 0, 0, 0], w[2, 0, 3, 3] = float("inf"), float("nan")
    call = C.Conv(X, X, X, (1, 1), (3, 3), (1, 1), 3, False, (0, 0))
    assert numpy_nn.conv_path(call, x.shape, w.shape) == path
    plan = numpy_nn.conv_plan(call, x.shape, w.shape, np.dtype(np.float32))
    want = F.conv2d(x, w, None, 1, 3, 1, 3).numpy()
    assert np.isfinite(want).any() and not np.isfinite(want).all()
    assert_arrays_match(plan(x.numpy(), w.numpy(), None), want, rtol=1e-5, atol=1e-5)


# Dense and grouped im2col convs at batch > 1: (x shape, weight shape, stride, padding, dilation, groups)
BATCHED = [
    ((8, 80, 50), (32, 80, 3), 1, 1, 1, 1),  # the Whisper encoder's first conv1d
    ((3, 16, 21), (16, 16, 3), 2, 1, 1, 1),  # its second: strided, odd length
    ((4, 6, 29), (12, 2, 3), 2, 3, 2, 3),  # grouped, strided and dilated
    ((2, 4, 5), (6, 4, 9), 1, 4, 1, 1),  # a kernel larger than the input: taps clipped
    ((2, 3, 16, 16), (8, 3, 4, 4), 4, 0, 1, 1),  # 2-d (one GEMM per batch element either way)
]


@pytest.mark.parametrize("merged", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "stride", "padding", "dilation", "groups"), BATCHED)
def test_batched_im2col_conv_matches_torch(monkeypatch, merged, x_shape, w_shape, stride, padding, dilation, groups):
    # One GEMM over the whole batch (1-d) and one per batch element: both PyTorch's values and
    # NaN/inf pattern (a NaN and an inf in the input stay local), C-contiguous results.
    monkeypatch.setattr(numpy_nn, "MERGED_BATCH_MIN", 2 if merged else 2**62)
    nd = len(w_shape) - 2
    tup = lambda v: v if isinstance(v, tuple) else (v,) * nd  # noqa: E731
    g = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(x_shape, generator=g), torch.randn(w_shape, generator=g), torch.randn(w_shape[0], generator=g)
    x[(1, 0) + (0,) * nd] = math.nan
    x[(-1, -1) + (-1,) * nd] = math.inf
    call = C.Conv(X, X, X, tup(stride), tup(padding), tup(dilation), groups, False, (0,) * nd)
    assert numpy_nn.conv_path(call, x_shape, w_shape) == "im2col"
    conv = F.conv1d if nd == 1 else F.conv2d
    plan = numpy_nn.conv_plan(call, x_shape, w_shape, np.dtype(np.float32))
    for bias in (b, None):
        got = plan(x.numpy(), w.numpy(), None if bias is None else bias.numpy())
        want = conv(x, w, bias, tup(stride), tup(padding), tup(dilation), groups).numpy()
        assert_arrays_match(got, want, rtol=1e-5, atol=1e-4)
        assert got.flags.c_contiguous
