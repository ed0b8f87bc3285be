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
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from channels.layers import get_channel_layer
from django.core.cache import cache

log = logging.getLogger(__name__)

BLOCK = 256 * 1024
BATCH_LINES = 1000  # per message, to browsers and over the channel layer
POLL_SECONDS = 0.1  # how often a pump looks for new lines (they reach followers within this)
ENDED_CHECK_SECONDS = 1.0  # how often a pump asks whether its writer has ended
LEASE_SECONDS = 10  # a pump's lease; renewed every RENEW_SECONDS
RENEW_SECONDS = 3
WANTED_SECONDS = 15  # a pump nobody has wanted for this long stops


@dataclass
class Cursor:
    """A reader's place in a file: the byte ``offset`` where line number ``line`` begins."""

    line: int = 0
    offset: int = 0


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").removesuffix("\r")


def lines_read(path: Path, cursor: Cursor, *, ended: bool = False,
               limit: int = BATCH_LINES) -> list[str]:
    """Up to ``limit`` whole lines from ``cursor`` on, advancing it. A last line without its
    newline is returned only once the writer has ``ended`` (until then it is being written)."""
    try:
        with open(path, "rb") as f:
            f.seek(cursor.offset)
            data = f.read(BLOCK)
            while data.count(b"\n") < limit and (more := f.read(BLOCK)):
                data += more
    except FileNotFoundError:
        return []
    lines, start = [], 0
    while len(lines) < limit and (newline := data.find(b"\n", start)) >= 0:
        lines.append(data[start:newline])
        start = newline + 1
    if ended and len(lines) < limit and start < len(data):
        lines.append(data[start:])  # all of the file was read: this is its true end
        start = len(data)
    cursor.line += len(lines)
    cursor.offset += start
    return [decode(line) for line in lines]


def lines_skip(path: Path, cursor: Cursor, line: int) -> None:
    """Move ``cursor`` forward to line number ``line``, or to the end of the whole lines
    written so far if there are fewer."""
    try:
        with open(path, "rb") as f:
            position = cursor.offset
            f.seek(position)
            while cursor.line < line and (block := f.read(BLOCK)):
                newlines = block.count(b"\n")
                if newlines and cursor.line + newlines <= line:  # the whole block
                    cursor.line += newlines
                    cursor.offset = position + block.rfind(b"\n") + 1
                else:
                    start = 0
                    while cursor.line < line and (newline := block.find(b"\n", start)) >= 0:
                        start = newline + 1
                        cursor.line += 1
                        cursor.offset = position + start
                position += len(block)
    except FileNotFoundError:
        return


def lines_end(path: Path) -> Cursor:
    """Where the whole lines written so far end."""
    cursor = Cursor()
    lines_skip(path, cursor, 1 << 62)
    return cursor


def lines_tail(path: Path, count: int) -> tuple[int, list[str]]:
    """The last ``count`` lines of the file as it is now (a last one without its newline
    counts), and the number of the first of them: what a page shows before it follows."""
    if count <= 0:
        return lines_end(path).line, []
    end = lines_end(path)
    unfinished = _size(path) > end.offset
    cursor = Cursor()
    lines_skip(path, cursor, max(0, end.line - count + unfinished))
    first, tail = cursor.line, []
    while len(tail) < count and (batch := lines_read(path, cursor, ended=True)):
        tail += batch
    return first, tail[:count]


# ---------------------------------------------------------------------------------------------
# Pumps: one per followed file, publishing what is written to the file's group.

@dataclass
class Source:
    """A followed file: its ``group`` on the channel layer, its ``path``, and ``ended()``, true
    once nothing more will be written (asked before the last read, so nothing is missed)."""

    group: str
    path: Path
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
    cursor = await asyncio.to_thread(lines_end, source.path)
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
        size = await asyncio.to_thread(_size, source.path)
        while size > cursor.offset:
            first = cursor.line
            lines = await asyncio.to_thread(lines_read, source.path, cursor, ended=ended)
            if not lines:
                break
            await layer.group_send(source.group, {
                "type": "lines.batch", "first": first, "lines": lines,
                "offset": cursor.offset})
        if ended:
            await layer.group_send(source.group, {"type": "lines.end", "next": cursor.line,
                                                  "offset": cursor.offset})
            return True
        await asyncio.sleep(POLL_SECONDS)


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def hub() -> Hub:
    """The hub of the running event loop (a server has one; each test has its own)."""
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        _hubs[loop] = Hub()
    return _hubs[loop]
