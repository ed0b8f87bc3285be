"""What every execution backend must do, tested through the interface
(jobs/backends/base.py) and by what each leaves where a user would find it (the job's output,
the local backend's private directory, the cluster's objects), on ``local`` (real processes)
and ``kubernetes`` (the fake API server of tests/k8s_api_server, whose pods are scripted).

Prepare, start handles, stop, clean-up, the orphan sweep and topology are tested on both. The
tests whose replica must run its command and exit (``REPLICAS_RUN``) run on ``local`` and on
``kubernetes-pods``: the fake API server with its process kubelet, whose pods really run. A
prepared replica is never "not started" on Kubernetes (its controllers start pods at once):
there that test is an expected failure, strict, so the mark goes when the backend changes."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from jobs import engine
from jobs.backends import backend_for
from jobs.backends.base import Backend, Observation, Status
from jobs.backends.kubernetes.names import JOB_UID_LABEL
from jobs.backends.local.backend import job_dir
from jobs.files import output_dir
from jobs.models import Job, Replica
from paddlecloud_core.contract import job_namespace, replica_env
from paddlecloud_core.layout import OUTPUT_MARKER
from tests.factories import package_write
from tests.jobs.files import log_path
from tests.kube import datacenter_set

pytestmark = pytest.mark.django_db

BACKENDS = ["local", "kubernetes"]
# For the tests whose replica must run its command and exit (scripted pods do not).
REPLICAS_RUN = pytest.mark.parametrize("backend", ["local", "kubernetes-pods"], indirect=True)
# What the Kubernetes backend makes for a job (its pods are the controllers').
KUBE_KINDS = ("configmaps", "services", "statefulsets.apps", "jobs.batch")
# How long after ``stop``, ``orphans_stop`` or ``cleanup`` returns what they stopped may take
# to end and go: the local backend waits for its processes; on Kubernetes the call deletes the
# job's root and the cluster ends and collects the pods and the rest after it.
SETTLES_WITHIN = {"local": 0.0, "kubernetes": 10.0}

TRAINER = """\
import os, signal, sys, time
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("hello from", os.environ["TRAINING_ROLE"], os.environ.get("TRAINER_ID"), flush=True)
time.sleep(float(os.environ.get("SLEEP", "0")))
sys.exit(int(os.environ.get("CODE", "0")))
"""


@pytest.fixture(params=BACKENDS)
def backend(request, datacenter) -> Backend:
    if request.param == "kubernetes":
        request.getfixturevalue("kube_datacenter")
    elif request.param == "kubernetes-pods":
        request.getfixturevalue("kube_pods_datacenter")
    else:
        datacenter.backend = request.param
        datacenter.save()
    return backend_for(datacenter)


@pytest.fixture
def make_job(pfs_home, prepared_jobs):
    package_write(pfs_home, TRAINER)

    def make(trainers=1, pservers=0, **env) -> Job:
        return prepared_jobs("c", trainers, pservers, env={k: str(v) for k, v in env.items()})

    return make


def start(backend, job, replica) -> str:
    replicas = list(job.replicas.order_by("role", "index"))
    topology = engine.job_topology(job, backend, replicas)
    env = replica_env(job, replica.role, replica.index, topology, backend.paths(job),
                      job_namespace(job.datacenter, job.owner.username))
    return backend.start(job, replica, env)


def running(backend, job, replica, timeout: float = 10) -> Observation:
    """The replica's observation once it no longer waits for its pod (a started replica
    waits only on Kubernetes: the local backend's is running when ``start`` returns)."""
    deadline = time.monotonic() + timeout
    while (seen := backend.observe(job, replica)).status == Status.WAITING:
        assert time.monotonic() < deadline, f"{replica.name} still waits: {seen.reason}"
        time.sleep(0.05)
    return seen


def eventually(backend, check, what: str) -> None:
    """``check()`` holds now, or within the time the backend settles in (``SETTLES_WITHIN``)."""
    deadline = time.monotonic() + SETTLES_WITHIN[backend.name]
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def ended(backend, job, replicas) -> bool:
    return all(backend.observe(job, replica).status in (Status.EXITED, Status.LOST)
               for replica in replicas)


def settle(backend, job, replica, timeout: float = 20) -> Observation:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = backend.observe(job, replica)
        if seen.status in (Status.EXITED, Status.LOST):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{replica.name} still {seen.status}")


