"""The Kubernetes backend against the fake API server (tests/k8s_api_server): jobs driven by
a real Celery worker on Redis, replica states and logs from pods, why pods wait, kill and
delete leaving nothing behind, names reused while old pods terminate, quota refusals,
objects deleted behind our back, a broken or unreachable API server, dry runs, pull secrets,
and the pod watch surviving 410 Gone and dropped streams."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import threading
import time

import pytest
import yaml
from django.db import connection

from accounts.models import Datacenter
from jobs import engine, tasks
from jobs.backends import backend_for
from jobs.backends.base import Status
from jobs.backends.kubernetes.client import kube_for, kube_forget
from jobs.backends.kubernetes.manifests import portal_binding
from jobs.backends.kubernetes.names import JOB_UID_LABEL, object_base
from jobs.backends.kubernetes.pods_watch import pod_cache, pod_caches_stop
from jobs.models import Job, replica_ended
from jobs.services import job_delete, job_kill
from jobs.tasks import jobs_reconcile
from paddlecloud_core.contract import STOP_GRACE_SECONDS
from paddlecloud_core.snapshots import image_id_digest
from tests.conftest import assert_error
from tests.factories import PACKAGE, submit_job
from tests.k8s_api_server.rbac import PORTAL_USER
from tests.kube import datacenter_set, portal_kubeconfig
from tests.polling import wait

NS = "paddle-alice"
KUBECTL = shutil.which("kubectl")
KINDS = ("configmaps", "services", "statefulsets.apps", "jobs.batch", "pods")


@pytest.fixture
def kube(k8s_api, kube_datacenter):
    """datacenter1 on the fake API server (``kube_datacenter``); the server, for the tests."""
    return k8s_api


def job_objects(k8s_api, job) -> dict[str, list[str]]:
    """The job's objects on the server, by kind (its pods included)."""
    found = {}
    for kind in KINDS:
        names = [o["metadata"]["name"] for o in k8s_api.store.list(kind, NS)
                 if o["metadata"].get("labels", {}).get(JOB_UID_LABEL) == str(job.uid)]
        if names:
            found[kind] = sorted(names)
    return found


def state(job) -> str:
    job.refresh_from_db()
    return job.state


# -- end to end: a real worker, the API over HTTP, kubectl ---------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_job_runs_to_success_with_states_and_logs_from_pods(
        live_portal, k8s_api, settings, celery_worker):
    settings.PADDLECLOUD_KUBE_TIMEOUT = 2
    datacenter = live_portal.datacenter
    datacenter_set(datacenter, backend="kubernetes", kubeconfig=str(portal_kubeconfig(k8s_api)),
                   kube_volume={"hostPath": {"path": "/mnt/pfs/datacenter1"}})
    (live_portal.home / "pkg").mkdir()
    # Trainers print a line every 0.2 s for a while, then exit 0; the pserver serves.
    lines = [f"step {i} loss {1 / (i + 1):.3f}" for i in range(15)]
    k8s_api.controller.script_pods("*-tr-*", lines=lines, line_interval=0.2, exit_code=0)
    session = live_portal.session()
    try:
        response = session.post(f"{live_portal.url}/api/v1/jobs/", json={
            "name": "fit", "package": PACKAGE,
            "entry": "python train.py", "trainers": 2, "pservers": 1})
        assert response.status_code == 201, response.text
        job = Job.objects.get(name="fit")
        wait(lambda: state(job) == "running", message="the job to run")
        # The image its containers run, by digest, as the kubelet says (each pod's imageID).
        ran = {image_id_digest(c.get("imageID")) for pod in k8s_api.store.list("pods", NS)
               for c in pod["status"].get("containerStatuses") or []} - {""}
        wait(lambda: Job.objects.get(pk=job.pk).image_digest in ran,
             message="the job to record the image its pods run")

        # kubectl sees what the job made.
        if KUBECTL:
            shown = subprocess.run(
                [KUBECTL, "--kubeconfig", str(k8s_api.kubeconfig_path), "get",
                 "statefulsets,jobs,pods", "-n", NS], capture_output=True, text=True,
                timeout=30, check=True).stdout
            base = object_base(job)
            assert f"statefulset.apps/{base}-ps" in shown and f"job.batch/{base}-tr" in shown
            assert f"pod/{base}-ps-0" in shown and f"pod/{base}-tr-0-" in shown

        # The log follows the pod while it runs: lines come before the trainer ends.
        followed = session.get(f"{live_portal.url}/api/v1/jobs/fit/logs",
                               params={"worker": "trainer-1", "follow": "1"}, stream=True,
                               timeout=30)
        received, first_at = [], None
        for line in followed.iter_lines():
            received.append(line.decode())
            first_at = first_at or time.monotonic()
        assert received == lines
        wait(lambda: state(job) == "succeeded", message="the job to succeed")
        assert time.monotonic() - first_at > 1  # streamed as written, not read at the end

        every_event = session.get(f"{live_portal.url}/api/v1/jobs/fit/events").json()[
            "results"]
        events = [e["to_state"] for e in every_event if e["worker"] is None]
        assert events == ["pending", "starting", "running", "succeeded"]
        assert session.get(f"{live_portal.url}/api/v1/jobs/fit/").json()["image_digest"] in ran
        workers = {w["name"]: w for w in session.get(
            f"{live_portal.url}/api/v1/jobs/fit/workers").json()}
        assert {n: w["state"] for n, w in workers.items()} == {
            "pserver-0": "succeeded", "trainer-0": "succeeded", "trainer-1": "succeeded"}
        assert workers["trainer-0"]["exit_code"] == 0 and workers["trainer-0"]["host"]
        # Running, the worker said where (its state says the rest).
        assert [e["reason"] for e in every_event if e["worker"] == "trainer-0"
                and e["to_state"] == "running"] == [f"on {workers['trainer-0']['host']}"]
        assert workers["trainer-1"]["endpoint"].startswith(f"{object_base(job)}-tr-1.")
        # The job ended: its objects are deleted with their root.
        wait(lambda: not job_objects(k8s_api, job), message="the job's objects to go")
    finally:
        pod_caches_stop()
        kube_forget()


