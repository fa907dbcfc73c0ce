"""The JAX kernels of the ordering, resample and scatter Calls against the numpy kernels and PyTorch.

Two layers:

- Calls built directly and run on real inputs of each dtype (NaN, ±inf and ±0 planted in floats):
  every case runs all its Calls in one ``jax.jit``; each result must equal the numpy kernel's
  bit for bit (shape, dtype, signed zeros, NaN positions; float cumulative sums, products and
  log-sum-exps to a few ulps, as XLA scans in parallel) and match PyTorch's own op on the same
  tensors, zero signs included. Upsample Calls are checked against the aten ``upsample_*`` op
  taking the same sizes and scales; top-k indices on distinct values, its values on ties.
- Programs lowered from torch modules (one export per case) run through the JAX engine
  (``Model(..., engine="jax")``, one ``jax.jit`` over the whole program) and are compared with
  eager PyTorch; the same programs also run instruction by instruction with the numpy engine,
  where each instruction of these Calls must give the JAX kernel's bits on its real operands.

Compiling dominates the time, so the default run keeps one or two dtypes per case; ``-m slow``
runs the full dtype sweeps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from rlx.frontends.torch.tensors import tensor_to_numpy
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Call, Ref, resolve_operand
from rlx.kernels.numpy.kernels import KERNELS
from rlx.runtime.model import Model

from helpers import as_module, assert_arrays_match, convert, rand, sweep, with_specials

jax = pytest.importorskip("jax")

from rlx.kernels.jax.kernels import KERNELS as JAX_KERNELS  # noqa: E402  (needs jax)

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
I32, I64, U8, BOOL = torch.int32, torch.int64, torch.uint8, torch.bool
FLOATS = (F32, F16, BF16, F64)
NAN, INF = float("nan"), float("inf")
X, Y, Z = Ref("x"), Ref("y"), Ref("z")
aten = torch.ops.aten


# ── inputs: callables dtype → tensor ─────────────────────────────────────────
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ties(*shape: int, high: int = 3, seed: int = 0) -> Callable[[torch.dtype], torch.Tensor]:
    """Values in 0..high-1 (0/1 for bool): many equal entries."""
    return lambda dt: torch.randint(0, 2 if dt == BOOL else high, shape, generator=_gen(seed)).to(dt)


def specials(*shape: int, high: int = 3, seed: int = 0) -> Callable[[torch.dtype], torch.Tensor]:
    """``ties``, with repeated NaN, +inf, -inf, -0 and +0 in the same lanes for floats."""

    def make(dt: torch.dtype) -> torch.Tensor:
        t = ties(*shape, high=high, seed=seed)(dt).clone()
        if dt.is_floating_point:
            flat = t.view(-1)
            flat[::7], flat[3::11], flat[5::13], flat[2::9], flat[4::10] = NAN, INF, -INF, -0.0, 0.0
        return t

    return make


def distinct(*shape: int, seed: int = 0) -> Callable[[torch.dtype], torch.Tensor]:
    """Distinct integers centred on 0 (exact in every dtype for up to 256 entries)."""
    n = int(np.prod(shape))
    return lambda dt: (torch.randperm(n, generator=_gen(seed)) - n // 2).reshape(shape).to(dt)


def uniform(*shape: int, low: float = -3, high: float = 3, seed: int = 0, planted: bool = False) -> Callable:
    """Random data in [low, high] of each dtype (0..255 for uint8); ``planted``: NaN, ±inf, ±0 first."""

    def make(dt: torch.dtype) -> torch.Tensor:
        if dt == U8:
            return rand(shape, dt, low=0, high=255, seed=seed)
        t = rand(shape, dt, low=low, high=high, seed=seed)
        return with_specials(t) if planted and dt.is_floating_point else t

    return make


def fixed(t: torch.Tensor) -> Callable[[torch.dtype], torch.Tensor]:
    return lambda dt: t


# ── one Call, how to feed it, and what PyTorch says it computes ──────────────
@dataclass(frozen=True)
class V:
    """``call`` on ``operands(*inputs)`` (numpy inputs); ``torch(*inputs)`` (torch inputs) is PyTorch's
    result for it, or None where PyTorch has no direct equivalent; ``view(result, *inputs)``, when
    given, turns the Call's result into what ``torch`` returns (top-k values from its indices).
    ``call`` may be a function of the operands, for Calls whose fields mirror them (IndexPut).
    ``ulps``: float scans, which XLA computes as parallel scans (another summation order than the
    sequential numpy kernel), agree with it to this many units of the dtype's epsilon, not to the bit."""

    call: Call | Callable[[list[Any]], Call]
    operands: Callable[..., list[Any]]
    torch: Callable[..., torch.Tensor] | None
    view: Callable[..., np.ndarray] | None = None
    ulps: int = 0

    def __repr__(self) -> str:
        return repr(self.call)


def only_x(*inputs: Any) -> list[Any]:
    return [inputs[0]]


SLOW = pytest.mark.slow


