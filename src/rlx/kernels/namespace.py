"""The array namespace an engine hands to the shared definitions.

It is the engine's array module (numpy, jax.numpy) as plain attributes, plus the few functions
the shared definitions need that the module lacks or spells differently (``erf``; a ``matmul``
that keeps float32 exact on XLA; ``take`` that clamps on an engine that cannot raise), and the
engine's elementwise functions (``unary``/``binary``: the shared table with the engine's own
overrides applied). Attributes are copied, not forwarded: a kernel's ``xp.exp`` is one dict lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any


class ArrayNamespace(SimpleNamespace):
    """``module``'s public names plus the engine's extras; ``name`` says which engine."""

    name: str
    unary: dict[str, Callable[[Any], Any]]
    binary: dict[str, Callable[[Any, Any], Any]]

    def __init__(self, name: str, module: ModuleType, **extras: Any) -> None:
        # vars(), not dir(): numpy loads some submodules lazily on attribute access (f2py, testing …)
        # and touching them all would cost a cold start tens of milliseconds. Submodules the
        # definitions use (fft) come in through ``extras``.
        public = {k: v for k, v in vars(module).items() if not k.startswith("_")}
        super().__init__(**{**public, **extras, "name": name})
