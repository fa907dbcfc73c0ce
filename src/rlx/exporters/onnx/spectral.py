"""Spectral Calls: Fft and Conj. onnxruntime computes no complex tensors, so complex values (and
every Fft, whose input or output is complex) are reported as unsupported; Conj of a real tensor
is the tensor itself."""

from __future__ import annotations

from rlx.exporters.onnx.registry import OnnxGraph, T, emits, unsupported
from rlx.ir import calls as C
from rlx.ir.program import Instr


@emits(C.Fft)
def fft(g: OnnxGraph, c: C.Fft, out: Instr, x: T) -> T:
    raise unsupported(c, "(complex tensors)")


@emits(C.Conj)
def conj(g: OnnxGraph, c: C.Conj, out: Instr, x: T) -> T:
    if x.dtype == "c64":
        raise unsupported(c, "of a complex tensor")
    return g.op("Identity", [x], x.dtype)
