"""Numbered lines of a growing file (a worker's log, its metrics), read and followed live.

A line's number is its place in the file, counted from 0. The file in PFS is the record: the
WebSocket consumers read what came before from it, and a *pump* publishes what is written
next to a channel-layer group, in numbered batches. Messages may be dropped (channels-redis
silently drops what is over a group's capacity) or come twice (two pumps for a moment): a
consumer tells by the numbers and refills a gap from the file, so a follower sees every line
once, in order.

One pump runs per file while someone follows it, whichever process they are in: a lease in
the cache elects it, and followers' processes renew a "wanted" mark. If the pump's process
dies, the lease runs out and a follower's process starts another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from channels.layers import get_channel_layer
from django.core.cache import cache

from paddlecloud.errors import PaddleCloudError, ValidationError

from .files import JobFile

log = logging.getLogger(__name__)

BLOCK = 256 * 1024  # read at a time when counting lines
BATCH_BYTES = 1 << 20  # read at most this much of a file per batch: bounded messages
BATCH_LINES = 1000  # per message, to browsers and over the channel layer
# A line ends at "\n", "\r\n" or a lone "\r" (a progress bar redrawing itself), and one longer
# than MAX_LINE bytes is split there, as container runtimes split log lines (16 KiB).
MAX_LINE = 16 * 1024
POLL_SECONDS = 0.1  # how often a pump looks for new lines (they reach followers within this)
ENDED_CHECK_SECONDS = 1.0  # how often a pump asks whether its writer has ended
LEASE_SECONDS = 10  # a pump's lease; renewed every RENEW_SECONDS
RENEW_SECONDS = 3
WANTED_SECONDS = 15  # a pump nobody has wanted for this long stops

_END = re.compile(rb"[\r\n]")
_ENDS = re.compile(rb"\r\n|\r|\n")


@dataclass
class Cursor:
    """A reader's place in a file: the byte ``offset`` where line number ``line`` begins."""

    line: int = 0
    offset: int = 0


MAX_LINE_NUMBER = 10**12


def line_number(text: str, field: str = "from") -> int:
    """A line number a client asks to start from (``?from=``)."""
    if not text.isdigit() or int(text) > MAX_LINE_NUMBER:
        raise ValidationError.for_field(field, "the line number to start from: a whole number "
                                               "from 0")
    return int(text)


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def line_end(data: bytes, start: int, final: bool) -> tuple[int, int] | None:
    """Where the line that begins at ``data[start]`` ends: the end of its text and where the
    next line begins; None while that cannot be told (the writer may add to it). ``final``:
    ``data`` runs to the end of a file whose writer has ended."""
    found = _END.search(data, start, start + MAX_LINE + 1)
    if found is not None:
        end = found.start()
        if data[end] == 0x0A:
            return end, end + 1
        if end + 1 < len(data):  # "\r\n" is one line end
            return end, end + (2 if data[end + 1] == 0x0A else 1)
        return (end, end + 1) if final else None
    if len(data) - start > MAX_LINE:
        return start + MAX_LINE, start + MAX_LINE
    if final and start < len(data):
        return len(data), len(data)
    return None


def _whole_lines(chunk: bytes) -> int | None:
    """How many lines ``chunk`` holds when it is whole lines ending in "\n" none of which is
    split (counted at C speed), else None."""
    count = chunk.count(b"\n")
    if b"\r" in chunk:
        count += chunk.count(b"\r") - chunk.count(b"\r\n")
    if len(chunk) > MAX_LINE and max(map(len, _ENDS.split(chunk))) > MAX_LINE:
        return None
    return count


