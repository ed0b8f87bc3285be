"""Telling the dashboards that a job changed: its owner's job list and the job's own page; and
showing a notification on the owner's job lists.

The message carries ids only; each consumer reads what it shows from the database, so a
message that is late, doubled or dropped never shows anything stale for long. Sent once the
transaction that made the change commits, from wherever the change is made (API views, Celery
tasks); a channel layer that is down never fails the change itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from .models import Job

log = logging.getLogger(__name__)


def jobs_group(owner_id: int, datacenter_id: int) -> str:
    """The group of everyone watching the owner's job list in a datacenter."""
    return f"jobs.{owner_id}.{datacenter_id}"


def job_group(job_id: int) -> str:
    """The group of everyone watching one job's page."""
    return f"job.{job_id}"


def job_changed(job_id: int) -> None:
    """The job's state, reason, workers or events changed (or it was created)."""
    _after_commit([{"type": "job.changed", "job_id": job_id}])


def jobs_changed(owner_id: int, datacenter_id: int, job_ids: list[int]) -> None:
    """Several jobs of one owner changed together (admission moved their queue): sent in one
    go, with no look-up per job."""
    if job_ids:
        _after_commit([{"type": "job.changed", "job_id": job_id} for job_id in job_ids],
                      (owner_id, datacenter_id))


def notification_shown(owner_id: int, datacenter_id: int, notification_id: str,
                       text: str) -> None:
    """A notification of the owner's dashboard subscription, to their open job lists, at once
    (the worker delivering it calls this; the notifications page lists it too, so a channel
    layer that is down loses nothing)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "notification.shown", "id": notification_id, "text": text}

    async def send():
        await layer.group_send(jobs_group(owner_id, datacenter_id), message)

    try:
        _run_async(send)
    except Exception:
        log.warning("could not show notification %s on the dashboards", notification_id,
                    exc_info=True)


def job_deleted(job) -> None:
    _after_commit([{"type": "job.deleted", "job_id": job.pk, "name": job.name}],
                  (job.owner_id, job.datacenter_id))


_pending = threading.local()  # this thread's messages waiting for their transaction's commit


def _after_commit(messages: list[dict], owner: tuple[int, int] | None = None) -> None:
    """Send ``messages`` (to the owner's job list and each job's page) once the transaction
    commits. All a transaction asks for go together, in one go to the channel layer, each
    message to each group once: admission moving a queue, or a job's state and its replicas
    changing together, costs one send rather than one per change."""
    if not hasattr(_pending, "batch"):
        _pending.batch = []
    _pending.batch.append((messages, owner))

    def send():
        # The first of the transaction's hooks sends what all of them asked for; the others
        # find nothing left. (What a rolled-back savepoint asked for goes too: a message is
        # only a hint to read the job again.)
        batch, _pending.batch = _pending.batch, []
        layer = get_channel_layer()
        if layer is None or not batch:
            return
        sends: dict[tuple[str, str], dict] = {}
        for messages, owner in batch:
            where = owner or Job.objects.filter(pk=messages[0]["job_id"]).values_list(
                "owner_id", "datacenter_id").first()
            if where is None:
                continue
            for message in messages:
                for group in (jobs_group(*where), job_group(message["job_id"])):
                    sends[(group, json.dumps(message, sort_keys=True))] = message

        async def send_all():
            for (group, _), message in sends.items():
                await layer.group_send(group, message)

        try:
            _run_async(send_all)
        except Exception:  # the dashboards catch up when they reconnect; the job goes on
            log.warning("could not tell the dashboards about job %s", ", ".join(
                sorted({str(m["job_id"]) for m in sends.values()})), exc_info=True)

    transaction.on_commit(send)


def _run_async(function) -> None:
    """Run a coroutine function to its end from sync code: here, or, if this thread runs an
    event loop of its own (which ``async_to_sync`` refuses), in a short-lived thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return async_to_sync(function)()
    failure = []

    def run():
        try:
            async_to_sync(function)()
        except Exception as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="dashboard-notify")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
