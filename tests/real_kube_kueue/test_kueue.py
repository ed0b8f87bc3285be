"""The real Kueue (v0.17.0) on a real API server: what it does to a queued Job, and to the
portal's pserver job as the backend makes it (a StatefulSet of pservers and a Job of trainers,
both in the user's LocalQueue). Nothing here needs a node: suspension, Workloads and quota
are Kueue's and the API server's."""

from __future__ import annotations

import time
import uuid

import pytest

from jobs import engine
from jobs.backends.kubernetes.names import object_base
from paddlecloud_core.contract import job_namespace
from tests.jobs.kubernetes.factories import NFS
from tests.jobs.kubernetes.test_backend import state, submit
from tests.jobs.kubernetes.test_cluster_choices import choose
from tests.kube import on_kubernetes
from tests.real_kube.kueue import workload_admitted

WORKLOADS = "/apis/kueue.x-k8s.io/v1beta1/namespaces/{}/workloads"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def wait(predicate, timeout=30.0, message="condition"):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {message}"
        time.sleep(0.1)
    return result


def condition(obj: dict | None, kind: str) -> dict | None:
    for found in (obj or {}).get("status", {}).get("conditions", []):
        if found["type"] == kind:
            return found
    return None


def job_workload(api, namespace: str, job: dict) -> dict | None:
    """The Workload Kueue made for ``job`` (labelled with its uid)."""
    found = api.call("GET", WORKLOADS.format(namespace),
                     query=[("labelSelector", f"kueue.x-k8s.io/job-uid={job['metadata']['uid']}")])
    return found["items"][0] if found["items"] else None


def batch_job(name: str, cpu: str) -> dict:
    """A Job asking to run now (``suspend`` unset), in the LocalQueue ``lq``."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: "lq"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "none", "command": ["true"],
                "resources": {"requests": {"cpu": cpu}}}]}}}}


@pytest.fixture
def namespace(kueue):
    """A fresh namespace with a LocalQueue ``lq`` (its ClusterQueue set by the test)."""
    name = f"kq-{uuid.uuid4().hex[:8]}"
    kueue.api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": name}})
    yield name
    kueue.api.delete(f"/api/v1/namespaces/{name}")


def test_a_queued_job_is_suspended_at_creation_and_admitted_when_its_quota_allows(
        kueue, namespace, queue_name):
    api = kueue.api
    api.apply({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
               "metadata": {"name": "lq", "namespace": namespace},
               "spec": {"clusterQueue": queue_name(cpu="1")}})
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"

    first = api.call("POST", jobs, batch_job("first", "600m"))
    assert first["spec"]["suspend"] is True  # Kueue's webhook, before anything ran
    workload = wait(lambda: workload_admitted(w := job_workload(api, namespace, first)) and w,
                    message="the first Job's Workload to be admitted")
    assert workload["spec"]["queueName"] == "lq"
    wait(lambda: api.get(f"{jobs}/first")["spec"]["suspend"] is False,
         message="Kueue to resume the admitted Job")

    second = api.call("POST", jobs, batch_job("second", "600m"))
    assert second["spec"]["suspend"] is True
    pending = wait(lambda: (c := condition(job_workload(api, namespace, second),
                                           "QuotaReserved")) and c,
                   message="Kueue to try the second Job")
    assert pending["status"] == "False" and pending["reason"] == "Pending"
    assert "insufficient unused quota for cpu in flavor default" in pending["message"]
    time.sleep(1)  # and it stays so
    assert api.get(f"{jobs}/second")["spec"]["suspend"] is True
    assert not workload_admitted(job_workload(api, namespace, second))

    # The first ends (deleted): its quota goes to the second.
    api.call("DELETE", f"{jobs}/first", {"propagationPolicy": "Background"})
    wait(lambda: workload_admitted(job_workload(api, namespace, second)),
         message="the second Job's admission once the first is gone")
    wait(lambda: api.get(f"{jobs}/second")["spec"]["suspend"] is False,
         message="Kueue to resume the second Job")


@pytest.fixture
def real_kueue_datacenter(kueue, datacenter, settings):
    """datacenter1 on the Kubernetes backend of the real control plane with Kueue, through
    the portal's kubeconfig, its PFS an NFS volume (deploy/admission-policy.yaml refuses the
    privileged namespaces a hostPath needs)."""
    with on_kubernetes(datacenter, settings, kueue.portal_kubeconfig, NFS, timeout=10) as on:
        yield on


@pytest.mark.django_db
def test_a_pserver_job_that_does_not_fit_whole_holds_no_quota(
        kueue, real_kueue_datacenter, queue_name, alice, package, held_tasks):
    """Quota for the pservers but not for the pservers and the trainers: nothing of the job
    may run (pservers waiting on trainers that cannot start hold the quota other jobs need).
    Today the backend queues the StatefulSet and the trainers' Job as two Workloads, and
    Kueue admits the pservers' alone (issue 34)."""
    api = kueue.api
    datacenter = real_kueue_datacenter
    choose(datacenter, kube_scheduler="kueue", kube_queue=queue_name(cpu="1"))
    job = submit(alice, datacenter, package, trainers=2, pservers=1, cpu="1", pscpu="500m")
    engine.job_launch(job.pk)
    assert state(job) == "starting", list(job.events.values_list("reason", flat=True))
    namespace = job_namespace(datacenter, alice.username)
    try:
        base = object_base(job)

        def tried(workload: dict) -> bool:
            """Admitted, or found short of quota (not merely not yet seen in its queue)."""
            reserved = condition(workload, "QuotaReserved")
            return workload_admitted(workload) or bool(reserved and "quota" in reserved["message"])

        workloads = wait(lambda: (found := [
            w for w in api.call("GET", WORKLOADS.format(namespace))["items"]
            if any(o["name"].startswith(base) for o in w["metadata"].get("ownerReferences", []))])
            and all(map(tried, found)) and found, message="Kueue to try the job's Workloads")
        admitted = sorted(w["metadata"]["name"] for w in workloads if workload_admitted(w))
        waiting = sorted(w["metadata"]["name"] for w in workloads if not workload_admitted(w))
        assert admitted == [], (
            f"Kueue admitted part of the job ({', '.join(admitted)}) while the rest "
            f"({', '.join(waiting)}) waits: {len(workloads)} Workloads for one job")
    finally:
        api.delete(f"/api/v1/namespaces/{namespace}")
