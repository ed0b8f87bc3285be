"""A datacenter's capacity shared fairly (docs/admin/scheduling.md): the next job to start is the
next of the user furthest below their weighted share, not the next submitted; a job that can
never fit the capacity is refused; a reservation keeps a big job from being starved; a dry run
says whether a job would start now or wait, and until when; and with real workers racing as
jobs end, the datacenter never holds more than it has."""

from __future__ import annotations

import html
import time
from datetime import timedelta
from functools import partial

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import Datacenter, Membership, Team
from accounts.services import quota_set, token_create
from jobs.models import Job, JobEvent, Task
from jobs.transitions import job_transition
from paddlectl.output import predicted_start
from scheduling.admission import quota_admit
from scheduling.forecasts import Prediction, forecast_key, job_predictions
from scheduling.tasks import jobs_admit
from tests.conftest import assert_error
from tests.factories import PACKAGE, submit_job
from tests.jobs.test_admission import no_launch, race_as_jobs_end  # noqa: F401 - a fixture

GiB = 2**30


@pytest.fixture
def shared_dc(datacenter):
    """datacenter1 with 4 CPUs for all jobs together; every quota larger than that."""
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=4000)
    datacenter.refresh_from_db()
    return datacenter


@pytest.fixture
def bob(make_user, shared_dc):
    return make_user("bob")


@pytest.fixture
def big_quotas(alice, bob, shared_dc):
    for user in (alice, bob):
        quota_set(None, shared_dc, user, cpu=64000, memory=64 * GiB, jobs=100, queued=100)


submit = partial(submit_job, cpu="1")  # a job of one CPU, by default


def end(job) -> None:
    job_transition(job, "running", "every replica is running")
    job_transition(job, "succeeded", "every trainer exited 0")


def state(name: str, owner) -> tuple[str, str]:
    return Job.objects.values_list("state", "state_reason").get(name=name, owner=owner)


@pytest.fixture
def homes(pfs_home, bob, shared_dc):
    (pfs_home / "pkg").mkdir()
    bob_home = pfs_home.parent / "bob" / "pkg"
    bob_home.mkdir(parents=True)
    return pfs_home


@pytest.mark.django_db
def test_one_job_of_a_user_goes_before_the_fiftieth_of_another(
        alice, bob, shared_dc, big_quotas, homes, held_tasks):
    alices = [submit(alice, shared_dc, f"a{i}") for i in range(50)]
    assert Job.objects.filter(owner=alice, state="starting").count() == 4
    mine = submit(bob, shared_dc, "mine")
    assert state("mine", bob) == (
        "queued", "waiting for the datacenter's capacity: cpu 1 asked, 0 of 4 free")
    assert state("a4", alice) == (
        "queued", "waiting for the datacenter's capacity: cpu 1 asked, 0 of 4 free")
    end(alices[0])
    quota_admit(alice.pk, shared_dc.pk)  # the admission alice's job's end asks for
    mine.refresh_from_db()
    assert mine.state == "starting", "bob holds nothing: his job goes before alice's fifth"
    assert state("a4", alice)[0] == "queued"
    end(alices[1])
    quota_admit(alice.pk, shared_dc.pk)
    assert state("a4", alice)[0] == "starting", "bob waits for nothing more"


@pytest.mark.django_db
def test_weights_divide_the_capacity(alice, bob, shared_dc, big_quotas, homes, held_tasks):
    """alice has weight 3 and bob 1: as jobs end, alice comes to hold 3 of the 4 CPUs."""
    Membership.objects.filter(user=alice, datacenter=shared_dc).update(weight=3)
    for i in range(10):
        submit(bob, shared_dc, f"b{i}")
    for i in range(10):
        submit(alice, shared_dc, f"a{i}")
    for _ in range(8):  # end bob's oldest running job, one at a time
        job = Job.objects.filter(owner=bob, state="starting").order_by("created_at").first()
        end(job)
        quota_admit(bob.pk, shared_dc.pk)
    held = {user.username: Job.objects.filter(owner=user, state="starting").count()
            for user in (alice, bob)}
    assert held == {"alice": 3, "bob": 1}


