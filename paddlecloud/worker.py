"""The Celery worker and beat scheduler run inside the portal's process (embedded default).

``manage.py runportal`` starts them beside the ASGI server, so one command serves everything
on one machine. In production, run ``celery -A paddlecloud worker`` and ``celery -A
paddlecloud beat`` as their own processes instead (see docker-compose.yml) and start the portal
with ``--no-worker``.
"""

from __future__ import annotations

import logging
import socket
import threading

from celery import signals
from celery.beat import EmbeddedService
from celery.result import _set_task_join_will_block
from celery.worker import WorkController
from celery.worker import state as worker_state
from django.conf import settings
from django.db import connections

from kernel.celery import app

logger = logging.getLogger(__name__)


class _ReadyWorkController(WorkController):
    """A WorkController that says when its consumer is ready to take tasks, and tells the
    receivers of ``worker_ready`` as ``celery worker`` does."""

    def __init__(self, *args, ready: threading.Event, **kwargs):
        self._ready = ready
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer):
        try:
            signals.worker_ready.send(sender=consumer)  # what a worker does as it starts
        finally:
            connections.close_all()  # this thread's, which its receivers opened: not kept
        self._ready.set()


class EmbeddedWorker:
    def __init__(self, *, concurrency: int = 2, beat: bool = True):
        self.concurrency = concurrency
        self.beat_enabled = beat
        self.ready = threading.Event()
        self._controller: WorkController | None = None
        self._thread: threading.Thread | None = None
        self._beat = None

    def start(self, timeout: float = 30.0) -> None:
        app.finalize()
        app.set_current()
        app.set_default()
        self._controller = _ReadyWorkController(
            app=app,
            hostname=f"embedded@{socket.gethostname()}",
            pool="threads",
            concurrency=self.concurrency,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            ready=self.ready,
        )
        self._thread = threading.Thread(target=self._controller.start, name="celery-worker",
                                        daemon=True)
        self._thread.start()
        if not self.ready.wait(timeout):
            raise RuntimeError(f"the embedded Celery worker did not start in {timeout:.0f}s")
        # Starting a worker marks the whole process as "inside a task", which forbids waiting
        # on results; the web threads beside it are not tasks (celery's own embedded test
        # worker does the same).
        _set_task_join_will_block(False)
        if self.beat_enabled:
            self._beat = EmbeddedService(
                app, thread=True, schedule_filename=settings.CELERY_BEAT_SCHEDULE_FILENAME
            )
            self._beat.start()
        logger.info("embedded worker ready (concurrency %d, beat %s, broker %s)",
                    self.concurrency, "on" if self._beat else "off",
                    app.connection().as_uri())

    def stop(self, timeout: float = 30.0) -> None:
        """Stop it warm, as ``celery worker`` stops on SIGTERM: its own thread leaves its loop
        at the loop's next turn (within a second), lets the tasks running end and closes its
        connection to the broker. (Stopping it from this thread would close that connection
        under the loop reading it: kombu's Redis channel then waits for ever for a reply the
        loop had taken.)"""
        if self._beat is not None:
            self._beat.stop()
        if self._thread is None:
            return
        worker_state.should_stop = 0  # what the loop looks at each turn: exit code 0
        try:
            self._thread.join(timeout)
        finally:
            worker_state.should_stop = None
        if self._thread.is_alive():
            logger.warning("the embedded worker did not stop in %.0fs", timeout)
