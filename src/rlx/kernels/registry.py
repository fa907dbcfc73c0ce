"""The registry of shared kernel definitions: one function per Call, written against an array namespace.

A definition is ``fn(c, *operands, xp)``: ``c`` is the Call (only its attributes are read, so a
generated package may pass any object with the same attribute names), the operands come in the
order of ``Call.operand_fields()`` (literals as 0-d arrays, absent optionals as None, tuples as
lists), and ``xp`` is the engine's array namespace (``rlx.kernels.namespace``). Definitions are
keyed by the Call's name, so this package imports nothing of rlx's IR at run time and is copied
as it is into generated packages.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

Kernel = Callable[..., Any]
KERNELS: dict[str, Kernel] = {}


def _registrar(table: dict[str, Kernel], twice: str) -> Callable[..., Callable[[Kernel], Kernel]]:
    """A decorator ``@d("CallA", "CallB")`` putting ``fn`` into ``table`` under each Call name; a
    name registered twice is a bug (``twice`` says how)."""

    def decorator(*call_names: str) -> Callable[[Kernel], Kernel]:
        def register(fn: Kernel) -> Kernel:
            for name in call_names:
                if name in table:
                    raise ValueError(f"{name} {twice} ({table[name].__name__}, {fn.__name__})")
                table[name] = fn
            return fn

        return register

    return decorator


_shared = _registrar(KERNELS, "has two shared definitions")


def kernel(*call_names: str) -> Callable[[Kernel], Kernel]:
    """Register ``fn`` as the shared definition of each named Call."""
    return _shared(*call_names)


def overrides(table: dict[str, Kernel]) -> Callable[..., Callable[[Kernel], Kernel]]:
    """A decorator registering an engine's own kernels (a different algorithm, same contract) in ``table``."""
    return _registrar(table, "is overridden twice")


def static(v: Any) -> Any:
    """A Call field that may hold a symbolic extent, as the number it is by the time a kernel runs
    (engines run programs specialised to their input shapes); a symbol here is a bug upstream."""
    if not isinstance(v, (int, float)):
        raise TypeError(f"symbolic extent {v} reached a kernel; the program must be specialised first")
    return v


def engine_kernels(xp: Any, own: dict[str, Kernel]) -> dict[str, Kernel]:
    """An engine's kernel table: its own kernels where it has them, else the shared definitions
    bound to its namespace ``xp``. Every entry is ``fn(c, *operands)``."""
    table: dict[str, Kernel] = {name: functools.partial(fn, xp=xp) for name, fn in KERNELS.items()}
    table.update(own)
    return table