@pytest.mark.django_db
def test_a_job_bigger_than_the_datacenter_is_refused_naming_the_capacity(
        token_client, alice, shared_dc, homes):
    body = {"name": "huge", "package": PACKAGE, "entry": "x",
            "trainers": 5, "cpu": "1"}
    quota_set(None, shared_dc, alice, cpu=64000, jobs=10)
    for dry_run in (True, False):
        error = assert_error(token_client.post("/api/v1/jobs/", {**body, "dry_run": dry_run},
                                               format="json"), 400, "over_capacity", "cpu")
        assert error["fields"]["cpu"] == [
            "the job asks for 5 CPU in all (5 trainers x 1), more than datacenter "
            "'datacenter1' has for all jobs together (4 CPU)"]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_big_job_is_not_starved_by_small_ones_of_others(alice, bob, shared_dc, big_quotas,
                                                          homes, held_tasks):
    """bob's 4-CPU job waits for the whole datacenter; alice's small jobs, submitted after it,
    do not take the CPUs that free up before it: they wait for its turn."""
    first = submit(alice, shared_dc, "first", trainers=2)
    big = submit(bob, shared_dc, "big", trainers=4)
    small = submit(alice, shared_dc, "small")
    assert state("big", bob) == (
        "queued", "waiting for the datacenter's capacity: cpu 4 asked, 2 of 4 free")
    assert state("small", alice)[0] == "queued"
    assert state("small", alice)[1].startswith(
        "waiting for its turn: the datacenter's capacity is held for another user's job")
    end(first)
    quota_admit(alice.pk, shared_dc.pk)
    big.refresh_from_db()
    small.refresh_from_db()
    assert (big.state, small.state) == ("starting", "queued")


@pytest.mark.django_db
def test_a_dry_run_says_whether_the_job_would_start_and_when(
        token_client, alice, shared_dc, homes, held_tasks):
    quota_set(None, shared_dc, alice, cpu=64000, jobs=10, queued=10)
    body = {"name": "probe", "package": PACKAGE, "entry": "x",
            "trainers": 2, "cpu": "1", "dry_run": True}
    now = token_client.post("/api/v1/jobs/", body, format="json").json()["admission"]
    assert now == {"starts": "now", "position": None, "reason": "", "predicted_start": None}
    # Yesterday's runs of this kind of job took 10 minutes each.
    earlier = timezone.now() - timedelta(days=1)
    for i in range(3):
        Job.objects.create(owner=alice, datacenter=shared_dc, name=f"probe-{i}", trainers=2,
                           cpu=1000, state="succeeded", entry="x", image="paddle",
                           package=PACKAGE, created_at=earlier,
                           started_at=earlier, finished_at=earlier + timedelta(minutes=10))
    submit(alice, shared_dc, "probe-9", trainers=4)  # takes the datacenter: 10 min or so
    answer = token_client.post("/api/v1/jobs/", body, format="json").json()["admission"]
    assert answer["starts"] == "queued" and answer["position"] == 1
    assert answer["reason"] == "waiting for the datacenter's capacity: cpu 2 asked, 0 of 4 free"
    assert answer["predicted_start"]["unknown"] is None
    predicted = {k: timezone.datetime.fromisoformat(answer["predicted_start"][k])
                 for k in ("at", "earliest", "latest")}
    in_ten = timezone.now() + timedelta(minutes=10)
    assert abs((predicted["at"] - in_ten).total_seconds()) < 60
    assert predicted["earliest"] <= predicted["at"] <= predicted["latest"]
    assert not Job.objects.filter(name="probe").exists()
    # The job queued for real carries the same prediction.
    submit(alice, shared_dc, "probe", trainers=2)
    shown = token_client.get("/api/v1/jobs/probe/").json()
    assert shown["state"] == "queued" and shown["priority"] == "normal"
    at = timezone.datetime.fromisoformat(shown["predicted_start"]["at"])
    assert abs((at - in_ten).total_seconds()) < 60
    listed = token_client.get("/api/v1/jobs/").json()["results"]
    assert [j["predicted_start"] is not None for j in listed if j["name"].startswith(
        "probe")] == [True] + [False] * 4


