"""The numpy engine's threaded steps (``rlx.runtime.numpy_engine.parallel``): each split kernel
matches its single-threaded fast path (uneven chunks, in place, NaN/inf) — bit for bit where rlx does
the arithmetic itself, within float32 rounding where a split changes a BLAS product's shape — and
matches PyTorch; the ``threads`` option is validated; a model runs from two Python threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlx.errors import UsageError
from rlx.ir import calls as C
from rlx.ir.program import Ref
from rlx.runtime.model import Model
from rlx.runtime.numpy_engine import parallel
from rlx.runtime.numpy_engine.fused import BINDERS, Site, TensorType
from rlx.runtime.numpy_engine.fused_calls import Fused, Step

from helpers import convert

F32 = np.dtype(np.float32)
R = Ref("x")


@pytest.fixture
def split_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)


def _data(shape: tuple[int, ...], seed: int, specials: bool = True) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if specials and x.size > 8:
        flat = x.reshape(-1)
        flat[[1, 5, x.size // 2, x.size - 2]] = [np.nan, np.inf, -np.inf, np.nan]
    return x


def _t(*arrays: np.ndarray | None) -> list[Any]:
    return [None if a is None else torch.from_numpy(a.copy()) for a in arrays]


def _conv(groups: int) -> C.Conv:
    return C.Conv(R, R, R, (1, 1), (3, 3), (1, 1), groups, False, (0, 0))


# (call, operand shapes (None: absent), result shape, PyTorch's result)
CASES: dict[str, tuple[Any, list[tuple[int, ...] | None], tuple[int, ...], Callable[..., torch.Tensor]]] = {
    "add_broadcast": (C.Binary("add", R, R), [(7, 5, 33), (33,)], (7, 5, 33), torch.add),
    "mul_rows": (C.Binary("mul", R, R), [(5, 1, 6), (5, 90, 6)], (5, 90, 6), torch.mul),
    "gelu": (C.Unary("gelu", R), [(7, 300)], (7, 300), F.gelu),
    "tanh": (C.Unary("tanh", R), [(3, 50, 7)], (3, 50, 7), torch.tanh),
    "softmax_last": (C.Softmax(R, -1, False), [(7, 3, 80)], (7, 3, 80), lambda x: torch.softmax(x, -1)),
    "log_softmax_first": (C.Softmax(R, 0, True), [(6, 7, 40)], (6, 7, 40), lambda x: torch.log_softmax(x, 0)),
    "depthwise_batch1": (
        _conv(groups=7),
        [(1, 7, 12, 11), (7, 1, 7, 7), (7,)],
        (1, 7, 12, 11),
        lambda x, w, b: F.conv2d(x, w, b, padding=3, groups=7),
    ),
    "depthwise_batch3": (
        _conv(groups=5),
        [(3, 5, 9, 9), (5, 1, 7, 7), None],
        (3, 5, 9, 9),
        lambda x, w, b: F.conv2d(x, w, padding=3, groups=5),
    ),
    "dense_conv_batch": (
        _conv(groups=1),
        [(5, 4, 8, 8), (6, 4, 7, 7), (6,)],
        (5, 6, 8, 8),
        lambda x, w, b: F.conv2d(x, w, b, padding=3),
    ),
    "max_pool": (
        C.MaxPool(R, (3, 3), (2, 2), (1, 1), (1, 1), False),
        [(1, 7, 31, 31)],
        (1, 7, 16, 16),
        lambda x: F.max_pool2d(x, 3, 2, 1),
    ),
    "avg_pool": (
        C.AvgPool(R, (2, 2), (2, 2), (0, 0), False, True, None),
        [(3, 5, 16, 20)],
        (3, 5, 8, 10),
        lambda x: F.avg_pool2d(x, 2, 2),
    ),
}


def _site(call: Any, shapes: list[tuple[int, ...] | None], out: tuple[int, ...]) -> Site[Any]:
    return Site(call, out, F32, tuple(None if s is None else TensorType(s, F32) for s in shapes))


# Steps whose arithmetic includes a BLAS product (im2col GEMM, the dense depthwise matrices): a split
# hands BLAS a smaller matrix, and which kernel and blocking it picks for that size depends on the
# machine (OPENBLAS_CORETYPE=Haswell sums in another order than SkylakeX), so only rounding is shared.
BLAS_STEPS = {"Conv"}


def _torch_tolerance(op: str) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 1e-4} if op in ("Conv", "LayerNorm", "RmsNorm") else {"rtol": 1e-5, "atol": 1e-6}


@pytest.mark.usefixtures("split_everything")
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_split_kernel_matches_one_thread_and_torch(name: str, threads: int) -> None:
    call, shapes, out, ref = CASES[name]
    site = _site(call, shapes, out)
    one, many = BINDERS[call.op](site), parallel.split_step(site, threads)
    assert one is not None and many is not None
    specials = call.op != "Conv"  # the banded depthwise conv's inf·0 taps spread NaN over a row
    args = [None if s is None else _data(s, k, specials) for k, s in enumerate(shapes)]
    keep = [None if a is None else a.copy() for a in args]
    want, got = one(*args), many(*args)
    assert got.shape == want.shape == out and got.dtype == want.dtype == F32
    if call.op in BLAS_STEPS:
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)  # NaN where NaN, as assert_allclose checks
    else:
        np.testing.assert_array_equal(got, want)  # bit for bit, NaN where NaN
    for a, k in zip(args, keep):
        np.testing.assert_array_equal(a, k)  # operands untouched
    # Against PyTorch on finite inputs (its float32 GELU of ±inf is NaN on some CPUs: not this test's concern).
    finite = [None if s is None else _data(s, k, False) for k, s in enumerate(shapes)]
    np.testing.assert_allclose(many(*finite), ref(*_t(*finite)).numpy(), **_torch_tolerance(call.op))


def _chain(softmax_axis: int | None) -> Fused:
    """(x · s + mask) → GELU, or → softmax over ``softmax_axis``; x [n, 6, 40], s [40], mask [6, 40]."""
    steps = [Step("mul", (0, 1), "f32"), Step("add", (3, 2), "f32")]
    steps.append(Step("gelu", (4,), "f32") if softmax_axis is None else Step("softmax", (4,), "f32", softmax_axis))
    return Fused((R, R, R), tuple(steps), R)


@pytest.mark.usefixtures("split_everything")
@pytest.mark.parametrize("softmax_axis", [None, -1, 1])
@pytest.mark.parametrize("in_place", [False, True])
def test_split_fused_chain(softmax_axis: int | None, in_place: bool) -> None:
    """A chain split by rows (never along its softmax's axis), writing into its reuse buffer when
    it has one — here the chain's own input, as the buffer-reuse pass hands over a dead operand."""
    n = 7
    shapes = [(n, 6, 40), (40,), (6, 40), (n, 6, 40) if in_place else None]
    site = _site(_chain(softmax_axis), shapes, (n, 6, 40))
    one, many = BINDERS["Fused"](site), parallel.split_step(site, 2)
    assert one is not None and many is not None
    x, s, mask = _data((n, 6, 40), 0), _data((40,), 1, False), _data((6, 40), 2, False)
    want = one(x.copy(), s, mask, None)
    x_in = x.copy()
    got = many(x_in, s, mask, x_in if in_place else None)
    np.testing.assert_array_equal(got, want)
    if in_place:
        assert np.shares_memory(got, x_in)  # the result went into the buffer it was handed
    # Against PyTorch on finite inputs (its float32 GELU of ±inf is NaN on some CPUs).
    x = _data((n, 6, 40), 0, False)
    y = torch.from_numpy(x) * torch.from_numpy(s) + torch.from_numpy(mask)
    ref = F.gelu(y) if softmax_axis is None else torch.softmax(y, softmax_axis)
    np.testing.assert_allclose(many(x.copy(), s, mask, None), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_split_refuses_reduced_axes_and_small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    softmax = _site(C.Softmax(R, 0, False), [(512, 1)], (512, 1))  # only the softmax's own axis is long
    norm = _site(C.LayerNorm(R, None, None, 1, 1e-5), [(64, 300, 400)], (64, 300, 400))  # BLAS row stats
    dense = _site(_conv(groups=1), [(1, 4, 300, 300), (4, 4, 7, 7), None], (1, 4, 300, 300))
    big_add = _site(C.Binary("add", R, R), [(600, 600), (600, 600)], (600, 600))
    small_add = _site(C.Binary("add", R, R), [(60, 60), (60, 60)], (60, 60))
    assert parallel.split_step(big_add, 2) is not None  # 1.4 MB: split by default
    assert parallel.split_step(big_add, 1) is None
    assert parallel.split_step(small_add, 2) is None  # under MIN_BYTES
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    tiny = _site(C.Unary("gelu", R), [(2, 200)], (2, 200))  # chunks under MIN_CHUNK: GELU's other path
    for site in (softmax, norm, dense, tiny):  # every axis reduced, mixed (dense channels), 1 long or short
        assert parallel.split_step(site, 2) is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_threads_option_is_validated(bad: Any) -> None:
    model, program, _ = convert(torch.nn.ReLU(), [torch.randn(2, 3)])
    with pytest.raises(UsageError, match="threads"):
        Model(program, model.weights, threads=bad)


class _Block(torch.nn.Module):
    """A ConvNeXt block: 7×7 depthwise conv, channels-last LayerNorm, MLP with GELU, residual."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c)
        self.up, self.down = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.down(F.gelu(self.up(self.norm(y))))
        return torch.softmax(x + y.permute(0, 3, 1, 2), dim=1)


@pytest.mark.usefixtures("split_everything")
@pytest.mark.parametrize("batch", [1, 3])
def test_model_threads_match_and_run_concurrently(batch: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(batch, 8, 13, 11)
    module = _Block().eval()
    model, program, _ = convert(module, [x])
    weights = model.weights
    single, threaded = Model(program, weights, threads=1), Model(program, weights, threads=2)
    assert single.engine.threads == 1 and threaded.engine.threads == 2
    split = [fn for fn, *_ in threaded._static._steps if "_bind_chunks" in getattr(fn, "__qualname__", "")]  # type: ignore[union-attr]
    assert split, "no step of the block was split"
    want = single(x.numpy())
    # The split depthwise conv hands BLAS smaller products (see BLAS_STEPS): equal up to rounding.
    np.testing.assert_allclose(threaded(x.numpy()), want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(want, module(x).numpy(), rtol=1e-4, atol=1e-5)
    # Two Python threads running the same threaded model, each on its own inputs, many times.
    inputs = [torch.randn(batch, 8, 13, 11).numpy() for _ in range(2)]
    expected = [threaded(a) for a in inputs]  # one machine, one split: every run gives the same bits
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for _ in range(20):
                np.testing.assert_array_equal(threaded(inputs[k]), expected[k])
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors[0]
