"""Quota admission: which jobs may start now, which wait in ``queued``, which can never run.

A job's request is what all its replicas ask for together (trainers x cpu + pservers x pscpu,
and so on) plus one concurrent job. Jobs that are ``starting`` or ``running`` hold their
request; the rest of the quota is free. Each user's waiting jobs (``pending``, ``queued``) are
admitted strictly in the order they were submitted, so a small job never overtakes a big one
of the same user. At most ``queued`` of them may wait: a submission that would wait beyond
that is refused.

``quota_admit`` is the one place jobs are admitted. It runs under a lock on the user's row, so
two submissions racing for the last free CPU are admitted one after the other and the second
sees the first's (on PostgreSQL, a ``SELECT … FOR UPDATE``; SQLite has one writer anyway). It
is called by a submission, when a job ends, when a quota changes, and by the reconciler, so
its cost is bounded by what changed, not by how many jobs wait: it reads the queue only up to
the first job that does not fit, and touches the jobs behind it in a few bulk statements, only
where their state or reason changes.

**Elastic jobs** (``trainers`` MIN:MAX, docs/elastic.md) wait for, and are admitted with, MIN
trainers; once the queue is through, ``quota_admit`` gives the user's running elastic jobs
(oldest first) as many more trainers as the free quota has room for, up to MAX each (a lost
trainer's place is given back the same way, so replacing one is growing again). It does so
only while none of the user's jobs waits: trainers are never taken back from a running job,
so room given to one would keep a waiting job waiting. A job's ``trainers_held`` is what it
holds (the engine starts that many), and what quota counts of an elastic job.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, Least

from accounts.models import QUOTA_FORMATS, QUOTA_RESOURCES, Datacenter
from accounts.selectors import quota_get
from paddlecloud.errors import ValidationError
from paddlecloud.queue import (
    JOB_START,
    JOB_SYNC,
    JOBS_ADMIT,
    task_later,
    task_later_once,
)
from paddlecloud_core.contract import trainers_elastic, trainers_least
from paddlecloud_core.quantity import format_bytes_about
from pfs.services import usage_report

from .models import Job, Replica
from .notify import jobs_changed
from .states import JobState, ReplicaState
from .transitions import job_transition, jobs_transition

ACTIVE_STATES = (JobState.STARTING, JobState.RUNNING)
WAITING_STATES = (JobState.PENDING, JobState.QUEUED)
COMPUTE = ("cpu", "memory", "gpu", "jobs")
SHOWN = QUOTA_FORMATS
# What is used, for people: bytes to about three digits (19.1Mi), as the Files page shows them.
SHOWN_USED = {**QUOTA_FORMATS, "memory": format_bytes_about, "storage": format_bytes_about}
UNITS = {"cpu": " CPU", "memory": "", "gpu": " GPU"}
# What admission reads of a waiting job: its request, its place and its state.
REQUEST_FIELDS = ("trainers", "trainers_min", "cpu", "memory", "gpu", "pservers", "pscpu",
                  "psmemory")
HEAD_FIELDS = ("id", "name", "owner_id", "datacenter_id", "state", "state_reason",
               "created_at", *REQUEST_FIELDS)
HEAD_BATCH = 20  # waiting jobs read at once while looking for the first that does not fit
# The trainers a waiting job needs to start (an elastic job's MIN); elastic jobs.
LEAST = Coalesce(F("trainers_min"), F("trainers"))
ELASTIC = Q(trainers_min__isnull=False, trainers_min__lt=F("trainers"))


def _request_sql(trainers) -> dict:
    return {"cpu": trainers * F("cpu") + F("pservers") * F("pscpu"),
            "memory": trainers * F("memory") + F("pservers") * F("psmemory"),
            "gpu": trainers * F("gpu")}


# A waiting job's request in SQL, as ``job_request`` computes it in Python (jobs: one each).
ASKED = _request_sql(LEAST)


@dataclass(frozen=True)
class Request:
    """What a job holds while it runs."""

    cpu: int
    memory: int
    gpu: int
    jobs: int = 1

    def __add__(self, other: Request) -> Request:
        return Request(*(getattr(self, r) + getattr(other, r) for r in COMPUTE))


def job_request(job) -> Request:
    """A job's (or a spec's) request to start: with an elastic job's MIN trainers. The two
    have the same fields."""
    return _request(job, trainers_least(job))


def job_held(job) -> Request:
    """What an active job holds: with the trainers an elastic job holds now."""
    return _request(job, job.trainers_held if trainers_elastic(job) else job.trainers)


def _request(job, trainers: int) -> Request:
    return Request(cpu=trainers * job.cpu + job.pservers * job.pscpu,
                   memory=trainers * job.memory + job.pservers * job.psmemory,
                   gpu=trainers * job.gpu)


def _breakdown(job, resource: str) -> str:
    """How a job's total of ``resource`` is made up, as users wrote it."""
    if resource == "jobs":
        return ""
    per_trainer = getattr(job, resource)
    trainers = trainers_least(job)
    least = "at least " if trainers_elastic(job) else ""
    parts = [f"{least}{trainers} trainer{'s' if trainers != 1 else ''} x "
             f"{SHOWN[resource](per_trainer)}"]
    if job.pservers and resource != "gpu":
        per_ps = job.pscpu if resource == "cpu" else job.psmemory
        parts.append(f"{job.pservers} pserver{'s' if job.pservers != 1 else ''} x "
                     f"{SHOWN[resource](per_ps)}")
    return f" ({' + '.join(parts)})"


