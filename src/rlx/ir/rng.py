"""The random generator's state: how a seed becomes one, how a fork gets its own, and which values
of a program depend on a draw.

A program with random ops reads its generator state from the state input ``RNG_STATE`` (an
``i64[2]``: key, counter; ``rlx.ir.calls.RandomBits``) and returns it advanced by one. Its
initial value comes from a seed (``seed_state``); bundles and generated packages store the one
of seed 0 under ``RNG_KEY``, so every engine starts from the same stream.
"""

from __future__ import annotations

import numpy as np

from rlx.errors import UsageError
from rlx.ir import calls as C
from rlx.ir.program import Program

RNG_STATE = "rlx_rng"  # the program input (and state) holding the generator
RNG_KEY = "rlx.rng_state"  # its initial value's name in weights.safetensors
DEFAULT_SEED = 0
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
    """The generator state a seed starts from (any Python int; equal seeds, equal streams)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise UsageError(f"seed must be an int, found {type(seed).__name__}")
    return _state(_splitmix64(int(seed) & _M64))


def fork_state(state: np.ndarray, k: int) -> np.ndarray:
    """The initial state of the ``k``-th fork of a stream whose initial state is ``state``: a key of
    its own (derived, so forks are reproducible too), counter 0."""
    key = int(np.asarray(state).view(np.uint64)[0])
    return _state(_splitmix64(key ^ _splitmix64(k + 1)))


def has_rng(program: Program) -> bool:
    return any(s.name == RNG_STATE for s in program.state)


def with_rng_state(program: Program, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``tensors`` with the generator's initial value (seed ``DEFAULT_SEED``) added when the program
    draws random numbers and they do not hold one yet."""
    if not has_rng(program) or RNG_KEY in tensors:
        return tensors
    return {**tensors, RNG_KEY: seed_state(DEFAULT_SEED)}


def random_values(program: Program) -> set[str]:
    """Every value of ``program`` whose contents depend on a random draw (a RandomBits result, or
    computed from one)."""
    tainted: set[str] = set()
    for ins in program.instrs:
        if isinstance(ins.call, C.RandomBits) or any(r.name in tainted for r in ins.call.refs()):
            tainted.add(ins.result)
    return tainted
