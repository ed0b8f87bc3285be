"""A worker's metrics file parsed once: each metric as columns (steps, times, values) and the
exact figures of its table row, kept in memory per file while the file is unchanged, and
read on from where it stopped while it grows (the compare page, issue 39).

Parsing is what comparing costs: 20 files of 10 000 lines take over a second of JSON, and the
page asks again for each metric, axis and smoothing. So each file's parse is kept, keyed by
its place (the home's root and the path in it) and checked against what ``fstat`` says of
the open file: the same inode, size and mtime is the same file, parsed already. A file that
grew (a running job's) keeps its inode and the bytes before where the parse stopped: only the
new whole lines are parsed (a last line without its end is still being written and waits, as
in ``jobs.metrics``). Any other change — smaller, another inode, the same size with another
mtime, the bytes before the stopping point not the same — is parsed again from the start.

The cache is bounded: at most ``CACHE_VALUES`` metric values over all files (24 bytes each,
about 48 MB), the least recently used files dropped first; a file bigger than that is parsed
but not kept. Each process has its own (the portal's ASGI workers), guarded by a lock.
"""

from __future__ import annotations

import math
import os
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

from .files import JobFile
from .logs.lines import Cursor, lines_read
from .metrics import AT_ONCE, metric_records

CACHE_VALUES = 2_000_000  # metric values kept over all files
BATCH = 100_000  # lines parsed at a time (lines_read reads at most 1 MiB of them)
CHECK = 64  # bytes before the stopping point compared, to tell a file that grew
NO_TIME = math.nan  # a point without a time, in a column of times


@dataclass
class Column:
    """One metric of one file, in the order reported: its points (only where its value is a
    number) as ``step``, ``time`` (NaN where none) and ``value`` — floats, for drawing — and
    the exact figures of its table row: the last value and its step, the lowest and highest
    and the step each was first reached at."""

    step: array = field(default_factory=lambda: array("d"))
    time: array = field(default_factory=lambda: array("d"))
    value: array = field(default_factory=lambda: array("d"))
    final: int | float = 0
    final_step: int = 0
    low: int | float = 0
    low_step: int = 0
    high: int | float = 0
    high_step: int = 0

    def extend(self, steps: list[int], times: list[float], values: list[int | float]) -> None:
        """Add points (at least one), the figures kept with them: the earliest lowest and
        highest stay unless these go beyond them."""
        low, high = min(values), max(values)
        if not self.value or low < self.low:
            self.low, self.low_step = low, steps[values.index(low)]
        if not self.value or high > self.high:
            self.high, self.high_step = high, steps[values.index(high)]
        self.final, self.final_step = values[-1], steps[-1]
        self.step.extend(map(float, steps))
        self.time.extend(times)
        self.value.extend(map(float, values))


@dataclass
class Parsed:
    """A file's parse so far: the columns by metric, the records read, where it stopped."""

    columns: dict[str, Column] = field(default_factory=dict)
    records: int = 0
    cursor: Cursor = field(default_factory=Cursor)
    identity: tuple = ()  # (device, inode, size, mtime) when it stopped
    check: bytes = b""  # the CHECK bytes before cursor.offset

    def values(self) -> int:
        return sum(len(column.value) for column in self.columns.values())

    def fork(self) -> Parsed:
        """A copy to read on into: the columns already handed out are never changed (a
        request may still be reading them)."""
        columns = {name: Column(array("d", c.step), array("d", c.time), array("d", c.value),
                                c.final, c.final_step, c.low, c.low_step, c.high, c.high_step)
                   for name, c in self.columns.items()}
        return Parsed(columns, self.records, Cursor(self.cursor.line, self.cursor.offset),
                      self.identity, self.check)


