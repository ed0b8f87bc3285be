"""The dashboard's WebSockets: job states (the list and a job's page), and a worker's log
lines and metrics as they are written.

Authenticated by the session (``AuthMiddlewareStack``), origin-checked (``asgi.py``), or,
for the clients, by their API token (``accounts.websockets``). A user
sees only their own jobs: anything else is refused like a job that does not exist. A refusal
is an ``{"type": "error", "code", "message"}`` message, then a close code of 4000 + the HTTP
status the API would answer (4400, 4401, 4403, 4404, 4429), with the message as its reason,
so a page can tell why. A user has at most PADDLECLOUD_WEBSOCKETS_PER_USER open at once, in
every process of the portal (``accounts.throttling.slot_take``); one more is refused with 4429
(the page tries again later, as after any other close).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from accounts.selectors import acting_datacenter
from accounts.throttling import SLOT_LEASE, slot_release, slot_renew, slot_take
from kernel import metrics as portal_metrics
from kernel.errors import AuthenticationError, PaddleCloudError
from kernel.security import asgi_request
from kernel.storable import request_problem
from scheduling.forecasts import job_predictions

from . import services
from .files import JobFile, log_file, metrics_file
from .folds import fold_rows
from .logs import lines, pumps
from .metrics import metric_records
from .models import worker_ended
from .notify import job_group, jobs_group
from .serializers import EventSerializer, JobSerializer, WorkerSerializer

# How long before its commit a repeat may be stamped (``models.event_repeatable`` in a
# transaction): the page's look for counted repeats reaches back that far.
REPEAT_COMMIT_SLACK = timedelta(seconds=60)

log = logging.getLogger(__name__)

COALESCE_SECONDS = 0.05  # changes that come together are sent together
WATCH_SECONDS = 5.0  # a follower checks the file itself this often (a lost message, no pump)
INBOX_MESSAGES = 100  # a follower's pump messages waiting for it; more are lost (and refilled)
ENCODED = "encoded"  # a batch's message as text, kept in the batch for the process's followers
SOCKETS = "open WebSockets"  # what a user's slots are slots of
REASON_BYTES = 123  # the most a close frame's reason may take (RFC 6455)


class PortalConsumer(AsyncJsonWebsocketConsumer):
    """Accept, then ``open()``; a PaddleCloudError from it is sent and closes the socket."""

    async def connect(self):
        self.joined: list[str] = []
        self.tasks: list = []  # cancelled when the socket goes (tasks, Coalescing)
        self.closed = False
        self.slot = None
        await self.accept()
        try:
            unstorable = request_problem(asgi_request(self.scope))
            if unstorable is not None:
                raise unstorable
            if not self.scope["user"].is_authenticated:
                raise AuthenticationError("log in again: your session has ended")
            self.slot = await sync_to_async(slot_take)(
                SOCKETS, self.scope["user"], limit=settings.PADDLECLOUD_WEBSOCKETS_PER_USER,
                holder=self.channel_name, retry_after=SLOT_LEASE)
            self.tasks.append(asyncio.create_task(self._hold_slot()))
            self.query = {k: v[-1] for k, v in
                          parse_qs(self.scope["query_string"].decode("latin-1")).items()}
            await self.open()
            self.counted = True  # a follower from now until the socket goes
            portal_metrics.websocket_opened(type(self).__name__)
        except PaddleCloudError as exc:
            await self.refuse(exc)

    async def refuse(self, exc: PaddleCloudError):
        await self.send_json({"type": "error", "code": exc.code, "message": exc.message})
        reason = exc.message.encode()[:REASON_BYTES].decode(errors="ignore")
        await self.close(code=4000 + exc.status, reason=reason)

    async def _hold_slot(self):
        """Renew the socket's slot while it is open (one of a process that died expires)."""
        while True:
            await asyncio.sleep(SLOT_LEASE / 3)
            await sync_to_async(slot_renew)(self.slot)

    async def close(self, code=None, reason=None):
        self.closed = True
        await super().close(code, reason)

    async def join(self, group: str):
        await self.channel_layer.group_add(group, self.channel_name)
        self.joined.append(group)

    async def disconnect(self, code):
        self.closed = True
        if getattr(self, "counted", False):
            self.counted = False
            portal_metrics.websocket_closed(type(self).__name__)
        for task in self.tasks:
            task.cancel()
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        if self.slot is not None:
            slot, self.slot = self.slot, None
            await sync_to_async(slot_release)(slot, self.channel_name)

    async def open(self):
        raise NotImplementedError

    @database_sync_to_async
    def datacenter(self):
        return acting_datacenter(self.scope["user"], self.scope.get("auth"),
                                 self.query.get("datacenter"))

    @database_sync_to_async
    def job(self, datacenter, name: str):
        return services.job_get(self.scope["user"], datacenter, name)


