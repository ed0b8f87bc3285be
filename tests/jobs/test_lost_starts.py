"""A start no worker holds is queued again within seconds, and the reconciler runs without
beat: real ``celery -A paddlecloud worker`` processes on the real Redis, killed -9 in the
middle of a start, of the send of an admission's start, and left running with no beat
(jobs/starts.py, ``jobs.tasks.reconcile_when_due``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from urllib.parse import quote

import pytest
from celery.signals import worker_shutdown
from django.conf import settings
from django.db import connection
from django.db.models.functions import Now

from jobs import starts as job_starts
from jobs.files import output_dir
from jobs.models import Job
from jobs.tasks import RECONCILE_SECONDS, jobs_reconcile
from kernel.celery import app
from kernel.queue import JOB_START, JOBS_ADMIT, task_now
from tests.factories import job_row, submit_job
from tests.polling import wait

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True),
              pytest.mark.package("import os\n"
                                  "with open(os.path.join(os.environ['PADDLE_OUTPUT_DIR'], "
                                  "'starts.txt'), 'a') as f:\n"
                                  "    f.write(os.environ['TRAINER_ID'] + '\\n')\n"
                                  "import time; time.sleep(30)\n")]

ROOT = Path(__file__).resolve().parents[2]
SLOW_WORKER = Path(__file__).with_name("slow_worker.py")
REQUEUED_WITHIN = 5  # seconds: the promise (docs/admin/failures.md)


@dataclass
class Worker:
    name: str
    process: subprocess.Popen
    mark: Path

    def lines(self, word: str) -> list[list[str]]:
        """What the worker said of ``word`` (``slow_worker``): each line's other fields."""
        return [line.split()[1:] for line in self.mark.read_text().splitlines()
                if line.split()[0] == word]

    def kill(self) -> float:
        """SIGKILL the worker (all its processes); returns when, by ``time.monotonic``."""
        os.killpg(self.process.pid, signal.SIGKILL)
        killed = time.monotonic()
        self.process.wait(10)
        return killed


@pytest.fixture
def workers(tmp_path, package):
    """``start(name, step)``: a ``celery -A paddlecloud worker`` of its own (threads, as
    runportal's), with ``step`` made slow (``slow_worker``), on this test's database, Redis,
    var/ and PFS; each is stopped after the test (killed -9 if it will not stop)."""
    database = connection.settings_dict
    env = {**os.environ, "REDIS_URL": settings.REDIS_URL,
           "PADDLECLOUD_VAR_DIR": str(settings.VAR_DIR),
           "PADDLECLOUD_PFS_ROOT": str(settings.PADDLECLOUD_PFS_ROOT),
           "DATABASE_URL": f"postgres://{quote(database['USER'])}:"
                           f"{quote(database['PASSWORD'] or '')}@{database['HOST']}:"
                           f"{database['PORT']}/{database['NAME']}"}
    app.control.purge()
    started: list[Worker] = []

    def start(name: str, step: str = "none", **extra_env: str) -> Worker:
        mark = tmp_path / f"{name}.mark"
        mark.touch()
        log = (tmp_path / f"{name}.log").open("w")
        process = subprocess.Popen(
            [sys.executable, str(SLOW_WORKER), step, str(mark), "--pool", "threads",
             "--concurrency", "2", "--loglevel", "WARNING", "--without-heartbeat",
             "--without-mingle", "--without-gossip", "-n", f"{name}-{os.getpid()}@%h"],
            cwd=ROOT, env={**env, **extra_env}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        started.append(Worker(name, process, mark))
        return started[-1]

    yield start
    for worker in started:
        if worker.process.poll() is None:
            os.killpg(worker.process.pid, signal.SIGTERM)
            try:
                worker.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.process.pid, signal.SIGKILL)
                worker.process.wait(10)
    app.control.purge()


