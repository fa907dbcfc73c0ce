"""The JAX engine's scatter kernels (IndexPut, Scatter).

The same results as the numpy kernels (``rlx.kernels.numpy.scatter``). Every write is reduced to
one flat form: the target's flat position for every element written (negative indices wrap as in
numpy; a position still outside the tensor is dropped) and the values in the same order. Then

- accumulating writes combine every value at a repeated position (a scatter-add or -multiply …);
- plain writes keep the last value written to a position, as numpy's assignment does, computed
  deterministically (the largest source position per target wins) rather than left to XLA, whose
  scatter leaves the survivor of repeated indices unspecified (and it differs on GPU). That costs
  a scatter-max and a gather beside the write: a few times a bare XLA scatter.

A bool mask stands for the integer positions of its ``True`` entries, as in PyTorch. Their number
is data, so under ``jax.jit`` the mask becomes ``mask.size`` positions, padded with out-of-range
ones that are dropped, and a value operand that lists one value per ``True`` entry is padded to
match. Needs ``jax_enable_x64`` for int64.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from ...kernels.precision import HALF, highest, lowest
from .overrides import override

if TYPE_CHECKING:
    from ...ir.calls import IndexPut, Scatter

Array = jnp.ndarray
_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)


def _flat_positions(coords: list[Array], shape: tuple[int, ...]) -> Array:
    """Row-major flat position of ``coords`` (one int array per axis, all the same shape) in a
    tensor of ``shape``; negative coordinates wrap once, anything still outside maps to
    ``prod(shape)`` (one past the end, dropped by ``mode="drop"``)."""
    size = math.prod(shape)
    lin = jnp.zeros(coords[0].shape, _I64) if coords else jnp.zeros((), _I64)
    valid = jnp.ones(lin.shape, bool)
    for c, n in zip(coords, shape):
        c = c.astype(_I64)
        c = jnp.where(c < 0, c + n, c)
        valid = valid & (c >= 0) & (c < n)
        lin = lin * n + c
    return jnp.where(valid, lin, size)


def _last_write(x: Array, lin: Array, values: Array) -> Array:
    """``x.flat[lin[k]] = values[k]`` for every k in order (the last write to a position wins)."""
    flat = x.reshape(-1)
    lin, values = lin.reshape(-1), values.reshape(-1)
    order = jnp.arange(lin.shape[0], dtype=_I64)
    winner = jnp.full(flat.shape, -1, _I64).at[lin].max(order, mode="drop")
    taken = values[jnp.maximum(winner, 0)] if lin.shape[0] else jnp.zeros(flat.shape, flat.dtype)
    return jnp.where(winner >= 0, taken, flat).reshape(x.shape)


# ── IndexPut ─────────────────────────────────────────────────────────────────
def _expand_masks(indices: list[Array | None], shape: tuple[int, ...]) -> tuple[list[Array | None], int | None]:
    """Bool masks → one int array per axis they cover, their ``True`` positions in row-major order.
    Returns the indices and, when the number of positions had to be padded, the padded length."""
    masks = [i for i in indices if i is not None and i.dtype == np.bool_]
    if not masks:
        return indices, None
    if any(m.ndim == 0 for m in masks):
        raise ValueError("IndexPut: a 0-d bool mask is not supported")
    # An integer index beside a mask that lists one entry per True position fixes their number;
    # otherwise every mask yields as many positions as the largest has entries, the ones past its
    # True count out of range on every axis, so they are dropped.
    known = [i.shape[-1] for i in indices if i is not None and i.dtype != np.bool_ and i.ndim and i.shape[-1] != 1]
    size = known[0] if known else max(m.size for m in masks)
    out: list[Array | None] = []
    axis = 0
    for i in indices:
        if i is None or i.dtype != np.bool_:
            out.append(i)
            axis += 1
            continue
        dims = tuple(shape[axis : axis + i.ndim])
        out.extend(jnp.nonzero(i, size=size, fill_value=dims))
        axis += i.ndim
    return out, None if known else size


def _index_grid(indices: list[Array | None], shape: tuple[int, ...]) -> tuple[list[Array], tuple[int, ...], int]:
    """numpy's advanced indexing made explicit: one int array per axis of ``x``, all of the
    result's shape ``R``; also ``R`` and the position in ``R`` of the broadcast index axes."""
    n_idx = len(indices)
    advanced = [k for k, i in enumerate(indices) if i is not None]
    present = [i for i in indices if i is not None]
    b_shape = tuple(np.broadcast_shapes(*(tuple(i.shape) for i in present))) if present else ()
    # numpy: adjacent advanced indices put their broadcast shape where they stand, separated ones first.
    adjacent = not advanced or advanced == list(range(advanced[0], advanced[-1] + 1))
    b_at = advanced[0] if advanced and adjacent else 0
    sliced = [k for k in range(len(shape)) if k >= n_idx or indices[k] is None]
    before = [k for k in sliced if k < b_at] if adjacent else []
    after = [k for k in sliced if k not in before]
    r_shape = tuple(shape[k] for k in before) + b_shape + tuple(shape[k] for k in after)
    nb = len(b_shape)
    grid: list[Array] = []
    for k in range(len(shape)):
        index = indices[k] if k < n_idx else None
        if index is not None:
            idx = jnp.broadcast_to(index, b_shape).reshape((1,) * len(before) + b_shape + (1,) * len(after))
        else:
            r = before.index(k) if k in before else len(before) + nb + after.index(k)
            idx = jnp.arange(shape[k], dtype=_I64).reshape((1,) * r + (shape[k],) + (1,) * (len(r_shape) - r - 1))
        grid.append(jnp.broadcast_to(idx, r_shape))
    return grid, r_shape, len(before) + nb - 1


