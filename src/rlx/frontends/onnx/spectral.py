"""Spectral ONNX ops: DFT and STFT, as matrix products fixed while converting.

ONNX carries complex values as a trailing axis of (real, imaginary) pairs. A DFT along one axis is
linear in the real and the imaginary parts, so it is four real matrices taken from ``numpy.fft``
applied to the unit vectors (forward, inverse, one-sided and real-inverse transforms alike, with
``dft_length`` padding or cropping); the transformed axis must be static. STFT frames a signal of any
length: the frame count is symbolic when the length is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlx.errors import LoweringError
from rlx.frontends.common import static_dim
from rlx.frontends.onnx.control import stack, take
from rlx.frontends.onnx.elementwise import emit_binary
from rlx.frontends.onnx.movement import permute
from rlx.frontends.onnx.nn import matmul
from rlx.frontends.onnx.registry import Env, OnnxBuilder, OnnxNode, norm_axis, onnx_op
from rlx.ir import dtypes, symbolic
from rlx.ir.calls import Arange, IndexSelect
from rlx.ir.program import Ref

MAX_DFT_LENGTH = 8192  # the dense matrices are length²


def _transfer(length: int, n: int, inverse: bool, onesided: bool) -> tuple[np.ndarray, np.ndarray]:
    """Complex matrices A, B with ``dft(x_r + i·x_i) = A @ x_r + B @ x_i`` (columns: unit inputs)."""
    eye = np.eye(length)

    def t(v: np.ndarray) -> np.ndarray:
        if not inverse:
            out = np.fft.fft(v, n=n, axis=0)
            return out[: n // 2 + 1] if onesided else out
        if onesided:
            return np.fft.irfft(v, n=n, axis=0).astype(np.complex128)
        return np.fft.ifft(v, n=n, axis=0)

    return t(eye), t(1j * eye)


def _along_last(b: OnnxBuilder, x: Ref, axis: int, matrix: np.ndarray) -> Ref:
    """``matrix @ x`` along ``axis`` (``matrix``: [out, in])."""
    rank = b.rank(x)
    perm = tuple(k for k in range(rank) if k != axis) + (axis,)
    moved = permute(b, x, perm)
    w = b.operand(np.ascontiguousarray(matrix.T.astype(dtypes.to_numpy(b.dtype(x)))), "dft_matrix")
    y = matmul(b, moved, w)
    back = tuple(perm.index(k) for k in range(rank))
    return permute(b, y, back)


def dft(b: OnnxBuilder, node: OnnxNode, x: Ref, axis: int, n: int | None, inverse: bool, onesided: bool) -> Ref:
    """The ONNX DFT of ``x`` ([..., 1 or 2]) along ``axis``."""
    shape = b.shape(x)
    length = static_dim(shape[axis], "the signal length", node)
    if n is None:
        n = 2 * (length - 1) if inverse and onesided else length
    if max(n, length) > MAX_DFT_LENGTH:
        raise LoweringError(
            f"node {node.name} ({node.op_type}): transform length {n} is too long (at most {MAX_DFT_LENGTH})"
        )
    a, bm = _transfer(length, n, inverse, onesided)
    channels = static_dim(shape[-1], "the last (real/imaginary) axis", node)
    out_dtype = b.dtype(x)
    x = b.cast(x, "f64")  # sums of length-n products: accumulate in double, as numpy.fft does
    x_r = b.as_ref(b.operand(take(b, x, len(shape) - 1, 0)))
    x_i = b.as_ref(b.operand(take(b, x, len(shape) - 1, 1))) if channels == 2 else None

    def part(fn: str) -> Ref:
        take_part = np.real if fn == "real" else np.imag
        y = _along_last(b, x_r, axis, take_part(a))
        if x_i is not None:
            y = emit_binary(b, "add", y, _along_last(b, x_i, axis, take_part(bm)))
        return y

    parts = [part("real")] if inverse and onesided else [part("real"), part("imag")]  # irfft: a real signal
    return b.cast(b.as_ref(b.operand(stack(b, parts, len(shape) - 1))), out_dtype)


@onnx_op("DFT")
def dft_(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)
    length = b.const(node, 1)
    n = None if length is None or np.asarray(length).size == 0 else int(np.asarray(length).reshape(-1)[0])
    if node.opset >= 20:
        axis_v = b.const(node, 2)
        axis = -2 if axis_v is None else int(np.asarray(axis_v).reshape(-1)[0])
    else:
        axis = node.attr("axis", 1)
    axis = norm_axis(axis, b.rank(x))
    if axis == b.rank(x) - 1:
        raise LoweringError(f"node {node.name} (DFT): the axis cannot be the trailing real/imaginary axis")
    return dft(b, node, x, axis, n, bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0)))


@onnx_op("STFT")
def stft(node: OnnxNode, b: OnnxBuilder) -> Env:
    x = b.ref(node, 0)  # [batch, length, 1 or 2]
    if b.rank(x) == 2:  # [batch, length]: a real signal without its trailing axis (torch.onnx writes these)
        x = b.reshape(x, (*b.shape(x), 1))
    step = int(np.asarray(b.required_const(node, 1)).reshape(-1)[0])
    window = b.optional(node, 2)
    frame_len_v = b.const(node, 3)
    length = b.shape(x)[1]
    if frame_len_v is not None:
        frame = int(np.asarray(frame_len_v).reshape(-1)[0])
    elif window is not None:
        frame = static_dim(b.shape(window)[0], "the window length", node)
    else:
        raise LoweringError(f"node {node.name} (STFT): needs a window or a frame_length")
    frames = symbolic.add(symbolic.floordiv(symbolic.sub(length, frame), step), 1)
    if isinstance(frames, int):
        index = np.arange(frames)[:, None] * step + np.arange(frame)[None, :]
        idx = b.as_ref(b.operand(index.astype(np.int64), "stft_frames"))
    else:  # a signal length known at run time: the frame starts are an Arange over the frame count
        starts = b.emit(Arange(0, symbolic.mul(frames, step), step, "i64"), (frames,), "i64")
        offsets = b.operand(np.arange(frame, dtype=np.int64)[None, :], "stft_offsets")
        idx = emit_binary(b, "add", b.reshape(starts, (frames, 1)), offsets)
    shape = b.shape(x)
    framed = b.emit(IndexSelect(x, 1, idx), (shape[0], frames, frame, shape[2]), b.dtype(x))
    if window is not None:
        w = b.reshape(b.cast(b.as_ref(window), b.dtype(x)), (frame, 1))
        framed = emit_binary(b, "mul", framed, w)
    return dft(b, node, framed, 2, frame, False, bool(node.attr("onesided", 1)))


@onnx_op("MelWeightMatrix")
def mel_weight_matrix(node: OnnxNode, b: OnnxBuilder) -> Env:
    """A constant of its (known) scalar inputs: evaluated while converting by the ONNX reference."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    values = [np.asarray(b.required_const(node, k)) for k in range(5)]
    names = [f"in{k}" for k in range(5)]
    out_type = int(node.attr("output_datatype", 1))
    one = helper.make_node("MelWeightMatrix", names, ["out"], output_datatype=out_type)
    graph = helper.make_graph(
        [one], "mel", [], [helper.make_tensor_value_info("out", out_type, None)],
        [numpy_helper.from_array(v, n) for v, n in zip(values, names)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", node.opset)])
    outputs: Any = ReferenceEvaluator(model).run(None, {})
    return np.asarray(outputs[0])
