"""Usage reports: GPU-hours, CPU-hours, jobs and the median wait per user, group or
datacenter, period by period (calendar days, weeks from Monday, months; UTC), for the API's
JSON and CSV, ``paddlectl get usage`` and the Usage page.

They are summed from the records budgets are (``budgets.ledger_runs``), by the same rule
(``budgets.run_hours``): a report over a calendar budget's window says what the budget says
was used. Who sees what: everyone their own use; a group lead (``Membership.lead``) their
group's members'; an admin everyone's in the datacenter."""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, datetime, timedelta
from statistics import median

from django.db.models import Min, Q
from django.utils import timezone

from accounts.models import Membership, Team, User
from jobs.models import Usage
from kernel.errors import ForbiddenError, ValidationError

from .budgets import ledger_runs, lost_hours, period_start, run_hours

PERIODS = ("day", "week", "month")
PER = ("user", "group", "datacenter")
DEFAULT_DAYS = 30  # a report with no ``since`` begins with the period 30 days ago
NO_GROUP = "-"  # the group of a member of none
COLUMNS = ("period", "user", "group", "datacenter", "jobs", "gpu_hours", "cpu_hours",
           "median_wait_seconds", "lost_gpu_hours", "lost_cpu_hours")


def next_period(start: datetime, by: str) -> datetime:
    """When the period that began at ``start`` ends."""
    if by == "month":
        return (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    return start + timedelta(days=1 if by == "day" else 7)


def period_edges(since: datetime, until: datetime, by: str) -> list[datetime]:
    """The periods' starts from the one holding ``since``, and ``until`` (the last one's end,
    cut there)."""
    edges = [period_start(since, by)]
    while (after := next_period(edges[-1], by)) < until:
        edges.append(after)
    return [*edges, until]


def _scope(user, datacenter, group: str | None, username: str | None, per: str):
    """The owners whose use the asker may see here, as a filter of the ledger's ``owner_id``,
    narrowed to ``group`` or ``username``; else the 403 that says what they may see."""
    teams = Team.objects.filter(datacenter=datacenter)
    if not user.is_staff:
        teams = teams.filter(memberships__user=user, memberships__lead=True)
    if group is not None:
        team = teams.filter(name=group).first()
        if team is None:
            if Team.objects.filter(datacenter=datacenter, name=group).exists():
                raise ForbiddenError.for_field(
                    "group", f"you do not lead group {group}: a group's report is its leads' "
                             "and the admins'")
            raise ValidationError.for_field("group", f"no group {group} in datacenter "
                                                     f"{datacenter.name}")
        owners = Membership.objects.filter(team=team).values("user_id")
    elif user.is_staff:
        owners = Usage.objects.filter(datacenter=datacenter).values("owner_id")
    else:
        owners = Membership.objects.filter(Q(team__in=teams) | Q(user=user),
                                           datacenter=datacenter).values("user_id")
    if per != "user" and not user.is_staff and not teams.exists():
        raise ForbiddenError.for_field("per", f"a report per {per} is for group leads and "
                                              "admins: yours is per user")
    if username is None:
        return owners
    if username == user.username:
        return [user.pk]
    if user.is_staff:
        owners = User.objects.all()
    narrowed = User.objects.filter(username=username, pk__in=owners).values("pk")
    if not narrowed.exists():
        raise ForbiddenError.for_field("user", f"{username}'s use is theirs, their group "
                                               "leads' and the admins' to see") \
            if not user.is_staff else ValidationError.for_field("user", f"no user {username}")
    return narrowed


def usage_report(user, datacenter, *, since: datetime | None = None,
                 until: datetime | None = None, by: str = "day", per: str = "user",
                 group: str | None = None, username: str | None = None,
                 now: datetime | None = None) -> dict:
    """The use ``user`` may see in the datacenter from the period holding ``since`` to
    ``until`` (now at most), period by period and per ``per``: a row for each period and
    user, group or the datacenter that ran something then, and the totals."""
    if by not in PERIODS:
        raise ValidationError.for_field("by", "day, week or month")
    if per not in PER:
        raise ValidationError.for_field("per", "user, group or datacenter")
    now = now or timezone.now()
    until = min(until or now, now)
    since = since or now - timedelta(days=DEFAULT_DAYS)
    if since >= until:
        raise ValidationError.for_field("since", "before until (and before now)")
    owners = _scope(user, datacenter, group, username, per)
    edges = period_edges(since, until, by)
    start = edges[0]
    runs = ledger_runs(datacenter.pk, owners, start, until).select_related("owner")
    members = dict(Membership.objects.filter(datacenter=datacenter, team__isnull=False)
                   .values_list("user_id", "team__name"))

    def key(owner_id: int, username: str) -> tuple[str, str]:
        if per == "datacenter":
            return "", ""
        group_name = members.get(owner_id, NO_GROUP)
        return (username if per == "user" else "", group_name)

    rows: dict[tuple, dict] = {}

    def row(index: int, who: tuple[str, str]) -> dict:
        return rows.setdefault((index, who), {
            "period": edges[index].astimezone(UTC).date().isoformat(), "user": who[0],
            "group": who[1], "datacenter": datacenter.name, "jobs": 0, "gpu_hours": 0.0,
            "cpu_hours": 0.0, "waits": [], "lost_gpu_hours": None, "lost_cpu_hours": None})

    for run in runs:
        who = key(run.owner_id, run.owner.username)
        for index, cpu_hours, gpu_hours in run_hours(run.started_at, run.ended_at, run.cpu,
                                                      run.gpu, edges):
            entry = row(index, who)
            entry["cpu_hours"] += cpu_hours
            entry["gpu_hours"] += gpu_hours
        if (lost := lost_hours(run.started_at, run.ended_at, run.cpu, run.gpu,
                               run.lost_seconds, edges[0], edges[-1])) is not None:
            # Counted in the period the lost run ended in (it restarted then).
            entry = row(_index(edges, run.ended_at or until), who)
            entry["lost_cpu_hours"] = (entry["lost_cpu_hours"] or 0.0) + lost[0]
            entry["lost_gpu_hours"] = (entry["lost_gpu_hours"] or 0.0) + lost[1]
    # A job counts in the period its first run began, with how long it waited for it.
    firsts = (Usage.objects.filter(datacenter=datacenter, owner_id__in=owners)
              .filter(Q(cpu__gt=0) | Q(gpu__gt=0))
              .values("job_key", "owner_id", "owner__username")
              .annotate(first=Min("started_at"), submitted=Min("submitted_at"))
              .filter(first__gte=start, first__lt=until))
    for job in firsts:
        entry = row(_index(edges, job["first"]), key(job["owner_id"], job["owner__username"]))
        entry["jobs"] += 1
        if job["submitted"] is not None:
            entry["waits"].append((job["first"] - job["submitted"]).total_seconds())
    out = [_shown(entry) for _, entry in sorted(rows.items(), key=lambda item: (
        item[0][0], item[0][1]))]
    total = {"jobs": sum(r["jobs"] for r in out),
             "gpu_hours": round(sum(e["gpu_hours"] for e in rows.values()), 4),
             "cpu_hours": round(sum(e["cpu_hours"] for e in rows.values()), 4),
             "median_wait_seconds": _median([w for e in rows.values() for w in e["waits"]])}
    return {"datacenter": datacenter.name, "by": by, "per": per,
            "since": start.isoformat(), "until": until.isoformat(),
            "periods": [edge.astimezone(UTC).date().isoformat() for edge in edges[:-1]],
            "rows": out, "total": total}


def _index(edges: list[datetime], at: datetime) -> int:
    """The period holding ``at`` (the first or the last for a time outside them)."""
    return min(max(bisect_right(edges, at) - 1, 0), len(edges) - 2)


def _median(waits: list[float]) -> float | None:
    return round(median(waits), 1) if waits else None


def _shown(entry: dict) -> dict:
    """A row as the API gives it: hours to 4 places (a report's and a budget's figures are
    the same sums, rounded alike), the wait's median in seconds."""
    out = {name: entry[name] for name in COLUMNS if name in entry}
    out["gpu_hours"] = round(entry["gpu_hours"], 4)
    out["cpu_hours"] = round(entry["cpu_hours"], 4)
    out["median_wait_seconds"] = _median(entry["waits"])
    for name in ("lost_gpu_hours", "lost_cpu_hours"):
        if entry[name] is not None:
            out[name] = round(entry[name], 4)
    return {name: out[name] for name in COLUMNS}