@pytest.mark.django_db
def test_a_start_nothing_can_tell_is_unknown_with_why_never_a_time_gone_by(
        token_client, alice, shared_dc, homes, held_tasks):
    """Issue 40.1: alice's first job ever takes the datacenter; nothing tells when it ends (no
    job of hers has ended, it has no deadline). A job that waits for its room is predicted
    "unknown", saying why, in the dry run, the API and paddlectl's words — not "in 3 s" and
    then "3 s ago". Given a deadline, the first job ends by it: the start is predicted then."""
    quota_set(None, shared_dc, alice, cpu=64000, jobs=10, queued=10)
    submit(alice, shared_dc, "first", trainers=4)
    why = ("it waits for room that job first (alice's) holds, and nothing tells when that "
           "ends: no job of its owner has ended yet to tell how long it runs")
    body = {"name": "second", "package": PACKAGE, "entry": "x", "trainers": 2, "cpu": "1"}
    answer = token_client.post("/api/v1/jobs/", {**body, "dry_run": True},
                               format="json").json()["admission"]
    unknown = {"at": None, "earliest": None, "latest": None, "unknown": why}
    assert (answer["starts"], answer["predicted_start"]) == ("queued", unknown)
    submit(alice, shared_dc, "second", trainers=2)
    shown = token_client.get("/api/v1/jobs/second/").json()
    assert (shown["state"], shown["predicted_start"]) == ("queued", unknown)
    assert predicted_start(shown["predicted_start"]) == f"unknown ({why})"

    Job.objects.filter(name="first").update(deadline_seconds=600)  # it fails after 10 min
    cache.clear()
    at = timezone.datetime.fromisoformat(
        token_client.get("/api/v1/jobs/second/").json()["predicted_start"]["at"])
    started = Job.objects.get(name="first")
    began = started.started_at or started.admitted_at
    assert abs((at - (began + timedelta(minutes=10))).total_seconds()) < 5


@pytest.mark.django_db
def test_a_running_job_that_has_done_half_its_passes_is_predicted_to_end_at_its_pace(
        token_client, alice, shared_dc, homes, held_tasks):
    """Issue 40.2 (40.1: use what is known): alice's first job ever — nothing known of its kind,
    no deadline — has had its first pass of two done, as its master's tasks tell, 10 minutes
    after it began. The job that waits for its room is predicted to start 10 minutes from
    now, at that pace, not "unknown"."""
    quota_set(None, shared_dc, alice, cpu=64000, jobs=10, queued=10)
    first = submit(alice, shared_dc, "first", trainers=4)
    began = timezone.now() - timedelta(minutes=10)
    job_transition(first, "running", "every replica is running")
    Job.objects.filter(pk=first.pk).update(passes=2, started_at=began, admitted_at=began)
    Task.objects.bulk_create(Task(job=first, pass_no=0, index=i, spans=[], state="done")
                             for i in range(4))
    Task.objects.bulk_create(Task(job=first, pass_no=1, index=i, spans=[]) for i in range(4))
    submit(alice, shared_dc, "second", trainers=2)
    shown = token_client.get("/api/v1/jobs/second/").json()["predicted_start"]
    assert shown["unknown"] is None
    at, earliest, latest = (timezone.datetime.fromisoformat(shown[k])
                            for k in ("at", "earliest", "latest"))
    in_ten = timezone.now() + timedelta(minutes=10)
    assert abs((at - in_ten).total_seconds()) < 30
    assert earliest <= at <= latest


@pytest.mark.django_db
def test_a_cached_prediction_that_has_passed_is_made_again(alice, shared_dc, homes,
                                                           held_tasks, settings):
    """A forecast is reused a while (PADDLECLOUD_FORECAST_CACHE_SECONDS) while no job changes
    state; a start it predicted that has passed since is never given out: the forecast is made
    again."""
    settings.PADDLECLOUD_FORECAST_CACHE_SECONDS = 600
    quota_set(None, shared_dc, alice, cpu=64000, jobs=10, queued=10)
    submit(alice, shared_dc, "first", trainers=4)
    Job.objects.filter(name="first").update(deadline_seconds=600)
    waiting = submit(alice, shared_dc, "second", trainers=2)
    cache.clear()
    made = job_predictions([waiting])[waiting.pk]
    assert made.at > timezone.now()
    # The same datacenter's forecast, as if it had been made ten minutes ago.
    key = forecast_key(shared_dc, [alice.pk])
    assert cache.get(key)[waiting.pk] == made
    stale = Prediction(made.at - timedelta(minutes=11), None, None)
    cache.set(key, {waiting.pk: stale}, 600)
    again = job_predictions([waiting])[waiting.pk]
    assert again.at > timezone.now() and abs((again.at - made.at).total_seconds()) < 5


