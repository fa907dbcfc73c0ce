"""Scatter ops against eager PyTorch: index_put (+ setitem), index_copy/index_add/index_fill,
slice_scatter/select_scatter, scatter/scatter_add/scatter_reduce, masked_scatter, diagonal/diag/diag_embed.

Plain (non-accumulating) writes use unique indices: with repeats PyTorch's survivor is unspecified.
Accumulating writes (accumulate=True, scatter_add, scatter_reduce, index_add) use repeated indices.
As in test_ordering, one case is one export running a list of variants over every swept dtype.
"""

import pytest
import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

from rlx.errors import RlxError
from rlx.frontends.torch.tensors import tensor_to_numpy

from helpers import LEVELS, as_module, assert_arrays_match, assert_converts_and_matches, convert, rand, sweep

F16, F32, F64 = torch.float16, torch.float32, torch.float64
I32, I64, BOOL = torch.int32, torch.int64, torch.bool
HIGH = ("high",)
NAN, INF = float("nan"), float("inf")


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def vals(*shape, seed=0):
    """Small integers (exact in every dtype), with NaN/inf planted for floats."""

    def make(dt):
        t = torch.randint(-5, 6, shape, generator=_gen(seed)).to(dt)
        if dt.is_floating_point and t.numel() > 3:
            t.view(-1)[1], t.view(-1)[2] = NAN, INF
        return t

    return make


def plain(*shape, seed=1):
    """Small integers without specials, any dtype (bools too)."""
    return lambda dt: (
        torch.randint(0, 2, shape, generator=_gen(seed)).bool()
        if dt == BOOL
        else torch.randint(-5, 6, shape, generator=_gen(seed)).to(dt)
    )


def fixed(t):
    return lambda dt: t


def case(name, variants, *makers, dtypes=(F32,), levels=HIGH, marks=()):
    """``variants`` take one tensor per maker; each maker turns a swept dtype into an input."""
    run, data = sweep(variants, makers, dtypes)
    return pytest.param(run, data, levels, id=name, marks=marks)


def xfail(reason):
    return pytest.mark.xfail(reason=reason, strict=True)


UNIQ = torch.tensor([3, 0, 2])  # unique rows of a [4, 5] tensor
REP = torch.tensor([1, 3, 1, 1, -1])  # repeats, and a negative index
MASK = torch.tensor([[True, False, True, False, False], [False] * 5, [True] * 5, [False, True, False, False, True]])


def _setitem(x, i, m):
    y = x.clone()
    y[:, i[:2]] = 7
    y[m] = -1
    return y


