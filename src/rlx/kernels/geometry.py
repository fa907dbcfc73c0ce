"""Window geometry of convolution and pooling: shape arithmetic only, no arrays of data.

Every engine plans its windows from these, so none can count an output extent or a divisor
differently from another.
"""

from __future__ import annotations

import numpy as np


def conv_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> int:
    """PyTorch's output extent for conv/pool windows (with its ceil_mode rule)."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside the input
        out -= 1
    return max(out, 0)


def conv_output_shape(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
) -> tuple[int, ...]:
    """The result shape of a forward convolution (PyTorch's extent rule per spatial axis)."""
    spatial = zip(x_shape[2:], w_shape[2:], stride, padding, dilation)
    return (x_shape[0], w_shape[0]) + tuple(conv_out_size(*geometry) for geometry in spatial)


def pool_geometry(
    shape: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
) -> tuple[tuple[int, ...], list[tuple[int, int]]]:
    """Output extents (PyTorch's rule) and per-axis (left, right) padding; the right padding grows
    so ceil_mode's last partial window fits."""
    nd = len(kernel)
    sizes = shape[len(shape) - nd :]
    out = tuple(conv_out_size(sizes[i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode) for i in range(nd))
    pads = [
        (
            padding[i],
            max(padding[i], (out[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 - sizes[i] - padding[i]),
        )
        for i in range(nd)
    ]
    return out, pads


def avg_pool_counts(
    sizes: tuple[int, ...], padding: tuple[int, ...], pads: list[tuple[int, int]], count_include_pad: bool
) -> np.ndarray:
    """1 where a window element counts towards the average, over the padded plane: the real
    elements, plus the zero padding when ``count_include_pad`` — but never the extra right margin
    ceil_mode adds (PyTorch clips windows to input + padding)."""
    counted = np.ones(sizes, dtype=np.float64)
    if not count_include_pad:
        return np.pad(counted, pads, constant_values=0)
    counted = np.pad(counted, [(p, p) for p in padding], constant_values=1)
    return np.pad(counted, [(0, hi - p) for (_lo, hi), p in zip(pads, padding)], constant_values=0)


def avg_pool_divisor(
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    pads: list[tuple[int, int]],
    out: tuple[int, ...],
    count_include_pad: bool,
) -> np.ndarray:
    """The divisor of every output window, ``[*out]`` (a static table)."""
    counted = avg_pool_counts(sizes, padding, pads, count_include_pad)
    divisor = np.zeros(out)
    for offs in np.ndindex(*kernel):
        divisor += counted[tuple(slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offs, out, stride))]
    return divisor


def window_positions(
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
    pads: list[tuple[int, int]],
    out: tuple[int, ...],
) -> np.ndarray:
    """For each output window, the flat positions in the unpadded plane of its elements (−1 in the
    padding): a static table ``[*out, prod(kernel)]``."""
    nd = len(sizes)
    coords = []  # per axis: [out_i, k_i] input coordinate, −1 outside
    for i in range(nd):
        pos = np.arange(out[i])[:, None] * stride[i] + np.arange(kernel[i])[None, :] * dilation[i] - pads[i][0]
        coords.append(np.where((pos >= 0) & (pos < sizes[i]), pos, -1))
    table = np.zeros(out + kernel, dtype=np.int64)
    valid = np.ones(out + kernel, dtype=bool)
    for i in range(nd):
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = out[i], kernel[i]
        ci = coords[i].reshape(shape)
        table = table * sizes[i] + np.maximum(ci, 0)
        valid &= ci >= 0
    return np.where(valid, table, -1).reshape(out + (-1,))
