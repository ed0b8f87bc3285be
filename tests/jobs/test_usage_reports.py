"""Usage reports (``scheduling.reports``, ``GET /api/v1/usage``): summed from the usage ledger
by the budgets' own rule, so a report over a calendar budget's window says what the budget
says; period by period (days, weeks, months) adding up to the whole; per user, group and
datacenter; yours, your group's as its lead, everyone's as an admin; CSV and JSON."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from accounts.models import Budget, Membership, Team
from accounts.services import quota_set, token_create
from jobs.models import Job, Usage
from scheduling.budgets import use
from scheduling.reports import usage_report
from tests.conftest import assert_error
from tests.jobs.test_budgets import hours_ago_within_a_day, ran
from tests.polling import wait

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)  # a Wednesday

SLEEPER = """\
import time
time.sleep(1.5)
"""


def client_of(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user).raw}")
    return client


def csv_rows(response) -> list[dict]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.mark.package(SLEEPER)
@pytest.mark.django_db(transaction=True)
def test_usage_csv_equals_the_budget_for_the_same_window(alice, datacenter, celery_worker,
                                                        submit):
    """Jobs run through the portal (the worker, the local backend, real processes); the
    report over today (a calendar day) says, to the figure, what alice's calendar-day budget
    and her group's say they used."""
    quota_set(None, datacenter, alice, cpu=8000, jobs=10)
    team = Team.objects.create(datacenter=datacenter, name="vision")
    Membership.objects.filter(user=alice, datacenter=datacenter).update(team=team, lead=True)
    mine = Budget.objects.create(datacenter=datacenter, user=alice, cpu_hours=100,
                                 window="day", kind="calendar")
    ours = Budget.objects.create(datacenter=datacenter, team=team, cpu_hours=100,
                                 window="day", kind="calendar")
    jobs = [submit("one", trainers=2, cpu="2"), submit("two", pservers=1, cpu="1", pscpu="0.5")]
    for job in jobs:
        wait(lambda job=job: Job.objects.get(pk=job.pk).state in ("succeeded", "failed"),
             message=lambda job=job: f"{job.name} still {Job.objects.get(pk=job.pk).state}")
        assert Job.objects.get(pk=job.pk).state == "succeeded"
    assert not Usage.objects.filter(owner=alice, ended_at__isnull=True).exists()

    api = client_of(alice)
    today = datetime.now(UTC).date().isoformat()
    rows = csv_rows(api.get(f"/api/v1/usage?since={today}&by=day&format=csv"))
    budgets = api.get("/api/v1/quota/budgets").json()
    assert [(r["period"], r["user"], r["group"], r["jobs"]) for r in rows] == [
        (today, "alice", "vision", "2")]
    now = datetime.now(UTC)
    figure = float(rows[0]["cpu_hours"])
    assert figure > 0
    assert figure == round(use(mine, now).cpu_hours, 4)
    assert round(figure, 2) == next(b["cpu_hours"]["used"] for b in budgets if b["whose"] == "you")
    # 2 trainers of 2 CPUs and a trainer of 1 CPU with a pserver of 0.5, each ~1.5 s or more.
    assert figure >= (2 * 2 + 1 + 0.5) * 1.5 / 3600 * 0.99
    group = csv_rows(api.get(f"/api/v1/usage?since={today}&per=group&format=csv"))
    assert [(r["group"], float(r["cpu_hours"])) for r in group] == [
        ("vision", round(use(ours, now).cpu_hours, 4))]
    assert float(rows[0]["median_wait_seconds"]) >= 0
    # The JSON says the same, with its totals.
    report = api.get(f"/api/v1/usage?since={today}").json()
    assert report["rows"][0]["cpu_hours"] == figure
    assert report["total"] == {"jobs": 2, "gpu_hours": 0.0, "cpu_hours": figure,
                               "median_wait_seconds": rows[0]["median_wait_seconds"]
                               and float(rows[0]["median_wait_seconds"])}
    assert report["rows"][0]["lost_cpu_hours"] is None  # nothing restarted: nothing lost


@pytest.mark.django_db
def test_days_weeks_and_months_add_up_to_the_whole(alice, datacenter):
    """Runs over three weeks, one across midnight and one across a month's end: each
    period's figures are the part of each run in it, and every way of cutting the window adds
    up to the same total, which is what a budget over it counts."""
    start = datetime(2026, 10, 28, tzinfo=UTC)  # a Wednesday, four days before November
    ran(alice, datacenter, "across-month", gpu=2, began=datetime(2026, 10, 31, 22, tzinfo=UTC),
        ended=datetime(2026, 11, 1, 2, tzinfo=UTC))  # 2 h in October, 2 h in November
    ran(alice, datacenter, "midnight", gpu=1, began=datetime(2026, 11, 10, 23, tzinfo=UTC),
        ended=datetime(2026, 11, 11, 1, tzinfo=UTC))
    ran(alice, datacenter, "still", gpu=1, cpu=4000, began=NOW - timedelta(hours=3))
    totals = {}
    for by in ("day", "week", "month"):
        report = usage_report(alice, datacenter, since=start, by=by, now=NOW)
        totals[by] = (round(sum(r["gpu_hours"] for r in report["rows"]), 4),
                      round(sum(r["cpu_hours"] for r in report["rows"]), 4),
                      sum(r["jobs"] for r in report["rows"]))
        assert (report["total"]["gpu_hours"], report["total"]["cpu_hours"],
                report["total"]["jobs"]) == totals[by]
    assert totals["day"] == totals["week"] == totals["month"] == (4 * 2 + 2 + 3, 4 + 2 + 12, 3)
    days = {r["period"]: r["gpu_hours"] for r in usage_report(
        alice, datacenter, since=start, by="day", now=NOW)["rows"]}
    assert days["2026-10-31"] == 4 and days["2026-11-01"] == 4
    assert days["2026-11-10"] == 1 and days["2026-11-11"] == 1 and days["2026-11-25"] == 3
    months = usage_report(alice, datacenter, since=start, by="month", now=NOW)
    assert [(r["period"], r["gpu_hours"], r["jobs"]) for r in months["rows"]] == [
        ("2026-10-01", 4.0, 1), ("2026-11-01", 4.0 + 2 + 3, 2)]
    weeks = usage_report(alice, datacenter, since=start, by="week", now=NOW)
    assert weeks["periods"] == ["2026-10-26", "2026-11-02", "2026-11-09", "2026-11-16",
                                "2026-11-23"]
    # What a calendar month's budget counts is November's row.
    budget = Budget(datacenter=datacenter, user=alice, window="month", kind="calendar")
    assert round(use(budget, NOW).gpu_hours, 4) == months["rows"][1]["gpu_hours"]


