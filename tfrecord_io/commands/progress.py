"""A progress bar for long local work: drawn on a terminal, silent everywhere else.

The bar goes to stderr, and only when stderr is a TTY (so logs, pipes, CI and tests that
capture output see nothing).  ``TFRECORD_IO_PROGRESS=0`` turns it off on a terminal too,
``=1`` forces it on (for trying it out through a pipe).  It counts bytes of input read
(compressed bytes for compressed files) and files finished, redraws at most ten times a
second, and clears its line when closed::

    inspect  [##########..........]  48%  12.1/25.3 MB  3/8 files  4.2 MB/s  ETA 0:03
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import TextIO

__all__ = ["Progress", "progress_enabled"]

_REDRAW_S = 0.1


def progress_enabled(stream: TextIO | None = None) -> bool:
    """Whether a bar should be drawn on ``stream`` (default stderr)."""
    setting = os.environ.get("TFRECORD_IO_PROGRESS", "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    if setting in ("1", "true", "yes", "on"):
        return True
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}"


def _duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Bytes done out of ``total_bytes`` and files done out of ``total_files``.

    Use as a context manager; :meth:`advance` and :meth:`file_done` are cheap when the bar
    is off.  ``enabled=None`` decides with :func:`progress_enabled`.
    """

    def __init__(self, label: str, total_bytes: int, total_files: int = 0, *,
                 stream: TextIO | None = None, enabled: bool | None = None):
        self.label = label
        self.total_bytes = max(0, int(total_bytes))
        self.total_files = int(total_files)
        self.stream = sys.stderr if stream is None else stream
        self.enabled = progress_enabled(self.stream) if enabled is None else enabled
        self.done_bytes = 0
        self.done_files = 0
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False

    def advance(self, nbytes: int) -> None:
        self.done_bytes += nbytes
        if self.enabled:
            self._maybe_draw()

    def file_done(self) -> None:
        self.done_files += 1
        if self.enabled:
            self._maybe_draw(force=True)

    def _maybe_draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_draw >= _REDRAW_S:
            self._last_draw = now
            self._draw(now)

    def line(self, now: float | None = None) -> str:
        """The text of the bar as it would be drawn now."""
        now = time.monotonic() if now is None else now
        elapsed = max(now - self._start, 1e-9)
        total = max(self.total_bytes, self.done_bytes)
        frac = self.done_bytes / total if total else (self.done_files / self.total_files
                                                     if self.total_files else 0.0)
        rate = self.done_bytes / elapsed
        parts = [f"{self.label}"]
        width = 20
        filled = int(round(frac * width))
        parts.append("[" + "#" * filled + "." * (width - filled) + "]")
        parts.append(f"{frac:4.0%}")
        parts.append(f"{_mb(self.done_bytes)}/{_mb(total)} MB")
        if self.total_files:
            parts.append(f"{self.done_files}/{self.total_files} files")
        parts.append(f"{_mb(rate)} MB/s")
        if 0 < frac < 1 and rate > 0:
            parts.append(f"ETA {_duration((total - self.done_bytes) / rate)}")
        return "  ".join(parts)

    def _draw(self, now: float) -> None:
        cols = shutil.get_terminal_size((80, 24)).columns
        text = self.line(now)[: max(10, cols - 1)]
        try:
            self.stream.write("\r" + text.ljust(max(10, cols - 1)))
            self.stream.flush()
            self._drawn = True
        except (OSError, ValueError):  # the terminal went away: stop drawing
            self.enabled = False

    def close(self) -> None:
        """Clear the bar's line (only if something was drawn)."""
        if self.enabled and self._drawn:
            cols = shutil.get_terminal_size((80, 24)).columns
            try:
                self.stream.write("\r" + " " * max(10, cols - 1) + "\r")
                self.stream.flush()
            except (OSError, ValueError):
                pass
        self._drawn = False

    def __enter__(self) -> "Progress":
        if self.enabled:
            self._draw(time.monotonic())
        return self

    def __exit__(self, *exc) -> None:
        self.close()
