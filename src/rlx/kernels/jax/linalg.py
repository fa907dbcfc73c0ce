"""The JAX engine's linear algebra of its own:

- MatrixExp: ``jax.scipy.linalg.expm`` (Padé with scaling and squaring, as the shared definition),
  whose squaring count is traced rather than read from the data;
- LdlFactor, LdlSolve: XLA has no Bunch-Kaufman LDLᵀ (LAPACK ``sytrf``/``sytrs``) and jax exposes
  none, so the compiled program calls the shared numpy kernels back on the host
  (``jax.pure_callback``), which run LAPACK through scipy (the optional extra ``rlx[special]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from ...kernels.linalg import ldl_factor, ldl_solve, scipy_lapack
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import LdlFactor, LdlSolve, MatrixExp


@override("MatrixExp")
def matrix_exp(c: MatrixExp, x: Any) -> Any:
    if x.size == 0:
        return x
    expm = jnp.vectorize(jsl.expm, signature="(n,n)->(n,n)")
    return expm(x.astype(np.float64)).astype(x.dtype)


_LDL_PARTS = ("ld", "pivots", "info")


@override("LdlFactor")
def ldl_factor_callback(c: LdlFactor, x: Any) -> Any:
    scipy_lapack()  # a missing scipy fails here, while tracing, with the line naming the extra
    part = _LDL_PARTS.index(c.part)
    shape, dtype = ((x.shape, x.dtype), (x.shape[:-1], np.int32), (x.shape[:-2], np.int32))[part]

    def host(a: np.ndarray) -> np.ndarray:
        return ldl_factor(np.asarray(a), c.hermitian)[part]

    return jax.pure_callback(host, jax.ShapeDtypeStruct(shape, dtype), x)


@override("LdlSolve")
def ldl_solve_callback(c: LdlSolve, ld: Any, pivots: Any, b: Any) -> Any:
    scipy_lapack()
    batch = jnp.broadcast_shapes(ld.shape[:-2], pivots.shape[:-1], b.shape[:-2])

    def host(factors: np.ndarray, ipiv: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        return ldl_solve(np.asarray(factors), np.asarray(ipiv), np.asarray(rhs), c.hermitian).astype(rhs.dtype)

    return jax.pure_callback(host, jax.ShapeDtypeStruct((*batch, *b.shape[-2:]), b.dtype), ld, pivots, b)
