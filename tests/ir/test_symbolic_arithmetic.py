"""The shape arithmetic both front-ends share (rlx.ir.symbolic): on a symbol it builds an expression
that evaluates, at every size, to what the same function computes on the int."""

from __future__ import annotations

import itertools

import pytest

from rlx.ir import symbolic
from rlx.ir.symbolic import Sym, eval_dim

N = Sym("n")
SIZES = range(0, 40)


def agree(fn, *args) -> None:  # noqa: ANN001
    """``fn`` over the symbol ``n`` evaluates to ``fn`` over each int size."""
    dims = fn(N, *args)
    for n in SIZES:
        ints = fn(n, *args)
        ints = ints if isinstance(ints, tuple) else (ints,)
        syms = dims if isinstance(dims, tuple) else (dims,)
        assert tuple(eval_dim(d, {"n": n}) for d in syms) == ints, f"{fn.__name__}{args} at n={n}: {syms}"


@pytest.mark.parametrize("fn", [symbolic.add, symbolic.sub, symbolic.mul, symbolic.maximum, symbolic.minimum])
@pytest.mark.parametrize("k", [0, 1, 3, -2])
def test_binary_ops(fn, k):
    agree(fn, k)


@pytest.mark.parametrize("fn", [symbolic.floordiv, symbolic.ceildiv, symbolic.mod])
@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_division(fn, k):
    agree(fn, k)


@pytest.mark.parametrize("scale", [2.0, 0.5, 1.5, 1.7, 3.0])
def test_scale_floor(scale):
    agree(symbolic.scale_floor, scale)


@pytest.mark.parametrize(("kernel", "stride", "dilation", "upper"),
                         list(itertools.product([1, 2, 3, 5], [1, 2, 3], [1, 2], [True, False])))  # fmt: skip
def test_same_pads_and_window_extent(kernel, stride, dilation, upper):
    agree(symbolic.same_pads, kernel, stride, dilation, upper)
    for n in range(1, 30):  # SAME: the output has ceil(n / stride) elements
        lo, hi = symbolic.same_pads(n, kernel, stride, dilation, upper)
        assert symbolic.conv_out(n, kernel, stride, dilation, lo + hi) == -(-n // stride)
    if stride == 1:  # the total does not depend on the size: the pads stay ints
        assert all(isinstance(p, int) for p in symbolic.same_pads(N, kernel, 1, dilation, upper))


@pytest.mark.parametrize("ceil", [False, True])
def test_conv_out(ceil):
    agree(lambda n: symbolic.conv_out(symbolic.add(n, 8), 3, 2, 1, 2, ceil))


def test_simplifications_keep_ints_and_symbols_plain():
    assert symbolic.sub(N, 0) is N and symbolic.floordiv(N, 1) is N and symbolic.maximum(N, N) is N
    assert symbolic.ceildiv(7, 2) == 4 and symbolic.scale_floor(N, 2.0) == Sym("n*2")