def lines_read(file: JobFile, cursor: Cursor, *, ended: bool = False,
               limit: int = BATCH_LINES) -> list[str]:
    """Up to ``limit`` lines from ``cursor`` on (from at most BATCH_BYTES of the file),
    advancing it. A last line without its end is returned only once the writer has ``ended``
    (until then it is being written)."""
    f = file.open()
    if f is None:
        return []
    with f:
        size = os.fstat(f.fileno()).st_size
        data = os.pread(f.fileno(), BATCH_BYTES, cursor.offset)
    final = ended and cursor.offset + len(data) >= size
    lines, start = [], 0
    while len(lines) < limit and (span := line_end(data, start, final)) is not None:
        lines.append(data[start:span[0]])
        start = span[1]
    cursor.line += len(lines)
    cursor.offset += start
    return [decode(line) for line in lines]


def lines_skip(file: JobFile, cursor: Cursor, line: int) -> None:
    """Move ``cursor`` forward to line number ``line``, or to the end of the whole lines
    written so far if there are fewer."""
    f = file.open()
    if f is None:
        return
    with f:
        while cursor.line < line and (data := os.pread(f.fileno(), BLOCK, cursor.offset)):
            whole = data.rfind(b"\n") + 1
            count = _whole_lines(data[:whole]) if whole else None
            if count is not None and cursor.line + count <= line:
                cursor.line += count
                cursor.offset += whole
                continue
            start = 0
            while cursor.line < line and (span := line_end(data, start, False)) is not None:
                start = span[1]
                cursor.line += 1
            if not start:  # no whole line left: the rest is still being written
                return
            cursor.offset += start


def lines_end(file: JobFile) -> Cursor:
    """Where the whole lines written so far end."""
    cursor = Cursor()
    lines_skip(file, cursor, 1 << 62)
    return cursor


def lines_tail(file: JobFile, count: int) -> tuple[int, list[str]]:
    """The last ``count`` lines of the file as it is now (a last one without its end
    counts), and the number of the first of them: what a page shows before it follows."""
    if count <= 0:
        return lines_end(file).line, []
    end = lines_end(file)
    unfinished = file.size() > end.offset
    cursor = Cursor()
    lines_skip(file, cursor, max(0, end.line - count + unfinished))
    first, tail = cursor.line, []
    while len(tail) < count and (batch := lines_read(file, cursor, ended=True)):
        tail += batch
    return first, tail[:count]


def tail_offset(file: JobFile, count: int) -> int:
    """The byte offset where the last ``count`` lines of the file begin, reading no more of it
    than ``count`` + 1 lines can span. (Inside a line longer than that, where it is split is
    counted from there, so it may differ from how ``lines_read`` splits it from its start.)"""
    size = file.size()
    if count <= 0:
        return size
    start = max(0, size - (count + 1) * (MAX_LINE + 2))
    if start:  # from the beginning of the first line that begins in that window
        f = file.open()
        if f is None:
            return 0
        with f:
            data = os.pread(f.fileno(), MAX_LINE + 2, start)
        if (found := _ENDS.search(data)) is not None:
            start += found.end()
    window = Cursor(offset=start)
    lines_skip(file, window, 1 << 62)
    lines = window.line + (size > window.offset)
    cursor = Cursor(offset=start)
    lines_skip(file, cursor, max(0, lines - count))
    return cursor.offset


# ---------------------------------------------------------------------------------------------
# Pumps: one per followed file, publishing what is written to the file's group.

@dataclass
class Source:
    """A followed file: its ``group`` on the channel layer, its ``file``, and ``ended()``, true
    once nothing more will be written (asked before the last read, so nothing is missed)."""

    group: str
    file: JobFile
    ended: Callable[[], Awaitable[bool]]


@dataclass
class _Interest:
    followers: int = 0
    ended: bool = False  # its pump saw the writer end: nothing more to publish
    keeper: asyncio.Task | None = None
    pump: asyncio.Task | None = field(default=None, repr=False)


