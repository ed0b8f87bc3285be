"""Who holds a job's start: claimed in the database, so that a start no living process holds
is sent again within seconds, and a start a living worker holds runs nowhere else.

A start's message can be lost where the broker cannot see it: between the commit that admits
the job and the send (its process died), or with a worker that took it from the broker and was
killed -9 (on Redis a message a dead worker took comes back only after the transport's
visibility timeout, an hour; a shorter one would hand a long start to a second worker while
the first still runs it). So the job's row says who holds its start (``Job.start_holder``) and
until when (``Job.start_lease_until``, by the database's clock):

- ``send:<process>``: admitted, its message being sent. Taken in the admitting transaction
  (``starts_later``): if its process dies between the commit and the send, the hold runs out;
- ``queued``: its message waits in the broker (a long queue may hold it minutes); after
  ``QUEUED_SECONDS`` it is presumed lost (a broker that lost its data) and sent again;
- ``recv:<process>``: a worker took the message and waits for a free slot to run it
  (``start_received``, as the worker receives it);
- ``run:<process>``: a worker runs it (``start_held``, around the task).

A process renews its ``recv:`` and ``run:`` holds every ``RENEW_SECONDS``, to
``LEASE_SECONDS`` ahead, while it lives; a dead one's run out. Every worker looks for holds run
out every second (``starts_resend``, one indexed query) and sends those starts again, so a
start no living process holds is queued again within ``LEASE_SECONDS`` + 1 s. A start runs only
under a ``run:`` hold, taken from no living runner: never twice at once. A request for a start
that is held (a burst of admissions, the reconciler asking again) sends nothing.

The same discipline as a database-backed queue's claimed executions and process heartbeats
(Solid Queue, Oban): the broker carries the news, the database says who does the work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta

from django.db import DatabaseError, connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, Q, Value
from django.db.models.functions import Now

from kernel.queue import JOB_START, task_now

from .models import Job
from .states import JobState

logger = logging.getLogger(__name__)

LEASE_SECONDS = 3  # how long a process's hold outlives its last renewal
RENEW_SECONDS = 1
QUEUED_SECONDS = 600  # how long a message may wait in the broker before it is presumed lost
QUEUED = "queued"


def _until(seconds: float):
    """``seconds`` from now, by the database's clock (every process compares the same one)."""
    return ExpressionWrapper(Now() + Value(timedelta(seconds=seconds)),
                             output_field=DateTimeField())


_process = {"pid": None, "name": ""}


