"""Preemption that knows what it costs (issue 37; docs/admin/scheduling.md): in a datacenter that
sets ``preempt_after``, a job of a user below their fair share that has waited that long for
the capacity starts by stopping running jobs of users over theirs. The scheduling model picks
them (``paddlecloud_core.scheduling``: ``Plan.preempt``), those that lose the fewest
GPU-minutes (CPU-minutes where they hold no GPUs) since their last checkpoint — the time of
the latest ``checkpoint`` metric their trainer 0 reported (``paddlecloud_sdk.checkpoint.save``
reports one after each save); none: since their run began.

Here the reconciler (``jobs.tasks``) asks, datacenter by datacenter, and one preemption at a
time: under admission's lock the victims are marked (``Job.preempting``, the event's words)
and the job that gets the room is told so (an event); each victim's next sync
(``jobs.engine``) warns its replicas (SIGTERM, the grace period: a trainer that asked for it
saves a checkpoint then), stops them and requeues it at the head of its owner's queue. Its
requeue asks for admission, which starts the waiting job.
"""

from __future__ import annotations

from dataclasses import replace

from django.db import transaction
from django.utils import timezone

from accounts.models import Datacenter
from jobs.metrics import metric_latest
from jobs.models import Job, JobEvent, Replica
from jobs.notify import job_changed
from jobs.states import ACTIVE_STATES, WAITING_STATES, JobState
from kernel.queue import JOB_SYNC, task_later
from paddlecloud_core.checkpoints import SAVED_METRIC
from paddlecloud_core.scheduling import Preemption, schedule, span_words

from .pool import HEAD_FIELDS, QUEUE_ORDER, pool_load, shared

LOOK = 500  # waiting jobs of a datacenter read at most (as a forecast reads)


def preemptions_due() -> int:
    """Start what preemption is due for in each datacenter that sets ``preempt_after``: one
    waiting job each at most. Returns how many jobs were marked to be preempted."""
    return sum(preempt_due(datacenter)
               for datacenter in Datacenter.objects.filter(preempt_after__isnull=False))


def checkpoint_saved(job) -> float | None:
    """When the job last saved a checkpoint (Unix time), from its trainer 0's metrics."""
    record = metric_latest(job, Replica(job=job, role=Replica.Role.TRAINER, index=0),
                           SAVED_METRIC)
    return None if record is None else record["time"]


@transaction.atomic
def preempt_due(datacenter: Datacenter) -> int:
    """Mark the victims of the first waiting job of the datacenter whose preemption is due
    (the plan's order: the owner furthest below their share first), tell it, and have their
    syncs stop them. Nothing while an earlier preemption's victims are still being stopped.
    Returns how many were marked."""
    if not shared(datacenter) or Job.objects.filter(
            datacenter=datacenter, state__in=ACTIVE_STATES).exclude(preempting="").exists():
        return 0
    # Admission's lock: no job of the datacenter starts or is admitted meanwhile.
    Datacenter.objects.select_for_update().filter(pk=datacenter.pk).exists()
    waiting = list(Job.objects.filter(datacenter=datacenter, state__in=WAITING_STATES)
                   .order_by(*QUEUE_ORDER).only(*HEAD_FIELDS)[:LOOK])
    pool = pool_load(datacenter, {job.owner_id for job in waiting}, waiting)
    now = timezone.now()
    # Whether any is due at all, before the running jobs' metrics files are read for what
    # each would lose (which only changes who the victims are).
    if not any(found.at <= now.timestamp()
               for found in schedule(pool, now.timestamp()).preempt.values()):
        return 0
    running = {job.pk: job for job in Job.objects.filter(
        pk__in=[run.id for run in pool.running if run.began is not None]).select_related(
        "owner", "datacenter")}
    pool = replace(pool, running=[
        replace(run, saved=checkpoint_saved(running[run.id])) if run.id in running else run
        for run in pool.running])
    plan = schedule(pool, now.timestamp())
    due = next(((job_id, found) for job_id, found in plan.preempt.items()
                if found.at <= now.timestamp()), None)
    if due is None:
        return 0
    job_id, found = due
    waiting_job = next(job for job in waiting if job.pk == job_id)
    victims = [running[victim] for victim in found.victims]
    for victim in victims:
        Job.objects.filter(pk=victim.pk, state=JobState.RUNNING).update(
            preempting=_victim_reason(victim, found, datacenter))
        task_later(JOB_SYNC, str(victim.uid))
    gpu, cpu = (sum(lost[i] for lost in found.lost.values()) for i in (0, 1))
    JobEvent.objects.create(
        job=waiting_job, time=now, from_state=waiting_job.state, to_state=waiting_job.state,
        reason=(f"preempting {len(victims)} running job{'s' if len(victims) != 1 else ''} of "
                f"users over their fair share to make room for it (it waited past "
                f"preempt_after, {span_words(datacenter.preempt_after)}, below its owner's "
                f"share); they lose {_cost(gpu, cpu)} since their last checkpoints"))
    job_changed(waiting_job.pk)
    return len(victims)


def _cost(gpu: float, cpu: float) -> str:
    return f"{gpu:.1f} GPU-minutes" if gpu else f"{cpu:.1f} CPU-minutes"


def _victim_reason(victim: Job, found: Preemption, datacenter) -> str:
    """The victim's event: why, and what it cost. Another user's job is not named (a reason
    is no way to learn of jobs one may not look at)."""
    gpu, cpu = found.lost[victim.pk]
    return (f"preempted: stopped (SIGTERM, then its grace period) to make room for another "
            f"user's job that waited past the datacenter's preempt_after "
            f"({span_words(datacenter.preempt_after)}) below its owner's fair share, while "
            f"you are over yours; it lost {_cost(gpu, cpu)} of work since its last "
            f"checkpoint (less if it saved one when warned); requeued at the head of its "
            f"queue, its next run resumes from its latest checkpoint")
