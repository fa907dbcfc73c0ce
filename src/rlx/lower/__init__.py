"""Lowering: aten ops → Calls, through one decorator registry (``registry.REGISTRY``)."""

from rlx.lower.registry import REGISTRY, check_coverage, load_families, lower, lowers, supported_ops

load_families()  # the family modules register their handlers with @lowers

__all__ = ["REGISTRY", "check_coverage", "lower", "lowers", "supported_ops"]
