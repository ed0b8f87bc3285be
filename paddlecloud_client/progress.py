"""A one-line progress bar on stderr: ``  fit_a_line.tar  45.0M/120.0M  37%  62.1 MB/s``, and
sizes as people read them (``format_size``, which ``paddlectl``'s tables show too).

Shown only when enabled (stderr is a terminal and no ``-q``); otherwise every call is a no-op.
Use it as a context manager: it ends its line however the transfer ends.
"""

from __future__ import annotations

import time
from typing import TextIO

INTERVAL = 0.1  # seconds between redraws
LABEL_WIDTH = 32
UNITS = "KMGTPE"


def format_size(size: int | None, exact: bool = False) -> str:
    """``4.0K``, ``1.2G``: powers of 1024, one decimal; ``exact`` gives the byte count."""
    if size is None:
        return "-"
    if exact or size < 1024:
        return str(size)
    value = float(size)
    for unit in UNITS:
        value /= 1024
        if value < 1024 or unit == UNITS[-1]:
            return f"{value:.1f}{unit}"
    raise AssertionError("unreachable")


def format_rate(rate: float) -> str:
    text = format_size(int(rate))
    return f"{text[:-1]} {text[-1]}B/s" if text[-1].isalpha() else f"{text} B/s"


class Progress:
    def __init__(self, stream: TextIO, label: str, total: int | None, enabled: bool):
        self.stream = stream
        self.label = label if len(label) <= LABEL_WIDTH else "..." + label[3 - LABEL_WIDTH:]
        self.total = total
        self.enabled = enabled
        self.done = 0
        self.started = self.drawn = time.monotonic()
        self.width = 0

    def update(self, count: int) -> None:
        self.done += count
        if self.enabled and time.monotonic() - self.drawn >= INTERVAL:
            self._draw()

    def rewind(self, done: int) -> None:
        """Back to ``done`` bytes (a transfer resumed from an earlier point)."""
        self.done = done

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        """The final figures on success; in any case, end the line."""
        if not self.enabled:
            return
        if exc_type is None:
            self._draw()
        if self.width:
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self) -> None:
        self.drawn = now = time.monotonic()
        rate = self.done / max(now - self.started, 1e-6)
        amount = format_size(self.done)
        if self.total:
            amount += f"/{format_size(self.total)}  {100 * self.done // self.total}%"
        line = f"  {self.label}  {amount}  {format_rate(rate)}"
        self.stream.write("\r" + line.ljust(self.width))
        self.width = len(line)
        self.stream.flush()
