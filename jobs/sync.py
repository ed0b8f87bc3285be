"""When a running job is looked at: when something of its replicas changed, when time alone
changes what becomes of it, and by the reconciler as a safety net. Nothing polls a job that
did not change.

- **Changes.** Each backend has a change feed (the Kubernetes pod watch, the local backend's
  runner exits): it announces the job (``signals.replicas_changed``), and ``job_sync_soon``
  queues one ``job_sync`` task for it, debounced: announcements until that task starts (the
  pods of one job changing together) are one sync. The task lets go of the debounce first, so
  a change while it runs queues the next.
- **Time.** After each sync, a job with a deadline, a start timeout or an elastic job short
  of trainers is synced again at that moment (``engine.job_due``): one task per moment.
- **One at a time.** A job's syncs never overlap (``job_sync_one_at_a_time``): one asked
  for while another runs is run by that one, again, once it ends.
- **The safety net.** The reconciler (``jobs_stale``) looks at every running replica of a
  datacenter at once (one list of its pods, one query) and syncs only the jobs whose replicas
  are not what the database says, those due, and the elastic jobs holding trainers not yet
  started: what a lost announcement, a worker that died mid-sync or a portal that was down
  missed.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from django.core.cache import cache
from django.utils import timezone

from accounts.models import Datacenter
from kernel.queue import JOB_SYNC, task_claim, task_later, task_now_once
from paddlecloud_core.contract import trainers_elastic
from paddlecloud_core.processes import process_gone, process_identity

from . import engine
from .backends import backend_for
from .backends.base import BackendError
from .models import Job, Replica
from .states import JobState, ReplicaState

logger = logging.getLogger(__name__)

SYNC_DEBOUNCE = 0.1  # seconds an announcement waits for the others of the same change
# How long a sync may keep others of its job waiting: only if its worker died mid-sync on
# another machine (one on this machine that died is seen at once: ``_sync_taken_over``).
SYNC_LEASE_SECONDS = 120
RUNNING = (JobState.STARTING, JobState.RUNNING)  # jobs whose replicas may run
LIVE = (ReplicaState.STARTING, ReplicaState.RUNNING)  # replicas that may run


def job_sync_soon(job_uid: str) -> None:
    """Sync the job in a moment, once for however many announcements until then (should
    the task be lost, announcements queue another after ``queue.ONCE_SECONDS``)."""
    task_now_once(JOB_SYNC, job_uid, countdown=SYNC_DEBOUNCE)


def sync_begins(job_uid: str) -> None:
    """A sync of the job starts: what is announced from now on needs another."""
    task_claim(JOB_SYNC, job_uid)


def job_sync_one_at_a_time(job_id: int) -> bool | None:
    """``engine.job_sync``, never beside another sync of the same job (in any worker): a
    sync asked for while one runs is left to that one, which runs once more when it is done
    (two at once would both act on what they saw: a trainer's end, restarted twice). Returns
    what the last sync here returned (True while the job runs), None when left to another."""
    again, running = f"jobs:sync-again:{job_id}", _syncing(job_id)
    cache.set(again, 1, SYNC_LEASE_SECONDS)  # first: a sync ending now sees it
    result = None
    while cache.add(running, process_identity(), SYNC_LEASE_SECONDS) or _sync_taken_over(
            running):
        try:
            cache.delete(again)
            result = engine.job_sync(job_id)
        finally:
            cache.delete(running)
        if not result or not cache.get(again):
            break
    return result


def job_in_turn(job_id: int, action: Callable[[], None], wait: float = 30.0) -> bool:
    """Run ``action`` where no sync of the job runs (in its turn, as a sync would: waited for
    ``wait`` seconds at most), so that what it does to the job's replicas (stopping them to
    requeue it) is not also acted on by a sync that saw them end. The syncs asked for meanwhile
    are left to it and find what it left. False when its turn did not come in time (the
    caller tries again later)."""
    running = _syncing(job_id)
    deadline = time.monotonic() + wait
    while not (cache.add(running, process_identity(), SYNC_LEASE_SECONDS)
               or _sync_taken_over(running)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    try:
        action()
    finally:
        cache.delete(running)
    return True


def _syncing(job_id: int) -> str:
    return f"jobs:syncing:{job_id}"


def _sync_taken_over(running: str) -> bool:
    """Whether this process takes the sync of a job from one that died holding it (killed
    mid-sync, on this machine: it can tell), rather than wait out its lease. Once per dead
    holder, whoever asks first."""
    holder = cache.get(running)
    if not isinstance(holder, str) or not process_gone(holder):
        return False
    if not cache.add(f"{running}:dead:{holder}", 1, SYNC_LEASE_SECONDS):
        return False  # another took it over
    cache.set(running, process_identity(), SYNC_LEASE_SECONDS)
    return True


def replicas_changed_sync(sender, job_uid: str, **kwargs) -> None:
    """``signals.replicas_changed``: sync the job."""
    job_sync_soon(job_uid)


def job_sync_when_due(job) -> None:
    """Sync the job again when time alone changes what becomes of it (``engine.job_due``),
    once per moment however many syncs ask."""
    due = engine.job_due(job)
    if due is None:
        return
    wait = max((due - timezone.now()).total_seconds(), 0) + SYNC_DEBOUNCE
    if cache.add(f"jobs:due:{job.uid}:{due.timestamp()}", 1, wait + SYNC_LEASE_SECONDS):
        task_later(JOB_SYNC, str(job.uid), countdown=wait)


def feeds_start() -> None:
    """Start the change feed of every datacenter in this process (where it is not running:
    a datacenter added since, a feed that stopped)."""
    for datacenter in Datacenter.objects.all():
        try:
            backend_for(datacenter).changes_watch(datacenter)
        except BackendError as exc:  # a cluster not reachable: its reconciler says so
            logger.warning("datacenter %s: its changes cannot be watched: %s",
                           datacenter.name, exc)


def jobs_stale() -> list[int]:
    """The running jobs a sync would change (the reconciler syncs them), found with one look
    at each datacenter's replicas and a fixed number of queries, however many jobs run."""
    now = timezone.now()
    replicas = defaultdict(list)
    for replica in (Replica.objects.filter(job__state__in=RUNNING, state__in=LIVE)
                    .select_related("job", "job__datacenter")):
        replicas[replica.job.datacenter_id].append(replica)
    stale = set()
    for group in replicas.values():
        datacenter = group[0].job.datacenter
        try:
            seen = backend_for(datacenter).observe_all(datacenter, group)
        except BackendError as exc:
            logger.warning("datacenter %s: its replicas cannot be seen: %s",
                           datacenter.name, exc)
            continue
        stale.update(r.job_id for r in group if engine.replica_outdated(r, seen.get(r.pk)))
    trainers = Counter(r.job_id for group in replicas.values() for r in group
                       if r.role == Replica.Role.TRAINER)
    short = set()
    for job in Job.objects.filter(state__in=RUNNING).select_related("datacenter"):
        due = engine.job_due(job)
        if due is not None and due < now:
            stale.add(job.pk)
        elif trainers_elastic(job) and job.trainers_held > trainers[job.pk]:
            short.add(job.pk)
    # Those holding trainers they have not started (admission gave them more), unless one
    # has finished: then it takes no more.
    finished = Replica.objects.filter(job_id__in=short, role=Replica.Role.TRAINER,
                                      state=ReplicaState.SUCCEEDED).values_list("job_id")
    stale.update(short - {job_id for job_id, in finished})
    return sorted(stale)
