"""Which inference precisions OpenVINO's CPU plugin runs on this machine, and why not.

OpenVINO reports what its CPU plugin can run in ``OPTIMIZATION_CAPABILITIES`` (``BF16``, ``FP16``);
a refusal names the instruction-set extensions this CPU lacks, read from ``/proc/cpuinfo``.
"""

from __future__ import annotations

from rlx.errors import UsageError
from rlx.optional import require
from rlx.runtime.cpu import cpu_flags, cpu_model

# rlx's precision name → OpenVINO's INFERENCE_PRECISION_HINT value (int8-static: the quantized
# graph's int8 ops run as int8 whatever the hint; the rest computes in float32)
HINTS = {"f32": "f32", "bf16": "bf16", "f16": "f16", "int8-static": "f32"}
# rlx's precision → OpenVINO's capability, and the CPU extensions (any of them) its x86 kernels need
CAPABILITY = {
    "bf16": ("BF16", ("avx512_bf16", "amx_bf16")),
    "f16": ("FP16", ("avx512_fp16", "amx_fp16")),
    "int8-static": ("INT8", ("avx512_vnni", "avx_vnni", "amx_int8", "avx2")),
}


def capabilities() -> set[str]:
    from rlx.runtime.openvino_engine import require_openvino

    ov = require_openvino()
    return set(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def check_precision(precision: str) -> None:
    """UsageError unless OpenVINO runs ``precision`` (one of ``HINTS``) on this CPU, naming what is missing."""
    if precision not in HINTS:
        raise UsageError(f"the openvino engine runs {', '.join(HINTS)}, not {precision!r}")
    if precision == "int8-static":  # (the graph is onnxruntime's quantizer's)
        require("onnxruntime", extra="onnxruntime", feature="int8-static on the openvino engine")
    if precision not in CAPABILITY:
        return
    capability, extensions = CAPABILITY[precision]
    if capability not in capabilities():
        have = cpu_flags()
        lacking = [f for f in extensions if f not in have]
        raise UsageError(
            f"OpenVINO cannot run {precision} on this CPU ({cpu_model()}): it lacks {' and '.join(lacking)}; "
            f"use precision='f32'"
        )
