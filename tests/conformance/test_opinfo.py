"""PyTorch OpInfo conformance. Default run: a fast subset of common ops (float32, 2 samples).
Full sweep (slow): ``python -m pytest tests/conformance -m slow`` or ``python tools/conformance.py``."""

from __future__ import annotations

import pytest

from .known_failures import KNOWN
from .opinfo import opinfos, sweep

FAST = ["add", "sub", "mul", "true_divide", "pow", "exp", "log", "tanh", "sigmoid", "abs", "neg", "sqrt", "rsqrt",
        "maximum", "minimum", "where", "clamp", "eq", "lt", "sum", "mean", "amax", "argmax", "softmax",
        "nn.functional.gelu", "nn.functional.silu", "nn.functional.relu", "nn.functional.layer_norm",
        "matmul", "mm", "bmm", "permute", "transpose", "reshape", "cat", "stack", "gather", "index_select",
        "cumsum", "topk", "sort", "flip", "roll", "tril", "masked_fill", "nn.functional.embedding",
        "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d"]  # fmt: skip


def _check(outcomes):
    failures = [o for o in outcomes if o.status == "fail" and o.op not in KNOWN]
    assert not failures, "\n".join(f"{o.op}[{o.dtype}#{o.sample}]: {o.reason}" for o in failures[:20])


@pytest.mark.parametrize("name", FAST)
def test_fast_subset(name):
    outcomes = list(sweep([name], dtypes=("f32",), max_samples=2))
    assert outcomes, f"no OpInfo samples for {name}"
    _check(outcomes)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted({o.name for o in opinfos()}))
def test_full_sweep(name):
    _check(list(sweep([name], dtypes=("f32", "i64", "bool", "f16", "bf16"), max_samples=4)))