@override("IndexPut")
def index_put(c: IndexPut, x: Array, indices: list[Array | None], values: Array) -> Array:
    shape = tuple(x.shape)
    idx, padded = _expand_masks(list(indices), shape)
    grid, r_shape, mask_dim = _index_grid(idx, shape)
    values = jnp.asarray(values).astype(x.dtype)
    if padded is not None:
        # The masks' positions are the last broadcast index axis: a value operand with one value
        # per True entry (not broadcasting along it) is padded with zeros, which land on dropped positions.
        v = mask_dim - (len(r_shape) - values.ndim)
        if v >= 0 and values.shape[v] != 1 and values.shape[v] != padded:
            pad = [(0, 0)] * values.ndim
            pad[v] = (0, padded - values.shape[v])
            values = jnp.pad(values, pad)
    values = jnp.broadcast_to(values, r_shape)
    lin = _flat_positions(grid, shape)
    if not c.accumulate:
        return _last_write(x, lin, values)
    flat = x.reshape(-1)
    if x.dtype == np.bool_:  # bool addition is logical or
        return flat.at[lin.reshape(-1)].max(values.reshape(-1), mode="drop").reshape(shape)
    return flat.at[lin.reshape(-1)].add(values.reshape(-1), mode="drop").reshape(shape)


# ── Scatter ──────────────────────────────────────────────────────────────────
def _widen(x: Array) -> Array:
    """float16/bfloat16 → float32 (accumulate there, round once); bool → int32 (its or/and are the
    integer sum/product/max/min read back as bool)."""
    if x.dtype in HALF:
        return x.astype(_F32)
    return x.astype(np.int32) if x.dtype == np.bool_ else x


@override("Scatter")
def scatter(c: Scatter, x: Array, index: Array, src: Array) -> Array:
    src = jnp.asarray(src)
    if src.ndim == 0:
        src = jnp.broadcast_to(src, index.shape)
    # index may be smaller than src (and than x on the other axes): only its positions count.
    src = src[tuple(slice(0, n) for n in index.shape)]
    coords = [
        index
        if a == c.axis
        else jnp.broadcast_to(
            jnp.arange(n, dtype=_I64).reshape((1,) * a + (n,) + (1,) * (index.ndim - a - 1)), index.shape
        )
        for a, n in enumerate(index.shape)
    ]
    lin = _flat_positions(coords, tuple(x.shape)).reshape(-1)
    if c.reduce == "none":
        return _last_write(x, lin, src.astype(x.dtype))
    acc = _widen(x).reshape(-1)
    dt = np.dtype(acc.dtype)
    values = _widen(src).astype(dt).reshape(-1)
    touched = jnp.zeros(acc.shape, bool).at[lin].set(True, mode="drop")
    if not c.include_self:
        # Entries written to start from the reduction's identity: only the scattered values count.
        start = {"sum": 0, "mean": 0, "prod": 1, "amax": lowest(dt), "amin": highest(dt)}[c.reduce]
        acc = jnp.where(touched, jnp.asarray(start, dt), acc)
    at = acc.at[lin]
    if c.reduce in ("sum", "mean"):
        acc = at.add(values, mode="drop")
    elif c.reduce == "prod":
        acc = at.multiply(values, mode="drop")
    elif c.reduce == "amax":
        acc = at.max(values, mode="drop")  # lax.max propagates NaN, as np.maximum does
    elif c.reduce == "amin":
        acc = at.min(values, mode="drop")
    else:
        raise ValueError(f"unknown scatter reduction {c.reduce!r}")
    if c.reduce == "mean":
        count = jnp.full(acc.shape, 1 if c.include_self else 0, _I64).at[lin].add(1, mode="drop")
        count = jnp.maximum(count, 1)
        if dt.kind == "f":
            acc = jnp.where(touched, acc / count.astype(dt), acc)
        else:
            acc = jnp.where(touched, jnp.floor_divide(acc, count.astype(dt)), acc)
    return acc.reshape(x.shape).astype(x.dtype)
