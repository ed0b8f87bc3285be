"""Celery tasks: each takes a job id, acknowledges late and may safely run twice."""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from datetime import timedelta

from celery import shared_task
from celery.signals import task_received, worker_ready, worker_shutdown
from celery.worker import state as worker_state
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
from kernel.celery import every_worker
from kernel.errors import outage
from kernel.queue import JOB_START
from scheduling.admission import quota_admit, waiting_queues
from scheduling.budgets import budget_overruns
from scheduling.capacity import capacity_refresh
from scheduling.preemption import preemptions_due

from . import engine, metrics_cache, starts, sync
from .backends import backend_for
from .backends.base import BackendError
from .backends.local import LOCAL
from .backends.local.backend import isolation_notice, worker_start
from .builds import runs
from .models import Job, JobEvent
from .notify import job_changed
from .resumes import resumes_note
from .services import job_remove
from .states import FINAL_JOB_STATES, LIVE_REPLICA_STATES, JobState, ReplicaState

logger = logging.getLogger(__name__)

LOST_START_AFTER = timedelta(seconds=30)
RECONCILE_SECONDS = 15  # how often the workers run the reconciler, beat or not
RECONCILE_DUE = "jobs:reconcile:due"
RECONCILE_LEASE = "jobs:reconcile:lease"
RECONCILE_LEASE_SECONDS = 10  # renewed while a run works; how long a dead run blocks others


@shared_task(name=JOB_START, acks_late=True)
def job_start(job_id: int) -> None:
    """Start an admitted job's replicas, holding its start (``starts``): never beside
    another living worker's run of it."""
    with starts.start_held(job_id) as held:
        if not held:
            return  # a living worker runs it (this message was a copy)
        uid = Job.objects.filter(pk=job_id).values_list("uid", flat=True).first()
        if uid is None:
            return
        engine.job_launch(job_id)
    sync.job_sync_soon(str(uid))  # what it started: running, or refused, now


@task_received.connect
def start_received(request=None, **kwargs) -> None:
    """A worker that takes a start's message from the broker holds it until it runs it:
    killed meanwhile, its hold runs out and the start is sent again (``starts``)."""
    if request is not None and request.name == JOB_START:
        starts.start_received(*request.args,
                              waiting=lambda: request in worker_state.reserved_requests)


@every_worker(1.0)
def starts_resend() -> None:
    """Every worker, every second: the starts whose holder died are sent again."""
    starts.starts_resend()


# A sync asked for while the database is away (a replica that ended during the outage) runs
# again every second, so that its change is recorded within a second of the database's return
# rather than at the reconciler's next pass; past OUTAGE_RETRIES the reconciler has it.
OUTAGE_RETRIES = 300