def ready(worker: Worker, timeout: float = 60) -> None:
    """Once ``worker`` takes tasks (it answers a ping)."""
    wait(lambda: worker.process.poll() is None and app.control.ping(
        destination=[f"{worker.name}-{os.getpid()}@{os.uname().nodename}"], timeout=0.5),
        timeout, f"worker {worker.name} did not start: "
                 f"{(worker.mark.parent / f'{worker.name}.log').read_text()}")


def started_after_the_kill(first: Worker, job: Job, workers) -> float:
    """Start a second worker, kill the first -9 once the second takes tasks, and wait for the
    job's trainer to start. Returns how long after the kill (seconds): the start queued again
    (within REQUEUED_WITHIN) and its local replica started (about a second)."""
    second = workers("second")
    ready(second)
    killed = first.kill()
    wait(lambda: job.replicas.exclude(state="pending").exists(), REQUEUED_WITHIN + 10,
         lambda: f"the job's start was not run again: {list(job.events.all())}")
    return time.monotonic() - killed


def test_a_start_whose_worker_is_killed_mid_start_is_queued_again_within_seconds(
        workers, alice, datacenter, package):
    """The issue's "a lost start message strands a job": the worker that ran the start is
    killed -9 (its message waits for Redis' visibility timeout, an hour); another worker
    starts the job within seconds."""
    first = workers("first", "launch")
    job = submit_job(alice, datacenter, "fit", package=package)
    wait(lambda: first.lines("launch"), 60, "the first worker did not take the start")
    took = started_after_the_kill(first, job, workers)
    assert took < REQUEUED_WITHIN + 2, took
    starts = output_dir(job) / "starts.txt"  # the trainer opens it, then writes its line
    wait(lambda: starts.exists() and starts.read_text().endswith("\n"), 10,
         "the trainer did not write its start")
    assert starts.read_text() == "0\n"


def test_a_start_lost_between_the_admissions_commit_and_its_send_is_queued_again(
        workers, alice, datacenter, package):
    """A worker admits a job (its queue had room again), commits, and is killed -9 before the
    start's message leaves it: another worker sends and runs it within seconds."""
    job = job_row(alice, datacenter, "fit", state="queued", package=package, replicas={})
    first = workers("first", "send")
    task_now(JOBS_ADMIT, alice.pk, datacenter.pk)
    wait(lambda: first.lines("send"), 60, "the first worker did not admit the job")
    assert Job.objects.get(pk=job.pk).state == "starting"  # committed
    took = started_after_the_kill(first, job, workers)
    assert took < REQUEUED_WITHIN + 2, took


def test_a_start_a_living_worker_runs_is_not_run_beside_it(workers, alice, datacenter,
                                                             package):
    """A start that takes longer than a hold (renewed while its worker lives), and a copy
    of its message taken by another worker meanwhile: it runs once, in one worker."""
    first = workers("first", "launch", SLOW_SECONDS=str(3 * job_starts.LEASE_SECONDS))
    job = submit_job(alice, datacenter, "fit", package=package)
    wait(lambda: first.lines("launch"), 60, "the first worker did not take the start")
    second = workers("second", "launch", SLOW_SECONDS="0")
    ready(second)
    task_now(JOB_START, job.pk)  # a copy (a request that raced, a broker's redelivery)
    wait(lambda: job.replicas.exclude(state="pending").exists(), 30,
         "the first worker did not start the job")
    time.sleep(job_starts.LEASE_SECONDS + 1)  # a hold not renewed would have run out by now
    assert second.lines("launch") == []
    assert len(first.lines("launch")) == 1
    assert (output_dir(job) / "starts.txt").read_text() == "0\n"


