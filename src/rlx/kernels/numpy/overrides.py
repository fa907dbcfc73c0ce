"""The numpy engine's own kernels: ``OVERRIDES`` by Call name, filled by the modules that define them."""

from __future__ import annotations

from ...kernels.registry import Kernel, overrides

OVERRIDES: dict[str, Kernel] = {}
override = overrides(OVERRIDES)
