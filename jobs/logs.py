"""Reading replica logs: the last lines, and following a log while its replica runs."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

BLOCK = 64 * 1024
FOLLOW_POLL = 0.2


def tail_offset(path: Path, lines: int) -> int:
    """The byte offset where the last ``lines`` lines of the file begin."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if lines <= 0:
        return size
    with path.open("rb") as f:
        end = size
        # A final newline ends the last line; it does not start another.
        f.seek(max(0, size - 1))
        newlines = -1 if size and f.read(1) == b"\n" else 0
        while end > 0:
            start = max(0, end - BLOCK)
            f.seek(start)
            block = f.read(end - start)
            for i in range(len(block) - 1, -1, -1):
                if block[i] == 10:
                    newlines += 1
                    if newlines == lines:
                        return start + i + 1
            end = start
    return 0


def read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""


async def follow(path: Path, offset: int, finished: Callable[[], Awaitable[bool]]
                 ) -> AsyncIterator[bytes]:
    """Yield what is written to ``path`` from ``offset`` on, until ``finished()`` and all is
    read. Polls the file (it may live on a shared file system where inotify sees nothing)."""
    while True:
        done = await finished()  # asked before reading, so nothing written after is missed
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            size = 0
        if size > offset:
            chunk = await asyncio.to_thread(read_from, path, offset)
            offset += len(chunk)
            yield chunk
            continue
        if done:
            return
        await asyncio.sleep(FOLLOW_POLL)


async def from_sync(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A blocking iterator of chunks (a pod's log over HTTP) served from the event loop, one
    chunk at a time on a worker thread, so a follow streams instead of being read whole."""
    done = object()
    while (chunk := await asyncio.to_thread(next, chunks, done)) is not done:
        yield chunk
