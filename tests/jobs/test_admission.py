"""Quota admission: refusal of jobs that can never fit, the FIFO queue per user, admission as
soon as room appears (a job ends, a quota is raised), quotas lowered below use, and two
submissions racing for the last free CPU on PostgreSQL."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from accounts.models import AuditEntry, Quota
from accounts.services import quota_set
from jobs import admission
from jobs.admission import quota_report
from jobs.models import Job
from jobs.services import job_kill, job_submit
from paddlecloud.errors import ValidationError
from tests.conftest import assert_error

GiB = 2**30


@pytest.fixture
def package(pfs_home) -> str:
    (pfs_home / "pkg").mkdir()
    (pfs_home / "pkg" / "train.py").write_text("import time; time.sleep(60)\n")
    return "/pfs/datacenter1/home/alice/pkg"


@pytest.fixture
def no_starts(monkeypatch):
    """Admitted jobs are not started: these tests are about admission alone."""
    monkeypatch.setattr("jobs.admission._queue_starts", lambda job_ids: None)


@pytest.fixture
def admit_now(monkeypatch, no_starts):
    """Admission queued after a commit runs at once, here, instead of on a worker."""
    from jobs.tasks import jobs_admit

    monkeypatch.setattr("jobs.tasks.jobs_admit.delay",
                        lambda user_id, dc_id=None: jobs_admit(user_id, dc_id))


@pytest.fixture
def submit(alice, datacenter, package):
    def do(name, **fields) -> Job:
        job = job_submit(alice, datacenter, {"name": name, "package": package,
                                             "entry": "python train.py", **fields}).job
        return job

    return do


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
def test_the_api_refuses_with_400_and_the_dry_run_says_so_too(token_client, package):
    body = {"name": "big", "package": package, "entry": "x", "trainers": 5, "cpu": "1"}
    for dry_run in (True, False):
        error = assert_error(token_client.post("/api/v1/jobs/", {**body, "dry_run": dry_run},
                                               format="json"), 400, "over_quota", "cpu")
        assert "1 more than your quota of 4" in error["message"]


# -- the queue ---------------------------------------------------------------------------------

@pytest.mark.django_db
def test_jobs_wait_in_submission_order_and_a_big_one_is_not_overtaken(submit, alice,
                                                                      datacenter, no_starts):
    quota_set(None, datacenter, alice, cpu=4000, jobs=10)
    submit("a", trainers=2, cpu="1")  # 2 of 4 CPUs
    big = submit("big", trainers=3, cpu="1")  # needs 3: only 2 free
    small = submit("small", cpu="1")  # would fit, but waits its turn
    assert states("a", "big", "small") == [("a", "starting"), ("big", "queued"),
                                           ("small", "queued")]
    big.refresh_from_db()
    small.refresh_from_db()
    assert big.state_reason == "waiting for quota: cpu 3 asked, 2 of 4 free"
    assert small.state_reason == "waiting behind job big"
    assert [admission.queue_position(j) for j in (big, small)] == [1, 2]


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
                                                     pfs_home, no_starts):
    (pfs_home / "data.bin").write_bytes(b"x" * 3000)
    submit("a", trainers=2, cpu="500m", memory="1Gi", pservers=1, pscpu="250m",
           psmemory="512Mi")
    report = token_client.get("/api/v1/quota").json()
    assert report["cpu"] == {"limit": "4", "limit_value": 4000, "used": "1250m",
                             "used_value": 1250}
    assert report["memory"]["used"] == "2560Mi"
    assert report["jobs"] == {"limit": "2", "limit_value": 2, "used": "1", "used_value": 1}
    assert report["gpu"]["used_value"] == 0
    assert report["storage"]["used_value"] >= 3000


# -- the race ------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_two_submissions_racing_for_the_last_cpu_are_not_both_admitted(
        submit, alice, datacenter, monkeypatch, no_starts):
    """Each admission reads what is in use, then admits. Here the read is slowed down, so
    without the lock both would read "all free" and both be admitted."""
    quota_set(None, datacenter, alice, cpu=1000, jobs=10)
    real_quota_used = admission.quota_used

    def slow_quota_used(*args):
        used = real_quota_used(*args)
        time.sleep(0.3)
        return used

    monkeypatch.setattr("jobs.admission.quota_used", slow_quota_used)
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


@pytest.mark.django_db
def test_admins_see_everyones_running_and_queued_jobs(admin_browser, submit, alice,
                                                      datacenter, make_user, no_starts):
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
