"""Celery tasks: each takes a job id, acknowledges late and may safely run twice."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from celery.signals import worker_ready
from django.core.exceptions import ObjectDoesNotExist
from django.utils import timezone

from accounts.models import Datacenter

from . import engine
from .admission import quota_admit, waiting_queues
from .backends import backend_for
from .live import job_deleted
from .models import Job
from .states import FINAL_JOB_STATES, JobState

logger = logging.getLogger(__name__)

SYNC_INTERVAL = 1.0  # seconds between two looks at a running job
LOST_START_AFTER = timedelta(seconds=30)


@shared_task(name="jobs.tasks.job_start", acks_late=True)
def job_start(job_id: int) -> None:
    if not Job.objects.filter(pk=job_id).exists():
        return
    engine.job_launch(job_id)
    job_watch.apply_async((job_id,), countdown=SYNC_INTERVAL)


@shared_task(name="jobs.tasks.jobs_admit", acks_late=True)
def jobs_admit(user_id: int, datacenter_id: int | None = None) -> int:
    """Admit what the user's quota has room for now (in one datacenter, or in each where they
    have jobs waiting). Returns how many jobs were admitted."""
    places = {"datacenter_id": datacenter_id} if datacenter_id is not None else {}
    return sum(len(quota_admit(owner_id, dc_id))
               for owner_id, dc_id in waiting_queues(owner_id=user_id, **places))


@shared_task(name="jobs.tasks.job_watch", acks_late=True)
def job_watch(job_id: int) -> None:
    """Follow a job until it ends, one look per second (without holding a worker)."""
    if not Job.objects.filter(pk=job_id).exists():
        return
    if engine.job_sync(job_id):
        job_watch.apply_async((job_id,), countdown=SYNC_INTERVAL)


@shared_task(name="jobs.tasks.job_stop", acks_late=True)
def job_stop(job_id: int) -> None:
    try:
        engine.job_halt(job_id)
    except ObjectDoesNotExist:  # the job (and its replicas) was deleted meanwhile: all done
        logger.info("job %s was deleted while being stopped", job_id)


@shared_task(name="jobs.tasks.jobs_reconcile")
def jobs_reconcile() -> dict[str, int]:
    """Bring the database and the processes back in line (celery beat, every 15 s): admit
    jobs the quota has room for, start jobs whose start was lost, look at every job that runs
    (replicas that vanished while the portal was down are marked, deadlines enforced), stop
    what is left of ended jobs, delete ended jobs past their TTL."""
    counts = {"admitted": 0, "restarted": 0, "synced": 0, "expired": 0, "orphans": 0}
    now = timezone.now()
    # Admission happens when jobs are submitted and end; this catches what a crash missed.
    for owner_id, datacenter_id in waiting_queues():
        counts["admitted"] += len(quota_admit(owner_id, datacenter_id))
    # A start that was lost, or died half way (replicas still pending under a starting job).
    stalled = Job.objects.filter(state=JobState.STARTING, replicas__state="pending",
                                 updated_at__lt=now - LOST_START_AFTER).distinct()
    for job_id in stalled.values_list("pk", flat=True):
        job_start.delay(job_id)
        counts["restarted"] += 1
    active = Job.objects.filter(state__in=[JobState.STARTING, JobState.RUNNING])
    for job_id in active.values_list("pk", flat=True):
        engine.job_sync(job_id)
        counts["synced"] += 1
    ended_live = (Job.objects.filter(state__in=FINAL_JOB_STATES)
                  .filter(replicas__state__in=["pending", "starting", "running"]).distinct())
    for job_id in ended_live.values_list("pk", flat=True):
        engine.job_halt(job_id)
    known = {str(uid) for uid in Job.objects.values_list("uid", flat=True)}
    for backend in {backend_for(dc) for dc in Datacenter.objects.all()}:
        counts["orphans"] += backend.orphans_stop(known, engine.STOP_GRACE_SECONDS)
    for job in Job.objects.filter(state__in=FINAL_JOB_STATES,
                                  ttl_seconds_after_finished__isnull=False,
                                  finished_at__isnull=False).select_related("datacenter"):
        if job.finished_at + timedelta(seconds=job.ttl_seconds_after_finished) < now:
            backend_for(job.datacenter).cleanup(job)
            job_deleted(job)
            job.delete()
            counts["expired"] += 1
    return counts


@worker_ready.connect
def isolation_say(**kwargs) -> None:
    """A worker that starts says whether the local backend's jobs are sandboxed."""
    if Datacenter.objects.filter(backend="local").exists():
        from .backends.local import isolation_notice

        isolated, notice = isolation_notice()
        (logger.info if isolated else logger.warning)(notice)