def quota_problems(job, quota) -> dict[str, str]:
    """Each resource the job asks more of than the whole quota, and by how much: such a job
    can never start, however long it waits."""
    asked = job_request(job)
    problems = {}
    for resource in COMPUTE:
        want, limit = getattr(asked, resource), getattr(quota, resource)
        if want <= limit:
            continue
        fmt = SHOWN[resource]
        if resource == "jobs":
            problems[resource] = (f"your quota allows no jobs in datacenter "
                                  f"{quota.datacenter.name!r}; ask an administrator")
            continue
        problems[resource] = (
            f"the job asks for {fmt(want)}{UNITS[resource]} in all{_breakdown(job, resource)}, "
            f"{fmt(want - limit)} more than your quota of {fmt(limit)} in datacenter "
            f"{quota.datacenter.name!r}")
    return problems


def quota_fit_check(user, datacenter, job) -> None:
    """Refuse at submission a job that can never fit the user's quota, naming each resource."""
    problems = quota_problems(job, quota_get(user, datacenter))
    if problems:
        raise ValidationError("; ".join(f"{k}: {v}" for k, v in problems.items()),
                              fields={k: [v] for k, v in problems.items()},
                              code="over_quota")


def quota_queue_check(user, datacenter, job, *, lock: bool = False) -> None:
    """Refuse at submission a job that would wait while the user's ``queued`` quota of jobs
    already waits (with a quota of 0, a job that cannot start at once). With ``lock`` (in the
    submission's transaction) under the user's row lock, so racing submissions cannot all
    slip under the cap."""
    if lock:
        get_user_model().objects.select_for_update().only("pk").get(pk=user.pk)
    quota = quota_get(user, datacenter)
    waiting = Job.objects.filter(owner=user, datacenter=datacenter,
                                 state__in=WAITING_STATES).count()
    if waiting < quota.queued:
        return
    if not waiting and _fits(quota_used(user.pk, datacenter.pk) + job_request(job), quota):
        return  # it starts at once: it never waits
    if quota.queued:
        message = (f"{waiting} of your jobs already wait in datacenter "
                   f"{datacenter.name!r}, and your quota lets {quota.queued} wait at once; "
                   "submit it once some have started, or kill some")
    else:
        message = (f"your quota lets no job wait in datacenter {datacenter.name!r}, and this "
                   "one would: submit it once your running jobs leave room for it")
    raise ValidationError.for_field("queued", message, code="too_many_queued")


