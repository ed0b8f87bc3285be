"""The real Kueue (v0.17.0, ``real_kueue``) on the real API server: what it does to a queued
Job. Nothing here needs a node: suspension, Workloads and quota are Kueue's and the API
server's. (The portal's jobs on it, a pserver job's pod group among them: the real variant of
tests/jobs/kubernetes/test_cluster_choices.py.)"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.real_kube.kueue import cluster_queue, workload_admitted

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
def kueue(real_kueue):
    return real_kueue


@pytest.fixture
def queue_name(kueue):
    """``make(cpu)``: a fresh ClusterQueue of that much CPU, its name; deleted after the
    test."""
    made = []

    def make(cpu: str) -> str:
        name = f"team-{uuid.uuid4().hex[:8]}"
        cluster_queue(kueue.api, name, cpu=cpu)
        made.append(name)
        return name

    yield make
    for name in made:
        kueue.api.delete(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{name}")


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
