"""Admission: which jobs may start now, which wait in ``queued`` (and why), which can never run.

A job's request is what all its replicas ask for together (trainers x cpu + pservers x pscpu,
and so on) plus one concurrent job. Jobs that are ``starting`` or ``running`` hold their
request. Who starts is the scheduling model's plan (``paddlecloud_core.scheduling``, README
"Scheduling"): a job fits its owner's quota, their group's and the datacenter's capacity;
fair share picks whose job goes next; a user's queue goes by priority, then submission time;
a job behind one that waits starts first only where it cannot delay it (backfill). At most
``queued`` of a user's jobs may wait: a submission that would wait beyond that is refused. A
job that runs after others (``dependencies``) is in no queue until they have ended as it
asks: it waits ``queued``, holding nothing, with that reason.

``quota_admit`` is the one place jobs are admitted. It loads the datacenter's pool
(``pool``) and applies the plan under a lock — the user's row, or, where members share a
capacity or groups, the datacenter's — so two admissions racing for the last free CPU take
it one after the other (on PostgreSQL, a ``SELECT … FOR UPDATE``; SQLite has one writer
anyway). It is called by a submission, when a job ends, when a quota, a group, a budget or
the capacity changes, and by the reconciler, so its cost is bounded by what changed, not by
how many jobs wait: it reads each queue's head and ``LOOK_BEHIND`` jobs more, and touches the
jobs behind them in a few bulk statements, only where their state or reason changes.

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
from collections import Counter
from collections.abc import Iterable
from functools import reduce

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Count, Exists, F, OuterRef, Q, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce, Least
from django.utils import timezone

from accounts.models import QUOTA_FORMATS, QUOTA_RESOURCES, Datacenter, Membership, Team
from accounts.selectors import quota_get, quotas_get
from jobs.models import Job, JobDependency, Replica
from jobs.notify import jobs_changed
from jobs.starts import starts_later
from jobs.states import ACTIVE_STATES, WAITING_STATES, JobState, ReplicaState
from jobs.transitions import jobs_transition
from kernel.errors import ValidationError
from kernel.queue import (
    HOME_MEASURE,
    JOB_SYNC,
    JOBS_ADMIT,
    task_later,
    task_later_for,
)
from paddlecloud_core.contract import trainers_elastic, trainers_least
from paddlecloud_core.quantity import format_bytes_about
from paddlecloud_core.scheduling import LOOK_BEHIND, Vec, schedule
from pfs.services import usage_report

from .dependencies import UNMET, dependency_reasons
from .pool import (
    HEAD_FIELDS,
    QUEUE_ORDER,
    REQUEST_FIELDS,
    ahead_of,
    behind,
    held_vec,
    pool_load,
    request_vec,
    shared,
)

COMPUTE = ("cpu", "memory", "gpu", "jobs")
SHOWN = QUOTA_FORMATS
# What is used, for people: bytes to about three digits (19.1Mi), as the Files page shows them.
SHOWN_USED = {**QUOTA_FORMATS, "memory": format_bytes_about, "storage": format_bytes_about}
UNITS = {"cpu": " CPU", "memory": "", "gpu": " GPU"}
# What admission reads of a datacenter.
CAPACITY_FIELDS = ("id", "name", "capacity_cpu", "capacity_memory", "capacity_gpu",
                   "preempt_after")
# The trainers a waiting job needs to start (an elastic job's MIN); elastic jobs.
LEAST = Coalesce(F("trainers_min"), F("trainers"))
ELASTIC = Q(trainers_min__isnull=False, trainers_min__lt=F("trainers"))


def _request_sql(trainers) -> dict:
    return {"cpu": trainers * F("cpu") + F("pservers") * F("pscpu"),
            "memory": trainers * F("memory") + F("pservers") * F("psmemory"),
            "gpu": trainers * F("gpu")}


# A waiting job's request in SQL, as ``request_vec`` computes it in Python (jobs: one each).
ASKED = _request_sql(LEAST)


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
    asked = request_vec(job)
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


def capacity_problems(job, datacenter) -> dict[str, str]:
    """Each resource the job asks more of than the datacenter has in all (its capacity)."""
    asked = request_vec(job)
    problems = {}
    for resource, limit in datacenter.capacity.items():
        want = getattr(asked, resource)
        if limit is not None and want > limit:
            fmt = SHOWN[resource]
            problems[resource] = (
                f"the job asks for {fmt(want)}{UNITS[resource]} in all"
                f"{_breakdown(job, resource)}, more than datacenter {datacenter.name!r} has "
                f"for all jobs together ({fmt(limit)}{UNITS[resource]})")
    return problems


def quota_fit_problems(user, datacenter, job) -> tuple[dict[str, str], str]:
    """Why a job can never fit the user's quota or the datacenter's capacity, by resource,
    and the error's code; no problem: ``{}``."""
    problems = quota_problems(job, quota_get(user, datacenter))
    if problems:
        return problems, "over_quota"
    return capacity_problems(job, datacenter), "over_capacity"


