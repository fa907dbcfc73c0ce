"""One error hierarchy: every failure a user can cause is an ``RlxError`` with a one-line message."""

from __future__ import annotations


class RlxError(Exception):
    """Base of every error rlx raises on purpose. ``str(err)`` is one line saying what and what to do."""

    exit_code = 2

    def __str__(self) -> str:
        # Names quoted from a user's file may hold line breaks; the one-line contract holds anyway.
        return printable(super().__str__())


def printable(text: str) -> str:
    """``text`` with control characters (line breaks, escapes) written as Python escapes, so a name
    read from a damaged file shows what it holds and cannot break a message into lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (a library's run to many lines), or its type's
    name where it has none."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def summary(e: BaseException) -> str:
    """``Type: first line`` of an exception that is not rlx's own, to quote it in one line."""
    return f"{type(e).__name__}: {first_line(e)}" if str(e).strip() else type(e).__name__


class SchemaError(RlxError):
    """A ``torch-ir.json`` / ``program.json`` / ``meta.json`` that does not follow its schema."""


class UnsupportedOpError(RlxError):
    """The graph uses aten ops the registry cannot lower (all of them are listed at once)."""

    def __init__(self, message: str, ops: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.ops = ops or {}


class LoweringError(RlxError):
    """A supported op was used with arguments the lowering cannot handle."""


class WeightsError(RlxError):
    """A safetensors file that is missing, malformed or disagrees with the graph."""


class BundleError(RlxError):
    """A bundle directory that is missing files or whose files disagree with each other."""


class InputError(RlxError):
    """Inputs given to a model that do not match its signature (count, name, shape, dtype)."""


class DataError(InputError):
    """A dataset row, column or file that ``rlx batch`` cannot feed to the model (names file, row and column)."""


class ExportError(RlxError):
    """``torch.export`` could not capture the model."""


class UsageError(RlxError):
    """Bad command-line usage or a model file that does not expose what rlx needs."""


class OutputError(RlxError):
    """An artifact could not be written (disk full, permissions); earlier output is left intact."""


class ParityError(RlxError):
    """Outputs differ from PyTorch beyond tolerance."""

    exit_code = 1
