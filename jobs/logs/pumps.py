"""Following a growing file over WebSockets: a *pump* publishes the lines written to it to a
channel-layer group, in numbered batches (``jobs.logs.lines`` numbers them).

The file in PFS is the record: the WebSocket consumers read what came before from it, and the
pump publishes what is written next. Messages may be dropped (channels-redis silently drops
what is over a group's capacity) or come twice (two pumps for a moment): a consumer tells by
the numbers and refills a gap from the file, so a follower sees every line once, in order.

One pump runs per file while someone follows it, whichever process they are in: a lease in
the cache elects it, and followers' processes renew a "wanted" mark. If the pump's process
dies, the lease runs out and a follower's process starts another.

Each process is one member of the group, whatever its number of followers: its *relay*
receives each message once and hands it to the inboxes of its followers. So a batch crosses
the channel layer (Redis) once per process, not once per follower, and the followers of one
process share it (and its encoded text: ``jobs.consumers``). The relay keeps the last
batches, so a follower that falls behind catches up from them rather than from the file. The
process's followers also share one question "has the writer ended?" a second (``Hub.ended``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from channels.layers import get_channel_layer
from django.core.cache import cache

from kernel.errors import PaddleCloudError

from ..files import JobFile
from .lines import lines_end, lines_read

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1  # how often a pump looks for new lines (they reach followers within this)
ENDED_CHECK_SECONDS = 1.0  # how often a pump asks whether its writer has ended
LEASE_SECONDS = 10  # a pump's lease; renewed every RENEW_SECONDS
RENEW_SECONDS = 3
WANTED_SECONDS = 15  # a pump nobody has wanted for this long stops
ENDED_SHARED_SECONDS = 1.0  # a process asks whether a writer has ended at most this often
RECENT_BATCHES = 50  # a process keeps a log's last batches for its followers that fall behind


@dataclass
class Source:
    """A followed file: its ``group`` on the channel layer, its ``file``, and ``ended()``, true
    once nothing more will be written (asked before the last read, so nothing is missed)."""

    group: str
    file: JobFile
    ended: Callable[[], Awaitable[bool]]


@dataclass
class _Interest:
    inboxes: set[asyncio.Queue] = field(default_factory=set)  # this process's followers
    ended: bool = False  # its pump saw the writer end: nothing more to publish
    keeper: asyncio.Task | None = None
    pump: asyncio.Task | None = field(default=None, repr=False)
    relay: asyncio.Task | None = field(default=None, repr=False)
    joined: asyncio.Future | None = field(default=None, repr=False)  # the relay is a member
    asking: asyncio.Task | None = field(default=None, repr=False)  # "has the writer ended?"
    asked_at: float = 0.0
    recent: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=RECENT_BATCHES), repr=False)

    @property
    def followers(self) -> int:
        return len(self.inboxes)


class Hub:
    """This process's followers of each group, the relay that receives the group's messages
    for them, and the pumps it runs."""

    def __init__(self):
        self._groups: dict[str, _Interest] = {}
        self._id = uuid.uuid4().hex

    async def follow(self, source: Source, inbox: asyncio.Queue) -> None:
        """Put the group's messages into ``inbox`` from now on (a full inbox loses them: the
        follower refills the gap from the file). Returns once this process is a member of the
        group, so what the follower reads from the file next leaves no gap."""
        interest = self._groups.setdefault(source.group, _Interest())
        interest.inboxes.add(inbox)
        if interest.relay is None or interest.relay.done() or interest.relay.cancelling():
            interest.joined = asyncio.get_running_loop().create_future()
            interest.relay = asyncio.create_task(
                self._relay(source.group, interest, interest.joined))
        if interest.keeper is None or interest.keeper.done():
            interest.keeper = asyncio.create_task(self._keep(source, interest))
        with contextlib.suppress(Exception):  # logged by the relay; the file is still read
            await asyncio.shield(interest.joined)

    def unfollow(self, group: str, inbox: asyncio.Queue) -> None:
        interest = self._groups.get(group)
        if interest is not None:
            interest.inboxes.discard(inbox)
            if not interest.inboxes and interest.relay is not None:
                interest.relay.cancel()

    async def ended(self, source: Source) -> bool:
        """``source.ended()``, asked once for all of this process's followers of the group
        at most every ENDED_SHARED_SECONDS. An answer is never older than the question, so
        "ended, then read" still holds: a reader that hears True reads after it was true."""
        interest = self._groups.get(source.group)
        if interest is None:
            return await source.ended()
        now = asyncio.get_running_loop().time()
        if interest.asking is None or (interest.asking.done() and (
                interest.asking.cancelled() or interest.asking.exception() is not None
                or (not interest.asking.result()
                    and now - interest.asked_at >= ENDED_SHARED_SECONDS))):
            interest.asked_at = now
            interest.asking = asyncio.create_task(source.ended())
        return await asyncio.shield(interest.asking)

    def recent(self, group: str, line: int) -> dict | None:
        """The last batches this process received hold line ``line``: that batch (a follower
        that fell behind catches up from it, not from the file)."""
        interest = self._groups.get(group)
        for batch in reversed(interest.recent if interest is not None else ()):
            if batch["first"] <= line < batch["first"] + len(batch["lines"]):
                return batch
        return None

    def _forget_if_idle(self, group: str, interest: _Interest) -> None:
        current = asyncio.current_task()
        others = [t for t in (interest.keeper, interest.pump, interest.relay)
                  if t is not current]
        if self._groups.get(group) is interest and interest.followers <= 0 and \
                all(t is None or t.done() for t in others):
            del self._groups[group]

    async def _relay(self, group: str, interest: _Interest, ready: asyncio.Future) -> None:
        """One membership of ``group`` for this process: each message to every local inbox.
        ``ready`` is set once this process is a member."""
        layer = get_channel_layer()
        joined = False
        try:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
            joined = True
            ready.set_result(None)
            while interest.inboxes:
                message = await layer.receive(channel)
                if message.get("type") == "lines.batch":
                    interest.recent.append(message)
                for inbox in list(interest.inboxes):
                    with contextlib.suppress(asyncio.QueueFull):
                        inbox.put_nowait(message)
        except Exception as exc:  # the layer is down: followers still read the file
            log.exception("relaying %s", group)
            if not ready.done():
                ready.set_exception(exc)
        finally:
            if not ready.done():
                ready.cancel()
            if joined:
                with contextlib.suppress(Exception):
                    await layer.group_discard(group, channel)
            self._forget_if_idle(group, interest)

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
