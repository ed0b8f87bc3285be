"""Budgets of GPU-hours and CPU-hours per window: use measured from replicas' run time
(rolling and calendar windows), jobs held while a budget is spent and admitted once it is
raised (through a real worker), a running job warned and stopped after the grace period or
let finish, a group's budget shared by its members, and the API showing it all."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from accounts.models import Budget, Datacenter, Membership, Team
from accounts.services import quota_set
from jobs.models import Job, Replica, Usage
from jobs.services import job_delete, job_kill
from jobs.tasks import _budgets_enforce
from jobs.transitions import replica_transition
from jobs.usage import held
from scheduling.admission import quota_admit
from scheduling.budgets import use, window_of
from scheduling.tasks import jobs_admit
from tests.factories import submit_job

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)  # a Wednesday


def hours_ago_within_a_day(hours: float, length: timedelta) -> datetime:
    """About ``hours`` ago, such that the ``length`` that follows lies in one UTC day (and is
    over): a report by day shows it in one row, whatever the hour the test runs at."""
    began = datetime.now(UTC) - timedelta(hours=hours)
    midnight = (began + length).replace(hour=0, minute=0, second=0, microsecond=0)
    return began if began >= midnight else midnight - length - timedelta(minutes=1)


def ran(owner, datacenter, name, *, gpu=0, cpu=1000, began, ended=None, pservers=0):
    """A job whose one trainer (and ``pservers``) ran from ``began`` to ``ended`` (None:
    still runs), as the usage ledger recorded it."""
    job = Job.objects.create(owner=owner, datacenter=datacenter, name=name, gpu=gpu, cpu=cpu,
                             pservers=pservers, pscpu=500, entry="x", image="paddle",
                             package=f"/pfs/datacenter1/home/{owner.username}/pkg",
                             state="running" if ended is None else "succeeded",
                             created_at=began, started_at=began, finished_at=ended)
    for role, count in (("trainer", 1), ("pserver", pservers)):
        for index in range(count):
            replica = Replica.objects.create(
                job=job, role=role, index=index, started_at=began, finished_at=ended,
                state="running" if ended is None else "succeeded")
            cores, gpus = held(role, job.cpu, job.pscpu, job.gpu)
            Usage.objects.create(owner=owner, datacenter=datacenter, job_key=job.pk,
                                 job_name=name, replica_key=replica.pk, role=role, index=index,
                                 cpu=cores, gpu=gpus, started_at=began, ended_at=ended)
    return job


@pytest.mark.django_db
def test_use_is_run_time_times_what_replicas_hold_within_the_window(alice, datacenter):
    budget = Budget.objects.create(datacenter=datacenter, user=alice, gpu_hours=10,
                                   window="day", kind="rolling")
    # 2 GPUs for an hour, three hours ago; a pserver of 0.5 CPU beside its trainer of 1 CPU.
    ran(alice, datacenter, "a", gpu=2, began=NOW - timedelta(hours=3),
        ended=NOW - timedelta(hours=2), pservers=1)
    # Still running: 1 GPU for the last 30 minutes.
    ran(alice, datacenter, "b", gpu=1, began=NOW - timedelta(minutes=30))
    # Half of it before the window (25 to 23 hours ago): half counts.
    ran(alice, datacenter, "c", gpu=1, began=NOW - timedelta(hours=25),
        ended=NOW - timedelta(hours=23))
    used = use(budget, NOW)
    assert round(used.gpu_hours, 3) == 2 + 0.5 + 1
    assert round(used.cpu_hours, 3) == 1.5 + 0.5 + 1
    # By the hour, for the chart: 24 full hours and the one begun.
    assert len(used.series) == 25
    assert round(sum(g for _, _, g in used.series), 3) == 3.5
    calendar = Budget(datacenter=datacenter, user=alice, window="day", kind="calendar")
    assert round(use(calendar, NOW).gpu_hours, 3) == 2.5  # today (UTC) only


@pytest.mark.django_db
def test_every_run_of_a_replica_is_kept_in_the_ledger_past_its_job(alice, datacenter, pfs_home,
                                                                  held_tasks):
    """A trainer runs, fails and is restarted, and runs again; its job is killed and removed
    while it runs: the ledger keeps both runs, as its events timed them, the second ended by the
    removal; the job's history is gone, its use is not."""
    (pfs_home / "pkg").mkdir()
    quota_set(None, datacenter, alice, cpu=8000, jobs=10)
    job = submit_job(alice, datacenter, "flaky", trainers=1, pservers=1, cpu="2", pscpu="0.5")
    trainer = job.replicas.get(role="trainer")
    for target, restart in (("starting", False), ("running", False), ("starting", True),
                            ("running", False)):
        replica_transition(trainer, target, "as it went", restart=restart)
    events = list(trainer.events.values_list("to_state", "time"))
    job_kill(alice, datacenter, "flaky")
    job_delete(alice, datacenter, "flaky")
    assert not Job.objects.filter(pk=job.pk).exists()
    runs = list(Usage.objects.filter(job_key=job.pk).values_list(
        "role", "index", "attempt", "cpu", "gpu", "started_at", "ended_at"))
    began, _, restarted, _ = (at for _, at in events)
    # (The pserver never ran: it used nothing.)
    assert runs == [("trainer", 0, 0, 2000, 0, began, restarted),
                    ("trainer", 0, 1, 2000, 0, restarted, runs[1][6])]
    assert runs[1][6] > restarted  # closed as its job was removed