@pytest.mark.django_db(transaction=True)
def test_workers_racing_as_jobs_end_never_hold_more_than_the_datacenter_has(
        make_user, datacenter, no_launch, celery_worker):  # noqa: F811 - the fixture
    """Three users whose quotas are each the whole datacenter (4 CPUs), queues of jobs of 1,
    2 and 4 CPUs, admitted by worker threads as the jobs end one by one: what the recorded
    events show is every job admitted once and, at no moment, more than 4 CPUs held in all."""
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=4000)
    race_as_jobs_end([make_user(name) for name in ("ann", "ben", "cat")], datacenter,
                     no_launch)
    cpu_of = dict(Job.objects.values_list("pk", "cpu"))
    held = 0
    events = JobEvent.objects.filter(replica=None, to_state__in=("starting", "succeeded"))
    for event in sorted(events, key=lambda e: (e.time, e.to_state != "starting", e.id)):
        held += cpu_of[event.job_id] if event.to_state == "starting" else -cpu_of[event.job_id]
        assert held <= 4000, f"{held}m CPU held at {event.time}"


@pytest.mark.django_db(transaction=True)
def test_through_real_workers_one_job_of_a_user_goes_before_the_fiftieth_of_another(
        make_user, datacenter, no_launch, celery_worker):  # noqa: F811 - the fixture
    """As above, with admission on a worker: alice's 50 jobs fill the 4 CPUs, bob's one job
    waits; the first of alice's jobs to end (its end queues the admission, as the engine's
    does) lets bob's job start, before alice's fifth."""
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=4000)
    alice, bob = make_user("alice"), make_user("bob")

    def queue(user, count: int) -> None:
        quota_set(None, datacenter, user, cpu=64000, jobs=100)
        Job.objects.bulk_create(
            Job(owner=user, datacenter=datacenter, name=f"{user.username}{i}", cpu=1000,
                created_at=timezone.now() - timedelta(seconds=count - i), entry="python x.py",
                image="paddle", package=f"/pfs/datacenter1/home/{user.username}/pkg")
            for i in range(count))

    def starting() -> set[str]:
        return set(Job.objects.filter(state="starting").values_list("name", flat=True))

    def wait_for(done) -> None:
        deadline = time.monotonic() + 60
        while not done():
            assert time.monotonic() < deadline, starting()
            time.sleep(0.05)

    queue(alice, 50)
    jobs_admit.delay(alice.pk, datacenter.pk)
    wait_for(lambda: starting() == {"alice0", "alice1", "alice2", "alice3"})
    queue(bob, 1)  # bob submits once the datacenter is full
    jobs_admit.delay(bob.pk, datacenter.pk)
    wait_for(lambda: Job.objects.get(name="bob0").state == "queued")
    end(Job.objects.get(name="alice0"))
    wait_for(lambda: Job.objects.get(name="bob0").state == "starting")
    assert Job.objects.get(name="alice4").state == "queued"
    started = ["alice0", "alice1", "alice2", "alice3", "bob0"]
    wait_for(lambda: len(no_launch) == len(started))  # each start is sent once committed
    assert sorted(no_launch) == sorted(Job.objects.filter(name__in=started)
                                       .values_list("pk", flat=True))  # each started once


@pytest.mark.django_db
def test_a_capacity_raised_in_the_admin_is_audited_and_admits(
        alice, bob, shared_dc, big_quotas, homes, admin_browser, held_tasks,
        django_capture_on_commit_callbacks):
    from accounts.models import AuditEntry

    held_tasks.run("jobs.tasks.jobs_admit", jobs_admit)
    for i in range(5):
        submit(alice, shared_dc, f"a{i}")
    assert state("a4", alice)[0] == "queued"
    page = admin_browser.get(f"/admin/accounts/datacenter/{shared_dc.pk}/change/")
    form = {field.name: field.value() for field in page.context["adminform"].form}
    form = {k: ("" if v is None else v) for k, v in form.items()
            if k not in ("capacity_updated_at",)}
    form.update(capacity_cpu="5", capacity_from_cluster="", kube_in_cluster="",
                build_registry_insecure="", **{"quotas-TOTAL_FORMS": "0",
                                              "quotas-INITIAL_FORMS": "0"})
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_browser.post(f"/admin/accounts/datacenter/{shared_dc.pk}/change/",
                                      form)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert state("a4", alice)[0] == "starting"
    entry = AuditEntry.objects.get(target="datacenter datacenter1 (capacity)")
    assert entry.details["changes"] == {"capacity_cpu": [4000, 5000]}


