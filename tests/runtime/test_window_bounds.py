"""Every windowed kernel costs what its input and output do, never what its kernel size does.

Pooling windows, convolution taps and resampling filters far larger than the input (EfficientNet
ends in ``AvgPool2d(kernel_size=1280, ceil_mode=True)`` over a 4×4 map) are clipped to the taps
that read the input: each case runs on both engines, matches PyTorch (values, shape, dtype) and,
once warm, finishes in milliseconds where an unclipped window would build gigabytes."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlx.ir import calls as C
from rlx.ir.program import Call, Ref
from rlx.kernels import geometry
from rlx.kernels.numpy.kernels import KERNELS as NUMPY_KERNELS
from rlx.runtime.numpy_engine.fused import BINDERS, Site, TensorType

from helpers import assert_arrays_match, convert

X = Ref("x")
# Generous for a loaded 2-core machine; the unclipped windows took seconds to minutes here.
WARM_SECONDS = 0.25


def _engines() -> dict[str, dict[str, Any]]:
    engines: dict[str, dict[str, Any]] = {"numpy": NUMPY_KERNELS}
    try:
        from rlx.kernels.jax.kernels import KERNELS as JAX_KERNELS
    except ImportError:  # jax is an optional extra
        return engines
    return {**engines, "jax": JAX_KERNELS}


def _avg(k, s, p, ceil, include=True, divisor=None) -> tuple[Call, Callable[[torch.Tensor], torch.Tensor]]:
    nd = len(k)
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
    extra = {} if nd == 1 else {"divisor_override": divisor}
    return (
        C.AvgPool(X, k, s, p, ceil, include, divisor),
        lambda x: pool(x, k, s, p, ceil_mode=ceil, count_include_pad=include, **extra),
    )


def _max(k, s, p, d, ceil, indices=False) -> tuple[Call, Callable[[torch.Tensor], torch.Tensor]]:
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[len(k)]

    def want(x: torch.Tensor) -> torch.Tensor:
        out = pool(x, k, s, p, d, ceil_mode=ceil, return_indices=indices)
        return out[1] if indices else out

    return C.MaxPool(X, k, s, p, d, ceil, indices), want


# (id, call, torch reference, input shape)
POOLS = [
    ("efficientnet-head", *_avg((1280, 1280), (1280, 1280), (0, 0), True), (1, 16, 4, 4)),
    ("avg-k1280-pad640", *_avg((1280, 1280), (1, 1), (640, 640), True), (1, 4, 4, 5)),
    ("avg-k1280-exclude-pad", *_avg((1280, 1280), (1, 1), (640, 640), True, False), (2, 3, 4, 5)),
    ("avg-divisor-override", *_avg((1280, 7), (3, 2), (640, 3), True, False, 5), (1, 4, 4, 9)),
    ("avg-1d", *_avg((5000,), (5000,), (2500,), True), (2, 3, 7)),
    ("avg-3d-global", *_avg((5, 2, 7), (5, 1, 7), (0, 1, 0), True), (1, 2, 5, 4, 7)),
    ("avg-small-ceil", *_avg((3, 2), (2, 2), (1, 0), True, False), (1, 2, 7, 6)),
    ("max-k401", *_max((401, 401), (1, 1), (200, 200), (1, 1), False), (1, 8, 4, 4)),
    ("max-k401-stride-ceil", *_max((401, 3), (3, 2), (200, 1), (1, 1), True), (1, 8, 4, 6)),
    ("max-dilation-ceil", *_max((5, 3), (2, 3), (2, 1), (2, 3), True), (2, 3, 9, 10)),
    ("max-1d", *_max((3001,), (2,), (1500,), (1,), True), (2, 3, 6)),
    ("max-indices-k401", *_max((401, 401), (1, 1), (200, 200), (1, 1), False, True), (1, 3, 4, 4)),
    ("max-indices-dilation", *_max((5, 3), (2, 3), (2, 1), (2, 3), True, True), (1, 3, 9, 10)),
]


def _conv(nd, s, p, d, g, transposed=False, op=None) -> C.Conv:
    return C.Conv(X, X, X, (s,) * nd, (p,) * nd, (d,) * nd, g, transposed, (op or 0,) * nd)


# (id, call, input shape, weight shape)
CONVS = [
    ("conv2d-k1001", _conv(2, 1, 500, 1, 1), (1, 4, 4, 5), (2, 4, 1001, 1001)),
    ("depthwise-1d-k2049", _conv(1, 1, 1024, 1, 8), (2, 8, 16), (8, 1, 2049)),
    ("grouped-1d-k2049-stride-dilation", _conv(1, 5, 2100, 2, 4), (2, 8, 16), (8, 2, 2049)),
    ("depthwise-2d-k301-multiplier", _conv(2, 2, 150, 1, 3), (1, 3, 5, 4), (6, 1, 301, 301)),
    ("transposed-1d-k501", _conv(1, 1, 248, 1, 1, True), (2, 8, 16), (8, 3, 501)),
    ("transposed-1d-k501-stride-dilation", _conv(1, 3, 480, 2, 2, True, 1), (2, 8, 16), (8, 3, 501)),
    ("transposed-2d-k201", _conv(2, 2, 99, 1, 1, True, 1), (1, 4, 3, 2), (4, 2, 201, 201)),
]


def _torch_conv(c: C.Conv, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    nd = w.dim() - 2
    if c.transposed:
        fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d}[nd]
        return fn(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation)
    return {1: F.conv1d, 2: F.conv2d}[nd](x, w, b, c.stride, c.padding, c.dilation, c.groups)


def _warm_run(kernel: Callable[..., Any], *args: Any) -> tuple[np.ndarray, float]:
    """The result and the seconds of a second run (the first compiles, on JAX), in the 64-bit
    scope the JAX engine runs its programs in (int64 indices)."""
    with _x64():
        np.asarray(kernel(*args))
        t0 = time.perf_counter()
        out = np.asarray(kernel(*args))
    return out, time.perf_counter() - t0


def _x64() -> AbstractContextManager[Any]:
    try:
        from rlx.kernels.jax.namespace import x64
    except ImportError:
        return nullcontext()
    return x64()


@pytest.mark.parametrize("engine", sorted(_engines()))
@pytest.mark.parametrize(("name", "call", "want", "shape"), POOLS, ids=[p[0] for p in POOLS])
def test_pooling_far_larger_than_the_input(engine, name, call, want, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    expected = want(x).numpy()
    kernels = {"generic": lambda a: _engines()[engine][call.op](call, a)}
    binder = BINDERS.get(call.op)
    if engine == "numpy" and binder is not None:  # the plan the executor binds at load
        fast = binder(Site(call, expected.shape, expected.dtype, (TensorType(shape, np.dtype(np.float32)),)))
        if fast is not None:
            kernels["bound"] = fast
    for path, kernel in kernels.items():
        got, seconds = _warm_run(kernel, x.numpy())
        assert_arrays_match(got, expected, f"{engine} {path}")
        assert seconds < WARM_SECONDS, f"{engine} {path}: {seconds:.3f} s"


@pytest.mark.parametrize("engine", sorted(_engines()))
@pytest.mark.parametrize(("name", "call", "x_shape", "w_shape"), CONVS, ids=[c[0] for c in CONVS])
def test_convolution_far_larger_than_the_input(engine, name, call, x_shape, w_shape):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(x_shape, generator=g), torch.randn(w_shape, generator=g) * 0.01
    b = torch.randn(w_shape[1] * call.groups if call.transposed else w_shape[0], generator=g)
    expected = _torch_conv(call, x, w, b).numpy()
    kernel = _engines()[engine]["Conv"]
    got, seconds = _warm_run(lambda *a: kernel(call, *a), x.numpy(), w.numpy(), b.numpy())
    assert_arrays_match(got, expected, engine, rtol=1e-4, atol=1e-5)
    assert seconds < WARM_SECONDS, f"{engine}: {seconds:.3f} s"


@pytest.mark.parametrize(
    ("size", "kernel", "stride", "padding", "dilation", "out"),
    [(4, 1280, 1280, 0, 1, 1), (5, 1280, 1, 640, 1, 6), (16, 2049, 5, 2100, 2, 24), (9, 5, 2, 2, 2, 3)],
)
def test_clipped_windows_read_the_same_input_positions(size, kernel, stride, padding, dilation, out):
    """Every (output, tap) that reads the input before clipping reads the same position after, and
    the buffer is bounded by the input and output, whatever the kernel."""
    a = geometry.clip_axis(size, kernel, stride, padding, dilation, out)
    assert a.extent <= size + 2 * (out - 1) * stride + 2 * dilation
    for o in range(out):
        before = {o * stride + t * dilation - padding for t in range(kernel)}
        after = {o * stride + t * dilation + a.origin for t in range(a.kernel)}
        assert {p for p in before if 0 <= p < size} == {p for p in after if 0 <= p < size}
        assert all(0 <= o * stride + t * dilation < a.extent for t in range(a.kernel))


class EfficientNetHead(torch.nn.Module):
    """The end of transformers' EfficientNet: a 1×1 conv, then a pool whose kernel is its channel count."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 1280, 1)
        self.pool = torch.nn.AvgPool2d(kernel_size=1280, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x))