class Hub:
    """This process's followers of each group, and the pumps it runs for them."""

    def __init__(self):
        self._groups: dict[str, _Interest] = {}
        self._id = uuid.uuid4().hex

    def follow(self, source: Source) -> None:
        interest = self._groups.setdefault(source.group, _Interest())
        interest.followers += 1
        if interest.keeper is None or interest.keeper.done():
            interest.keeper = asyncio.create_task(self._keep(source, interest))

    def unfollow(self, group: str) -> None:
        interest = self._groups.get(group)
        if interest is not None:
            interest.followers -= 1

    def _forget_if_idle(self, group: str, interest: _Interest) -> None:
        current = asyncio.current_task()
        others = [t for t in (interest.keeper, interest.pump) if t is not current]
        if self._groups.get(group) is interest and interest.followers <= 0 and \
                all(t is None or t.done() for t in others):
            del self._groups[group]

    async def _keep(self, source: Source, interest: _Interest) -> None:
        """While this process has followers: mark the group wanted, and run its pump here when
        no process holds the lease."""
        lease_key, wanted_key = f"lines:lease:{source.group}", f"lines:wanted:{source.group}"
        try:
            while interest.followers > 0 and not interest.ended:
                await cache.aset(wanted_key, 1, WANTED_SECONDS)
                if (interest.pump is None or interest.pump.done()) and \
                        await cache.aadd(lease_key, self._id, LEASE_SECONDS):
                    interest.pump = asyncio.create_task(
                        self._pump(source, interest, lease_key, wanted_key))
                await asyncio.sleep(RENEW_SECONDS)
        except Exception:  # the cache is down: followers still read the file on their own
            log.exception("keeping the pump of %s", source.group)
        finally:
            self._forget_if_idle(source.group, interest)

    async def _pump(self, source: Source, interest: _Interest, lease_key: str,
                    wanted_key: str) -> None:
        try:
            interest.ended = await pump(source, lease_key=lease_key, wanted_key=wanted_key,
                                        owner=self._id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pump of %s", source.group)
        finally:
            with contextlib.suppress(Exception):
                if await cache.aget(lease_key) == self._id:
                    await cache.adelete(lease_key)
            self._forget_if_idle(source.group, interest)


async def pump(source: Source, *, lease_key: str | None = None, wanted_key: str | None = None,
               owner: str = "") -> bool:
    """Publish the lines written to ``source.path`` from now on, numbered, until the writer
    has ended (then a ``lines.end`` message; True) or nobody wants them any more (False)."""
    layer = get_channel_layer()
    loop = asyncio.get_running_loop()
    try:
        cursor = await asyncio.to_thread(lines_end, source.file)
    except PaddleCloudError as exc:  # a link or a FIFO where the file was: nothing to read
        log.warning("not following %s: %s", source.file, exc.message)
        return True
    # Followers read what came before this from the file (they may have joined before it).
    await layer.group_send(source.group, {"type": "lines.start", "next": cursor.line})
    ended = False
    checked = renewed = loop.time()
    while True:
        now = loop.time()
        if now - checked >= ENDED_CHECK_SECONDS:
            ended, checked = await source.ended(), now
        if lease_key and now - renewed >= RENEW_SECONDS:
            renewed = now
            if wanted_key and not await cache.aget(wanted_key):
                return False  # nobody follows this file any more
            await cache.aset(lease_key, owner, LEASE_SECONDS)
        try:
            size = await asyncio.to_thread(source.file.size)
            while size > cursor.offset:
                first = cursor.line
                lines = await asyncio.to_thread(lines_read, source.file, cursor, ended=ended)
                if not lines:
                    break
                await layer.group_send(source.group, {
                    "type": "lines.batch", "first": first, "lines": lines,
                    "offset": cursor.offset})
        except PaddleCloudError as exc:  # replaced by a link meanwhile: stop here
            log.warning("stopped following %s: %s", source.file, exc.message)
            ended = True
        if ended:
            await layer.group_send(source.group, {"type": "lines.end", "next": cursor.line,
                                                  "offset": cursor.offset})
            return True
        await asyncio.sleep(POLL_SECONDS)


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def hub() -> Hub:
    """The hub of the running event loop (a server has one; each test has its own)."""
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        _hubs[loop] = Hub()
    return _hubs[loop]
