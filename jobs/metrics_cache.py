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

Behind it, on disk, each job's parse is kept too (``Sidecar``): one file per job in the
portal's own ``PADDLECLOUD_METRICS_CACHE_DIR`` (``var/cache/metrics/``; never in the user's
home, where they could write one), shared by every process of the portal and surviving
restarts. A job that ends has its parse
written there by a worker (``job_ended_keep``, the task ``jobs.tasks.job_metrics_keep``), so
the first comparison of finished jobs parses nothing; a running job's is written by the
request that parsed it. A parse read from disk is checked as one in memory is (the same inode,
the bytes before its stopping point, the size and mtime), and the sidecar against itself (its
layout, a CRC-32 of its contents, the file it was made from): one that is stale or damaged is
ignored, the metrics parsed again and the sidecar written anew. It is written whole to a
temporary file renamed over the old, so a reader never sees half of one; it goes with its job
(``metrics_forget``, when a deleted job's remains are removed).
"""

from __future__ import annotations

import json
import logging
import math
import os
import struct
import sys
import tempfile
import threading
import time
import zlib
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from kernel.errors import PaddleCloudError
from kernel.queue import JOB_METRICS_KEEP, task_later

from .files import JobFile, metrics_file
from .logs.lines import Cursor, lines_read
from .metrics import AT_ONCE, metric_records
from .models import Job, Replica

log = logging.getLogger(__name__)

MAX_RECORDS = 100_000  # of one job's metrics read for a comparison
CACHE_VALUES = 2_000_000  # metric values kept over all files
BATCH = 100_000  # lines parsed at a time (lines_read reads at most 1 MiB of them)
CHECK = 64  # bytes before the stopping point compared, to tell a file that grew
NO_TIME = math.nan  # a point without a time, in a column of times
LEFT_HALF_WRITTEN_S = 3600  # a sidecar's temporary file older than this was left by a crash


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
        self.lines_parsed = 0  # over the cache's life: what it did not find kept

    def columns(self, file: JobFile, records: int, sidecar: Sidecar | None = None, *,
                hold: bool = True) -> dict[str, Column]:
        """The metrics of ``file`` (its first ``records`` records at most), parsing only what
        is not parsed yet, in memory or in ``sidecar`` (then written there anew). None there
        yet: no metric. Refused like ``JobFile.open``. ``hold=False`` (a worker's) keeps
        nothing in memory."""
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
            shared = parsed is not None  # its columns may be a request's still
            if parsed is None and sidecar is not None:
                parsed = sidecar.load(key)
            if parsed is None or not _grown(parsed, identity, f.fileno()):
                parsed = Parsed()
            if parsed.identity != identity:
                if shared and parsed.records:
                    parsed = parsed.fork()
                self.lines_parsed += _parse_on(file, parsed, records)
                parsed.identity = identity
                start = max(0, parsed.cursor.offset - CHECK)
                parsed.check = os.pread(f.fileno(), parsed.cursor.offset - start, start)
                if sidecar is not None:
                    sidecar.store(key, parsed)
        size = parsed.values()
        if hold and size <= self.limit:
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


def _parse_on(file: JobFile, parsed: Parsed, records: int) -> int:
    """Add the whole lines after ``parsed.cursor`` to its columns, up to ``records`` records;
    the lines read."""
    lines = 0
    while parsed.records < records:
        first = parsed.cursor.line
        mark = Cursor(parsed.cursor.line, parsed.cursor.offset)
        batch = lines_read(file, mark, limit=BATCH)
        if not batch:
            return lines
        lines += len(batch)
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
    return lines


class Sidecar:
    """A job's parse kept on disk (``var/cache/metrics/<job uid>.metrics``): a header (magic,
    the length of the description, a CRC-32 of all after the header), the description (JSON:
    the file it was made from, its identity and the bytes before the stopping point, where it
    stopped, the byte order, each metric's name, length and table figures), then each metric's
    steps, times and values as doubles."""

    MAGIC = b"PCMETR1\n"
    HEADER = struct.Struct("<8sII")

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def of(cls, job_uid) -> Sidecar:
        return cls(sidecar_dir() / f"{job_uid}.metrics")

    def load(self, key: tuple) -> Parsed | None:
        """The parse kept for the file ``key`` (the cache's key), or None: none kept, or one
        damaged or made from another file (then it is written anew after parsing)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("metrics sidecar %s not read: %s", self.path, exc)
            return None
        try:
            return self._parsed(memoryview(data), key)
        except (ValueError, TypeError, KeyError, IndexError, struct.error) as exc:
            log.warning("metrics sidecar %s ignored (%s): parsed again", self.path, exc)
            return None

    def _parsed(self, data: memoryview, key: tuple) -> Parsed | None:
        magic, length, crc = self.HEADER.unpack_from(data)
        body = data[self.HEADER.size:]
        if magic != self.MAGIC or zlib.crc32(body) != crc or length > len(body):
            raise ValueError("not a sidecar, or damaged")
        meta = json.loads(bytes(body[:length]))
        if meta["file"] != [key[0], list(key[1])]:
            return None  # another replica's (the job's first is another now)
        offset, columns = length, {}
        for name, count, *figures in meta["columns"]:
            arrays = []
            for _ in range(3):
                column = array("d")
                column.frombytes(body[offset:offset + 8 * count])
                if len(column) != count:
                    raise ValueError("shorter than it says")
                if meta["order"] != sys.byteorder:
                    column.byteswap()
                arrays.append(column)
                offset += 8 * count
            if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in figures):
                raise ValueError(f"metric {name!r}: its figures are not numbers")
            columns[str(name)] = Column(*arrays, *figures)
        if offset != len(body):
            raise ValueError("longer than it says")
        line, byte = meta["cursor"]
        identity = tuple(meta["identity"])
        if len(identity) != 4 or not all(type(x) is int for x in identity):
            raise ValueError("its file's identity is not one")
        return Parsed(columns, int(meta["records"]), Cursor(int(line), int(byte)), identity,
                      bytes.fromhex(meta["check"]))

    def store(self, key: tuple, parsed: Parsed) -> None:
        """Keep ``parsed`` (of the file ``key``): written whole, then renamed over the last.
        Not written (the disk full, say): said in the log, and parsed again next time."""
        meta = {"file": [key[0], list(key[1])], "identity": list(parsed.identity),
                "check": parsed.check.hex(), "cursor": [parsed.cursor.line, parsed.cursor.offset],
                "records": parsed.records, "order": sys.byteorder,
                "columns": [[name, len(c.value), c.final, c.final_step, c.low, c.low_step,
                             c.high, c.high_step] for name, c in parsed.columns.items()]}
        description = json.dumps(meta).encode()
        parts = [description]
        for column in parsed.columns.values():
            parts += [column.step.tobytes(), column.time.tobytes(), column.value.tobytes()]
        crc = 0
        for part in parts:
            crc = zlib.crc32(part, crc)
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(self.HEADER.pack(self.MAGIC, len(description), crc))
                    for part in parts:
                        out.write(part)
                os.replace(temporary, self.path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning("metrics sidecar %s not written: %s", self.path, exc)


def sidecar_dir() -> Path:
    """Where the parsed metrics are kept: the portal's own (``var/cache/metrics`` unless
    configured), never a user's home."""
    return Path(settings.PADDLECLOUD_METRICS_CACHE_DIR)


CACHE = MetricsCache()


def compared_replica(replicas) -> Replica | None:
    """The replica whose metrics stand for its job's: trainer 0 (else the first replica)."""
    replicas = sorted(replicas, key=lambda r: (r.role != Replica.Role.TRAINER, r.role, r.index))
    return replicas[0] if replicas else None


def job_columns(job, records: int = MAX_RECORDS, *, hold: bool = True) -> dict[str, Column]:
    """The metrics of ``job`` (its ``compared_replica``'s, its replicas prefetched or not),
    through the process's cache and the job's sidecar. None readable: no metric."""
    replica = compared_replica(job.replicas.all())
    if replica is None:
        return {}
    try:
        return CACHE.columns(metrics_file(job, replica), records, Sidecar.of(job.uid),
                             hold=hold)
    except (PaddleCloudError, OSError):  # not readable as a job's file (a link), or gone
        return {}


def metrics_columns(file: JobFile, records: int) -> dict[str, Column]:
    """``file``'s metrics by name (its first ``records`` records at most), through the
    process's cache (no sidecar: a file of no job)."""
    return CACHE.columns(file, records)


def job_ended_keep(sender, job_ids: list[int], **kwargs) -> None:
    """Jobs ended (``jobs.signals.job_ended``): a worker parses their metrics into their
    sidecars once that is committed, so that comparing them parses nothing."""
    for job_id in job_ids:
        task_later(JOB_METRICS_KEEP, job_id)


def job_metrics_keep(job_id: int) -> None:
    """The task's work: the job's metrics parsed into its sidecar (what is kept already is
    read on, not parsed again), none held in the worker's memory."""
    job = Job.objects.filter(pk=job_id).select_related("owner", "datacenter").first()
    if job is not None:  # deleted meanwhile: nothing to keep
        job_columns(job, hold=False)


def metrics_forget(job_uid) -> None:
    """A deleted job's sidecar removed."""
    Sidecar.of(job_uid).path.unlink(missing_ok=True)


def sidecars_sweep(known) -> int:
    """The reconciler's: the sidecars of jobs the database no longer knows (``known`` tells
    which of some uids it does) removed — a deletion whose task was lost, a request that kept
    a parse as its job was deleted — and temporary files a crash left half written. How many
    were removed."""
    directory = sidecar_dir()
    if not directory.is_dir():
        return 0
    kept = {path.stem: path for path in directory.glob("*.metrics")}
    gone = [kept[uid] for uid in set(kept) - known(set(kept))]
    gone += [path for path in directory.glob(".*.tmp") if _age(path) > LEFT_HALF_WRITTEN_S]
    for path in gone:
        path.unlink(missing_ok=True)
    return len(gone)


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:  # renamed into place meanwhile
        return 0.0
