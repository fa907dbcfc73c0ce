"""JAX kernels for spectral Calls (Fft, Conj), the same transforms as ``rlx.runtime.spectral_kernels``.

Computed in complex128 and rounded once to the output dtype, like the numpy kernels; the backend
traces with x64 enabled, so the double-precision transform is really double.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from rlx.ir import calls as C
from rlx.runtime.jax_backend.registry import kernel
from rlx.runtime.spectral_kernels import _FORWARD_NORM, _INVERSE_NORM  # jnp.fft's norm names are numpy's

_COMPLEX_OF = {np.dtype(np.float64): np.dtype(np.complex128)}
_REAL_OF = {np.dtype(np.complex128): np.dtype(np.float64)}


@kernel(C.Fft)
def fft(c: C.Fft, x: jnp.ndarray) -> jnp.ndarray:
    axes = tuple(c.axes)
    if c.kind == "r2c":
        xw = x.astype(jnp.float64)
        norm = _FORWARD_NORM[c.norm]
        out = jnp.fft.rfftn(xw, axes=axes, norm=norm) if c.onesided else jnp.fft.fftn(xw, axes=axes, norm=norm)
        out = out if c.forward else jnp.conj(out)
        return out.astype(_COMPLEX_OF.get(np.dtype(x.dtype), np.dtype(np.complex64)))
    if c.kind == "c2r":
        # Hermitian c2r over the last axis after the inverse c2c over the leading ones; hfft (forward)
        # is the inverse transform of the conjugated spectrum.
        xw = x.astype(jnp.complex128)
        sizes = [x.shape[a] for a in axes[:-1]] + [c.last_size]
        out = jnp.fft.irfftn(jnp.conj(xw) if c.forward else xw, s=sizes, axes=axes, norm=_INVERSE_NORM[c.norm])
        return out.astype(_REAL_OF.get(np.dtype(x.dtype), np.dtype(np.float32)))
    if c.kind == "c2c":
        xw = x.astype(jnp.complex128)
        if c.forward:
            out = jnp.fft.fftn(xw, axes=axes, norm=_FORWARD_NORM[c.norm])
        else:
            out = jnp.fft.ifftn(xw, axes=axes, norm=_INVERSE_NORM[c.norm])
        want = (
            x.dtype
            if jnp.issubdtype(x.dtype, jnp.complexfloating)
            else _COMPLEX_OF.get(np.dtype(x.dtype), np.complex64)
        )
        return out.astype(want)
    raise ValueError(f"Fft: unknown kind {c.kind!r}")


@kernel(C.Conj)
def conj(c: C.Conj, x: jnp.ndarray) -> jnp.ndarray:
    return jnp.conj(x) if jnp.issubdtype(x.dtype, jnp.complexfloating) else x