def quota_used(user_id: int, datacenter_id: int) -> Request:
    """What the user's active jobs in the datacenter hold now (one query; summed here: they
    are at most the quota's ``jobs``, and the sum in SQL costs more to build than to run)."""
    active = Job.objects.filter(owner_id=user_id, datacenter_id=datacenter_id,
                                state__in=ACTIVE_STATES).only(*REQUEST_FIELDS, "trainers_held")
    return sum((job_held(job) for job in active), Request(0, 0, 0, 0))


def _never_fits(quota) -> Q:
    """Waiting jobs (with their ``asked_*`` aliased) that ask for more than the whole quota;
    with a quota of no jobs, every one."""
    if quota.jobs < 1:
        return Q()
    return reduce(operator.or_, (Q(**{f"asked_{r}__gt": getattr(quota, r)}) for r in ASKED))


def _fits(request: Request, quota) -> bool:
    return all(getattr(request, r) <= getattr(quota, r) for r in COMPUTE)


def _short_of(used: Request, asked: Request, quota) -> str:
    """Why a job waits: each resource it needs more of than is free now."""
    parts = []
    for resource in COMPUTE:
        free = max(getattr(quota, resource) - getattr(used, resource), 0)
        want = getattr(asked, resource)
        if want > free:
            fmt = SHOWN[resource]
            limit = fmt(getattr(quota, resource))
            parts.append(f"{resource} {fmt(want)} asked, {fmt(free)} of {limit} free")
    return "; ".join(parts)


@transaction.atomic
def quota_admit(user_id: int, datacenter_id: int) -> list[int]:
    """Admit the user's waiting jobs in the datacenter, oldest first, while they fit; queue
    the first that does not (and so everything after it). Returns the ids admitted, whose
    start is queued once this commits. A waiting job that can no longer ever fit (its quota
    was lowered) fails with the reason rather than block the queue forever.

    A fixed number of queries however many jobs wait (a few more only when many are admitted
    at once, or fail with different reasons)."""
    user = get_user_model().objects.select_for_update().only("id").get(pk=user_id)
    datacenter = Datacenter.objects.only("id", "name").get(pk=datacenter_id)
    quota = quota_get(user, datacenter)
    waiting = Job.objects.filter(owner_id=user_id, datacenter_id=datacenter_id,
                                 state__in=WAITING_STATES)
    _fail_never_fitting(waiting, quota)
    used = quota_used(user_id, datacenter_id)
    # Each job admitted takes one of the free jobs, so the first that does not fit is among
    # the first free + 1.
    free_jobs = max(quota.jobs - used.jobs, 0)
    admitted: list[Job] = []
    blocker = None  # the first job that does not fit: everything after it waits too
    for job in _queue_head(waiting, free_jobs + 1):
        asked = job_request(job)
        if not _fits(used + asked, quota):
            blocker = job
            break
        used = used + asked
        admitted.append(job)
    jobs_transition(admitted, JobState.STARTING,
                    dict.fromkeys((job.pk for job in admitted), "admitted: its quota is free"))
    if admitted:
        Job.objects.filter(pk__in=[job.pk for job in admitted]).update(trainers_held=LEAST)
    if blocker is not None:
        _queue(blocker, f"waiting for quota: {_short_of(used, job_request(blocker), quota)}")
        _queue_behind(blocker, waiting)
    else:
        _grow(user_id, datacenter_id, used, quota)
    ids = [job.pk for job in admitted]
    for job_id in ids:
        task_later_once(JOB_START, job_id)
    return ids


def _growing(**filters):
    """Active elastic jobs that hold fewer trainers than their MAX and may take more: none of
    their trainers has finished (the master has nothing more to hand out)."""
    finished = Replica.objects.filter(job=OuterRef("pk"), role=Replica.Role.TRAINER,
                                      state=ReplicaState.SUCCEEDED)
    return (Job.objects.filter(ELASTIC, state__in=ACTIVE_STATES,
                               trainers_held__lt=F("trainers"), **filters)
            .exclude(Exists(finished)))


