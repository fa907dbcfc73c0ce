"""Shape and data-movement ops against eager PyTorch: views, permutes, slicing, splitting,
concatenation, padding, every flavour of indexing, ``diff``, ``copy`` and ``as_strided``.

An export costs far more than the ops in it, so each case is one export that runs a list of
variants of one op over every swept dtype; a failure names the case, and its "output k" counts
variants within dtypes (k = dtype_index · outputs_per_dtype + variant output).
"""

import pytest
import torch
import torch.nn.functional as F

from rlx.errors import LoweringError

from helpers import LEVELS, assert_converts_and_matches, convert, rand, sweep, with_specials

F32, F16, I32, I64, BOOL = torch.float32, torch.float16, torch.int32, torch.int64, torch.bool
BF16, F64 = torch.bfloat16, torch.float64
DATA = (F32, I64, BOOL)  # the data dtypes every shape op is swept over
AH = ("aten", "high")  # shape ops lower the same at high and core; core runs where a case asks


def idx(*values, dtype=I64):
    return torch.tensor(values, dtype=dtype)


def case(name, variants, *inputs, dtypes=DATA, levels=AH, marks=()):
    """``variants``: one callable or a list of them, all taking ``inputs``. An input given as a
    shape is random data of each swept dtype; a tensor (indices, fixed dtypes) is used as is."""
    variants = variants if isinstance(variants, list) else [variants]
    fixed = [a for a in inputs if isinstance(a, torch.Tensor)]
    shapes = [a for a in inputs if not isinstance(a, torch.Tensor)]
    data = [rand(s, d, seed=i) for d in dtypes for i, s in enumerate(shapes)]

    def run(*args):
        out = []
        for k in range(len(dtypes)):
            fx, ds = iter(args[: len(fixed)]), iter(args[len(fixed) + k * len(shapes) :])
            call = [next(fx if isinstance(a, torch.Tensor) else ds) for a in inputs]
            out.extend(v(*call) for v in variants)
        return tuple(out)

    return pytest.param(run, (*fixed, *data), levels, id=name, marks=marks)


def mixed(name, fn, *tensors, levels=AH):
    """A case over fixed tensors of their own dtypes (promotion, empties)."""
    return case(name, fn, *tensors, dtypes=(None,), levels=levels)


VIEWS = [
    case(
        "view_reshape",
        [
            lambda x: x.view(4, 6),
            lambda x: x.view(-1),
            lambda x: x.reshape(3, -1, 2),
            lambda x: x.view_as(x.new_empty(6, 4)),
        ],
        (2, 3, 4),
        levels=LEVELS,
    ),
    case("reshape_noncontig", lambda x: x.t().reshape(-1), (3, 5)),
    case(
        "resize_same_shape",
        [lambda x, y: x.clone().resize_(3, 5), lambda x, y: x.clone().resize_as_(y)],
        (3, 5),
        (3, 5),
    ),
    case(
        "reshape_edge",
        [lambda x, e: x.reshape(()), lambda x, e: e.view(0, 2, 3), lambda x, e: e.reshape(3, 0, 2)],
        (1, 1),
        (6, 0),
    ),
    case(
        "flatten",
        [lambda x: x.flatten(), lambda x: x.flatten(1), lambda x: torch.flatten(x, 0, 1), lambda x: x.flatten(-2, -1)],
        (2, 3, 4),
    ),
    case("flatten_scalar", lambda x: x.flatten(), ()),
    case("unflatten", [lambda x: x.unflatten(1, (2, -1)), lambda x: x.unflatten(-1, (2, 2, 1))], (2, 6, 4)),
    case(
        "unsqueeze",
        [lambda x: x.unsqueeze(0), lambda x: x.unsqueeze(-1), lambda x: x.unsqueeze(1), lambda x: x[None, :, None]],
        (3, 4),
    ),
    case("unsqueeze_scalar", [lambda x: x.unsqueeze(0), lambda x: x.unsqueeze(-1)], ()),
    case(
        "squeeze",
        [
            lambda x: x.squeeze(),
            lambda x: x.squeeze(2),
            lambda x: x.squeeze(-2),
            lambda x: x.squeeze(1),
            lambda x: x.squeeze((0, 2)),
        ],
        (1, 3, 1, 4),
    ),
]

