"""Queueing work for the Celery workers once a transaction commits: the one module that does.

Services, admission and the signal receivers ask for work — start these jobs, admit that
queue, stop a deleted job's replicas, sync a pull secret — from below the layer of the tasks
that do it, so they cannot import those tasks. They name them instead (``TASKS``), and the
work is sent when the transaction that asked for it commits: a worker never looks for a row
that is not there yet, and a rolled-back request queues nothing.

    task_later(JOB_STOP, job.pk)
    task_later_once(JOBS_ADMIT, owner_id, datacenter_id)  # once while one waits to run
    task_now_once(JOB_SYNC, job_uid, countdown=0.1)  # from a thread without the database
    task_later_for(JOBS_ADMIT, datacenter_id, owner_id)  # one task for a datacenter's owners
"""

from __future__ import annotations

import logging
import threading

from django.core.cache import cache
from django.db import transaction

from .celery import app
from .errors import outage

log = logging.getLogger(__name__)

# Every task queued from below the tasks' layer, by its registered name.
JOB_START = "jobs.tasks.job_start"
JOB_STOP = "jobs.tasks.job_stop"
JOBS_ADMIT = "jobs.tasks.jobs_admit"
JOB_REMAINS_REMOVE = "jobs.tasks.job_remains_remove"
JOB_SYNC = "jobs.tasks.job_sync"
JOB_BUILD = "jobs.tasks.job_build"
BUILD_RUN = "jobs.tasks.build_run"
HOME_MEASURE = "jobs.tasks.home_measure"
JOB_METRICS_KEEP = "jobs.tasks.job_metrics_keep"
PULL_SECRET_SYNC = "registries.tasks.pull_secret_sync"  # noqa: S105 - a task's name
PULL_SECRET_REMOVE = "registries.tasks.pull_secret_remove"  # noqa: S105
NOTIFICATIONS_SEND = "notifications.tasks.notifications_send"
SWEEP_ADVANCE = "experiments.tasks.sweep_advance"
TASKS = frozenset({JOB_START, JOB_SYNC, JOB_STOP, JOBS_ADMIT, JOB_REMAINS_REMOVE, JOB_BUILD,
                   BUILD_RUN, HOME_MEASURE, JOB_METRICS_KEEP, PULL_SECRET_SYNC, PULL_SECRET_REMOVE,
                   NOTIFICATIONS_SEND, SWEEP_ADVANCE})
ONCE_SECONDS = 30  # how long a task queued by task_later_once stands for later requests
MEMBERS_SECONDS = 86_400  # how long what a task_later_for task is asked for waits unclaimed


def task_later(name: str, *args, countdown: float | None = None) -> None:
    """Queue task ``name`` with ``args`` when the current transaction commits (at once
    outside one), to run no sooner than ``countdown`` seconds after."""
    _check(name)
    _after_commit(name, args, lambda: _send(name, args, countdown))


def task_later_once(name: str, *args) -> None:
    """As ``task_later``, unless the same task with the same ``args`` is queued already and
    has not begun (``task_claim``): that one will see this transaction's changes too, so a
    burst of requests (a user's jobs ending one after another) runs it once rather than once
    each. The mark that one is queued expires after ONCE_SECONDS, should its message be lost
    (the reconciler catches up then). (A job's start is held in the database instead:
    ``jobs.starts``.)"""
    _check(name)
    _after_commit(name, args, lambda: _send_once(name, args))


def task_now_once(name: str, *args, countdown: float | None = None) -> None:
    """As ``task_later_once``, at once and without the database, as ``task_now``."""
    _check(name)
    _send_once(name, args, countdown)


def _after_commit(name: str, args: tuple, send) -> None:
    """``send`` once the transaction commits. Redis down does not fail the request whose change
    committed: the work is not queued, and the reconciler, which finds what it was for (a job
    whose start is due, a queue to admit), queues it again when Redis is back."""

    def run():
        try:
            send()
        except Exception as exc:
            if outage(exc) is None:
                raise
            log.warning("%s%s not queued (the reconciler will): %s", name, args, exc)

    transaction.on_commit(run)