INDEX_PUT = [
    lambda x, i, m: x.index_put((i,), x[0].flip(0)),
    lambda x, i, m: x.index_put((i, i[[1, 0, 2]]), x[1, :3]),
    lambda x, i, m: torch.ops.aten.index_put(x, [None, i], x[:, :3].flip(1)),  # None = whole axis
    lambda x, i, m: x.index_put((i[:, None], i[None, :2]), x[0, 0]),  # index tensors broadcast
    lambda x, i, m: x.index_put((m,), x[0, 0]),  # a bool mask
    lambda x, i, m: torch.ops.aten._unsafe_index_put(x, (i,), x[2], False),
    _setitem,
]
INDEX_PUT_ACC = [
    lambda x, r: x.index_put((r,), x[0], accumulate=True),
    lambda x, r: torch.ops.aten.index_put(x, [None, r], x[:, :5] * 0 + 1, True),
    lambda x, r: x.index_put((r, r[[4, 3, 2, 1, 0]]), x[2, 0], accumulate=True),
]
INDEX_ALONG = [
    lambda x, i, r: x.index_copy(0, i, x[:3] * 3),
    lambda x, i, r: x.index_copy(-1, i, x[:, :3]),
    lambda x, i, r: x.index_add(0, r.remainder(4), x[[0, 1, 2, 3, 0]]),
    lambda x, i, r: x.index_add(1, r.remainder(4), x[:, [0, 1, 2, 3, 4]], alpha=2),
    lambda x, i, r: x.index_fill(1, i, -2),
    lambda x, i, r: x.index_fill(0, i, x[0, 0]),
    lambda x, i, r: x.index_fill(-1, i[0], 3),
]
SLICE_SELECT = [
    lambda x, s: torch.slice_scatter(x, s[:2], 0, 1, 3),
    lambda x, s: torch.slice_scatter(x, s[:, :2], 1, 0, None, 3),
    lambda x, s: torch.slice_scatter(x, s[:, :3], -1, -3),
    lambda x, s: torch.slice_scatter(x, s, 0),
    lambda x, s: torch.select_scatter(x, s[0], 0, 2),
    lambda x, s: torch.select_scatter(x, s[:, 1], 1, -1),
]
SCATTERS = [
    lambda x, i, s: x.scatter(0, i, s),
    lambda x, i, s: x.scatter(1, i[:2, :3].remainder(5), s),  # an index smaller than src
    lambda x, i, s: x.scatter(0, i, 2.5),
    lambda x, i, s: x.scatter(0, i, s, reduce="add"),
    lambda x, i, s: x.scatter(0, i, s, reduce="multiply"),
]
SCATTER_ADDS = [
    lambda x, r, s: x.scatter_add(0, r, s),
    lambda x, r, s: x.scatter_add(1, r[:3, :2].remainder(5), s),
    lambda x, r, s: torch.scatter_add(x, -1, r[:4, :4], s),
]
REDUCES = [
    lambda x, r, s, how=how, inc=inc: x.scatter_reduce(0, r, s, how, include_self=inc)
    for how in ("sum", "prod", "amax", "amin", "mean")
    for inc in (True, False)
]
DIAGS = [
    lambda x: torch.diagonal(x),
    lambda x: torch.diagonal(x, 1),
    lambda x: torch.diagonal(x, -2, 2, 0),
    lambda x: x.diagonal(0, -1, -2),
    lambda x: torch.diagonal(x, 7),  # past the edge: empty
    lambda x: torch.diagonal_copy(x, 1, 1, 2),
    lambda x: torch.diag(x[0]),
    lambda x: torch.diag(x[0], -1),
    lambda x: torch.diag(x[0, 0]),
    lambda x: torch.diag(x[1, 1], 2),
    lambda x: torch.diag(x[0, 1], -3),
    lambda x: torch.diag_embed(x[0]),
    lambda x: torch.diag_embed(x[0], 1, 0, 2),
]

# Unique index rows for plain scatter: a permutation per column.
SCATTER_IDX = torch.stack([torch.randperm(4, generator=_gen(k))[:3] for k in range(5)], 1)  # [3, 5] over axis 0
REP_IDX = torch.randint(0, 4, (5, 5), generator=_gen(7))  # repeats over axis 0 of [4, 5]

VIEW_SCATTERS = [
    lambda x: torch.diagonal_scatter(x, x.diagonal(1, 0, 2).flip(-1), 1, 0, 2),
    lambda x: torch.diagonal_scatter(x, x.diagonal(-1, 2, 1).flip(0), -1, 2, 1),
    lambda x: torch.diagonal_scatter(x[0], x[1].diagonal()),
    lambda x: torch.as_strided_scatter(x, x[0, :2, :3].flip(0), (2, 3), (4, 1), 2),
    lambda x: torch.as_strided_scatter(x, x[1, :2, :3], (2, 3), (1, 3), 1),
    lambda x: torch.as_strided_scatter(x, x[2, :3, :2], (3, 2), (0 + 20, 5), 0),
    lambda x: x.put(torch.tensor([0, -1, 7]), x[0, 0, :3]),
    lambda x: x.put(torch.tensor([[0, 0], [-1, 7]]), x[1, 1, :4], accumulate=True),
    lambda x: x[0, 0, 0].put(torch.tensor(0), x[1, 1, 1]),
]