def test_windows_rolling_and_calendar():
    def since(window, kind):
        return window_of(Budget(window=window, kind=kind), NOW)

    assert since("week", "rolling") == (NOW - timedelta(days=7), "in the last 7 days")
    assert since("day", "calendar") == (datetime(2026, 11, 25, tzinfo=UTC), "today")
    assert since("week", "calendar") == (datetime(2026, 11, 23, tzinfo=UTC), "this week")
    assert since("month", "calendar") == (datetime(2026, 11, 1, tzinfo=UTC), "this month")


@pytest.fixture
def spent(alice, datacenter, pfs_home):
    """alice has used her week's GPU-hour: an hour of a GPU, two hours ago."""
    (pfs_home / "pkg").mkdir()
    quota_set(None, datacenter, alice, gpu=4, jobs=10)
    now = datetime.now(UTC)
    ran(alice, datacenter, "earlier", gpu=1, began=now - timedelta(hours=2),
        ended=now - timedelta(hours=1))
    return Budget.objects.create(datacenter=datacenter, user=alice, gpu_hours=1)


@pytest.mark.django_db(transaction=True)
def test_a_spent_budget_holds_jobs_until_it_is_raised(alice, datacenter, spent,
                                                      celery_worker):
    job = submit_job(alice, datacenter, "next", gpu=1)
    job.refresh_from_db()
    assert (job.state, job.state_reason) == (
        "queued", "waiting for budget: 1.0 of 1 GPU-hours used in the last 7 days (rolling)")
    Budget.objects.filter(pk=spent.pk).update(gpu_hours=Decimal("5"))
    jobs_admit.delay(alice.pk, datacenter.pk)  # as the admin's raise asks for
    deadline = time.monotonic() + 30
    while Job.objects.get(pk=job.pk).state == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert Job.objects.get(pk=job.pk).state in ("starting", "running", "succeeded", "failed")


@pytest.mark.django_db
def test_a_running_job_that_spends_the_budget_is_warned_then_stopped_after_grace(
        alice, datacenter, spent, held_tasks):
    Datacenter.objects.filter(pk=datacenter.pk).update(budget_grace_seconds=60)
    running = ran(alice, datacenter, "long", gpu=1,
                  began=datetime.now(UTC) - timedelta(minutes=10))
    now = datetime.now(UTC)
    assert _budgets_enforce(now) == 1
    running.refresh_from_db()
    assert running.state == "running" and running.budget_warned_at == now
    warning = running.events.order_by("-id").first()
    assert warning.reason == ("budget spent: 1.2 of 1 GPU-hours used in the last 7 days "
                              "(rolling); it is stopped in 60 s unless the budget is raised")
    assert _budgets_enforce(now + timedelta(seconds=30)) == 0  # warned once, in its grace
    assert running.events.filter(replica=None).count() == 1  # the one warning
    assert _budgets_enforce(now + timedelta(seconds=61)) == 1
    running.refresh_from_db()
    assert running.state == "queued"  # not failed: it runs again once the budget allows
    assert running.state_reason.startswith("stopped: budget spent: 1.2 of 1 GPU-hours")


@pytest.mark.django_db
def test_a_raised_budget_lets_a_warned_job_run_on_and_finish_never_stops(
        alice, datacenter, spent, held_tasks):
    Datacenter.objects.filter(pk=datacenter.pk).update(budget_grace_seconds=0)
    running = ran(alice, datacenter, "long", gpu=1,
                  began=datetime.now(UTC) - timedelta(minutes=10))
    now = datetime.now(UTC)
    _budgets_enforce(now)
    Budget.objects.filter(pk=spent.pk).update(gpu_hours=100)
    assert _budgets_enforce(now + timedelta(seconds=5)) == 0
    running.refresh_from_db()
    assert running.state == "running" and running.budget_warned_at is None
    Budget.objects.filter(pk=spent.pk).update(gpu_hours=1)
    Datacenter.objects.filter(pk=datacenter.pk).update(budget_spent="finish")
    _budgets_enforce(now + timedelta(seconds=10))
    assert running.events.order_by("-id").first().reason.endswith("; it may finish")
    assert _budgets_enforce(now + timedelta(hours=1)) == 0
    assert Job.objects.get(pk=running.pk).state == "running"