PERMUTES = [
    case(
        "permute",
        [lambda x: x.permute(2, 0, 1), lambda x: x.permute(-1, -3, -2), lambda x: x.permute(0, 1, 2)],
        (2, 3, 4),
    ),
    case(
        "transpose",
        [
            lambda x: x.transpose(0, 2),
            lambda x: x.transpose(-1, -2),
            lambda x: x.transpose(1, 1),
            lambda x: x.swapaxes(0, 1),
            lambda x: x.mT,
            lambda x: x.movedim(0, -1),
            lambda x: x.movedim((0, 1), (2, 0)),
        ],
        (2, 3, 4),
    ),
    case("t", [lambda x, v: x.t(), lambda x, v: v.t(), lambda x, v: x.T], (3, 5), (5,)),
]

EXPANDS = [
    case(
        "expand",
        [
            lambda x: x.expand(3, 2, 4),
            lambda x: x.expand(-1, 5),
            lambda x: x.expand(2, 1),
            lambda x: x.expand(3, 2, 4).reshape(6, 4),
        ],
        (2, 1),
    ),
    case("expand_scalar", lambda x: x.expand(2, 3), ()),
    case("expand_as", [lambda x, y: x.expand_as(y), lambda x, y: torch.broadcast_to(x, (2, 3, 4))], (1, 4), (3, 4)),
]

SLICES = [
    case(
        "slice",
        [
            lambda x: x[1:5:2],
            lambda x: x[-3:],
            lambda x: x[:-2],
            lambda x: x[-5:-1:3],
            lambda x: x[2:100],
            lambda x: x[-100:2],
            lambda x: x[::3],
            lambda x: x[1:50:4],
            lambda x: x[:, :],
        ],
        (8, 3),
        levels=LEVELS,
    ),
    case(
        "slice_empty",
        [
            lambda x: x[5:2],
            lambda x: x[10:20],
            lambda x: x[-1:-3],
            lambda x: x[:, 3:1],
            lambda x: torch.cat([x[:, 3:1], x], 1),
        ],
        (8, 3),
    ),
    case(
        "slice_axes",
        [
            lambda x: x[:, 1:-1:2],
            lambda x: x[..., 1:],
            lambda x: x[1:, ::2, -2:],
            lambda x: x.narrow(1, 1, 3),
            lambda x: x.narrow(-1, -3, 2),
        ],
        (4, 7, 3),
    ),
    case(
        "select",
        [
            lambda x: x[:, -1],
            lambda x: x[0],
            lambda x: x[-1, 2],
            lambda x: x[:, 1, :],
            lambda x: torch.select(x, -1, -2),
            lambda x: x[1:, None, ..., 0],
        ],
        (3, 4, 5),
    ),
]

SPLITS = [
    case(
        "split_int",
        [lambda x: torch.split(x, 2, dim=1), lambda x: x.split(2), lambda x: x.split(10), lambda x: x.split(1, -1)],
        (4, 5),
        levels=LEVELS,
    ),
    case(
        "split_list",
        [
            lambda x: torch.split(x, [1, 3, 1], dim=-1),
            lambda x: torch.split(x, [0, 2, 2], dim=0),
            lambda x: x.split_with_sizes([5], 1),
        ],
        (4, 5),
    ),
    case(
        "chunk",
        [lambda x: x.chunk(3, dim=1), lambda x: x.chunk(4), lambda x: torch.chunk(x, 2, -1), lambda x: x.chunk(1)],
        (6, 5),
    ),
    case("unbind", [lambda x: x.unbind(1), lambda x: torch.unbind(x, -1), lambda x: x.unbind()], (2, 3, 4)),
    case(
        "tensor_split_sections",
        [
            lambda x: torch.tensor_split(x, 3, dim=1),
            lambda x: torch.tensor_split(x, 4),
            lambda x: x.tensor_split(7, -1),
        ],
        (3, 7),
    ),
    case(
        "tensor_split_indices",
        [
            lambda x: torch.tensor_split(x, [1, 4], dim=-1),
            lambda x: torch.tensor_split(x, [2, 1, 9]),
            lambda x: x.tensor_split([-2], 1),
            lambda x: x.tensor_split([5, -6], 1),
            lambda x: x.tensor_split([], 1),
        ],
        (5, 7),
        levels=LEVELS,
    ),
    case("hsplit_vsplit", [lambda x: torch.hsplit(x, [1]), lambda x: torch.vsplit(x, 2)], (2, 3), levels=("high",)),
]