def quota_fit_check(user, datacenter, job) -> None:
    """Refuse at submission a job that can never fit the user's quota or the datacenter's
    capacity, naming each resource."""
    problems, code = quota_fit_problems(user, datacenter, job)
    if problems:
        raise ValidationError("; ".join(f"{k}: {v}" for k, v in problems.items()),
                              fields={k: [v] for k, v in problems.items()}, code=code)


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
    if not waiting and _fits(quota_used(user.pk, datacenter.pk) + request_vec(job), quota):
        return  # it starts at once: it never waits
    if quota.queued:
        message = (f"{waiting} of your jobs already wait in datacenter "
                   f"{datacenter.name!r}, and your quota lets {quota.queued} wait at once; "
                   "submit it once some have started, or kill some")
    else:
        message = (f"your quota lets no job wait in datacenter {datacenter.name!r}, and this "
                   "one would: submit it once your running jobs leave room for it")
    raise ValidationError.for_field("queued", message, code="too_many_queued")


def quota_used(user_id: int, datacenter_id: int) -> Vec:
    """What the user's active jobs in the datacenter hold now (one query; summed here: they
    are at most the quota's ``jobs``, and the sum in SQL costs more to build than to run)."""
    active = Job.objects.filter(owner_id=user_id, datacenter_id=datacenter_id,
                                state__in=ACTIVE_STATES).only(*REQUEST_FIELDS, "trainers_held")
    return sum((held_vec(job) for job in active), Vec())


def _never_fits(quota) -> Q:
    """Waiting jobs (with their ``asked_*`` aliased) that ask for more than the whole quota;
    with a quota of no jobs, every one."""
    if quota.jobs < 1:
        return Q(pk__isnull=False)
    return reduce(operator.or_, (Q(**{f"asked_{r}__gt": getattr(quota, r)}) for r in ASKED))


def _never_fits_capacity(datacenter) -> Q:
    """Waiting jobs (``asked_*`` aliased) that ask for more than the datacenter has."""
    return reduce(operator.or_, (Q(**{f"asked_{r}__gt": limit})
                                 for r, limit in datacenter.capacity.items()
                                 if limit is not None), Q(pk__isnull=True))


def _fits(request: Vec, quota) -> bool:
    return all(getattr(request, r) <= getattr(quota, r) for r in COMPUTE)


@transaction.atomic
def quota_admit(user_id: int, datacenter_id: int) -> list[int]:
    """Admit what the scheduling model's plan (``paddlecloud_core.scheduling``) starts now in
    the user's queue (``queues_admit`` of that one queue). Returns the ids admitted."""
    return queues_admit([user_id], datacenter_id)


