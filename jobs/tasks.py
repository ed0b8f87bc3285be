"""Celery tasks: each takes a job id, acknowledges late and may safely run twice."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from datetime import timedelta

from celery import shared_task
from celery.signals import worker_ready
from django.core.cache import cache
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import (
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    IntegerField,
    Q,
    Value,
)
from django.db.models.functions import Cast
from django.utils import timezone

from accounts.models import Datacenter
from kernel.queue import JOB_START, task_claim, task_later_once
from scheduling.admission import quota_admit, waiting_queues
from scheduling.budgets import budget_overruns
from scheduling.capacity import capacity_refresh

from . import engine, sync
from .backends import backend_for
from .backends.base import BackendError
from .backends.local import LOCAL
from .backends.local.backend import isolation_notice, worker_start
from .builds import runs
from .models import Job, JobEvent
from .notify import job_changed
from .services import job_remove
from .states import FINAL_JOB_STATES, LIVE_REPLICA_STATES, JobState, ReplicaState

logger = logging.getLogger(__name__)

LOST_START_AFTER = timedelta(seconds=30)
RECONCILE_LEASE = "jobs:reconcile:lease"
RECONCILE_LEASE_SECONDS = 120  # renewed while a run works; how long a dead run blocks others


@shared_task(name="jobs.tasks.job_start", acks_late=True)
def job_start(job_id: int) -> None:
    task_claim(JOB_START, job_id)  # a start found stalled from now on is asked for again
    uid = Job.objects.filter(pk=job_id).values_list("uid", flat=True).first()
    if uid is None:
        return
    engine.job_launch(job_id)
    sync.job_sync_soon(str(uid))  # what it started: running, or refused, now


@shared_task(name="jobs.tasks.job_sync", acks_late=True, ignore_result=True)
def job_sync(job_uid: str) -> None:
    """Look at a job whose replicas changed (``sync``), or that is due."""
    sync.sync_begins(job_uid)
    job_id = Job.objects.filter(uid=job_uid).values_list("pk", flat=True).first()
    if job_id is None:
        return  # deleted
    if sync.job_sync_one_at_a_time(job_id):
        sync.job_sync_when_due(Job.objects.select_related("datacenter").get(pk=job_id))


# A build takes minutes: acknowledged as it starts, so that a broker's redelivery never runs
# a second builder beside it (a build whose worker died is taken over:
# builds.runs.BUILD_LOST_AFTER).
@shared_task(name="jobs.tasks.job_build")
def job_build(job_id: int) -> None:
    """A ``building`` job: its runtime image found in the registry, waited for, or built."""
    with contextlib.suppress(ObjectDoesNotExist):
        runs.job_build(job_id)


@shared_task(name="jobs.tasks.build_run")
def build_run(build_id: int) -> None:
    """A build asked for by ``paddlectl build``."""
    with contextlib.suppress(ObjectDoesNotExist):
        runs.build_run(build_id)


@shared_task(name="jobs.tasks.job_stop", acks_late=True)
def job_stop(job_id: int) -> None:
    try:
        engine.job_halt(job_id)
    except ObjectDoesNotExist:  # deleted meanwhile: its removal stops the replicas
        logger.info("job %s was deleted while being stopped", job_id)


@shared_task(name="jobs.tasks.job_remains_remove", acks_late=True)
def job_remains_remove(remains: dict) -> None:
    """Stop what still runs of a deleted job and remove what its backend keeps for it
    (queued by ``services.job_remove``; ``remains`` is ``engine.job_remains``)."""
    engine.job_remains_remove(remains)


class Lease:
    """A lease in the cache (Redis; in-process on the embedded default): one holder at a time,
    renewed while it works, released at the end, and expiring by itself if its holder dies."""

    def __init__(self, key: str, seconds: float):
        self.key, self.seconds, self.token = key, seconds, uuid.uuid4().hex
        self.renewed = 0.0

    def take(self) -> bool:
        self.renewed = time.monotonic()
        return cache.add(self.key, self.token, self.seconds)

    def renew(self) -> None:
        """Keep it, at most a few times per lease (a run that lost it goes on: at worst two
        runs overlap once, and every step of a run may run twice)."""
        if time.monotonic() - self.renewed >= self.seconds / 4:
            self.renewed = time.monotonic()
            if cache.get(self.key) == self.token:
                cache.touch(self.key, self.seconds)

    def release(self) -> None:
        if cache.get(self.key) == self.token:  # not another's, taken after ours ran out
            cache.delete(self.key)


@shared_task(name="jobs.tasks.jobs_reconcile")
def jobs_reconcile() -> dict[str, int] | None:
    """Bring the database and the processes back in line (celery beat, every 15 s): admit
    jobs the quota has room for, start jobs whose start was lost, sync the running jobs whose
    replicas are not what the database says or that are due (``sync.jobs_stale``: what a lost
    announcement missed, replicas that vanished while the portal was down), stop what is left
    of ended jobs, delete ended jobs past their TTL, ask each cluster its version again (and,
    where the capacity comes from it, what its nodes offer: ``capacity``) and start its
    change feed where it is not running. Returns None, doing nothing, while another
    run holds the lease.

    Beat queues a run every 15 s whether or not the last one has finished. Without the lease
    a slow run (a long queue, a slow API server) and the ones queued behind it would take
    every worker slot, and everyone's starts, watches and admissions would wait behind them.
    With it, runs never overlap and a run that finds the lease held returns at once, so
    reconciling takes at most one slot; the lease expires if its worker dies, so the next
    run after that takes over."""
    lease = Lease(RECONCILE_LEASE, RECONCILE_LEASE_SECONDS)
    if not lease.take():
        return None
    try:
        return _reconcile(lease)
    finally:
        lease.release()


def _budgets_enforce(now) -> int:
    """Running jobs whose owner's (or group's) budget is spent: warned once (an event, and a
    notice on the job's page), then, where the datacenter says so, stopped after its grace
    period — unless the budget was raised (or its window moved on) meanwhile. Returns how
    many were warned or stopped."""
    acted = 0
    for job, datacenter, why in budget_overruns():
        finish = datacenter.budget_spent == Datacenter.BudgetSpent.FINISH
        grace = datacenter.budget_grace_seconds
        if job.budget_warned_at is None:
            then = ("it may finish" if finish else
                    f"it is stopped in {grace} s unless the budget is raised")
            JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state,
                                    time=now, reason=f"{why}; {then}")
            Job.objects.filter(pk=job.pk).update(budget_warned_at=now)
            job_changed(job.pk)
            acted += 1
        elif not finish and now >= job.budget_warned_at + timedelta(seconds=grace):
            engine.job_fail(job, f"stopped: {why}")
            acted += 1
    return acted


def _reconcile(lease: Lease) -> dict[str, int]:
    counts = {"admitted": 0, "restarted": 0, "synced": 0, "expired": 0, "orphans": 0,
              "unfit": 0, "capacity": 0, "budget": 0}
    now = timezone.now()
    # A cluster upgraded (or rolled back) since: asked again, so jobs started there meet
    # what it is now; one it cannot run on is logged here and fails the jobs that try.
    # One that can is asked what its nodes offer, where that is the datacenter's capacity
    # (before the admissions below, which then count with it).
    sync.feeds_start()
    for datacenter in Datacenter.objects.all():
        try:
            backend_for(datacenter).datacenter_check(datacenter)
        except BackendError as exc:
            logger.error("datacenter %s cannot run jobs: %s", datacenter.name, exc)
            counts["unfit"] += 1
        else:
            if datacenter.capacity_from_cluster:
                counts["capacity"] += capacity_refresh(datacenter)
    counts["budget"] = _budgets_enforce(now)
    # Admission happens when jobs are submitted and end; this catches what a crash missed.
    # One call per queue, each a fixed number of queries however long its queue.
    for owner_id, datacenter_id in waiting_queues():
        counts["admitted"] += len(quota_admit(owner_id, datacenter_id))
        lease.renew()
    # A start that was lost, or died half way (replicas still pending under a starting job;
    # an elastic job's trainers may wait pending for room: its watch starts them).
    stalled = Job.objects.filter(
        Q(replicas__role="pserver") | Q(trainers_min__isnull=True), state=JobState.STARTING,
        replicas__state=ReplicaState.PENDING, updated_at__lt=now - LOST_START_AFTER).distinct()
    for job_id in stalled.values_list("pk", flat=True):
        task_later_once(JOB_START, job_id)  # not while one waits in the broker's queue
        counts["restarted"] += 1
    # Jobs are synced as their replicas change; these are those a change missed.
    for job_id in sync.jobs_stale():
        sync.job_sync_one_at_a_time(job_id)
        counts["synced"] += 1
        lease.renew()
    ended_live = (Job.objects.filter(state__in=FINAL_JOB_STATES)
                  .filter(replicas__state__in=LIVE_REPLICA_STATES).distinct())
    for job_id in ended_live.values_list("pk", flat=True):
        engine.job_halt(job_id)
    on_backend: dict = {}
    for datacenter in Datacenter.objects.all():
        on_backend.setdefault(backend_for(datacenter), []).append(datacenter)
    for backend, datacenters in on_backend.items():
        counts["orphans"] += backend.orphans_stop(datacenters, jobs_known,
                                                  engine.STOP_GRACE_SECONDS)
    for job in Job.objects.filter(state__in=FINAL_JOB_STATES,
                                  ttl_seconds_after_finished__isnull=False,
                                  finished_at__lt=_ttl_cutoff(now)
                                  ).select_related("datacenter", "owner"):
        job_remove(job, reason="ttl", ttl_seconds_after_finished=job.ttl_seconds_after_finished)
        counts["expired"] += 1
    return counts


def jobs_known(uids: set[str]) -> set[str]:
    """Which of these job uids the database knows (one query, for what a backend found)."""
    return {str(uid) for uid in _jobs_of(uids).values_list("uid", flat=True)}


def jobs_live(uids: set[str]) -> set[str]:
    """Which of these job uids are of jobs that may still run (known, not ended)."""
    return {str(uid) for uid in _jobs_of(uids).exclude(state__in=FINAL_JOB_STATES)
            .values_list("uid", flat=True)}


def _jobs_of(uids: set[str]):
    valid = set()
    for uid in uids:
        with contextlib.suppress(ValueError):
            valid.add(uuid.UUID(uid))
    return Job.objects.filter(uid__in=valid)


def _ttl_cutoff(now):
    """``now`` minus each job's TTL, in SQL: a job that ended before it is past its TTL (the
    database picks those out, rather than every ended job being looked at here)."""
    ttl = ExpressionWrapper(Cast("ttl_seconds_after_finished", IntegerField())
                            * Value(timedelta(seconds=1)), output_field=DurationField())
    return ExpressionWrapper(Value(now) - ttl, output_field=DateTimeField())


@worker_ready.connect
def feeds_start(**kwargs) -> None:
    """A worker follows what becomes of the replicas of every datacenter from the start."""
    sync.feeds_start()


@worker_ready.connect
def local_leftovers(**kwargs) -> None:
    """A worker that starts follows the local runners nobody follows (their workers died)
    and releases the networks no living job holds (``local.backend.worker_start``)."""
    if Datacenter.objects.filter(backend=LOCAL.name).exists():
        worker_start(jobs_live, engine.STOP_GRACE_SECONDS)


@worker_ready.connect
def isolation_say(**kwargs) -> None:
    """A worker that starts says whether the local backend's jobs are sandboxed."""
    if Datacenter.objects.filter(backend=LOCAL.name).exists():
        isolated, notice = isolation_notice()
        (logger.info if isolated else logger.warning)(notice)
