"""Random bits: RandomBits, a counter-based generator (Threefry-2x32, 20 rounds).

Threefry (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the generator
``jax.random`` uses) maps a 64-bit key and a 64-bit counter to 64 random bits with nothing but
32-bit additions, rotations and xors, so every engine computes the same words bit for bit. The
generator state is an int64 pair ``(key, counter)``: a draw folds the counter and its own stream
number (its place in the program) into the key, then encrypts the element indices ``0, 1, …``
under that key. Nothing is stored between draws but the state, which the program advances once
per call: reproducible from the seed, and every draw of every call independent of the others.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ir.seeds import fork_state, seed_state  # noqa: F401  (re-exported: generated packages seed from here)
from .registry import kernel, static

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA  # Threefish's key-schedule constant
_MASK = 0xFFFFFFFF


def _rotl(x: Any, r: int) -> Any:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(key: tuple[Any, Any], counter: tuple[Any, Any]) -> tuple[Any, Any]:
    """Threefry-2x32-20 of uint32 arrays: ``key`` and ``counter`` word pairs → two random words.
    Written with operators only, so numpy and jax.numpy arrays (or a mix with scalars) both work."""
    ks = (key[0], key[1], key[0] ^ key[1] ^ np.uint32(_PARITY))
    x0, x1 = counter[0] + ks[0], counter[1] + ks[1]
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(block + 1) % 3]
        x1 = x1 + ks[(block + 2) % 3] + np.uint32(block + 1)
    return x0, x1


def _words(v: Any, xp: ArrayNamespace) -> tuple[Any, Any]:
    """An int64 array as its low and high uint32 words."""
    u = v.astype(np.uint64)
    return (u & np.uint64(_MASK)).astype(np.uint32), (u >> np.uint64(32)).astype(np.uint32)


@kernel("RandomBits")
def random_bits(c: C.RandomBits, state: Any, *, xp: ArrayNamespace) -> Any:
    shape = tuple(static(d) for d in c.shape)
    n = math.prod(shape)
    key = _words(state[0:1], xp)
    key = threefry2x32(key, _words(state[1:2], xp))  # this call's key
    key = threefry2x32(key, (xp.full((1,), c.stream, dtype=np.uint32), xp.zeros((1,), dtype=np.uint32)))
    blocks = (n + 1) // 2
    index = xp.arange(blocks, dtype=np.uint32)
    x0, x1 = threefry2x32(key, (index, xp.zeros((blocks,), dtype=np.uint32)))
    return xp.reshape(xp.stack([x0, x1], axis=-1), (2 * blocks,))[:n].reshape(shape)
