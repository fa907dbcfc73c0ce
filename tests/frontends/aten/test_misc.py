"""The misc family against eager PyTorch: diff, weight norm (``_weight_norm``, ``norm_except_dim``)
and ``as_strided``.

``diff`` and the weight-norm ops are CompositeImplicit: ``high`` and ``core`` decompose them before
rlx sees them, so only ``aten`` exercises their lowerings (the other levels still run, as a check of
what torch hands over instead). ``as_strided`` is Core ATen and reaches rlx at every level.

As in test_ordering, one case is one export running a list of variants over every swept dtype.
"""

import pytest
import torch

from rlx.errors import LoweringError

from helpers import LEVELS, assert_converts_and_matches, convert, rand, sweep, with_specials

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
I32, I64, BOOL = torch.int32, torch.int64, torch.bool
ATEN = ("aten",)


def case(name, variants, *inputs, dtypes=(F32,), levels=LEVELS, marks=()):
    """``variants``: callables taking ``inputs``; an input is a shape (random data of each swept
    dtype) or a callable ``dtype -> tensor``."""
    run, data = sweep(variants, inputs, dtypes)
    return pytest.param(run, data, levels, id=name, marks=marks)


def specials(shape):
    return lambda d: with_specials(rand(shape, d))


def xfail(reason):
    return pytest.mark.xfail(reason=reason, strict=True)


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

CASES = [
    case("diff", DIFF, (4, 6), levels=LEVELS),
    case("diff_dtypes", DIFF, (4, 6), dtypes=(F16, BF16, F64, I64, I32), levels=ATEN),
    case("diff_bool", DIFF, (4, 6), dtypes=(BOOL,), levels=LEVELS),  # logical_xor
    case("diff_specials", DIFF, specials((4, 6)), levels=ATEN),
    case("diff_prepend_append", DIFF_PEND, (4, 6), (4, 2), dtypes=(F32, I64), levels=LEVELS),
    case("diff_bool_prepend", DIFF_PEND[:2], (4, 6), (4, 2), dtypes=(BOOL,), levels=ATEN),
    # Mixed dtypes: the concatenation promotes (int input, float prepend → float).
    case("diff_promotes", lambda x, p: torch.diff(x, prepend=p.float()), (3, 5), (3, 1), dtypes=(I64,), levels=ATEN),
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
CASES += [
    case("copy", COPY, (3, 4), specials((3, 4)), levels=LEVELS),
    case("copy_dtypes", COPY, (3, 4), (3, 4), dtypes=(F16, BF16, F64, I64), levels=ATEN),
    case("diff_n0", lambda x: torch.diff(x, n=0), (3, 4), levels=LEVELS),  # high/core: clone = empty + copy
]


# ── weight norm ──────────────────────────────────────────────────────────────
def g_like(shape, dim):
    """A gain shaped like ``norm_except_dim``'s result (extent 1 on every axis but ``dim``)."""
    kept = [1] * len(shape) if dim == -1 else [d if i == dim else 1 for i, d in enumerate(shape)]
    return lambda dt: rand(kept, dt, low=0.5, high=2, seed=7)


WEIGHT_NORM = [
    (0, lambda v, g: torch._weight_norm(v, g, 0)),
    (2, lambda v, g: torch._weight_norm(v, g, 2)),
    (1, lambda v, g: torch._weight_norm(v, g, 1)),
    (-1, lambda v, g: torch._weight_norm(v, g, -1)),
]
NORM_EXCEPT_DIM = [
    lambda v: torch.norm_except_dim(v, 2, 0),
    lambda v: torch.norm_except_dim(v, 2, 1),
    lambda v: torch.norm_except_dim(v, 2, -1),
    lambda v: torch.norm_except_dim(v, 3, 2),
    lambda v: torch.norm_except_dim(v, 1, 0),
]

CASES += [case(f"weight_norm_dim{d}", fn, (6, 4, 5), g_like((6, 4, 5), d), levels=LEVELS) for d, fn in WEIGHT_NORM]
CASES += [
    case(
        "weight_norm_dtypes", WEIGHT_NORM[0][1], (6, 4, 5), g_like((6, 4, 5), 0), dtypes=(F16, BF16, F64), levels=ATEN
    ),
    # A Linear-shaped weight and a gain of lower rank, as old-style weight_norm checkpoints store it.
    case("weight_norm_2d", lambda v, g: torch._weight_norm(v, g, 0), (5, 3), g_like((5, 3), 0), levels=ATEN),
    case("norm_except_dim", NORM_EXCEPT_DIM, (3, 4, 5), levels=LEVELS),
    case("norm_except_dim_dtypes", NORM_EXCEPT_DIM, (3, 4, 5), dtypes=(F16, BF16, F64), levels=ATEN),
]


def test_weight_norm_module():
    """``nn.utils.parametrizations.weight_norm`` on a conv, as wav2vec2's positional embedding uses it."""
    torch.manual_seed(0)
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3, padding=1, groups=2), dim=2)
    assert_converts_and_matches(conv, (rand((2, 4, 9)),))


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

CASES += [
    case("as_strided", AS_STRIDED, (4, 6), levels=LEVELS),
    case("as_strided_dtypes", AS_STRIDED, (4, 6), dtypes=(F16, BF16, F64, I64, BOOL), levels=("high",)),
    case("as_strided_specials", AS_STRIDED[3:6], specials((4, 6)), levels=("high",)),
    # What Swin's pooler decomposes to: adaptive_avg_pool1d → mean → as_strided (memory format).
    case(
        "as_strided_after_pool",
        lambda x: torch.nn.functional.adaptive_avg_pool1d(x.transpose(1, 2), 1),
        (2, 5, 6),
        levels=LEVELS,
    ),
    case("as_strided_of_computed", lambda x: (x * 2 + 1).as_strided((3, 2), (2, 5), 1), (4, 6), levels=LEVELS),
    case(
        "as_strided_of_contiguous_view",
        lambda x: x.t().contiguous().as_strided((3, 2), (1, 3)),
        (4, 6),
        levels=ATEN,
        marks=xfail("refused: the lowering cannot tell x.t().contiguous() from the view x.t()"),
    ),
]


@pytest.mark.parametrize("fn,inputs,levels", CASES)
def test_matches_torch(fn, inputs, levels):
    assert_converts_and_matches(fn, inputs, levels=levels)


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
