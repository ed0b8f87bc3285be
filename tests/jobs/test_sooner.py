""""You would start sooner if…" through the portal (docs/users/jobs.md): on a busy datacenter, a
dry run (the API's, ``paddlectl submit --dry-run``'s, the submit page's) and the waiting reason
of a queued job (its page, the API's job) name the changes that would start it sooner, each with
its predicted start — fewer trainers, another datacenter the user has an account in — and never
one the user may not make (over their quota there)."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest
from django.utils import timezone

from accounts.models import Datacenter
from accounts.services import quota_set
from jobs.models import Job
from paddlecloud_core.sooner import EXPECTED_WINDOW
from scheduling.sooner import expected_load
from tests.factories import PACKAGE, submit_job

GiB = 2**30
submit = partial(submit_job, cpu="1")


@pytest.fixture
def busy(alice, make_user, datacenter, other_datacenter, pfs_home, held_tasks):
    """datacenter1 has 4 CPUs; bob's job holds 3 of them for an hour at most (its deadline).
    alice has an account in datacenter2 too, where nothing runs."""
    (pfs_home / "pkg").mkdir()
    (pfs_home.parent / "bob" / "pkg").mkdir(parents=True)
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=4000)
    datacenter.refresh_from_db()
    bob = make_user("bob")
    alice.memberships.create(datacenter=other_datacenter)
    for dc in (datacenter, other_datacenter):
        quota_set(None, dc, alice, cpu=64000, memory=64 * GiB, jobs=10, queued=10)
    quota_set(None, datacenter, bob, cpu=64000, memory=64 * GiB, jobs=10, queued=10)
    assert submit(bob, datacenter, "hold", trainers=3, deadline_seconds=3600).state == "starting"
    return datacenter, other_datacenter


BODY = {"name": "probe", "package": PACKAGE, "entry": "x", "trainers": 2, "cpu": "1"}


def _in_minutes(iso: str) -> float:
    return (timezone.datetime.fromisoformat(iso) - timezone.now()).total_seconds() / 60


@pytest.mark.django_db
def test_a_dry_run_on_a_busy_datacenter_names_what_would_start_the_job_sooner(
        token_client, busy):
    answer = token_client.post("/api/v1/jobs/", {**BODY, "dry_run": True},
                               format="json").json()["admission"]
    assert answer["starts"] == "queued"
    assert answer["reason"] == "waiting for the datacenter's capacity: cpu 2 asked, 1 of 4 free"
    sooner = answer["sooner"]
    assert [(s["change"], s["flag"]) for s in sooner] == [
        ({"trainers": 1}, "-trainers 1"),
        ({"datacenter": "datacenter2"}, "-datacenter datacenter2")]
    assert all(_in_minutes(s["start"]) < 1 for s in sooner)
    assert sooner[0]["message"] == "would start now with -trainers 1 (now: in 60 min)"


@pytest.mark.django_db
def test_a_datacenter_whose_quota_the_job_is_over_is_not_offered(token_client, busy):
    _, other = busy
    quota_set(None, other, token_client.issued.token.user, cpu=1000, jobs=10, queued=10)
    answer = token_client.post("/api/v1/jobs/", {**BODY, "dry_run": True},
                               format="json").json()["admission"]
    assert [s["flag"] for s in answer["sooner"]] == ["-trainers 1"]


@pytest.mark.django_db
def test_a_queued_job_says_what_would_start_it_sooner(token_client, browser, alice, busy):
    datacenter, _ = busy
    assert submit(alice, datacenter, "probe", trainers=2).state == "queued"
    shown = token_client.get("/api/v1/jobs/probe/").json()
    assert [s["flag"] for s in shown["sooner"]] == ["-trainers 1", "-datacenter datacenter2"]
    assert token_client.get("/api/v1/jobs/").json()["results"][0].get("sooner") is None
    page = browser.get("/jobs/probe/").content.decode()
    assert "It would start sooner if submitted with:" in page
    assert "would start now with -trainers 1 (now: in 60 min)" in page
    # Once it runs, nothing is offered.
    submit(alice, datacenter, "small", trainers=1)
    assert token_client.get("/api/v1/jobs/small/").json()["sooner"] is None


@pytest.mark.django_db
def test_what_users_are_expected_to_submit_is_their_recent_rate_and_last_job(alice, busy,
                                                                             pfs_home):
    """A change that starts a job later is weighed against the jobs expected meanwhile
    (docs/admin/scheduling.md): each user's submissions to the datacenter over the last
    ``EXPECTED_WINDOW``, at that rate, each like their last; older ones do not count, nor do
    another datacenter's."""
    datacenter, other = busy
    bob = Job.objects.get(name="hold").owner
    old = submit(alice, datacenter, "old", trainers=1)
    Job.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(seconds=EXPECTED_WINDOW + 60))
    (pfs_home.parents[2] / "datacenter2" / "home" / "alice" / "pkg").mkdir(parents=True)
    submit(alice, other, "elsewhere", trainers=1,
           package="/pfs/datacenter2/home/alice/pkg")
    submit(alice, datacenter, "first", trainers=1)
    submit(alice, datacenter, "last", trainers=2, priority="high")
    expected = {e.like.owner: e for e in expected_load(datacenter, alice.pk, timezone.now())}
    assert set(expected) == {alice.pk, bob.pk}
    assert expected[alice.pk].rate == 2 / EXPECTED_WINDOW
    assert (expected[alice.pk].like.name, expected[alice.pk].like.priority) == ("last", 100)
    assert expected[alice.pk].like.need.cpu == 2000
    assert (expected[bob.pk].rate, expected[bob.pk].like.name) == (1 / EXPECTED_WINDOW, "hold")
