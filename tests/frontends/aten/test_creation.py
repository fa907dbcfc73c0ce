"""Every lowering in ``rlx.frontends.aten.creation`` against eager PyTorch: full/zeros/ones/empty with their
``_like`` and ``new_`` forms, scalar_tensor, arange (end / start,end / start,end,step; int and float;
negative and fractional steps; explicit dtypes, including an integer dtype with float bounds).

``empty`` memory is undefined, so those cases compare shapes and dtypes only (rlx fills zeros). The
case machinery and the levels rule are test_elementwise's.
"""

from __future__ import annotations

import pytest
import torch
from test_elementwise import (
    ALL,
    BF16,
    BOOL,
    F16,
    F32,
    F64,
    I8,
    I32,
    I64,
    INF,
    LEVELS,
    NAN,
    U8,
    Case,
    case,
    check,
    singles,
)

ANY_INPUT = [(torch.zeros(2),)]  # the producers below ignore it; an export needs an input
LIKE = singles(ALL, shapes=[(2, 3), (), (0, 4)])  # every dtype at (2, 3); 0-dim and zero-size for the first

# fmt: off
CASES = [
    case("full", lambda _: (torch.full((2, 3), 2.5), torch.full((2, 3), 7), torch.full((3,), True),
                            torch.full((2, 3), 3, dtype=F16), torch.full((2,), -INF), torch.full((2,), NAN, dtype=BF16),
                            torch.full((), 4.0), torch.full((0, 3), 1.0), torch.full((2,), 1e10, dtype=F64)),
         ANY_INPUT, levels=LEVELS),
    # Python numbers convert like PyTorch: floats truncate into integer types, -1 wraps to 255 in uint8
    case("full_converts_value", lambda _: (torch.full((3,), -1, dtype=U8), torch.full((3,), -2.7, dtype=I32),
                                           torch.full((3,), 2.7, dtype=I64), torch.full((3,), 0.5, dtype=BOOL)),
         ANY_INPUT),
    case("zeros_ones", lambda _: (torch.zeros(2, 3), torch.zeros((4,), dtype=I32), torch.ones(2, 3, dtype=BOOL),
                                  torch.ones(3, dtype=F16), torch.zeros(0, 3), torch.ones(()), torch.zeros(2, dtype=BF16),
                                  torch.ones(2, 2, dtype=U8)), ANY_INPUT),
    case("like", lambda x: (torch.zeros_like(x), torch.ones_like(x), torch.full_like(x, 3), torch.full_like(x, 2.5),
                            torch.full_like(x, 1, dtype=F64), torch.zeros_like(x, dtype=BOOL),
                            torch.ones_like(x, dtype=I8)), LIKE, levels=LEVELS),
    case("new", lambda x: (x.new_zeros((2, 2)), x.new_ones(3), x.new_full((2, 1), 5), x.new_full((2,), -1),
                           x.new_full((2,), 1.5, dtype=F32), x.new_ones((2,), dtype=I64), x.new_zeros(x.shape)), LIKE),
    case("scalar_tensor", lambda x: (torch.scalar_tensor(3.5), torch.scalar_tensor(3, dtype=I64),
                                     torch.scalar_tensor(1, dtype=BOOL), torch.scalar_tensor(-1, dtype=U8),
                                     x + torch.scalar_tensor(2.0, dtype=x.dtype)), LIKE),
    case("arange_end", lambda _: (torch.arange(5), torch.arange(5.0), torch.arange(2.5), torch.arange(0),
                                  torch.arange(3, dtype=I32), torch.arange(10, dtype=U8), torch.arange(4, dtype=F16)),
         ANY_INPUT, levels=LEVELS),
    case("arange_start_end", lambda _: (torch.arange(2, 7), torch.arange(-1.5, 2.0), torch.arange(3, 3),
                                        torch.arange(0, 5, dtype=F16), torch.arange(-3, 2, dtype=I8)),
         ANY_INPUT),
    case("arange_step", lambda _: (torch.arange(0, 10, 3), torch.arange(5, -3, -2), torch.arange(0, 1, 0.1),
                                   torch.arange(-1, 1, 0.3), torch.arange(1.0, -1.0, -0.25), torch.arange(1, 4, 0.5),
                                   torch.arange(0, 1, 0.1, dtype=F64), torch.arange(0, 300, 7, dtype=BF16),
                                   torch.arange(1, 2.9, 0.3, dtype=F16), torch.arange(0.0, 2**24 + 10.0, 2**22)),
         ANY_INPUT),
    # integer dtype, float bounds: start and step truncate, the length comes from the float bounds
    case("arange_int_dtype_float_bounds", lambda _: (torch.arange(0.5, 4.5, dtype=I64),
                                                     torch.arange(-2.5, 3.5, 1.5, dtype=I64),
                                                     torch.arange(-3, 7, 2.5, dtype=I32), torch.arange(2.9, dtype=I64)),
         ANY_INPUT),
    case("arange_from_shape", lambda x: (torch.arange(x.shape[0]) * 2, torch.arange(x.shape[1], dtype=F32)),
         [(torch.zeros(3, 5),)]),
    case("empty", lambda x: (torch.empty(2, 3), torch.empty(4, dtype=I64), torch.empty((0,)), torch.empty_like(x),
                             torch.empty_like(x, dtype=F16), x.new_empty((3, 2)), torch.empty_strided((2, 3), (3, 1))),
         LIKE, values=False),
]
# fmt: on


@pytest.mark.parametrize("c", CASES)
def test_matches_torch(c: Case) -> None:
    check(c)
