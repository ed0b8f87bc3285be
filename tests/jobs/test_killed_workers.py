"""A worker killed -9 at the wrong moment (issue 44, items 4 and 5): real `celery -A paddlecloud
worker` processes (prefork) on the real Redis and PostgreSQL, real local jobs in sandboxes, no
beat (no reconciler). What the killed worker followed reaches its jobs within a second through
a worker still alive, or as soon as one starts; what it held (a probe's network, a job's) is
released by the next worker that starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

from jobs.backends.local.backend import job_dir, netns_file
from jobs.backends.local.sandbox import sandbox_problem
from jobs.backends.netns import holders, netns_alive, netns_start, netns_stop
from jobs.files import output_dir
from jobs.models import Job, JobEvent
from paddlecloud_core.processes import read_json, runner_alive
from tests.factories import job_row, submit_job
from tests.polling import wait
from tests.processes import probe_holders

ROOT = Path(__file__).resolve().parents[2]
ENDING_TRAINER = """\
import os, sys, time
time.sleep(float(os.environ.get("SLEEP", "2")))
with open(os.path.join(os.environ["PADDLE_OUTPUT_DIR"], "ends.txt"), "a") as f:
    f.write(f"{time.time()}\\n")
sys.exit(int(os.environ.get("CODE", "0")))
"""

pytestmark = [pytest.mark.package(ENDING_TRAINER), pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(sandbox_problem() is not None,
                                 reason="jobs' networks need a sandbox")]


class Workers:
    """Celery workers as deploy/worker.yaml runs them (prefork), each in a session of its own
    (killed -9 as a whole: its main process and its pool), on this test's database, Redis,
    var/ and PFS."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.started: list[subprocess.Popen] = []

    def start(self, name: str) -> subprocess.Popen:
        database = connection.settings_dict
        env = {**os.environ, "REDIS_URL": settings.REDIS_URL, "CELERY_LOG_LEVEL": "INFO",
               "PADDLECLOUD_VAR_DIR": str(settings.VAR_DIR),
               "PADDLECLOUD_PFS_ROOT": str(settings.PADDLECLOUD_PFS_ROOT),
               "DATABASE_URL": f"postgres://{quote(database['USER'])}:"
                               f"{quote(database['PASSWORD'] or '')}@{database['HOST']}:"
                               f"{database['PORT']}/{database['NAME']}"}
        log = self.tmp_path / f"{name}.log"
        with log.open("ab") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "paddlecloud", "worker", "--pool",
                 "prefork", "--concurrency", "1", "--loglevel", "INFO", "--without-heartbeat",
                 "--without-mingle", "--without-gossip", "-n", f"{name}-{uuid.uuid4().hex}@%h"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        worker.log = log
        self.started.append(worker)
        return worker

    def ready(self, worker: subprocess.Popen, timeout: float = 60) -> None:
        """Once it takes tasks (what it does as it starts, ``worker_ready``, is done)."""
        wait(lambda: worker.poll() is None and " ready." in worker.log.read_text(),
             timeout=timeout, message=lambda: f"the worker to start:\n{worker.log.read_text()}")

    def kill(self, worker: subprocess.Popen) -> None:
        """kill -9 of the worker, its pool with it (not the runners: a session of their
        own)."""
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(30)

    def of(self, pid: int) -> subprocess.Popen:
        """The worker whose process started ``pid``."""
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return next(w for w in self.started if os.getpgid(parent) == w.pid)

    def logs(self) -> str:
        return "\n".join(f"--- {w.log.name}\n{w.log.read_text()}" for w in self.started)

    def stop(self) -> None:
        for worker in self.started:
            if worker.poll() is None:
                self.kill(worker)


@pytest.fixture
def workers(tmp_path):
    from kernel.celery import app

    app.control.purge()
    started = Workers(tmp_path)
    yield started
    started.stop()
    app.control.purge()


def runner_of(job: Job) -> int:
    return int(job.replicas.get().backend_ref.removeprefix("pid:"))


def ends(job: Job) -> list[datetime]:
    """When each run of the job's trainer ended (it says so as it exits)."""
    path = output_dir(job) / "ends.txt"
    return [datetime.fromtimestamp(float(line), UTC)
            for line in (path.read_text().split() if path.exists() else [])]


def events(job: Job, reason: str) -> list[JobEvent]:
    return [e for e in JobEvent.objects.filter(job=job).order_by("time") if reason in e.reason]


def state(job: Job) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job.pk)