@transaction.atomic
def queues_admit(user_ids: Iterable[int], datacenter_id: int,
                 datacenter: Datacenter | None = None) -> list[int]:
    """Admit what the scheduling model's plan (``paddlecloud_core.scheduling``) starts now in
    the users' queues, or, in a datacenter with a capacity or groups, in every queue of it
    (one job's end may be another user's turn); give every job that waits its reason.
    Returns the ids admitted, whose start is queued once this commits. A waiting job that can
    no longer ever fit (its quota or the capacity was lowered) fails with the reason rather
    than block its queue forever.

    Under a lock: the users' rows (in id order), or in such a datacenter the datacenter's, so
    two admissions racing for the last free CPU take it one after the other. One pass for all
    the queues: a fixed number of queries however many queues and however many jobs wait in
    them (a few more when many are admitted at once, or where a queue's reasons change).
    ``datacenter``: the datacenter, read by the caller (``CAPACITY_FIELDS``)."""
    if datacenter is None:
        datacenter = Datacenter.objects.only(*CAPACITY_FIELDS).get(pk=datacenter_id)
    if shared(datacenter):
        Datacenter.objects.select_for_update().filter(pk=datacenter_id).exists()
        owner_ids = sorted(set(Job.objects.filter(datacenter_id=datacenter_id,
                                                  state__in=WAITING_STATES)
                               .order_by().values_list("owner_id", flat=True).distinct()))
    else:
        owner_ids = sorted(set(user_ids))
        list(get_user_model().objects.select_for_update().filter(pk__in=owner_ids)
             .order_by("pk").values_list("pk", flat=True))
    if not owner_ids:
        return []
    quotas = quotas_get(datacenter, owner_ids)
    active = Counter(Job.objects.filter(datacenter_id=datacenter_id, owner_id__in=owner_ids,
                                        state__in=ACTIVE_STATES)
                     .values_list("owner_id", flat=True))  # each owner's jobs that hold
    waiting = Job.objects.filter(owner_id__in=owner_ids, datacenter_id=datacenter_id,
                                 state__in=WAITING_STATES)
    _fail_never_fitting(waiting, quotas, datacenter)
    unmet = _queue_after(owner_ids, datacenter_id)
    looks = {}
    for owner_id in owner_ids:
        free_jobs = max(quotas[owner_id].jobs - active[owner_id], 0)
        looks[owner_id] = free_jobs + 1 + (LOOK_BEHIND if free_jobs else 0)
    heads: dict[int, list[Job]] = {owner_id: [] for owner_id in owner_ids}
    for job in _heads(datacenter_id, looks, unmet):
        heads[job.owner_id].append(job)
    head_jobs = {job.pk: job for jobs in heads.values() for job in jobs}
    plan = schedule(pool_load(datacenter, owner_ids, head_jobs.values(), quotas=quotas),
                    timezone.now().timestamp())
    admitted = [head_jobs[job_id] for job_id in plan.admit]
    jobs_transition(admitted, JobState.STARTING,
                    dict.fromkeys((job.pk for job in admitted), "admitted: its quota is free"))
    if admitted:
        Job.objects.filter(pk__in=[job.pk for job in admitted]).update(trainers_held=LEAST)
    never = [head_jobs[job_id] for job_id in plan.never]
    jobs_transition(never, JobState.FAILED, {k: v.message for k, v in plan.never.items()})
    _queue_all([head_jobs[job_id] for job_id in plan.reasons],
               {job_id: reason.message for job_id, reason in plan.reasons.items()})
    behind_read, through = {}, []
    for owner_id, jobs in heads.items():
        waits = [job for job in jobs if job.pk in plan.reasons]
        if waits:  # what was not read waits behind the first that waits
            behind_read[owner_id] = (waits[0], jobs[-1])
        else:
            through.append(owner_id)
    _queue_behind(behind_read, datacenter_id)
    if through:
        growing = set(_growing(owner_id__in=through, datacenter_id=datacenter_id).order_by()
                      .values_list("owner_id", flat=True).distinct())
        for owner_id in through:
            if owner_id in growing:
                _grow(owner_id, datacenter, quotas[owner_id])
    ids = [job.pk for job in admitted]
    starts_later(ids)
    return ids


def _heads(datacenter_id: int, looks: dict[int, int], unmet: bool) -> list[Job]:
    """The first ``looks[owner]`` jobs of each owner's queue in the datacenter (in their
    queue's order), locked: one statement for all the queues, each read by its own index
    scan (a lateral join over the owners), however long they are. With ``unmet``, the jobs
    that wait for jobs they run after are in no queue."""
    job_table, edges = Job._meta.db_table, JobDependency._meta.db_table
    # Table names and constants only: the values are parameters.
    after = (f" AND NOT EXISTS (SELECT 1 FROM {edges} d WHERE d.job_id = j.id "  # noqa: S608
             "AND NOT d.met)" if unmet else "")
    owners = list(looks)
    first = RawSQL(  # noqa: S611
        f"SELECT h.id FROM unnest(%s::bigint[], %s::integer[]) AS q(owner_id, look) "  # noqa: S608
        f"CROSS JOIN LATERAL (SELECT j.id FROM {job_table} j WHERE j.owner_id = q.owner_id "
        f"AND j.datacenter_id = %s AND j.state = ANY(%s){after} "
        f"ORDER BY j.priority DESC, j.created_at, j.id LIMIT q.look) h",
        (owners, [looks[owner] for owner in owners], datacenter_id, list(WAITING_STATES)))
    if connection.vendor != "postgresql":  # SQLite: a query per queue (one writer anyway)
        found = []
        for owner in owners:
            waiting = Job.objects.filter(owner_id=owner, datacenter_id=datacenter_id,
                                         state__in=WAITING_STATES)
            if unmet:
                waiting = waiting.exclude(UNMET)
            found += list(waiting.order_by(*QUEUE_ORDER).only(*HEAD_FIELDS)[:looks[owner]])
        return found
    # Still waiting once locked (one may have been killed meanwhile).
    return list(Job.objects.filter(pk__in=first, state__in=WAITING_STATES)
                .select_for_update().order_by("owner_id", *QUEUE_ORDER).only(*HEAD_FIELDS))


