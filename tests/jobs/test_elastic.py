"""Elastic trainers (``trainers`` MIN:MAX, docs/elastic.md): the rules on a range, admission
with MIN and growth up to MAX as room appears (another job ends, a quota is raised) but never
while a job waits, and real processes on the local backend: trainers added as the quota has
room, a trainer lost beyond its restarts replaced while the job goes on and succeeds with every
record of its dataset handed out, and a job below MIN for longer than its timeout failing with
the event that says why."""

from __future__ import annotations

import os
import signal

import pytest

from accounts.services import quota_set
from jobs import engine
from jobs.backends import backend_for
from jobs.models import Job, JobEvent
from jobs.services import job_kill, job_submit
from kernel.errors import ValidationError
from scheduling.admission import quota_report
from scheduling.tasks import jobs_admit
from tests.conftest import assert_error
from tests.factories import HOME, package_write, submit_job
from tests.jobs.master_scenario import (
    READ_TASKS,
    assert_every_record_once,
    recordio_dataset_write,
    taken,
)
from tests.polling import wait

DATASET = f"{HOME}/data/part-*.recordio"

# Pservers wait to be stopped; trainers sleep (SLEEP) unless they read the master's tasks
# (READ=1): then, for each task, note it (taken), read its records (SLOW seconds each; trainer
# SLOW_TRAINER: VERY_SLOW), and once done write them (committed), as test_master_e2e's do.
PROGRAM = """\
import os, time
if os.environ["TRAINING_ROLE"] == "PSERVER":
    time.sleep(3600)
me = int(os.environ["PADDLE_TRAINER_ID"])
print("trainer", me, "of", os.environ["PADDLE_TRAINERS_NUM"], flush=True)
if os.environ.get("READ") != "1":
    time.sleep(float(os.environ.get("SLEEP", "60")))
    raise SystemExit(0)
slow = float(os.environ["VERY_SLOW"] if me == int(os.environ.get("SLOW_TRAINER", -1))
             else os.environ.get("SLOW", "0"))
""" + READ_TASKS


@pytest.fixture
def package(pfs_home) -> str:
    """The package, and the dataset it reads."""
    recordio_dataset_write(pfs_home)
    return package_write(pfs_home, PROGRAM)


def elastic(**fields) -> dict:
    """An elastic job's submission: 1 pserver and a dataset, as a range needs."""
    return {"package": f"{HOME}/pkg", "entry": "python train.py", "pservers": 1,
            "dataset": DATASET, "task_records": 20, **fields}


def trainer_states(job) -> dict[str, str]:
    return {r.name: r.state for r in job.replicas.filter(role="trainer").order_by("index")}