def test_a_worker_that_stops_leaves_its_holds_to_run_out(alice, datacenter, package):
    """A stopping worker (``worker_shutdown``) renews no hold of its own after: a start it
    was running is another worker's once its hold runs out, and no thread of its is left
    querying the database."""
    job = job_row(alice, datacenter, "fit", state="starting", package=package)
    with job_starts.start_held(job.pk) as held:
        assert held
        renewer = job_starts._renewer.thread
        time.sleep(job_starts.LEASE_SECONDS + 1)
        assert Job.objects.filter(pk=job.pk, start_lease_until__gt=Now()).exists()  # renewed
        worker_shutdown.send(sender=None)
        assert not renewer.is_alive()
        time.sleep(job_starts.LEASE_SECONDS + 1)
        assert not Job.objects.filter(pk=job.pk, start_lease_until__gt=Now()).exists()
        assert job_starts.starts_lost() == [job.pk]


def test_a_burst_of_requests_for_a_start_queues_one_message(alice, datacenter, package,
                                                           held_tasks):
    job = submit_job(alice, datacenter, "fit", package=package)
    Job.objects.filter(pk=job.pk).update(updated_at=job.updated_at.replace(year=2000))
    for _ in range(3):  # the reconciler finds it stalled, again and again
        assert jobs_reconcile()["restarted"] == 1
        job_starts.starts_later([job.pk])
    assert job_starts.starts_resend() == 0
    assert held_tasks.of(JOB_START) == [(job.pk,)]


def test_the_workers_run_the_reconciler_without_beat_one_run_at_a_time(workers):
    """No beat: two workers keep the reconciler's schedule between them, every
    RECONCILE_SECONDS, never two runs at once."""
    both = [workers("first"), workers("second")]
    for worker in both:
        ready(worker)
    began = time.time()
    time.sleep(2 * RECONCILE_SECONDS + 3)
    runs = sorted((float(start), float(end)) for worker in both
                  for start, end in worker.lines("reconcile"))
    assert len(runs) >= 2, runs
    assert runs[0][0] - began <= RECONCILE_SECONDS + 1, (began, runs)
    for (start, end), (after, _) in pairwise(runs):
        assert end <= after, runs  # one at a time
        assert after - start <= RECONCILE_SECONDS + 1, runs
    assert time.time() - runs[-1][0] <= RECONCILE_SECONDS + 1, runs
    # The worker that ran it last killed: the other keeps the schedule, not a run late.
    last = next(w for w in both if [float(s) for s, _ in w.lines("reconcile")][-1:] ==
                [runs[-1][0]])
    last.kill()
    survivor = next(w for w in both if w is not last)
    wait(lambda: any(float(start) > runs[-1][0] for start, _ in survivor.lines("reconcile")),
         2 * RECONCILE_SECONDS, "the surviving worker never ran the reconciler")
    after = min(float(start) for start, _ in survivor.lines("reconcile")
                if float(start) > runs[-1][0])
    assert after - runs[-1][0] <= RECONCILE_SECONDS + 1.5, (runs[-1], after)



def test_a_look_that_finds_the_reconcilers_lease_held_leaves_the_turn_to_the_next_second(
        monkeypatch):
    """The worker running the reconciler is killed -9 mid-run: its lease runs out by itself
    (RECONCILE_LEASE_SECONDS). A look that found it held does not keep the turn for
    RECONCILE_SECONDS: the first look after the lease ran out runs the reconciler (a TTL job
    waited up to 25 s for its deletion with beat down)."""
    from django.core.cache import cache

    from jobs import tasks

    runs = []
    monkeypatch.setattr(tasks, "_reconcile", lambda: runs.append(time.monotonic()) or {})
    cache.delete(tasks.RECONCILE_DUE)
    cache.set(tasks.RECONCILE_LEASE, "a killed worker's", 2)  # as it leaves it, renewed last
    tasks.reconcile_when_due()
    assert runs == []  # held: the killed run's lease has not run out
    wait(lambda: tasks.reconcile_when_due() or runs, 4, "the reconciler did not run once "
         "the lease it found held ran out")
    cache.delete(tasks.RECONCILE_DUE)