@pytest.mark.django_db
def test_what_restarts_lost_is_its_own_column_and_what_the_budget_counts(alice, datacenter):
    """A run ended by a restart 20 min after its job's last checkpoint lost those 20 min
    (``Usage.lost_seconds``, as the restart recorded it): the report's "lost to restarts"
    columns, in the period the run ended in, are what the budget counts as lost."""
    began = NOW - timedelta(hours=5)
    ran(alice, datacenter, "restarted", gpu=2, cpu=4000, began=began,
        ended=began + timedelta(hours=2))
    Usage.objects.filter(job_name="restarted").update(lost_seconds=1200, lost_steps=40)
    ran(alice, datacenter, "clean", gpu=1, began=began, ended=began + timedelta(hours=1))
    report = usage_report(alice, datacenter, since=NOW - timedelta(days=1), by="day", now=NOW)
    (row,) = report["rows"]
    assert (row["lost_gpu_hours"], row["lost_cpu_hours"]) == (  # 4 decimals, as every figure
        round(2 * 20 / 60, 4), round(4 * 20 / 60, 4))
    spent = use(Budget(datacenter=datacenter, user=alice, window="day", kind="calendar"), NOW)
    assert (round(spent.lost_gpu_hours, 4), round(spent.lost_cpu_hours, 4)) == (
        row["lost_gpu_hours"], row["lost_cpu_hours"])


@pytest.mark.django_db
def test_who_sees_whose_use(alice, make_user, datacenter, api):
    """alice sees her own; bob, who leads group vision, sees its members' (alice's too) and
    the group's total; carol, in no group she leads, gets a 403 for another's or the group's;
    an admin sees everyone's, per datacenter too."""
    bob, carol = make_user("bob"), make_user("carol")
    root = make_user("root", staff=True)
    team = Team.objects.create(datacenter=datacenter, name="vision")
    Membership.objects.filter(user__in=[alice, bob], datacenter=datacenter).update(team=team)
    Membership.objects.filter(user=bob, datacenter=datacenter).update(lead=True)
    began = hours_ago_within_a_day(3, timedelta(hours=1))
    for owner, gpu in ((alice, 1), (bob, 2), (carol, 4)):
        ran(owner, datacenter, f"{owner.username}-job", gpu=gpu, began=began,
            ended=began + timedelta(hours=1))

    def seen(user, query=""):
        response = client_of(user).get(f"/api/v1/usage?{query}")
        assert response.status_code == 200, response.content
        return {(r["user"], r["group"]): r["gpu_hours"] for r in response.json()["rows"]}

    assert seen(alice) == {("alice", "vision"): 1.0}
    assert seen(carol) == {("carol", "-"): 4.0}
    assert seen(bob) == {("alice", "vision"): 1.0, ("bob", "vision"): 2.0}
    assert seen(bob, "per=group") == {("", "vision"): 3.0}
    assert seen(bob, "user=alice") == {("alice", "vision"): 1.0}
    assert seen(root) == {("alice", "vision"): 1.0, ("bob", "vision"): 2.0,
                          ("carol", "-"): 4.0}
    assert seen(root, "per=datacenter") == {("", ""): 7.0}
    assert seen(root, "group=vision&per=group") == {("", "vision"): 3.0}
    for who, query, field in ((carol, "user=alice", "user"), (alice, "group=vision", "group"),
                              (carol, "per=group", "per"), (bob, "user=carol", "user")):
        assert_error(client_of(who).get(f"/api/v1/usage?{query}"), 403, "permission_denied",
                     field)
    assert_error(client_of(alice).get("/api/v1/usage?by=year"), 400, "invalid", "by")
    # An export's errors are JSON too: the one error shape, which paddlectl reads.
    assert_error(client_of(alice).get("/api/v1/usage?group=vision&format=csv"), 403,
                 "permission_denied", "group")
    assert_error(client_of(alice).get("/api/v1/usage?since=yesterday"), 400, "invalid",
                 "since")
    empty = client_of(carol).get("/api/v1/usage?since=2020-01-01&until=2020-01-02&format=csv")
    assert empty.content.decode().splitlines() == [
        "period,user,group,datacenter,jobs,gpu_hours,cpu_hours,median_wait_seconds,"
        "lost_gpu_hours,lost_cpu_hours"]