# -- the rules ---------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize(("fields", "field", "says"), [
    ({"trainers": "2:4", "pservers": 0}, "trainers",
     "a range (2:4) needs parameter servers"),
    ({"trainers": "2:4", "dataset": None, "task_records": None}, "trainers",
     "a range (2:4) needs a dataset"),
    ({"trainers": "4:2"}, "trainers", "MIN must be at most MAX, not 4:2"),
    ({"trainers": "0:2"}, "trainers", "MIN must be at least 1"),
    ({"parallelism": "2:x"}, "trainers", "neither a whole number nor a range MIN:MAX"),
    ({"trainers": 3, "trainers_min": 4}, "trainers_min", "at most trainers (3), not 4"),
    ({"trainers": "2:4", "trainers_min": 3}, "trainers_min", "given twice"),
    ({"trainers": 3, "trainers_lost_limit": 1}, "trainers_lost_limit",
     "only with a range of trainers"),
    ({"trainers": 3, "trainers_below_min_seconds": 60}, "trainers_below_min_seconds",
     "only with a range of trainers"),
    ({"trainers": "2:4", "trainers_below_min_seconds": 0}, "trainers_below_min_seconds",
     "must be between 1 and"),
])
def test_the_api_names_the_field_and_the_rule(token_client, package, fields, field, says):
    body = {k: v for k, v in {"name": "e", **elastic(**fields)}.items() if v is not None}
    response = token_client.post("/api/v1/jobs/", body, format="json")
    error = assert_error(response, 400, "invalid", field)
    assert says in error["fields"][field][0], error
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_range_is_a_job_with_min_max_and_defaults(token_client, alice, datacenter,
                                                     package, held_tasks):
    quota_set(None, datacenter, alice, cpu=8000, jobs=5)
    response = token_client.post("/api/v1/jobs/", {"name": "e", **elastic(parallelism="2:4")},
                                 format="json")
    assert response.status_code == 201, response.content
    job = response.json()
    assert (job["trainers"], job["trainers_min"], job["trainers_lost_limit"],
            job["trainers_below_min_seconds"], job["trainers_held"], job["trainers_shown"]) == (
        4, 2, 4, 300, 4, "4 (2\u20134)")
    # A fixed job shows its number alone.
    fixed = token_client.post("/api/v1/jobs/", {"name": "f", "package": f"{HOME}/pkg",
                                                "entry": "python train.py", "trainers": "3"},
                              format="json").json()
    assert (fixed["trainers"], fixed["trainers_min"], fixed["trainers_shown"]) == (3, None, "3")


@pytest.mark.django_db
def test_a_kueue_datacenter_offers_no_range(alice, datacenter, package):
    datacenter.backend = "kubernetes"
    datacenter.backend_settings = {"kube_scheduler": "kueue", "kube_queue": "team"}
    with pytest.raises(ValidationError) as raised:
        job_submit(alice, datacenter, {"name": "e", **elastic(trainers="2:4")})
    assert "Kueue admits its jobs at one size" in raised.value.fields["trainers"][0]


# -- admission ---------------------------------------------------------------------------------

@pytest.fixture
def admit_now(held_tasks):
    """Admission queued after a commit runs at once, here; nothing is started."""
    held_tasks.run("jobs.tasks.jobs_admit", jobs_admit)
    return held_tasks


def submit(alice, datacenter, name, **fields) -> Job:
    return submit_job(alice, datacenter, name, **elastic(**fields))


def held(name: str) -> tuple[str, int]:
    return Job.objects.values_list("state", "trainers_held").get(name=name)


@pytest.mark.django_db
def test_admitted_with_min_running_as_many_as_fit_and_counted_as_held(alice, datacenter,
                                                                      package, admit_now):
    quota_set(None, datacenter, alice, cpu=4000, jobs=5)  # the pserver and 3 trainers
    submit(alice, datacenter, "e", trainers="2:5")
    assert held("e") == ("starting", 3)
    assert quota_report(alice, datacenter)["cpu"]["used_value"] == 4000
    # MIN does not fit: it waits, and says what it needs.
    job = submit(alice, datacenter, "f", trainers="2:5")
    assert job.state == "queued"
    assert job.state_reason == "waiting for quota: cpu 3 asked, 0 of 4 free"
    with pytest.raises(ValidationError, match=r"at least 4 trainers x 1"):
        submit(alice, datacenter, "g", trainers="4:5")  # MIN can never fit


@pytest.mark.django_db
def test_it_grows_when_room_appears_but_never_while_a_job_waits(
        alice, datacenter, package, admit_now, django_capture_on_commit_callbacks):
    quota_set(None, datacenter, alice, cpu=7000, jobs=5)
    submit(alice, datacenter, "fixed", trainers=2)  # 3 CPU with its pserver
    submit(alice, datacenter, "e", trainers="1:4")  # 2 CPU, and the 2 free: 3 trainers
    assert held("e") == ("starting", 3)
    assert submit(alice, datacenter, "big", trainers=3).state == "queued"  # 4 CPU
    with django_capture_on_commit_callbacks(execute=True):
        job_kill(alice, datacenter, "fixed")
    # 3 CPU free, not enough for the waiting job, which the elastic one does not overtake.
    assert held("big") == ("queued", 0) and held("e") == ("starting", 3)
    with django_capture_on_commit_callbacks(execute=True):
        job_kill(alice, datacenter, "big")
    assert held("e") == ("starting", 4)  # nothing waits: up to its MAX
    assert quota_report(alice, datacenter)["cpu"]["used_value"] == 5000


