"""Groups (teams): a quota the members' jobs share beside each member's own, fair share weighed
by group first and member second, the group view (members see each other's jobs and change
only their own), and the admin's changes audited and admitting what now may start."""

from __future__ import annotations

from functools import partial

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import AuditEntry, Datacenter, Membership, Team
from accounts.services import quota_set, token_create
from jobs.models import Job
from jobs.transitions import job_transition
from scheduling.admission import quota_admit
from tests.conftest import assert_error
from tests.factories import submit_job

GiB = 2**30


@pytest.fixture
def users(make_user, datacenter, pfs_home):
    made = {name: make_user(name) for name in ("alice", "bob", "carol")}
    for name, user in made.items():
        (pfs_home.parent / name / "pkg").mkdir(parents=True, exist_ok=True)
        quota_set(None, datacenter, user, cpu=64000, memory=64 * GiB, jobs=50, queued=50)
    return made


@pytest.fixture
def vision(users, datacenter):
    """alice and bob's group, whose jobs together hold at most 2 CPUs."""
    team = Team.objects.create(datacenter=datacenter, name="vision", cpu=2000)
    Membership.objects.filter(user__in=[users["alice"], users["bob"]],
                              datacenter=datacenter).update(team=team)
    return team


submit = partial(submit_job, cpu="1")  # a job of one CPU, by default


def end(job) -> None:
    job_transition(job, "running", "every replica is running")
    job_transition(job, "succeeded", "every trainer exited 0")


def client(user) -> APIClient:
    """The API as ``user``, with a token of theirs for datacenter1."""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Bearer "
                    + token_create(user, datacenter_name="datacenter1").raw)
    return api


def state(owner, name) -> tuple[str, str]:
    return Job.objects.values_list("state", "state_reason").get(owner=owner, name=name)


@pytest.mark.django_db
def test_a_job_counts_against_its_owners_quota_and_its_groups(users, vision, datacenter,
                                                               held_tasks):
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    quota_set(None, datacenter, alice, cpu=1000)
    submit(alice, datacenter, "a1")
    submit(alice, datacenter, "a2")
    submit(bob, datacenter, "b1")
    submit(bob, datacenter, "b2")
    submit(carol, datacenter, "c1", trainers=8)  # no group: only her own quota
    assert state(alice, "a1")[0] == state(bob, "b1")[0] == state(carol, "c1")[0] == "starting"
    assert state(alice, "a2") == ("queued", "waiting for quota: cpu 1 asked, 0 of 1 free")
    assert state(bob, "b2") == (
        "queued", "waiting for group vision's quota: cpu 1 asked, 0 of 2 free")
    submit(bob, datacenter, "b3")
    end(Job.objects.get(name="a1"))
    quota_admit(alice.pk, datacenter.pk)
    # The group's freed CPU goes to alice, who now holds none of it (bob holds half); bob's
    # jobs wait for the group's quota, full again.
    assert state(alice, "a2")[0] == "starting"
    assert state(bob, "b2") == (
        "queued", "waiting for group vision's quota: cpu 1 asked, 0 of 2 free")
    assert state(bob, "b3") == ("queued", "waiting behind job b2")


@pytest.mark.django_db
def test_fair_share_is_weighed_by_group_then_by_member(users, vision, datacenter,
                                                       held_tasks):
    """A capacity of 4 CPUs, contended by the group (alice, bob: no group limit here) and by
    carol alone: as jobs end, each side comes to hold 2, and alice and bob 1 each."""
    Team.objects.filter(pk=vision.pk).update(cpu=None)
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=4000)
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    for i in range(8):
        submit(alice, datacenter, f"a{i}")
    for i in range(8):
        submit(carol, datacenter, f"c{i}")
    for i in range(8):
        submit(bob, datacenter, f"b{i}")
    for _ in range(6):  # end the oldest running job, one at a time
        job = Job.objects.filter(state="starting").order_by("created_at").first()
        end(job)
        quota_admit(job.owner_id, datacenter.pk)
    held = {name: Job.objects.filter(owner=user, state="starting").count()
            for name, user in users.items()}
    assert held == {"alice": 1, "bob": 1, "carol": 2}


