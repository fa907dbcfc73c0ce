"""How a seed becomes the random generator's state, and how a fork gets a state of its own.

The state is an ``int64[2]`` (key, counter) that programs read from ``RNG_STATE``
(``rlx.ir.rng``). It is part of the program contract, so it lives in ``ir``; the generator that
consumes it is ``rlx.kernels.random``. numpy only: generated packages carry this file.
"""

from __future__ import annotations

import numpy as np

_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """SplitMix64's output function: a bijective 64-bit mix (Steele, Lea, Flood, OOPSLA'14)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _state(key: int, counter: int = 0) -> np.ndarray:
    return np.array([key, counter], dtype=np.uint64).view(np.int64)


def seed_state(seed: int) -> np.ndarray:
    """The generator state (``int64[2]``: key, counter) a seed starts from: equal seeds, equal streams."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, found {type(seed).__name__}")
    return _state(_splitmix64(int(seed) & _M64))


def fork_state(state: np.ndarray, k: int) -> np.ndarray:
    """The initial state of the ``k``-th fork (k ≥ 1) of a stream that started from ``state``: a key
    of its own, derived (so forks are reproducible too), counter 0."""
    key = int(np.asarray(state).view(np.uint64)[0])
    return _state(_splitmix64(key ^ _splitmix64(k)))
