"""A replica's log as a stream of bytes, for HTTP: the whole log or from an offset (its last
lines: ``lines.tail_offset``), followed while its replica runs, or a pod's log as the cluster
serves it. Always in blocks: memory stays flat whatever a job writes."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from kernel.errors import PaddleCloudError

from ..files import JobFile

log = logging.getLogger(__name__)

BLOCK = 64 * 1024
FOLLOW_POLL = 0.2


async def blocks(file: JobFile, offset: int = 0,
                 finished: Callable[[], Awaitable[bool]] | None = None) -> AsyncIterator[bytes]:
    """What the file holds from ``offset`` on, block by block; with ``finished``, also what is
    written to it after, until ``finished()`` and all is read. Polls the file (it may live on a
    shared file system where inotify sees nothing), opening it again each time (a restarted
    replica's log may be a new file). A link swapped in for the file ends it."""
    try:
        while True:
            done = finished is None or await finished()  # asked before reading: nothing missed
            f = await asyncio.to_thread(file.open)
            if f is not None:
                with f:
                    size = os.fstat(f.fileno()).st_size
                    while offset < size and (chunk := await asyncio.to_thread(
                            os.pread, f.fileno(), BLOCK, offset)):
                        offset += len(chunk)
                        yield chunk
            if done:
                return
            await asyncio.sleep(FOLLOW_POLL)
    except PaddleCloudError as exc:
        log.warning("stopped sending %s: %s", file, exc.message)


async def from_sync(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A blocking iterator of chunks (a pod's log over HTTP) served from the event loop, one
    chunk at a time on a worker thread, so it streams instead of being read whole."""
    done = object()
    while (chunk := await asyncio.to_thread(next, chunks, done)) is not done:
        yield chunk
