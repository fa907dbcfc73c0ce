"""Random ops: the generator (Threefry-2x32-20, known answers), every distribution's statistics
against its law and against PyTorch's own draws, dtypes and shapes against PyTorch, and
reproducibility (seeds, reset, fork). Engines agreeing bit for bit: tests/runtime/test_random_state.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from rlx.frontends.torch.tensors import tensor_to_numpy
from rlx.ir import calls as C
from rlx.kernels.numpy.namespace import NUMPY
from rlx.kernels.random import threefry2x32
from rlx.runtime.model import Model

from helpers import convert


@pytest.fixture(autouse=True)
def _seeded_torch() -> None:
    """PyTorch's own draws (compared by their statistics) are the same on every run and worker."""
    torch.manual_seed(0)


N = 200_000  # draws per statistic: the standard error of a mean is σ / 447


def _words(*values: int) -> tuple[np.ndarray, ...]:
    return tuple(np.array([v], np.uint32) for v in values)


# Random123's known-answer tests for threefry2x32_20 (kat_vectors): key, counter → output.
KAT = [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key,counter,want", KAT, ids=["zeros", "ones", "pi"])
def test_threefry_matches_random123_known_answers(key, counter, want) -> None:
    got = threefry2x32(_words(*key), _words(*counter))
    assert tuple(int(w[0]) for w in got) == want
    assert all(w.dtype == np.uint32 for w in got)


def test_random_bits_are_uniform_words() -> None:
    from rlx.kernels import KERNELS

    state = np.array([12345, 0], np.int64)
    bits = KERNELS["RandomBits"](C.RandomBits(None, (N,), 0), state, xp=NUMPY)  # type: ignore[arg-type]
    assert bits.dtype == np.uint32 and bits.shape == (N,)
    for shift in (0, 16, 31):  # each bit, low to high, is set half the time
        share = float(((bits >> np.uint32(shift)) & 1).mean())
        assert abs(share - 0.5) < 5 * 0.5 / math.sqrt(N), (shift, share)
    other = KERNELS["RandomBits"](C.RandomBits(None, (N,), 1), state, xp=NUMPY)  # type: ignore[arg-type]
    assert float(np.mean(bits == other)) < 1e-3  # another stream: other words
    odd = KERNELS["RandomBits"](C.RandomBits(None, (3, 5), 0), state, xp=NUMPY)  # type: ignore[arg-type]
    np.testing.assert_array_equal(odd.reshape(-1), bits[:15])  # a shape is a prefix of the same stream


# ── distributions ────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Dist:
    name: str
    fn: Callable[[torch.Tensor], torch.Tensor]
    mean: float
    var: float
    support: Callable[[np.ndarray], np.ndarray]  # elementwise: inside the support

    def __str__(self) -> str:
        return self.name


def _lognormal(mu: float, s: float) -> tuple[float, float]:
    return math.exp(mu + s * s / 2), (math.exp(s * s) - 1) * math.exp(2 * mu + s * s)


DISTS = [
    Dist("rand", lambda x: torch.rand(x.shape), 0.5, 1 / 12, lambda v: (v >= 0) & (v < 1)),
    Dist("rand_like", lambda x: torch.rand_like(x), 0.5, 1 / 12, lambda v: (v >= 0) & (v < 1)),
    Dist("randn", lambda x: torch.randn(x.shape), 0.0, 1.0, np.isfinite),
    Dist("randn_like", lambda x: torch.randn_like(x), 0.0, 1.0, np.isfinite),
    Dist("normal", lambda x: torch.normal(torch.full_like(x, 2.0), torch.full_like(x, 3.0)), 2.0, 9.0, np.isfinite),
    Dist("normal_scalar", lambda x: torch.normal(-1.0, 0.5, x.shape), -1.0, 0.25, np.isfinite),
    Dist("normal_", lambda x: torch.empty_like(x).normal_(1.0, 2.0), 1.0, 4.0, np.isfinite),
    Dist("uniform_", lambda x: torch.empty_like(x).uniform_(-2.0, 3.0), 0.5, 25 / 12, lambda v: (v >= -2) & (v < 3)),
    Dist("exponential_", lambda x: torch.empty_like(x).exponential_(2.0), 0.5, 0.25, lambda v: v > 0),
    Dist(
        "geometric_",
        lambda x: torch.empty_like(x).geometric_(0.3),
        1 / 0.3,
        0.7 / 0.09,
        lambda v: (v >= 1) & (v == np.floor(v)),
    ),  # fmt: skip
    Dist("log_normal_", lambda x: torch.empty_like(x).log_normal_(0.5, 0.4), *_lognormal(0.5, 0.4), lambda v: v > 0),
    Dist("bernoulli_p", lambda x: torch.bernoulli(torch.full_like(x, 0.3)), 0.3, 0.21, lambda v: (v == 0) | (v == 1)),
    Dist("bernoulli_scalar", lambda x: x.bernoulli(0.8), 0.8, 0.16, lambda v: (v == 0) | (v == 1)),
    Dist("randint", lambda x: torch.randint(3, 10, x.shape), 6.0, 4.0, lambda v: (v >= 3) & (v < 10)),
    Dist(
        "randint_like", lambda x: torch.randint_like(x, 5), 2.0, 2.0, lambda v: (v >= 0) & (v < 5) & (v == np.floor(v))
    ),
    Dist(
        "dropout",
        lambda x: torch.nn.functional.dropout(x + 1, 0.3, training=True),
        1.0,
        0.3 / 0.7,
        lambda v: (v == 0) | np.isclose(v, 1 / 0.7),
    ),  # fmt: skip
]


def _draw(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> tuple[np.ndarray, Model]:
    model, _, _ = convert(fn, [x])
    return np.asarray(model(tensor_to_numpy(x))), model


@pytest.mark.parametrize("d", DISTS, ids=str)
def test_distribution_statistics(d: Dist) -> None:
    """Mean and variance within 5 standard errors of the law's, and of PyTorch's own draws'."""
    x = torch.zeros(N)
    got, _ = _draw(d.fn, x)
    want = d.fn(x).numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    v = got.astype(np.float64)
    assert d.support(v).all(), f"{d}: draws outside the support"
    se_mean = math.sqrt(d.var / N)
    assert abs(v.mean() - d.mean) < 5 * se_mean, (d.name, v.mean(), d.mean)
    assert abs(v.mean() - want.astype(np.float64).mean()) < 5 * math.sqrt(2) * se_mean
    # the variance's standard error, from the fourth moment of the draws themselves
    se_var = math.sqrt(max(float(np.mean((v - v.mean()) ** 4)) - d.var**2, 0.0) / N)
    assert abs(v.var() - d.var) < 6 * se_var + 1e-9, (d.name, v.var(), d.var)
    assert abs(v.var() - want.astype(np.float64).var()) < 6 * math.sqrt(2) * se_var + 1e-9


def test_normal_tails_and_quantiles() -> None:
    """Box-Muller's values: the ±1σ, ±2σ shares and the median are the normal law's."""
    v = _draw(lambda x: torch.randn_like(x), torch.zeros(N))[0].astype(np.float64)
    for k, share in ((1, 0.682689), (2, 0.954500)):
        p = float(np.mean(np.abs(v) < k))
        assert abs(p - share) < 5 * math.sqrt(share * (1 - share) / N), (k, p)
    assert abs(np.median(v)) < 0.01


def test_cauchy_quartiles() -> None:
    """No mean to test: the median is ``median``, the quartiles ``median ± sigma``."""
    v = _draw(lambda x: torch.empty_like(x).cauchy_(1.5, 2.0), torch.zeros(N))[0].astype(np.float64)
    q1, q2, q3 = np.quantile(v, [0.25, 0.5, 0.75])
    assert abs(q2 - 1.5) < 0.03 and abs(q1 - (1.5 - 2.0)) < 0.05 and abs(q3 - (1.5 + 2.0)) < 0.05


def test_bernoulli_follows_each_probability() -> None:
    p = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]).repeat(N // 5)
    v = _draw(lambda q: torch.bernoulli(q), p)[0].reshape(-1, 5)
    share = v.mean(axis=0)
    assert share[0] == 0 and share[4] == 1
    for got, want in zip(share[1:4], (0.1, 0.5, 0.9)):
        assert abs(got - want) < 5 * math.sqrt(want * (1 - want) / (N // 5))


@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial_frequencies(replacement: bool) -> None:
    probs = torch.tensor([1.0, 0.0, 2.0, 7.0]).repeat(20_000, 1)  # unnormalised, one impossible category
    n = 3 if not replacement else 5
    idx, _ = _draw(lambda p: torch.multinomial(p, n, replacement=replacement), probs)
    assert idx.shape == (20_000, n) and idx.dtype == np.int64
    assert ((idx >= 0) & (idx < 4) & (idx != 1)).all()
    first = np.bincount(idx[:, 0], minlength=4) / len(idx)
    np.testing.assert_allclose(first, [0.1, 0.0, 0.2, 0.7], atol=5 * math.sqrt(0.25 / len(idx)))
    if not replacement:
        assert (np.sort(idx, axis=1)[:, 1:] != np.sort(idx, axis=1)[:, :-1]).all(), "an index repeats in a row"
        # the second draw, given a first: P(2 second | 3 first) = 0.2 / 0.3
        after = idx[idx[:, 0] == 3, 1]
        assert abs(float(np.mean(after == 2)) - 2 / 3) < 5 * math.sqrt(2 / 9 / len(after))
    else:
        every = np.bincount(idx.reshape(-1), minlength=4) / idx.size
        np.testing.assert_allclose(every, [0.1, 0.0, 0.2, 0.7], atol=5 * math.sqrt(0.25 / idx.size))


def test_rrelu_training_slopes() -> None:
    x = torch.cat([-torch.ones(N // 2), torch.ones(N // 2)])
    model, _, _ = convert(lambda t: torch.nn.functional.rrelu(t, 0.1, 0.3, training=True), [x])
    y = np.asarray(model(x.numpy()))
    slopes = -y[: N // 2]
    assert ((slopes >= 0.1) & (slopes <= 0.3)).all() and (y[N // 2 :] == 1).all()
    assert abs(slopes.mean() - 0.2) < 5 * math.sqrt(0.04 / 12 / (N // 2))
    assert abs(slopes.var() - 0.04 / 12) < 0.1 * 0.04 / 12


# ── dtypes and shapes against PyTorch ────────────────────────────────────────
FLOAT_OPS = {
    "rand": lambda x: torch.rand(2, 3, dtype=x.dtype),
    "randn_like": lambda x: torch.randn_like(x),
    "normal": lambda x: torch.normal(x, 1.0),
    "uniform_": lambda x: torch.empty_like(x).uniform_(0, 2),
    "exponential_": lambda x: torch.empty_like(x).exponential_(),
    "cauchy_": lambda x: torch.empty_like(x).cauchy_(),
    "log_normal_": lambda x: torch.empty_like(x).log_normal_(),
    "bernoulli": lambda x: torch.bernoulli(x.clamp(0, 1)),
    "dropout": lambda x: torch.nn.functional.dropout(x, 0.5, training=True),
    "multinomial": lambda x: torch.multinomial(x.abs() + 0.1, 2),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(FLOAT_OPS))
def test_float_dtypes_and_shapes_match_torch(name: str, dtype: torch.dtype) -> None:
    x = torch.rand(4, 5).to(dtype)
    got, _ = _draw(FLOAT_OPS[name], x)
    want = tensor_to_numpy(FLOAT_OPS[name](x))
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    v = got.astype(np.float64)
    assert not np.isnan(v).any()
    if name in ("rand", "uniform_"):
        lo, hi = (0, 1) if name == "rand" else (0, 2)
        assert (v >= lo).all() and (v <= hi).all() and (name != "rand" or (v < 1).all())


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.randint(0, 7, (3, 4)),
        lambda x: torch.randint(-5, 5, (6,), dtype=torch.int32),
        lambda x: torch.randint(2, 9, (3,), dtype=torch.float32),
        lambda x: torch.randint_like(x, 3, 6),
        lambda x: torch.empty_like(x).geometric_(0.5),
        lambda x: torch.bernoulli(torch.full((3,), 0.5)).to(torch.int64) + x[:3],
    ],
    ids=["randint", "randint_i32", "randint_f32", "randint_like_i64", "geometric_i64", "bernoulli_i64"],
)
def test_integer_dtypes_match_torch(fn) -> None:
    x = torch.zeros(5, dtype=torch.int64)
    got, _ = _draw(fn, x)
    want = fn(x)
    assert got.shape == tuple(want.shape) and got.dtype == want.numpy().dtype
    assert (got == np.floor(got)).all()


@pytest.mark.parametrize("state", [(0, 0), (-1, 5), (2**62 + 3, 2**40)])
def test_random_bits_are_the_same_words_on_jax(state) -> None:
    pytest.importorskip("jax")
    from rlx.kernels import KERNELS
    from rlx.kernels.jax.kernels import JAX, x64

    s = np.array(state, np.int64)
    call = C.RandomBits(None, (7, 301), 4)  # type: ignore[arg-type]
    want = KERNELS["RandomBits"](call, s, xp=NUMPY)
    with x64():
        got = np.asarray(KERNELS["RandomBits"](call, JAX.asarray(s), xp=JAX))
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("p", [0.5, 1.0])
def test_native_dropout_in_training_returns_output_and_its_mask(p: float) -> None:
    x = torch.randn(400, 50)
    model, _, _ = convert(lambda a: torch.ops.aten.native_dropout(a, p, True), [x], decomposition="core")
    out, mask = (np.asarray(a) for a in model(x.numpy()))
    want_out, want_mask = torch.ops.aten.native_dropout(x, p, True)
    assert (out.dtype, mask.dtype, out.shape) == (np.float32, np.bool_, tuple(want_out.shape))
    assert want_mask.dtype == torch.bool
    expected = np.where(mask, x.numpy() / (1 - p) if p < 1 else 0, 0).astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert abs(float(mask.mean()) - (1 - p)) < 5 * math.sqrt(p * (1 - p) / mask.size) + 1e-12


@pytest.mark.parametrize(
    "nd,shape,kernel,out",
    [(2, (2, 3, 9, 11), (3, 2), (4, 5)), (2, (3, 7, 7), 2, (3, 1)), (3, (1, 2, 6, 7, 8), (2, 3, 2), (3, 2, 4))],
    ids=["2d", "2d_unbatched", "3d"],
)
def test_fractional_max_pool_given_its_samples_matches_torch(nd, shape, kernel, out) -> None:
    """With the samples passed in (not drawn), the pooling is deterministic: values and indices exact."""
    fn = torch.nn.functional.fractional_max_pool2d if nd == 2 else torch.nn.functional.fractional_max_pool3d
    g = torch.Generator().manual_seed(5)
    x = torch.randn(shape, generator=g)
    x.view(-1)[::17] = float("nan")  # NaN wins its window, as in PyTorch's kernel
    batch = shape[0] if len(shape) == nd + 2 else 1
    samples = torch.rand(batch, shape[-nd - 1], nd, generator=g)

    def pool(a: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return fn(a, kernel, output_size=out, return_indices=True, _random_samples=s)

    model, _, _ = convert(pool, [x, samples])
    got = model(x.numpy(), samples.numpy())
    for k, (g_, w) in enumerate(zip(got, pool(x, samples))):
        np.testing.assert_array_equal(np.asarray(g_), w.numpy(), err_msg=f"output {k}")


@pytest.mark.parametrize("causal", [False, True])
def test_attention_dropout_averages_to_attention(causal: bool) -> None:
    """SDPA with dropout_p: each call drops other weights; the mean over calls is plain attention
    (E[mask / (1 - p)] = 1), and every call keeps the shape and dtype."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=g) for _ in range(3))
    fn = torch.nn.functional.scaled_dot_product_attention
    model, program, _ = convert(lambda a, b_, c: fn(a, b_, c, dropout_p=0.4, is_causal=causal), [q, k, v])
    assert "Attention" not in {ins.call.op for ins in program.instrs}  # spelled out, with the dropout
    runs = np.stack([model(q.numpy(), k.numpy(), v.numpy()) for _ in range(2000)])
    assert runs.dtype == np.float32 and runs.shape[1:] == (1, 2, 5, 4)
    assert not np.allclose(runs[0], runs[1])
    want = fn(q, k, v, is_causal=causal).numpy()
    spread = runs.std(axis=0) / math.sqrt(len(runs))
    assert (np.abs(runs.mean(axis=0) - want) <= 5 * spread + 1e-6).all()


@pytest.mark.parametrize("op_name", ["feature_dropout", "alpha_dropout", "feature_alpha_dropout"])
def test_dropout_variants_in_training(op_name: str) -> None:
    """At the aten level the variants stay whole: channels dropped together (feature), SELU's
    saturation and rescaling (alpha), with PyTorch's values for kept and dropped entries."""
    p, x = 0.4, torch.randn(64, 32, 3, 3, generator=torch.Generator().manual_seed(0))
    alpha = -1.0507009873554804934193349852946 * 1.6732632423543772848170429916717
    x[(x - alpha).abs() < 1e-3] = 0.5  # at x = alpha (alpha) or 0 (feature) kept and dropped entries are equal
    fn = getattr(torch.ops.aten, op_name)
    model, program, _ = convert(lambda t: fn(t, p, True), [x], decomposition="aten")
    y = np.asarray(model(x.numpy())).astype(np.float64)
    xs = x.numpy().astype(np.float64)
    if op_name == "feature_dropout":
        kept_value, dropped_value = xs / (1 - p), np.zeros_like(xs)
    else:
        a = ((1 - p) * (1 + p * alpha**2)) ** -0.5
        kept_value, dropped_value = a * xs + (-a * alpha * p), np.full_like(xs, a * alpha - a * alpha * p)
    kept = np.isclose(y, kept_value, rtol=1e-5, atol=1e-6)
    dropped = np.isclose(y, dropped_value, rtol=1e-5, atol=1e-6) & ~kept
    assert (kept | dropped).all()
    if op_name.startswith("feature"):  # one draw per (sample, channel)
        per_channel = dropped.reshape(64, 32, -1)
        assert (per_channel.all(axis=2) | ~per_channel.any(axis=2)).all()
        assert abs(float(per_channel[:, :, 0].mean()) - p) < 5 * math.sqrt(p * (1 - p) / (64 * 32))
    else:
        assert abs(float(dropped.mean()) - p) < 5 * math.sqrt(p * (1 - p) / dropped.size)
    if op_name == "alpha_dropout":  # SELU's moments survive: mean 0, variance 1 for a standard input
        assert abs(y.mean()) < 0.02 and abs(y.var() - 1) < 0.03
