"""Budgets of GPU-hours and CPU-hours over time (``accounts.Budget``), measured from replicas'
actual run time: what a user or a group has used in a budget's window, whether it is spent
(admission holds their waiting jobs: ``budgets_spent``, read into the scheduling model's
``Pool.blocked``), which running jobs overran one (the reconciler warns them and, after the
datacenter's grace, stops them: ``budget_overruns``), and the report the API, ``paddlectl
get quota`` and the Quota page show, with the use over the window for a chart.

Use is read from the usage ledger (``jobs.usage``): a row per run of a replica, what it held
(its job's ``cpu`` and ``gpu`` for a trainer, ``pscpu`` for a parameter server) from its start
to its end (or now), wherever that falls in the window. Deleting a job does not reach it.
Of that use, what runs lost to restarts (``Usage.lost_seconds``: trained since their job's last
checkpoint, the end of each such run) is shown as ``lost``."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import Q
from django.utils import timezone

from accounts.models import Budget, Datacenter, Membership
from jobs.models import Job, Usage
from jobs.states import JobState

LENGTHS = {"day": timedelta(days=1), "week": timedelta(days=7), "month": timedelta(days=30)}
ROLLING_WORDS = {"day": "in the last 24 hours", "week": "in the last 7 days",
                 "month": "in the last 30 days"}
CALENDAR_WORDS = {"day": "today", "week": "this week", "month": "this month"}
# The chart's bars: an hour each over a day, a day each over a week or a month.
BUCKETS = {"day": timedelta(hours=1), "week": timedelta(days=1), "month": timedelta(days=1)}


def window_of(budget: Budget, now: datetime) -> tuple[datetime, str]:
    """When the budget's window began, and the window in words."""
    if budget.kind == Budget.Kind.ROLLING:
        return now - LENGTHS[budget.window], ROLLING_WORDS[budget.window]
    return period_start(now, budget.window), CALENDAR_WORDS[budget.window]


def period_start(at: datetime, period: str) -> datetime:
    """When the calendar ``period`` (day, week from Monday, month; UTC) holding ``at`` began:
    a calendar budget's window, a usage report's row."""
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return {"day": day, "week": day - timedelta(days=day.weekday()),
            "month": day.replace(day=1)}[period]


def owners_of(budget: Budget) -> list[int]:
    """The users whose jobs count against the budget."""
    if budget.user_id:
        return [budget.user_id]
    return list(Membership.objects.filter(team_id=budget.team_id).values_list("user_id",
                                                                             flat=True))


@dataclass(frozen=True)
class Use:
    cpu_hours: float
    gpu_hours: float
    series: list[tuple[datetime, float, float]]  # (bucket start, CPU-hours, GPU-hours)
    lost_cpu_hours: float = 0.0  # of cpu_hours, trained since a checkpoint and lost
    lost_gpu_hours: float = 0.0


def use(budget: Budget, now: datetime) -> Use:
    """What the budget's owners used in its window: the runs in the usage ledger that overlap
    it (every run of a restarted replica is a run of its own; one still going runs to now),
    their time there times the CPUs and GPUs they held, in all and bucket by bucket. The
    ledger outlives the jobs: a job deleted, by its owner or its TTL, still counts."""
    start, _ = window_of(budget, now)
    step = BUCKETS[budget.window]
    edges = [start + i * step for i in range(int((now - start) / step) + 1)] + [now]
    cpu = [0.0] * (len(edges) - 1)
    gpu = [0.0] * (len(edges) - 1)
    lost_cpu = lost_gpu = 0.0
    runs = ledger_runs(budget.datacenter_id, owners_of(budget), start, now)
    for first, last, cores, gpus, lost in runs.values_list("started_at", "ended_at", "cpu", "gpu",
                                                           "lost_seconds"):
        for index, cpu_hours, gpu_hours in run_hours(first, last, cores, gpus, edges):
            cpu[index] += cpu_hours
            gpu[index] += gpu_hours
        if (lost_use := lost_hours(first, last, cores, gpus, lost, start, now)) is not None:
            lost_cpu += lost_use[0]
            lost_gpu += lost_use[1]
    return Use(sum(cpu), sum(gpu), [(edges[i], cpu[i], gpu[i]) for i in range(len(cpu))],
               lost_cpu, lost_gpu)


def ledger_runs(datacenter_id: int, owner_ids: Iterable[int], start: datetime, end: datetime):
    """The runs in the usage ledger of ``owner_ids`` in the datacenter that overlap ``start``
    to ``end`` and held something (a master holds nothing counted): what budgets and the
    usage reports (``scheduling.reports``) are summed from."""
    return (Usage.objects.filter(datacenter_id=datacenter_id, owner_id__in=owner_ids,
                                 started_at__lt=end)
            .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
            .filter(Q(cpu__gt=0) | Q(gpu__gt=0)))


def lost_hours(first: datetime, last: datetime | None, cores: int, gpus: int,
               lost_seconds: float | None, start: datetime,
               end: datetime) -> tuple[float, float] | None:
    """What a restart lost of a run (``Usage.lost_seconds``: the time it trained since its
    job's last complete checkpoint, before it ended) within ``start`` to ``end``, as
    (CPU-hours, GPU-hours); None when it lost nothing recorded. Budgets and the usage reports
    count it so."""
    if not lost_seconds or last is None:
        return None
    lost_from = max(first, last - timedelta(seconds=lost_seconds))
    hours = list(run_hours(lost_from, last, cores, gpus, [start, end]))
    return sum(cpu for _, cpu, _ in hours), sum(gpu for _, _, gpu in hours)