@pytest.mark.django_db
def test_a_groups_budget_is_shared_by_its_members(alice, make_user, datacenter, pfs_home,
                                                  held_tasks, token_client):
    bob = make_user("bob")
    (pfs_home.parent / "bob" / "pkg").mkdir(parents=True)
    team = Team.objects.create(datacenter=datacenter, name="vision")
    Membership.objects.filter(datacenter=datacenter).update(team=team)
    quota_set(None, datacenter, bob, cpu=8000, jobs=10)
    Budget.objects.create(datacenter=datacenter, team=team, cpu_hours=2, window="day")
    now = datetime.now(UTC)
    ran(alice, datacenter, "alices", cpu=2000, began=now - timedelta(hours=2),
        ended=now - timedelta(hours=1))  # 2 CPU-hours of alice's: the group's are spent
    job = submit_job(bob, datacenter, "bobs")
    job.refresh_from_db()
    assert job.state_reason == ("waiting for group vision's budget: 2.0 of 2 CPU-hours used "
                                "in the last 24 hours (rolling)")
    quota_admit(bob.pk, datacenter.pk)
    assert Job.objects.get(pk=job.pk).state == "queued"
    # What alice sees: the group's budget, spent, and its use hour by hour.
    [shown] = token_client.get("/api/v1/quota/budgets").json()
    assert shown["whose"] == "group vision" and shown["gpu_hours"] is None
    assert shown["cpu_hours"] == {"limit": 2.0, "used": 2.0, "left": 0.0, "lost": 0.0}
    assert len(shown["series"]) == 25
    assert round(sum(b["cpu_hours"] for b in shown["series"]), 3) == 2.0


@pytest.mark.django_db
def test_the_quota_page_charts_a_budget_and_a_warned_jobs_page_says_so(
        alice, datacenter, spent, client, held_tasks):
    client.force_login(alice)
    page = client.get("/quota/").content.decode()
    assert "Budgets in datacenter1" in page
    assert "GPU-hours in the last 7 days" in page and "1.0 of 1 used, 0.0 left" in page
    chart = page[page.index('<svg class="budget-chart"'):]
    chart = chart[:chart.index("</svg>")]
    assert 'viewBox="0 0 8 100"' in chart  # a bar a day: 7 days and the one begun
    assert chart.count("<rect") == 8
    assert chart.count('height="100.0"') == 1  # the day of the hour of GPU, the busiest
    running = ran(alice, datacenter, "long", gpu=1,
                  began=datetime.now(UTC) - timedelta(minutes=10))
    _budgets_enforce(datetime.now(UTC))
    page = client.get("/jobs/long/").content.decode()
    assert 'id="budget-warning"' in page
    assert "budget spent: 1.2 of 1 GPU-hours used in the last 7 days" in page
    running.refresh_from_db()
    assert running.budget_warned_at is not None


@pytest.mark.django_db(transaction=True)
def test_the_ledger_is_filled_from_the_history_of_the_jobs_kept(alice, datacenter):
    """Upgrading: migration 0013 fills the ledger from the replicas' recorded events, each run
    as budgets read them before (a restart's run goes on), one still going left open."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("jobs", "0012_usage_ledger")], [("jobs", "0013_usage_from_events")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    job = old.get_model("jobs", "Job").objects.create(
        owner_id=alice.pk, datacenter_id=datacenter.pk, name="old", gpu=2, cpu=1000,
        pservers=1, pscpu=500, entry="x", image="paddle", package="/pfs/x")
    t = NOW - timedelta(hours=5)
    for role, moves in (("trainer", (("starting", 0), ("running", 1), ("starting", 60),
                                     ("running", 61), ("failed", 90), ("starting", 120),
                                     ("running", 121))),
                        ("pserver", (("starting", 0), ("running", 1), ("succeeded", 30)))):
        replica = old.get_model("jobs", "Replica").objects.create(job=job, role=role, index=0)
        for state, minutes in moves:
            old.get_model("jobs", "JobEvent").objects.create(
                job=job, replica=replica, time=t + timedelta(minutes=minutes),
                from_state="", to_state=state)
    try:
        MigrationExecutor(connection).migrate(after)
        assert sorted(Usage.objects.values_list("role", "attempt", "cpu", "gpu", "started_at",
                                                "ended_at")) == [
            ("pserver", 0, 500, 0, t, t + timedelta(minutes=30)),
            ("trainer", 0, 1000, 2, t, t + timedelta(minutes=90)),
            ("trainer", 1, 1000, 2, t + timedelta(minutes=120), None)]
        assert set(Usage.objects.values_list("owner", "datacenter", "job_key",
                                             "job_name")) == {(alice.pk, datacenter.pk,
                                                               job.pk, "old")}
    finally:  # the database as every other test has it: every migration applied
        latest = MigrationExecutor(connection)
        latest.migrate(latest.loader.graph.leaf_nodes())
