"""numpy's float32 exp2 against exp by where their results fall, and rlx's GELU and attention on
inputs with a trained model's outliers against PyTorch, in one run.

    python benchmarks/exp_cliff.py

Why the numpy engine computes every float32 exponential with ``np.exp``: ``np.exp2`` is faster on
normal results but leaves its vectorised loop for results below 2^-126 (subnormal or zero). Random
weights keep activations small, so the model benchmark (bench.py) never reaches that range; GELU
inputs with |x| > 13 and softmax scores far below their row's maximum do.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rlx.ir import calls as C  # noqa: E402
from rlx.ir.program import Ref  # noqa: E402
from rlx.kernels.numpy.namespace import gelu_float32  # noqa: E402
from rlx.kernels.numpy.nn import attention  # noqa: E402

torch.set_num_threads(2)


def median_ms(fn: Callable[[], object], runs: int = 60) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def exponentials(n: int = 1 << 18) -> None:
    print(f"float32 exponential of {n} elements, median ms, by where the results fall")
    print(f"{'results':<28}{'np.exp':>10}{'np.exp2':>10}{'exp2/exp':>10}")
    out = np.empty(n, np.float32)
    for label, lo, hi in [
        ("[2^-10, 1]", -10, 0),
        ("[2^-126, 2^-100] (normal)", -126, -100),
        ("[2^-149, 2^-126] (subnormal)", -149, -126),
        ("below 2^-149 (zero)", -300, -150),
    ]:
        p = np.random.default_rng(0).uniform(lo, hi, n).astype(np.float32)  # base-2 exponents
        e = (p * np.float32(np.log(2))).astype(np.float32)  # the same results through exp
        with np.errstate(under="ignore"):
            t_exp, t_exp2 = median_ms(lambda e=e: np.exp(e, out=out)), median_ms(lambda p=p: np.exp2(p, out=out))
        print(f"{label:<28}{t_exp:>10.3f}{t_exp2:>10.3f}{t_exp2 / t_exp:>10.1f}")


def kernels() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2048, 128)).astype(np.float32)
    outliers = x.copy()
    outliers[:, ::16] *= 12  # one channel in 16 with |x| up to ~50, as in a trained model's outlier features
    q, k, v = (rng.standard_normal((8, 4, 100, 32)).astype(np.float32) for _ in range(3))
    peaked = q * 20  # scores spread over ±60: many softmax weights far below 2^-126
    call = C.Attention(Ref("q"), Ref("k"), Ref("v"), None, causal=False, scale=32**-0.5, gqa=False)

    print("\nrlx numpy kernels against PyTorch (2 threads), median ms")
    print(f"{'case':<34}{'rlx':>8}{'torch':>8}{'max err':>10}")
    cases = [
        ("GELU [2048,128], N(0,1)", lambda: gelu_float32(x), lambda: torch.nn.functional.gelu(torch.from_numpy(x))),
        (
            "GELU [2048,128], outliers",
            lambda: gelu_float32(outliers),
            lambda: torch.nn.functional.gelu(torch.from_numpy(outliers)),
        ),
        (
            "attention [8,4,100,32], N(0,1)",
            lambda: attention(call, q, k, v, None),
            lambda: torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v))),
        ),
        (
            "attention [8,4,100,32], peaked",
            lambda: attention(call, peaked, k, v, None),
            lambda: torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (peaked, k, v))),
        ),
    ]
    for label, ours, theirs in cases:
        err = float(np.abs(np.asarray(ours()) - theirs().numpy()).max())
        print(f"{label:<34}{median_ms(ours):>8.3f}{median_ms(theirs):>8.3f}{err:>10.1e}")


if __name__ == "__main__":
    exponentials()
    kernels()