@shared_task(name="jobs.tasks.job_sync", acks_late=True, ignore_result=True, bind=True)
def job_sync(self, job_uid: str) -> None:
    """Look at a job whose replicas changed (``sync``), or that is due."""
    try:
        sync.sync_begins(job_uid)
        job_id = Job.objects.filter(uid=job_uid).values_list("pk", flat=True).first()
        if job_id is None:
            return  # deleted
        if sync.job_sync_one_at_a_time(job_id):
            sync.job_sync_when_due(Job.objects.select_related("datacenter").get(pk=job_id))
    except Exception as exc:
        if outage(exc) is None:
            raise
        raise self.retry(countdown=1, max_retries=OUTAGE_RETRIES) from exc


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
    (queued by ``services.job_remove``; ``remains`` is ``engine.job_remains``), and its parsed
    metrics (``metrics_cache``)."""
    metrics_cache.metrics_forget(remains["uid"])
    engine.job_remains_remove(remains)


@shared_task(name="jobs.tasks.job_metrics_keep", acks_late=True)
def job_metrics_keep(job_id: int) -> None:
    """An ended job's metrics parsed into its sidecar, so comparing it parses nothing
    (queued by ``metrics_cache.job_ended_keep``)."""
    metrics_cache.job_metrics_keep(job_id)


class Lease:
    """A lease in the cache (Redis; in-process on the embedded default): one holder at a time,
    renewed by a thread of its holder while it works (a step that takes long keeps it),
    released at the end, and expiring by itself soon after its holder dies."""

    def __init__(self, key: str, seconds: float):
        self.key, self.seconds, self.token = key, seconds, uuid.uuid4().hex
        self.ended = threading.Event()

    @contextlib.contextmanager
    def held(self):
        """``with lease.held() as held:``, held False (and nothing kept) when another holds
        it."""
        if not cache.add(self.key, self.token, self.seconds):
            yield False
            return
        renewer = threading.Thread(target=self._renew, name=f"lease {self.key}", daemon=True)
        renewer.start()
        try:
            yield True
        finally:
            self.ended.set()
            renewer.join()
            if cache.get(self.key) == self.token:  # not another's, taken after ours ran out
                cache.delete(self.key)

    def _renew(self) -> None:
        while not self.ended.wait(self.seconds / 4):
            try:
                if cache.get(self.key) == self.token:
                    cache.touch(self.key, self.seconds)
            except Exception:  # Redis away a moment: the next round tries again
                logger.warning("could not renew the lease %s", self.key, exc_info=True)


@shared_task(name="jobs.tasks.jobs_reconcile")
def jobs_reconcile() -> dict[str, int] | None:
    """Bring the database and the processes back in line (every worker runs it every
    RECONCILE_SECONDS: ``reconcile_when_due``): admit
    jobs the quota has room for, start jobs whose start was lost, sync the running jobs whose
    replicas are not what the database says or that are due (``sync.jobs_stale``: what a lost
    announcement missed, replicas that vanished while the portal was down), stop what is left
    of ended jobs, delete ended jobs past their TTL, ask each cluster its version again (and,
    where the capacity comes from it, what its nodes offer: ``capacity``) and start its
    change feed where it is not running. Returns None, doing nothing, while another
    run holds the lease.

    Runs never overlap, across workers: a run holds a lease (renewed while it works; it
    runs out RECONCILE_LEASE_SECONDS after its worker dies) and one that finds it held
    returns at once, so a slow run (a long queue, a slow API server) never piles others up
    behind it."""
    with Lease(RECONCILE_LEASE, RECONCILE_LEASE_SECONDS).held() as held:
        return _reconcile() if held else None


@every_worker(1)
def reconcile_when_due() -> None:
    """The reconciler's schedule, kept by every worker rather than by beat alone (a process
    that may be down): each looks every second, and the first to find that no run began in
    the last RECONCILE_SECONDS runs it (in this thread: not behind queued work), so it runs
    every RECONCILE_SECONDS (a second late at most) while any worker lives, whichever worker
    ran it last and even if that one was killed.

    A look that finds the lease held (a run slower than RECONCILE_SECONDS, or one whose
    worker was killed mid-run, its lease running out) gives the turn back, so the next
    second's look tries again: the run follows the held one within a second, not a whole
    RECONCILE_SECONDS later."""
    if cache.add(RECONCILE_DUE, 1, RECONCILE_SECONDS) and jobs_reconcile() is None:
        cache.delete(RECONCILE_DUE)


def _budgets_enforce(now) -> int:
    """Running jobs whose owner's (or group's) budget is spent: warned once (an event, and a
    notice on the job's page), then, where the datacenter says so, stopped after its grace
    period — unless the budget was raised (or its window moved on) meanwhile. A stopped job
    goes back to its queue, where admission holds it while the budget is spent: what it
    trained is not lost (it resumes from its latest checkpoint), and its owner, not the
    budget, decides whether it is done (a kill). Returns how many were warned or stopped."""
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
            reason = (f"stopped: {why}; back in its queue, it runs again (its trainers from "
                      f"their latest checkpoint) once the budget allows")
            # In the job's turn: a sync that saw its replicas end would fail it instead.
            acted += sync.job_in_turn(job.pk, lambda job=job, reason=reason: engine.job_requeue(
                job, reason))
    return acted


def _reconcile() -> dict[str, int]:
    counts = {"admitted": 0, "restarted": 0, "synced": 0, "expired": 0, "orphans": 0,
              "unfit": 0, "capacity": 0, "budget": 0, "resumed": 0, "preempted": 0,
              "sidecars": 0}
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
    # What restarted trainers' SDKs said of their checkpoints: events (issue 37).
    counts["resumed"] = resumes_note()
    # Jobs below their owners' share that waited past their datacenter's preempt_after.
    counts["preempted"] = preemptions_due()
    # Admission happens when jobs are submitted and end; this catches what a crash missed.
    # One call per queue, each a fixed number of queries however long its queue.
    for owner_id, datacenter_id in waiting_queues():
        counts["admitted"] += len(quota_admit(owner_id, datacenter_id))
    # A start that was lost, or died half way (replicas still pending under a starting job;
    # an elastic job's trainers may wait pending for room: its watch starts them).
    stalled = Job.objects.filter(
        Q(replicas__role="pserver") | Q(trainers_min__isnull=True), state=JobState.STARTING,
        replicas__state=ReplicaState.PENDING, updated_at__lt=now - LOST_START_AFTER).distinct()
    for job_id in stalled.values_list("pk", flat=True):
        starts.starts_later([job_id])  # not while one is held (queued, taken, running)
        counts["restarted"] += 1
    # Jobs are synced as their replicas change; these are those a change missed.
    for job_id in sync.jobs_stale():
        sync.job_sync_one_at_a_time(job_id)
        counts["synced"] += 1
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
    # Parsed metrics of jobs deleted while no worker removed them (metrics_cache).
    counts["sidecars"] = metrics_cache.sidecars_sweep(jobs_known)
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


@worker_shutdown.connect
def start_holds_stop(**kwargs) -> None:
    """A worker that stops renews its start holds no more: what it had not run is another's
    once they run out (``starts``)."""
    starts.holds_stop()


@worker_ready.connect
def isolation_say(**kwargs) -> None:
    """A worker that starts says whether the local backend's jobs are sandboxed."""
    if Datacenter.objects.filter(backend=LOCAL.name).exists():
        isolated, notice = isolation_notice()
        (logger.info if isolated else logger.warning)(notice)