def _grow(user_id: int, datacenter_id: int, used: Request, quota) -> None:
    """Give the user's growing elastic jobs, oldest first, as many trainers as the free quota
    has room for, up to each one's MAX. The engine starts them (their sync, queued here)."""
    grown = []
    for job in (_growing(owner_id=user_id, datacenter_id=datacenter_id)
                .select_for_update(of=("self",)).order_by("created_at", "id")
                .only("id", "uid", "trainers", "trainers_held", "cpu", "memory", "gpu")):
        room = job.trainers - job.trainers_held
        for resource in ("cpu", "memory", "gpu"):
            each = getattr(job, resource)
            if each:
                free = getattr(quota, resource) - getattr(used, resource)
                room = min(room, max(free, 0) // each)
        if room <= 0:
            continue
        Job.objects.filter(pk=job.pk).update(
            trainers_held=Least(F("trainers_held") + room, F("trainers")))
        used = used + Request(cpu=room * job.cpu, memory=room * job.memory,
                              gpu=room * job.gpu, jobs=0)
        grown.append(job.pk)
        task_later(JOB_SYNC, str(job.uid))
    if grown:
        jobs_changed(user_id, datacenter_id, grown)


def _behind(job) -> Q:
    """The jobs submitted after ``job`` (the queue's order: time, then id)."""
    return Q(created_at__gt=job.created_at) | Q(created_at=job.created_at, id__gt=job.pk)


def _queue_head(waiting, most: int):
    """The first ``most`` waiting jobs, oldest first, read a few at a time: the walk stops at
    the first that does not fit, and what is behind it is never read. Locked, so a kill
    racing admission waits for it (and finds the job admitted) rather than be overwritten."""
    ordered = waiting.select_for_update().order_by("created_at", "id").only(*HEAD_FIELDS)
    while most > 0:
        batch = list(ordered[:min(HEAD_BATCH, most)])
        yield from batch
        if len(batch) < min(HEAD_BATCH, most):
            return
        most -= len(batch)
        ordered = ordered.filter(_behind(batch[-1]))


def _fail_never_fitting(waiting, quota) -> None:
    """Fail the waiting jobs that ask for more than the whole quota (it was lowered): found
    with one query, whatever the length of the queue."""
    never = waiting.alias(**{f"asked_{r}": e for r, e in ASKED.items()}).filter(
        _never_fits(quota))
    if not never.exists():  # nearly always: a plain read, no row locked, nothing built
        return
    doomed = list(never.select_for_update())
    reasons = {job.pk: "can never start: " + "; ".join(
        f"{k}: {v}" for k, v in quota_problems(job, quota).items()) for job in doomed}
    jobs_transition(doomed, JobState.FAILED, reasons)


def _queue(job, reason: str) -> None:
    """Put the job in ``queued``, or give a queued job its current reason."""
    if job.state == JobState.PENDING:
        job_transition(job, JobState.QUEUED, reason)
    elif job.state_reason != reason:
        Job.objects.filter(pk=job.pk).update(state_reason=reason)
        jobs_changed(job.owner_id, job.datacenter_id, [job.pk])


def _queue_behind(blocker, waiting) -> None:
    """Everything behind the first job that does not fit waits behind it: jobs still pending
    are queued (one event each), queued jobs get the reason if they had another. Only the
    jobs that change are touched, in one statement each."""
    reason = f"waiting behind job {blocker.name}"
    stale = list(waiting.filter(_behind(blocker))
                 .filter(Q(state=JobState.PENDING) | ~Q(state_reason=reason))
                 .select_for_update().only("id", "state", "owner_id", "datacenter_id"))
    pending = [job for job in stale if job.state == JobState.PENDING]
    jobs_transition(pending, JobState.QUEUED, dict.fromkeys((j.pk for j in pending), reason))
    requeued = [job.pk for job in stale if job.state != JobState.PENDING]
    if requeued:
        Job.objects.filter(pk__in=requeued).update(state_reason=reason)
        jobs_changed(blocker.owner_id, blocker.datacenter_id, requeued)


def waiting_queues(**filters) -> list[tuple[int, int]]:
    """The (owner id, datacenter id) of every queue with jobs waiting, or with elastic jobs
    that may grow, among ``filters``: those ``quota_admit`` may have work for. (Unordered:
    with the jobs' default order, DISTINCT would give one row per job.)

    Filtered to one queue (``owner_id`` and ``datacenter_id``), as the ``jobs_admit`` task
    reads it before admitting: two plain reads."""
    if "owner_id" in filters and "datacenter_id" in filters:
        queue = (filters["owner_id"], filters["datacenter_id"])
        # Two plain reads, the second seldom, cost less than building their union.
        if (Job.objects.filter(state__in=WAITING_STATES, **filters).exists()
                or _growing(**filters).exists()):
            return [queue]
        return []
    waiting = Job.objects.filter(state__in=WAITING_STATES, **filters)
    return list(waiting.order_by().values_list("owner_id", "datacenter_id")
                .union(_growing(**filters).order_by()
                       .values_list("owner_id", "datacenter_id")))


def admission_request(owner_id: int, datacenter_id: int) -> None:
    """Have the queue's waiting jobs admitted (the ``jobs_admit`` task) once the current
    transaction commits — unless an admission of the queue is queued already and has not yet
    read it (the task claims it first): that one sees this change too. So jobs of one user ending in
    a burst cost one admission, not one each, and a worker never waits on the user's lock
    only to find nothing more to admit."""
    task_later_once(JOBS_ADMIT, owner_id, datacenter_id)


def job_ended_admit(sender, owner_id: int, datacenter_id: int, **kwargs) -> None:
    """Jobs ended (``signals.job_ended``): what they held, or their places in the queue, is
    free — admit the owner's waiting jobs once that is committed."""
    admission_request(owner_id, datacenter_id)


def quota_changed_admit(sender, user, datacenter, **kwargs) -> None:
    """A quota changed: admit what now fits, for the user or (a default changed) for everyone
    in the datacenter with jobs waiting. Runs after the change is committed."""
    owners = {"owner": user} if user is not None else {}
    for owner_id, datacenter_id in waiting_queues(datacenter=datacenter, **owners):
        admission_request(owner_id, datacenter_id)


def jobs_ahead(owner, datacenter, created_at, pk):
    """The same user's waiting jobs submitted before this one (values or ``OuterRef``s)."""
    return (Job.objects.filter(owner=owner, datacenter=datacenter, state__in=WAITING_STATES)
            .filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk)))