# -- driven step by step (the engine, as the tasks call it) --------------------------------------

@pytest.mark.django_db
def test_objects_the_job_owns_and_the_namespace(kube, alice, datacenter, package, held_starts):
    job = submit_job(alice, datacenter, trainers=2, pservers=2, cpu="500m")
    engine.job_launch(job.pk)
    base = object_base(job)
    assert job_objects(kube, job) | {"pods": []} == {
        "configmaps": [base], "services": [f"{base}-ps", f"{base}-tr"],
        "statefulsets.apps": [f"{base}-ps"], "jobs.batch": [f"{base}-tr"], "pods": []}
    quota = kube.get("resourcequotas", NS, "paddlecloud")
    assert quota["spec"]["hard"]["limits.cpu"] == "4000m"
    root_uid = kube.get("configmaps", NS, base)["metadata"]["uid"]
    for kind in ("services", "statefulsets.apps", "jobs.batch"):
        for obj in kube.store.list(kind, NS):
            assert obj["metadata"]["ownerReferences"][0]["uid"] == root_uid
    engine.job_launch(job.pk)  # a retried start: everything exists with this uid already
    wait(lambda: engine.job_sync(job.pk) and state(job) == "running")
    replicas = {r.name: r for r in job.replicas.all()}
    assert replicas["trainer-1"].host.startswith("node-") or replicas["trainer-1"].host


