"""Jobs that run after others (``submit -after JOB[:ok|any]``, issue 40 point 4), through the
portal on the local backend: a job that waits for another holds no quota and blocks nothing;
it starts once the other has ended as asked (chains too), and fails with the reason when it no
longer can; what a submission names is checked, naming the field."""

from __future__ import annotations

import time

import pytest

from accounts.services import quota_set
from jobs.models import Job
from jobs.services import job_kill
from jobs.states import JobState
from jobs.transitions import job_transition
from scheduling.admission import quota_report
from scheduling.tasks import jobs_admit
from tests.factories import job_row, submit_job

pytestmark = pytest.mark.package("import time; time.sleep(60)\n")

QUICK = "python -c 'print(1)'"
FAILING = "python -c 'import sys; sys.exit(3)'"


@pytest.fixture
def admit_now(held_tasks):
    """Admission queued after a commit runs at once, here (admitted jobs are not started)."""
    held_tasks.run("jobs.tasks.jobs_admit", jobs_admit)


def job(name: str) -> Job:
    return Job.objects.get(name=name)


def wait_for(names: dict[str, str], timeout: float = 90) -> None:
    """Until each job is in its state (they are run by the test's Celery worker)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(job(n).state == s for n, s in names.items()):
            return
        time.sleep(0.1)
    assert {n: job(n).state for n in names} == names


@pytest.mark.django_db
def test_a_job_waiting_for_another_holds_no_quota_and_blocks_nothing(
        submit, alice, datacenter, token_client, held_tasks):
    quota_set(None, datacenter, alice, jobs=2)
    submit("prep")
    train = submit("train", after="prep")
    assert train.state == "queued"
    assert train.state_reason == "waiting for job prep to succeed"
    # train is first in alice's queue, yet her next job starts in the place it does not hold.
    assert submit("other").state == "starting"
    assert quota_report(alice, datacenter)["jobs"]["used_value"] == 2  # prep and other
    shown = token_client.get("/api/v1/jobs/train/").json()
    assert (shown["state"], shown["state_reason"], shown["after"]) == (
        "queued", "waiting for job prep to succeed", "prep")


@pytest.mark.django_db(transaction=True)
def test_a_chain_runs_each_job_after_the_one_before_succeeded(submit, alice, datacenter,
                                                             celery_worker):
    """prep -> train -> report (report after train:any); no beat runs: each starts because
    the one before ended. A job after one that has already succeeded starts at once."""
    quota_set(None, datacenter, alice, jobs=3)
    submit("prep", entry=QUICK + " && sleep 1")
    submit("train", entry=QUICK, after="prep")
    submit("report", entry=QUICK, after="train:any")
    wait_for({"prep": "succeeded", "train": "succeeded", "report": "succeeded"})
    prep, train, report = job("prep"), job("train"), job("report")
    assert train.started_at >= prep.finished_at and report.started_at >= train.finished_at
    events = list(train.events.filter(replica=None).values_list("to_state", "reason"))
    assert events[:3] == [("pending", "submitted by alice"),
                          ("queued", "waiting for job prep to succeed"),
                          ("starting", "admitted: its quota is free")]
    assert ("queued", "waiting for job train to end") in report.events.values_list(
        "to_state", "reason")

    late = submit("late", entry=QUICK, after="prep,report:any")
    assert late.state == "starting"  # both ended as asked: it never waits
    wait_for({"late": "succeeded"})


@pytest.mark.django_db(transaction=True)
def test_a_failed_job_starts_those_after_it_any_and_fails_those_after_it_ok(
        submit, alice, datacenter, celery_worker):
    quota_set(None, datacenter, alice, jobs=4)
    submit("prep", entry=FAILING)
    submit("anyway", entry=QUICK, after="prep:any")
    submit("train", entry=QUICK, after="prep")
    submit("report", entry=QUICK, after="train")  # a chain fails through
    wait_for({"prep": "failed", "anyway": "succeeded", "train": "failed", "report": "failed"})
    train, report = job("train"), job("report")
    assert train.state_reason == "dependency prep failed"
    assert report.state_reason == "dependency train failed"
    assert list(train.events.filter(replica=None).values_list("to_state", "reason")) == [
        ("pending", "submitted by alice"), ("queued", "waiting for job prep to succeed"),
        ("failed", "dependency prep failed")]
    assert train.started_at is None  # it never held anything


@pytest.mark.django_db
def test_killing_a_job_fails_the_jobs_after_it(submit, alice, datacenter, admit_now,
                                              django_capture_on_commit_callbacks):
    quota_set(None, datacenter, alice, jobs=1)
    submit("prep")
    submit("train", after="prep")
    submit("eval", after="prep:any")
    with django_capture_on_commit_callbacks(execute=True):
        job_kill(alice, datacenter, "prep")
    assert (job("train").state, job("train").state_reason) == (
        "failed", "dependency prep was killed")
    # eval asked only that prep end: it takes the place prep held.
    assert job("eval").state == "starting"


@pytest.mark.django_db
def test_what_a_job_runs_after_is_checked_naming_the_field(token_client, make_user, alice,
                                                           datacenter, package, held_tasks):
    bob = make_user("bob")
    job_row(bob, datacenter, "secret")
    submit_job(alice, datacenter, "prep", package=package)
    lost = submit_job(alice, datacenter, "lost", package=package)
    job_transition(lost, JobState.FAILED, "test")
    rule = ("JOB or JOB:MODE, comma-separated: your jobs, MODE ok (it succeeded; the default) "
            "or any (it ended, however)")
    refused = {
        "nosuch": "you have no job named 'nosuch' in datacenter 'datacenter1' (a job runs only "
                  "after jobs of your own)",
        # Another user's job is no job of hers: the same words, nothing told about it.
        "secret": "you have no job named 'secret' in datacenter 'datacenter1' (a job runs only "
                  "after jobs of your own)",
        "new": "a job cannot run after itself (new)",
        "prep,new:any": "a job cannot run after itself (new)",
        "prep:maybe": f"{rule}; the mode of prep is 'maybe': give ok or any",
        "prep,prep:any": f"{rule}; prep is given twice, as prep:ok and prep:any: give one",
        "Prep": f"{rule}; 'Prep': use lower-case letters",
        "lost": "job lost has ended (failed): it will never succeed; run after lost:any to "
                "start once it has ended, however",
    }
    for after, message in refused.items():
        answer = token_client.post("/api/v1/jobs/", {"name": "new", "package": package,
                                                     "entry": "x", "after": after},
                                   format="json")
        assert answer.status_code == 400, answer.json()
        assert answer.json()["fields"] == {"after": [message]}, after
    assert not Job.objects.filter(name="new").exists()
    answer = token_client.post("/api/v1/jobs/", {"name": "new", "package": package,
                                                 "entry": "x", "after": " prep , lost:any "},
                               format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["after"] == "prep,lost:any"
    assert answer.json()["state_reason"] == "waiting for job prep to succeed"