def test_an_ended_replica_reaches_its_job_within_a_second_when_its_worker_was_killed(
        workers, alice, datacenter, package):
    """Its first run ends (exit 3: restarted by its policy), then its second (failed): each
    within a second, through the worker still alive, which had never looked at the job; each
    end recorded once."""
    first = workers.start("first")
    workers.ready(first)
    job = submit_job(alice, datacenter, "ends", package=package, restart_limit=1,
                     env={"SLEEP": "4", "CODE": "3"})
    wait(lambda: state(job) == "running", message="the job to run")
    workers.ready(workers.start("second"))
    assert workers.of(runner_of(job)) is first
    workers.kill(first)  # the worker that started it, and follows it

    wait(lambda: state(job) == "failed", timeout=30,
         message=lambda: f"the job to fail: {list(JobEvent.objects.filter(job=job))}")
    first, second = ends(job)
    restarts = events(job, "exited with code 3; restart 1 of 1")
    assert len(restarts) == 1  # its end recorded once
    assert (restarts[0].time - first).total_seconds() < 1.0
    job = Job.objects.get(pk=job.pk)
    assert job.state_reason == "trainer-0 failed: exited with code 3"
    assert (job.finished_at - second).total_seconds() < 1.0
    trainer = job.replicas.get()
    assert (trainer.restarts, trainer.exit_code) == (1, 3)


def test_a_worker_that_starts_takes_what_the_killed_workers_followed(
        workers, alice, datacenter, package):
    """No worker runs as the replica ends; the next one to start ends its job at once."""
    first = workers.start("first")
    workers.ready(first)
    job = submit_job(alice, datacenter, "ends", package=package, env={"SLEEP": "2"})
    wait(lambda: state(job) == "running", message="the job to run")
    runner = runner_of(job)
    workers.kill(first)
    wait(lambda: not runner_alive(runner), timeout=30, message="the trainer to end")
    assert state(job) == "running"  # nobody saw it

    workers.ready(workers.start("next"))
    wait(lambda: state(job) == "succeeded", timeout=1,
         message=lambda: f"its end to reach the job:\n{workers.logs()}")


def test_a_job_whose_worker_and_replicas_were_stopped_lets_its_network_go(
        workers, alice, datacenter, package):
    """The portal stopped while a job ran (its processes killed, but the network's holder,
    which is none of their children): the next worker's start finds the replica gone, fails
    the job and releases its network."""
    first = workers.start("first")
    workers.ready(first)
    job = submit_job(alice, datacenter, "held", package=package, env={"SLEEP": "600"})
    wait(lambda: state(job) == "running", message="the job to run")
    network = read_json(netns_file(job_dir(job)))
    workers.kill(first)
    os.killpg(runner_of(job), signal.SIGKILL)
    assert [label for pid, _, label in holders() if pid == network["pid"]] == [
        str(job_dir(job))]

    workers.ready(workers.start("next"))
    wait(lambda: state(job) == "failed", timeout=10,
         message=lambda: f"the job to fail:\n{workers.logs()}")
    assert "vanished" in Job.objects.get(pk=job.pk).state_reason
    wait(lambda: not [pid for pid, _, _ in holders() if pid == network["pid"]], timeout=10,
         message="its network to be released")


def test_a_worker_that_starts_releases_every_network_nothing_living_holds(
        workers, tmp_path, alice, datacenter, package):
    """A worker killed -9 during its sandbox probe; an ended job whose network was not
    released (its worker died first). The next worker that starts releases both, and keeps
    the networks of living jobs, this portal's and another's (another var/)."""
    for _ in range(5):  # a probe takes a fraction of a second: caught, or tried again
        probing = workers.start("probing")  # it probes as it starts (its notice)
        probe = wait(lambda: probe_holders(probing.pid),  # noqa: B023
                     timeout=60, every=0.002, message="the worker's probe")[0]
        os.killpg(probing.pid, signal.SIGSTOP)
        time.sleep(0.05)  # a holder its worker was releasing as it froze is gone by now
        caught = probe in {pid for pid, _, _ in holders()}
        workers.kill(probing)
        if caught:
            break
    else:
        pytest.fail("five workers finished their sandbox probe before they were stopped")

    ended, living = (job_row(alice, datacenter, name, state=now, replicas={})
                     for name, now in (("ended", "failed"), ("living", "running")))
    networks = {}
    for job in (ended, living):
        (job_dir(job) / "run").mkdir(parents=True)
        networks[job.name] = netns_start(netns_file(job_dir(job)), str(job_dir(job)))
    other = tmp_path / "other-portal" / "var" / "jobs" / str(uuid.uuid4())
    (other / "run").mkdir(parents=True)
    networks["other"] = netns_start(netns_file(other), str(other))
    try:
        workers.ready(workers.start("next"))
        running = {pid for pid, _, _ in holders()}
        assert {"probe's": probe in running,
                **{f"{name}'s": netns_alive(held) for name, held in networks.items()}} == {
            "probe's": False, "ended's": False, "living's": True, "other's": True}
    finally:
        netns_stop(netns_file(other))