def task_later_for(name: str, key, member) -> None:
    """Queue task ``name`` with ``(member, key)`` (``member`` an id) when the current
    transaction commits, unless one with the same ``key`` is queued already and has not begun:
    the task, once it runs, claims every member asked for with ``key`` since it was queued
    (``task_claim_members``) and works on them together. So requests for many members (each
    user whose job ended in a datacenter) that come while one such task waits cost one task,
    not one each. The mark that one is queued expires after ONCE_SECONDS, as
    ``task_later_once``'s."""
    _check(name)
    _after_commit(name, (key, member), lambda: _send_for(name, key, member))


def task_claim_members(name: str, key) -> set[int]:
    """Said by a task queued by ``task_later_for(name, key, …)`` before it reads what it works
    on: the members asked for until now, taken (requests from now on queue it again)."""
    task_claim(name, "for", key)
    return _members_take(_once_key(name, ("for", key)) + ":members")


def task_claim(name: str, *args) -> None:
    """Said by task ``name`` run with ``args`` before it reads what it works on: requests made
    from now on (``task_later_once``) queue it again, as it may not see their changes."""
    cache.delete(_once_key(name, args))


def _check(name: str) -> None:
    if name not in TASKS:
        raise ValueError(f"{name!r} is not a task queued through kernel.queue")


def _once_key(name: str, args: tuple) -> str:
    return f"queue:once:{name}:{':'.join(map(str, args))}"


def task_now(name: str, *args, countdown: float | None = None) -> None:
    """Queue task ``name`` with ``args`` at once, to run no sooner than ``countdown`` seconds
    after: for a caller outside any transaction that must not touch the database at all (a
    backend's change feed, in a thread of its own: ``task_later`` would open it a
    connection)."""
    _check(name)
    _send(name, args, countdown)


# Where the cache is not Redis (a development portal without it: one process), the members wait
# in this process.
_local_members: dict[str, set] = {}
_local_lock = threading.Lock()


def _redis():
    """The cache's Redis client, or None (another cache)."""
    client = getattr(cache, "_cache", None)
    get_client = getattr(client, "get_client", None)
    return get_client(None, write=True) if get_client else None


def _members_add(key: str, member) -> None:
    redis = _redis()
    if redis is None:
        with _local_lock:
            _local_members.setdefault(key, set()).add(int(member))
        return
    key = cache.make_and_validate_key(key)
    with redis.pipeline(transaction=False) as pipe:
        pipe.sadd(key, int(member))
        pipe.expire(key, MEMBERS_SECONDS)
        pipe.execute()


def _members_take(key: str) -> set[int]:
    redis = _redis()
    if redis is None:
        with _local_lock:
            return _local_members.pop(key, set())
    key = cache.make_and_validate_key(key)
    with redis.pipeline(transaction=True) as pipe:  # read and emptied at once
        pipe.smembers(key)
        pipe.delete(key)
        members, _ = pipe.execute()
    return {int(member) for member in members}


def _send_for(name: str, key, member) -> None:
    # The member first: a task that claims after this sees it, and one that claimed before
    # has let the next request (this one) queue the task again.
    once = _once_key(name, ("for", key))
    _members_add(once + ":members", member)
    if cache.add(once, 1, ONCE_SECONDS):
        _send(name, (member, key))


def _send_once(name: str, args: tuple, countdown: float | None = None) -> None:
    if cache.add(_once_key(name, args), 1, ONCE_SECONDS):
        _send(name, args, countdown)


def _send(name: str, args: tuple, countdown: float | None = None) -> None:
    # Nobody waits for queued work's result: without ignore_result, the Redis result backend
    # subscribes the sender to each task's result channel and the worker stores every result.
    app.send_task(name, args=args, countdown=countdown, ignore_result=True)