@pytest.mark.django_db
def test_why_a_pod_waits_is_shown_on_the_worker_and_the_job(kube, alice, datacenter, package,
                                                              held_starts):
    kube.controller.hold_pods("*-tr-0-*", reason="Unschedulable",
                              message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    kube.controller.hold_pods("*-tr-1-*", reason="ErrImagePull")
    job = submit_job(alice, datacenter, trainers=2)
    engine.job_launch(job.pk)

    def reasons():
        engine.job_sync(job.pk)
        found = dict(job.replicas.values_list("index", "reason"))
        return found if "cannot pull" in found[1] and "scheduled" in found[0] else None

    found = wait(reasons)
    assert found[0] == ("cannot be scheduled: 0/3 nodes are available: 3 Insufficient "
                        "nvidia.com/gpu.")
    assert found[1].startswith("cannot pull its image: ")
    job.refresh_from_db()
    assert job.state == "starting" and job.state_reason.startswith("trainer-")


@pytest.mark.django_db
def test_a_failing_trainer_is_restarted_then_fails_the_job(kube, alice, datacenter, package,
                                                            held_starts):
    kube.controller.script_pods("*-tr-*", lines=["oops"], exit_code=3)
    job = submit_job(alice, datacenter, restart_limit=1)
    engine.job_launch(job.pk)
    wait(lambda: not engine.job_sync(job.pk), message="the job to end")
    job.refresh_from_db()
    trainer = job.replicas.get()
    assert (job.state, trainer.state, trainer.restarts, trainer.exit_code) == (
        "failed", "failed", 1, 3)
    assert job.state_reason == "trainer-0 failed: exited with code 3"


def evict(kube, pod_name: str) -> None:
    """What a node drain or a preemption does: the pod marked ``DisruptionTarget``, then
    deleted with its grace."""
    from kubernetes import client

    with kube.api_client() as api:
        client.CoreV1Api(api).create_namespaced_pod_eviction(
            pod_name, NS, {"metadata": {"name": pod_name, "namespace": NS}})


def pods_of(kube, job, role: str) -> list[dict]:
    return [p for p in kube.store.list("pods", NS)
            if p["metadata"]["labels"].get(JOB_UID_LABEL) == str(job.uid)
            and p["metadata"]["labels"].get("paddlecloud.org/role") == role]


def running_pod(kube, job, role: str, index: int = 0) -> dict | None:
    for pod in pods_of(kube, job, role):
        if (pod["metadata"]["name"].startswith(f"{object_base(job)}-{role[:2]}-{index}")
                and not pod["metadata"].get("deletionTimestamp")
                and pod.get("status", {}).get("phase") == "Running"):
            return pod
    return None


@pytest.mark.django_db
def test_an_evicted_trainer_restarts_without_counting_against_its_limit(
        kube, alice, datacenter, package, held_starts):
    """Preemption, a drain, a lost node are not the job's fault: with no restarts allowed,
    an evicted trainer still comes back, and the job does not fail."""
    job = submit_job(alice, datacenter, pservers=1, restart_limit=0)
    engine.job_launch(job.pk)
    wait(lambda: engine.job_sync(job.pk) and state(job) == "running")
    first = running_pod(kube, job, "trainer")
    evict(kube, first["metadata"]["name"])
    trainer = job.replicas.get(role="trainer")

    def back():
        engine.job_sync(job.pk)
        trainer.refresh_from_db()
        return trainer.state == "running" and trainer.attempt == 1

    wait(back, message="the trainer to run again")
    assert (trainer.restarts, trainer.disruptions) == (0, 1)
    assert state(job) == "running"
    restarted = job.events.filter(replica=trainer, to_state="starting").last().reason
    assert "the cluster took its pod away" in restarted
    assert restarted.endswith("restarted (not counted against its restart limit)")
    assert trainer.backend_ref != first["metadata"]["name"]  # its new pod


@pytest.mark.django_db
def test_a_failed_trainer_of_a_collective_job_restarts_all_trainers(
        kube, alice, datacenter, package, held_starts):
    """A communicator cannot take back one rank: trainer 1 fails, both restart (a new
    trainers' Job), within the limit; then the job fails."""
    job = submit_job(alice, datacenter, trainers=2, restart_limit=1)
    kube.controller.script_pods(f"{object_base(job)}-tr-1-*", lines=["diverged"],
                                exit_code=5, run_seconds=0.5)
    engine.job_launch(job.pk)
    trainers = {r.index: r for r in job.replicas.all()}
    wait(lambda: engine.job_sync(job.pk) and job.replicas.filter(attempt=1).count() == 2,
         message="the trainers to restart together")

    def second_attempt():  # a trainers' Job of its own, with pods of both indexes
        engine.job_sync(job.pk)
        return {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                for p in pods_of(kube, job, "trainer")
                if p["metadata"]["labels"]["paddlecloud.org/first-attempt"] == "1"} == {"0", "1"}

    wait(second_attempt, message="the second attempt's pods")
    wait(lambda: not engine.job_sync(job.pk), message="the job to end")
    assert state(job) == "failed"
    assert job.state_reason == "trainer-1 failed: exited with code 5"
    for trainer in trainers.values():
        trainer.refresh_from_db()
        assert (trainer.restarts, trainer.attempt) == (1, 1)
        restart = job.events.filter(replica=trainer, to_state="starting").last().reason
        assert restart == "trainer-1 exited with code 5; all trainers restart (1 of 1)"


@pytest.mark.django_db
def test_a_pserver_replaced_by_its_statefulset_fails_the_job(
        kube, alice, datacenter, package, held_starts):
    """A new pserver pod holds none of the parameters: the job must not train on."""
    job = submit_job(alice, datacenter, pservers=1, restart_limit=3)
    engine.job_launch(job.pk)
    wait(lambda: engine.job_sync(job.pk) and state(job) == "running")
    evict(kube, f"{object_base(job)}-ps-0")
    wait(lambda: not engine.job_sync(job.pk), message="the job to end")
    assert state(job) == "failed"
    assert job.state_reason.startswith("pserver-0 failed: ")
    assert "the parameters it held are gone" in job.state_reason or (
        "the cluster took its pod away" in job.state_reason)


@pytest.mark.django_db
def test_a_running_pserver_is_known_by_its_pods_uid(kube, alice, datacenter, package,
                                                   held_starts):
    """Its handle once it runs; a handle from before (a pod name, as an earlier version
    kept) is not taken for a replaced pod."""
    job = submit_job(alice, datacenter, pservers=1)
    engine.job_launch(job.pk)
    wait(lambda: engine.job_sync(job.pk) and state(job) == "running")
    pserver = job.replicas.get(role="pserver")
    pod = kube.store.get("pods", NS, f"{object_base(job)}-ps-0")
    assert pserver.backend_ref == pod["metadata"]["uid"]
    job.replicas.filter(pk=pserver.pk).update(backend_ref=f"{object_base(job)}-ps-0")
    assert engine.job_sync(job.pk) and state(job) == "running"


@pytest.mark.django_db
def test_kill_and_delete_leave_no_objects_and_the_name_is_reused_at_once(
        kube, alice, datacenter, package, held_starts, monkeypatch,
        django_capture_on_commit_callbacks):
    kube.settings.pod_termination_seconds = 2.0  # old pods linger, terminating
    job = submit_job(alice, datacenter, pservers=1)
    engine.job_launch(job.pk)
    wait(lambda: engine.job_sync(job.pk) and state(job) == "running")
    with django_capture_on_commit_callbacks(execute=True):
        job_kill(alice, datacenter, "fit")
    removals = []
    held_starts.run("jobs.tasks.job_remains_remove", removals.append)
    with django_capture_on_commit_callbacks(execute=True):
        job_delete(alice, datacenter, "fit")
    tasks.job_remains_remove(*removals)  # what the worker does once the delete commits
    terminating = [p for p in kube.store.list("pods", NS)
                   if p["metadata"].get("deletionTimestamp")]
    assert terminating  # still there, on their way out

    again = submit_job(alice, datacenter, pservers=1)
    engine.job_launch(again.pk)
    assert object_base(again) != object_base(job)
    wait(lambda: engine.job_sync(again.pk) and state(again) == "running")
    wait(lambda: not job_objects(kube, job), message="the first job's objects to go")
    assert job_objects(kube, again)


@pytest.mark.django_db
def test_a_killed_jobs_pods_get_the_portals_grace_period(kube, alice, datacenter, package,
                                                          held_starts,
                                                          django_capture_on_commit_callbacks):
    kube.settings.pod_termination_seconds = 2.0  # pods take a while to go: their grace shows
    job = submit_job(alice, datacenter, trainers=2, pservers=1)
    engine.job_launch(job.pk)
    wait(lambda: engine.job_sync(job.pk) and state(job) == "running")
    with django_capture_on_commit_callbacks(execute=True):
        job_kill(alice, datacenter, "fit")
    # The garbage collector deletes the pods with their own grace period: the portal's, not
    # Kubernetes' default 30 s.
    graces = wait(lambda: {p["metadata"]["name"]: p["metadata"].get("deletionGracePeriodSeconds")
                           for p in kube.store.list("pods", NS)
                           if p["metadata"].get("deletionTimestamp")} or None)
    assert len(graces) == 3 and set(graces.values()) == {STOP_GRACE_SECONDS}


@pytest.mark.django_db
def test_a_finished_collective_jobs_objects_go_as_a_pserver_jobs_do(kube, alice, datacenter,
                                                                     package, held_starts):
    kube.controller.script_pods("*-tr-*", lines=["done"], exit_code=0)
    collective = submit_job(alice, datacenter, name="ring", trainers=2)
    with_pservers = submit_job(alice, datacenter, name="ps", trainers=1, pservers=1)
    for job in (collective, with_pservers):
        engine.job_launch(job.pk)
        wait(lambda job=job: not engine.job_sync(job.pk), message=f"{job.name} to end")
        assert state(job) == "succeeded"
        # Its logs stay in its output; nothing of it stays in the cluster.
        wait(lambda job=job: not job_objects(kube, job), message=f"{job.name}'s objects to go")


def _namespace_with(kube, make) -> None:
    """The user's namespace, made beforehand with what a cluster admin put there."""
    from kubernetes import client

    with kube.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NS}})
        make(core)