@pytest.mark.django_db
def test_it_grows_when_the_quota_is_raised(alice, datacenter, package, admit_now,
                                           django_capture_on_commit_callbacks):
    quota_set(None, datacenter, alice, cpu=3000, jobs=5)
    submit(alice, datacenter, "e", trainers="2:6")
    assert held("e") == ("starting", 2)
    with django_capture_on_commit_callbacks(execute=True):
        quota_set(None, datacenter, alice, cpu=5500)
    assert held("e") == ("starting", 4)  # 4.5 CPU free for trainers of 1: 4
    with django_capture_on_commit_callbacks(execute=True):
        quota_set(None, datacenter, alice, cpu=50000)
    assert held("e") == ("starting", 6)


# -- real processes ------------------------------------------------------------------------------

@pytest.fixture
def stopped_after():
    """Whatever a test's outcome, its jobs' processes are stopped."""
    jobs: list[Job] = []
    yield jobs.append
    for job in jobs:
        if Job.objects.filter(pk=job.pk).exists():
            backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)


def sync_until(job, predicate, timeout: float = 60.0, message: str = "condition"):
    """Drive the engine (as the job's watch does) until ``predicate()``."""
    def look():
        engine.job_sync(job.pk)
        job.refresh_from_db()
        return predicate()
    return wait(look, timeout, message)


@pytest.mark.django_db(transaction=True)
def test_trainers_are_added_as_the_quota_has_room(alice, datacenter, package, admit_now,
                                                  stopped_after):
    quota_set(None, datacenter, alice, cpu=2000, jobs=5)  # the pserver and 1 trainer
    job = submit(alice, datacenter, "e", trainers="1:3")
    stopped_after(job)
    engine.job_launch(job.pk)
    sync_until(job, lambda: job.state == "running", message="the job to run")
    assert trainer_states(job) == {"trainer-0": "running", "trainer-1": "pending",
                                   "trainer-2": "pending"}
    assert job.trainers_shown == "1 (1\u20133)"
    quota_set(None, datacenter, alice, cpu=4000)  # admission gives it 2 more
    sync_until(job, lambda: list(trainer_states(job).values()) == ["running"] * 3,
               message="the added trainers to run")
    assert job.trainers_shown == "3 (1\u20133)"
    added = JobEvent.objects.filter(job=job, replica__index=2, to_state="starting").get()
    assert added.reason == "added: the job holds 3 (1\u20133) trainers"


@pytest.mark.django_db(transaction=True)
def test_below_min_for_longer_than_its_timeout_fails_the_job(alice, datacenter, package,
                                                             admit_now, stopped_after):
    quota_set(None, datacenter, alice, cpu=3000, jobs=5)
    job = submit(alice, datacenter, "e", trainers="2:3", trainers_below_min_seconds=2)
    stopped_after(job)
    engine.job_launch(job.pk)
    sync_until(job, lambda: job.state == "running", message="the job to run")
    quota_set(None, datacenter, alice, cpu=2000)  # a lost trainer cannot be replaced
    trainer = job.replicas.get(role="trainer", index=0)
    os.killpg(int(trainer.backend_ref.split(":")[1]), signal.SIGKILL)  # no restart allowed
    sync_until(job, lambda: job.trainers_lost == 1, message="trainer-0 to be lost")
    assert job.state == "running" and job.trainers_held == 1
    assert job.trainers_short_since is not None
    lost = JobEvent.objects.get(job=job, to_state="lost")
    assert lost.replica.name == "trainer-0"
    assert lost.reason.startswith(f"trainer-0 lost ({lost.replica.reason}); ")
    assert "the job goes on with 1 running trainers of 2\u20133" in lost.reason
    below = JobEvent.objects.get(job=job, reason__startswith="fewer trainers run")
    assert below.reason == ("fewer trainers run than its least: 1 of at least 2; it fails if "
                            "that lasts 2 s (trainers_below_min_seconds)")
    sync_until(job, lambda: job.state == "failed", timeout=30, message="the job to fail")
    assert job.state_reason.startswith(
        "fewer than 2 trainers (trainers_min) ran for longer than 2 s "
        "(trainers_below_min_seconds): 1 running; trainer-0 lost: ")
    assert set(trainer_states(job).values()) == {"failed", "killed"}


