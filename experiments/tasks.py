"""Celery tasks of the sweeps: each may run twice, on two workers at once (the sweep's row
lock orders them)."""

from __future__ import annotations

from celery import shared_task

from kernel.celery import every_worker
from kernel.queue import SWEEP_ADVANCE, task_claim

from . import services

WATCH_SECONDS = 1.0  # how soon a trial worse than the others is stopped, at most


@shared_task(name=SWEEP_ADVANCE, acks_late=True, ignore_result=True)
def sweep_advance(sweep_id: int) -> None:
    """A trial of the sweep ended: submit the next (``services.sweep_advance``)."""
    task_claim(SWEEP_ADVANCE, sweep_id)
    services.sweep_advance(sweep_id)


@every_worker(WATCH_SECONDS)
def sweeps_watch() -> None:
    """Every worker, every second: running sweeps' trials looked at for early stopping."""
    services.sweeps_watch()
