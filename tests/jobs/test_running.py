"""Jobs really running: a real Celery worker on Redis, real processes on the local backend,
real PostgreSQL. Restarts, kills, deadlines, and recovery when the worker dies half way."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from django.db import connection

from jobs import engine
from jobs.backends.local.backend import LocalBackend, job_dir
from jobs.engine import exit_reason
from jobs.files import output_dir
from jobs.models import Job
from jobs.services import job_kill
from jobs.starts import start_held
from jobs.tasks import jobs_reconcile
from kernel.queue import JOB_START
from paddlecloud_core.processes import runner_alive

transactional = pytest.mark.django_db(transaction=True)

COUNTING_TRAINER = """\
import os, sys, time
out = os.environ["PADDLE_OUTPUT_DIR"]
with open(os.path.join(out, "starts.txt"), "a") as f:
    f.write(os.environ["TRAINER_ID"] + "\\n")
print("trainer", os.environ["TRAINER_ID"], "starting", flush=True)
time.sleep(float(os.environ.get("SLEEP", "0.5")))
sys.exit(int(os.environ.get("CODE", "0")))
"""

pytestmark = pytest.mark.package(COUNTING_TRAINER)


def wait_for(job: Job, states: set[str], timeout: float = 30) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.state in states:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job stayed {job.state}; events: {list(job.events.all())}")


def starts(job: Job) -> list[str]:
    path = output_dir(job) / "starts.txt"
    return sorted(path.read_text().split()) if path.exists() else []


@transactional
def test_a_job_runs_to_success_on_the_worker(celery_worker, submit):
    job = wait_for(submit(trainers=2), {"succeeded", "failed"})
    assert job.state == "succeeded", list(job.events.all())
    assert starts(job) == ["0", "1"]
    assert {(r.name, r.state, r.exit_code) for r in job.replicas.all()} == {
        ("trainer-0", "succeeded", 0), ("trainer-1", "succeeded", 0)}
    assert job.started_at and job.finished_at
    log = (output_dir(job) / "node_1" / "train.log").read_text()
    assert "trainer 1 starting" in log


@transactional
def test_a_failing_trainer_is_restarted_up_to_its_limit(celery_worker, submit):
    job = wait_for(submit(restart_limit=2, env={"CODE": "3", "SLEEP": "0"}),
                   {"succeeded", "failed"})
    assert job.state == "failed"
    assert job.state_reason == "trainer-0 failed: exited with code 3"
    trainer = job.replicas.get()
    assert (trainer.restarts, trainer.exit_code) == (2, 3)
    reasons = [e.reason for e in job.events.filter(replica=trainer)]
    assert "exited with code 3; restart 1 of 2" in reasons
    assert "exited with code 3; restart 2 of 2" in reasons
    assert starts(job) == ["0", "0", "0"]  # the first run and two restarts
    log = (output_dir(job) / "node_0" / "train.log").read_text()
    assert "--- restart 1 ---" in log and "--- restart 2 ---" in log


@transactional
def test_kill_during_running_ends_every_replica(celery_worker, submit, alice, datacenter):
    job = wait_for(submit(trainers=2, env={"SLEEP": "60"}), {"running"})
    pids = [int(r.backend_ref.removeprefix("pid:")) for r in job.replicas.all()]
    job_kill(alice, datacenter, job.name)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and job.replicas.exclude(state="killed").exists():
        time.sleep(0.1)
    assert set(job.replicas.values_list("state", flat=True)) == {"killed"}
    job.refresh_from_db()
    assert job.state == "killed" and job.state_reason == "killed by alice"
    for pid in pids:
        assert not runner_alive(pid)
        with pytest.raises(ProcessLookupError):  # nor anything the trainer started
            os.killpg(pid, 0)


class _CrashAfterFirstStart(LocalBackend):
    """A backend whose task 'dies' right after starting the first replica."""

    def __init__(self):
        self.calls = 0

    def start(self, job, replica, env):
        ref = super().start(job, replica, env)
        self.calls += 1
        if self.calls == 1:
            raise SystemExit("worker killed")
        return ref


@transactional
def test_the_reconciler_finishes_a_start_cut_off_half_way(submit, monkeypatch):
    """Exactly one set of replicas, although the start ran twice and died once."""
    job = submit(trainers=3, env={"SLEEP": "1"})
    crashing = _CrashAfterFirstStart()
    monkeypatch.setattr("jobs.engine.backend_for", lambda dc: crashing)
    with pytest.raises(SystemExit):
        engine.job_launch(job.pk)
    monkeypatch.undo()
    job.refresh_from_db()
    assert job.state == "starting"
    assert set(job.replicas.values_list("state", flat=True)) == {"pending"}  # rolled back

    engine.job_launch(job.pk)  # the retried task, or jobs_reconcile after a lost start
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and engine.job_sync(job.pk):
        time.sleep(0.1)
    job.refresh_from_db()
    assert job.state == "succeeded"
    assert starts(job) == ["0", "1", "2"]  # trainer-0 was not started a second time


@transactional
def test_the_reconciler_starts_jobs_whose_start_was_lost(submit, held_tasks):
    job = submit("job")  # its start is held: the message is lost
    assert job.state == "starting"  # admitted, but nothing will start it
    Job.objects.filter(pk=job.pk).update(updated_at=job.updated_at.replace(year=2000))
    assert jobs_reconcile()["restarted"] == 1
    assert held_tasks.of(JOB_START) == [(job.pk,)]  # not asked twice while it may be queued
    # It waited in the broker so long that it is presumed lost (starts.QUEUED_SECONDS).
    Job.objects.filter(pk=job.pk).update(start_lease_until=job.updated_at.replace(year=2000))
    held_tasks.run(JOB_START, engine.job_launch)
    assert jobs_reconcile()["restarted"] == 1
    job.refresh_from_db()
    assert job.state in ("starting", "running")
    assert starts_soon(job) == ["0"]


def starts_soon(job: Job, count: int = 1, timeout: float = 10) -> list[str]:
    """The trainers started, once ``count`` of them have (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(starts(job)) < count:
        time.sleep(0.05)
    return starts(job)


@transactional
def test_replicas_that_vanished_while_the_portal_was_down(submit):
    job = submit(env={"SLEEP": "60"})
    engine.job_launch(job.pk)
    trainer = job.replicas.get()
    pid = int(Job.objects.get(pk=job.pk).replicas.get().backend_ref.removeprefix("pid:"))
    os.killpg(pid, signal.SIGKILL)  # the machine rebooted: no exit status is written
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            os.waitpid(pid, os.WNOHANG)
        except (ProcessLookupError, ChildProcessError):
            break
        time.sleep(0.05)
    jobs_reconcile()
    trainer.refresh_from_db()
    job.refresh_from_db()
    assert trainer.state == "failed"
    assert "vanished" in trainer.reason
    assert job.state == "failed"


@transactional
def test_a_job_past_its_deadline_fails_and_is_stopped(submit):
    job = submit(deadline_seconds=1, env={"SLEEP": "60"})
    engine.job_launch(job.pk)
    time.sleep(1.5)
    jobs_reconcile()
    job.refresh_from_db()
    assert job.state == "failed"
    assert job.state_reason == "ran past its deadline of 1 seconds"
    assert set(job.replicas.values_list("state", flat=True)) == {"killed"}


@transactional
def test_bad_requirements_fail_the_job_with_the_log(submit, pfs_home):
    (pfs_home / "pkg" / "requirements.txt").write_text(
        "--no-index\nthis-package-does-not-exist-pc==0\n")  # (no index is asked)
    job = submit("job")
    engine.job_launch(job.pk)
    job.refresh_from_db()
    assert job.state == "failed"
    assert "requirements.txt could not be installed" in job.state_reason
    assert Path(output_dir(job) / "setup.log").read_text()


@pytest.mark.parametrize(("code", "says"), [
    (0, "exited 0"), (1, "exited with code 1"), (127, "command not found"),
    (126, "cannot be executed"), (-9, "out-of-memory"), (137, "out-of-memory"),
    (-11, "segmentation fault"), (139, "segmentation fault"), (-15, "SIGTERM"),
    (134, "SIGABRT"), (None, "without an exit status"),
])
def test_exit_codes_are_explained(code, says):
    assert says in exit_reason(code)


@transactional
def test_the_reconciler_stops_what_runs_of_a_killed_job_whose_stop_was_lost(
        submit, alice, datacenter, held_tasks):
    job = submit(trainers=2, env={"SLEEP": "60"})
    engine.job_launch(job.pk)
    pids = [int(r.backend_ref.removeprefix("pid:")) for r in job.replicas.all()]
    job_kill(alice, datacenter, job.name)  # its stop is held: the message is lost
    assert held_tasks.of("jobs.tasks.job_stop") == [(job.pk,)]
    assert all(runner_alive(pid) for pid in pids)
    jobs_reconcile()
    assert set(job.replicas.values_list("state", flat=True)) == {"killed"}
    for pid in pids:
        assert not runner_alive(pid)


@transactional
def test_the_reconciler_stops_processes_of_jobs_it_does_not_know(submit):
    """E.g. a database restored from a backup: the processes must not run on unseen."""
    job = submit(env={"SLEEP": "60"})
    engine.job_launch(job.pk)
    pid = int(job.replicas.get().backend_ref.removeprefix("pid:"))
    private = job_dir(job)
    Job.objects.filter(pk=job.pk).delete()  # the record is gone, the process is not
    assert runner_alive(pid)
    assert jobs_reconcile()["orphans"] == 1
    assert not runner_alive(pid)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert not private.exists()


@transactional
def test_the_reconciler_resumes_a_start_that_died_on_an_unexpected_error(submit, monkeypatch,
                                                                         held_tasks):
    job = submit(trainers=2)
    with monkeypatch.context() as bug:
        bug.setattr("jobs.engine.replica_env", lambda *a, **k: 1 / 0)  # a bug, say
        with pytest.raises(ZeroDivisionError), start_held(job.pk):  # its task begins ...
            engine.job_launch(job.pk)  # ... and dies
    job.refresh_from_db()
    assert job.state == "starting"
    assert set(job.replicas.values_list("state", flat=True)) == {"pending"}
    Job.objects.filter(pk=job.pk).update(updated_at=job.updated_at.replace(year=2000))
    held_tasks.run(JOB_START, engine.job_launch)
    assert jobs_reconcile()["restarted"] == 1
    assert set(job.replicas.values_list("state", flat=True)) <= {"starting", "running",
                                                                 "succeeded"}
    assert starts_soon(job, count=2) == ["0", "1"]


@transactional
def test_files_that_cannot_be_prepared_fail_the_job(submit, monkeypatch):
    job = submit("job")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("jobs.backends.local.backend.package_copy", disk_full)
    engine.job_launch(job.pk)
    job.refresh_from_db()
    assert job.state == "failed"
    assert "No space left on device" in job.state_reason


@transactional
def test_a_new_database_over_an_old_var_does_not_take_an_old_jobs_files(submit, pfs_home):
    """A job's private directory was keyed by its database id: over an existing var/, a
    fresh database's job 1 took old job 1's package copy, pid and exit files, and was reported
    ended without running. It is keyed by the job's uid."""
    old = submit("old", env={"SLEEP": "0"})
    engine.job_launch(old.pk)
    wait_for_engine(old)
    assert old.state == "succeeded"
    old_pk = old.pk
    Job.objects.filter(pk=old_pk).delete()  # the database is new, var/ is not
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, false)",
                       [Job._meta.db_table, old_pk])
    (pfs_home / "pkg" / "train.py").write_text(
        "print('the new job ran', flush=True)\nimport sys; sys.exit(3)\n")
    new = submit("new")
    assert new.pk == old_pk
    engine.job_launch(new.pk)
    wait_for_engine(new)
    assert new.state == "failed" and new.state_reason == "trainer-0 failed: exited with code 3"
    assert "the new job ran" in (output_dir(new) / "node_0" / "train.log").read_text()
    assert job_dir(new) != job_dir(old)


def wait_for_engine(job: Job, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while engine.job_sync(job.pk):
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.1)
    job.refresh_from_db()
