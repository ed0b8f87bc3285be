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
from django.conf import settings
from django.db import connection

from jobs.tasks import RECONCILE_SECONDS
from kernel.celery import app
from tests.polling import wait

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True),
              pytest.mark.package("import os\n"
                                  "with open(os.path.join(os.environ['PADDLE_OUTPUT_DIR'], "
                                  "'starts.txt'), 'a') as f:\n"
                                  "    f.write(os.environ['TRAINER_ID'] + '\\n')\n"
                                  "import time; time.sleep(30)\n")]

ROOT = Path(__file__).resolve().parents[2]
SLOW_WORKER = Path(__file__).with_name("slow_worker.py")


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

