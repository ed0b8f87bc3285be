"""Where a followed log goes on from: the ``Log-Offset`` header of the logs API and the
``offset=`` it takes back. The one place that writes and reads it (portal and clients).

A log read from its file is placed by the byte in the file: ``"1234"`` (what the header always
was). A pod's log served live by the cluster starts again at 0 with each run of its container
and with each pod of the replica, so its cursor also names the run: ``"1234:<pod uid>:<the
container's restart count>"``. A client passes the cursor back advanced by the bytes it gave
(``advanced``), and needs to know nothing else of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

MAX_OFFSET = 2**62
_CURSOR = re.compile(r"(\d{1,19})(?::([0-9A-Za-z-]{1,64}):(\d{1,9}))?")
RULE = "a byte offset, or the Log-Offset an answer gave advanced by the bytes read since"


@dataclass(frozen=True)
class LogCursor:
    offset: int  # bytes into the file, or into the pod's container run
    pod: str | None = None  # the pod's uid, for a pod's log served live
    restarts: int = 0  # the container's restart count in that pod: which run

    def __str__(self) -> str:
        return str(self.offset) if self.pod is None else \
            f"{self.offset}:{self.pod}:{self.restarts}"

    def advanced(self, count: int) -> LogCursor:
        return replace(self, offset=self.offset + count)


def log_cursor(text: str) -> LogCursor | None:
    """The cursor ``text`` spells, else None (see ``RULE``)."""
    match = _CURSOR.fullmatch(text or "")
    if match is None or int(match[1]) > MAX_OFFSET:
        return None
    offset, pod, restarts = match.groups()
    return LogCursor(int(offset), pod, int(restarts or 0))