CASES = [
    case("index_put", INDEX_PUT, vals(4, 5), fixed(UNIQ), fixed(MASK), levels=LEVELS),
    case("index_put_dtypes", INDEX_PUT, plain(4, 5), fixed(UNIQ), fixed(MASK), dtypes=(F16, I64, BOOL)),
    case("index_put_accumulate", INDEX_PUT_ACC, vals(4, 5), fixed(REP), levels=LEVELS),
    case("index_put_accumulate_dtypes", INDEX_PUT_ACC, plain(4, 5), fixed(REP), dtypes=(F16, I64, I32, F64)),
    case(
        "index_put_inplace_aten",
        lambda x, i: x.clone().index_put_((i,), x[0], accumulate=True),
        vals(4, 5),
        fixed(REP),
        levels=("aten",),
    ),
    case("index_copy_add_fill", INDEX_ALONG, vals(4, 5), fixed(UNIQ), fixed(REP), levels=LEVELS),
    case("index_copy_add_fill_dtypes", INDEX_ALONG, plain(4, 5), fixed(UNIQ), fixed(REP), dtypes=(F16, I64)),
    case(
        "index_inplace_aten",
        [
            lambda x, i: x.clone().index_copy_(0, i, x[:3]),
            lambda x, i: x.clone().index_add_(1, i, x[:, :3]),
            lambda x, i: x.clone().index_fill_(0, i, 1.5),
        ],
        vals(4, 5),
        fixed(UNIQ),
        levels=("aten",),
    ),
    case("slice_select_scatter", SLICE_SELECT, vals(4, 5), plain(4, 5), levels=LEVELS),
    case("slice_select_scatter_dtypes", SLICE_SELECT, plain(4, 5), plain(4, 5, seed=3), dtypes=(F16, I64, BOOL)),
    case("scatter", SCATTERS, vals(4, 5), fixed(SCATTER_IDX), plain(3, 5, seed=2), levels=LEVELS),
    case("scatter_dtypes", SCATTERS[:3], plain(4, 5), fixed(SCATTER_IDX), plain(3, 5, seed=2), dtypes=(F16, I64)),
    case(
        "scatter_inplace_aten",
        [lambda x, i, s: x.clone().scatter_(0, i, s), lambda x, i, s: x.clone().scatter_add_(0, i, s)],
        vals(4, 5),
        fixed(SCATTER_IDX),
        plain(3, 5, seed=2),
        levels=("aten",),
    ),
    case("scatter_add", SCATTER_ADDS, vals(4, 5), fixed(REP_IDX), plain(5, 5, seed=2), levels=LEVELS),
    case("scatter_add_dtypes", SCATTER_ADDS, plain(4, 5), fixed(REP_IDX), plain(5, 5, seed=2), dtypes=(F16, I64, I32)),
    case("scatter_reduce", REDUCES, plain(4, 5), fixed(REP_IDX), plain(5, 5, seed=2), levels=LEVELS),
    case("scatter_reduce_dtypes", REDUCES, plain(4, 5), fixed(REP_IDX), plain(5, 5, seed=2), dtypes=(F64, I64)),
    case(
        "masked_scatter",
        [
            lambda x, m, s: x.masked_scatter(m, s),
            lambda x, m, s: x.masked_scatter(m[1:2], s),
            lambda x, m, s: x[0].masked_scatter(m, s),
        ],
        vals(4, 5),
        fixed(MASK),
        plain(5, 5, seed=2),
        levels=LEVELS,
    ),
    case(
        "masked_scatter_dtypes",
        lambda x, m, s: x.masked_scatter(m, s),
        plain(4, 5),
        fixed(MASK),
        plain(5, 5, seed=2),
        dtypes=(F16, I64, BOOL),
    ),
    case("diagonal_diag", DIAGS, vals(3, 4, 5), levels=LEVELS),
    case("diagonal_diag_dtypes", DIAGS, plain(3, 4, 5), dtypes=(F16, I64, BOOL)),
    # amax/amin/sum/prod/mean over repeated indices with NaN in x and in src, with and without self.
    case(
        "scatter_reduce_nan",
        REDUCES,
        fixed(torch.tensor([[1.0, NAN, 3.0], [4.0, 5.0, 6.0]])),
        fixed(torch.tensor([[1, 0, 0], [0, 0, 1]])),
        fixed(torch.tensor([[NAN, 2.0, 7.0], [-1.0, NAN, 0.0]])),
    ),
    # Thousands of float16 values summed into three slots.
    case(
        "accumulate_f16_long",
        [
            lambda x, i, v: x.index_put((i,), v, accumulate=True),
            lambda x, i, v: x.scatter_add(0, i, v),
            lambda x, i, v: x.index_add(0, i, v),
            lambda x, i, v: x.scatter_reduce(0, i, v, "mean"),
        ],
        fixed(torch.zeros(3, dtype=F16)),
        fixed(torch.randint(0, 3, (3000,), generator=_gen(5))),
        fixed(torch.rand(3000, generator=_gen(6)).to(F16)),
    ),
    case(
        "accumulate_bool",
        [
            lambda x: x.index_put((torch.tensor([1, 1, 2]),), x[:3].logical_not(), accumulate=True),
            lambda x: x.scatter_add(0, torch.tensor([1, 1, 0]), x[1:]),
            lambda x: x.scatter_reduce(0, torch.tensor([1, 1, 0]), x[:3], "amax", include_self=False),
        ],
        fixed(torch.tensor([True, False, False, True])),
    ),
    # 0-d tensors write as 1-element vectors; scatter's value_reduce overload; in-place reduces at aten.
    case(
        "zero_d_and_overloads",
        [
            lambda x: x[0, 0].scatter(0, torch.tensor(0), 5.0),
            lambda x: x[0, 0].clone().scatter_reduce_(0, torch.tensor(0), x[1, 1], "sum"),
            lambda x: x.scatter(1, torch.tensor([[2], [0]]), 9.0, reduce="add"),
            lambda x: x.scatter(1, torch.tensor([[2], [0]]), 2.0, reduce="multiply"),
            lambda x: x.clone().scatter_reduce_(1, torch.tensor([[2], [0]]), x[:, :1], "prod", include_self=False),
            lambda x: x[0, 0].index_fill(0, torch.tensor([0]), -1.0),
            lambda x: x[0, 0].index_copy(0, torch.tensor([0]), x[1, 0]),
            lambda x: x[0, 0].index_add(0, torch.tensor(0), x[1, 1], alpha=3),
            lambda x: x[0, 0].clone().index_fill_(0, torch.tensor(0), x[1, 2]),
            lambda x: x.masked_scatter(x < -100, torch.empty(0)),
        ],
        vals(2, 3),
        levels=LEVELS,
    ),
    # Advanced indices split by a full axis (numpy/PyTorch move the indexed axes first), int32
    # indices, bool masks over two axes and over a later axis.
    case(
        "index_put_advanced",
        [
            lambda x, i, j: torch.ops.aten.index_put(x, [i, None, j], x[0, :, :2].T.clone()),
            lambda x, i, j: torch.ops.aten.index_put(x, [i, None, j], x[0, :, :2].T.clone(), True),
            lambda x, i, j: x.index_put((i.int(),), x[0]),
            lambda x, i, j: x.index_put((x[:, :, 0] > 0,), x[0, 0, :1]),
            lambda x, i, j: torch.ops.aten.index_put(x, [None, x[0, :, 0] > 0], x[0, 0, 0]),
            lambda x, i, j: x.scatter(2, j.flip(0)[None, None].expand(3, 4, 2), x),
        ],
        vals(3, 4, 5),
        fixed(torch.tensor([0, 2])),
        fixed(torch.tensor([4, 1])),
        levels=LEVELS,
    ),
    # Writes through a view: the view's flat positions say where each entry lands.
    case(
        "view_scatters",
        VIEW_SCATTERS,
        vals(3, 4, 5),
        levels=LEVELS,
    ),
    case("view_scatters_dtypes", VIEW_SCATTERS, plain(3, 4, 5), dtypes=(F16, I64, BOOL)),
    case(
        "index_put_bf16",
        lambda x, r: x.index_put((r,), x[0], accumulate=True),
        plain(4, 5),
        fixed(REP),
        dtypes=(torch.bfloat16,),
    ),
]


