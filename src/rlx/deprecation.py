"""Old spellings of renamed keywords, kept working for a while with a ``DeprecationWarning``.

One helper, so every renamed keyword (``backend=`` → ``engine=``, ``emit=`` → ``write=``,
``emit_style=`` → ``package_style=``) warns and refuses a clash the same way."""

from __future__ import annotations

import warnings
from typing import TypeVar

from rlx.errors import UsageError

T = TypeVar("T")


def renamed(where: str, new: str, value: T, default: T, old: str, old_value: T | None, stacklevel: int = 3) -> T:
    """The value of keyword ``new`` of ``where``, taking the deprecated spelling ``old`` too.

    ``old_value`` is None when the caller did not pass ``old``. Passing both is refused; as Python
    cannot tell an explicit ``new=default`` from an omitted one, only a ``new`` that differs from
    its default counts as passed. ``stacklevel`` points the warning at the caller's caller."""
    if old_value is None:
        return value
    if value != default:
        raise UsageError(f"{where}: pass {new}= only ({old}= is its deprecated spelling)")
    warnings.warn(f"{where}: {old}= is deprecated; use {new}=", DeprecationWarning, stacklevel=stacklevel)
    return old_value