class Coalescing:
    """Run ``flush(keys)`` once for the keys marked within COALESCE_SECONDS."""

    def __init__(self, flush):
        self.flush, self.keys, self.task = flush, set(), None

    def mark(self, key) -> None:
        self.keys.add(key)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._later())

    async def _later(self):
        while self.keys:  # marks that come while flushing are flushed next
            await asyncio.sleep(COALESCE_SECONDS)
            keys, self.keys = self.keys, set()
            await self.flush(keys)

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


class JobListConsumer(PortalConsumer):
    """``/ws/jobs/``: each of the user's jobs in the datacenter, whenever it changes."""

    async def open(self):
        self.dc = await self.datacenter()
        self.changes = Coalescing(self.send_jobs)
        self.tasks.append(self.changes)
        await self.join(jobs_group(self.scope["user"].pk, self.dc.pk))

    async def job_changed(self, event):
        self.changes.mark(event["job_id"])

    async def job_deleted(self, event):
        await self.send_json({"type": "job_deleted", "name": event["name"]})

    async def notification_shown(self, event):
        await self.send_json({"type": "notification", "id": event["id"], "text": event["text"]})

    async def send_jobs(self, job_ids):
        for message in await self.jobs_read(job_ids):
            await self.send_json(message)

    @database_sync_to_async
    def jobs_read(self, job_ids) -> list[dict]:
        """A ``job`` message a job (``"in"``: the row it is folded into, ``jobs.folds``), then
        a ``row`` message for each such row (a sweep's: its progress)."""
        jobs = list(services.job_list(self.scope["user"], self.dc).filter(pk__in=job_ids))
        folded = fold_rows(jobs)
        # One forecast for the batch (else one for each waiting job).
        shown = JobSerializer(jobs, many=True,
                              context={"predictions": job_predictions(jobs)}).data
        messages, rows = [], {}
        for job, data in zip(jobs, shown, strict=True):
            message = {"type": "job", "job": data}
            if (row := folded.get(job.pk)) is not None:
                message["in"] = {"kind": row["kind"], "name": row["name"]}
                rows[(row["kind"], row["name"])] = row
            messages.append(message)
        return messages + [{"type": "row", "row": row} for row in rows.values()]


