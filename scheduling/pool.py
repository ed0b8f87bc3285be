"""A datacenter as the scheduling model sees it (``paddlecloud_core.scheduling.Pool``), read
from the database: limits, weights, the jobs that hold resources and when each is predicted
to end, and the heads of the queues. Admission plans with it under its lock; ``forecasts``
predicts with it the starts that the job pages, the API and ``submit --dry-run`` show.

What a job ran before tells how long its kind runs: each owner's last ``HISTORY`` jobs that
succeeded, by shape (``paddlecloud_core.scheduling.shape``: name stem and size); and a running
job's own pace, where its master's tasks tell how much of its work is done (``work_done``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import Count, F, Max, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from accounts.models import Datacenter, Membership, Team
from accounts.selectors import quotas_get
from jobs.models import Job, JobEvent, Task
from jobs.states import ACTIVE_STATES, JobState
from paddlecloud_core.contract import trainers_elastic, trainers_least
from paddlecloud_core.scheduling import (
    Estimate,
    Limit,
    Pool,
    Vec,
    Waiting,
    estimate,
    shape,
)
from paddlecloud_core.scheduling import running as running_job
from pfs.services import storage_problems

from .budgets import budgets_spent
from .dependencies import waiting_after

HISTORY = 50  # finished jobs of each owner read for run times
# What admission and forecasts read of a job: its request, its place, its state.
REQUEST_FIELDS = ("trainers", "trainers_min", "cpu", "memory", "gpu", "pservers", "pscpu",
                  "psmemory")
HEAD_FIELDS = ("id", "name", "owner_id", "datacenter_id", "state", "state_reason",
               "created_at", "priority", "deadline_seconds", *REQUEST_FIELDS)
# A queue's order (``paddlecloud_core.scheduling.queue_order``) in SQL.
QUEUE_ORDER = ("-priority", "created_at", "id")


def request_vec(job, trainers: int | None = None) -> Vec:
    """What a job (or a spec) holds with ``trainers`` trainers (default: what it needs to
    start: an elastic job's MIN), one job of the concurrent-jobs quota included."""
    trainers = trainers_least(job) if trainers is None else trainers
    return Vec(cpu=trainers * job.cpu + job.pservers * job.pscpu,
               memory=trainers * job.memory + job.pservers * job.psmemory,
               gpu=trainers * job.gpu, jobs=1)


def held_vec(job) -> Vec:
    """What an active job holds now: with the trainers an elastic job holds."""
    return request_vec(job, job.trainers_held if trainers_elastic(job) else job.trainers)


def shared(datacenter: Datacenter) -> bool:
    """Whether one member's jobs may wait for another's: the datacenter has a capacity they
    share, or groups whose quotas their members share. (Else only each user's quota limits
    their jobs, and each queue is admitted alone.)"""
    if not hasattr(datacenter, "_shared"):  # asked often in a request: once
        datacenter._shared = (any(value is not None for value in datacenter.capacity.values())
                              or Team.objects.filter(datacenter=datacenter).exists())
    return datacenter._shared


def ahead_of(job) -> Q:
    """The waiting jobs before ``job`` in its owner's queue (priority, then time, then id)."""
    return (Q(priority__gt=job.priority)
            | Q(priority=job.priority, created_at__lt=job.created_at)
            | Q(priority=job.priority, created_at=job.created_at, id__lt=job.pk))


def behind(job) -> Q:
    """The waiting jobs after ``job`` in its owner's queue."""
    return (Q(priority__lt=job.priority)
            | Q(priority=job.priority, created_at__gt=job.created_at)
            | Q(priority=job.priority, created_at=job.created_at, id__gt=job.pk))


def _seconds(moment: datetime) -> float:
    return moment.timestamp()


def run_history(datacenter_id: int, owner_ids: Iterable[int]) -> dict[int, list]:
    """Each owner's last ``HISTORY`` succeeded jobs in the datacenter: (shape, seconds),
    oldest first (one query)."""
    rows = (Job.objects.filter(datacenter_id=datacenter_id, owner_id__in=list(owner_ids),
                               state=JobState.SUCCEEDED, started_at__isnull=False,
                               finished_at__isnull=False)
            .annotate(recent=Window(RowNumber(), partition_by=[F("owner_id")],
                                    order_by=F("finished_at").desc()))
            .filter(recent__lte=HISTORY)
            .order_by("owner_id", "finished_at")
            .only("owner_id", "name", "started_at", "finished_at", *REQUEST_FIELDS))
    history: dict[int, list] = defaultdict(list)
    for job in rows:
        seconds = (job.finished_at - job.started_at).total_seconds()
        history[job.owner_id].append((shape(job.name, request_vec(job, job.trainers)), seconds))
    return history


def job_estimate(job, history: dict[int, list]) -> Estimate:
    return estimate(history.get(job.owner_id, ()), shape(job.name, request_vec(job, job.trainers)),
                    job.deadline_seconds)


def pool_load(datacenter: Datacenter, owner_ids: Iterable[int], waiting: Iterable[Job],
              now: datetime | None = None, quotas: dict | None = None) -> Pool:
    """The pool of ``datacenter`` for the queues of ``owner_ids``, whose ``waiting`` jobs
    (read by the caller, in any order) are those the plan looks at. Running jobs: all of the
    datacenter's when it has a capacity, else only these owners'. ``quotas``: those of some
    owners, read by the caller (``quotas_get``); the others' are read here."""
    now = now or timezone.now()
    owner_ids = list(owner_ids)
    active = Job.objects.filter(datacenter=datacenter, state__in=ACTIVE_STATES).only(
        "id", "owner_id", "name", "state", "admitted_at", "started_at", "deadline_seconds",
        "trainers_held", "passes", *REQUEST_FIELDS)
    if not shared(datacenter):
        active = active.filter(owner_id__in=owner_ids)
    active = list(active)
    holders = {job.owner_id for job in active} | set(owner_ids)
    history = run_history(datacenter.pk, holders)
    progress = work_done(active)
    running = [running_job(job.pk, job.owner_id, held_vec(job),
                           _seconds(job.started_at or job.admitted_at or now),
                           job_estimate(job, history), _seconds(now), name=job.name,
                           deadline=job.deadline_seconds, progress=progress.get(job.pk),
                           # this run's start (admitted_at is each start's): only a running
                           # job may be preempted
                           run_began=(_seconds(job.admitted_at or job.started_at or now)
                                      if job.state == JobState.RUNNING else None))
               for job in active]
    known = quotas or {}
    quotas = {**known, **(quotas_get(datacenter, holders - set(known))
                          if holders - set(known) else {})}
    quotas = {owner: quotas[owner] for owner in holders}
    memberships = list(Membership.objects.filter(datacenter=datacenter, user_id__in=holders)
                       .values_list("user_id", "weight", "team_id"))
    weights = {user_id: weight for user_id, weight, _ in memberships}
    teams = {user_id: team_id for user_id, _, team_id in memberships if team_id is not None}
    groups = {team.pk: team for team in Team.objects.filter(pk__in=set(teams.values()))}
    names = dict(get_user_model().objects.filter(pk__in=holders).values_list("pk", "username"))
    preempt_after = datacenter.preempt_after
    waiting = list(waiting)
    since = _waits_since([job.pk for job in waiting if job.pk]) if preempt_after else {}
    after = waiting_after(waiting)
    return Pool(
        capacity=Limit(**datacenter.capacity),
        quotas={owner: Limit(cpu=q.cpu, memory=q.memory, gpu=q.gpu, jobs=q.jobs)
                for owner, q in quotas.items()},
        weights=weights,
        running=running,
        waiting=[waiting_of(job, history, since.get(job.pk), after.get(job.pk or 0, ()))
                 for job in waiting],
        names=names,
        teams=teams,
        team_quotas={pk: Limit(**team.quota) for pk, team in groups.items()},
        team_weights={pk: team.weight for pk, team in groups.items()},
        team_names={pk: team.name for pk, team in groups.items()},
        blocked={**{owner: ("storage", f"waiting for storage: {why}") for owner, (_, why)
                    in storage_problems(datacenter, owner_ids).items()},
                 **{owner: ("budget", why)
                    for owner, why in budgets_spent(datacenter, owner_ids).items()}},
        preempt_after=preempt_after)


def work_done(jobs: Iterable[Job]) -> dict[int, float]:
    """The part of each job's work done (0-1), as its master's tasks tell: each pass made
    counts its tasks over (done or set aside) of its tasks, over the passes planned. A job whose
    master has handed out nothing (or that has none) is not here (one query)."""
    passes = {job.pk: job.passes for job in jobs}
    rows = (Task.objects.filter(job_id__in=list(passes)).values("job_id", "pass_no")
            .annotate(total=Count("id"), over=Count("id", filter=Q(
                state__in=(Task.State.DONE, Task.State.SET_ASIDE)))))
    done: dict[int, float] = defaultdict(float)
    for row in rows:
        done[row["job_id"]] += row["over"] / row["total"] / max(passes[row["job_id"]], 1)
    return dict(done)


def _waits_since(job_ids: list[int]) -> dict[int, datetime]:
    """When each of these waiting jobs last went into its queue (a requeued one waits from
    then); one that never did waits from its submission (not here)."""
    return dict(JobEvent.objects.filter(job_id__in=job_ids, to_state=JobState.QUEUED)
                .values("job_id").annotate(last=Max("time")).values_list("job_id", "last"))


def waiting_of(job, history: dict[int, list], since: datetime | None = None,
               after: tuple[tuple[int, str, str], ...] = ()) -> Waiting:
    return Waiting(id=job.pk or 0, owner=job.owner_id, need=request_vec(job),
                   submitted=_seconds(job.created_at), priority=job.priority, name=job.name,
                   run=job_estimate(job, history), deadline=job.deadline_seconds,
                   since=None if since is None else _seconds(since), after=after)