class MetricsCache:
    """Parsed metrics files, the least recently used dropped beyond ``limit`` values."""

    def __init__(self, limit: int = CACHE_VALUES):
        self.limit = limit
        self._files: OrderedDict[tuple, Parsed] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def columns(self, file: JobFile, records: int) -> dict[str, Column]:
        """The metrics of ``file`` (its first ``records`` records at most), parsing only what
        is not parsed yet. None there yet: no metric. Refused like ``JobFile.open``."""
        key = (str(file.home.root), file.rel)
        f = file.open()
        if f is None:
            self._drop(key)
            return {}
        with f:
            st = os.fstat(f.fileno())
            identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            with self._lock:
                parsed = self._files.pop(key, None)
                if parsed is not None:
                    self._held -= parsed.values()
            if parsed is None or not _grown(parsed, identity, f.fileno()):
                parsed = Parsed()
            if parsed.identity != identity:
                if parsed.records:
                    parsed = parsed.fork()
                _parse_on(file, parsed, records)
                parsed.identity = identity
                start = max(0, parsed.cursor.offset - CHECK)
                parsed.check = os.pread(f.fileno(), parsed.cursor.offset - start, start)
        size = parsed.values()
        if size <= self.limit:
            with self._lock:
                stale = self._files.pop(key, None)  # another request's meanwhile
                self._held += size - (stale.values() if stale else 0)
                self._files[key] = parsed
                while self._held > self.limit:
                    _, dropped = self._files.popitem(last=False)
                    self._held -= dropped.values()
        return parsed.columns

    def _drop(self, key: tuple) -> None:
        with self._lock:
            if (parsed := self._files.pop(key, None)) is not None:
                self._held -= parsed.values()

    def held(self) -> int:
        """The metric values held."""
        return self._held

    def files(self) -> list[tuple]:
        """The files held, the least recently used first."""
        with self._lock:
            return list(self._files)

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self._held = 0


def _grown(parsed: Parsed, identity: tuple, fd: int) -> bool:
    """Whether the file open on ``fd`` is the one ``parsed`` was made from, unchanged or with
    lines added after it: the same inode, no smaller, the same bytes before its stopping
    point, and, at the same size, the same mtime."""
    device, inode, size, mtime = identity
    then = parsed.identity
    if (device, inode) != then[:2] or size < then[2] or (size == then[2] and mtime != then[3]):
        return False
    start = max(0, parsed.cursor.offset - CHECK)
    return os.pread(fd, parsed.cursor.offset - start, start) == parsed.check


def _parse_on(file: JobFile, parsed: Parsed, records: int) -> None:
    """Add the whole lines after ``parsed.cursor`` to its columns, up to ``records`` records."""
    while parsed.records < records:
        first = parsed.cursor.line
        mark = Cursor(parsed.cursor.line, parsed.cursor.offset)
        batch = lines_read(file, mark, limit=BATCH)
        if not batch:
            return
        columns = parsed.columns
        for start in range(0, len(batch), AT_ONCE):  # few records alive at a time
            found = metric_records(first + start, batch[start:start + AT_ONCE])
            # Past the last record wanted, nothing more is read of this file (nor parsed
            # again).
            found = found[:records - parsed.records]
            points: dict[str, tuple[list, list, list]] = {}  # by metric: steps, times, values
            for record in found:
                step, moment = record["step"], record["time"]
                if moment is None:
                    moment = NO_TIME
                for name, value in record["metrics"].items():
                    if value is not None:
                        if (lists := points.get(name)) is None:
                            lists = points[name] = ([], [], [])
                        lists[0].append(step)
                        lists[1].append(moment)
                        lists[2].append(value)
            for name, lists in points.items():
                if (column := columns.get(name)) is None:
                    column = columns[name] = Column()
                column.extend(*lists)
            parsed.records += len(found)
        parsed.cursor = mark


CACHE = MetricsCache()


def metrics_columns(file: JobFile, records: int) -> dict[str, Column]:
    """``file``'s metrics by name (its first ``records`` records at most), through the
    process's cache."""
    return CACHE.columns(file, records)