def snapshot(root: Path) -> dict[str, str]:
    """Every entry below ``root`` by relative path: a directory, a link (its target) or a file
    (a digest of its bytes). Links are not followed."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            seen[path.relative_to(root).as_posix()] = (
                "link:" + os.readlink(path) if path.is_symlink() else
                "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest())
    return seen


def kept(request, backend, job, *, pods: bool = False) -> dict:
    """What the backend keeps for the job besides its output: the local backend's private
    directory (the package copy replicas run from, their pid files), or the Kubernetes
    objects it made for the job (and, with ``pods``, the pods its controllers made) by kind
    and name, with the uid the cluster gave each (so one made again shows)."""
    if backend.name == "local":
        return snapshot(job_dir(job))
    k8s_api = request.getfixturevalue("k8s_api")
    namespace = job_namespace(job.datacenter, job.owner.username)
    resources = (*KUBE_KINDS, "pods") if pods else KUBE_KINDS
    return {(obj["kind"], obj["metadata"]["name"]): obj["metadata"]["uid"]
            for resource in resources for obj in k8s_api.store.list(resource, namespace)
            if obj["metadata"].get("labels", {}).get(JOB_UID_LABEL) == str(job.uid)}


def test_prepare_is_idempotent(request, backend, make_job, pfs_home):
    package = pfs_home / "pkg"
    (package / "data").mkdir()
    (package / "data" / "part-0").write_bytes(bytes(range(256)) * 64)
    (package / "latest").symlink_to("data/part-0")
    submitted = snapshot(package)
    job = make_job()  # prepared once
    output = output_dir(job)
    # What a first run left in its output.
    (output / "node_0").mkdir()
    (output / "node_0" / "train.log").write_text("pass 0 done\n")
    (output / "model.bin").write_bytes(b"weights")
    left = snapshot(output)
    first = kept(request, backend, job)

    engine.job_prepare(job, backend)
    engine.job_prepare(job, backend)

    assert sorted(os.listdir(pfs_home / "jobs")) == [job.name]
    # Nothing set aside beside them.
    assert sorted(os.listdir(output.parent)) == ["checkpoints", "output"]
    assert (output / OUTPUT_MARKER).read_text() == str(job.uid)
    assert snapshot(output) == left  # the first run's files, as they were
    assert snapshot(package) == submitted  # the package is read, never changed
    assert kept(request, backend, job) == first  # nothing made twice or made again
    if backend.name == "local":
        assert snapshot(job_dir(job) / "pkg") == submitted
    else:
        assert set(first) == {(obj["kind"], obj["metadata"]["name"])
                              for obj in backend.objects(job)
                              if JOB_UID_LABEL in obj["metadata"].get("labels", {})}


@pytest.mark.parametrize("backend", ["local", pytest.param("kubernetes", marks=pytest.mark.xfail(
    strict=True, raises=AssertionError,
    reason="on Kubernetes prepare makes the Job and StatefulSet, whose controllers start the "
           "pods at once (start only names them): a prepared replica is seen waiting or "
           "running, never not started"))], indirect=True)
def test_a_replica_not_started_is_observed_so(backend, make_job):
    job = make_job()
    assert backend.observe(job, job.replicas.get()).status == Status.NOT_STARTED


@REPLICAS_RUN
def test_start_observe_exit_code_and_log(backend, make_job):
    job = make_job(CODE=3)
    replica = job.replicas.get()
    start(backend, job, replica)
    seen = settle(backend, job, replica)
    assert (seen.status, seen.exit_code) == (Status.EXITED, 3)
    deadline = time.monotonic() + 5
    while "hello from TRAINER 0" not in log_path(job, replica).read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_starting_the_same_attempt_twice_starts_it_once(backend, make_job):
    job = make_job(SLEEP=30)
    replica = job.replicas.get()
    first = start(backend, job, replica)
    assert start(backend, job, replica) == first
    assert running(backend, job, replica).status == Status.RUNNING
    backend.stop(job, [replica], grace=5)
    log = log_path(job, replica)  # none if it was stopped before it could write
    assert (log.read_text() if log.exists() else "").count("hello from TRAINER 0") <= 1


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_new_attempt_is_a_new_start(backend, make_job):
    """The engine starts each attempt on the local backend; on Kubernetes the trainers' Job
    makes the retries itself (test_examples_on_kubernetes.py kills a trainer mid-run)."""
    job = make_job(CODE=1)
    replica = job.replicas.get()
    start(backend, job, replica)
    assert settle(backend, job, replica).exit_code == 1
    Replica.objects.filter(pk=replica.pk).update(restarts=1, attempt=1)
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
        assert running(backend, job, replica).status == Status.RUNNING
    started = time.monotonic()
    backend.stop(job, replicas, grace=5)
    assert time.monotonic() - started < 5  # SIGTERM was enough
    eventually(backend, lambda: ended(backend, job, replicas), "a stopped replica still runs")


@pytest.mark.parametrize("backend", ["kubernetes-pods"], indirect=True)
def test_a_replica_that_ignores_sigterm_is_killed_after_the_grace(backend, make_job,
                                                                  datacenter):
    """``stop`` gives the pods the datacenter's grace period, not Kubernetes' default 30 s: it
    is their terminationGracePeriodSeconds, which the garbage collector honours when it
    deletes them with their owners (the portal may not delete pods itself)."""
    datacenter_set(datacenter, kube_termination_grace=2)
    job = make_job(SLEEP=120, IGNORE_TERM=1)
    replica = job.replicas.get()
    start(backend, job, replica)
    assert running(backend, job, replica).status == Status.RUNNING
    deadline = time.monotonic() + 10
    log = log_path(job, replica)
    while not log.exists() or "hello from" not in log.read_text():  # its handler is set
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    backend.stop(job, [replica], grace=2)
    while not ended(backend, job, [replica]):
        assert time.monotonic() - started < 2 + 5, "the replica outlived its grace"
        time.sleep(0.05)
    assert time.monotonic() - started >= 1.5  # it was given its grace first


def test_cleanup_leaves_nothing_but_the_output(request, backend, make_job):
    job = make_job(SLEEP=60)
    replica = job.replicas.get()
    start(backend, job, replica)
    assert running(backend, job, replica).status == Status.RUNNING
    (output_dir(job) / "model.bin").write_bytes(b"weights")
    left = snapshot(output_dir(job))
    backend.stop(job, [replica], grace=5)
    backend.cleanup(job)
    eventually(backend, lambda: not kept(request, backend, job, pods=True),
               "something of the job is left after its clean-up")
    assert snapshot(output_dir(job)) == left  # the output is the user's: it stays


def test_topology_is_stable_and_complete(backend, make_job):
    job = make_job(trainers=2, pservers=2)
    replicas = list(job.replicas.order_by("role", "index"))
    first = engine.job_topology(job, backend, replicas)
    again = engine.job_topology(job, backend, list(job.replicas.order_by("role", "index")))
    assert first == again
    assert len(first.pservers) == 2 and len(first.trainers) == 2
    assert len(set(first.pservers + first.trainers)) == 4  # every replica its own endpoint
    assert first.master is None  # parameter-server jobs have no collective master
    collective = make_job(trainers=2)
    topology = engine.job_topology(collective, backend,
                                   list(collective.replicas.order_by("role", "index")))
    assert topology.master and topology.master not in topology.trainers


def test_orphans_are_stopped_and_removed(request, backend, make_job):
    job = make_job(SLEEP=60)
    replica = job.replicas.get()
    start(backend, job, replica)
    known = {str(job.uid)}
    datacenters = [job.datacenter]
    assert backend.orphans_stop(datacenters, lambda uids: uids & known, grace=2) == 0  # known
    assert running(backend, job, replica).status == Status.RUNNING
    assert backend.orphans_stop(datacenters, lambda uids: set(), grace=2) == 1
    eventually(backend, lambda: backend.observe(job, replica).status != Status.RUNNING,
               "the orphan still runs")
    eventually(backend, lambda: not kept(request, backend, job, pods=True),
               "something of the orphan is left")


def test_a_jobs_local_endpoints_are_all_different():
    """The kernel may hand out a port it just gave, once it is closed: the endpoints of a
    job's replicas are found together, each held until all are, and none is one it has."""
    from paddlecloud_core.processes import free_endpoints

    for _ in range(20):
        first = free_endpoints(64)
        assert len(set(first)) == 64
        again = free_endpoints(64, taken=first)
        assert len(set(again)) == 64 and not set(again) & set(first)