@pytest.mark.django_db(transaction=True)
def test_losing_more_trainers_than_its_limit_fails_the_job(alice, datacenter, package,
                                                           admit_now, stopped_after):
    quota_set(None, datacenter, alice, cpu=3000, jobs=5)
    job = submit(alice, datacenter, "e", trainers="1:2", trainers_lost_limit=0)
    stopped_after(job)
    engine.job_launch(job.pk)
    sync_until(job, lambda: job.state == "running", message="the job to run")
    trainer = job.replicas.get(role="trainer", index=1)
    os.killpg(int(trainer.backend_ref.split(":")[1]), signal.SIGKILL)
    sync_until(job, lambda: job.state == "failed", message="the job to fail")
    assert job.state_reason.startswith(
        "lost 1 trainer, more than its limit of 0 (trainers_lost_limit); the last, "
        "trainer-1: ")


@pytest.mark.django_db(transaction=True)
def test_a_lost_trainer_is_replaced_and_the_job_succeeds_with_every_record(
        live_portal, settings, celery_worker):
    """2:3 trainers read 1000 records in 50 tasks, 2 passes; trainer 1, killed mid-task
    with no restart allowed, is lost: its task goes to another trainer, trainer-3 replaces it,
    and the job succeeds with every record read in a task done exactly once per pass."""
    package_write(live_portal.home, PROGRAM)
    recordio_dataset_write(live_portal.home)
    job = job_submit(live_portal.user, live_portal.datacenter, {
        "name": "reader", **elastic(trainers="2:3", passes=2, restart_limit=0, env={
            "READ": "1", "SLOW": "0.01", "SLOW_TRAINER": "1", "VERY_SLOW": "0.05"})}).job
    wait(lambda: taken(job, 1), 60, "trainer 1 to take a task")
    trainer = job.replicas.get(role="trainer", index=1)
    os.killpg(int(trainer.backend_ref.split(":")[1]), signal.SIGKILL)  # mid-task
    wait(lambda: Job.objects.get(pk=job.pk).state in ("succeeded", "failed", "killed"), 180,
         "the job to end")
    job.refresh_from_db()
    events = list(job.events.values_list("reason", flat=True))
    assert job.state == "succeeded", (job.state_reason, events)
    assert job.state_reason == ("its master handed out every task and its trainers exited 0 "
                                "(1 trainer lost on the way: their tasks went to the others)")
    states = trainer_states(job)
    assert states["trainer-1"] == "failed" and states["trainer-0"] == "succeeded"
    assert states["trainer-3"] in ("succeeded", "killed"), states  # the replacement
    assert JobEvent.objects.filter(job=job, to_state="lost", replica__index=1).exists()
    assert JobEvent.objects.filter(job=job, replica__index=3, to_state="starting",
                                   reason__startswith="added:").exists()
    assert_every_record_once(job)
    again = JobEvent.objects.filter(job=job, from_state="leased", to_state="waiting",
                                    reason__contains="trainer-1").exists()
    assert again, "trainer 1's task was not dispatched again"
