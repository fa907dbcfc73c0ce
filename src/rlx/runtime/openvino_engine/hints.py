"""Which inference precisions OpenVINO's CPU plugin runs on this machine, and why not.

OpenVINO reports what its CPU plugin can run in ``OPTIMIZATION_CAPABILITIES`` (``BF16``, ``FP16``);
a refusal names the instruction-set extensions this CPU lacks, read from ``/proc/cpuinfo``.
"""

from __future__ import annotations

import functools

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


# A grouped convolution in the shape where oneDNN's bf16 kernel on AMX CPUs returns values with
# almost no relation to the right ones (2–8 channels a group, a long kernel; PyTorch's own bf16
# conv on such a CPU gives the same numbers): (channels, groups, kernel, length).
_GROUPED_PROBE = (64, 16, 16, 48)


@functools.cache
def bf16_grouped_conv_is_wrong() -> bool:
    """Whether OpenVINO's bf16 grouped convolution is wrong on this CPU: a probe convolution in the
    shape where it is on AMX, compiled at f32 and bf16 once per process, its answers compared
    (bf16's ordinary rounding keeps a cosine above 0.9999; the wrong kernel's is near 0)."""
    import numpy as np
    from openvino import opset13 as ops

    from rlx.runtime.openvino_engine import require_openvino

    ov = require_openvino()
    channels, groups, kernel, length = _GROUPED_PROBE
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, channels, length)).astype(np.float32)
    w = rng.standard_normal((groups, channels // groups, channels // groups, kernel)).astype(np.float32)
    data = ops.parameter([1, channels, length], np.float32)
    conv = ops.group_convolution(data, ops.constant(w), [1], [kernel // 2], [kernel // 2], [1])
    core = ov.Core()
    try:
        answers = [core.compile_model(ov.Model([conv], [data]), "CPU", {"INFERENCE_PRECISION_HINT": hint})(x)[0].ravel()
                   for hint in ("f32", "bf16")]  # fmt: skip
    except Exception:  # (a probe that cannot run proves nothing: grouped convolutions stay in float32)
        return True
    f32, bf16 = (a.astype(np.float64) for a in answers)
    cosine = f32 @ bf16 / (np.linalg.norm(f32) * np.linalg.norm(bf16) or 1.0)
    return bool(cosine < 0.999)