@pytest.mark.django_db
def test_a_pod_refused_by_a_resource_quota_waits_for_it(
        kube, alice, datacenter, package, held_starts):
    """Right after a job ends its pods still count against the namespace's quota until they
    are gone: a refusal for "exceeded quota" is a wait, shown, not a failure."""
    _namespace_with(kube, lambda core: core.create_namespaced_resource_quota(NS, {
        "metadata": {"name": "cluster-cap"}, "spec": {"hard": {"limits.cpu": "500m"}}}))
    job = submit_job(alice, datacenter, cpu="1")
    engine.job_launch(job.pk)
    trainer = job.replicas.get(role="trainer")
    wait(lambda: engine.job_sync(job.pk) and "exceeded quota" in reason(trainer),
         message="the refusal to show")
    assert state(job) == "starting"
    assert reason(trainer).startswith("waiting for the namespace's quota")
    assert "exceeded quota: cluster-cap" in job.state_reason
    with kube.api_client() as api:  # the ending pods are gone
        from kubernetes import client

        client.CoreV1Api(api).delete_namespaced_resource_quota("cluster-cap", NS)
    wait(lambda: engine.job_sync(job.pk) and state(job) == "running", message="the job to run")


@pytest.mark.django_db
def test_another_refusal_is_shown_then_fails_the_job_when_it_persists(
        kube, alice, datacenter, package, held_starts, settings):
    """Pod Security, a LimitRange, a webhook: the cluster will refuse the pod every time."""
    settings.PADDLECLOUD_KUBE_REFUSED_SECONDS = 1
    _namespace_with(kube, lambda core: core.create_namespaced_limit_range(NS, {
        "metadata": {"name": "cluster-max"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "500m"}}]}}))
    job = submit_job(alice, datacenter, cpu="1")
    engine.job_launch(job.pk)
    trainer = job.replicas.get(role="trainer")
    wait(lambda: engine.job_sync(job.pk) and "refuses" in reason(trainer),
         message="the refusal to show")
    assert "maximum cpu usage per Container is 500m" in reason(trainer)
    wait(lambda: not engine.job_sync(job.pk), message="the job to end")
    assert state(job) == "failed"
    assert "the cluster refused to create its pod: " in job.state_reason
    assert "maximum cpu usage per Container is 500m" in job.state_reason


def reason(replica) -> str:
    replica.refresh_from_db()
    return replica.reason


