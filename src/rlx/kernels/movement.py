"""Shape and data movement: Reshape, Permute, Expand, Slice, Concat, Pad, IndexSelect, Gather, Index, Diagonal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .registry import kernel, static

if TYPE_CHECKING:
    from ..ir import calls as C
    from .namespace import ArrayNamespace


@kernel("Reshape")
def reshape(c: C.Reshape, x: Any, *, xp: ArrayNamespace) -> Any:
    return xp.reshape(x, tuple(c.shape))


@kernel("Permute")
def permute(c: C.Permute, x: Any, *, xp: ArrayNamespace) -> Any:
    return xp.transpose(x, tuple(c.perm))


@kernel("Expand")
def expand(c: C.Expand, x: Any, *, xp: ArrayNamespace) -> Any:
    return xp.broadcast_to(x, tuple(c.shape))


@kernel("Slice")
def slice_(c: C.Slice, x: Any, *, xp: ArrayNamespace) -> Any:
    return xp.asarray(x)[(slice(None),) * c.axis + (slice(c.start, c.stop, c.step),)]


@kernel("Concat")
def concat(c: C.Concat, xs: list[Any], *, xp: ArrayNamespace) -> Any:
    return xp.concatenate(xs, axis=c.axis)


@kernel("Pad")
def pad(c: C.Pad, x: Any, *, xp: ArrayNamespace) -> Any:
    x = xp.asarray(x)
    # Negative widths crop first; what remains is padded with the constant.
    pads = [(static(lo), static(hi)) for lo, hi in c.pads]
    crop = tuple(slice(max(0, -lo), x.shape[i] - max(0, -hi)) for i, (lo, hi) in enumerate(pads))
    x = x[crop]
    widths = [(max(0, lo), max(0, hi)) for lo, hi in pads]
    if not any(lo or hi for lo, hi in widths):
        return x
    return xp.pad(x, widths, mode="constant", constant_values=np.asarray(c.value).astype(x.dtype))


@kernel("IndexSelect")
def index_select(c: C.IndexSelect, x: Any, index: Any, *, xp: ArrayNamespace) -> Any:
    return xp.take(x, index, axis=c.axis)


@kernel("Gather")
def gather(c: C.Gather, x: Any, index: Any, *, xp: ArrayNamespace) -> Any:
    # torch.gather lets the index be smaller than x on the other axes: crop x to match.
    crop = tuple(slice(None) if a == c.axis else slice(0, n) for a, n in enumerate(index.shape))
    return xp.take_along_axis(x[crop], index, axis=c.axis)


@kernel("Index")
def index(c: C.Index, x: Any, indices: list[Any | None], *, xp: ArrayNamespace) -> Any:
    return xp.asarray(x)[tuple(slice(None) if i is None else i for i in indices)]


@kernel("Diagonal")
def diagonal(c: C.Diagonal, x: Any, *, xp: ArrayNamespace) -> Any:
    return xp.ascontiguousarray(xp.diagonal(x, c.offset, c.axis1, c.axis2))
