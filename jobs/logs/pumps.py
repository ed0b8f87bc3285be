"""Following a growing file over WebSockets: a *pump* publishes the lines written to it to a
channel-layer group, in numbered batches (``jobs.logs.lines`` numbers them).

The file in PFS is the record: the WebSocket consumers read what came before from it, and the
pump publishes what is written next. Messages may be dropped (channels-redis silently drops
what is over a group's capacity) or come twice (two pumps for a moment): a consumer tells by
the numbers and refills a gap from the file, so a follower sees every line once, in order.

One pump runs per file while someone follows it, whichever process they are in: a lease in
the cache elects it, and followers' processes renew a "wanted" mark. If the pump's process
dies, the lease runs out and a follower's process starts another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from channels.layers import get_channel_layer
from django.core.cache import cache

from paddlecloud.errors import PaddleCloudError

from ..files import JobFile
from .lines import lines_end, lines_read

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1  # how often a pump looks for new lines (they reach followers within this)
ENDED_CHECK_SECONDS = 1.0  # how often a pump asks whether its writer has ended
LEASE_SECONDS = 10  # a pump's lease; renewed every RENEW_SECONDS
RENEW_SECONDS = 3
WANTED_SECONDS = 15  # a pump nobody has wanted for this long stops


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