@pytest.mark.django_db
def test_a_job_whose_pods_do_not_all_start_in_time_is_requeued_then_fails(
        kube, alice, datacenter, package, held_starts, django_capture_on_commit_callbacks):
    """2 of 3 trainers run, the third cannot be scheduled: after the start timeout every pod
    is released and the job goes back to the head of its queue; after its tries, it fails."""
    Datacenter.objects.filter(pk=datacenter.pk).update(start_timeout=1, start_tries=2)
    job = submit_job(alice, datacenter, trainers=3, cpu="500m")
    kube.controller.hold_pods(f"{object_base(job)}-tr-2-*", namespace=NS,
                              message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    engine.job_launch(job.pk)
    with django_capture_on_commit_callbacks(execute=True):
        wait(lambda: engine.job_sync(job.pk) and state(job) == "queued", message="the requeue")
    job.refresh_from_db()
    assert job.requeues == 1
    assert job.state_reason.startswith("requeued at the head of its queue, start 2 of 2 next: "
                                       "its replicas were not all running after 1 s")
    assert "trainer-2: cannot be scheduled: 0/3 nodes are available" in job.state_reason
    assert set(job.replicas.values_list("state", flat=True)) == {"pending"}
    assert set(job.replicas.values_list("attempt", flat=True)) == {1}
    # Every pod released; the admission is asked to start it again, at its place.
    wait(lambda: not job_objects(kube, job), message="the pods to be released")
    assert held_starts.of("jobs.tasks.jobs_admit")[-1] == (alice.pk, datacenter.pk)
    from scheduling.admission import quota_admit

    assert quota_admit(alice.pk, datacenter.pk) == [job.pk]
    engine.job_launch(job.pk)
    trainers = sorted(p["metadata"]["name"] for p in kube.store.list("pods", NS))
    assert len(trainers) == 3  # its new start's pods
    wait(lambda: not engine.job_sync(job.pk), message="the job to fail")
    assert state(job) == "failed"
    assert job.state_reason.startswith("its replicas were not all running within 1 s of its "
                                       "start, 2 times (trainer-2: cannot be scheduled")


@pytest.mark.django_db
def test_a_start_under_way_outlasts_its_start_timeout_a_stuck_one_does_not(
        kube, alice, datacenter, package, held_starts):
    """One trainer's image is being pulled, a node is being added for the other: past its
    start timeout the job waits on, saying why, and the first runs once pulled. Then the
    autoscaler says no node can come for the second: that start is stuck, and times out.
    On the fake API server: the real control plane's node agent pulls no images and no
    cluster-autoscaler runs there, so the kubelet's ``Pulling`` and cluster-autoscaler's
    ``TriggeredScaleUp``/``NotTriggerScaleUp`` Events are the fake's, on the pod, with the
    reasons, words and timing of theirs."""
    Datacenter.objects.filter(pk=datacenter.pk).update(start_timeout=1, start_tries=1)
    job = submit_job(alice, datacenter, trainers=2, cpu="500m")
    pulled, added = f"{object_base(job)}-tr-0-*", f"{object_base(job)}-tr-1-*"
    kube.controller.hold_pods(pulled, namespace=NS, reason="Pulling")
    kube.controller.hold_pods(added, namespace=NS, reason="TriggeredScaleUp")
    engine.job_launch(job.pk)
    begun = time.monotonic()
    while time.monotonic() - begun < 3:  # three start timeouts
        engine.job_sync(job.pk)
        assert state(job) == "starting", job.state_reason
        time.sleep(0.2)
    job.refresh_from_db()
    assert job.state_reason.startswith("trainer-0: its image is being pulled (Pulling image ")
    assert job.state_reason.endswith("; its start timeout runs again from now")

    kube.controller.release_pods(pulled, namespace=NS)
    wait(lambda: engine.job_sync(job.pk) and job.replicas.get(index=0).state == "running",
         message="the pulled trainer to run")
    wait(lambda: engine.job_sync(job.pk) and "autoscaler" in state_reason(job),
         message="the job to wait for its node")
    assert state_reason(job).startswith(
        "trainer-1: the cluster's autoscaler is adding a node for it (pod triggered scale-up:")
    assert state(job) == "starting"

    kube.controller.hold_pods(added, namespace=NS, reason="NotTriggerScaleUp")
    wait(lambda: not engine.job_sync(job.pk), message="the stuck start to time out")
    assert state(job) == "failed"
    assert state_reason(job).startswith("its replicas were not all running within 1 s of its "
                                        "start, 1 times (trainer-1: cannot be scheduled")


def state_reason(job) -> str:
    job.refresh_from_db()
    return job.state_reason


@pytest.mark.django_db
def test_objects_deleted_behind_our_back_fail_the_job(kube, alice, datacenter, package,
                                                      held_starts):
    job = submit_job(alice, datacenter)
    engine.job_launch(job.pk)
    wait(lambda: engine.job_sync(job.pk) and state(job) == "running")
    kube_for(datacenter).delete("ConfigMap", NS, object_base(job), grace=0)
    wait(lambda: not engine.job_sync(job.pk), message="the job to end")
    job.refresh_from_db()
    assert job.state == "failed"
    assert "deleted outside PaddleCloud" in job.state_reason


@pytest.mark.django_db
def test_the_reconciler_deletes_objects_of_jobs_it_does_not_know(kube, alice, datacenter,
                                                                  package, held_starts):
    job = submit_job(alice, datacenter)
    engine.job_launch(job.pk)
    assert job_objects(kube, job)
    Job.objects.filter(pk=job.pk).delete()  # the database forgot it (restored from backup)
    assert jobs_reconcile()["orphans"] == 1
    wait(lambda: not job_objects(kube, job), message="the orphan's objects to go")


@pytest.mark.django_db
def test_a_cluster_too_old_for_the_objects_fails_the_job_and_the_reconciler_says_so(
        kube, alice, datacenter, package, held_starts, caplog):
    kube.settings.kubernetes_version = "1.29"  # deploy/'s admission policy is not served
    job = submit_job(alice, datacenter)
    engine.job_launch(job.pk)
    job.refresh_from_db()
    assert (job.state, job.state_reason) == ("failed", (
        "datacenter datacenter1: its cluster runs Kubernetes 1.29, older than PaddleCloud "
        "needs (1.30 or newer: the trainers' indexed Job uses backoffLimitPerIndex and "
        "podReplacementPolicy, deploy/'s admission policy admissionregistration.k8s.io/v1); "
        "upgrade the cluster"))
    assert not job_objects(kube, job) and kube.get("namespaces", "", NS) is None
    assert jobs_reconcile()["unfit"] == 1
    assert "datacenter datacenter1 cannot run jobs: datacenter datacenter1: its cluster runs " \
           "Kubernetes 1.29" in caplog.text
    kube.settings.kubernetes_version = "1.30"  # upgraded: the reconciler sees it
    assert jobs_reconcile()["unfit"] == 0
    again = submit_job(alice, datacenter, name="again")
    engine.job_launch(again.pk)
    assert state(again) == "starting" and job_objects(kube, again)


@pytest.mark.django_db
def test_a_broken_kubeconfig_fails_the_job_saying_so(kube, alice, datacenter, package,
                                                     held_starts, tmp_path):
    broken = tmp_path / "broken-kubeconfig"
    broken.write_text("this: [is not a kubeconfig\n")
    datacenter_set(datacenter, kubeconfig=str(broken))
    job = submit_job(alice, datacenter)
    engine.job_launch(job.pk)
    job.refresh_from_db()
    assert job.state == "failed"
    assert f"cannot load kubeconfig {broken}" in job.state_reason


@pytest.mark.django_db
def test_an_unreachable_api_server_fails_the_job_within_the_retry_budget(
        kube, alice, datacenter, package, held_starts, tmp_path, api, token_client):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there
    config = kube.kubeconfig_path.read_text().replace(kube.url, f"http://127.0.0.1:{port}")
    (tmp_path / "gone").write_text(config)
    datacenter_set(datacenter, kubeconfig=str(tmp_path / "gone"))
    job = submit_job(alice, datacenter)
    started = time.monotonic()
    engine.job_launch(job.pk)
    assert time.monotonic() - started < 10
    job.refresh_from_db()
    assert job.state == "failed" and "cannot reach the API server" in job.state_reason
    assert "(after 3 attempts)" in job.state_reason
    assert token_client.get("/api/v1/jobs/fit/").json()["state"] == "failed"  # API answers


@pytest.mark.django_db
def test_server_errors_and_timeouts_are_retried(kube, alice, datacenter, package, held_starts,
                                                settings):
    settings.PADDLECLOUD_KUBE_TIMEOUT = 0.5
    kube.fail_next(503, count=2, method="POST", path="configmaps")
    kube.hang_next(1.5, count=1, method="POST", path="jobs")  # applied, answer too late
    job = submit_job(alice, datacenter)
    engine.job_launch(job.pk)
    assert state(job) == "starting"
    assert job_objects(kube, job)["jobs.batch"] == [f"{object_base(job)}-tr"]


@pytest.mark.django_db
def test_a_burst_of_throttling_is_waited_out_as_the_server_asks(kube, alice, datacenter,
                                                                package, held_starts):
    """The fake API server, because the real one cannot be made to throttle on demand: it
    answers as API Priority and Fairness does (429 TooManyRequests, ``Retry-After`` and
    ``details.retryAfterSeconds``), and as a server that is briefly unavailable (503 with
    ``Retry-After``). More throttles than the retry budget's tries (3 here) do not fail the
    job, and the waits are the server's."""
    kube.fail_next(429, count=4, method="POST", path="configmaps", retry_after=0)
    kube.fail_next(429, count=1, method="POST", path="services", retry_after=1)
    kube.fail_next(503, count=1, method="POST", path="jobs", retry_after=1)
    job = submit_job(alice, datacenter)
    started = time.monotonic()
    engine.job_launch(job.pk)
    assert state(job) == "starting"
    assert job_objects(kube, job)["jobs.batch"] == [f"{object_base(job)}-tr"]
    assert time.monotonic() - started >= 2  # the two seconds the server asked for
    posts = [path for method, path in kube.request_log if method == "POST"]
    made = len(job_objects(kube, job)["configmaps"])
    assert sum(path.endswith("/configmaps") for path in posts) == 4 + made


@pytest.mark.django_db
def test_throttling_that_persists_fails_the_job_after_its_budget(kube, alice, datacenter,
                                                                 package, held_starts,
                                                                 settings):
    """The fake API server (the real one cannot throttle on demand): it refuses every create
    of the job's root with 429, ``Retry-After: 1``. The job fails with the reason after the
    throttle budget, not at once and not never."""
    settings.PADDLECLOUD_KUBE_THROTTLE_SECONDS = 3
    kube_forget()
    kube.fail_next(429, count=1000, method="POST", path="configmaps", retry_after=1)
    job = submit_job(alice, datacenter)
    started = time.monotonic()
    engine.job_launch(job.pk)
    assert 3 <= time.monotonic() - started < 10
    job.refresh_from_db()
    assert job.state == "failed"
    assert "the API server kept throttling us" in job.state_reason
    assert "PADDLECLOUD_KUBE_THROTTLE_SECONDS=3" in job.state_reason
    posts = [path for method, path in kube.request_log
             if method == "POST" and path.endswith("/configmaps")]
    assert len(posts) == 4  # tried again after each second the server asked for
    assert not job_objects(kube, job)


# -- dry runs and bad objects ---------------------------------------------------------------------

@pytest.mark.django_db
def test_a_dry_run_shows_the_objects(kube, token_client, package):
    response = token_client.post("/api/v1/jobs/", {
        "name": "probe", "package": package, "entry": "python train.py", "trainers": 2,
        "dry_run": True}, format="json")
    assert response.status_code == 200, response.content
    kinds = [(o["kind"], o["metadata"]["name"]) for o in response.json()["objects"]]
    assert [k for k, _ in kinds] == ["Namespace", "ResourceQuota", "LimitRange",
                                     *["NetworkPolicy"] * 5, "ConfigMap", "Service", "Job"]
    assert kinds[0] == ("Namespace", NS)
    # The same objects as documents for `kubectl apply -f`, keys in kubectl's order.
    documents = response.json()["yaml"]
    assert documents.startswith("---\napiVersion: v1\nkind: Namespace\nmetadata:\n")
    assert list(yaml.safe_load_all(documents)) == response.json()["objects"]
    assert not kube.store.list("configmaps", NS)  # nothing was created


@pytest.mark.django_db
def test_a_job_whose_objects_are_invalid_is_refused_with_the_schemas_message(
        kube, token_client, datacenter, package):
    datacenter_set(datacenter, kube_volume={"nfs": {"server": 5, "path": "/pfs"}})
    body = assert_error(token_client.post("/api/v1/jobs/", {
        "name": "bad", "package": package, "entry": "x"}, format="json"), 400,
        "invalid_objects")
    assert "nfs.server" in body["message"] and "is not of type 'string'" in body["message"]
    assert not Job.objects.exists()


# -- pull secrets ---------------------------------------------------------------------------------

@pytest.mark.django_db
def test_registry_credentials_become_pull_secrets_kept_in_sync(
        kube, token_client, alice, datacenter, package, held_starts,
        django_capture_on_commit_callbacks, monkeypatch):
    held_starts.run("registries.tasks.pull_secret_sync")  # on a worker, done here
    held_starts.run("registries.tasks.pull_secret_remove")
    url = "/api/v1/registries/"
    with django_capture_on_commit_callbacks(execute=True):
        assert token_client.post(url, {"name": "mine", "server": "registry.example.com:5000",
                                       "username": "bob", "password": "first"},
                                 format="json").status_code == 201

    def config():
        secret = kube.get("secrets", NS, "paddlecloud-registry-mine")
        if secret is None:
            return None
        assert secret["type"] == "kubernetes.io/dockerconfigjson"
        return json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))

    auth = config()["auths"]["registry.example.com:5000"]
    assert (auth["username"], auth["password"]) == ("bob", "first")
    assert base64.b64decode(auth["auth"]) == b"bob:first"

    with django_capture_on_commit_callbacks(execute=True):
        token_client.patch(f"{url}mine/", {"password": "second"}, format="json")
    assert config()["auths"]["registry.example.com:5000"]["password"] == "second"

    job = submit_job(alice, datacenter, registry="mine",
                 image="registry.example.com:5000/me/trainer:1")
    engine.job_launch(job.pk)
    template = kube.get("jobs.batch", NS, f"{object_base(job)}-tr")["spec"]["template"]
    assert template["spec"]["imagePullSecrets"] == [{"name": "paddlecloud-registry-mine"}]

    Job.objects.filter(pk=job.pk).update(state="killed")
    with django_capture_on_commit_callbacks(execute=True):
        assert token_client.delete(f"{url}mine/").status_code == 204
    assert config() is None