class JobConsumer(PortalConsumer):
    """``/ws/jobs/<name>/``: the job, its workers and its events; then every change."""

    async def open(self):
        self.dc = await self.datacenter()
        job = await self.job(self.dc, self.scope["url_route"]["kwargs"]["name"])
        # The newest event sent, the oldest the page shows, since when repeats are looked
        # for, and the repeat counts sent (event id -> repeats).
        self.job_id, self.last_event, self.first_event = job.pk, 0, 0
        self.repeats_seen, self.repeats_sent = None, {}
        self.changes = Coalescing(lambda _: self.send_state(snapshot=False))
        self.tasks.append(self.changes)
        await self.join(job_group(job.pk))
        await self.send_state(snapshot=True)  # after joining: no change falls in between

    async def job_changed(self, event):
        self.changes.mark(event["job_id"])

    async def job_deleted(self, event):
        if not self.closed:
            await self.send_json({"type": "job_deleted", "name": event["name"]})
            await self.close(code=4404)

    async def send_state(self, *, snapshot: bool):
        state = await self.state_read()
        if self.closed:
            return
        if state is None:  # deleted while we looked
            return await self.job_deleted({"name": self.scope["url_route"]["kwargs"]["name"]})
        job, workers, events = state
        await self.send_json({"type": "job", "job": job})
        await self.send_json({"type": "workers", "workers": workers})
        if snapshot:
            await self.send_json({"type": "events", "events": events})
        else:
            for event in events:
                await self.send_json({"type": "event", "event": event})

    @database_sync_to_async
    def state_read(self):
        job = services.job_list(self.scope["user"], self.dc).filter(pk=self.job_id).first()
        if job is None:
            return None
        since = timezone.now()
        if self.repeats_seen is None:  # the snapshot: the latest, as the page shows them
            events, _older = services.job_events_shown(job)
            self.first_event = events[0].pk if events else 0
        else:  # new events, and those shown that counted more repeats (sent again, same id)
            # A repeat is stamped before its commit: one committed after the last read may
            # bear an earlier time, so the look reaches back REPEAT_COMMIT_SLACK and sends
            # only the counts that changed.
            rows = list(job.events.select_related("replica").filter(
                Q(pk__gt=self.last_event) | Q(
                    pk__gte=self.first_event, repeats__gt=0,
                    repeated_until__gte=self.repeats_seen - REPEAT_COMMIT_SLACK)))
            events = [event for event in rows if event.pk > self.last_event
                      or self.repeats_sent.get(event.pk) != event.repeats]
            # What the look will not reach again is forgotten: counted again, it is sent.
            self.repeats_sent = {event.pk: self.repeats_sent.get(event.pk) for event in rows}
        self.last_event = max([self.last_event, *(e.pk for e in events)])
        self.repeats_sent.update((e.pk, e.repeats) for e in events if e.repeats)
        self.repeats_seen = since
        return (JobSerializer(job).data,
                WorkerSerializer(job.replicas.order_by("role", "index"), many=True).data,
                EventSerializer(events, many=True).data)


