"""Decomposition levels (see DESIGN.md): ``aten`` (as exported), ``high`` (Core ATen but fused
high-level ops kept whole), ``core`` (full Core ATen)."""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

LEVELS = ("aten", "high", "core")

# Kept whole at the `high` level so they land on one fused Call each.
HIGH_LEVEL_OPS = (
    "scaled_dot_product_attention.default", "native_layer_norm.default", "layer_norm.default",
    "_softmax.default", "softmax.int", "gelu.default", "silu.default", "convolution.default",
    "native_group_norm.default", "group_norm.default", "embedding.default", "rms_norm.default",
    "native_batch_norm.default", "_native_batch_norm_legit_no_training.default",
)  # fmt: skip


def _overload(name: str) -> torch._ops.OpOverload | None:
    base, overload = name.split(".")
    packet = getattr(torch.ops.aten, base, None)
    return getattr(packet, overload, None) if packet is not None else None


def decompose(ep: ExportedProgram, level: str) -> ExportedProgram:
    if level == "aten":
        return ep
    table = torch.export.default_decompositions()
    if level == "high":
        for name in HIGH_LEVEL_OPS:
            op = _overload(name)
            if op is not None:
                table.pop(op, None)
    return ep.run_decompositions(table)