# -- watching pods --------------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_pod_watch_lists_again_after_410_and_dropped_streams(kube, alice, datacenter,
                                                                 package, held_starts):
    job = submit_job(alice, datacenter)
    engine.job_launch(job.pk)
    cache = pod_cache(kube_for(datacenter))
    assert cache.synced(timeout=5)
    wait(lambda: [p for p in cache.job_pods(str(job.uid))
                  if p["status"].get("phase") == "Running"], message="the pod in the cache")
    relists = cache.relists
    kube.compact()
    kube.drop_watches()
    (pod,) = cache.job_pods(str(job.uid))
    kube.controller.terminate_container(NS, pod["metadata"]["name"], exit_code=0)
    wait(lambda: [p for p in cache.job_pods(str(job.uid))
                  if p["status"].get("phase") == "Succeeded"], message="the change to arrive")
    assert cache.relists > relists
    backend = backend_for(datacenter)
    assert backend.observe(job, job.replicas.get()).status == Status.EXITED


@pytest.mark.django_db
def test_the_watches_of_many_namespaces_take_no_connection_of_the_other_requests(
        kube, datacenter, caplog):
    """Each open watch holds a connection; watching more namespaces than the client keeps
    connections for (its pool), the other requests would make a new one each, and every
    watch cut (they end every few minutes) would throw connections away ("Connection pool is
    full"). The pod watch's lists and watches have connections of their own."""
    from kubernetes import client

    requests = kube_for(datacenter)
    kept = requests.api_client.configuration.connection_pool_maxsize
    names = sorted(f"paddle-user{i}" for i in range(kept + 3))
    with kube.api_client() as api:  # as the administrator, as if the portal had made them
        for name in names:
            client.CoreV1Api(api).create_namespace({"metadata": {
                "name": name, "labels": {"app.kubernetes.io/managed-by": "paddlecloud"}}})
            client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
                name, portal_binding(name, PORTAL_USER))
    cache = pod_cache(requests)
    assert cache.synced(timeout=10) and cache.namespaces() == names
    watching = lambda: sum("watch=true" in path and "/pods?" in path  # noqa: E731
                           for _, path in kube.request_log)
    wait(lambda: watching() >= len(names), message="every namespace's watch open")
    pool = requests.api_client.rest_client.pool_manager.connection_from_url(
        requests.api_client.configuration.host)
    assert pool.num_connections == 0  # not one of the portal's other requests' connections
    relists, opened = cache.relists, watching()
    kube.drop_watches()
    wait(lambda: cache.relists >= relists + len(names) and watching() >= opened + len(names),
         message="every watch open again")
    assert requests.get("Namespace", None, names[0])
    assert pool.num_connections == 1
    assert "Connection pool is full" not in caplog.text


