"""Quota admission: refusal of jobs that can never fit, the FIFO queue per user, admission as
soon as room appears (a job ends, a quota is raised), quotas lowered below use, and two
submissions racing for the last free CPU on PostgreSQL. The cap on queued jobs; admission and
the reconciler costing the same however many jobs wait; one reconcile at a time."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import AuditEntry, Quota
from accounts.services import quota_set
from jobs import tasks
from jobs.models import Job, JobEvent, Replica
from jobs.services import job_kill
from jobs.tasks import jobs_reconcile
from jobs.transitions import job_transition
from kernel.errors import ValidationError
from scheduling import admission
from scheduling.admission import quota_admit, quota_report
from scheduling.tasks import jobs_admit
from tests.conftest import assert_error

GiB = 2**30


pytestmark = pytest.mark.package("import time; time.sleep(60)\n")


@pytest.fixture
def admit_now(held_tasks):
    """Admission queued after a commit runs at once, here, instead of on a worker (admitted
    jobs are not started: held_tasks holds their starts)."""
    held_tasks.run("jobs.tasks.jobs_admit", jobs_admit)


def states(*names) -> list[tuple[str, str]]:
    return [Job.objects.values_list("name", "state").get(name=n) for n in names]


# -- refused at submission ---------------------------------------------------------------------

@pytest.mark.django_db
def test_a_job_that_can_never_fit_is_refused_naming_each_resource(submit, alice, datacenter):
    quota_set(None, datacenter, alice, cpu=4000, memory=8 * GiB, gpu=2)
    with pytest.raises(ValidationError) as refused:
        submit("big", trainers=3, cpu="2", memory="2Gi", gpu=1, pservers=2, pscpu="1",
               psmemory="2Gi")
    assert refused.value.code == "over_quota"
    assert refused.value.fields == {
        "cpu": ["the job asks for 8 CPU in all (3 trainers x 2 + 2 pservers x 1), 4 more "
                "than your quota of 4 in datacenter 'datacenter1'"],
        "memory": ["the job asks for 10Gi in all (3 trainers x 2Gi + 2 pservers x 2Gi), 2Gi "
                   "more than your quota of 8Gi in datacenter 'datacenter1'"],
        "gpu": ["the job asks for 3 GPU in all (3 trainers x 1), 1 more than your quota of 2 "
                "in datacenter 'datacenter1'"]}
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_no_jobs_at_all_when_the_quota_allows_none(submit, alice, datacenter):
    quota_set(None, datacenter, alice, jobs=0)
    with pytest.raises(ValidationError, match="jobs: your quota allows no jobs"):
        submit("any")


@pytest.mark.django_db
def test_a_job_over_the_quota_with_other_mistakes_is_told_them_all_at_once(token_client,
                                                                           package):
    body = {"name": "Bad_Name", "package": package, "entry": "x", "trainers": 5, "cpu": "1"}
    fields = token_client.post("/api/v1/jobs/", body, format="json").json()["fields"]
    assert set(fields) == {"name", "cpu"}, fields
    assert "more than your quota" in fields["cpu"][0]
    # a size that is itself wrong: its own mistake only, no quota sum of it
    fields = token_client.post("/api/v1/jobs/", {**body, "cpu": "lots"}, format="json").json()[
        "fields"]
    assert set(fields) == {"name", "cpu"} and "quota" not in fields["cpu"][0], fields


@pytest.mark.django_db
def test_the_api_refuses_with_400_and_the_dry_run_says_so_too(token_client, package):
    body = {"name": "big", "package": package, "entry": "x", "trainers": 5, "cpu": "1"}
    for dry_run in (True, False):
        error = assert_error(token_client.post("/api/v1/jobs/", {**body, "dry_run": dry_run},
                                               format="json"), 400, "over_quota", "cpu")
        assert "1 more than your quota of 4" in error["message"]


# -- the queue ---------------------------------------------------------------------------------

@pytest.mark.django_db
def test_jobs_wait_in_submission_order_and_a_big_one_is_not_overtaken(submit, alice,
                                                                      datacenter, held_tasks):
    quota_set(None, datacenter, alice, cpu=4000, jobs=10)
    submit("a", trainers=2, cpu="1")  # 2 of 4 CPUs
    big = submit("big", trainers=3, cpu="1")  # needs 3: only 2 free
    small = submit("small", trainers=2, cpu="1")  # would fit now, but then big could not
    after = submit("after", trainers=4, cpu="1")
    assert states("a", "big", "small", "after") == [
        ("a", "starting"), ("big", "queued"), ("small", "queued"), ("after", "queued")]
    for job in (big, small, after):
        job.refresh_from_db()
    assert big.state_reason == "waiting for quota: cpu 3 asked, 2 of 4 free"
    assert small.state_reason == "waiting behind job big: starting now would delay it"
    assert after.state_reason == "waiting behind job big"
    assert [admission.queue_position(j) for j in (big, small, after)] == [1, 2, 3]


@pytest.mark.django_db
def test_a_small_job_starts_ahead_of_a_big_one_only_in_what_the_big_one_leaves_over(
        submit, alice, datacenter, held_tasks):
    """Backfill: when "a" ends, "big" takes 3 of the 4 CPUs; a job of 1 CPU fits beside it
    and starts at once, a second one would not and waits."""
    quota_set(None, datacenter, alice, cpu=4000, jobs=10)
    submit("a", trainers=2, cpu="1")
    submit("big", trainers=3, cpu="1")
    submit("one", cpu="1")
    submit("two", cpu="1")
    assert states("a", "big", "one", "two") == [
        ("a", "starting"), ("big", "queued"), ("one", "starting"), ("two", "queued")]
    assert Job.objects.get(name="two").state_reason == (
        "waiting behind job big: starting now would delay it")


@pytest.mark.django_db
def test_a_high_priority_job_goes_ahead_in_its_owners_queue(submit, alice, datacenter,
                                                          held_tasks):
    quota_set(None, datacenter, alice, jobs=1)
    submit("running")
    low = submit("low", priority="low")
    normal = submit("normal")
    high = submit("high", priority="high")
    assert [admission.queue_position(j) for j in (high, normal, low)] == [1, 2, 3]
    assert Job.objects.get(name="high").state_reason == (
        "waiting for quota: jobs 1 asked, 0 of 1 free")
    assert Job.objects.get(name="low").state_reason == "waiting behind job high"
    with pytest.raises(ValidationError) as refused:
        submit("urgent", priority="urgent")
    assert refused.value.fields == {"priority": ["one of high, normal, low, not 'urgent'"]}


@pytest.mark.django_db
def test_a_job_that_ends_admits_the_next_without_a_periodic_tick(
        submit, alice, datacenter, admit_now, django_capture_on_commit_callbacks):
    quota_set(None, datacenter, alice, jobs=1)
    submit("first")
    submit("second")
    submit("third")
    assert states("first", "second", "third") == [
        ("first", "starting"), ("second", "queued"), ("third", "queued")]
    with django_capture_on_commit_callbacks(execute=True):
        job_kill(alice, datacenter, "first")
    assert states("second", "third") == [("second", "starting"), ("third", "queued")]
    with django_capture_on_commit_callbacks(execute=True):
        job_kill(alice, datacenter, "third")  # killing a queued job frees nothing
    assert states("second", "third") == [("second", "starting"), ("third", "killed")]


@pytest.mark.django_db
def test_raising_a_quota_in_the_admin_admits_and_is_audited(
        submit, alice, datacenter, admin_browser, admit_now, django_capture_on_commit_callbacks):
    quota_set(None, datacenter, alice, cpu=1000)
    submit("one", cpu="1")
    submit("two", cpu="1")
    assert states("two") == [("two", "queued")]
    quota = Quota.objects.get(user=alice, datacenter=datacenter)
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_browser.post(f"/admin/accounts/quota/{quota.pk}/change/", {
            "user": alice.pk, "datacenter": datacenter.pk, "cpu": "2", "memory": "",
            "gpu": "", "jobs": "", "storage": ""})
    assert response.status_code == 302, response.content
    assert states("two") == [("two", "starting")]
    entry = AuditEntry.objects.get(action="quota.change", actor_name="root")
    assert (entry.target, entry.datacenter, entry.details) == (
        "alice", "datacenter1", {"changes": {"cpu": [1000, 2000]}})


@pytest.mark.django_db
def test_raising_the_datacenters_default_admits_those_without_numbers_of_their_own(
        submit, alice, datacenter, admit_now, django_capture_on_commit_callbacks):
    quota_set(None, datacenter, None, jobs=1)
    submit("one")
    submit("two")
    assert states("two") == [("two", "queued")]
    with django_capture_on_commit_callbacks(execute=True):
        quota_set(None, datacenter, None, jobs=3)
    assert states("two") == [("two", "starting")]
    assert quota_report(alice, datacenter)["jobs"] == {
        "limit": "3", "limit_value": 3, "used": "2", "used_value": 2}


@pytest.mark.django_db
def test_a_quota_lowered_below_use(submit, alice, datacenter, admit_now,
                                   django_capture_on_commit_callbacks):
    quota_set(None, datacenter, alice, cpu=4000, jobs=5)
    submit("running", trainers=3, cpu="1")
    submit("waiting", trainers=2, cpu="1")  # 2 CPUs but only 1 free
    with django_capture_on_commit_callbacks(execute=True):
        quota_set(None, datacenter, alice, cpu=1500)
    # What runs keeps running; a queued job that can no longer ever fit fails, saying why.
    assert states("running", "waiting") == [("running", "starting"), ("waiting", "failed")]
    assert Job.objects.get(name="waiting").state_reason == (
        "can never start: cpu: the job asks for 2 CPU in all (2 trainers x 1), 500m more "
        "than your quota of 1500m in datacenter 'datacenter1'")
    # New jobs queue if they fit the new quota, and are refused if they never can.
    assert submit("small", cpu="1").state == "queued"
    with pytest.raises(ValidationError, match="cpu: the job asks for 2 CPU"):
        submit("too-big", trainers=2, cpu="1")
    with django_capture_on_commit_callbacks(execute=True):
        job_kill(alice, datacenter, "running")
    assert states("small") == [("small", "starting")]


@pytest.mark.django_db
def test_the_quota_api_shows_use_against_every_limit(token_client, submit, alice, datacenter,
                                                     pfs_home, held_tasks):
    (pfs_home / "data.bin").write_bytes(b"x" * 3000)
    submit("a", trainers=2, cpu="500m", memory="1Gi", pservers=1, pscpu="250m",
           psmemory="512Mi")
    report = token_client.get("/api/v1/quota").json()
    assert report["cpu"] == {"limit": "4", "limit_value": 4000, "used": "1250m",
                             "used_value": 1250}
    assert report["memory"]["used"] == "2.5Gi"
    assert report["jobs"] == {"limit": "2", "limit_value": 2, "used": "1", "used_value": 1}
    assert report["gpu"]["used_value"] == 0
    assert report["storage"]["used_value"] >= 3000
    assert re.fullmatch(r"\d\.\dKi", report["storage"]["used"])  # about 3 000 bytes


# -- the race ------------------------------------------------------------------------------------

def slowed(function, seconds: float = 0.3):
    """``function``, answering ``seconds`` late: a read that a racing writer overtakes."""
    def slow(*args):
        answer = function(*args)
        time.sleep(seconds)
        return answer

    return slow


@pytest.mark.django_db(transaction=True)
def test_two_submissions_racing_for_the_last_cpu_are_not_both_admitted(
        submit, alice, datacenter, monkeypatch, held_tasks):
    """Each admission reads what is in use, then admits. Here the read is slowed down, so
    without the lock both would read "all free" and both be admitted."""
    quota_set(None, datacenter, alice, cpu=1000, jobs=10)
    monkeypatch.setattr("scheduling.admission.quota_used", slowed(admission.quota_used))
    for round_ in range(3):
        barrier = threading.Barrier(2)
        failures = []

        def race(name, barrier=barrier, failures=failures):
            try:
                barrier.wait()
                submit(name, cpu="1")
            except Exception as exc:  # reported below, with the thread's name
                failures.append((name, exc))
            finally:
                connection.close()

        names = [f"r{round_}-a", f"r{round_}-b"]
        threads = [threading.Thread(target=race, args=(n,)) for n in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not failures
        assert sorted(state for _, state in states(*names)) == ["queued", "starting"]
        for name in names:  # make room for the next round
            job = Job.objects.get(name=name)
            Job.objects.filter(pk=job.pk).update(state="killed")


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_admits_the_next_job_when_one_ends(submit, alice, datacenter,
                                                         celery_worker):
    """No beat runs here: the queued job starts because the first one ended."""
    quota_set(None, datacenter, alice, jobs=1)
    submit("quick", entry="python -c 'print(1)'")
    waiting = submit("next", entry="python -c 'print(2)'")
    assert waiting.state == "queued"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and states("next") != [("next", "succeeded")]:
        time.sleep(0.1)
    assert states("quick", "next") == [("quick", "succeeded"), ("next", "succeeded")]
    events = list(Job.objects.get(name="next").events.filter(replica=None)
                  .values_list("to_state", "reason"))
    assert events[:3] == [("pending", "submitted by alice"),
                          ("queued", "waiting for quota: jobs 1 asked, 0 of 1 free"),
                          ("starting", "admitted: its quota is free")]


@pytest.fixture
def no_launch(monkeypatch):
    """Admitted jobs are not started on a backend (their starts are recorded in ``starts``);
    every other task goes to the real broker: the test ends the jobs as the engine would."""
    from kernel import queue

    starts, send = [], queue._send

    def held(name, args, countdown=None):
        (starts.append(args[0]) if name == queue.JOB_START else send(name, args, countdown))

    monkeypatch.setattr("kernel.queue._send", held)
    return starts


def race_as_jobs_end(users, datacenter, no_launch) -> None:
    """Give each user a queue of jobs of 1, 2 and 4 CPUs (a quota of 4 CPUs and 3 jobs),
    have the workers admit them, and end each admitted job (each end its own transaction, as
    the engine's, which asks for the next admission) until all have run; every job was then
    admitted exactly once."""
    start = timezone.now() - timedelta(hours=1)
    cpus = [1, 2, 1, 4, 1, 1, 2, 2, 4, 1, 1, 1, 2, 1]
    for user in users:
        quota_set(None, datacenter, user, cpu=4000, jobs=3)
        Job.objects.bulk_create(
            Job(owner=user, datacenter=datacenter, name=f"j{i}", cpu=cpu * 1000,
                created_at=start + timedelta(seconds=i), entry="python train.py",
                image="paddle", package=f"/pfs/datacenter1/home/{user.username}/pkg")
            for i, cpu in enumerate(cpus))
    for user in users:
        jobs_admit.delay(user.pk, datacenter.pk)
    total, ended = len(users) * len(cpus), set()
    deadline = time.monotonic() + 120
    while len(ended) < total and time.monotonic() < deadline:
        for job in Job.objects.filter(state="starting").exclude(pk__in=ended):
            job_transition(job, "running", "every replica is running")
            job_transition(job, "succeeded", "every trainer exited 0")
            ended.add(job.pk)
        time.sleep(0.02)
    assert len(ended) == total, list(Job.objects.exclude(pk__in=ended).values_list(
        "owner__username", "name", "state", "state_reason"))
    assert sorted(no_launch) == sorted(ended)  # each admitted once


@pytest.mark.django_db(transaction=True)
def test_workers_admit_many_users_queues_in_order_never_over_quota_as_jobs_end(
        make_user, datacenter, no_launch, celery_worker):
    """Three users' queues of jobs of 1, 2 and 4 CPUs (a quota of 4), admitted by two worker
    threads racing as the jobs end one by one (each end its own transaction, as the engine's);
    what the recorded events show: every job admitted once, each user's in the order they were
    submitted but for a smaller job started beside a waiting bigger one (backfill), and at no
    moment more held than the quota."""
    users = [make_user(name) for name in ("ann", "ben", "cat")]
    race_as_jobs_end(users, datacenter, no_launch)
    for user in users:
        submitted = list(Job.objects.filter(owner=user).order_by("created_at", "id"))
        held, order = 0, []
        events = JobEvent.objects.filter(job__owner=user, to_state__in=("starting",
                                                                         "succeeded"))
        # A start and an end at the same instant: the start first (never hiding an excess).
        for event in sorted(events, key=lambda e: (e.time, e.to_state != "starting", e.id)):
            cpu = next(job.cpu for job in submitted if job.pk == event.job_id)
            if event.to_state == "starting":
                held += cpu
                order.append(event.job_id)
                assert held <= 4000, f"{user.username} held {held}m CPU at {event.time}"
            else:
                held -= cpu
        waiting = [job.pk for job in submitted]
        cpu_of = {job.pk: job.cpu for job in submitted}
        for job_id in order:  # ahead of the first that waits only if smaller than it
            assert job_id == waiting[0] or cpu_of[job_id] < cpu_of[waiting[0]], user.username
            waiting.remove(job_id)


@pytest.mark.django_db
def test_jobs_ending_while_an_admission_waits_to_run_queue_no_other(
        submit, alice, datacenter, held_tasks, django_capture_on_commit_callbacks):
    """A user's jobs ending one after another while the admission the first asked for waits in
    the broker add nothing to the broker; once it has read the queue, the next end asks again
    (it may not have seen that end)."""
    quota_set(None, datacenter, alice, jobs=3)
    jobs = [submit(f"j{i}") for i in range(5)]

    def end(job):  # in a transaction of its own, as the engine ends a job
        with django_capture_on_commit_callbacks(execute=True):
            job_transition(job, "succeeded", "every trainer exited 0")

    for job in jobs[:3]:
        end(job)
    assert held_tasks.of("jobs.tasks.jobs_admit") == [(alice.pk, datacenter.pk)]
    assert jobs_admit(alice.pk, datacenter.pk) == 2
    end(jobs[3])
    assert held_tasks.of("jobs.tasks.jobs_admit") == [(alice.pk, datacenter.pk)] * 2


@pytest.mark.django_db
def test_jobs_of_several_users_ending_together_are_admitted_in_one_pass(
        alice, make_user, datacenter, held_tasks, django_capture_on_commit_callbacks):
    """Jobs of two users end while the admission the first end asked for waits in the broker:
    one admission is queued for the datacenter, and it admits both users' next jobs, each in
    their queue's order, in one transaction."""
    bob = make_user("bob")
    queues = {user: long_queue(user, datacenter, 3) for user in (alice, bob)}
    quota_admit(alice.pk, datacenter.pk)
    quota_admit(bob.pk, datacenter.pk)
    held_tasks.sent.clear()
    for user in (alice, bob):  # each end in a transaction of its own, as the engine's
        with django_capture_on_commit_callbacks(execute=True):
            job_transition(Job.objects.get(owner=user, name="holder"), "succeeded",
                           "every trainer exited 0")
    assert held_tasks.of("jobs.tasks.jobs_admit") == [(alice.pk, datacenter.pk)]
    with CaptureQueriesContext(connection) as queries:
        assert jobs_admit(alice.pk, datacenter.pk) == 2
    locks = [q["sql"] for q in queries.captured_queries
             if 'FROM "accounts_user"' in q["sql"] and "FOR UPDATE" in q["sql"]]
    assert len(locks) == 1  # both users' rows, in one pass
    for jobs in queues.values():
        assert list(Job.objects.filter(pk__in=[job.pk for job in jobs])
                    .order_by("created_at").values_list("state", "state_reason")) == [
            ("starting", "admitted: its quota is free"),
            ("queued", "waiting for quota: jobs 1 asked, 0 of 1 free"),
            ("queued", "waiting behind job w1")]
    # Read: nothing more is asked for until another job ends.
    assert held_tasks.of("jobs.tasks.jobs_admit") == [(alice.pk, datacenter.pk)]


@pytest.mark.django_db
def test_admins_see_everyones_running_and_queued_jobs(admin_browser, submit, alice,
                                                      datacenter, make_user, held_tasks):
    quota_set(None, datacenter, alice, jobs=1)
    submit("running-one")
    submit("waiting-one")
    job_kill(alice, datacenter, "running-one")
    submit("another")
    page = admin_browser.get("/admin/jobs/job/", {"activity": "active"}).content.decode()
    assert "waiting-one" in page and "another" in page and "running-one" not in page
    queued = admin_browser.get("/admin/jobs/job/", {"activity": "queued"}).content.decode()
    assert "another" in queued and "waiting-one" not in queued
    log = admin_browser.get("/admin/accounts/auditentry/").content.decode()
    for action in ("job.submit", "job.kill"):
        assert action in log


# -- the cap on queued jobs --------------------------------------------------------------------

@pytest.mark.django_db
def test_a_job_that_would_wait_beyond_the_queued_cap_is_refused(token_client, alice,
                                                                 datacenter, package,
                                                                 held_tasks):
    quota_set(None, datacenter, alice, jobs=1, queued=2)
    body = {"package": package, "entry": "python train.py"}
    for name in ("runs", "waits-1", "waits-2"):
        assert token_client.post("/api/v1/jobs/", {**body, "name": name},
                                 format="json").status_code == 201
    for dry_run in (True, False):
        error = assert_error(token_client.post("/api/v1/jobs/", {
            **body, "name": "one-too-many", "dry_run": dry_run}, format="json"),
            400, "too_many_queued", "queued")
        assert error["message"] == (
            "queued: 2 of your jobs already wait in datacenter 'datacenter1', and your quota "
            "lets 2 wait at once; submit it once some have started, or kill some")
    assert not Job.objects.filter(name="one-too-many").exists()
    assert not JobEvent.objects.filter(job__name="one-too-many").exists()
    assert token_client.get("/api/v1/quota").json()["queued"] == {
        "limit": "2", "limit_value": 2, "used": "2", "used_value": 2}
    job_kill(alice, datacenter, "waits-2")  # a place in the queue is free again
    assert token_client.post("/api/v1/jobs/", {**body, "name": "one-too-many"},
                             format="json").json()["state"] == "queued"


@pytest.mark.django_db
def test_with_no_queue_allowed_a_job_starts_at_once_or_is_refused(submit, alice, datacenter,
                                                                  held_tasks):
    quota_set(None, datacenter, alice, jobs=1, queued=0)
    assert submit("first").state == "starting"
    with pytest.raises(ValidationError) as refused:
        submit("second")
    assert (refused.value.code, refused.value.fields) == ("too_many_queued", {"queued": [
        "your quota lets no job wait in datacenter 'datacenter1', and this one would: submit "
        "it once your running jobs leave room for it"]})


@pytest.mark.django_db
def test_the_cap_is_the_datacenters_default_unless_the_user_has_one(submit, alice, datacenter,
                                                                    held_tasks):
    assert quota_report(alice, datacenter)["queued"]["limit_value"] == 100  # built in
    quota_set(None, datacenter, None, jobs=1, queued=1)
    submit("runs")
    submit("waits")
    with pytest.raises(ValidationError, match="quota lets 1 wait at once"):
        submit("refused")
    quota_set(None, datacenter, alice, queued=2)
    assert submit("waits-too").state == "queued"


@pytest.mark.django_db(transaction=True)
def test_submissions_racing_for_the_last_place_in_the_queue_are_not_both_queued(
        submit, alice, datacenter, monkeypatch, held_tasks):
    """Each submission counts the jobs that wait, then records its own. Here the count is
    slowed down, so without the lock both would see one place left and both be queued."""
    quota_set(None, datacenter, alice, jobs=1, queued=1)
    submit("runs")
    monkeypatch.setattr("scheduling.admission.quota_get", slowed(admission.quota_get))
    barrier, outcomes = threading.Barrier(2), {}

    def race(name):
        try:
            barrier.wait()
            outcomes[name] = submit(name).state
        except ValidationError as exc:
            outcomes[name] = exc.code
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes.values()) == ["queued", "too_many_queued"]


# -- cost bounded by what changed, not by how many jobs wait -----------------------------------

def long_queue(owner, datacenter, count: int) -> list[Job]:
    """``count`` jobs of ``owner`` waiting behind a running one that holds their only job slot,
    in the order they were submitted, still ``pending`` (their submissions' admission was cut
    off). Made in bulk: submitting 800 would take long."""
    quota_set(None, datacenter, owner, jobs=1)
    start = timezone.now() - timedelta(hours=1)
    fields = {"owner": owner, "datacenter": datacenter, "entry": "python train.py",
              "image": "paddle", "package": f"/pfs/datacenter1/home/{owner.username}/pkg"}
    holder = Job.objects.create(name="holder", state="running", created_at=start, **fields)
    Replica.objects.create(job=holder, role="trainer", index=0, state="running")
    jobs = Job.objects.bulk_create(
        Job(name=f"w{i}", created_at=start + timedelta(seconds=i + 1), **fields)
        for i in range(count))
    Replica.objects.bulk_create(Replica(job=job, role="trainer", index=0) for job in jobs)
    return jobs


def queries(function, *args) -> int:
    with CaptureQueriesContext(connection) as captured:
        function(*args)
    return len(captured)


def reasons(owner) -> dict[str, list[str]]:
    """Each waiting job's state and reason, with the names of the jobs in it."""
    seen: dict[str, list[str]] = {}
    for name, state, reason in (Job.objects.filter(owner=owner).exclude(name="holder")
                                .order_by("created_at").values_list("name", "state",
                                                                    "state_reason")):
        seen.setdefault(f"{state}: {reason}", []).append(name)
    return seen


@pytest.mark.django_db
def test_admission_takes_as_many_queries_for_800_waiting_jobs_as_for_30(
        alice, make_user, datacenter, held_tasks, django_capture_on_commit_callbacks):
    bob = make_user("bob")
    # 30: more than admission reads of a queue (its head and the LOOK_BEHIND behind it)
    long_queue(alice, datacenter, 30)
    long_queue(bob, datacenter, 800)
    counts = {}
    for user in (alice, bob):
        # Their submissions' admission was lost: each is queued, with one event.
        first = queries(quota_admit, user.pk, datacenter.pk)
        # Nothing changed: nothing is written, nobody is told; nor by the task a job's end
        # queues (once per queue, not once per job waiting in it).
        with django_capture_on_commit_callbacks() as callbacks:
            again = queries(quota_admit, user.pk, datacenter.pk)
            task = queries(jobs_admit, user.pk)
        assert callbacks == []
        # The running job ends: the first admitted, the next one blocks the rest.
        Job.objects.filter(owner=user, name="holder").update(state="succeeded")
        moved = queries(quota_admit, user.pk, datacenter.pk)
        counts[user.username] = (first, again, task, moved)
    assert counts["bob"] == counts["alice"]
    assert reasons(bob) == {
        "starting: admitted: its quota is free": ["w0"],
        "queued: waiting for quota: jobs 1 asked, 0 of 1 free": ["w1"],
        "queued: waiting behind job w1": [f"w{i}" for i in range(2, 800)]}
    events = list(JobEvent.objects.filter(job__owner=bob).values_list("to_state", flat=True))
    assert (len(events), events.count("queued"), events.count("starting")) == (801, 800, 1)


@pytest.mark.django_db
def test_a_raised_quota_admits_many_in_the_order_they_were_submitted(alice, datacenter,
                                                                     held_tasks):
    long_queue(alice, datacenter, 30)
    quota_set(None, datacenter, alice, jobs=26, cpu=100_000, memory=100 * GiB)  # 25 more
    admitted = quota_admit(alice.pk, datacenter.pk)
    assert admitted == [job.pk for job in Job.objects.filter(owner=alice).exclude(
        name="holder").order_by("created_at")[:25]]
    assert reasons(alice) == {
        "starting: admitted: its quota is free": [f"w{i}" for i in range(25)],
        "queued: waiting for quota: jobs 1 asked, 0 of 26 free": ["w25"],
        "queued: waiting behind job w25": ["w26", "w27", "w28", "w29"]}


@pytest.mark.django_db
def test_a_lowered_quota_fails_every_waiting_job_that_can_never_fit_at_once(
        alice, make_user, datacenter, held_tasks):
    bob = make_user("bob")
    counts = {}
    for user, count in ((alice, 10), (bob, 800)):
        long_queue(user, datacenter, count)
        quota_admit(user.pk, datacenter.pk)
        Quota.objects.filter(user=user).update(cpu=500)  # each job asks for 1 CPU
        counts[user.username] = queries(quota_admit, user.pk, datacenter.pk)
    assert counts["bob"] == counts["alice"]
    assert reasons(bob) == {
        "failed: can never start: cpu: the job asks for 1 CPU in all (1 trainer x 1), 500m "
        "more than your quota of 500m in datacenter 'datacenter1'":
            [f"w{i}" for i in range(800)]}
    assert JobEvent.objects.filter(job__owner=bob, to_state="failed").count() == 800


@pytest.mark.django_db
def test_a_reconcile_takes_as_many_queries_for_800_waiting_jobs_as_for_30(
        alice, make_user, datacenter, held_tasks):
    """The running job ended but the admission it queued was lost: the reconciler admits."""
    counts = []
    for user, count in ((alice, 30), (make_user("bob"), 800)):
        long_queue(user, datacenter, count)
        quota_admit(user.pk, datacenter.pk)
        # By its key: a join over rows the planner has not seen yet (made in this
        # transaction) can be planned as nested full scans, minutes for 800 jobs.
        holder = Job.objects.get(owner=user, name="holder")
        Job.objects.filter(pk=holder.pk).update(state="succeeded")
        Replica.objects.filter(job=holder).update(state="succeeded")
        first = queries(jobs_reconcile)
        counts.append((first, queries(jobs_reconcile)))
        assert reasons(user)["starting: admitted: its quota is free"] == ["w0"]
        Job.objects.filter(owner=user).delete()  # the next user's queue alone
    assert counts[1] == counts[0]


@pytest.mark.django_db
def test_the_reconciler_deletes_ended_jobs_past_their_ttl_only(submit, alice, datacenter,
                                                               held_tasks):
    quota_set(None, datacenter, alice, jobs=3)
    for name, ttl in (("past", 60), ("within", 3600), ("kept", None)):
        submit(name, ttl_seconds_after_finished=ttl)
        job_kill(alice, datacenter, name)
    Job.objects.update(finished_at=timezone.now() - timedelta(minutes=10))
    assert jobs_reconcile()["expired"] == 1
    assert sorted(Job.objects.values_list("name", flat=True)) == ["kept", "within"]


# -- one reconcile at a time ---------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_reconcile_while_another_runs_returns_at_once(datacenter, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    real_waiting_queues = tasks.waiting_queues

    def slow_waiting_queues(**filters):
        entered.set()
        release.wait(30)
        return real_waiting_queues(**filters)

    monkeypatch.setattr("jobs.tasks.waiting_queues", slow_waiting_queues)
    results = []

    def first():
        try:
            results.append(jobs_reconcile())
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert entered.wait(10)
        began = time.monotonic()
        assert jobs_reconcile() is None  # the first holds the lease: nothing done
        assert time.monotonic() - began < 1
    finally:
        release.set()
        thread.join(30)
    assert results and results[0]["admitted"] == 0
    entered.clear()
    release.set()
    assert jobs_reconcile() is not None  # released at the end: the next one runs


@pytest.mark.django_db
def test_a_reconcile_whose_worker_died_holds_the_lease_only_until_it_expires(datacenter):
    assert cache.add(tasks.RECONCILE_LEASE, "a run's", 1)  # and its worker dies
    assert jobs_reconcile() is None
    time.sleep(1.2)
    assert jobs_reconcile() is not None