@pytest.mark.parametrize("fn,inputs,levels", CASES)
def test_matches_torch(fn, inputs, levels):
    assert_converts_and_matches(fn, inputs, levels=levels)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_accumulation_is_refused_on_onnxruntime(dtype):
    """PyTorch's index_put(accumulate=True) rounds to half precision after every add; onnxruntime
    can only sum in float32 and round once (3000 float16 values into three slots: 534.5 for
    PyTorch's 532.5). The emitter refuses it in one line naming why."""
    pytest.importorskip("onnxruntime")
    x, v = torch.zeros(4, dtype=dtype), torch.ones(5, dtype=dtype)
    with pytest.raises(RlxError) as err:
        convert(lambda x, i, v: x.index_put((i,), v, accumulate=True), (x, REP, v), engine="onnxruntime")
    message = str(err.value)
    assert "\n" not in message and "rounds to" in message and "use the numpy or JAX engine" in message


# One export with the leading axis dynamic, run at several extents: symbolic Arange bounds in
# slice_scatter/select_scatter, the flattened mask of masked_scatter, diag of a symbolic length.
DYNAMIC = [
    lambda x, m: x.index_put((torch.tensor([0, 1]),), x[0] * 2),
    lambda x, m: x.index_put((torch.tensor([0, 0, -1]),), x[1], accumulate=True),
    lambda x, m: x.index_put((m,), x[0, 0]),
    lambda x, m: x.scatter_add(0, (x.abs() * 2).long() % x.shape[0], x),
    lambda x, m: x.scatter_reduce(0, (x.abs() * 2).long() % x.shape[0], x, "amax", include_self=False),
    lambda x, m: x.masked_scatter(m, x * 10),
    lambda x, m: x.diagonal(),
    lambda x, m: torch.diag(x[:, 0], 1),
    lambda x, m: torch.slice_scatter(x, x[:1] * 2, 0, 0, 1),
    lambda x, m: torch.slice_scatter(x, x[-2:] * 2, 0, -2),
    lambda x, m: torch.select_scatter(x, x[0] * 3, 0, 1),
    lambda x, m: torch.select_scatter(x, x[-1] * 3, 0, -1),
    lambda x, m: x.index_copy(0, torch.tensor([1, 0]), x[:2].flip(0)),
]


@pytest.mark.parametrize("level", ["aten", "high"])
def test_dynamic_axis(level):
    module = as_module(lambda x, m: tuple(f(x, m) for f in DYNAMIC))
    batch = Dim("batch", min=2, max=32)
    model, program, _ = convert(
        module, [rand((5, 6)), rand((5, 6), BOOL)], decomposition=level, dynamic_shapes=(({0: batch}, {0: batch}),)
    )
    assert program.is_dynamic
    for n in (2, 3, 8):
        x, m = rand((n, 6), seed=n), rand((n, 6), BOOL, seed=n + 1)
        want, _ = pytree.tree_flatten(module(x, m))
        got, _ = pytree.tree_flatten(model(tensor_to_numpy(x), tensor_to_numpy(m)))
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_arrays_match(g, tensor_to_numpy(w), f"batch={n} output {i}")


def test_view_scatters_on_jax():
    pytest.importorskip("jax")
    fn, data = sweep(VIEW_SCATTERS, [vals(3, 4, 5)], (F32, I64))
    assert_converts_and_matches(fn, data, levels=HIGH, engine="jax")
