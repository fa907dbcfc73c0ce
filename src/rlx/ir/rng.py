"""The random generator's state: how a seed becomes one, how a fork gets its own, and which values
of a program depend on a draw.

A program with random ops reads its generator state from the state input ``RNG_STATE`` (an
``i64[2]``: key, counter; ``rlx.ir.calls.RandomBits``) and returns it advanced by one. Its
initial value comes from a seed (``seed_state``); bundles and generated packages store the one
of seed 0 under ``RNG_KEY``, so every engine starts from the same stream. The seed's mixing is
``rlx.ir.seeds``, which generated packages carry with the generator (``rlx.kernels.random``).
"""

from __future__ import annotations

import numpy as np

from rlx.ir import calls as C
from rlx.ir.program import Program
from rlx.ir.seeds import fork_state, seed_state

RNG_STATE = "rlx_rng"  # the program input (and state) holding the generator
RNG_KEY = "rlx.rng_state"  # its initial value's name in weights.safetensors
DEFAULT_SEED = 0

__all__ = ["DEFAULT_SEED", "RNG_KEY", "RNG_STATE", "fork_state", "has_rng", "random_values", "seed_state",
           "with_rng_state"]  # fmt: skip


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