@pytest.mark.parametrize("engine", sorted(_engines()))
def test_efficientnet_head_end_to_end(engine):
    torch.manual_seed(0)
    module, x = EfficientNetHead().eval(), torch.randn(1, 8, 4, 4)
    with torch.no_grad():
        want = module(x).numpy()
    model, _, _ = convert(module, (x,), engine=engine)
    got, seconds = _warm_run(model, x.numpy())
    assert_arrays_match(got, want)
    assert seconds < WARM_SECONDS, f"{engine}: {seconds:.3f} s"


RESIZES = [
    ("bilinear-antialias-to-1x1", lambda x: F.interpolate(x, size=(1, 1), mode="bilinear", antialias=True)),
    (
        "bicubic-antialias-tiny-scale",
        lambda x: F.interpolate(x, scale_factor=0.06, mode="bicubic", antialias=True, recompute_scale_factor=False),
    ),
    ("area-to-1", lambda x: F.interpolate(x, size=(1, 3), mode="area")),
    ("nearest-down", lambda x: F.interpolate(x, size=(2, 3), mode="nearest")),
]


@pytest.mark.parametrize("engine", sorted(_engines()))
@pytest.mark.parametrize(("name", "fn"), RESIZES, ids=[r[0] for r in RESIZES])
def test_resize_far_below_the_input(engine, name, fn):
    x = torch.randn(1, 2, 40, 60, generator=torch.Generator().manual_seed(0))
    want = fn(x).numpy()
    model, _, _ = convert(fn, (x,), engine=engine)
    got, seconds = _warm_run(model, x.numpy())
    assert_arrays_match(got, want, rtol=1e-4, atol=1e-5)
    assert seconds < WARM_SECONDS, f"{engine}: {seconds:.3f} s"
