"""Ordering and scan ops against eager PyTorch: topk, sort/argsort/msort, kthvalue/median/nanmedian/mode,
cumsum/cumprod/logcumsumexp/cummax/cummin, flip/rot90/roll, tril/triu, repeat/tile/repeat_interleave, fill.

Tie rule: rlx sorts stably everywhere, so among equal values the lowest index comes first (in
descending order too) and NaN is the largest value. PyTorch guarantees that order only for
``sort(stable=True)``; for its unstable forms the index among ties is whatever its introsort or
``nth_element`` leaves. So indices of unstable ops are checked on distinct values, values on ties,
and the known differences stay below as strict xfails.

As in test_shape, one case is one export running a list of variants over every swept dtype.
"""

import math

import pytest
import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

from rlx.errors import RlxError
from rlx.frontends.torch.tensors import tensor_to_numpy

from helpers import (
    LEVELS,
    as_module,
    assert_arrays_match,
    assert_converts_and_matches,
    convert,
    rand,
    sweep,
    with_specials,
)

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
I32, I64, BOOL = torch.int32, torch.int64, torch.bool
HIGH = ("high",)
FLOATS = (F16, BF16, F64)  # the float sweep beside the F32 case that runs at every level
NUMBERS = FLOATS + (I64, I32)
NAN, INF = float("nan"), float("inf")


# ── inputs ───────────────────────────────────────────────────────────────────
def _gen(seed):
    return torch.Generator().manual_seed(seed)