CATS = [
    case(
        "cat",
        [
            lambda x, y, z: torch.cat([x, y]),
            lambda x, y, z: torch.cat((x, z, x), 1),
            lambda x, y, z: torch.cat([x[None], y[None, :2]], -1),
            lambda x, y, z: torch.cat([x]),
            lambda x, y, z: torch.cat([x, x], 0),
        ],
        (2, 3),
        (4, 3),
        (2, 1),
        levels=LEVELS,
    ),
    case("cat_zero_extent", [lambda x, y: torch.cat([x, y], 1), lambda x, y: torch.cat([y, x, y], 1)], (2, 0), (2, 3)),
    case(
        "stack",
        [
            lambda x, y: torch.stack([x, y]),
            lambda x, y: torch.stack([x, y, x], 1),
            lambda x, y: torch.stack([x, y], -1),
            lambda x, y: torch.stack([x], 1),
        ],
        (2, 3),
        (2, 3),
    ),
    case(
        "hstack_vstack",
        [lambda x, y, v: torch.hstack([x, y]), lambda x, y, v: torch.vstack([v, v])],
        (2, 3),
        (2, 1),
        (3,),
        levels=("high",),
    ),
]

# Mixed dtypes promote like torch.result_type; a 1-d empty tensor is skipped whatever the rank.
MIXED_CATS = [
    mixed("cat_f32_i64", lambda x, y: torch.cat([x, y]), rand((2, 3), F32), rand((1, 3), I64)),
    mixed("cat_i64_bool", lambda x, y: torch.cat([x, y], 1), rand((2, 3), I64), rand((2, 2), BOOL)),
    mixed("cat_f16_f32", lambda x, y: torch.cat([x, y]), rand((2, 3), F16), rand((1, 3), F32)),
    mixed(
        "cat_i32_i64_bool_f16",
        [
            lambda a, b, c, d: torch.cat([a, b]),
            lambda a, b, c, d: torch.cat([c, d, c]),
            lambda a, b, c, d: torch.cat([c, a]),
        ],
        rand((2,), I32),
        rand((3,), I64),
        rand((2,), BOOL),
        rand((3,), F16),
    ),
    mixed(
        "cat_empty_1d",
        [
            lambda x, e: torch.cat([x, e, x], 1),
            lambda x, e: torch.cat([e, x]),
            lambda x, e: torch.cat([e, x[0]]),
            lambda x, e: torch.cat([e, e]),
        ],
        rand((2, 3)),
        torch.empty(0),
        levels=LEVELS,
    ),
    mixed("cat_empty_1d_promotes", lambda x, e: torch.cat([x, e]), rand((2, 3), I64), torch.empty(0)),
    mixed("stack_f32_i64", lambda x, y: torch.stack([x, y]), rand((2, 3), F32), rand((2, 3), I64)),
]