@pytest.mark.django_db(transaction=True)
def test_through_real_workers_a_high_priority_job_goes_first_in_its_owners_queue(
        make_user, datacenter, no_launch, celery_worker):  # noqa: F811 - the fixture
    """alice's quota runs one job at a time; of her waiting jobs, the one submitted last at
    priority high starts next when the running one ends, then the others in their order."""
    alice = make_user("alice")
    quota_set(None, datacenter, alice, jobs=1)
    now = timezone.now()
    for i, priority in enumerate((0, 0, 0, 100)):
        Job.objects.create(owner=alice, datacenter=datacenter, name=f"j{i}", priority=priority,
                           created_at=now - timedelta(seconds=10 - i), entry="python x.py",
                           image="paddle", package=PACKAGE)
    order = []
    jobs_admit.delay(alice.pk, datacenter.pk)
    deadline = time.monotonic() + 60
    while len(order) < 4:
        assert time.monotonic() < deadline, order
        started = Job.objects.filter(state="starting").first()
        if started is None:
            time.sleep(0.05)
            continue
        order.append(started.name)
        end(started)  # its end asks a worker for the next admission
    assert order == ["j3", "j0", "j1", "j2"]


def client_of(user):
    """An API client with a token of ``user``'s for datacenter1."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer "
                       + token_create(user, datacenter_name="datacenter1").raw)
    return client


@pytest.mark.django_db
def test_a_reason_names_another_users_job_only_to_those_who_may_see_it(
        alice, bob, shared_dc, big_quotas, homes, browser, held_tasks):
    """bob's 4-CPU job holds the capacity's reservation; alice's small job waits for its
    turn. alice may not see bob's jobs: her job's reason, its page and a dry run say
    "another user's job", never its name or bob's. Once both are in one group (whose members
    see each other's jobs), the reason names it."""
    submit(alice, shared_dc, "first", trainers=2)
    submit(bob, shared_dc, "secret-project", trainers=4)
    submit(alice, shared_dc, "small")
    alices = client_of(alice)
    turn = "waiting for its turn: the datacenter's capacity is held for another user's job"
    shown = alices.get("/api/v1/jobs/small/").json()
    assert shown["state_reason"].startswith(turn + ", whose fair share is further from met")
    dry_run = alices.post("/api/v1/jobs/", {
        "name": "probe", "package": PACKAGE, "entry": "x",
        "cpu": "1", "dry_run": True}, format="json").json()["admission"]
    assert dry_run["reason"].startswith(turn)
    page = html.unescape(browser.get("/jobs/small/").content.decode())
    assert turn in page
    for said in (shown["state_reason"], dry_run["reason"], page):
        assert "secret-project" not in said and "bob" not in said

    team = Team.objects.create(datacenter=shared_dc, name="vision")
    Membership.objects.filter(datacenter=shared_dc).update(team=team)
    quota_admit(alice.pk, shared_dc.pk)
    assert state("small", alice)[1].startswith(
        "waiting for its turn: the datacenter's capacity is held for job "
        "secret-project of bob, whose fair share is further from met")
    # ... which alice may look at, in the group view.
    assert "secret-project" in [
        j["name"] for j in alices.get("/api/v1/group/jobs/").json()["results"]]


@pytest.mark.django_db
def test_a_priority_orders_its_owners_queue_only_not_other_users_jobs(
        alice, bob, make_user, shared_dc, big_quotas, homes, held_tasks):
    """carol holds the whole datacenter; alice submits a 4-CPU job, then bob one at priority
    high. alice and bob hold nothing (equal shares): when carol's job ends, alice's job,
    submitted first, starts; bob's high one waits for the capacity. bob's priority goes
    ahead of his own jobs only."""
    carol = make_user("carol")
    quota_set(None, shared_dc, carol, cpu=64000, jobs=10)
    (homes.parent / "carol" / "pkg").mkdir(parents=True)
    full = submit(carol, shared_dc, "full", trainers=4)
    body = {"package": "/pfs/datacenter1/home/{}/pkg", "entry": "x", "trainers": 4,
            "cpu": "1"}
    for user, name, priority in ((alice, "earlier", "normal"), (bob, "urgent", "high"),
                                 (bob, "bobs-normal", "normal")):
        response = client_of(user).post("/api/v1/jobs/", {
            **body, "name": name, "priority": priority,
            "package": body["package"].format(user.username)}, format="json")
        assert response.status_code == 201, response.content
    end(full)
    quota_admit(carol.pk, shared_dc.pk)  # the admission carol's job's end asks for
    assert state("earlier", alice)[0] == "starting"
    urgent = client_of(bob).get("/api/v1/jobs/urgent/").json()
    assert (urgent["state"], urgent["priority"], urgent["state_reason"]) == (
        "queued", "high", "waiting for the datacenter's capacity: cpu 4 asked, 0 of 4 free")
    assert state("bobs-normal", bob) == ("queued", "waiting behind job urgent")
