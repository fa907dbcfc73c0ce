"""A one-line progress bar on stderr (rows, rows/s, ETA); silent when stderr is not a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total, self.done, self.fresh = total, 0, 0
        self.started = time.perf_counter()
        self.last_draw = 0.0

    def skip(self, rows: int) -> None:
        """Rows finished by an earlier run: counted as done, not in the rate."""
        self.done += rows
        self._draw()

    def advance(self, rows: int) -> None:
        self.done += rows
        self.fresh += rows
        self._draw()

    def close(self) -> None:
        if self.enabled:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not self.enabled or (not force and now - self.last_draw < 0.2):
            return
        self.last_draw = now
        rate = self.fresh / max(now - self.started, 1e-9)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        width = 24
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(
            f"\rrlx batch [{bar}] {self.done:,}/{self.total:,} rows  {rate:,.0f} rows/s  ETA {_duration(left)}   "
        )
        self.stream.flush()


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
