"""Small filesystem helpers: atomic writes and atomic directory replacement."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rlx.errors import OutputError, UsageError


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file + rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable_target(target: str | Path, force: bool) -> None:
    """Fail early (before any expensive work) if ``target`` exists and may not be replaced."""
    target = Path(target)
    if target.exists() and not force:
        raise UsageError(f"{target} already exists; pass --force (force=True) to overwrite it")
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} exists and is not a directory")


def replace_dir(new: Path, target: Path) -> None:
    """Move the finished directory ``new`` to ``target``; an existing ``target`` is swapped out
    only now, so at every moment one complete version is in place."""
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        os.replace(target, old / "x")
        os.replace(new, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, target)


class StagedDir:
    """Build a directory in a sibling temp dir and move it into place only on success.

    An existing target is replaced only with ``force``; on failure the target is left untouched.
    """

    def __init__(self, target: str | Path, force: bool = False) -> None:
        self.target = Path(target)
        check_writable_target(self.target, force)
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.path = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", dir=self.target.parent))
            os.chmod(self.path, 0o777 & ~_umask())
        except OSError as e:
            raise OutputError(f"{self.target}: cannot create the output directory: {e.strerror or e}") from e

    def commit(self) -> Path:
        try:
            replace_dir(self.path, self.target)
        except OSError as e:
            self.abort()
            raise OutputError(f"{self.target}: cannot move the finished output into place: {e.strerror or e}") from e
        return self.target

    def __enter__(self) -> StagedDir:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        """Commit on success; on any failure (Ctrl-C included) drop the staging directory, leaving
        an existing target exactly as it was. Write failures become one-line ``OutputError``s."""
        if kind is None:
            self.commit()
            return
        self.abort()
        if isinstance(error, OSError):
            raise OutputError(f"{self.target}: writing failed: {error.strerror or error}") from error

    def abort(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
