"""Window geometry of convolution and pooling: shape arithmetic only, no arrays of data.

Every engine plans its windows from these, so none can count an output extent or a divisor
differently from another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# An extent per spatial axis: sizes, and the Call fields kernel, stride, padding, dilation.
Ints = tuple[int, ...]


def conv_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> int:
    """PyTorch's output extent for conv/pool windows (with its ceil_mode rule)."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside the input
        out -= 1
    return max(out, 0)


def conv_output_shape(x_shape: Ints, w_shape: Ints, stride: Ints, padding: Ints, dilation: Ints) -> Ints:
    """The result shape of a forward convolution (PyTorch's extent rule per spatial axis)."""
    spatial = zip(x_shape[2:], w_shape[2:], stride, padding, dilation)
    return (x_shape[0], w_shape[0]) + tuple(conv_out_size(*geometry) for geometry in spatial)


def pool_output(shape: Ints, kernel: Ints, stride: Ints, padding: Ints, dilation: Ints, ceil_mode: bool) -> Ints:
    """Output extents of pooling over the trailing ``len(kernel)`` axes of ``shape`` (PyTorch's rule)."""
    sizes = shape[len(shape) - len(kernel) :]
    return tuple(conv_out_size(*axis, ceil_mode) for axis in zip(sizes, kernel, stride, padding, dilation))


def pool_geometry(
    shape: Ints, kernel: Ints, stride: Ints, padding: Ints, dilation: Ints, ceil_mode: bool
) -> tuple[Ints, list[tuple[int, int]]]:
    """Output extents and per-axis (left, right) explicit padding, for runtimes whose pooling takes
    pads (ONNX): the right padding grows so ceil_mode's last partial window fits."""
    out = pool_output(shape, kernel, stride, padding, dilation, ceil_mode)
    sizes = shape[len(shape) - len(kernel) :]
    pads = [
        (p, max(p, (n - 1) * s + d * (k - 1) + 1 - size - p))
        for size, k, s, p, d, n in zip(sizes, kernel, stride, padding, dilation, out)
    ]
    return out, pads


def pool_windows(
    shape: Ints, kernel: Ints, stride: Ints, padding: Ints, dilation: Ints, ceil_mode: bool
) -> tuple[AxisWindows, ...]:
    """The clipped windows of pooling over the trailing ``len(kernel)`` axes of ``shape``: ceil_mode's
    last partial window reads padding past the input, which the buffer covers."""
    out = pool_output(shape, kernel, stride, padding, dilation, ceil_mode)
    return clip_windows(shape[len(shape) - len(kernel) :], kernel, stride, padding, dilation, out)


def avg_pool_divisor(
    sizes: Ints, kernel: Ints, stride: Ints, padding: Ints, out: Ints, count_include_pad: bool
) -> np.ndarray:
    """The divisor of every output window, ``[*out]`` (a static table), by PyTorch's rule: a window
    is clipped to input + padding (never ceil_mode's extra margin), and to the input itself unless
    ``count_include_pad``. A window is a box, so its count is a product of one count per axis."""
    divisor = np.ones((), dtype=np.float64)
    for size, k, s, p, n in zip(sizes, kernel, stride, padding, out):
        start = np.arange(n, dtype=np.int64) * s - p
        end = np.minimum(start + k, size + p)
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, size)
        divisor = np.multiply.outer(divisor, (end - start).astype(np.float64))
    return divisor


@dataclass(frozen=True)
class AxisWindows:
    """The windows of one spatial axis, clipped to the taps that can read the input.

    Output ``o``'s tap ``t`` (``0 <= t < kernel``) reads element ``o·stride + t·dilation`` of the
    buffer ``pad(x[start:stop], (pad_lo, pad_hi))``, which is input position
    ``o·stride + (first_tap + t)·dilation − padding``. Taps that read only padding at every output
    are dropped, so the buffer and the work are bounded by the input and output sizes, whatever the
    kernel: a window covering the whole input is a reduction over it."""

    out: int
    kernel: int
    first_tap: int
    stride: int
    dilation: int
    origin: int  # the input position of buffer element 0 (negative inside the left padding)
    start: int
    stop: int
    pad_lo: int
    pad_hi: int

    @property
    def extent(self) -> int:
        """The buffer's length: padding, the kept input, padding."""
        return self.pad_lo + self.stop - self.start + self.pad_hi


def clip_axis(size: int, kernel: int, stride: int, padding: int, dilation: int, out: int) -> AxisWindows:
    """The clipped windows of one axis (``out`` from ``conv_out_size``); see ``AxisWindows``.

    The same arithmetic clips a transposed convolution's taps to its (cropped) output: there input
    element ``o`` writes output ``o·stride + t·dilation − padding``, so ``size`` is the output's
    extent and ``out`` the input's."""
    if out <= 0 or size <= 0:
        first, last = 0, kernel - 1
    else:
        # Tap t reads the input at some output iff 0 <= o·s + t·d − p < size for some 0 <= o < out.
        first = max(0, -(-(padding - (out - 1) * stride) // dilation))
        last = min(kernel - 1, (size - 1 + padding) // dilation)
        last = max(first, last)  # no tap reaches the input (an empty input): keep one
        first = min(first, kernel - 1)
    taps = last - first + 1
    lo_pos = first * dilation - padding  # the input position of output 0's first kept tap
    length = max(out - 1, 0) * stride + (taps - 1) * dilation + 1
    pad_lo = min(max(0, -lo_pos), length)
    start = min(max(lo_pos, 0), size)
    stop = max(min(lo_pos + length, size), start)
    pad_hi = length - pad_lo - (stop - start)
    return AxisWindows(out, taps, first, stride, dilation, lo_pos, start, stop, pad_lo, pad_hi)


def clip_windows(
    sizes: Ints, kernel: Ints, stride: Ints, padding: Ints, dilation: Ints, out: Ints
) -> tuple[AxisWindows, ...]:
    """``clip_axis`` for every spatial axis."""
    return tuple(clip_axis(*axis) for axis in zip(sizes, kernel, stride, padding, dilation, out))


def window_positions(sizes: Ints, windows: tuple[AxisWindows, ...]) -> np.ndarray:
    """For each output window, the flat positions in the unpadded plane of its (kept) taps (−1 in
    the padding): a static table ``[*out, prod(kept taps)]``."""
    nd = len(sizes)
    out = tuple(w.out for w in windows)
    taps = tuple(w.kernel for w in windows)
    table = np.zeros(out + taps, dtype=np.int64)
    valid = np.ones(out + taps, dtype=bool)
    for i, (size, w) in enumerate(zip(sizes, windows)):
        pos = np.arange(w.out)[:, None] * w.stride + np.arange(w.kernel)[None, :] * w.dilation + w.origin
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = w.out, w.kernel
        ci = np.where((pos >= 0) & (pos < size), pos, -1).reshape(shape)
        table = table * size + np.maximum(ci, 0)
        valid &= ci >= 0
    return np.where(valid, table, -1).reshape(out + (-1,))
