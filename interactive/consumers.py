"""WebSockets of interactive work: ``/ws/jobs/<name>/ports/<port>/?worker=trainer-0``, the byte
stream of ``paddlectl port-forward`` to a port of a running replica (``Backend.port_open``).

Authenticated and refused as the jobs' sockets are (``jobs.consumers.PortalConsumer``): a job
the user cannot see is one that does not exist (4404); a job not running is 4409, and so is a
port nothing listens on, each with a JSON ``error`` message that says so first. Once open,
binary frames carry the bytes both ways; either side's end closes the other. Every forward
opened is written to the audit log.
"""

from __future__ import annotations

import asyncio
import contextlib

from channels.db import database_sync_to_async

from jobs.backends import backend_for
from jobs.backends.base import BackendError
from jobs.consumers import PortalConsumer
from jobs.services import job_worker
from kernel.errors import ConflictError

from . import services


class PortForwardConsumer(PortalConsumer):
    """Binary frames both ways between the client and the replica's port."""

    stream = None

    async def open(self):
        self.dc = await self.datacenter()
        job = await self.job(self.dc, self.scope["url_route"]["kwargs"]["name"])
        port = services.port_check(self.scope["url_route"]["kwargs"]["port"])
        replica = await self.replica(job)
        try:
            self.stream = await backend_for(job.datacenter).port_open(job, replica, port)
        except BackendError as exc:
            raise ConflictError(str(exc), code="port_unreachable") from None
        await database_sync_to_async(services.port_forward_audit)(
            self.scope["user"], job, replica, port)
        self.tasks.append(asyncio.create_task(self.pump()))

    @database_sync_to_async
    def replica(self, job):
        services.job_reachable(self.scope["user"], job)
        return job_worker(job, self.query.get("worker") or None, building=False)

    async def pump(self):
        """The port's bytes to the client; its end closes the socket."""
        while data := await self.stream.read():
            await self.send(bytes_data=data)
        await self.close(code=1000)

    async def receive(self, text_data=None, bytes_data=None):
        if self.stream is not None and bytes_data:
            try:
                await self.stream.write(bytes_data)
            except OSError:
                await self.close(code=1000)

    async def disconnect(self, code):
        await super().disconnect(code)
        if self.stream is not None:
            with contextlib.suppress(OSError):
                await self.stream.close()