@pytest.mark.django_db
def test_members_see_each_others_jobs_and_change_only_their_own(users, vision, datacenter,
                                                                held_tasks):
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    submit(alice, datacenter, "mine")
    submit(bob, datacenter, "his")
    submit(bob, datacenter, "queued-one")
    submit(carol, datacenter, "hers")
    alices = client(alice)
    jobs = alices.get("/api/v1/group/jobs/").json()["results"]
    assert [(j["owner"], j["name"], j["state"]) for j in jobs] == [
        ("bob", "queued-one", "queued"), ("bob", "his", "starting"),
        ("alice", "mine", "starting")]
    assert jobs[0]["state_reason"] == (
        "waiting for group vision's quota: cpu 1 asked, 0 of 2 free")
    assert jobs[0]["predicted_start"] is not None
    group = alices.get("/api/v1/group").json()
    assert group["name"] == "vision" and group["weight"] == 1
    assert [m["username"] for m in group["members"]] == ["alice", "bob"]
    assert group["quota"]["cpu"] == {"limit": "2", "limit_value": 2000, "used": "2",
                                     "used_value": 2000}
    assert group["quota"]["gpu"]["limit"] is None  # no group limit
    # Looking is all: bob's job is not alice's to kill (nor to see as hers).
    assert_error(alices.post("/api/v1/jobs/his/kill"), 404, "not_found")
    assert state(bob, "his")[0] == "starting"
    # carol is in no group.
    assert_error(client(carol).get("/api/v1/group"), 404, "not_found", "group")
    assert_error(client(carol).get("/api/v1/group/jobs/"), 404, "not_found", "group")


SECRETS = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY",
           "HF_TOKEN": "hf_TopSecretTokenOfAlice"}


@pytest.mark.django_db
def test_a_member_sees_another_members_job_as_the_group_page_shows_it_never_its_secrets(
        users, vision, datacenter, held_tasks):
    """bob looks at the group's jobs: alice's job is there with what the group page shows
    (whose, its state, what it holds), and nothing of what only she may see — its environment,
    its entry and arguments, its package, image, registry, dataset."""
    alice, bob = users["alice"], users["bob"]
    submit(alice, datacenter, "tuning", env=SECRETS,
           entry="python train.py --api-key=sk-live-EntryArgumentSecret")
    answer = client(bob).get("/api/v1/group/jobs/")
    assert answer.status_code == 200, answer.content
    for secret in [*SECRETS.values(), "sk-live-EntryArgumentSecret", "/home/alice/pkg"]:
        assert secret not in answer.content.decode()
    (job,) = answer.json()["results"]
    assert (job["owner"], job["name"], job["state"], job["trainers_shown"],
            job["pservers"], job["cpu"]) == ("alice", "tuning", "starting", "1", 0, "1")
    assert not {"env", "entry", "package", "image", "registry", "topology",
                "dataset"} & set(job)
    # The page shows the same: her job, and not its secrets.
    browser = Client()
    browser.force_login(bob)
    page = browser.get("/group/").content.decode()
    assert 'data-name="tuning" data-owner="alice"' in page
    assert not any(secret in page for secret in SECRETS.values())
    # alice sees all of it, as the owner.
    mine = client(alice).get("/api/v1/jobs/tuning/").json()
    assert mine["env"] == SECRETS
    assert mine["entry"] == "python train.py --api-key=sk-live-EntryArgumentSecret"


@pytest.mark.django_db
def test_raising_a_groups_quota_in_the_admin_is_audited_and_admits(
        users, vision, datacenter, admin_browser, django_capture_on_commit_callbacks,
        held_tasks):
    from scheduling.tasks import jobs_admit

    held_tasks.run("jobs.tasks.jobs_admit", jobs_admit)
    bob = users["bob"]
    for i in range(3):
        submit(bob, datacenter, f"b{i}")
    assert state(bob, "b2")[0] == "queued"
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_browser.post(f"/admin/accounts/team/{vision.pk}/change/", {
            "datacenter": datacenter.pk, "name": "vision", "weight": "2", "cpu": "3",
            "memory": "", "gpu": "", "jobs": "",
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert state(bob, "b2")[0] == "starting"
    entry = AuditEntry.objects.filter(target="group vision").get()
    assert entry.details["changes"] == {"cpu": [2000, 3000], "weight": [1, 2]}
