"""Lowering: aten ops → Calls, through one decorator registry (``registry.REGISTRY``)."""

from rlx.lower import (  # noqa: F401  (registers handlers)
    creation,
    elementwise,
    linalg,
    misc,
    movement,
    nn,
    ordering,
    reduce,
    resample,
    scatter,
    special,
    spectral,
)
from rlx.lower.registry import REGISTRY, check_coverage, lower, lowers, supported_ops

__all__ = ["REGISTRY", "check_coverage", "lower", "lowers", "supported_ops"]
