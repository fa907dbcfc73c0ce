"""The JAX engine's own Cast (float → integer as PyTorch's CPU cast, not XLA's saturation) and
Bitcast (jax arrays have no memory order to ask for)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np

from ...ir import dtypes
from ...kernels.precision import widen
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import Bitcast, Cast


@override("Cast")
def cast(c: Cast, x: Any) -> Any:
    x, dt = jnp.asarray(x), dtypes.to_numpy(c.dtype)
    if jnp.issubdtype(x.dtype, jnp.floating) and dt.kind in "iu":
        return _float_to_int(x, dt)
    return x.astype(dt)


def _float_to_int(x: Any, dt: np.dtype) -> Any:
    """Float → integer as PyTorch's CPU cast (C's, numpy's) behaves on x86: truncate toward zero;
    NaN, ±inf and values out of range give the "integer indefinite" INT_MIN of a 32- or 64-bit
    conversion; narrower types go through int32 and keep its low bits. XLA would saturate instead."""
    wide = np.dtype(np.int64) if dt.itemsize == 8 else np.dtype(np.int32)
    low = np.iinfo(wide).min
    xw = widen(x)
    inside = (xw >= low) & (xw < -float(low))  # False for NaN
    out = jnp.where(inside, jnp.where(inside, xw, 0).astype(wide), low)
    return out.astype(dt)


@override("Bitcast")
def bitcast(c: Bitcast, x: Any) -> Any:
    return jnp.asarray(x).view(dtypes.to_numpy(c.dtype))  # lax.bitcast_convert_type, element by element