def replica_ended_now(replica) -> bool:
    """Whether the replica has ended, asked on the reader's thread (which closes its own
    connection, as the portal's streaming response does)."""
    try:
        return replica_ended(replica.pk)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)  # the reader thread reads the replica's state
def test_logs_of_a_pod_still_being_created_wait_for_it(kube, alice, datacenter, package,
                                                       held_starts):
    kube.controller.hold_pods("*", reason="ContainerCreating")
    kube.controller.script_pods("*-tr-*", lines=["first", "second"], exit_code=0)
    job = submit_job(alice, datacenter)
    engine.job_launch(job.pk)
    backend = backend_for(datacenter)
    replica = job.replicas.get()
    wait(lambda: backend._pods(job), message="the pod")
    assert b"".join(backend.log_stream(job, replica, follow=False, tail=None)[1]) == b""
    chunks, errors = [], []

    def follow():
        try:
            chunks.extend(backend.log_stream(job, replica, follow=True, tail=None,
                                             ended=lambda: replica_ended_now(replica))[1])
        except Exception as exc:  # shown by the assertion below
            errors.append(exc)

    reader = threading.Thread(target=follow)
    reader.start()
    time.sleep(0.5)
    kube.controller.release_pods()
    reader.join(20)
    assert (b"".join(chunks), errors) == (b"first\nsecond\n", [])


