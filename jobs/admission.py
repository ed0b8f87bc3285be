"""Quota admission: which jobs may start now, which wait in ``queued``, which can never run.

A job's request is what all its replicas ask for together (trainers x cpu + pservers x pscpu,
and so on) plus one concurrent job. Jobs that are ``starting`` or ``running`` hold their
request; the rest of the quota is free. Each user's waiting jobs (``pending``, ``queued``) are
admitted strictly in the order they were submitted, so a small job never overtakes a big one
of the same user.

``quota_admit`` is the one place jobs are admitted. It runs under a lock on the user's row, so
two submissions racing for the last free CPU are admitted one after the other and the second
sees the first's (on PostgreSQL, a ``SELECT … FOR UPDATE``; SQLite has one writer anyway). It
is called by a submission, when a job ends, when a quota changes, and by the reconciler.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, F, OuterRef, Q, Subquery, Sum

from accounts.models import QUOTA_RESOURCES, Datacenter
from accounts.selectors import quota_get
from paddlecloud.errors import ValidationError
from paddlecloud.quantity import format_bytes, format_cpu

from .live import job_changed
from .models import Job
from .states import JobState
from .transitions import job_transition

ACTIVE_STATES = (JobState.STARTING, JobState.RUNNING)
WAITING_STATES = (JobState.PENDING, JobState.QUEUED)
COMPUTE = ("cpu", "memory", "gpu", "jobs")
SHOWN = {"cpu": format_cpu, "memory": format_bytes, "gpu": str, "jobs": str,
         "storage": format_bytes}
UNITS = {"cpu": " CPU", "memory": "", "gpu": " GPU"}


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
    """A job's (or a spec's) request; the two have the same fields."""
    return Request(cpu=job.trainers * job.cpu + job.pservers * job.pscpu,
                   memory=job.trainers * job.memory + job.pservers * job.psmemory,
                   gpu=job.trainers * job.gpu)


def _breakdown(job, resource: str) -> str:
    """How a job's total of ``resource`` is made up, as users wrote it."""
    if resource == "jobs":
        return ""
    per_trainer = getattr(job, resource)
    parts = [f"{job.trainers} trainer{'s' if job.trainers != 1 else ''} x "
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


def quota_used(user_id: int, datacenter_id: int) -> Request:
    """What the user's active jobs in the datacenter hold now (one query)."""
    totals = Job.objects.filter(owner_id=user_id, datacenter_id=datacenter_id,
                                state__in=ACTIVE_STATES).aggregate(
        cpu=Sum(F("trainers") * F("cpu") + F("pservers") * F("pscpu")),
        memory=Sum(F("trainers") * F("memory") + F("pservers") * F("psmemory")),
        gpu=Sum(F("trainers") * F("gpu")),
        jobs=Count("id"))
    return Request(**{r: totals[r] or 0 for r in COMPUTE})


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
    was lowered) fails with the reason rather than block the queue forever."""
    user = get_user_model().objects.select_for_update().get(pk=user_id)
    datacenter = Datacenter.objects.get(pk=datacenter_id)
    quota = quota_get(user, datacenter)
    used = quota_used(user_id, datacenter_id)
    admitted: list[int] = []
    blocked_by = None  # the first job that does not fit: everything after it waits too
    waiting = (Job.objects.filter(owner_id=user_id, datacenter_id=datacenter_id,
                                  state__in=WAITING_STATES).order_by("created_at", "id"))
    for job in waiting:
        asked = job_request(job)
        if problems := quota_problems(job, quota):
            job_transition(job, JobState.FAILED, "can never start: " + "; ".join(
                f"{k}: {v}" for k, v in problems.items()))
        elif blocked_by is None and _fits(used + asked, quota):
            job_transition(job, JobState.STARTING, "admitted: its quota is free")
            used = used + asked
            admitted.append(job.pk)
        else:
            reason = (f"waiting for quota: {_short_of(used, asked, quota)}"
                      if blocked_by is None else f"waiting behind job {blocked_by}")
            blocked_by = blocked_by or job.name
            _queue(job, reason)
    if admitted:
        transaction.on_commit(lambda: _queue_starts(admitted))
    return admitted


def _queue(job, reason: str) -> None:
    """Put the job in ``queued``, or give a queued job its current reason."""
    if job.state == JobState.PENDING:
        job_transition(job, JobState.QUEUED, reason)
    elif job.state_reason != reason:
        Job.objects.filter(pk=job.pk).update(state_reason=reason)
        job_changed(job.pk)


def _queue_starts(job_ids: list[int]) -> None:
    from .tasks import job_start

    for job_id in job_ids:
        job_start.delay(job_id)


def admission_later(user_id: int, datacenter_id: int | None = None) -> None:
    """Run admission for the user (in one datacenter, or all) once the current transaction
    commits: a job ended, or a quota changed."""
    def queue():
        from .tasks import jobs_admit

        jobs_admit.delay(user_id, datacenter_id)

    transaction.on_commit(queue)


def waiting_queues(**filters) -> list[tuple[int, int]]:
    """The (owner id, datacenter id) of every queue with jobs waiting, among ``filters``."""
    return list(Job.objects.filter(state__in=WAITING_STATES, **filters)
                .values_list("owner_id", "datacenter_id").distinct())


def quota_changed_admit(sender, user, datacenter, **kwargs) -> None:
    """A quota changed: admit what now fits, for the user or (a default changed) for everyone
    in the datacenter with jobs waiting. Runs after the change is committed."""
    from .tasks import jobs_admit

    owners = {"owner": user} if user is not None else {}
    for owner_id, datacenter_id in waiting_queues(datacenter=datacenter, **owners):
        jobs_admit.delay(owner_id, datacenter_id)


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
    """Every resource's limit and what is used of it (storage from the PFS, with what uploads
    in progress reserve), for the API and ``paddlectl get quota``."""
    from pfs.services import usage_report

    quota = quota_get(user, datacenter)
    used = quota_used(user.pk, datacenter.pk)
    used_values = {r: getattr(used, r) for r in COMPUTE}
    storage = usage_report(user, datacenter)
    used_values["storage"] = storage.used
    report = {}
    for resource in QUOTA_RESOURCES:
        limit, value = getattr(quota, resource), used_values[resource]
        report[resource] = {"limit": SHOWN[resource](limit), "limit_value": limit,
                            "used": SHOWN[resource](value), "used_value": value}
    report["storage"].update(reserved=format_bytes(storage.reserved),
                             reserved_value=storage.reserved)
    return report