PADS = [
    case(
        "pad",
        [
            lambda x: F.pad(x, (1, 2)),
            lambda x: F.pad(x, (1, 1, 2, 0)),
            lambda x: F.pad(x, (0, 1, 1, 0), value=1),
            lambda x: F.pad(x, (1, 0, 0, 1, 1, 1)),
            lambda x: F.pad(x, (0, 0)),
            lambda x: torch.constant_pad_nd(x, [1, 1], 0),
        ],
        (2, 3, 4),
    ),
    case(
        "pad_crop",
        [
            lambda x: F.pad(x, (-1, 2)),
            lambda x: F.pad(x, (0, 0, -1, -1)),
            lambda x: F.pad(x, (-2, 1, 1, -1)),
            lambda x: F.pad(x, (-5, 0)),
        ],
        (3, 5),
        levels=LEVELS,
    ),
    case(
        "pad_float_value",
        [
            lambda x: F.pad(x, (2, 1), value=-2.5),
            lambda x: F.pad(x, (1, 1), value=float("-inf")),
            lambda x: F.pad(x, (1, 0), value=float("nan")),
        ],
        (2, 3),
        dtypes=(F32, F16),
    ),
    case("pad_int_value", lambda x: F.pad(x, (1, 1), value=7), (2, 3), dtypes=(I64, I32)),
    mixed("pad_u8", lambda x: F.pad(x, (1, 1), value=200), torch.arange(6, dtype=torch.uint8)),
]


def _gather_index(shape, high, seed):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


INDEXING = [
    case(
        "index_select",
        [
            lambda x, i: x.index_select(0, i),
            lambda x, i: torch.index_select(x, 1, i[:2]),
            lambda x, i: x.index_select(-1, i),
            lambda x, i: x.index_select(0, i[:0]),
        ],
        (4, 5, 4),
        idx(3, 0, 0, 2),
    ),
    case("index_select_i32", lambda x, i: x.index_select(1, i), (4, 3), idx(2, 1, dtype=I32)),
    case("index_select_0d_index", lambda x, i: x.index_select(1, i), (4, 3), torch.tensor(2)),
    # The index may be smaller than the input on the other axes, and longer along the gather axis.
    case(
        "gather",
        [
            lambda x, i, j, k: torch.gather(x, 0, i),
            lambda x, i, j, k: x.gather(1, j),
            lambda x, i, j, k: x.gather(2, k),
            lambda x, i, j, k: x.gather(-1, k[:2, :3]),
        ],
        (4, 5, 6),
        _gather_index((3, 2, 4), 4, 1),
        _gather_index((2, 7, 3), 5, 2),
        _gather_index((4, 5, 1), 6, 3),
        levels=LEVELS,
    ),
    case(
        "take_along_dim",
        lambda x, i: torch.take_along_dim(x, i, 1),
        (3, 4),
        torch.tensor([[3, 0], [1, 1], [2, 3]]),
        levels=("high",),
    ),
    case(
        "adv_index",
        [lambda x, i, m: x[i], lambda x, i, m: x[m], lambda x, i, m: x[i, 1:], lambda x, i, m: x[1:, i[1:3]]],
        (5, 4),
        idx(4, -1, 0, -5),
        idx([0, 1], [-2, 4]),
    ),
    case(
        "adv_index_axis1",
        [lambda x, i: x[:, i], lambda x, i: x[..., i], lambda x, i: x[:, :, i[:1]]],
        (2, 5, 3),
        idx(2, -1, 2),
    ),
    case(
        "adv_index_pair",
        [lambda x, i, j, c: x[i, j], lambda x, i, j, c: x[c, j], lambda x, i, j, c: x[:, c, j]],
        (4, 5, 5, 2),
        idx(0, 3, -1),
        idx(4, -5, 2),
        idx([0], [3]),
    ),
    # Non-adjacent advanced indices move the broadcast index axes to the front.
    case(
        "adv_index_nonadjacent",
        [
            lambda x, i, j, c: x[i, :, j],
            lambda x, i, j, c: x[c, :, j],
            lambda x, i, j, c: x[i, :, :, j[:1]],
            lambda x, i, j, c: x[c, 1:, j, 1],
        ],
        (4, 3, 5, 2),
        idx(1, -1, 0),
        idx(0, 1, -2),
        idx([1], [2]),
        levels=LEVELS,
    ),
    case("adv_index_const", lambda x: x[torch.tensor([2, -1, 0])], (4, 3), levels=("high", "core")),
]