def case(
    name: str,
    variants: list[V],
    *makers: Callable,
    dtypes: tuple = (F32,),
    fast: tuple | None = None,
    tol: tuple | None = None,
) -> list:
    """One test per dtype; all ``variants`` run in one jit on the same inputs. Compiling is what
    costs, so only the ``fast`` dtypes (default: the first) run by default, the rest with -m slow."""
    fast = dtypes[:1] if fast is None else fast
    return [
        pytest.param(
            variants, makers, dt, tol, id=f"{name}-{str(dt).removeprefix('torch.')}", marks=() if dt in fast else SLOW
        )
        for dt in dtypes
    ]


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str, ulps: int = 0) -> None:
    """Shape, dtype and every bit (signed zeros included), any NaN standing for any NaN; with
    ``ulps``, floats only as close as that many epsilons (NaN and ±inf in the same places)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != numpy kernel {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != numpy kernel {want.dtype}"
    if got.dtype.kind != "f" and got.dtype != dtypes.to_numpy("bf16"):
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    if ulps:
        tol = ulps * float(ml_dtypes.finfo(got.dtype).eps)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{what}: NaN positions")
        finite = np.isfinite(w)
        np.testing.assert_array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)], err_msg=f"{what}: ±inf")
        np.testing.assert_allclose(g[finite], w[finite], rtol=tol, atol=tol, err_msg=what)
        return
    bits = np.dtype(f"u{got.dtype.itemsize}")
    same = (got.view(bits) == want.view(bits)) | (np.isnan(g) & np.isnan(w))
    assert same.all(), (
        f"{what}: {int((~same).sum())} entries differ from the numpy kernel: {g[~same][:5]} vs {w[~same][:5]}"
    )


def run_jax(calls: list[Call], operands: list[list[Any]]) -> list[np.ndarray]:
    """Every Call on its operands, all in one ``jax.jit`` (64-bit types on, as the engine runs)."""
    fns = [functools.partial(JAX_KERNELS[c.op], c) for c in calls]
    with jax.enable_x64(True):
        outs = jax.jit(lambda ops: [f(*o) for f, o in zip(fns, ops)])(operands)
        return [np.asarray(o) for o in outs]


# ── ordering and scans ───────────────────────────────────────────────────────
def sort_v(axis: int, descending: bool) -> V:
    return V(
        C.ArgSort(X, axis, descending, True),
        only_x,
        lambda x: torch.sort(x, dim=axis, descending=descending, stable=True).indices,
    )


def topk_v(k: int, axis: int, largest: bool, values: bool = False) -> V:
    view = (lambda r, x: np.take_along_axis(x, r, axis)) if values else None
    return V(
        C.ArgTopK(X, k, axis, largest, True),
        only_x,
        lambda x: torch.topk(x, k, axis, largest)[0 if values else 1],
        view,
    )


_SCAN = {"sum": torch.cumsum, "prod": torch.cumprod, "logsumexp": torch.logcumsumexp,
         "max": lambda x, a: torch.cummax(x, a).values, "min": lambda x, a: torch.cummin(x, a).values}  # fmt: skip


def scan_v(fn: str, axis: int, indices: bool = False, torch_too: bool = True) -> V:
    if indices:
        ref = {"max": lambda x: torch.cummax(x, axis).indices, "min": lambda x: torch.cummin(x, axis).indices}[fn]
    else:
        ref = functools.partial(lambda x, f: f(x, axis), f=_SCAN[fn])
    # Sums, products and log-sum-exps of floats: another order than numpy's (integers stay exact).
    return V(C.CumReduce(fn, X, axis, indices), only_x, ref if torch_too else None, ulps=4 * (fn not in ("max", "min")))


SORTS = [sort_v(a, d) for a in (0, 1) for d in (False, True)]
TOPK_INDICES = [topk_v(3, 1, True), topk_v(2, 0, False), topk_v(10, 1, False), topk_v(0, 1, True)]
TOPK_VALUES = [topk_v(7, 1, True, True), topk_v(4, 0, False, True), topk_v(20, 1, True, True)]
SCANS = [scan_v(f, a) for f in ("sum", "prod", "max", "min") for a in (0, 1)] + [
    scan_v("max", 1, True),
    scan_v("min", 0, True),
    scan_v("max", 0, True),
    scan_v("min", 1, True),
]
LOGCUMSUMEXP = [scan_v("logsumexp", 0), scan_v("logsumexp", 1)]
# Bool scans: the lowering casts to int64 before a sum/prod (PyTorch's result type), so the Call's
# own bool sum/prod has no PyTorch twin; max/min do.
BOOL_SCANS = [scan_v("sum", 1, torch_too=False), scan_v("prod", 0, torch_too=False), scan_v("max", 1),
              scan_v("min", 0), scan_v("max", 1, True), scan_v("min", 0, True)]  # fmt: skip
MOVES = [V(C.Flip(X, axes), only_x, lambda x, axes=axes: torch.flip(x, axes)) for axes in ((0,), (1, 2), (0, 1, 2), ())]
MOVES += [
    V(C.Roll(X, s, a), only_x, lambda x, s=s, a=a: torch.roll(x, s, a or None))
    for s, a in (((2,), (1,)), ((1, -2), (0, 2)), ((-7,), ()), ((0,), (0,)), ((13,), (2,)), ((4, 1, -9), (2, 0, 1)))
]
INT64_BIG = torch.tensor(
    [
        [2**53 + 1, 2**53, 2**53 + 3, -(2**63), 2**63 - 1, 2**53 + 2, -(2**53) - 1, -(2**53)],
        [7, 2**62 + 1, 2**62, 2**62 + 1, -1, 2**62 - 1, 0, 2**62],
    ]
)

ORDERING = [
    *case("argsort", SORTS, specials(5, 20), dtypes=(*FLOATS, I64, I32, BOOL), fast=(F32, BF16, BOOL)),
    *case(
        "argsort_int64_big",
        SORTS + [topk_v(3, 1, False), scan_v("sum", 1), scan_v("max", 1, True)],
        fixed(INT64_BIG),
        dtypes=(I64,),
    ),
    *case("topk_indices", TOPK_INDICES, distinct(4, 10), dtypes=(*FLOATS, I64)),
    *case("topk_values", TOPK_VALUES, specials(6, 20), dtypes=(*FLOATS, I64), fast=(F16,)),
    *case("scans", SCANS, specials(5, 8, high=4), dtypes=(*FLOATS, I64), fast=(F32, I64)),
    *case("scans_bool", BOOL_SCANS, ties(5, 8), dtypes=(BOOL,)),
    *case("logcumsumexp", LOGCUMSUMEXP, uniform(5, 8, planted=True), dtypes=FLOATS),
    *case(
        "logcumsumexp_edges",
        LOGCUMSUMEXP,
        fixed(
            torch.tensor(
                [
                    [-INF, -INF, 1.0, INF, INF, -INF, 2.0],
                    [NAN, 0.0, -INF, 3.0, INF, -INF, INF],
                    [80.0, 90.0, -80.0, 1e-3, 88.0, -INF, 0.5],
                ]
            )
        ),
    ),
    # Long float sums: PyTorch accumulates float32 in float64 and halves in float32.
    *case(
        "cumsum_long",
        [scan_v("sum", 0), scan_v("prod", 0)],
        uniform(3000, low=0.999, high=1.001),
        dtypes=(F32, F16, BF16),
        fast=(F16,),
    ),
    *case("scans_empty", [scan_v("sum", 1), scan_v("max", 1, True), scan_v("min", 1)], fixed(torch.empty(2, 0))),
    *case("flip_roll", MOVES, specials(3, 4, 5), dtypes=(F32, BF16, I64, BOOL), fast=(F32, BOOL)),
]


# ── resampling ───────────────────────────────────────────────────────────────
def up_v(mode: str, size: tuple, scales: tuple | None = None, align: bool = False, aa: bool = False) -> V:
    scales = scales or (None,) * len(size)
    return V(
        C.Upsample(X, mode, size, scales, align, aa),
        only_x,
        functools.partial(torch_upsample, mode, size, scales, align, aa),
    )


def torch_upsample(mode: str, size: tuple, scales: tuple, align: bool, aa: bool, x: torch.Tensor) -> torch.Tensor:
    """The aten op an Upsample Call stands for, with the same output sizes and scale factors."""
    nd, size = len(size), list(size)
    if mode == "nearest":
        return getattr(aten, f"upsample_nearest{nd}d").default(x, size, *scales)
    if mode == "nearest_exact":
        return getattr(aten, f"_upsample_nearest_exact{nd}d").default(x, size, *scales)
    if aa:
        return getattr(aten, f"_upsample_{'bilinear' if mode == 'linear' else 'bicubic'}2d_aa").default(
            x, size, align, *scales
        )
    name = {1: "linear1d", 2: "bilinear2d", 3: "trilinear3d"}[nd] if mode == "linear" else "bicubic2d"
    return getattr(aten, f"upsample_{name}").default(x, size, align, *scales)


NEAREST_1D = [up_v("nearest", (14,), (2.0,)), up_v("nearest", (15,), (2.1,)), up_v("nearest", (4,)),
              up_v("nearest", (2,), (0.4,)), up_v("nearest_exact", (11,)), up_v("nearest_exact", (10,), (1.5,))]  # fmt: skip
# Outputs with H + W <= 128 take PyTorch's channels-last kernel (its own nearest-index rule).
NEAREST_2D = [up_v("nearest", (10, 14), (2.0, 2.0)), up_v("nearest", (7, 10), (1.5, 1.5)), up_v("nearest", (4, 9)),
              up_v("nearest", (10, 7), (2.1, 1.1)), up_v("nearest", (2, 3), (0.5, 0.5)),
              up_v("nearest_exact", (7, 10), (1.5, 1.5)), up_v("nearest_exact", (3, 11)),
              up_v("nearest_exact", (3, 14), (0.6, 2.1))]  # fmt: skip
NEAREST_3D = [up_v("nearest", (6, 8, 10), (2.0, 2.0, 2.0)), up_v("nearest", (4, 2, 10), (1.5, 0.5, 2.1)),
              up_v("nearest_exact", (4, 6, 7), (1.5, 1.5, 1.5)), up_v("nearest_exact", (4, 1, 7))]  # fmt: skip
LINEAR_1D = [up_v("linear", (n,), (s,), a) for n, s in ((10, 1.5), (3, 0.5), (23, 3.3)) for a in (False, True)]
LINEAR_2D = [up_v("linear", (7, 10), (1.5, 1.5)), up_v("linear", (2, 3), (0.5, 0.5)), up_v("linear", (4, 9)),
             up_v("linear", (9, 4), align=True), up_v("linear", (8, 4), (1.7, 0.6)),
             up_v("linear", (1, 1), align=True), up_v("linear", (5, 14), (1.1, 2.0))]  # fmt: skip
BICUBIC = [up_v("bicubic", (7, 10), (1.5, 1.5)), up_v("bicubic", (2, 3), (0.5, 0.5)), up_v("bicubic", (4, 9)),
           up_v("bicubic", (9, 4), align=True), up_v("bicubic", (10, 4), (2.1, 0.7)), up_v("bicubic", (8, 10), (1.6, 1.4))]  # fmt: skip
TRILINEAR = [up_v("linear", (4, 6, 7), (1.5, 1.5, 1.5)), up_v("linear", (2, 7, 3), align=True),
             up_v("linear", (1, 8, 6), (0.5, 2.0, 1.3))]  # fmt: skip
# H + W > 128: PyTorch's generic kernels.
LARGE_2D = [up_v("nearest", (10, 133), (2.1, 1.9)), up_v("nearest_exact", (10, 133), (2.1, 1.9)),
            up_v("linear", (7, 140), (1.5, 2.0)), up_v("bicubic", (7, 140), (1.5, 2.0), True)]  # fmt: skip
ANTIALIAS = [
    up_v(m, size, s, a, aa=True)
    for m in ("linear", "bicubic")
    for size, s, a in (
        ((6, 5), (0.5, 0.5), False),
        ((3, 3), (0.3, 0.3), False),
        ((3, 5), None, False),
        ((19, 16), (1.5, 1.5), False),
        ((5, 11), (0.4, 1.0), False),
        ((4, 2), None, True),
    )
]


def grid_v(mode: str, padding: str, align: bool) -> V:
    return V(
        C.GridSample(X, Y, mode, padding, align),
        lambda x, g: [x, g],
        lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align),
    )


GRID_2D = [
    grid_v(m, p, a)
    for m in ("bilinear", "nearest", "bicubic")
    for p in ("zeros", "border", "reflection")
    for a in (False, True)
]
GRID_3D = [
    grid_v(m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection") for a in (False, True)
]


def tie_grid(dt: torch.dtype) -> torch.Tensor:
    """Exact half-pixel positions with align_corners=True: nearest rounds them half to even."""
    v = torch.tensor([-0.75, -0.25, 0.25, 0.75, 0.0])
    return torch.stack(torch.meshgrid(v, v.flip(0), indexing="xy"), -1)[None].to(dt).clone()


RESAMPLE = [
    *case("upsample_nearest_1d", NEAREST_1D, uniform(2, 3, 7, planted=True), dtypes=(F32, F16, U8)),
    *case("upsample_nearest_2d", NEAREST_2D, uniform(2, 3, 5, 7, planted=True), dtypes=(F32, BF16, U8), fast=(BF16,)),
    *case("upsample_nearest_3d", NEAREST_3D, uniform(1, 2, 3, 4, 5, planted=True), dtypes=(F32, F64)),
    *case("upsample_linear_1d", LINEAR_1D, uniform(2, 3, 7), dtypes=(F32, BF16)),
    *case("upsample_bilinear", LINEAR_2D, uniform(2, 3, 5, 7, planted=True), dtypes=FLOATS, fast=(F32, F16)),
    *case("upsample_bicubic", BICUBIC, uniform(2, 3, 5, 7, planted=True), dtypes=FLOATS),
    *case("upsample_trilinear", TRILINEAR, uniform(1, 2, 3, 4, 5), dtypes=(F32, F16), fast=(F16,)),
    *case("upsample_large", LARGE_2D, uniform(1, 2, 5, 70), dtypes=(F32, BF16), fast=(BF16,)),
    # PyTorch's CPU antialiasing supports float32 and float64 only.
    *case("upsample_antialias", ANTIALIAS, uniform(2, 3, 13, 11, planted=True), dtypes=(F32, F64), fast=()),
    # Bilinear and bicubic filters differ only in their weights, built at trace time by the numpy helpers.
    *case("upsample_antialias_some", ANTIALIAS[1:9:2], uniform(2, 3, 13, 11, planted=True)),
    *case(
        "grid_sample_2d",
        GRID_2D,
        uniform(2, 3, 5, 7, planted=True),
        uniform(2, 4, 6, 2, low=-1.6, high=1.6, seed=7),
        dtypes=FLOATS,
    ),
    *case(
        "grid_sample_3d",
        GRID_3D,
        uniform(2, 2, 3, 4, 5),
        uniform(2, 2, 3, 4, 3, low=-1.6, high=1.6, seed=7),
        dtypes=(F32, F16, F64),
        fast=(),
    ),
    *case(
        "grid_sample_3d_bilinear",
        GRID_3D[1:6:2],
        uniform(2, 2, 3, 4, 5),
        uniform(2, 2, 3, 4, 3, low=-1.6, high=1.6, seed=7),
    ),
    *case("grid_sample_far", GRID_2D, uniform(1, 2, 4, 3), uniform(1, 5, 5, 2, low=-9, high=9, seed=3), fast=()),
    # Half precision picks pixels in half precision: the reflections (longest arithmetic) by default.
    *case(
        "grid_sample_2d_half",
        [grid_v(m, "reflection", a) for m in ("bilinear", "bicubic") for a in (False, True)],
        uniform(2, 3, 5, 7, planted=True),
        uniform(2, 4, 6, 2, low=-1.6, high=1.6, seed=7),
        dtypes=(F16, BF16),
    ),
    *case(
        "grid_sample_ties",
        [grid_v("nearest", p, True) for p in ("zeros", "border", "reflection")],
        uniform(1, 2, 5, 5),
        tie_grid,
        dtypes=(F32, BF16),
        fast=(BF16,),
    ),
    # A single pixel: reflection about an empty span (align_corners) or a one-pixel one.
    *case(
        "grid_sample_1px",
        [v for k, v in enumerate(GRID_2D) if k % 6 >= 2],
        uniform(1, 2, 1, 1),
        uniform(1, 2, 3, 2, low=-1.6, high=1.6, seed=7),
        fast=(),
    ),
]


# ── scatter and diagonals ────────────────────────────────────────────────────
def put_v(
    indices: Callable[..., list], values: Callable[..., Any], accumulate: bool = False, torch_too: bool = True
) -> V:
    """IndexPut with ``indices(*inputs)`` and ``values(*inputs)``, written once for numpy and torch
    inputs alike (both index the same way)."""

    def operands(*inputs: Any) -> list[Any]:
        return [inputs[0], indices(*inputs), np.asarray(values(*inputs))]

    def ref(*inputs: Any) -> torch.Tensor:
        return aten.index_put(inputs[0], indices(*inputs), torch.as_tensor(values(*inputs)), accumulate)

    def call(ops: list[Any]) -> C.IndexPut:
        return C.IndexPut(X, tuple(None if i is None else Ref(f"i{k}") for k, i in enumerate(ops[1])), Z, accumulate)

    return V(call, operands, ref if torch_too else None)


UNIQ = torch.tensor([3, 0, 2])  # unique rows of a [4, 5] tensor
REP = torch.tensor([1, 3, 1, 1, -1])  # repeats, and a negative index
MASK = torch.tensor([[True, False, True, False, False], [False] * 5, [True] * 5, [False, True, False, False, True]])
ROW_MASK = torch.tensor([True, False, True, True])
COL_MASK = torch.tensor([False, True, True, False, True])

INDEX_PUT = [
    put_v(lambda x, i, r, m, rm, cm: [i], lambda x, i, r, m, rm, cm: x[0]),
    put_v(lambda x, i, r, m, rm, cm: [i, i[[1, 0, 2]]], lambda x, i, r, m, rm, cm: x[1, :3]),
    put_v(lambda x, i, r, m, rm, cm: [None, i], lambda x, i, r, m, rm, cm: x[:, 1:4]),  # None = whole axis
    put_v(lambda x, i, r, m, rm, cm: [i[:, None], i[None, :2]], lambda x, i, r, m, rm, cm: x[0, 0]),  # broadcast
    put_v(lambda x, i, r, m, rm, cm: [m], lambda x, i, r, m, rm, cm: x[0, 0]),  # a bool mask, one value
    put_v(lambda x, i, r, m, rm, cm: [m], lambda x, i, r, m, rm, cm: x.reshape(-1)[: int(m.sum())]),  # one per True
    put_v(lambda x, i, r, m, rm, cm: [rm], lambda x, i, r, m, rm, cm: x[1]),  # a row mask, rows broadcast
    put_v(lambda x, i, r, m, rm, cm: [None, cm], lambda x, i, r, m, rm, cm: x[:, : int(cm.sum())]),  # a later axis
    put_v(lambda x, i, r, m, rm, cm: [rm, i[:1]], lambda x, i, r, m, rm, cm: x[0, :3]),  # mask beside an index
    put_v(lambda x, i, r, m, rm, cm: [rm[[0, 1, 2, 3]], i[[0, 1, 2]]], lambda x, i, r, m, rm, cm: x[3, :3]),
    # Repeated positions: numpy's (and rlx's) last write; PyTorch leaves the survivor unspecified.
    put_v(lambda x, i, r, m, rm, cm: [r], lambda x, i, r, m, rm, cm: x[[0, 1, 2, 3, 0]], torch_too=False),
]
INDEX_PUT_ACC = [
    put_v(lambda x, i, r, m, rm, cm: [r], lambda x, i, r, m, rm, cm: x[0], True),
    put_v(lambda x, i, r, m, rm, cm: [None, r], lambda x, i, r, m, rm, cm: x[:, :5], True),
    put_v(lambda x, i, r, m, rm, cm: [r, r[[4, 3, 2, 1, 0]]], lambda x, i, r, m, rm, cm: x[2, 0], True),
    put_v(lambda x, i, r, m, rm, cm: [m], lambda x, i, r, m, rm, cm: x[m], True),
    put_v(lambda x, i, r, m, rm, cm: [rm, r[:1]], lambda x, i, r, m, rm, cm: x[1, 1], True),
]
PUT_INPUTS = (fixed(UNIQ), fixed(REP), fixed(MASK), fixed(ROW_MASK), fixed(COL_MASK))


def put3_v(indices: Callable[..., list], values: Callable[..., Any], accumulate: bool = False) -> V:
    return put_v(lambda x, i, j, *_: indices(x, i, j), lambda x, i, j, *_: values(x, i, j), accumulate)


# Advanced indices split by a full axis (numpy and PyTorch move the indexed axes first), int32 indices.
INDEX_PUT_3D = [
    put3_v(lambda x, i, j: [i, None, j], lambda x, i, j: x[0, :, :2].T * 3),
    put3_v(lambda x, i, j: [i, None, j], lambda x, i, j: x[1, :, :2].T, True),
    put3_v(lambda x, i, j: [None, i, j], lambda x, i, j: x[0, :2, 0]),
    put3_v(lambda x, i, j: [i.astype(np.int32) if isinstance(i, np.ndarray) else i.int()], lambda x, i, j: x[2]),
    put3_v(lambda x, i, j: [x[:, :, 0] > 0], lambda x, i, j: x[0, 0, :1]),  # a mask over two axes, from data
    put3_v(lambda x, i, j: [x[:, :, 0] > 0], lambda x, i, j: x[x[:, :, 0] > 0] * 2),
]


def scatter_v(
    axis: int,
    src: Callable[..., Any],
    reduce: str = "none",
    include_self: bool = True,
    index: Callable[..., Any] = lambda x, i, s: i,
) -> V:
    def operands(x: Any, i: Any, s: Any) -> list[Any]:
        value = src(x, i, s)  # a number is a literal of x's dtype in a real program
        return [x, index(x, i, s), value if isinstance(value, np.ndarray) else np.asarray(value, x.dtype)]

    def ref(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        src_t = src(x, i, s)
        if not isinstance(src_t, torch.Tensor):  # a number: the value overload
            return torch.scatter(x, axis, index(x, i, s), src_t)
        if reduce == "none":
            return torch.scatter(x, axis, index(x, i, s), src_t)
        return torch.scatter_reduce(x, axis, index(x, i, s), src_t, reduce, include_self=include_self)

    return V(C.Scatter(X, axis, Y, Z, reduce, include_self), operands, ref)


SCATTER_IDX = torch.stack([torch.randperm(4, generator=_gen(k))[:3] for k in range(5)], 1)  # unique per column
REP_IDX = torch.randint(0, 4, (5, 5), generator=_gen(7))  # repeats over axis 0 of [4, 5]
SCATTERS = [
    scatter_v(0, lambda x, i, s: s),
    scatter_v(1, lambda x, i, s: s, index=lambda x, i, s: i[:2, :3] % 5),  # an index smaller than src
    scatter_v(0, lambda x, i, s: s[:3]),
]
SCATTER_VALUE = [scatter_v(0, lambda x, i, s: 3), scatter_v(1, lambda x, i, s: 1, index=lambda x, i, s: i[:2, :3] % 5)]
REDUCES = [
    scatter_v(0, lambda x, i, s: s, how, inc)
    for how in ("sum", "prod", "amax", "amin", "mean")
    for inc in (True, False)
]
REDUCES_AXIS1 = [
    scatter_v(1, lambda x, i, s: s[:4], how, inc, index=lambda x, i, s: i[:4, :3] % 5)
    for how in ("sum", "amax", "mean")
    for inc in (True, False)
]
BOOL_REDUCES = [scatter_v(0, lambda x, i, s: s, how, inc) for how in ("sum", "amax", "amin") for inc in (True, False)]


def plain(*shape: int, seed: int = 1) -> Callable[[torch.dtype], torch.Tensor]:
    """Small integers (0/1 for bool), exact in every dtype."""
    return lambda dt: (
        torch.randint(0, 2, shape, generator=_gen(seed)).bool()
        if dt == BOOL
        else torch.randint(-5, 6, shape, generator=_gen(seed)).to(dt)
    )


def vals(*shape: int, seed: int = 0) -> Callable[[torch.dtype], torch.Tensor]:
    """``plain`` with NaN and +inf planted in floats."""

    def make(dt: torch.dtype) -> torch.Tensor:
        t = plain(*shape, seed=seed)(dt).clone()
        if dt.is_floating_point:
            t.view(-1)[1], t.view(-1)[2] = NAN, INF
        return t

    return make


DIAGS = [
    V(C.Diagonal(X, o, a1, a2), only_x, lambda x, o=o, a1=a1, a2=a2: torch.diagonal(x, o, a1, a2))
    for o, a1, a2 in ((0, 0, 1), (1, 0, 1), (-2, 2, 0), (0, 2, 1), (7, 0, 1), (1, 1, 2), (-1, 0, 2))
]

SCATTER = [
    *case("index_put", INDEX_PUT, vals(4, 5), *PUT_INPUTS, dtypes=(F32, F16, BF16, I64, BOOL)),
    *case(
        "index_put_accumulate",
        INDEX_PUT_ACC,
        vals(4, 5),
        *PUT_INPUTS,
        dtypes=(F32, F16, BF16, F64, I64, I32),
        fast=(F16,),
    ),
    *case("index_put_accumulate_bool", INDEX_PUT_ACC, plain(4, 5), *PUT_INPUTS, dtypes=(BOOL,), fast=()),
    *case(
        "index_put_3d",
        INDEX_PUT_3D,
        vals(3, 4, 5),
        fixed(torch.tensor([0, 2])),
        fixed(torch.tensor([4, -4])),
        dtypes=(F32, I64),
    ),
    *case(
        "scatter",
        SCATTERS + SCATTER_VALUE,
        vals(4, 5),
        fixed(SCATTER_IDX),
        plain(3, 5, seed=2),
        dtypes=(F32, F16, BF16, I64, BOOL),
        fast=(I64,),
    ),
    *case(
        "scatter_reduce",
        REDUCES + REDUCES_AXIS1,
        vals(4, 5),
        fixed(REP_IDX),
        vals(5, 5, seed=2),
        dtypes=(F32, F64, BF16, I64),
    ),
    *case("scatter_reduce_f16", REDUCES, plain(4, 5), fixed(REP_IDX), plain(5, 5, seed=2), dtypes=(F16,), fast=()),
    *case(
        "scatter_reduce_bool", BOOL_REDUCES, plain(4, 5), fixed(REP_IDX), plain(5, 5, seed=2), dtypes=(BOOL,), fast=()
    ),
    # NaN in x and in src at repeated positions, with and without self.
    *case(
        "scatter_reduce_nan",
        REDUCES,
        fixed(torch.tensor([[1.0, NAN, 3.0], [4.0, 5.0, 6.0]])),
        fixed(torch.tensor([[1, 0, 0], [0, 0, 1]])),
        fixed(torch.tensor([[NAN, 2.0, 7.0], [-1.0, NAN, 0.0]])),
    ),
    # Thousands of float16 values summed into three slots (PyTorch rounds each add to float16).
    *case(
        "accumulate_f16_long",
        [
            put_v(lambda x, i, v: [i], lambda x, i, v: v, True),
            scatter_v(0, lambda x, i, v: v, "sum"),
            scatter_v(0, lambda x, i, v: v, "mean"),
        ],
        fixed(torch.zeros(3, dtype=F16)),
        fixed(torch.randint(0, 3, (3000,), generator=_gen(5))),
        fixed(torch.rand(3000, generator=_gen(6)).to(F16)),
        dtypes=(F16,),
    ),
    *case("diagonal", DIAGS, vals(3, 4, 5), dtypes=(F32, BF16, I64, BOOL), fast=(BOOL,)),
]


@pytest.mark.parametrize("variants,makers,dt,tol", ORDERING + RESAMPLE + SCATTER)
def test_kernels_match_numpy_and_torch(variants: list[V], makers: tuple, dt: torch.dtype, tol: tuple | None) -> None:
    t_inputs = [m(dt) for m in makers]
    n_inputs = [tensor_to_numpy(t) for t in t_inputs]
    operands = [v.operands(*n_inputs) for v in variants]
    calls = [v.call if isinstance(v.call, Call) else v.call(ops) for v, ops in zip(variants, operands)]
    got = run_jax(calls, operands)
    for v, call, ops, g in zip(variants, calls, operands, got):
        with np.errstate(all="ignore"):
            want = np.asarray(KERNELS[call.op](call, *ops))
        assert_same_bits(g, want, repr(call), v.ulps)
        if v.torch is None:
            continue
        with torch.no_grad():
            ref = tensor_to_numpy(v.torch(*t_inputs).contiguous())
        mine = g if v.view is None else v.view(g, *n_inputs)
        rtol, atol = tol or (None, None)
        assert_arrays_match(mine, ref, f"{call} vs PyTorch", rtol, atol)
        # And the sign of every zero (not of top-k values: PyTorch picks among tied ±0 its own way).
        if v.view is None and (mine.dtype.kind == "f" or mine.dtype == dtypes.to_numpy("bf16")):
            zero = (mine.astype(np.float64) == 0) & (ref.astype(np.float64) == 0)
            np.testing.assert_array_equal(
                np.signbit(mine[zero].astype(np.float64)),
                np.signbit(ref[zero].astype(np.float64)),
                f"{call}: signed zeros",
            )


# ── lowered programs ─────────────────────────────────────────────────────────
OURS = (C.ArgSort, C.ArgTopK, C.CumReduce, C.Flip, C.Roll, C.Upsample, C.GridSample, C.IndexPut, C.Scatter, C.Diagonal)


def interp(**kw: Any) -> Callable:
    return lambda x, *rest: F.interpolate(x, **kw)


ORDER_FNS = [lambda x: torch.sort(x, -1), lambda x: torch.sort(x, dim=0, descending=True, stable=True),
             lambda x: torch.topk(x, 3), lambda x: torch.cumsum(x, 1), lambda x: torch.cummax(x, 0),
             lambda x: torch.rot90(x), lambda x: x.roll((1, -2), (0, 1)), lambda x: torch.median(x, 0)]  # fmt: skip
RESAMPLE_FNS = [interp(scale_factor=2), interp(scale_factor=1.5, mode="nearest-exact"),
                interp(scale_factor=1.5, mode="bilinear"), interp(size=(9, 4), mode="bilinear", align_corners=True),
                interp(scale_factor=0.5, mode="bilinear", antialias=True), interp(scale_factor=1.7, mode="bicubic"),
                lambda x, g: F.grid_sample(x, g, padding_mode="reflection"),
                lambda x, g: F.grid_sample(x, g, mode="nearest", align_corners=True),
                lambda x, g: F.grid_sample(x, g, mode="bicubic", padding_mode="border")]  # fmt: skip


def _setitem(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[:, i[:2]] = 7
    y[x > 0] = -1
    return y


SCATTER_FNS = [lambda x, i: x.index_put((i,), x[0] * 2), lambda x, i: x.index_put((i,), x[1], accumulate=True),
               _setitem, lambda x, i: x.index_add(1, i, x[:, :3]), lambda x, i: x.index_fill(0, i[:2], -2),
               lambda x, i: x.scatter_add(0, i[None].expand(2, 3) % 4, x[:2, :3]),
               lambda x, i: x.scatter_reduce(1, (x.abs() * 2).long() % 5, x, "amax", include_self=False),
               lambda x, i: x.masked_scatter(x > 1, x * 10), lambda x, i: torch.slice_scatter(x, x[:1] * 2, 0, 0, 1),
               lambda x, i: torch.diagonal(x), lambda x, i: torch.diag(x[0], 1), lambda x, i: torch.diag_embed(x[:2])]  # fmt: skip


def distinct_specials(dt: torch.dtype) -> torch.Tensor:
    """Distinct values (PyTorch's unstable sorts and top-k pick tied indices its own way), with
    NaN, +inf and -inf at most once per row and column for floats."""
    t = distinct(4, 6)(dt).clone()
    if dt.is_floating_point:
        for (r, c), v in {(0, 1): NAN, (1, 2): INF, (1, 4): -INF, (2, 0): NAN, (2, 3): INF, (3, 5): -INF}.items():
            t[r, c] = v
    return t


PROGRAMS = [
    pytest.param(*sweep(ORDER_FNS, [distinct_specials], (F32,)), "high", id="ordering"),
    pytest.param(*sweep(ORDER_FNS, [distinct_specials], (I64, BF16)), "high", id="ordering-int64-bf16", marks=SLOW),
    # Bicubic upsampling stays one aten op at the aten level only (high/core decompose it).
    pytest.param(
        *sweep(RESAMPLE_FNS, [uniform(2, 3, 5, 7, planted=True), uniform(2, 4, 6, 2, low=-1.6, high=1.6)], (F32,)),
        "aten",
        id="resample",
    ),
    # PyTorch's CPU antialiasing takes float32/float64 only.
    pytest.param(
        *sweep(
            [f for k, f in enumerate(RESAMPLE_FNS) if k not in (4, 5)],
            [uniform(2, 3, 5, 7), uniform(2, 4, 6, 2, low=-1.6, high=1.6)],
            (F16,),
        ),
        "high",
        id="resample-f16",
        marks=SLOW,
    ),
    pytest.param(*sweep(SCATTER_FNS, [plain(4, 5), fixed(torch.tensor([3, 0, 2]))], (F32,)), "high", id="scatter"),
    pytest.param(
        *sweep(SCATTER_FNS, [plain(4, 5), fixed(torch.tensor([3, 0, 2]))], (I64,)),
        "high",
        id="scatter-int64",
        marks=SLOW,
    ),
]


@pytest.mark.parametrize("fn,inputs,level", PROGRAMS)
def test_lowered_programs(fn: Callable, inputs: tuple, level: str) -> None:
    module = as_module(fn).eval()
    with torch.no_grad():
        want = pytree.tree_flatten(module(*inputs))[0]
    numpy_model, program, _ = convert(module, inputs, decomposition=level)
    n_inputs = [tensor_to_numpy(t) for t in inputs]
    assert any(isinstance(ins.call, OURS) for ins in program.instrs)

    # The whole program as one jax.jit, against PyTorch.
    model = Model(program, numpy_model.weights, engine="jax")
    got = pytree.tree_flatten(model(*n_inputs))[0]
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_arrays_match(g, tensor_to_numpy(w), f"[{level}] output {k}")

    # Instruction by instruction on the numpy engine's values: our Calls give the same bits in JAX.
    env: dict[str, np.ndarray] = {v.name: a for v, a in zip(program.inputs, n_inputs)}
    env.update(numpy_model.weights)
    mine, operands = [], []
    with np.errstate(all="ignore"):
        for ins in program.instrs:
            ops = [resolve_operand(getattr(ins.call, f), env) for f in ins.call.operand_fields()]
            env[ins.result] = np.asarray(KERNELS[ins.call.op](ins.call, *ops)).astype(dtypes.to_numpy(ins.dtype))
            if isinstance(ins.call, OURS):
                mine.append(ins)
                operands.append(ops)
    for ins, g in zip(mine, run_jax([ins.call for ins in mine], operands)):
        assert_same_bits(g.astype(dtypes.to_numpy(ins.dtype)), env[ins.result], f"{ins.result} = {ins.call}")