def queue_ahead_annotation() -> Subquery:
    """For a list of jobs: how many waiting jobs are ahead of each (one query for the list)."""
    ahead = jobs_ahead(OuterRef("owner"), OuterRef("datacenter"), OuterRef("created_at"),
                       OuterRef("id"))
    return Subquery(ahead.order_by().values("owner").annotate(n=Count("id")).values("n"))


def queue_position(job) -> int | None:
    """1 for the user's next job to start, 2 behind it, …; None unless the job waits."""
    if job.state not in WAITING_STATES:
        return None
    if hasattr(job, "queue_ahead"):  # annotated by the list
        return (job.queue_ahead or 0) + 1
    return jobs_ahead(job.owner_id, job.datacenter_id, job.created_at, job.pk).count() + 1


def quota_report(user, datacenter) -> dict[str, dict]:
    """Every resource's limit and what is used of it (``queued``: the jobs that wait; storage
    from the PFS, with what uploads in progress reserve), for the API and ``paddlectl get
    quota``."""
    quota = quota_get(user, datacenter)
    used = quota_used(user.pk, datacenter.pk)
    used_values = {r: getattr(used, r) for r in COMPUTE}
    used_values["queued"] = Job.objects.filter(owner=user, datacenter=datacenter,
                                               state__in=WAITING_STATES).count()
    storage = usage_report(user, datacenter)
    used_values["storage"] = storage.used
    report = {}
    for resource in QUOTA_RESOURCES:
        limit, value = getattr(quota, resource), used_values[resource]
        report[resource] = {"limit": SHOWN[resource](limit), "limit_value": limit,
                            "used": SHOWN_USED[resource](value), "used_value": value}
    report["storage"].update(reserved=SHOWN_USED["storage"](storage.reserved),
                             reserved_value=storage.reserved)
    return report
