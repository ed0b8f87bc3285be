"""What every execution backend must do, tested through the interface alone
(jobs/backends/base.py). The Kubernetes backend joins ``BACKENDS`` when it lands."""

from __future__ import annotations

import time

import pytest

from jobs.backends import backend_for
from jobs.backends.base import Backend, Observation, Status
from jobs.models import Job, Replica
from paddlecloud_core.contract import job_namespace, replica_env
from tests.jobs.files import log_path

pytestmark = pytest.mark.django_db

BACKENDS = ["local"]

TRAINER = """\
import os, sys, time
print("hello from", os.environ["TRAINING_ROLE"], os.environ.get("TRAINER_ID"), flush=True)
time.sleep(float(os.environ.get("SLEEP", "0")))
sys.exit(int(os.environ.get("CODE", "0")))
"""


@pytest.fixture(params=BACKENDS)
def backend(request, datacenter) -> Backend:
    datacenter.backend = request.param
    datacenter.save()
    return backend_for(datacenter)


@pytest.fixture
def make_job(alice, datacenter, pfs_home, backend):
    (pfs_home / "pkg").mkdir()
    (pfs_home / "pkg" / "train.py").write_text(TRAINER)
    made: list[Job] = []

    def make(trainers=1, pservers=0, **env) -> Job:
        job = Job.objects.create(
            owner=alice, datacenter=datacenter, name=f"c{len(made)}",
            package="/pfs/datacenter1/home/alice/pkg", entry="python train.py", image="img",
            trainers=trainers, pservers=pservers, env={k: str(v) for k, v in env.items()})
        for role, count in (("pserver", pservers), ("trainer", trainers)):
            for index in range(count):
                Replica.objects.create(job=job, role=role, index=index)
        backend.prepare(job)
        made.append(job)
        return job

    yield make
    for job in made:
        backend.stop(job, list(job.replicas.all()), grace=1)
        backend.cleanup(job)


def start(backend, job, replica) -> str:
    replicas = list(job.replicas.order_by("role", "index"))
    topology = backend.topology(job, replicas)
    env = replica_env(job, replica.role, replica.index, topology, backend.paths(job),
                      job_namespace(job.datacenter, job.owner.username))
    return backend.start(job, replica, env)


def settle(backend, job, replica, timeout: float = 20) -> Observation:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = backend.observe(job, replica)
        if seen.status in (Status.EXITED, Status.LOST):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{replica.name} still {seen.status}")


def test_prepare_is_idempotent(backend, make_job):
    job = make_job()
    backend.prepare(job)
    backend.prepare(job)


def test_a_replica_not_started_is_observed_so(backend, make_job):
    job = make_job()
    assert backend.observe(job, job.replicas.get()).status == Status.NOT_STARTED


def test_start_observe_exit_code_and_log(backend, make_job):
    job = make_job(CODE=3)
    replica = job.replicas.get()
    start(backend, job, replica)
    assert settle(backend, job, replica) == Observation(Status.EXITED, 3)
    deadline = time.monotonic() + 5
    while "hello from TRAINER 0" not in log_path(job, replica).read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_starting_the_same_attempt_twice_starts_it_once(backend, make_job):
    job = make_job(SLEEP=30)
    replica = job.replicas.get()
    first = start(backend, job, replica)
    assert start(backend, job, replica) == first
    assert backend.observe(job, replica).status == Status.RUNNING
    backend.stop(job, [replica], grace=5)
    log = log_path(job, replica)  # none if it was stopped before it could write
    assert (log.read_text() if log.exists() else "").count("hello from TRAINER 0") <= 1


def test_a_new_attempt_is_a_new_start(backend, make_job):
    job = make_job(CODE=1)
    replica = job.replicas.get()
    start(backend, job, replica)
    assert settle(backend, job, replica).exit_code == 1
    Replica.objects.filter(pk=replica.pk).update(restarts=1)
    replica.refresh_from_db()
    assert backend.observe(job, replica).status == Status.NOT_STARTED  # attempt 1 has not run
    start(backend, job, replica)
    assert settle(backend, job, replica).exit_code == 1
    assert log_path(job, replica).read_text().count("hello from TRAINER 0") == 2


def test_stop_ends_running_replicas(backend, make_job):
    job = make_job(trainers=2, SLEEP=60)
    replicas = list(job.replicas.all())
    for replica in replicas:
        start(backend, job, replica)
    started = time.monotonic()
    backend.stop(job, replicas, grace=5)
    assert time.monotonic() - started < 5  # SIGTERM was enough
    for replica in replicas:
        assert backend.observe(job, replica).status in (Status.EXITED, Status.LOST)


def test_topology_is_stable_and_complete(backend, make_job):
    job = make_job(trainers=2, pservers=2)
    replicas = list(job.replicas.order_by("role", "index"))
    first = backend.topology(job, replicas)
    again = backend.topology(job, list(job.replicas.order_by("role", "index")))
    assert first == again
    assert len(first.pservers) == 2 and len(first.trainers) == 2
    assert len(set(first.pservers + first.trainers)) == 4  # every replica its own endpoint
    assert first.master is None  # parameter-server jobs have no collective master
    collective = make_job(trainers=2)
    topology = backend.topology(collective, list(collective.replicas.all()))
    assert topology.master and topology.master not in topology.trainers


def test_orphans_are_stopped_and_removed(backend, make_job):
    job = make_job(SLEEP=60)
    replica = job.replicas.get()
    start(backend, job, replica)
    known = {str(job.uid)}
    assert backend.orphans_stop(lambda uids: uids & known, grace=2) == 0  # known: left alone
    assert backend.observe(job, replica).status == Status.RUNNING
    assert backend.orphans_stop(lambda uids: set(), grace=2) == 1
    assert backend.observe(job, replica).status != Status.RUNNING
