"""``/ws/jobs/<name>/exec/?worker=trainer-1``: a command in a running job's worker, its bytes
both ways (``paddlectl exec``, the job page's terminal; the protocol: docs/users/api.md).

1. The client sends one text frame, ``{"type": "start", "command": ["bash"], "tty": true,
   "cols": 120, "rows": 40, "term": "xterm-256color"}``; the portal checks who may (the job's
   owner, or an admin with ``?owner=``: anyone else is refused as for a job that does not
   exist), audits it and starts the command (``Backend.exec_open``), then answers
   ``{"type": "started", "worker": "trainer-1"}``.
2. Binary frames from the client are the command's input; ``{"type": "resize", "cols",
   "rows"}`` its terminal's new size; ``{"type": "eof"}`` the end of its input.
3. Binary frames from the portal are its output, each led by one byte: 1 stdout, 2 stderr.
4. Once it has ended and its output is sent: ``{"type": "exit", "code": N}`` and a close
   (1000). A refusal or a failure to start is an ``error`` message and a 4xxx close, as on
   every WebSocket of the portal (``jobs.consumers.PortalConsumer``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from channels.db import database_sync_to_async

from jobs.backends import backend_for
from jobs.backends.base import BackendError
from jobs.consumers import PortalConsumer
from kernel.errors import ConflictError, PaddleCloudError, ValidationError

from .execs import exec_audit, exec_command, exec_job, exec_size, exec_worker

log = logging.getLogger(__name__)

MESSAGE_BYTES = 65536  # the most one input frame may carry


class ExecConsumer(PortalConsumer):
    process = None
    pump = None

    async def open(self):
        self.dc = await self.datacenter()
        self.target = await self._target()  # refused now if it cannot be: before any input

    @database_sync_to_async
    def _target(self):
        job = exec_job(self.scope["user"], self.dc, self.scope["url_route"]["kwargs"]["name"],
                       owner=self.query.get("owner"))
        return job, exec_worker(job, self.query.get("worker"))

    async def receive(self, text_data=None, bytes_data=None):
        if self.closed:
            return
        try:
            if bytes_data is not None:
                if self.process is None:
                    raise ValidationError("send the start message before any input")
                if len(bytes_data) > MESSAGE_BYTES:
                    raise ValidationError(f"input: at most {MESSAGE_BYTES} bytes a frame")
                await self.process.write(bytes_data)
                return
            try:
                message = json.loads(text_data or "")
            except ValueError:
                raise ValidationError("a text frame must be a JSON message") from None
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "start":
                await self.start(message)
            elif kind == "resize" and self.process is not None:
                await self.process.resize(exec_size(message, "cols"), exec_size(message, "rows"))
            elif kind == "eof" and self.process is not None:
                await self.process.write_end()
            elif kind not in ("resize", "eof"):
                raise ValidationError.for_field("type", "start, resize or eof")
        except PaddleCloudError as exc:
            await self.refuse(exc)

    async def start(self, message: dict):
        if self.process is not None:
            raise ValidationError("the command has started already")
        command, tty, size, term = exec_command(message)
        job, replica = await self._target()  # still running, still theirs
        await database_sync_to_async(exec_audit)(self.scope["user"], job, replica, command,
                                                 tty=tty)
        try:
            self.process = await backend_for(job.datacenter).exec_open(
                job, replica, command, tty=tty, size=size, term=term)
        except BackendError as exc:
            raise ConflictError(f"worker {replica.name}: {exc}", code="exec_failed") from None
        await self.send_json({"type": "started", "worker": replica.name})
        self.pump = asyncio.create_task(self._pump())
        self.tasks.append(self.pump)

    async def _pump(self):
        """Its output, then its exit status, then the close."""
        try:
            while True:
                channel, data = await self.process.read()
                if not channel:
                    break
                if self.closed:
                    return
                await self.send(bytes_data=bytes([channel]) + data)
            code = await self.process.wait()
            if not self.closed:
                await self.send_json({"type": "exit", "code": code})
                await self.close(code=1000)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("exec in %s", self.scope["path"])
            with contextlib.suppress(Exception):
                await self.close(code=1011)

    async def disconnect(self, code):
        await super().disconnect(code)
        if self.process is not None:
            process, self.process = self.process, None
            await process.close()
