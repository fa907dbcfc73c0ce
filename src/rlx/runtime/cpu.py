"""What this machine's CPU is, read from ``/proc/cpuinfo`` (Linux; elsewhere: unknown, no flags):
the engines' precision checks name the extensions a precision needs, and ``rlx tune`` records the
machine its choice was measured on."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# The extensions that decide which precisions run fast (bf16/f16 kernels, int8 dot products).
RELEVANT_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
                  "amx_bf16", "amx_fp16", "amx_int8", "asimd", "asimddp", "bf16", "fphp", "i8mm", "sve")  # fmt: skip


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``)."""
    info = _cpuinfo()
    return frozenset((info.get("flags") or info.get("Features") or "").split())


def cpu_model() -> str:
    info = _cpuinfo()
    return info.get("model name") or info.get("Model") or platform.processor() or platform.machine() or "unknown CPU"


def relevant_flags() -> list[str]:
    """The flags of ``RELEVANT_FLAGS`` this CPU has, in that order."""
    have = cpu_flags()
    return [f for f in RELEVANT_FLAGS if f in have]


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        return os.cpu_count() or 1