def run_hours(first: datetime, last: datetime | None, cores: int, gpus: int,
              edges: list[datetime]) -> Iterator[tuple[int, float, float]]:
    """A run's use bucket by bucket, ``edges`` being the buckets' starts and the last one's
    end (a run still going runs to it): (bucket, CPU-hours, GPU-hours) for each bucket it
    spans, its time there times the millicores and GPUs it held. The one rule budgets and
    usage reports count by."""
    first, last = max(first, edges[0]), min(last or edges[-1], edges[-1])
    while first < last:
        index = bisect_right(edges, first) - 1
        edge = min(last, edges[index + 1])
        hours = (edge - first).total_seconds() / 3600
        yield index, cores / 1000 * hours, gpus * hours
        first = edge


def _spent(budget: Budget, used: Use) -> list[str]:
    """Each resource of which the budget is used up, in words with the numbers."""
    _, words = window_of(budget, timezone.now())
    out = []
    for name, limit, value in (("GPU-hours", budget.gpu_hours, used.gpu_hours),
                               ("CPU-hours", budget.cpu_hours, used.cpu_hours)):
        if limit is not None and Decimal(str(round(value, 3))) >= limit:
            out.append(f"{value:.1f} of {float(limit):g} {name} used {words} ({budget.kind})")
    return out


def _budgets(datacenter, owner_ids) -> dict[int, list[Budget]]:
    """The budgets each of ``owner_ids`` counts against in the datacenter: their own and
    their group's."""
    teams = dict(Membership.objects.filter(datacenter=datacenter, user_id__in=owner_ids,
                                           team__isnull=False)
                 .values_list("user_id", "team_id"))
    found = list(Budget.objects.filter(datacenter=datacenter).filter(
        Q(user_id__in=owner_ids) | Q(team_id__in=set(teams.values())))
        .select_related("team"))
    return {owner: [b for b in found if b.user_id == owner
                    or (b.team_id is not None and b.team_id == teams.get(owner))]
            for owner in owner_ids}


def budgets_spent(datacenter, owner_ids) -> dict[int, str]:
    """Each of ``owner_ids`` whose own budget or whose group's is spent, with why: their
    waiting jobs wait for it (``Pool.blocked``)."""
    return {owner: f"waiting for {whose}: {details}"
            for owner, (whose, details) in _spent_by_owner(datacenter, owner_ids).items()}


def _spent_by_owner(datacenter, owner_ids) -> dict[int, tuple[str, str]]:
    """Each of ``owner_ids`` whose budget (or group's) is spent: whose, and the numbers. One
    query when the datacenter has no budgets."""
    owner_ids = list(owner_ids)
    if not owner_ids or not Budget.objects.filter(datacenter=datacenter).exists():
        return {}
    now = timezone.now()
    measured: dict[int, Use] = {}
    out = {}
    for owner, budgets in _budgets(datacenter, owner_ids).items():
        for budget in budgets:
            if budget.pk not in measured:
                measured[budget.pk] = use(budget, now)
            if spent := _spent(budget, measured[budget.pk]):
                whose = f"group {budget.team.name}'s budget" if budget.team_id else "budget"
                out[owner] = (whose, "; ".join(spent))
                break
    return out


def budget_overruns() -> list[tuple[Job, Datacenter, str]]:
    """The running jobs whose owner's (or group's) budget is spent, each with its datacenter
    and why; and the jobs warned before whose budget is no longer spent (raised, or the
    window moved on) are cleared."""
    out = []
    for datacenter in Datacenter.objects.filter(budgets__isnull=False).distinct():
        active = list(Job.objects.filter(datacenter=datacenter,
                                         state__in=(JobState.STARTING, JobState.RUNNING)))
        spent = _spent_by_owner(datacenter, {job.owner_id for job in active})
        cleared = [job.pk for job in active if job.owner_id not in spent
                   and job.budget_warned_at is not None]
        Job.objects.filter(pk__in=cleared).update(budget_warned_at=None)
        out += [(job, datacenter, "{} spent: {}".format(*spent[job.owner_id]))
                for job in active if job.owner_id in spent]
    return out


def budget_report(user, datacenter) -> list[dict]:
    """The user's budgets and their group's in the datacenter: the window, each limit, what is
    used and what is left, and the use bucket by bucket (for a chart)."""
    now = timezone.now()
    report = []
    for budget in _budgets(datacenter, [user.pk])[user.pk]:
        used = use(budget, now)
        start, words = window_of(budget, now)
        entry = {"whose": f"group {budget.team.name}" if budget.team_id else "you",
                 "window": budget.window, "kind": budget.kind, "since": start.isoformat(),
                 "in_words": words}
        for key, limit, value, lost in (
                ("gpu_hours", budget.gpu_hours, used.gpu_hours, used.lost_gpu_hours),
                ("cpu_hours", budget.cpu_hours, used.cpu_hours, used.lost_cpu_hours)):
            entry[key] = None if limit is None else {
                "limit": float(limit), "used": round(value, 2),
                "left": round(max(float(limit) - value, 0.0), 2), "lost": round(lost, 2)}
        entry["series"] = [{"start": at.isoformat(), "cpu_hours": round(c, 3),
                            "gpu_hours": round(g, 3)} for at, c, g in used.series]
        report.append(entry)
    return report
