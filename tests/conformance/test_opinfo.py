"""PyTorch OpInfo conformance. Default run: a fast subset of common ops (float32, 2 samples, plus a
few half-precision and tie-order checks). Full sweep (slow): ``python -m pytest tests/conformance -m
slow`` or ``python tools/conformance.py`` (every dtype of ``opinfo.SWEEP_DTYPES``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from .known_failures import GRAPH_DIFFERS_FROM_EAGER, KNOWN, KNOWN_WHEN, RANDOM, TOLERANCES, VALUES_UNDEFINED
from .opinfo import (
    MAX_SAMPLES,
    SUPPORT,
    SWEEP_DTYPES,
    TIE_ORDER_FREE,
    TieFree,
    assert_valid_indices,
    op_name,
    opinfos,
    sweep,
)

FAST = ["add", "sub", "mul", "true_divide", "pow", "exp", "log", "tanh", "sigmoid", "abs", "neg", "sqrt", "rsqrt",
        "maximum", "minimum", "where", "clamp", "eq", "lt", "sum", "mean", "amax", "argmax", "softmax",
        "nn.functional.gelu", "nn.functional.silu", "nn.functional.relu", "nn.functional.layer_norm",
        "matmul", "mm", "bmm", "permute", "transpose", "reshape", "cat", "stack", "gather", "index_select",
        "cumsum", "topk", "sort", "flip", "roll", "tril", "masked_fill", "nn.functional.embedding",
        "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
        "fft.rfft", "fft.irfft", "cdist", "nn.functional.pdist", "nansum", "logsumexp"]  # fmt: skip
# Half precision in the default run: a handful of ops whose kernels widen and round.
FAST_HALF = ["add", "exp", "sum", "softmax", "nn.functional.layer_norm", "matmul"]


def _check(outcomes):
    failures = [o for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(f"{o.op}[{o.dtype}#{o.sample}]: {o.reason}" for o in failures[:20])


@pytest.mark.parametrize("name", FAST)
def test_fast_subset(name):
    outcomes = list(sweep([name], dtypes=("f32",), max_samples=2))
    assert outcomes, f"no OpInfo samples for {name}"
    _check(outcomes)


@pytest.mark.parametrize("tok", ["f16", "bf16"])
@pytest.mark.parametrize("name", FAST_HALF)
def test_fast_half_subset(name, tok):
    outcomes = list(sweep([name], dtypes=(tok,), max_samples=1))
    assert outcomes, f"no {tok} OpInfo samples for {name}"
    _check(outcomes)


def test_every_declaration_has_a_reason():
    names = {op_name(o) for o in opinfos()}
    for table in (KNOWN, KNOWN_WHEN, TOLERANCES, GRAPH_DIFFERS_FROM_EAGER, RANDOM, VALUES_UNDEFINED):
        for op, entry in table.items():
            assert op in names, f"{op} is declared but is no OpInfo name"
            reason = entry if isinstance(entry, str) else entry[-1]
            assert reason.strip(), f"{op} is declared without a reason"


def test_random_rules_are_known_checks():
    assert not set(RANDOM) & set(KNOWN) and not set(VALUES_UNDEFINED) & set(KNOWN)
    for op, (rule, _why) in RANDOM.items():
        assert rule in SUPPORT or rule == "singular_values", f"{op}: no check named {rule!r}"


class _Sample:
    def __init__(self, x, *args, **kwargs):
        self.input, self.args, self.kwargs = x, args, kwargs


TIES = torch.tensor([[1.0, 0.0, 1.0, float("nan"), 0.0], [2.0, 2.0, 2.0, 2.0, 2.0]])


@pytest.mark.parametrize("descending", [False, True])
def test_tie_indices_any_order_is_valid(descending):
    # Reversing the order among equal values is as valid as PyTorch's own order.
    want = torch.sort(TIES, descending=descending).indices
    other = want.clone()
    other[1] = other[1].flip(0)
    assert_valid_indices(other.numpy(), want, _Sample(TIES, 1, descending), TIE_ORDER_FREE["sort"], "sort")


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda w: w.clone().fill_(0), "repeats"),  # not a permutation
        (lambda w: w + 5, "outside"),  # out of range
        (lambda w: w.flip(1), "different"),  # the values it points at are in the wrong order
    ],
)
def test_tie_indices_invalid_are_caught(bad, message):
    want = torch.sort(TIES, dim=1).indices
    with pytest.raises(AssertionError, match=message):
        assert_valid_indices(bad(want).numpy(), want, _Sample(TIES, 1), TIE_ORDER_FREE["sort"], "sort")


def test_tie_indices_reducing_op():
    x = torch.tensor([[3.0, 1.0, 3.0], [5.0, 5.0, 4.0]])
    values, want = torch.mode(x, 1)
    got = np.array([2 if want[0] == 0 else 0, 1 if want[1] == 0 else 0])  # the other equal entry
    assert_valid_indices(got, want, _Sample(x, 1), TieFree(1, 0, distinct=False, keepdim_arg=1), "mode")


X01 = torch.tensor([0.2, -0.7, 1.5, 0.0])


@pytest.mark.parametrize(
    "rule, sample, good, bad, message",
    [
        ("finite", _Sample(X01), [0.1, -3.0], [0.1, float("inf")], "non-finite"),
        ("nonnegative", _Sample(X01), [0.0, 2.0], [0.5, -1e-3], "negative"),
        ("interval", _Sample(X01, -1.0, 2.0), [-1.0, 1.9], [2.5, 0.0], "outside"),
        ("randint", _Sample(3, 9, (2,)), [3, 8], [3, 9], "outside"),
        ("randint", _Sample(X01, 4), [0, 3], [1.5, 2.0], "outside"),
        ("geometric", _Sample(X01, 0.5), [1.0, 7.0], [0.0, 2.0], "integer"),
        ("binary", _Sample(X01), [0.0, 1.0], [0.0, 0.5], "other than"),
        ("dropout", _Sample(X01, p=0.5), [0.4, 0.0, 3.0, 0.0], [0.2, 0.0, 3.0, 0.0], "neither"),
        ("rrelu", _Sample(X01, lower=0.1, upper=0.3), [0.2, -0.14, 1.5, 0.0], [0.2, -0.7, 1.5, 0.0], "slope"),
    ],
)
def test_random_support_rules_accept_and_reject(rule, sample, good, bad, message):
    """A support rule passes draws inside the distribution's support and catches one outside."""
    SUPPORT[rule](np.array(good), None, sample)
    with pytest.raises(AssertionError, match=message):
        SUPPORT[rule](np.array(bad), None, sample)


def test_multinomial_rule_catches_repeats_and_impossible_categories():
    p = torch.tensor([[0.5, 0.0, 0.2, 0.3]])
    SUPPORT["categories"](np.array([[0, 3]]), None, _Sample(p))
    with pytest.raises(AssertionError, match="repeats"):
        SUPPORT["categories"](np.array([[3, 3]]), None, _Sample(p))
    SUPPORT["categories"](np.array([[3, 3]]), None, _Sample(p, replacement=True))
    with pytest.raises(AssertionError, match="without mass"):
        SUPPORT["categories"](np.array([[0, 1]]), None, _Sample(p))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted({op_name(o) for o in opinfos()}))
def test_full_sweep(name):
    _check(list(sweep([name], dtypes=SWEEP_DTYPES, max_samples=MAX_SAMPLES)))
