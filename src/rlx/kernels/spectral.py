"""Spectral Calls: Fft and Conj.

The transforms run in double precision (complex128) and are rounded once to the output dtype:
PyTorch's single-precision FFTs carry a few ulps of their own error, and the exactly rounded
answer is the closest we can get to every one of its backends (MKL, pocketfft).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .registry import kernel

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace

# Call.norm (a scale, whatever the direction) → the ``norm`` of numpy.fft / jax.numpy.fft for a
# forward / an inverse transform: they name the direction that carries the scale instead.
FORWARD_NORM = {"none": "backward", "ortho": "ortho", "by_n": "forward"}
INVERSE_NORM = {"none": "forward", "ortho": "ortho", "by_n": "backward"}

# Real dtype ↔ the complex dtype of the same precision (PyTorch's toComplexType / toRealValueType).
_COMPLEX_OF: dict[np.dtype, np.dtype] = {
    np.dtype(np.float32): np.dtype(np.complex64),
    np.dtype(np.float64): np.dtype(np.complex128),
}
_REAL_OF = {c: r for r, c in _COMPLEX_OF.items()}


def _complex_of(dtype: Any) -> np.dtype:
    return _COMPLEX_OF.get(np.dtype(dtype), np.dtype(np.complex64))


@kernel("Fft")
def fft(c: C.Fft, x: Any, *, xp: ArrayNamespace) -> Any:
    axes = tuple(c.axes)
    if c.kind == "r2c":
        # Forward: rfft. Inverse (ihfft): the conjugate of the forward sums, scaled the same.
        xw = x.astype(np.float64)
        norm = FORWARD_NORM[c.norm]
        out = xp.fft.rfftn(xw, axes=axes, norm=norm) if c.onesided else xp.fft.fftn(xw, axes=axes, norm=norm)
        return (out if c.forward else xp.conj(out)).astype(_complex_of(x.dtype))
    if c.kind == "c2r":
        # irfftn runs the inverse c2c over the leading axes, then the Hermitian c2r over the last,
        # which reads only the real part of the zero (and Nyquist) frequency — as PyTorch does.
        # Forward (hfft) is the inverse transform of the conjugated spectrum.
        xw = x.astype(np.complex128)
        sizes = [x.shape[a] for a in axes[:-1]] + [c.last_size]
        out = xp.fft.irfftn(xp.conj(xw) if c.forward else xw, s=sizes, axes=axes, norm=INVERSE_NORM[c.norm])
        return out.astype(_REAL_OF.get(np.dtype(x.dtype), np.dtype(np.float32)))
    if c.kind == "c2c":
        xw = x.astype(np.complex128)
        if c.forward:
            out = xp.fft.fftn(xw, axes=axes, norm=FORWARD_NORM[c.norm])
        else:
            out = xp.fft.ifftn(xw, axes=axes, norm=INVERSE_NORM[c.norm])
        return out.astype(x.dtype if x.dtype.kind == "c" else _complex_of(x.dtype))
    raise ValueError(f"Fft: unknown kind {c.kind!r}")


@kernel("Conj")
def conj(c: C.Conj, x: Any, *, xp: ArrayNamespace) -> Any:
    return xp.conj(x) if x.dtype.kind == "c" else x