def distinct(*shape, seed=0):
    """Distinct integers centred on 0 (exact in every dtype for up to 512 entries), any dtype.

    Inputs are fresh tensors, never views (``.clone()``): rlx capture fails on view inputs at high/core.
    """
    n = math.prod(shape)
    return lambda dt: (torch.randperm(n, generator=_gen(seed)) - n // 2).reshape(shape).to(dt).clone()


def ties(*shape, high=3, seed=0):
    """Values in 0..high-1: lots of equal entries."""
    return lambda dt: torch.randint(0, high, shape, generator=_gen(seed)).to(dt)


def specials(*shape, seed=0):
    """Distinct values with NaN, +inf and -inf planted, at most one of each per lane of either axis."""

    def make(dt):
        t = distinct(*shape, seed=seed)(dt).clone()
        for (r, c), v in {(0, 1): NAN, (1, 2): INF, (1, 4): -INF, (2, 0): NAN, (2, 3): INF, (3, 5): -INF}.items():
            t[r, c] = v
        return t

    return make


def nans(*shape, seed=0):
    """Ties with repeated NaN, ±inf and ±0 in the same lanes."""

    def make(dt):
        t = ties(*shape, seed=seed)(dt).clone()
        flat = t.view(-1)
        flat[::7], flat[3::11], flat[5::13], flat[2::9], flat[4::10] = NAN, INF, -INF, -0.0, 0.0
        return t

    return make


def specials3(dt):
    return specials(4, 6)(dt).reshape(2, 2, 6).clone()


def nan_rows(*shape, seed=0):
    """``nans`` with a NaN in the first five entries of every row."""

    def make(dt):
        t = nans(*shape, seed=seed)(dt)
        for i in range(shape[0]):
            t[i, i % 5] = NAN
        return t

    return make


def fixed(t):
    return lambda dt: t


def case(name, variants, *makers, dtypes=(F32,), levels=HIGH, marks=()):
    """``variants``: one callable or a list, all taking one tensor per maker; each maker turns a
    swept dtype into an input. Outputs of all variants over all dtypes are compared at once."""
    run, data = sweep(variants, makers, dtypes)
    return pytest.param(run, data, levels, id=name, marks=marks)


def on_0d(variants):
    """Variants applied to ``x[0]``: a 0-d tensor computed in the graph, not a graph input."""
    return [lambda x, f=f: f(x[0]) for f in variants]


def xfail(reason):
    return pytest.mark.xfail(reason=reason, strict=True)


# ── sorting and selection ────────────────────────────────────────────────────
TOPK = [
    lambda x: torch.topk(x, 3),
    lambda x: torch.topk(x, 2, dim=0),
    lambda x: torch.topk(x, 1, -1, largest=False),
    lambda x: torch.topk(x, 4, dim=-2, largest=False, sorted=True),
    lambda x: x.topk(6),
    lambda x: x.topk(0, 1),
]
# sorted=False: PyTorch does not fix the order, so compare the chosen set (sorted afterwards).
TOPK_UNSORTED = [
    lambda x: torch.sort(torch.topk(x, 5, sorted=False).values).values,
    lambda x: torch.sort(torch.topk(x, 5, sorted=False).indices).values,
    lambda x: torch.sort(torch.topk(x, 3, dim=0, largest=False, sorted=False).indices, dim=0).values,
]
# a few out of long lanes (8k <= n, 2048+ elements): the numpy engine partitions instead of sorting
LONG_TOPK = [
    lambda x: torch.topk(x, 5),
    lambda x: torch.topk(x, 3, largest=False),
    lambda x: torch.topk(x, 4, 0),
]
LONG_TOPK_VALUES = [lambda x: torch.topk(x, 6).values, lambda x: torch.topk(x, 4, 0, largest=False).values]
SORTS = [
    lambda x: torch.sort(x),
    lambda x: torch.sort(x, 0, True),
    lambda x: x.sort(dim=-1, descending=True),
    lambda x: torch.argsort(x),
    lambda x: torch.argsort(x, 0, descending=True),
    lambda x: torch.msort(x),
]
STABLE = [
    lambda x: torch.sort(x, stable=True),
    lambda x: torch.sort(x, dim=0, descending=True, stable=True),
    lambda x: torch.argsort(x, descending=True, stable=True),
    lambda x: torch.argsort(x, dim=0, stable=True),
]
VALUES_ON_TIES = [
    lambda x: torch.sort(x).values,
    lambda x: torch.sort(x, descending=True).values,
    lambda x: torch.topk(x, 7).values,
    lambda x: torch.topk(x, 3, 0, largest=False).values,
    lambda x: torch.kthvalue(x, 11).values,
    lambda x: torch.median(x, 1).values,
    lambda x: torch.median(x),
    lambda x: torch.mode(x, 0).values,
]
KTH = [
    lambda x: torch.kthvalue(x, 1),
    lambda x: torch.kthvalue(x, 7, 1),
    lambda x: torch.kthvalue(x, 3, 0, keepdim=True),
    lambda x: x.kthvalue(2, -1),
    lambda x: torch.median(x, 1),
    lambda x: torch.median(x, 0, keepdim=True),
    lambda x: torch.median(x[:, :6], -1),
    lambda x: torch.median(x),
]
INT64_BIG = torch.tensor(
    [
        [2**53 + 1, 2**53, 2**53 + 3, -(2**63), 2**63 - 1, 2**53 + 2, -(2**53) - 1, -(2**53)],
        [7, 2**62 + 1, 2**62, 2**62 + 1, -1, 2**62 - 1, 0, 2**62],
    ]
)

SORTING = [
    case("topk", TOPK, distinct(4, 6), levels=LEVELS),
    case("topk_dtypes", TOPK, distinct(4, 6), dtypes=NUMBERS),
    case("topk_specials", TOPK, specials(4, 6), dtypes=(F32, F16, BF16, F64)),
    case("topk_unsorted", TOPK_UNSORTED, distinct(4, 10), dtypes=(F32, I64), levels=LEVELS),
    case("topk_long_lanes", LONG_TOPK, distinct(40, 64), dtypes=(F32, F64, I64, I32)),  # (no ties in 2560)
    case("topk_long_lanes_ties", LONG_TOPK_VALUES, ties(40, 64), dtypes=(F32, I64)),
    case("topk_long_lanes_nan", LONG_TOPK_VALUES, nans(40, 64)),
    case("sort", SORTS, distinct(4, 6), levels=LEVELS),
    case("sort_dtypes", SORTS, distinct(4, 6), dtypes=NUMBERS),
    case("sort_specials", SORTS, specials(4, 6), dtypes=(F32, F16, BF16, F64)),
    # Equal values (rows longer than 16, where PyTorch's default sort stops being stable).
    case("sort_stable_ties", STABLE, ties(4, 20), levels=LEVELS),
    case("sort_stable_ties_dtypes", STABLE, ties(4, 20), dtypes=NUMBERS + (BOOL,)),
    case("sort_stable_nan_inf_zero", STABLE, nans(4, 20), dtypes=(F32, F16, BF16, F64)),
    case("values_on_ties", VALUES_ON_TIES, ties(21, 21), dtypes=(F32, I64)),
    case("values_on_ties_nan", VALUES_ON_TIES[:4], nans(21, 21)),
    # int64 beyond 2^53 must sort exactly (no detour through float64).
    case(
        "sort_int64_big",
        [
            lambda x: torch.sort(x, stable=True),
            lambda x: torch.sort(x, descending=True, stable=True),
            lambda x: torch.topk(x, 3, largest=False),
            lambda x: torch.argsort(x, dim=0, stable=True),
            lambda x: torch.kthvalue(x, 4),
            lambda x: torch.median(x, 1),
        ],
        fixed(INT64_BIG),
        dtypes=(I64,),
        levels=LEVELS,
    ),
    case(
        "sort_int32_extremes",
        [lambda x: torch.sort(x, stable=True), lambda x: torch.topk(x, 2, largest=False)],
        fixed(torch.tensor([[2**31 - 1, -(2**31), 0, 2**31 - 2, -(2**31) + 1]], dtype=I32)),
        dtypes=(I32,),
    ),
    case(
        "sort_size1_axes",
        [
            lambda x: torch.sort(x, 0),
            lambda x: torch.topk(x, 1, 0),
            lambda x: torch.argsort(x, 0),
            lambda x: torch.kthvalue(x, 1, 0),
            lambda x: torch.median(x, 0),
            lambda x: torch.sort(x, 1),
            lambda x: torch.msort(x[0]),
        ],
        distinct(1, 5),
        dtypes=(F32, I64),
    ),
    case(
        "sort_0d",
        on_0d(
            [
                lambda x: torch.sort(x),
                lambda x: torch.argsort(x),
                lambda x: torch.topk(x, 1),
                lambda x: torch.kthvalue(x, 1),
                lambda x: torch.median(x, 0),
                lambda x: torch.median(x),
                lambda x: torch.mode(x),
                lambda x: torch.sort(x, dim=-1, descending=True, stable=True),
                lambda x: torch.nanmedian(x, 0),
            ]
        ),
        fixed(torch.tensor([2.5])),
        levels=LEVELS,
    ),
    case(
        "sort_empty",
        [lambda x: torch.sort(x, 1), lambda x: torch.topk(x, 0, 1), lambda x: torch.argsort(x, 0)],
        fixed(torch.empty(3, 0)),
    ),
    case("kthvalue_median", KTH, distinct(4, 7), levels=LEVELS),
    case("kthvalue_median_dtypes", KTH, distinct(4, 7), dtypes=NUMBERS),
    # One NaN per lane is distinct from everything: kthvalue counts it as the largest.
    case(
        "kthvalue_nan",
        [lambda x: torch.kthvalue(x, 6), lambda x: torch.kthvalue(x, 4, 0)],
        specials(4, 6),
        dtypes=(F32, F16, BF16, F64),
    ),
    # median returns a lane's first NaN (value and index), however many there are.
    case(
        "median_nan",
        [lambda x: torch.median(x, 1), lambda x: torch.median(x), lambda x: torch.median(x[:, :5], 1)],
        nan_rows(6, 20),
        dtypes=(F32, F16, BF16, F64),
    ),
    case(
        "nanmedian",
        [
            lambda x: torch.nanmedian(x, 1),
            lambda x: torch.nanmedian(x, 0, keepdim=True),
            lambda x: torch.nanmedian(x),
            lambda x: torch.nanmedian(x[:, :5], -1),
        ],
        specials(4, 6),
        dtypes=(F32, F16, BF16, F64),
        levels=LEVELS,
    ),
    case(
        "nanmedian_all_nan_values",
        [lambda x: torch.nanmedian(x, 1).values, lambda x: torch.nanmedian(x[1:], 1)],
        fixed(torch.tensor([[NAN, NAN, NAN], [NAN, 2.0, 1.0]])),
        dtypes=(F32,),
    ),
    case(
        "nanmedian_int",
        [lambda x: torch.nanmedian(x, 1), lambda x: torch.nanmedian(x)],
        distinct(3, 6),
        dtypes=(I64, I32),
    ),
    # Lanes of up to 16 entries: PyTorch's index is the last occurrence of the mode there.
    case(
        "mode",
        [
            lambda x: torch.mode(x),
            lambda x: torch.mode(x, 0),
            lambda x: torch.mode(x, -1, keepdim=True),
            lambda x: torch.mode(x[:, :1], 1),
        ],
        ties(5, 16, high=4),
        levels=LEVELS,
    ),
    case(
        "mode_dtypes",
        [lambda x: torch.mode(x, 1), lambda x: torch.mode(x, 0)],
        ties(6, 9, high=3),
        dtypes=NUMBERS + (BOOL,),
    ),
]

# ── scans ────────────────────────────────────────────────────────────────────
SCANS = [
    lambda x: torch.cumsum(x, 1),
    lambda x: torch.cumsum(x, 0),
    lambda x: torch.cumprod(x, -1),
    lambda x: torch.cumprod(x, 0),
    lambda x: torch.cummax(x, 1),
    lambda x: torch.cummin(x, 0),
    lambda x: torch.cummax(x, -2),
    lambda x: torch.cummin(x, -1),
]
LOGCUMSUMEXP = [lambda x: torch.logcumsumexp(x, 1), lambda x: torch.logcumsumexp(x, 0)]
LCSE_EDGES = torch.tensor(
    [
        [-INF, -INF, 1.0, INF, INF, -INF, 2.0],
        [NAN, 0.0, -INF, 3.0, INF, -INF, INF],
        [80.0, 90.0, -80.0, 1e-3, 88.0, -INF, 0.5],
    ]
)

SCAN_CASES = [
    case("scans", SCANS, specials(4, 6), levels=LEVELS),
    case("scans_dtypes", SCANS, ties(4, 6, high=4), dtypes=NUMBERS),
    case(
        "scans_bool",
        [
            lambda x: torch.cumsum(x, 1),
            lambda x: torch.cumprod(x, 0),
            lambda x: torch.cummax(x, 1),
            lambda x: torch.cummin(x, 0),
        ],
        ties(4, 6, high=2),
        dtypes=(BOOL,),
    ),
    # cummax/cummin move to the last of equal extremes; a NaN takes over and every later NaN moves it.
    case("cummax_ties_nan", SCANS[4:], nans(5, 20), dtypes=(F32, F16, BF16, F64)),
    case("cummax_ties_int", SCANS[4:], ties(5, 20), dtypes=(I64, I32)),
    # dtype= casts the input first; integers and bools accumulate as int64 unless told otherwise.
    case(
        "scan_dtype_arg",
        [
            lambda x, i: torch.cumsum(x, 1, dtype=F64),
            lambda x, i: torch.cumprod(x, 0, dtype=F64),
            lambda x, i: torch.cumsum(x, 1, dtype=I64),
            lambda x, i: torch.cumsum(i, 0, dtype=I32),
            lambda x, i: torch.cumsum(i, 1, dtype=F16),
            lambda x, i: torch.cumprod(i.to(torch.uint8), 1),
            lambda x, i: torch.cumsum(i.to(torch.int8), 0),
        ],
        fixed(torch.linspace(-4, 4, 24).reshape(4, 6).clone()),
        fixed(ties(4, 6, high=5)(I64)),
        levels=LEVELS,
    ),
    # Long float sums: PyTorch's CPU kernel accumulates float32 in float64 and halves in float32.
    case(
        "cumsum_long",
        [lambda x: torch.cumsum(x, 0), lambda x: torch.cumsum(x, 0, dtype=F16)],
        lambda dt: (torch.rand(4000, generator=_gen(3)) * 3).to(dt),
        dtypes=(F32, F16, BF16),
    ),
    case("logcumsumexp", LOGCUMSUMEXP, specials(4, 6), dtypes=(F32, F64, F16, BF16), levels=LEVELS),
    case("logcumsumexp_edges", LOGCUMSUMEXP, fixed(LCSE_EDGES), dtypes=(F32,)),
    # Additive scans start from +0 in PyTorch: a lane opening with -0 gives +0 (1/x shows the sign).
    case(
        "scans_signed_zero",
        [lambda x: 1 / torch.cumsum(x, 1), lambda x: 1 / torch.logcumsumexp(x, 1), lambda x: 1 / torch.cumprod(x, 1)],
        fixed(torch.tensor([[-0.0, -0.0, 1.0], [-0.0, 2.0, -2.0]])),
        dtypes=(F32,),
        levels=LEVELS,
    ),
    case(
        "scans_0d",
        on_0d(
            [
                lambda x: torch.cumsum(x, 0),
                lambda x: torch.cumprod(x, -1),
                lambda x: torch.cummax(x, 0),
                lambda x: torch.cummin(x, 0),
                lambda x: torch.logcumsumexp(x, 0),
                lambda x: torch.cumsum(x, 0, dtype=F64),
            ]
        ),
        fixed(torch.tensor([-1.5])),
        levels=LEVELS,
    ),
    case(
        "scans_empty",
        [lambda x: torch.cumsum(x, 1), lambda x: torch.cummax(x, 1), lambda x: torch.cumprod(x, 0)],
        fixed(torch.empty(2, 0)),
    ),
    case(
        "scans_inplace_aten",
        [lambda x: x.clone().cumsum_(1), lambda x: x.clone().cumprod_(0)],
        specials(4, 6),
        levels=("aten",),
    ),
]

# ── data movement ────────────────────────────────────────────────────────────
FLIPS = [
    lambda x: x.flip(0, 1),
    lambda x: torch.flip(x, (-1,)),
    lambda x: x.flip(()),
    lambda x: torch.fliplr(x),
    lambda x: torch.flipud(x),
    lambda x: torch.rot90(x),
    lambda x: torch.rot90(x, 2),
    lambda x: torch.rot90(x, -1, (1, 0)),
    lambda x: torch.rot90(x, 4),
    lambda x: torch.rot90(x, 3, (0, 2)),
]
ROLLS = [
    lambda x: x.roll(2, 1),
    lambda x: x.roll((1, -2), (0, 2)),
    lambda x: torch.roll(x, -7),
    lambda x: x.roll(0, 0),
    lambda x: x.roll(13, -1),
    lambda x: x.roll((4, 1, -9), (2, 0, 1)),
    lambda x: x.roll(3, 1),
]
TRIS = [
    lambda x: x.tril(),
    lambda x: x.triu(1),
    lambda x: torch.tril(x, -2),
    lambda x: torch.triu(x, -10),
    lambda x: torch.tril(x, 10),
    lambda x: x[0].triu(),
    lambda x: x[:, :1].tril(),
]
REPEATS = [
    lambda x: x.repeat(2, 1, 3),
    lambda x: x.repeat(1, 1, 1),
    lambda x: x.repeat(0, 2, 1),
    lambda x: x.repeat(2, 1, 1, 2),
    lambda x: x[0, 0].repeat(3),
    lambda x: torch.tile(x, (2,)),
    lambda x: x.tile((2, 1, 2, 1)),
    lambda x: x.repeat_interleave(2, 1),
    lambda x: x.repeat_interleave(3),
    lambda x: torch.repeat_interleave(x, 1, dim=0),
    lambda x: x.repeat_interleave(2, dim=-1),
]

MOVES = [
    case("flip_rot90", FLIPS, specials3, levels=LEVELS),
    case("flip_rot90_dtypes", FLIPS, ties(2, 3, 4), dtypes=(I64, BOOL, BF16)),
    case("roll", ROLLS, ties(3, 4, 5, high=9), dtypes=(F32, I64), levels=LEVELS),
    case("roll_dtypes", ROLLS, ties(3, 4, 5, high=9), dtypes=(BOOL, F16)),
    case(
        "move_0d",
        on_0d(
            [
                lambda x: x.flip(0),
                lambda x: x.roll(1),
                lambda x: x.repeat(2, 3),
                lambda x: x.tile((2,)),
                lambda x: x.repeat_interleave(3),
            ]
        ),
        fixed(torch.tensor([3.0])),
        levels=LEVELS,
    ),
    # Values outside the triangle are zeroed even when they are NaN or inf.
    case("tril_triu", TRIS, specials3, levels=LEVELS),
    case("tril_triu_dtypes", TRIS, ties(2, 4, 3), dtypes=(I64, BOOL, F16, BF16)),
    case(
        "tril_inplace_aten",
        [lambda x: x.clone().tril_(1), lambda x: x.clone().triu_()],
        specials(4, 6),
        levels=("aten",),
    ),
    case("repeat_tile", REPEATS, specials(4, 6), levels=LEVELS),
    case("repeat_tile_dtypes", REPEATS, ties(2, 3), dtypes=(I64, BOOL, F16)),
    # A tensor of counts needs output_size= (export cannot size the result otherwise).
    case(
        "repeat_interleave_tensor",
        [
            lambda x, r, s: x.repeat_interleave(r, dim=0, output_size=9),
            lambda x, r, s: torch.repeat_interleave(r, output_size=9),
            lambda x, r, s: x.repeat_interleave(s, dim=1, output_size=12),
            lambda x, r, s: x[:3, 0].repeat_interleave(r[:3].to(I32), output_size=3),
            lambda x, r, s: x[0].repeat_interleave(s[0], output_size=12),
        ],
        specials(4, 6),
        fixed(torch.tensor([1, 2, 0, 6])),
        fixed(torch.tensor([2])),
        levels=LEVELS,
    ),
    case(
        "fill_aten",
        [
            lambda x, v: x.clone().fill_(2.7),
            lambda x, v: torch.fill(x, -1),
            lambda x, v: torch.fill(x, v),
            lambda x, v: x.clone().fill_(v),
        ],
        specials(4, 6),
        fixed(torch.tensor(-3.5)),
        levels=("aten",),
    ),
    case(
        "fill_aten_dtypes",
        [lambda x: x.clone().fill_(2.7), lambda x: torch.fill(x, 0), lambda x: x.clone().fill_(True)],
        ties(2, 3),
        dtypes=(I64, BOOL, F16),
        levels=("aten",),
    ),
]

# ── known differences: strict, so a change in PyTorch or a fix shows up as an XPASS ─────
XFAILS = [
    case(
        "topk_unsorted_raw_order",
        lambda x: torch.topk(x, 5, sorted=False),
        distinct(4, 10),
        marks=xfail(
            "topk(sorted=False): CPU PyTorch returns std::nth_element's partition order; rlx returns the "
            "sorted order, which PyTorch also allows"
        ),
    ),
    case(
        "sort_unstable_tie_indices",
        lambda x: torch.sort(x, descending=True).indices,
        ties(4, 40),
        marks=xfail(
            "sort without stable=True: PyTorch's index order among ties (rows > 16) comes from its "
            "introsort; rlx sorts stably"
        ),
    ),
    case(
        "topk_tie_indices",
        lambda x: torch.topk(x, 5).indices,
        ties(4, 40),
        marks=xfail(
            "topk among ties: PyTorch's indices come from nth_element/partial_sort; rlx takes the lowest index first"
        ),
    ),
    case(
        "kthvalue_tie_indices",
        lambda x: torch.kthvalue(x, 20, 1).indices,
        ties(3, 40),
        marks=xfail("kthvalue among ties: PyTorch's index comes from quickselect; rlx takes the lowest index"),
    ),
    case(
        "mode_long_lane_index",
        lambda x: torch.mode(x, 1).indices,
        ties(3, 40),
        marks=xfail(
            "mode on lanes > 16: PyTorch's index is the last of the run after an unstable std::sort; "
            "rlx returns the last occurrence (PyTorch's answer for lanes of up to 16)"
        ),
    ),
    case(
        "nanmedian_all_nan_index",
        lambda x: torch.nanmedian(x, 1).indices,
        fixed(torch.tensor([[NAN, NAN, NAN, NAN, NAN]])),
        marks=xfail("nanmedian of an all-NaN lane: PyTorch's index is nth_element's pick; rlx returns the first"),
    ),
]

ALL = (
    SORTING
    + SCAN_CASES
    + MOVES
    + XFAILS
    + [
        # A 0-d input returned unchanged (cumsum of a scalar) keeps its 0-d shape through the runtime.
        case("scan_0d_input_passthrough", lambda x: torch.cumsum(x, 0), fixed(torch.tensor(-1.5)), levels=("aten",)),
    ]
)


@pytest.mark.parametrize("fn,inputs,levels", ALL)
def test_matches_torch(fn, inputs, levels):
    assert_converts_and_matches(fn, inputs, levels=levels)


# The ONNX emitter's own scans (a running extreme over lower-triangular lanes), on onnxruntime: a
# NaN takes over the running extreme (onnxruntime's ReduceMax skips it), additive scans start from
# +0 and products keep the sign of -0 (onnxruntime's optimizer drops an Add of zero, and its Where
# turns a -0 taken from its first choice into +0).
ON_ONNXRUNTIME = [p for p in ALL if p.id in ("scans", "cummax_ties_nan", "cummax_ties_int", "scans_signed_zero")]


@pytest.mark.parametrize("fn,inputs,levels", ON_ONNXRUNTIME)
def test_on_onnxruntime(fn, inputs, levels):
    pytest.importorskip("onnxruntime")
    assert_converts_and_matches(fn, inputs, levels=levels, engine="onnxruntime")


def test_repeat_interleave_tensor_without_output_size_is_a_typed_error():
    with pytest.raises(RlxError, match="output_size"):
        convert(lambda x, r: x.repeat_interleave(r, dim=0), [torch.randn(3, 2), torch.tensor([1, 2, 0])])


# One export with the sorted/scanned axis dynamic, run at several extents: static ranks, symbolic
# extents (median's middle position, the flattened roll, Arange-built triangles).
DYNAMIC = [
    lambda x: torch.topk(x, 2, dim=0),
    lambda x: torch.sort(x, dim=0, descending=True, stable=True),
    lambda x: torch.kthvalue(x, 2, 0),
    lambda x: torch.median(x, 0),
    lambda x: torch.median(x),
    lambda x: torch.nanmedian(x, 0),
    lambda x: torch.mode(x.round(), 1),
    lambda x: torch.cumsum(x, 0),
    lambda x: torch.cummax(x, 0),
    lambda x: x.flip(0),
    lambda x: x.roll(2, 0),
    lambda x: x.roll(3),
    lambda x: x.tril(1),
    lambda x: x.t().triu(),
    lambda x: x.repeat(2, 3),
    lambda x: x.repeat_interleave(2, 0),
]


def test_dynamic_axis():
    module = as_module(lambda x: tuple(f(x) for f in DYNAMIC))
    model, program, _ = convert(module, [rand((5, 6))], dynamic_shapes=(({0: Dim("batch", min=2, max=32)},),))
    assert program.is_dynamic
    for n in (2, 3, 8):
        x = with_specials(rand((n, 6), seed=n))
        want, _ = pytree.tree_flatten(module(x))
        got, _ = pytree.tree_flatten(model(tensor_to_numpy(x)))
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_arrays_match(g, tensor_to_numpy(w), f"batch={n} output {i}")