@pytest.mark.django_db(transaction=True)
def test_a_running_pods_log_goes_on_from_its_cursor_in_that_pod(kube, alice, datacenter,
                                                                package, held_starts):
    """The cursor of a pod's log served live names the pod: it goes on in that pod's log
    (to its end, once a newer pod or run has replaced it), and is refused once that pod is
    gone."""
    from kubernetes import client

    from jobs.logs.source import log_blocks
    from kernel.errors import ConflictError
    from paddlecloud_core.logcursor import LogCursor

    kube.settings.crash_backoff_seconds = 0.0
    job = submit_job(alice, datacenter)
    engine.job_launch(job.pk)
    backend, replica = backend_for(datacenter), job.replicas.get()
    first = wait(lambda: next((p for p in backend._pods(job)
                               if p.get("status", {}).get("phase") == "Running"), None),
                 message="the trainer's pod to run")["metadata"]
    kube.controller.append_log(NS, first["name"], ["one", "two"], container="trainer")

    def read(**asked) -> tuple[LogCursor | None, bytes]:
        start, chunks = backend.log_stream(job, replica, follow=False, tail=None, **asked)
        return start, b"".join(chunks)

    assert read() == (LogCursor(0, first["uid"], 0), b"one\ntwo\n")
    assert read(at=LogCursor(4, first["uid"], 0)) == (LogCursor(4, first["uid"], 0), b"two\n")
    # Followed from its last line: the cursor says where that line begins in the pod's log.
    start, chunks = backend.log_stream(job, replica, follow=True, tail=1,
                                       ended=lambda: replica_ended_now(replica))
    chunks.close()
    assert start == LogCursor(4, first["uid"], 0)

    # A newer pod of the replica: the first one's cursor still reads the rest of its log.
    kube.controller.terminate_container(NS, first["name"], exit_code=1)
    pod = kube.get("pods", NS, first["name"])
    core = client.CoreV1Api(kube.api_client())
    core.create_namespaced_pod(NS, {
        "metadata": {"name": first["name"] + "-again", "labels": pod["metadata"]["labels"],
                     "annotations": pod["metadata"].get("annotations", {})},
        "spec": {**{key: value for key, value in pod["spec"].items() if key != "nodeName"},
                 "restartPolicy": "OnFailure"}})  # as a pserver's: its container restarts
    second = wait(lambda: next((p["metadata"] for p in backend._pods(job)
                                if p["metadata"]["uid"] != first["uid"]
                                and p.get("status", {}).get("phase") == "Running"), None),
                  message="the second pod to run")
    kube.controller.append_log(NS, second["name"], ["three"], container="trainer")
    assert read(at=LogCursor(4, first["uid"], 0)) == (LogCursor(4, first["uid"], 0), b"two\n")
    assert read() == (LogCursor(0, second["uid"], 0), b"three\n")

    # Its container restarted (a new run, whose log begins at 0): the run before is read from
    # the old cursor, to its end; a new request names the new run.
    kube.controller.terminate_container(NS, second["name"], exit_code=1)
    wait(lambda: any(p["metadata"]["uid"] == second["uid"] and "running" in
                     p["status"]["containerStatuses"][0]["state"] and
                     p["status"]["containerStatuses"][0]["restartCount"] == 1
                     for p in backend._pods(job)), message="the second pod's restart")
    kube.controller.append_log(NS, second["name"], ["four"], container="trainer")
    assert read(at=LogCursor(2, second["uid"], 0)) == (LogCursor(2, second["uid"], 0),
                                                       b"ree\n")
    assert read() == (LogCursor(0, second["uid"], 1), b"four\n")

    # Gone (its log kept in the job's output, where its bytes are not where they were in the
    # pod's): refused, not guessed at.
    core.delete_namespaced_pod(first["name"], NS, grace_period_seconds=0)
    wait(lambda: all(p["metadata"]["uid"] != first["uid"] for p in backend._pods(job)),
         message="the first pod to go")
    with pytest.raises(ConflictError) as refused:
        log_blocks(job, replica, follow=True, offset=LogCursor(4, first["uid"], 0))
    assert (refused.value.code, list(refused.value.fields)) == ("log_gone", ["offset"])