def _growing(**filters):
    """Active elastic jobs that hold fewer trainers than their MAX and may take more: none of
    their trainers has finished (the master has nothing more to hand out)."""
    finished = Replica.objects.filter(job=OuterRef("pk"), role=Replica.Role.TRAINER,
                                      state=ReplicaState.SUCCEEDED)
    return (Job.objects.filter(ELASTIC, state__in=ACTIVE_STATES,
                               trainers_held__lt=F("trainers"), **filters)
            .exclude(Exists(finished)))


def _grow(user_id: int, datacenter, quota) -> None:
    """Give the user's growing elastic jobs, oldest first, as many trainers as the free quota
    (and the datacenter's free capacity) has room for, up to each one's MAX. The engine starts
    them (their sync, queued here)."""
    used = quota_used(user_id, datacenter.pk)
    room = {r: getattr(quota, r) - getattr(used, r) for r in ("cpu", "memory", "gpu")}
    if shared(datacenter):
        active = Job.objects.filter(datacenter=datacenter, state__in=ACTIVE_STATES).only(
            *REQUEST_FIELDS, "trainers_held")
        everyone = sum((held_vec(job) for job in active), Vec())
        limits = [(datacenter.capacity, everyone)]
        team = Team.objects.filter(memberships__user_id=user_id,
                                   memberships__datacenter=datacenter).first()
        if team is not None:
            mates = Membership.objects.filter(team=team).values("user_id")
            limits.append((team.quota, sum((held_vec(job) for job in active.filter(
                owner_id__in=mates)), Vec())))
        for limit, held in limits:
            for r in room:
                if limit[r] is not None:
                    room[r] = min(room[r], limit[r] - getattr(held, r))
    grown = []
    for job in (_growing(owner_id=user_id, datacenter_id=datacenter.pk)
                .select_for_update(of=("self",)).order_by("created_at", "id")
                .only("id", "uid", "trainers", "trainers_held", "cpu", "memory", "gpu")):
        more = job.trainers - job.trainers_held
        for resource in ("cpu", "memory", "gpu"):
            each = getattr(job, resource)
            if each:
                more = min(more, max(room[resource], 0) // each)
        if more <= 0:
            continue
        Job.objects.filter(pk=job.pk).update(
            trainers_held=Least(F("trainers_held") + more, F("trainers")))
        for resource in room:
            room[resource] -= more * getattr(job, resource)
        grown.append(job.pk)
        task_later(JOB_SYNC, str(job.uid))
    if grown:
        jobs_changed(user_id, datacenter.pk, grown)


def _fail_never_fitting(waiting, quotas: dict, datacenter) -> None:
    """Fail the waiting jobs that ask for more than their owner's whole quota or the
    capacity (one was lowered): found with one query, whatever the length of the queues
    (owners of the same quota in one condition)."""
    alike: dict[tuple, list[int]] = {}
    for owner_id, quota in quotas.items():
        alike.setdefault(tuple(getattr(quota, r) for r in COMPUTE), []).append(owner_id)
    over = reduce(operator.or_, (Q(owner_id__in=owners) & _never_fits(quotas[owners[0]])
                                 for owners in alike.values()))
    never = waiting.alias(**{f"asked_{r}": e for r, e in ASKED.items()}).filter(
        over | _never_fits_capacity(datacenter))
    if not never.exists():  # nearly always: a plain read, no row locked, nothing built
        return
    doomed = list(never.select_for_update())
    reasons = {job.pk: "can never start: " + "; ".join(
        f"{k}: {v}" for k, v in {**capacity_problems(job, datacenter),
                                 **quota_problems(job, quotas[job.owner_id])}.items())
               for job in doomed}
    jobs_transition(doomed, JobState.FAILED, reasons)


def _queue_after(owner_ids: list[int], datacenter_id: int) -> bool:
    """Give the owners' waiting jobs that still wait for jobs they run after
    (``dependencies``), which are in no queue, that reason (a query; with such jobs, one
    more, and a statement or two where one's state or reason changes). Returns whether there
    are such jobs."""
    reasons = dependency_reasons(owner_ids, datacenter_id)
    if reasons:
        _queue_all(list(Job.objects.filter(pk__in=list(reasons)).select_for_update()
                        .only("id", "state", "state_reason", "owner_id", "datacenter_id")),
                   reasons)
    return bool(reasons)


def _queue_all(jobs: list[Job], reasons: dict[int, str]) -> None:
    """Give waiting jobs their reasons: pending ones are queued (an event each), queued ones
    whose reason changed get the new one (a statement for each reason)."""
    pending = [job for job in jobs if job.state == JobState.PENDING]
    jobs_transition(pending, JobState.QUEUED, {job.pk: reasons[job.pk] for job in pending})
    changed: dict[str, list[Job]] = {}
    for job in jobs:
        if job.state != JobState.PENDING and job.state_reason != reasons[job.pk]:
            changed.setdefault(reasons[job.pk], []).append(job)
    told: dict[tuple[int, int], list[int]] = {}
    for reason, group in changed.items():
        Job.objects.filter(pk__in=[job.pk for job in group]).update(state_reason=reason)
        for job in group:
            told.setdefault((job.owner_id, job.datacenter_id), []).append(job.pk)
    for (owner_id, datacenter_id), ids in told.items():
        jobs_changed(owner_id, datacenter_id, ids)


def _queue_behind(queues: dict[int, tuple[Job, Job]], datacenter_id: int) -> None:
    """In each owner's queue (``queues``: its first waiting job and the last one read), the
    jobs behind the last one read wait behind the first: jobs still pending are queued (one
    event each), queued jobs get the reason if they had another. Only the jobs that change are
    touched: one query for all the queues, and a statement or two where some change."""
    if not queues:
        return
    words = {owner_id: f"waiting behind job {first.name}"
             for owner_id, (first, _) in queues.items()}
    stale = list(Job.objects.filter(datacenter_id=datacenter_id, state__in=WAITING_STATES)
                 .exclude(UNMET).filter(reduce(operator.or_, (
                     Q(owner_id=owner_id) & behind(last)
                     & (Q(state=JobState.PENDING) | ~Q(state_reason=words[owner_id]))
                     for owner_id, (_, last) in queues.items())))
                 .select_for_update().only("id", "state", "owner_id", "datacenter_id"))
    pending = [job for job in stale if job.state == JobState.PENDING]
    jobs_transition(pending, JobState.QUEUED, {j.pk: words[j.owner_id] for j in pending})
    requeued: dict[int, list[int]] = {}
    for job in stale:
        if job.state != JobState.PENDING:
            requeued.setdefault(job.owner_id, []).append(job.pk)
    for owner_id, ids in requeued.items():
        Job.objects.filter(pk__in=ids).update(state_reason=words[owner_id])
        jobs_changed(owner_id, datacenter_id, ids)


def waiting_queues(**filters) -> list[tuple[int, int]]:
    """The (owner id, datacenter id) of every queue with jobs waiting, or with elastic jobs
    that may grow, among ``filters``: those ``quota_admit`` may have work for. In a datacenter
    whose members share a capacity or groups, any queue's admission plans them all, so one
    such queue stands for its datacenter. (Unordered: with the jobs' default order, DISTINCT
    would give one row per job.)

    Filtered to one queue (``owner_id`` and ``datacenter_id``), as the ``jobs_admit`` task
    reads it before admitting: a few plain reads. In a shared datacenter the queue has work if
    anyone's has: the job that ended may have been what another's waited for."""
    if "owner_id" in filters and "datacenter_id" in filters:
        queue = (filters["owner_id"], filters["datacenter_id"])
        if shared(Datacenter.objects.only(*CAPACITY_FIELDS).get(pk=filters["datacenter_id"])):
            filters = {"datacenter_id": filters["datacenter_id"]}
        # Two plain reads, the second seldom, cost less than building their union.
        if (Job.objects.filter(state__in=WAITING_STATES, **filters).exists()
                or _growing(**filters).exists()):
            return [queue]
        return []
    waiting = Job.objects.filter(state__in=WAITING_STATES, **filters)
    queues = list(waiting.order_by().values_list("owner_id", "datacenter_id")
                  .union(_growing(**filters).order_by()
                         .values_list("owner_id", "datacenter_id")))
    whole = {dc.pk for dc in Datacenter.objects.filter(pk__in={dc for _, dc in queues})
             .only(*CAPACITY_FIELDS) if shared(dc)}
    seen: set[int] = set()
    return [(owner, dc) for owner, dc in queues
            if dc not in whole or not (dc in seen or seen.add(dc))]


def owners_with_work(owner_ids: Iterable[int],
                     datacenter_id: int) -> tuple[list[int], Datacenter | None]:
    """Those of ``owner_ids`` whose queue in the datacenter ``queues_admit`` may have work for:
    jobs waiting, or elastic jobs that may grow (two plain reads). In a datacenter whose
    members share a capacity or groups, any queue's admission plans them all: there, they all
    have work if anyone's queue has (the job that ended may be what another's waited for).
    With the datacenter read (None: gone)."""
    owner_ids = sorted(set(owner_ids))
    datacenter = Datacenter.objects.filter(pk=datacenter_id).only(*CAPACITY_FIELDS).first()
    if not owner_ids or datacenter is None:
        return [], datacenter
    filters = {"datacenter_id": datacenter_id}
    if not shared(datacenter):
        filters["owner_id__in"] = owner_ids
    found = set(Job.objects.filter(state__in=WAITING_STATES, **filters).order_by()
                .values_list("owner_id", flat=True).distinct())
    if not shared(datacenter):
        found |= set(_growing(**filters).order_by().values_list("owner_id", flat=True)
                     .distinct())
    elif not found and _growing(**filters).exists():
        found = set(owner_ids)
    return (owner_ids if shared(datacenter) and found else sorted(found)), datacenter


def admission_request(owner_id: int, datacenter_id: int) -> None:
    """Have the queue's waiting jobs admitted once the current transaction commits: by the
    datacenter's ``jobs_admit`` task, which admits in one pass every queue of the datacenter
    asked for since it was queued (``kernel.queue.task_later_for``; it claims them before it
    reads them, so a request made after that queues it again). So jobs ending in a burst, of
    one user or of many, cost one admission, not one each, and a worker never waits on a
    user's lock only to find nothing more to admit."""
    task_later_for(JOBS_ADMIT, datacenter_id, owner_id)


def job_ended_admit(sender, owner_id: int, datacenter_id: int, **kwargs) -> None:
    """Jobs ended (``jobs.signals.job_ended``): what they held, or their places in the queue, is
    free — admit the owner's waiting jobs once that is committed."""
    admission_request(owner_id, datacenter_id)


def job_ended_measure(sender, owner_id: int, datacenter_id: int, **kwargs) -> None:
    """Jobs ended (``jobs.signals.job_ended``): what they wrote is in the owner's home; measure it
    (then admit), so the next upload, submission or start counts it. Ends in a burst, of one
    user or of many, cost one task for the datacenter (``kernel.queue.task_later_for``)."""
    task_later_for(HOME_MEASURE, datacenter_id, owner_id)


def quota_changed_admit(sender, user, datacenter, **kwargs) -> None:
    """A quota changed: admit what now fits, for the user or (a default changed) for everyone
    in the datacenter with jobs waiting. Runs after the change is committed."""
    owners = {"owner": user} if user is not None else {}
    for owner_id, datacenter_id in waiting_queues(datacenter=datacenter, **owners):
        admission_request(owner_id, datacenter_id)


def jobs_ahead(owner, datacenter, job):
    """The same user's waiting jobs before this one in its queue (``job`` has values or
    ``OuterRef``s)."""
    return (Job.objects.filter(owner=owner, datacenter=datacenter, state__in=WAITING_STATES)
            .filter(ahead_of(job)))


class _Outer:
    """A job's place in its queue as ``OuterRef``s, for ``ahead_of`` in a subquery."""

    priority, created_at, pk = OuterRef("priority"), OuterRef("created_at"), OuterRef("id")


def queue_ahead_annotation() -> Subquery:
    """For a list of jobs: how many waiting jobs are ahead of each (one query for the list)."""
    ahead = jobs_ahead(OuterRef("owner"), OuterRef("datacenter"), _Outer)
    return Subquery(ahead.order_by().values("owner").annotate(n=Count("id")).values("n"))


def queue_position(job) -> int | None:
    """1 for the user's next job to start, 2 behind it, …; None unless the job waits."""
    if job.state not in WAITING_STATES:
        return None
    if hasattr(job, "queue_ahead"):  # annotated by the list
        return (job.queue_ahead or 0) + 1
    return jobs_ahead(job.owner_id, job.datacenter_id, job).count() + 1


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