class LinesConsumer(PortalConsumer):
    """A worker's numbered lines: what the file holds from ``?from=`` on, then each batch the
    pump publishes. Lines go out in order, once each: a batch that starts past what was sent
    (a message was dropped) is refilled from the file first.

    The pump's messages come through this process's relay (``pumps.Hub``) into ``inbox``,
    not through a membership of the group per socket. A batch that a follower sends whole is
    encoded once for all of the process's followers."""

    kind = ""
    source: pumps.Source | None = None
    batch_at = float("-inf")  # when the last batch from the pump was handled

    async def open(self):
        dc = await self.datacenter()
        job = await self.job(dc, self.scope["url_route"]["kwargs"]["name"])
        replica, file = await self.worker(job)
        self.next = lines.line_number(self.query.get("from", "0"))
        self.cursor, self.lock = lines.Cursor(), asyncio.Lock()
        # A link or a FIFO where the file is: refused before anything is followed.
        await asyncio.to_thread(lines.lines_skip, file, self.cursor, self.next)
        self.followed = replica
        self.source = pumps.Source(f"lines.{job.uid.hex}.{self.kind}.{replica.role}"
                                   f"{replica.index}", file, self.ended)
        self.inbox: asyncio.Queue = asyncio.Queue(INBOX_MESSAGES)
        self.tasks.append(asyncio.create_task(self._take()))
        await pumps.hub().follow(self.source, self.inbox)  # before the file is read
        self.watch = asyncio.create_task(self._watch())
        self.tasks.append(self.watch)

    @database_sync_to_async
    def worker(self, job):
        replica = services.job_worker(job, self.query.get("worker"))
        return replica, self.file(job, replica)

    def file(self, job, replica) -> JobFile:
        raise NotImplementedError

    async def ended(self) -> bool:
        return await database_sync_to_async(worker_ended)(self.followed)

    async def disconnect(self, code):
        if self.source is not None:
            pumps.hub().unfollow(self.source.group, self.inbox)
        await super().disconnect(code)

    async def _take(self):
        """Handle the pump's messages, in order."""
        handlers = {"lines.start": self.lines_start, "lines.batch": self.lines_batch,
                    "lines.end": self.lines_end}
        with contextlib.suppress(asyncio.CancelledError):
            while not self.closed:
                event = await self.inbox.get()
                try:
                    await handlers[event["type"]](event)
                except Exception:
                    log.exception("following %s", self.source.group)
                    return await self.close(code=1011)

    async def _watch(self):
        """Catch up from the file now, then every WATCH_SECONDS when no batch came meanwhile
        (a batch after a lost one refills the gap itself), and end when the worker has: the
        follower never depends on a message arriving."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(asyncio.CancelledError):
            while not self.closed:
                # before reading: nothing written after is lost
                ended = await pumps.hub().ended(self.source)
                async with self.lock:  # (not held while the database answers)
                    if ended or loop.time() - self.batch_at >= WATCH_SECONDS:
                        await self.catch_up(ended=ended)
                    if ended:
                        return await self.finish()
                await asyncio.sleep(WATCH_SECONDS)

    async def catch_up(self, *, ended: bool = False):
        """Send what the file holds past the cursor: from the batches this process received
        lately while they have it, then from the file. If a job swapped a link (or anything
        but a regular file) in for it, the follower is told and the socket closed."""
        while not self.closed:
            event = pumps.hub().recent(self.source.group, self.cursor.line)
            if event is not None:
                await self.deliver(event["first"], event["lines"], event)
                self.cursor = lines.Cursor(event["first"] + len(event["lines"]),
                                           event["offset"])
                continue
            first = self.cursor.line
            try:
                batch = await asyncio.to_thread(lines.lines_read, self.source.file,
                                                self.cursor, ended=ended)
            except PaddleCloudError as exc:
                return await self.refuse(exc)
            if not batch:
                return
            await self.deliver(first, batch)

    async def deliver(self, first: int, batch: list[str], event: dict | None = None):
        """Send the lines of ``batch`` (line ``first`` onwards) the client has not had. A
        pump's batch (``event``) sent whole is encoded by the first of this process's
        followers to send it, and its text kept in the event for the others."""
        skip = self.next - first
        if skip >= len(batch) or self.closed:
            return
        if skip <= 0 and event is not None:
            text = event.get(ENCODED)
            if text is None:
                text = event[ENCODED] = await self.encode_json(self.message(first, batch))
            self.next = first + len(batch)
            return await self.send(text_data=text)
        new = batch[max(skip, 0):]
        start = max(first, self.next)
        self.next = start + len(new)
        await self.send_json(self.message(start, new))

    def message(self, first: int, batch: list[str]) -> dict:
        raise NotImplementedError

    async def finish(self):
        if not self.closed:
            await self.send_json({"type": "end", "next": self.next})
            await self.close(code=1000)

    async def lines_start(self, event):
        """A pump started: it publishes from line ``next`` on; the file has what is before."""
        async with self.lock:
            if event["next"] > self.cursor.line:
                await self.catch_up()

    async def lines_batch(self, event):
        self.batch_at = asyncio.get_running_loop().time()
        async with self.lock:
            if event["first"] > self.cursor.line:  # a batch was lost: the file has it
                await self.catch_up()
            if event["first"] <= self.cursor.line < event["first"] + len(event["lines"]):
                await self.deliver(event["first"], event["lines"], event)
                self.cursor = lines.Cursor(event["first"] + len(event["lines"]),
                                           event["offset"])

    async def lines_end(self, event):
        async with self.lock:
            await self.catch_up(ended=True)
            await self.finish()


class LogConsumer(LinesConsumer):
    """``/ws/jobs/<name>/logs/?worker=trainer-0&from=N``"""

    kind = "log"

    def file(self, job, replica):
        return log_file(job, replica)

    def message(self, first, batch):
        return {"type": "lines", "first": first, "next": first + len(batch), "lines": batch}


class MetricsConsumer(LinesConsumer):
    """``/ws/jobs/<name>/metrics/?worker=trainer-0&from=N``: the records the worker reported
    with ``paddlecloud_sdk.report``."""

    kind = "metrics"

    def file(self, job, replica):
        return metrics_file(job, replica)

    def message(self, first, batch):
        return {"type": "metrics", "first": first, "next": first + len(batch),
                "records": metric_records(first, batch)}