def _me() -> str:
    """This process, unique among all (a pool's forked children each name themselves)."""
    if _process["pid"] != os.getpid():
        _process.update(pid=os.getpid(),
                        name=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    return _process["name"]


def _expired() -> Q:
    return Q(start_lease_until__lt=Now())


def starts_later(job_ids: list[int]) -> None:
    """Send the starts of these jobs once the current transaction commits, each unless a
    start of it is held already (queued, or a worker takes or runs it). The hold is taken
    now, in the transaction: if this process dies before it sends, the hold runs out and a
    worker sends it."""
    if not job_ids:
        return
    sender = f"send:{_me()}"
    Job.objects.filter(Q(start_holder="") | _expired(), pk__in=job_ids).update(
        start_holder=sender, start_lease_until=_until(LEASE_SECONDS))
    # robust: the change committed whatever becomes of the send (the hold runs out).
    transaction.on_commit(lambda: _send(job_ids, sender), robust=True)


def _send(job_ids: list[int], sender: str) -> None:
    mine = list(Job.objects.filter(pk__in=job_ids, start_holder=sender)
                .values_list("pk", flat=True))
    sent = []
    for job_id in mine:
        try:
            task_now(JOB_START, job_id)
        except Exception:  # the broker is down: the hold runs out, and a worker sends it
            logger.warning("could not queue the start of job %s", job_id, exc_info=True)
            break
        sent.append(job_id)
    # Unless a worker took it meanwhile.
    Job.objects.filter(pk__in=sent, start_holder=sender).update(
        start_holder=QUEUED, start_lease_until=_until(QUEUED_SECONDS))


def starts_lost() -> list[int]:
    """The starting jobs whose start no living process holds any more (its hold ran out)."""
    return list(Job.objects.filter(_expired(), state=JobState.STARTING)
                .exclude(start_holder="").values_list("pk", flat=True))


def starts_resend() -> int:
    """Send again every start whose holder is gone (every worker, every second). Returns how
    many were sent."""
    lost = starts_lost()
    if not lost:
        return 0
    sender = f"send:{_me()}"
    # Only those still run out: another worker may have sent one meanwhile.
    taken = Job.objects.filter(_expired(), pk__in=lost).exclude(start_holder="").update(
        start_holder=sender, start_lease_until=_until(LEASE_SECONDS))
    if taken:
        logger.warning("sending again the starts of %d jobs whose holder is gone", taken)
        _send(lost, sender)
    return taken


def _live(prefix: str) -> Q:
    return Q(start_holder__startswith=prefix) & Q(start_lease_until__gte=Now())


def start_received(job_id: int, waiting: Callable[[], bool]) -> None:
    """A worker took a start's message from the broker: it holds the start (from the sender
    or the queue) while ``waiting()`` says the message waits in it to run, unless a living
    worker holds it already (this message is then a copy, which finds it held when it
    runs)."""
    holder = f"recv:{_me()}"
    try:
        taken = Job.objects.filter(pk=job_id).exclude(_live("recv:") | _live("run:")).update(
            start_holder=holder, start_lease_until=_until(LEASE_SECONDS))
    except DatabaseError:  # the database is away: the message runs, or is delivered again
        logger.warning("could not hold the start of job %s", job_id, exc_info=True)
        connection.close()  # (the consumer's thread keeps its connection otherwise)
        return
    if taken:
        _renewer.keep(job_id, waiting)


@contextlib.contextmanager
def start_held(job_id: int):
    """``with start_held(job_id) as held:``: the start of the job held by this process while
    the block runs it (``held`` is True), or, when another living process runs it, False;
    released after."""
    holder = f"run:{_me()}"
    held = bool(Job.objects.filter(pk=job_id).exclude(_live("run:")).update(
        start_holder=holder, start_lease_until=_until(LEASE_SECONDS)))
    if held:
        _renewer.keep()
    try:
        yield held
    finally:
        if held:
            Job.objects.filter(pk=job_id, start_holder=holder).update(
                start_holder="", start_lease_until=None)


class _Renewer:
    """The thread of a process that renews its holds while it has any, then ends (closing its
    database connection). A ``run:`` hold is renewed until its run releases it; a ``recv:``
    one while its message waits in the worker (a message the worker dropped, its connection
    to the broker lost, is not held). ``stop`` ends it at once (a worker stopping)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.asked = False  # a hold was taken since the thread last looked
        self.received: dict[int, Callable[[], bool]] = {}

    def keep(self, received: int | None = None, waiting: Callable[[], bool] | None = None):
        with self.lock:
            self.asked = True
            if received is not None:
                self.received[received] = waiting
            if self.thread is None or not self.thread.is_alive():
                self.stopping = threading.Event()  # the stopped thread keeps the old one
                self.thread = threading.Thread(target=self._run, args=(self.stopping,),
                                               name="job-start-holds", daemon=True)
                self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """No hold of this process is renewed from now: they run out within
        ``LEASE_SECONDS`` unless one is taken again."""
        with self.lock:
            thread, self.thread = self.thread, None
            self.stopping.set()
            self.received.clear()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _waiting(self) -> list[int]:
        with self.lock:
            for job_id, waiting in list(self.received.items()):
                if not waiting():
                    del self.received[job_id]
            return list(self.received)

    def _run(self, stopping: threading.Event) -> None:
        try:
            while not stopping.wait(RENEW_SECONDS):
                with self.lock:
                    asked, self.asked = self.asked, False
                me = _me()
                try:
                    held = Job.objects.filter(
                        Q(start_holder=f"run:{me}")
                        | Q(start_holder=f"recv:{me}", pk__in=self._waiting())).update(
                        start_lease_until=_until(LEASE_SECONDS))
                except DatabaseError:
                    logger.warning("could not renew this process's job start holds",
                                   exc_info=True)
                    connection.close()
                    held = 1  # try again
                if not held and not asked:
                    with self.lock:
                        if not self.asked and self.thread is threading.current_thread():
                            self.thread = None  # none taken since: done
                            return
        finally:
            connection.close()


_renewer = _Renewer()


def holds_stop() -> None:
    """This process renews its holds no more (its worker stops): ``_Renewer.stop``."""
    _renewer.stop()
