"""Where a worker's log is read from: the one place that decides.

A replica's log comes from where it runs when its backend serves it (``Backend.log_stream``: a
pod's log as the cluster keeps it), else from its file in the job's output
(``jobs.files.log_file``: what the local backend's processes write, what a pod that is gone
left). A build's log, and a download of a replica's whole log, are always the file. Either way
it arrives as an async iterator of blocks (``stream``), for a streaming response.

What follows a log line by line (the job page's first lines, the WebSockets: ``lines``,
``pumps``) needs a file's line numbers, so it reads the file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.db import connection

from kernel.errors import ConflictError
from paddlecloud_core.logcursor import LogCursor

from ..backends import backend_for
from ..files import build_log_file, log_file
from ..models import worker_ended
from . import stream
from .lines import tail_offset


def log_blocks(job, worker, *, follow: bool = False, tail: int | None = None,
               offset: LogCursor | None = None
               ) -> tuple[LogCursor | None, AsyncIterator[bytes]]:
    """The worker's log (a replica, or the job's ``Build``): its last ``tail`` lines, or from
    ``offset`` on, or all of it, and with ``follow`` what it writes until it ends; and where
    that begins (``paddlecloud_core.logcursor``: a byte of its file, or of a pod's container
    run for a log served from where it runs; None where that cannot be said). A follower that
    lost its connection asks again from where it had read to. A link or a FIFO where its file
    should be is refused here (``PaddleCloudError``), before anything is sent."""
    live = backend_for(job.datacenter).log_stream(job, worker, follow=follow, tail=tail,
                                                  ended=lambda: _ended_here(worker),
                                                  at=offset)
    if live is not None:
        start, chunks = live
        return start, stream.from_sync(chunks)
    if offset is not None and offset.pod is not None:
        raise ConflictError.for_field(
            "offset", "the pod whose log was followed is gone: its whole log is kept in the "
            "job's output (ask for the log again, without offset)", code="log_gone")
    file = log_file(job, worker)
    file.size()
    if offset is None:
        start = tail_offset(file, tail) if tail is not None else 0
    else:
        start = offset.offset
    return LogCursor(start), stream.blocks(file, start, _ended(worker) if follow else None)


def build_log_blocks(build, *, follow: bool = False) -> AsyncIterator[bytes]:
    """A build's log (``paddlectl build``), and with ``follow`` what it writes until it ends."""
    file = build_log_file(build)
    file.size()
    return stream.blocks(file, 0, _ended(build) if follow else None)


def log_archived_blocks(job, replica) -> AsyncIterator[bytes]:
    """The replica's whole log as kept in the job's output (a download: the file, not the
    pod)."""
    file = log_file(job, replica)
    file.size()
    return stream.blocks(file)


def _ended(worker):
    return lambda: sync_to_async(worker_ended)(worker)


def _ended_here(worker) -> bool:
    """``worker_ended``, asked by a backend following a live log on a worker thread of the
    streaming response (which closes its own connection)."""
    try:
        return worker_ended(worker)
    finally:
        connection.close()
