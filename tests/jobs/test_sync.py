"""Event-driven sync (jobs/sync.py): a job is looked at when its replicas change — a pod
that changes on the (fake) Kubernetes API server, a local runner that ends — and when its
deadline comes, never polled meanwhile; the reconciler finds, with one look at every running
replica, the jobs whose change was missed, and only those."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Datacenter
from accounts.services import quota_set
from jobs import engine
from jobs.backends import backend_for
from jobs.backends.base import Status
from jobs.backends.kubernetes.client import kube_for
from jobs.backends.kubernetes.names import object_base
from jobs.backends.kubernetes.pods_watch import pod_cache
from jobs.backends.local.exits import exits_following
from jobs.models import Job
from jobs.signals import replicas_changed
from jobs.sync import job_sync_one_at_a_time, sync_begins
from jobs.tasks import RECONCILE_DUE, jobs_reconcile
from kernel.queue import JOB_SYNC
from paddlecloud_core.processes import process_identity
from tests.factories import job_row, submit_job
from tests.polling import wait

NS = "paddle-alice"


def state(job) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job.pk)


@pytest.fixture
def syncs(monkeypatch):
    """How often each job was synced, by id (the embedded worker's threads run in this
    process, the reconciler's too). The worker's own reconciler is held off (its schedule
    taken for the test, ``reconcile_when_due``): the reconciler syncs only when a test runs
    it."""
    cache.set(RECONCILE_DUE, 1, 3600)
    counted = Counter()
    lock = threading.Lock()
    real = engine.job_sync

    def counting(job_id):
        with lock:
            counted[job_id] += 1
        return real(job_id)

    monkeypatch.setattr("jobs.engine.job_sync", counting)
    yield counted
    cache.delete(RECONCILE_DUE)


def trainer_pod(kube, job) -> str:
    (pod,) = [p["metadata"]["name"] for p in kube.store.list("pods", NS)
              if p["metadata"]["name"].startswith(f"{object_base(job)}-tr-")]
    return pod


# -- Kubernetes: the pod watch ---------------------------------------------------------------

@pytest.mark.django_db(transaction=True)  # the worker reads what the test commits
def test_a_pod_that_exits_ends_its_job_at_once_and_no_job_is_polled_meanwhile(
        k8s_api, kube_datacenter, alice, datacenter, package, celery_worker, syncs):
    quota_set(None, datacenter, alice, jobs=2)
    quiet, ending = (submit_job(alice, datacenter, name) for name in ("quiet", "ending"))
    wait(lambda: state(quiet) == state(ending) == "running", message="both jobs to run")
    # The syncs their start queued (the pods' changes up to running, debounced) are done...
    seen: list[dict] = []
    wait(lambda: seen.append(dict(syncs)) or (len(seen) > 4 and seen[-1] == seen[-5]),
         message="their starts' syncs to be done", every=0.25)  # a second with none
    before = dict(syncs)
    time.sleep(3)  # ...then both run, nothing changes: nothing looks at them
    assert dict(syncs) == before
    exited = time.monotonic()
    k8s_api.controller.terminate_container(NS, trainer_pod(k8s_api, ending), exit_code=3)
    wait(lambda: state(ending) == "failed", timeout=10, message="the job to fail")
    assert time.monotonic() - exited < 2
    assert Job.objects.get(pk=ending.pk).state_reason.startswith("trainer-0 failed: exit")
    assert syncs[quiet.pk] == before[quiet.pk]  # its neighbour's end is not its change
    assert state(quiet) == "running"


@pytest.mark.django_db
def test_a_lost_announcement_is_caught_by_the_reconciler_which_syncs_that_job_alone(
        k8s_api, kube_datacenter, alice, datacenter, package, held_tasks, syncs):
    """The announcements are held (no worker runs them: as if lost); the reconciler's one
    look at every running replica finds the job whose pod ended, and syncs it alone."""
    quota_set(None, datacenter, alice, jobs=2)
    jobs = [submit_job(alice, datacenter, name) for name in ("quiet", "ending")]
    for job in jobs:
        engine.job_launch(job.pk)
    wait(lambda: all(engine.job_sync(j.pk) and state(j) == "running" for j in jobs),
         message="both jobs to run")
    quiet, ending = jobs
    assert jobs_reconcile()["synced"] == 0  # nothing is out of date
    k8s_api.controller.terminate_container(NS, trainer_pod(k8s_api, ending), exit_code=0)
    replica = ending.replicas.get()
    wait(lambda: backend_for(datacenter).observe(ending, replica).status == Status.EXITED,
         message="the pod's end in the watch")
    assert str(ending.uid) in {uid for uid, in held_tasks.of(JOB_SYNC)}  # announced, lost
    assert state(ending) == "running"
    syncs.clear()
    assert jobs_reconcile()["synced"] == 1
    assert dict(syncs) == {ending.pk: 1}
    assert state(ending) == "succeeded" and state(quiet) == "running"


@pytest.mark.django_db
def test_a_reconcile_of_many_running_jobs_takes_as_many_queries_as_of_few(
        k8s_api, kube_datacenter, alice, datacenter, package, held_tasks, syncs):
    quota_set(None, datacenter, alice, jobs=8, cpu=16000, memory=64 * 2**30)
    counts = []
    for count in (2, 8):
        jobs = [submit_job(alice, datacenter, f"j{count}-{i}", pservers=1)
                for i in range(count - Job.objects.count())]
        for job in jobs:
            engine.job_launch(job.pk)
        wait(lambda: all(engine.job_sync(j.pk) and state(j) == "running"
                         for j in Job.objects.all()), message="every job to run: "
             + str(list(Job.objects.values_list("name", "state", "state_reason"))))
        jobs_reconcile()  # the watch of a first reconcile's own process is listed first
        syncs.clear()
        with CaptureQueriesContext(connection) as queries:
            assert jobs_reconcile()["synced"] == 0
        counts.append(len(queries.captured_queries))
        assert not syncs  # no job was looked at one by one
    assert counts[0] == counts[1]


# -- the local backend: runners' exits -------------------------------------------------------

@pytest.fixture
def local_jobs(settings, datacenter, alice):
    settings.PADDLECLOUD_LOCAL_SANDBOX = "off"  # the runners' exits, not the sandbox, here
    quota_set(None, datacenter, alice, jobs=2)


@pytest.mark.django_db(transaction=True)
def test_a_local_replica_that_exits_ends_its_job_at_once_with_no_poll_meanwhile(
        local_jobs, alice, datacenter, package, celery_worker, syncs):
    job = submit_job(alice, datacenter, "short", entry="sleep 4; exit 3", restart_limit=0)
    wait(lambda: state(job) == "running", message="the job to run")
    runner = int(job.replicas.get().backend_ref.removeprefix("pid:"))
    assert runner in exits_following()
    seen = syncs[job.pk]
    wait(lambda: state(job) == "failed", timeout=10, message="the job to fail")
    ended = Job.objects.get(pk=job.pk)
    assert ended.state_reason == "trainer-0 failed: exited with code 3"
    # One sync for its exit (two if the exit came while one ran), none while it slept.
    assert syncs[job.pk] - seen <= 2
    assert runner not in exits_following()


@pytest.mark.django_db(transaction=True)
def test_a_deadline_ends_a_job_when_it_comes_though_nothing_changed(
        local_jobs, alice, datacenter, package, celery_worker, syncs):
    job = submit_job(alice, datacenter, "slow", entry="sleep 60", deadline_seconds=2)
    wait(lambda: state(job) == "running", message="the job to run")
    wait(lambda: state(job) == "failed", timeout=6, message="the deadline to end it")
    ended = Job.objects.get(pk=job.pk)
    assert ended.state_reason == "ran past its deadline of 2 seconds"
    assert (ended.finished_at - ended.started_at).total_seconds() < 3.5
    assert syncs[job.pk] <= 4  # its start, its running, its deadline (and one to spare)


# -- one at a time ---------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_sync_whose_worker_died_holding_it_is_taken_over_at_once(alice, datacenter):
    """A worker killed -9 in the middle of a job's sync: the next sync of that job runs at
    once (not after the lease, two minutes); while its holder lives, it is left to it."""
    job = job_row(alice, datacenter, "held")
    dead = subprocess.run(
        [sys.executable, "-c", "from paddlecloud_core.processes import process_identity as i; "
                               "print(i())"],
        capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    cache.set(f"jobs:syncing:{job.pk}", dead, 120)
    assert job_sync_one_at_a_time(job.pk) is True  # it ran (a pending job: still to run)
    cache.set(f"jobs:syncing:{job.pk}", process_identity(), 120)  # one that lives
    assert job_sync_one_at_a_time(job.pk) is None


# -- debouncing ------------------------------------------------------------------------------

@pytest.mark.django_db
def test_announcements_until_a_sync_begins_are_one_sync(
        held_tasks, django_capture_on_commit_callbacks):
    uid = "0b2a4f8e-7d7e-4d33-9c57-5f3f3b0d1a11"
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(5):  # the pods of one job changing together
            replicas_changed.send(Datacenter, job_uid=uid)
    assert held_tasks.of(JOB_SYNC) == [(uid,)]
    sync_begins(uid)
    with django_capture_on_commit_callbacks(execute=True):
        replicas_changed.send(Datacenter, job_uid=uid)  # a change while it runs: one more
    assert held_tasks.of(JOB_SYNC) == [(uid,), (uid,)]


@pytest.mark.django_db
def test_a_namespace_made_after_the_pod_watch_started_is_watched_and_its_pods_announced(
        k8s_api, kube_datacenter, alice, datacenter, package, held_tasks):
    """The portal may read pods only in the namespaces it made (deploy/rbac.yaml: not those
    of the whole cluster), so its watch reads them namespace by namespace: one it makes after
    the watch started (alice's, for her first job) is watched from then, and its pods are
    announced as they come and as they change, on the watch (not at a list again); once the
    namespace is gone, so is its watch."""
    from kubernetes import client

    cache = pod_cache(kube_for(datacenter))
    assert cache.synced(timeout=5) and cache.namespaces() == []
    cache.announce()
    job = submit_job(alice, datacenter, "fit")
    engine.job_launch(job.pk)
    wait(lambda: [p for p in cache.job_pods(str(job.uid))
                  if p["status"].get("phase") == "Running"], message="the pod in the watch")
    assert cache.namespaces() == [NS]
    wait(lambda: (str(job.uid),) in held_tasks.of(JOB_SYNC), message="the pod announced")
    sync_begins(str(job.uid))
    announced, relists = len(held_tasks.of(JOB_SYNC)), cache.relists
    k8s_api.controller.terminate_container(NS, trainer_pod(k8s_api, job), exit_code=0)
    wait(lambda: [p for p in cache.job_pods(str(job.uid))
                  if p["status"].get("phase") == "Succeeded"], message="the change to arrive")
    wait(lambda: held_tasks.of(JOB_SYNC)[announced:] == [(str(job.uid),)],
         message="the change announced")
    assert cache.relists == relists
    assert not [path for _, path in k8s_api.request_log if path.startswith("/api/v1/pods")]

    with k8s_api.api_client() as api:  # the namespace goes (its administrator deletes it)
        client.CoreV1Api(api).delete_namespace(NS)
    wait(lambda: cache.namespaces() == [], message="its watch to stop")
    assert cache.job_pods(str(job.uid)) == []
    wait(lambda: not [t for t in threading.enumerate() if t.name.endswith(f"-{NS}")],
         message="its thread to end")


@pytest.mark.django_db
def test_a_change_while_the_pod_watch_lists_again_is_announced(
        k8s_api, kube_datacenter, alice, datacenter, package, held_tasks):
    job = submit_job(alice, datacenter, "fit")
    engine.job_launch(job.pk)  # its worker watches the cluster's pods from here on
    cache = pod_cache(kube_for(datacenter))
    wait(lambda: [p for p in cache.job_pods(str(job.uid))
                  if p["status"].get("phase") == "Running"], message="the pod in the watch")
    sync_begins(str(job.uid))  # what was announced so far is done with
    announced = len(held_tasks.of(JOB_SYNC))
    relists = cache.relists
    k8s_api.compact()  # the watch's version is gone: it must list again (410)
    k8s_api.drop_watches()
    k8s_api.controller.terminate_container(NS, trainer_pod(k8s_api, job), exit_code=0)
    wait(lambda: [p for p in cache.job_pods(str(job.uid))
                  if p["status"].get("phase") == "Succeeded"], message="the change to arrive")
    assert cache.relists > relists
    wait(lambda: held_tasks.of(JOB_SYNC)[announced:] == [(str(job.uid),)],
         message="the change announced")
