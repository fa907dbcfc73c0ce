"""The JAX engine's MatrixExp: ``jax.scipy.linalg.expm`` (Padé with scaling and squaring, as the
shared definition), whose squaring count is traced rather than read from the data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import MatrixExp


@override("MatrixExp")
def matrix_exp(c: MatrixExp, x: Any) -> Any:
    if x.size == 0:
        return x
    expm = jnp.vectorize(jsl.expm, signature="(n,n)->(n,n)")
    return expm(x.astype(np.float64)).astype(x.dtype)
