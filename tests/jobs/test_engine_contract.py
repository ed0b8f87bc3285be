"""What users see of a job, the same on every backend: one set of tests, run on the local
backend (real processes) and on Kubernetes: the fake API server (scripted pods, and pods that
run) and the real control plane (``real_kube``: real API server, controllers and scheduler,
pods run by the node agent), so the fake stays honest.

A ``Driver`` says, per backend, how a trainer is told what to do (print lines, run a while,
exit with a code) and how its log is read back; everything else goes through the engine as
the Celery tasks call it."""

from __future__ import annotations

import time

import pytest

from jobs import engine
from jobs.backends import backend_for
from jobs.backends.kubernetes import observe
from jobs.models import Job
from jobs.services import job_kill
from jobs.tasks import jobs_reconcile
from tests.factories import package_write, submit_job
from tests.jobs.files import TRAINER, log_path

pytestmark = pytest.mark.django_db

# The fake API server plays the programs (scripted pods: the fake's own timing); pods that
# really run are the real control plane's (the fake's process kubelet is its node's code).
BACKENDS = ["local", "kubernetes",
            pytest.param("real-kubernetes", marks=pytest.mark.real_kubernetes)]


class Driver:
    """Trainers run ``TRAINER`` with the program in their environment (local processes, or
    pods of a real cluster running the job's image)."""

    def __init__(self, backend_name: str):
        self.backend_name = backend_name

    def program(self, lines=(), seconds: float = 0.0, exit_code: int = 0) -> dict:
        return {"env": {"LINES": "|".join(lines), "SECONDS": str(seconds),
                        "CODE": str(exit_code)}}

    def log(self, job, replica) -> str:
        path = log_path(job, replica)
        return path.read_text() if path.exists() else ""


class FakeKubernetesDriver(Driver):
    """The fake API server's kubelet plays the program."""

    def __init__(self, k8s_api):
        super().__init__("kubernetes")
        self.k8s_api = k8s_api

    def program(self, lines=(), seconds: float = 0.0, exit_code: int = 0) -> dict:
        self.k8s_api.controller.script_pods("*-tr-*", lines=list(lines), run_seconds=seconds,
                                            exit_code=exit_code)
        return {}

    def log(self, job, replica) -> str:
        live = backend_for(job.datacenter).log_stream(job, replica, follow=False, tail=None)
        if live is not None:
            return b"".join(live[1]).decode()
        # Its pod is gone (the ended job's objects were released). The portal's pods leave
        # their log in the job's output; the fake's scripted ones leave it with the fake.
        mine = observe.replica_pods(self.k8s_api.controller.logs.gone(replica.role), replica)
        return mine[-1]["log"] if mine else ""


@pytest.fixture(params=BACKENDS)
def driver(request, datacenter, settings, pfs_home, monkeypatch, held_starts):
    package_write(pfs_home, TRAINER)
    if request.param == "local":
        yield Driver("local")
        return
    if request.param == "kubernetes":
        request.getfixturevalue("kube_datacenter")
        yield FakeKubernetesDriver(request.getfixturevalue("k8s_api"))
        return
    request.getfixturevalue("real_kube_datacenter")
    yield Driver("kubernetes")


def submit(driver, alice, datacenter, program: dict, **fields) -> Job:
    job = submit_job(alice, datacenter, "contract", image="python:3.11-slim", **program,
                     **fields)
    engine.job_launch(job.pk)
    return job


def run_until(job, states, timeout: float = 60) -> Job:
    deadline = time.monotonic() + timeout
    while True:
        engine.job_sync(job.pk)
        job.refresh_from_db()
        if job.state in states:
            return job
        assert time.monotonic() < deadline, f"job stayed {job.state}: {job.state_reason}"
        time.sleep(0.1)


def test_trainers_that_exit_0_make_the_job_succeed(driver, alice, datacenter):
    job = submit(driver, alice, datacenter, driver.program(lines=["step 1", "step 2"]),
                 trainers=2)
    run_until(job, {"succeeded"})
    trainers = list(job.replicas.order_by("index"))
    assert [(t.state, t.exit_code) for t in trainers] == [("succeeded", 0)] * 2
    for trainer in trainers:
        assert "step 1\nstep 2\n" in driver.log(job, trainer)
    states = list(job.events.filter(replica=None).values_list("to_state", flat=True))
    # A quick job may end before it is seen running.
    assert states in (["pending", "starting", "running", "succeeded"],
                      ["pending", "starting", "succeeded"])


def test_a_trainer_that_fails_fails_the_job_with_its_exit_code(driver, alice, datacenter):
    job = submit(driver, alice, datacenter, driver.program(exit_code=3))
    run_until(job, {"failed"})
    trainer = job.replicas.get()
    assert (trainer.state, trainer.exit_code) == ("failed", 3)
    assert job.state_reason == "trainer-0 failed: exited with code 3"


def test_a_failed_trainer_is_restarted_up_to_its_limit(driver, alice, datacenter):
    job = submit(driver, alice, datacenter, driver.program(exit_code=1), restart_limit=2)
    run_until(job, {"failed"})
    trainer = job.replicas.get()
    assert (trainer.restarts, trainer.state) == (2, "failed")
    restarts = [e.reason for e in trainer.events.filter(to_state="starting")][1:]
    assert restarts == ["exited with code 1; restart 1 of 2", "exited with code 1; restart 2 of 2"]


def test_a_killed_job_stops_every_replica(driver, alice, datacenter):
    job = submit(driver, alice, datacenter, driver.program(seconds=60), trainers=2)
    run_until(job, {"running"})
    job_kill(alice, datacenter, "contract")
    engine.job_halt(job.pk)
    job.refresh_from_db()
    assert job.state == "killed"
    assert set(job.replicas.values_list("state", flat=True)) == {"killed"}
    backend = backend_for(datacenter)
    deadline = time.monotonic() + 15
    while any(backend.observe(job, r).status.value == "running" for r in job.replicas.all()):
        assert time.monotonic() < deadline, "a replica still runs"
        time.sleep(0.1)


def test_what_runs_for_a_job_the_database_forgot_is_stopped(driver, alice, datacenter):
    job = submit(driver, alice, datacenter, driver.program(seconds=60))
    run_until(job, {"running"})
    replica = job.replicas.get()
    Job.objects.filter(pk=job.pk).delete()
    assert jobs_reconcile()["orphans"] == 1
    backend = backend_for(datacenter)
    deadline = time.monotonic() + 15
    while backend.observe(job, replica).status.value == "running":
        assert time.monotonic() < deadline, "the orphan still runs"
        time.sleep(0.1)