# An index tensor built inside forward (lifted constant, aten.detach_ at the aten level).
CONST_INDEX = [case("adv_index_const_aten", lambda x: x[torch.tensor([2, -1, 0])], (4, 3), levels=("aten",))]

# Known gaps: strict, so a fix shows up as an XPASS to move into the tables above.
XFAILS = [
    case(
        "index_0d_tensor",
        lambda x, i: x[i],
        (4, 3),
        torch.tensor(-2),
        levels=("high",),
        marks=pytest.mark.xfail(
            reason="a 0-d integer tensor index becomes aten._local_scalar_dense + select "
            "at a data-dependent position, which a static Program cannot express",
            strict=True,
        ),
    ),
]

# ── diff, copy, as_strided ───────────────────────────────────────────────────
# ``diff`` is CompositeImplicit: ``high`` and ``core`` decompose it before rlx sees it, so only
# ``aten`` exercises its lowering (the other levels still run, as a check of what torch hands over
# instead). ``as_strided`` is Core ATen and reaches rlx at every level. One case is one export
# running a list of variants over every swept dtype; an input is a shape or ``dtype -> tensor``.
ATEN = ("aten",)


def swept(name, variants, *inputs, dtypes=(F32,), levels=LEVELS, marks=()):
    run, data = sweep(variants, inputs, dtypes)
    return pytest.param(run, data, levels, id=name, marks=marks)


def specials(shape):
    return lambda d: with_specials(rand(shape, d))


# ── diff ─────────────────────────────────────────────────────────────────────
DIFF = [
    lambda x: torch.diff(x),
    lambda x: torch.diff(x, dim=0),
    lambda x: torch.diff(x, n=2),
    lambda x: torch.diff(x, n=3, dim=-2),
    lambda x: torch.diff(x, n=0),
    lambda x: torch.diff(x, n=7),  # more than the axis holds: empty
    lambda x: torch.diff(x[0]),
]
DIFF_PEND = [
    lambda x, p: torch.diff(x, prepend=p),
    lambda x, p: torch.diff(x, append=p),
    lambda x, p: torch.diff(x, n=2, prepend=p, append=p[:, :1]),
    lambda x, p: torch.diff(x, dim=0, prepend=x[:1] * 2, append=p.t()[:, :1].expand(2, 6)),
]

SWEPT = [
    swept("diff", DIFF, (4, 6), levels=LEVELS),
    swept("diff_dtypes", DIFF, (4, 6), dtypes=(F16, BF16, F64, I64, I32), levels=ATEN),
    swept("diff_bool", DIFF, (4, 6), dtypes=(BOOL,), levels=LEVELS),  # logical_xor
    swept("diff_specials", DIFF, specials((4, 6)), levels=ATEN),
    swept("diff_prepend_append", DIFF_PEND, (4, 6), (4, 2), dtypes=(F32, I64), levels=LEVELS),
    swept("diff_bool_prepend", DIFF_PEND[:2], (4, 6), (4, 2), dtypes=(BOOL,), levels=ATEN),
    # Mixed dtypes: the concatenation promotes (int input, float prepend → float).
    swept("diff_promotes", lambda x, p: torch.diff(x, prepend=p.float()), (3, 5), (3, 1), dtypes=(I64,), levels=ATEN),
]


# ── copy ─────────────────────────────────────────────────────────────────────
aten = torch.ops.aten
COPY = [
    lambda x, y: aten.copy.default(x, y),
    lambda x, y: aten.copy.default(x, y[0]),  # broadcast
    lambda x, y: aten.copy.default(x, y.to(torch.int64)),  # into self's dtype
    lambda x, y: aten.copy.default(x.to(torch.int32), y),  # float → int truncates
    lambda x, y: aten.copy.default(x > 0, y),
]
SWEPT += [
    swept("copy", COPY, (3, 4), specials((3, 4)), levels=LEVELS),
    swept("copy_dtypes", COPY, (3, 4), (3, 4), dtypes=(F16, BF16, F64, I64), levels=ATEN),
    swept("diff_n0", lambda x: torch.diff(x, n=0), (3, 4), levels=LEVELS),  # high/core: clone = empty + copy
]


