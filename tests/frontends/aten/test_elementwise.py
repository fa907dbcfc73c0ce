"""Every lowering in ``rlx.frontends.aten.elementwise`` against eager PyTorch.

A case is one op (or one form of it) and a list of argument groups — dtypes × shapes, broadcasting,
0-dim and zero-size included. One export applies the op to every group and returns one output per
group, so a whole dtype sweep costs one export per level.

Levels: every case runs at ``aten`` (the graph as exported). Where that graph holds an op outside
Core ATen, the case runs at ``core`` too (decomposition rewrites it), and at ``high`` as well when
that op is one ``high`` keeps whole; where it holds only Core ATen ops the other levels give the
same graph and are skipped. A representative subset names all three levels explicitly.

The case machinery here (``Case``, ``case``, ``check``) is shared by test_reduce and test_creation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from rlx.frontends.torch.levels import HIGH_LEVEL_OPS
from rlx.frontends.torch.tensors import tensor_to_numpy
from rlx.ir.program import Program

from helpers import LEVELS, assert_converts_and_matches, convert, rand, with_specials

F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
I64, I32, I8, U8, BOOL = torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool
FLOATS = (F32, F16, BF16, F64)
INTS = (I64, I32, I8, U8)
ALL = FLOATS + INTS + (BOOL,)

# Binary shapes: trailing broadcast both ways, a 0-dim operand on either side, a zero-size tensor.
# The first dtype of a sweep gets all of them; the others get the first (the dtypes are the point).
BROADCAST = [((2, 3, 4), (3, 1)), ((3, 1), (2, 3, 4)), ((2, 3, 4), ()), ((), (4,)), ((0, 3), (3,))]
SHAPES = [(3, 4, 5), (), (0, 2)]
INF, NAN = float("inf"), float("nan")


def tensor(
    shape: Sequence[int],
    dtype: torch.dtype,
    seed: int,
    low: float = -3,
    high: float = 3,
    specials: bool = True,
    nonzero: bool = False,
) -> torch.Tensor:
    """Random values; floats get NaN/±inf/±0 planted (not in 0-dim tensors, which would be all NaN)."""
    t = rand(shape, dtype, low=max(low, 0) if dtype == U8 else low, high=high, seed=seed)
    if specials and dtype.is_floating_point and t.dim() > 0:
        t = with_specials(t)
    if nonzero:  # integer division by zero raises in PyTorch
        t = torch.where(t == 0, torch.ones((), dtype=dtype), t)
    return t


@dataclass
class Case:
    id: str
    fn: Callable[..., Any]  # applied to each group
    groups: list[tuple[torch.Tensor, ...]]
    levels: tuple[str, ...] | None = None  # None: aten, then whichever levels change the graph
    tol: dict[str, float] = field(default_factory=dict)
    values: bool = True  # False: compare only shapes and dtypes (torch.empty's memory is undefined)

    def __str__(self) -> str:
        return self.id


class Batched(torch.nn.Module):
    """``fn`` applied to consecutive argument groups of the flat input list."""

    def __init__(self, fn: Callable[..., Any], arities: list[int]) -> None:
        super().__init__()
        self.fn, self.arities = fn, arities

    def forward(self, *flat: torch.Tensor) -> tuple[Any, ...]:
        outs, k = [], 0
        for n in self.arities:
            outs.append(self.fn(*flat[k : k + n]))
            k += n
        return tuple(outs)


def _is_core_aten(op: str) -> bool:
    _, base, overload = op.split(".")
    return torch.Tag.core in getattr(getattr(torch.ops.aten, base), overload).tags


def decomposed_levels(ops: Sequence[str]) -> tuple[str, ...]:
    """The levels past ``aten`` whose graph differs from the exported one (see the module docstring)."""
    outside = [op for op in ops if op.startswith("aten.") and not _is_core_aten(op)]
    if not outside:
        return ()
    kept = {f"aten.{name}" for name in HIGH_LEVEL_OPS}
    return (("high",) if any(op in kept for op in outside) else ()) + ("core",)


def _shapes_and_dtypes_match(module: torch.nn.Module, inputs: list[torch.Tensor], levels: Sequence[str]) -> Program:
    want = [(tuple(w.shape), tensor_to_numpy(w).dtype) for w in pytree.tree_leaves(module(*inputs))]
    for level in levels:
        model, program, _ = convert(module, inputs, decomposition=level)
        got = [(g.shape, g.dtype) for g in pytree.tree_leaves(model(*[tensor_to_numpy(t) for t in inputs]))]
        assert got == want, f"[{level}] shapes and dtypes {got} != torch {want}"
    return program


def check(c: Case, engine: str | None = None) -> None:
    module = Batched(c.fn, [len(g) for g in c.groups])
    inputs = [t for g in c.groups for t in g]

    def run(levels: Sequence[str]) -> Program:
        if c.values:
            return assert_converts_and_matches(module, inputs, levels=levels, engine=engine, **c.tol)
        return _shapes_and_dtypes_match(module, inputs, levels)

    try:
        if c.levels is not None:
            run(c.levels)
            return
        more = decomposed_levels(list(run(("aten",)).source_histogram))
        if more:
            run(more)
    except AssertionError as e:  # name the group behind "output k"
        m = re.search(r"output (\d+)", str(e))
        if m is None:
            raise
        owners = [k for k, g in enumerate(c.groups) for _ in pytree.tree_leaves(c.fn(*g))]
        k = owners[int(m.group(1))]
        args = ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in c.groups[k])
        raise AssertionError(f"{c.id}: group {k} ({args})\n{e}") from None


def case(
    id: str,
    fn: Callable[..., Any],
    groups: list[tuple[torch.Tensor, ...]],
    *,
    levels: tuple[str, ...] | None = None,
    xfail: str | None = None,
    values: bool = True,
    **tol: float,
) -> Any:
    marks = [pytest.mark.xfail(reason=xfail, strict=True)] if xfail else []
    return pytest.param(Case(id, fn, groups, levels, tol, values), id=id, marks=marks)


def pairs(
    dtypes: Sequence[torch.dtype],
    shapes: Sequence[tuple] = BROADCAST,
    *,
    rhs_nonzero: bool = False,
    lhs: dict | None = None,
    rhs: dict | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for i, dt in enumerate(dtypes):
        for j, (sa, sb) in enumerate(shapes if i == 0 else shapes[:1]):
            a = tensor(sa, dt, seed=10 * i + j, **(lhs or {}))
            b = tensor(sb, dt, seed=100 + 10 * i + j, nonzero=rhs_nonzero and not dt.is_floating_point, **(rhs or {}))
            out.append((a, b.flip(-1) if b.dim() else b))  # flipped: specials meet other specials
    return out


def mixed(dtype_pairs: Sequence[tuple[torch.dtype, torch.dtype]], **kw: Any) -> list[tuple[torch.Tensor, ...]]:
    """One group per dtype pair, shapes (2,3) and (3,), plus 0-dim second operands."""
    out = []
    for i, (da, db) in enumerate(dtype_pairs):
        for sb in ((3,), ()):
            b = tensor(sb, db, seed=200 + i, nonzero=kw.get("rhs_nonzero", False), low=kw.get("rhs_low", -3))
            out.append((tensor((2, 3), da, seed=300 + i, low=kw.get("lhs_low", -3)), b))
    return out


def singles(dtypes: Sequence[torch.dtype], shapes: Sequence[tuple] = SHAPES, **kw: Any) -> list[tuple[torch.Tensor]]:
    return [
        (tensor(s, dt, seed=10 * i + j, **kw),)
        for i, dt in enumerate(dtypes)
        for j, s in enumerate(shapes if i == 0 else shapes[:1])
    ]


# Mixed-dtype operands: category promotion, same-category widening, u8 × i8 → i16, f16 × bf16 → f32,
# and a 0-dim second operand, which does not promote within its category.
MIXED = [(I64, F32), (F16, F32), (BF16, F16), (U8, I8), (BOOL, I32), (I32, I64), (F16, I64), (BOOL, F16),
         (F32, F64), (U8, BOOL), (F64, BF16)]  # fmt: skip
NUMERIC = FLOATS + INTS


def floor_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="floor")


def trunc_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="trunc")


# fmt: off
# ── binary ───────────────────────────────────────────────────────────────────
BINARY = [
    case("add", torch.add, pairs(ALL), levels=LEVELS),
    case("add_alpha", lambda a, b: torch.add(a, b, alpha=2), pairs(NUMERIC)),
    case("add_alpha_float", lambda a, b: torch.add(a, b, alpha=0.5), pairs(FLOATS)),
    case("sub", torch.sub, pairs(NUMERIC)),
    case("sub_alpha", lambda a, b: torch.sub(a, b, alpha=3), pairs(NUMERIC)),
    case("rsub", torch.rsub, pairs(NUMERIC)),
    case("rsub_alpha", lambda a, b: torch.rsub(a, b, alpha=2), pairs(NUMERIC)),
    case("mul", torch.mul, pairs(ALL)),
    case("div", torch.div, pairs(ALL)),  # ints divide in float; x/0 is ±inf or NaN
    case("true_divide", torch.true_divide, pairs((F32, I64))),
    case("div_floor", floor_div, pairs(NUMERIC, rhs_nonzero=True), levels=LEVELS),
    case("div_trunc", trunc_div, pairs(NUMERIC, rhs_nonzero=True)),
    case("floor_divide", torch.floor_divide, pairs(NUMERIC, rhs_nonzero=True)),
    case("remainder", torch.remainder, pairs(NUMERIC, rhs_nonzero=True)),  # sign of the divisor
    case("fmod", torch.fmod, pairs(NUMERIC, rhs_nonzero=True)),  # sign of the dividend
    # integer pow: negative exponents give 0 except for bases ±1
    case("pow", torch.pow, pairs(NUMERIC, lhs={"low": -3, "high": 3}, rhs={"low": -3, "high": 3})),
    case("maximum", torch.maximum, pairs(ALL)),  # NaN wins
    case("minimum", torch.minimum, pairs(ALL)),
    case("fmax", torch.fmax, pairs(NUMERIC)),  # NaN loses
    case("fmin", torch.fmin, pairs(NUMERIC)),
    case("atan2", torch.atan2, pairs(ALL)),  # ints and bools give float
    *[case(name, getattr(torch, name), pairs(ALL)) for name in ("eq", "ne", "lt", "le", "gt", "ge")],
    *[case(name, getattr(torch, name), pairs(ALL)) for name in ("logical_and", "logical_or", "logical_xor")],
    *[case(name, getattr(torch, name), pairs(INTS + (BOOL,))) for name in ("bitwise_and", "bitwise_or", "bitwise_xor")],
    case("bitwise_operators", lambda a, b: (a & b, a | b, a ^ b), pairs((I64, U8, BOOL))),
    # mixed dtypes
    case("add_mixed", torch.add, mixed(MIXED)),
    case("mul_mixed", torch.mul, mixed(MIXED)),
    case("div_mixed", torch.div, mixed(MIXED)),
    case("div_floor_mixed", floor_div, mixed([p for p in MIXED if BOOL not in p], rhs_nonzero=True)),
    case("remainder_mixed", torch.remainder, mixed([p for p in MIXED if BOOL not in p], rhs_nonzero=True)),
    case("pow_mixed", torch.pow, mixed([p for p in MIXED if BOOL not in p], lhs_low=0, rhs_low=0)),
    case("maximum_mixed", torch.maximum, mixed(MIXED)),
    case("atan2_mixed", torch.atan2, mixed(MIXED)),
    case("lt_mixed", torch.lt, mixed(MIXED)),
    case("eq_mixed", torch.eq, mixed(MIXED)),
    case("logical_xor_mixed", torch.logical_xor, mixed(MIXED)),
    case("bitwise_or_mixed", torch.bitwise_or, mixed([(U8, I8), (BOOL, I32), (I32, I64), (U8, BOOL)])),
]

# ── Python numbers: the .Scalar overloads and PyTorch's scalar promotion ──────
SCALAR_DTYPES = ALL
SCALARS = [
    # an int tensor times a float is float32; f16 + 1.0 stays f16; bool + 1 is int64
    case("scalar_mul_float", lambda a: a * 2.5, singles(SCALAR_DTYPES)),
    case("scalar_add", lambda a: (a + 1.0, a + 3, 3 + a, a + True), singles(NUMERIC)),
    case("scalar_bool", lambda a: (a + 1, a * 1.5, a & True, a | False), singles((BOOL,))),
    case("scalar_alpha", lambda a: (torch.add(a, 2, alpha=3), torch.sub(a, 1.5, alpha=2)), singles(FLOATS)),
    case("scalar_rsub", lambda a: (1 - a, 2.5 - a, torch.rsub(a, 2)), singles(NUMERIC)),
    case("scalar_div", lambda a: (a / 2, a / -0.0, 2 / a, a / 3.0), singles(SCALAR_DTYPES)),
    case("scalar_floor_trunc", lambda a: (a // 2, a // -2, floor_div(a, -2), trunc_div(a, -2), trunc_div(a, 2.5),
                                          a // 2.5), singles(NUMERIC)),
    case("scalar_rfloordiv", lambda a: 7 // a, singles(NUMERIC, nonzero=True)),
    case("scalar_remainder", lambda a: (a % 3, a % -3, a % 2.5, torch.fmod(a, -3), torch.fmod(a, 2.5)),
         singles(NUMERIC)),
    case("scalar_rremainder", lambda a: 7 % a, singles(NUMERIC, nonzero=True)),
    case("scalar_pow_int", lambda a: (a**2, a**3, a**0, a**1), singles(NUMERIC)),
    # x ** ±0.5 is sqrt / rsqrt for f32, f64, bf16 (NaN at -inf) but std::pow for f16 (+inf at -inf)
    case("scalar_pow_half", lambda a: (a**0.5, a**-0.5), singles(FLOATS + (I64, U8))),
    case("scalar_pow_float", lambda a: (a**1.5, a**-1.0, a**-2.0, a**2.0, a**0.1), singles(FLOATS + (I64,))),
    # x ** 3 and x ** -2 are multiplied out by PyTorch (rounded after each step; f16 goes through
    # float32): bit-exact, not merely close
    case("scalar_pow_cube_bits", lambda a: (a**3, a**3.0, a**-2, torch.pow(a, 3)), singles(FLOATS, [(4000,)], low=-40, high=40), rtol=0, atol=0),
    case("scalar_base_pow", lambda a: (2**a, 2.5**a, 1**a, (-1) ** a, 0.5**a), singles(NUMERIC)),
    case("scalar_compare", lambda a: (a < 2.5, a == 2, a != 0.5, a >= -1, a > True, a <= INF, a == NAN),
         singles(SCALAR_DTYPES), levels=LEVELS),
    case("scalar_bitwise", lambda a: (a & 3, a | 5, a ^ 1, torch.bitwise_and(a, 6)), singles(INTS)),
    # out-of-range Python ints wrap to the tensor's width, as in PyTorch (uint8 - 1 compares with 255)
    case("scalar_int_wrap", lambda a: (a + 300, a * 2**40, a >= -1, a == 256, a // -2, a % -3),
         singles((I32, I8, U8), nonzero=True)),
    # half tensors are multiplied/divided by a Python number in float32: 0 * 1e5 is 0, not NaN
    case("scalar_half_opmath", lambda a: (a * 1e5, a / 1e5, a * 2**40, a * 1e-8, 1e5 / a), singles((F16, BF16))),
    case("scalar_specials", lambda a: (a + INF, a * NAN, a - (-INF), a * INF), singles(FLOATS + (I64,))),
    # 0-dim tensors promote across categories only
    case("zero_dim_operand", lambda a: (a + torch.tensor(1.5, dtype=F64), a * torch.tensor(2),
                                        torch.maximum(a, torch.tensor(1.5)), torch.remainder(a, torch.tensor(3)),
                                        torch.atan2(a, torch.tensor(2.0))), singles((F16, F32, I32, U8))),
]

# ── unary ────────────────────────────────────────────────────────────────────
MATH = ["exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
        "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf"]
SAME_DTYPE = ["neg", "abs", "relu", "floor", "ceil", "trunc", "fix", "positive"]
WIDE = {"exp": 20, "expm1": 20, "exp2": 30, "sinh": 20, "cosh": 20, "sigmoid": 20}  # reach overflow


def halves() -> list[tuple[torch.Tensor]]:
    """Ties at .5 (round is half-to-even) in every float dtype, specials included."""
    ties = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.7, -3.2, 1e10, -1e-3])
    return [(ties.to(dt),) for dt in FLOATS]


UNARY = [
    *[case(n, getattr(torch, n), singles(ALL, low=-WIDE.get(n, 3), high=WIDE.get(n, 3))) for n in MATH],
    *[case(n, getattr(torch, n), singles(NUMERIC)) for n in SAME_DTYPE],
    *[case(n, getattr(torch, n), singles(ALL)) for n in ("sign", "sgn", "square")],  # sign(NaN) is 0
    *[case(n, getattr(torch, n), singles(ALL)) for n in ("logical_not", "isnan", "isinf", "isfinite")],
    case("bitwise_not", torch.bitwise_not, singles(INTS + (BOOL,))),
    case("round", torch.round, halves() + singles(INTS)),
    case("round_decimals", lambda a: (torch.round(a, decimals=2), torch.round(a * 100, decimals=-1)),
         singles(FLOATS)),
    case("relu6", F.relu6, singles(FLOATS + (I64, U8))),
    case("hardsigmoid", F.hardsigmoid, singles(FLOATS, low=-5, high=5)),
    case("hardswish", F.hardswish, singles(FLOATS, low=-5, high=5)),
    case("mish", F.mish, singles(FLOATS)),
    case("silu", F.silu, singles(FLOATS)),
    case("selu", F.selu, singles(FLOATS)),
    case("celu", lambda a: (F.celu(a), F.celu(a, alpha=0.5)), singles(FLOATS)),
    case("elu", lambda a: (F.elu(a), F.elu(a, alpha=0.5), torch.ops.aten.elu(a, 1.5, 2.0, 0.5)), singles(FLOATS)),
    case("softplus", lambda a: (F.softplus(a), F.softplus(a, beta=2, threshold=5)),
         singles(FLOATS, low=-30, high=30)),
    case("leaky_relu", lambda a: (F.leaky_relu(a), F.leaky_relu(a, 0.2)), singles(FLOATS)),
    # +inf is left out here: see test_gelu_at_pos_inf_is_its_limit
    case("gelu", lambda a: (F.gelu(a), F.gelu(a, approximate="tanh")),
         [(a.nan_to_num(nan=NAN, posinf=7.0, neginf=-INF),) for (a,) in singles(FLOATS)], levels=LEVELS),
]

# ── clamp, where, masked_fill ────────────────────────────────────────────────
def bounds(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((a.shape[-1],), -1, dtype=a.dtype), torch.ones((a.shape[-2], 1), dtype=a.dtype)


SELECT = [
    case("clamp_scalar", lambda a: (a.clamp(-1, 2), a.clamp(-1.5, 2.5), a.clamp(min=0.5), a.clamp(max=1),
                                    torch.clip(a, -2, 2)), singles(NUMERIC), levels=LEVELS),
    case("clamp_min_max_fn", lambda a: (torch.clamp_min(a, 0), torch.clamp_max(a, -1)), singles(NUMERIC)),
    case("clamp_inverted", lambda a: a.clamp(2, -1), singles(NUMERIC)),  # min > max gives max
    case("clamp_inf", lambda a: a.clamp(-INF, INF), singles(FLOATS)),
    case("clamp_tensor", lambda a: a.clamp(*bounds(a)), singles(NUMERIC, shapes=[(2, 3, 4)])),
    case("clamp_tensor_min_max", lambda a: (a.clamp(min=bounds(a)[0]), torch.clamp_max(a, bounds(a)[1]),
                                            torch.clamp_min(a, torch.zeros(4, dtype=F32))),
         singles(NUMERIC, shapes=[(2, 3, 4)])),
    # hardtanh keeps integer dtypes: float bounds truncate toward zero
    case("hardtanh", lambda a: (F.hardtanh(a), F.hardtanh(a, -2.0, 0.5)), singles(FLOATS + (I64, I32, I8))),
    case("where", lambda c, a, b: torch.where(c > 0, a, b),
         [(tensor((2, 1, 4), F32, 1), tensor((3, 4), dt, 2), tensor((2, 3, 1), dt, 3)) for dt in ALL]
         + [(tensor((), F32, 4), tensor((0, 4), F32, 5), tensor((4,), F32, 6))], levels=LEVELS),
    case("where_scalar", lambda a: (torch.where(a > 0, 1.0, 0.0), torch.where(a > 0, 1, 0), torch.where(a > 0, a, 0),
                                    torch.where(a > 0, -1.5, a), torch.where(a > 0, a, -INF)),
         singles(NUMERIC)),
    case("where_mixed", torch.where, [(tensor((3, 4), BOOL, 1), tensor((3, 4), da, 2), tensor((4,), db, 3))
                                      for da, db in MIXED]),
    case("where_bool_condition_from_int", lambda m, a: torch.where(m.bool(), a, -a), [(tensor((3, 4), I64, 1),
                                                                                      tensor((3, 4), F32, 2))]),
    case("masked_fill", lambda a: (a.masked_fill(a > 1, -INF), a.masked_fill(a < 0, 0), a.masked_fill(a > 0, 2)),
         singles(FLOATS), levels=LEVELS),
    case("masked_fill_int", lambda a: (a.masked_fill(a > 1, -1), a.masked_fill(a < 0, 7)), singles(INTS)),
    case("masked_fill_broadcast", lambda a, m: a.masked_fill(m, -INF),
         [(tensor((2, 3, 4), dt, 1), tensor((3, 1), BOOL, 2)) for dt in (F32, F16, BF16)]),
    case("masked_fill_tensor_value", lambda a, v: a.masked_fill(a > 0, v),
         [(tensor((3, 4), dt, 1), tensor((), dt, 2)) for dt in NUMERIC]),
]

# ── casts and identities ─────────────────────────────────────────────────────
def cast_source(dtype: torch.dtype) -> torch.Tensor:
    """Values every cast target defines: fractions (truncate toward zero), 0..255 for uint8 targets
    (negative floats to uint8 are undefined in C), big ints that wrap, f16 overflow (70000)."""
    if dtype.is_floating_point:
        return torch.tensor([0.0, 2.7, 3.5, 255.0, 70000.0, 1.0, 0.5, 300.5], dtype=F64).to(dtype)
    if dtype == BOOL:
        return torch.tensor([True, False, True])
    return rand((2, 6), I64, low=-300, high=300, seed=1).to(dtype)


CAST_TARGETS = (F32, F16, BF16, F64, I64, I32, I8, U8, BOOL)
CASTS = [
    case(f"to_{str(dst).removeprefix('torch.')}", lambda a, dst=dst: a.to(dst),
         [(cast_source(src),) for src in CAST_TARGETS]) for dst in CAST_TARGETS
]
CASTS += [
    # renorm's decomposition converts half precision with prims.convert_element_type
    case("renorm_half", lambda a: torch.renorm(a, 2, 0, 1.0), [(rand((3, 4), d, seed=2),) for d in (F16, BF16)]),
    case("to_specials", lambda a: (a.to(F16), a.to(BF16), a.to(F64), a.bool()), singles(FLOATS)),
    case("negative_float_to_int", lambda a: (a.long(), a.int(), a.to(I8)), singles(FLOATS, specials=False)),
    case("cast_methods", lambda a: (a.float(), a.half(), a.bfloat16(), a.double(), a.long(), a.int(), a.bool(),
                                    a.type_as(torch.zeros(1, dtype=F16)), a.to(a.dtype), a.to(F32, copy=True)),
         singles((F32, I64, BOOL), specials=False), levels=LEVELS),
    case("identities", lambda a: (a.clone(), a.detach(), a.t().contiguous(), torch.positive(a) if a.dtype != BOOL else a,
                                  F.dropout(a.float(), 0.5, training=False), torch.nn.Dropout(0.3).eval()(a.float())),
         singles(ALL, shapes=[(3, 4)])),
    # native_dropout outside training or with p=0: the input itself and an all-True keep-mask
    case("native_dropout_inference", lambda a: (torch.ops.aten.native_dropout(a, 0.5, False),
                                                torch.ops.aten.native_dropout(a, 0.0, True)),
         singles(FLOATS, shapes=[(3, 4)]), levels=LEVELS),  # (eager gives an empty input a float mask)
    case("constant_in_forward", lambda a: a + torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=a.dtype),
         singles(FLOATS, shapes=[(3, 4)])),
]

# ── floats' bits, integers' divisors, shifts, complex numbers ────────────────
AT = ("aten",)  # these ops stay whole at every level: the other levels give the same graph
SHIFT_AMOUNTS = {"low": -2, "high": 70, "specials": False}  # negative and past the width: 0 / sign fill


def complex_parts(a, b):
    z = torch.complex(a, b)
    return z, torch.view_as_real(z), torch.angle(z), torch.view_as_real(torch.polar(a.abs(), b))


MATH_OPS = [
    case("copysign", torch.copysign, pairs(FLOATS + (I64, BOOL))),  # integers and bools give float32
    case("copysign_scalar", lambda a: (torch.copysign(a, -1.0), torch.copysign(a, 0.0)), singles((F32, I64)), levels=AT),
    case("signbit", torch.signbit, singles(ALL), levels=AT),  # -0.0 and -NaN included
    case("hypot", torch.hypot, pairs(FLOATS), levels=AT),
    case("nextafter", torch.nextafter, pairs((F32, F64, BF16)), levels=AT),  # one ulp of the operands' own type
    case("frexp", torch.frexp, singles(FLOATS), levels=AT),  # (mantissa, int32 exponent); ±inf/NaN: (x, 0)
    case("gcd_lcm", lambda a, b: (torch.gcd(a, b), torch.lcm(a, b)), pairs((I64, I32, I8, U8), lhs={"low": -20, "high": 20}, rhs={"low": -12, "high": 12}), levels=AT),
    case("shifts", lambda a, b: (a << b, a >> b), pairs((I64, I32, I8, U8), lhs={"low": -100, "high": 100}, rhs=SHIFT_AMOUNTS), levels=AT),
    case("shifts_named", lambda a, b: (torch.bitwise_left_shift(a, b), torch.bitwise_right_shift(a, b), a << 3, a >> 65, torch.bitwise_left_shift(5, b)),
         pairs((I64,), lhs={"low": -100, "high": 100}, rhs=SHIFT_AMOUNTS), levels=AT),
    case("angle", torch.angle, singles(FLOATS + (I64, BOOL)), levels=AT),  # π below 0, else 0; NaN kept
    case("complex", complex_parts, pairs((F32, F64), shapes=BROADCAST[:3]), levels=AT),  # complex64 / complex128
    case("complex_arithmetic", lambda a, b: (torch.complex(a, b).abs(), torch.exp(torch.complex(a, b)), torch.complex(a, b) * torch.complex(b, a) - 2,
                                              torch.complex(a, b).real, torch.complex(a, b).imag), pairs((F32, F64), shapes=BROADCAST[:1]), levels=AT),
    case("view_as_complex", lambda a: (torch.view_as_complex(a), torch.view_as_complex(a) * 2),
         singles((F32, F64), shapes=[(3, 4, 2), (2,)]), levels=AT),
]

# fmt: on

CASES = BINARY + SCALARS + UNARY + SELECT + CASTS + MATH_OPS


@pytest.mark.parametrize("c", CASES)
def test_matches_torch(c: Case) -> None:
    check(c)


def _f64_via_f32(p: Any) -> list[Any]:
    """Case ``p`` as two: its groups with a result narrower than float64, and those with a float64
    result held to float32's precision (an ONNX function onnxruntime computes in float32 only,
    ``F32_ONLY``: float64 goes through float32, as test_float64_via_float32_is_float32_accurate)."""
    c = p.values[0]
    wide = [g for g in c.groups if any(t.dtype == torch.float64 for t in pytree.tree_leaves(c.fn(*g)))]
    narrow = [g for g in c.groups if all(g is not w for w in wide)]
    return [
        pytest.param(replace(c, groups=narrow), id=c.id, marks=p.marks),
        pytest.param(replace(c, id=f"{c.id}_f64", groups=wide, tol=dict(rtol=2e-6, atol=1e-7)), id=f"{c.id}_f64"),
    ]


# The other engines on the cases whose semantics are their own code: JAX's integer and complex
# kernels; the ONNX emitter's shifts (BitShift on unsigned bits), hypot, angle, casts (float to
# bool is a comparison, which onnxruntime has no half kernel for) and atan2 (from Atan, whose
# float64 goes through float32; the sign of y set last, -0 included).
OTHER_ENGINES = (
    [("jax", p) for p in MATH_OPS if p.id in ("frexp", "shifts", "complex")]
    + [
        ("onnxruntime", p)
        for p in MATH_OPS + CASTS
        if p.id in ("shifts", "shifts_named", "hypot", "angle") or p in CASTS
    ]
    + [("onnxruntime", q) for p in BINARY if p.id in ("atan2", "atan2_mixed") for q in _f64_via_f32(p)]
)


@pytest.mark.parametrize(
    "engine,c", [pytest.param(e, p.values[0], id=f"{e}-{p.id}", marks=p.marks) for e, p in OTHER_ENGINES]
)
def test_on_other_engines(engine: str, c: Case) -> None:
    pytest.importorskip(engine)
    check(c, engine=engine)


@pytest.mark.parametrize("engine", ["numpy", "jax", "onnxruntime"])
@pytest.mark.parametrize("level", ["high", "core"])
def test_relu_keeps_the_sign_of_zero(engine, level):
    # PyTorch's relu/relu6 are clamps: −0 stays −0, NaN stays NaN (a max would be free to give +0).
    # relu6 is a Clamp Call, whose −0 only the numpy engine keeps (XLA's and onnxruntime's max give +0).
    pytest.importorskip({"numpy": "numpy", "jax": "jax", "onnxruntime": "onnxruntime"}[engine])
    x = torch.tensor([-0.0, 0.0, -1.5, 2.0, float("nan"), float("-inf"), 7.0] * 40)
    fns = (torch.relu, lambda t: F.gelu(t)) + ((F.relu6, lambda t: t.clamp(0.0, 1.0)) if engine == "numpy" else ())
    model, _, _ = convert(lambda t: tuple(f(t) for f in fns), (x,), decomposition=level, engine=engine)
    for k, (got, f) in enumerate(zip(model(x.numpy()), fns)):
        want = f(x).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=f"output {k}")  # GELU: a few ulps
        zeros = want == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=f"output {k}: ±0")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_atan2_keeps_the_sign_of_zero_on_onnxruntime(dtype):
    # atan2(±0, x ≥ +0) and atan2(±y, +inf) are ±0 with y's sign (onnxruntime's Where turns a -0
    # taken from its first choice into +0: the emitter sets the sign last).
    pytest.importorskip("onnxruntime")
    y = torch.tensor([-0.0, 0.0, -0.0, -1.0, 2.0, -0.0], dtype=dtype)
    x = torch.tensor([1.0, 3.0, 0.0, INF, INF, -2.0], dtype=dtype)
    model, _, _ = convert(torch.atan2, (y, x), engine="onnxruntime")
    got, want = model(y.numpy(), x.numpy()), torch.atan2(y, x).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-6)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("level", ["aten", "high"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gelu_at_pos_inf_is_its_limit(dtype, level):
    """GELU(+inf) = +inf. torch's vectorised float32/bfloat16 CPU kernels return NaN there on some
    machines and not others (seen with AVX-512, and with ATEN_CPU_CAPABILITY=avx2 on the same CPU),
    while its float64 kernel returns inf: rlx is compared with float64's answer, so the test holds
    whatever kernel torch picks."""
    x = torch.tensor([[INF, 1.0, -1.0, 0.0, 3.0, -3.0, 0.5, -0.5]] * 2, dtype=dtype)
    want = F.gelu(x.double()).to(dtype)
    assert torch.isinf(want[0, 0]) and want[0, 0] > 0
    model, _, _ = convert(F.gelu, (x,), decomposition=level)
    got = model(tensor_to_numpy(x))
    assert got.dtype == tensor_to_numpy(want).dtype and got.shape == tuple(want.shape)
    assert np.isposinf(got[:, 0]).all()
    rtol, atol = (2e-2, 1e-2) if dtype == torch.bfloat16 else (1e-5, 1e-6)  # as helpers.TOLERANCES
    np.testing.assert_allclose(got[:, 1:].astype(np.float64), want[:, 1:].double().numpy(), rtol=rtol, atol=atol)
