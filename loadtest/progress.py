"""The live progress line on stderr.

On a terminal the line is redrawn in place with a carriage return, so a long search stays one
screen; in a log (CI, ``2> file``) carriage returns would pile up into one unreadable line, so
there it prints plain lines, at most one per ``interval`` seconds, plus one line per finished step.
stdout stays free for the result.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Writes progress lines; ``enabled=False`` makes every call a no-op (``--quiet``)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        interval: float | None = None,
        enabled: bool = True,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval if interval is not None else (0.25 if self.tty else 2.0)
        self.enabled = enabled
        self._last = float("-inf")
        self._width = 0

    def update(self, line: str) -> None:
        """Show ``line`` now (terminal) or if ``interval`` has passed since the last one (log)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self, line: str) -> None:
        """Print a line that stays (a step's summary), ending any in-place line first."""
        if not self.enabled:
            return
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad + "\n")
            self._width = 0
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._last = time.monotonic()  # the next live line comes one interval later