# ── as_strided ───────────────────────────────────────────────────────────────
AS_STRIDED = [
    lambda x: x.as_strided((4, 6), (6, 1)),  # the same layout: a reshape
    lambda x: x.as_strided((3, 8), (8, 1)),  # a re-shape of the same elements
    lambda x: x.as_strided((2, 5), (5, 1), 7),  # one contiguous run at an offset: a slice
    lambda x: x.as_strided((6, 4), (1, 6)),  # the transpose, read through strides
    lambda x: x.as_strided((3, 3), (7, 1)),  # a diagonal band
    lambda x: x.as_strided((2, 3, 2), (1, 4, 12), 2),
    lambda x: x.as_strided((4, 5), (0, 2), 3),  # stride 0: a broadcast row
    lambda x: x.as_strided((3, 4), (2, 1)),  # overlapping windows
    lambda x: x.as_strided((), (), 5),  # one element, 0-d
    lambda x: x.as_strided((0, 3), (3, 1)),  # empty
    lambda x: x.as_strided((1, 24, 1), (24, 1, 24)),  # extent-1 axes: any stride
]

SWEPT += [
    swept("as_strided", AS_STRIDED, (4, 6), levels=LEVELS),
    swept("as_strided_dtypes", AS_STRIDED, (4, 6), dtypes=(F16, BF16, F64, I64, BOOL), levels=("high",)),
    swept("as_strided_specials", AS_STRIDED[3:6], specials((4, 6)), levels=("high",)),
    # What Swin's pooler decomposes to: adaptive_avg_pool1d → mean → as_strided (memory format).
    swept(
        "as_strided_after_pool",
        lambda x: torch.nn.functional.adaptive_avg_pool1d(x.transpose(1, 2), 1),
        (2, 5, 6),
        levels=LEVELS,
    ),
    swept("as_strided_of_computed", lambda x: (x * 2 + 1).as_strided((3, 2), (2, 5), 1), (4, 6), levels=LEVELS),
    swept(
        "as_strided_of_contiguous_view",
        lambda x: x.t().contiguous().as_strided((3, 2), (1, 3)),
        (4, 6),
        levels=ATEN,
        marks=pytest.mark.xfail(
            reason="refused: the lowering cannot tell x.t().contiguous() from the view x.t()", strict=True
        ),
    ),
]


ALL = VIEWS + PERMUTES + EXPANDS + SLICES + SPLITS + CATS + MIXED_CATS + PADS + INDEXING + CONST_INDEX + SWEPT + XFAILS


@pytest.mark.parametrize("fn,inputs,levels", ALL)
def test_matches_torch(fn, inputs, levels):
    assert_converts_and_matches(fn, inputs, levels=levels)


def test_resize_to_another_shape_is_refused_in_one_line():
    with pytest.raises(LoweringError, match="memory layout") as err:
        convert(lambda x: x.t().clone().resize_(6), (torch.randn(3, 5),), decomposition="aten")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "view",
    [lambda x: x.t(), lambda x: x.expand(2, 4, 6), lambda x: x[1:], lambda x: x.t().unsqueeze(0)],
    ids=["permute", "expand", "slice", "reshaped"],
)
def test_as_strided_of_a_view_is_refused(view):
    # torch reads the storage under the view (x's order for x.t()); rlx values have no strides.
    x = rand((4, 6))
    with pytest.raises(LoweringError, match="as_strided of a .* result reads the storage under the view"):
        convert(lambda t: view(t).as_strided((3, 2), (1, 3), 0), (x,), decomposition="aten")


def test_as_strided_out_of_bounds_is_a_typed_error():
    # torch checks the bounds against the storage of the input, here larger than the input.
    x = rand((4, 6))[:2]
    with pytest.raises(LoweringError, match="reads element 23 of a tensor with 12 elements"):
        convert(lambda t: t.as_strided((2, 3), (1, 11)), (x,), decomposition="aten")
