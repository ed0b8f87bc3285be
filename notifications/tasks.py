"""The outbox's sending: a task queued as notifications are written (they go within a second
or two), and a sweep every couple of seconds in every worker for what that message did not
reach (a worker killed, Redis down as they were written) and for the retries that fell due."""

from __future__ import annotations

from celery import shared_task

from kernel.celery import every_worker

from .delivery import notifications_send as _send
from .watch import notifications_watch

SWEEP_SECONDS = 2.0
WATCH_SECONDS = 30.0


@shared_task(name="notifications.tasks.notifications_send", acks_late=True)
def notifications_send(ids: list[str]) -> None:
    _send(ids)


@every_worker(SWEEP_SECONDS)
def notifications_sweep() -> None:
    _send()


@every_worker(WATCH_SECONDS)
def notifications_watch_due() -> None:
    notifications_watch()
