"""The Celery app: queued work is sent through it (``kernel.queue``) and the workers run it.
Configured from Django settings (the ``CELERY_`` names); ``celery -A paddlecloud`` finds it as
``paddlecloud.celery_app``.

``every_worker(seconds)`` has a function run every ``seconds`` in every worker (the safety
nets that must not depend on beat, one process that may be down)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from celery import Celery, bootsteps
from django import db

from . import metrics

logger = logging.getLogger(__name__)

app = Celery("paddlecloud")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Every task this process runs is timed; a worker started with PADDLECLOUD_METRICS_PORT serves
# its metrics there (kernel.metrics, docs/admin/metrics.md).
metrics.celery_signals_connect()
metrics.worker_signals_connect()

_EVERY_WORKER: list[tuple[float, Callable[[], object]]] = []


def every_worker(seconds: float):
    """Run the decorated function every ``seconds`` in every worker (``celery worker``,
    whatever its pool, and runportal's embedded one), in a thread of its own that starts and
    stops with the worker. What must run once across workers takes a lock itself. Register
    it where the worker imports it (a tasks module)."""
    def register(function: Callable[[], object]):
        _EVERY_WORKER.append((seconds, function))
        return function
    return register


def _loop(seconds: float, function: Callable[[], object], stopping: threading.Event) -> None:
    due = time.monotonic() + seconds
    try:
        while not stopping.wait(max(due - time.monotonic(), 0)):
            due = max(due + seconds, time.monotonic())  # at a fixed rate, however long it took
            try:
                function()
            except Exception:  # a database or Redis outage: the next round tries again
                logger.warning("%s failed", function.__qualname__, exc_info=True)
                db.connection.close()  # (kept between rounds otherwise: not one a second)
    finally:
        db.connection.close()


class EveryWorker(bootsteps.StartStopStep):
    """The part of a worker that runs ``every_worker``'s functions (in the main process of a
    pool of processes: after the pool forked, so its children inherit no connection)."""

    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, parent) -> None:
        self.stopping.clear()
        self.threads = [threading.Thread(target=_loop, args=(seconds, function, self.stopping),
                                         name=f"every-worker {function.__name__}", daemon=True)
                        for seconds, function in _EVERY_WORKER]
        for thread in self.threads:
            thread.start()

    def stop(self, parent) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)

    terminate = stop


app.steps["worker"].add(EveryWorker)
