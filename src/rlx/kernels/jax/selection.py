"""The JAX engine's GroupedMatMul: ``jax.lax.ragged_dot``, each row multiplied by its group's matrix
alone (the shared definition gathers one weight matrix per row, a [rows, K, N] array)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from ...kernels.precision import widen
from .namespace import HIGHEST
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import GroupedMatMul


@override("GroupedMatMul")
def grouped_mat_mul(c: GroupedMatMul, x: Any, w: Any, offsets: Any) -> Any:
    # Group g's rows end at offsets[g], never before the group ahead of it and never past the last
    # row (the numpy engine's reading); ragged_dot takes the groups' sizes and zeroes the rows after.
    ends = jnp.minimum(jax.lax.cummax(jnp.maximum(offsets.astype(np.int32), 0)), x.shape[0])
    sizes = jnp.diff(ends, prepend=jnp.zeros(1, np.int32))
    out = jax.lax.ragged_dot(widen(x), widen(w), sizes, precision=HIGHEST)
    return out.astype(x.dtype)
