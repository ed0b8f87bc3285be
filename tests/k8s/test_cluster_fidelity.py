"""What the Kubernetes backend relies on, as a real cluster does it: podReplacementPolicy,
per-index back-off, claims and volumes, the default ServiceAccount, evictions, a lost node, init
containers keeping a pod Pending."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from .helpers import condition, job_body, pod_body, status_of


def pods_of(core, ns: str, prefix: str) -> list:
    return [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith(prefix)]


# --- the Job controller ------------------------------------------------------------------------

@pytest.mark.parametrize("policy, overlap", [("Failed", False), ("TerminatingOrFailed", True)])
def test_pod_replacement_policy(k8s_api, core, batch, ns, policy, overlap):
    """With Failed, an index's next pod waits until the terminating one has failed and gone;
    with TerminatingOrFailed it starts while the old one terminates."""
    k8s_api.settings.pod_termination_seconds = 1.0
    k8s_api.settings.job_backoff_seconds = 0.0
    k8s_api.controller.script_pods("train-*", run_seconds=60)
    batch.create_namespaced_job(ns, job_body("train", completions=1, podReplacementPolicy=policy,
                                             backoffLimitPerIndex=2, maxFailedIndexes=0))
    first = k8s_api.wait_for(lambda: [p for p in pods_of(core, ns, "train-0-")
                                      if p.status.phase == "Running"], message="a running pod")[0]
    core.delete_namespaced_pod(first.metadata.name, ns)
    seen_together, terminating = False, 0
    deadline = time.monotonic() + 10
    while True:
        pods = pods_of(core, ns, "train-0-")
        names = {p.metadata.name for p in pods}
        seen_together |= len(names) > 1
        terminating = max(terminating, batch.read_namespaced_job("train", ns).status.terminating
                          or 0)
        if first.metadata.name not in names and len(names) == 1:
            break
        assert time.monotonic() < deadline, pods
        time.sleep(0.02)
    assert seen_together == overlap
    assert terminating == 1
    job = batch.read_namespaced_job("train", ns)
    assert job.status.failed == 1  # the deleted pod counts as a failure of its index


def test_a_failed_index_is_retried_after_a_back_off(k8s_api, core, batch, ns):
    k8s_api.settings.job_backoff_seconds = 1.0
    k8s_api.controller.script_pods("train-*", exit_code=1)
    batch.create_namespaced_job(ns, job_body("train", completions=1, backoffLimitPerIndex=3,
                                             maxFailedIndexes=0))
    k8s_api.wait_for(lambda: batch.read_namespaced_job("train", ns).status.failed == 1,
                     message="the first failure")
    failed_at = time.monotonic()
    k8s_api.wait_for(lambda: len(pods_of(core, ns, "train-0-")) == 2, timeout=5,
                     message="the retry")
    waited = time.monotonic() - failed_at
    assert 0.8 <= waited < 2.5, waited
    retry = max(pods_of(core, ns, "train-0-"), key=lambda p: p.metadata.creation_timestamp)
    assert retry.metadata.annotations["batch.kubernetes.io/job-index-failure-count"] == "1"


# --- claims and volumes ------------------------------------------------------------------------

def volume_body(name: str, size: str = "1Gi", storage_class: str | None = None) -> dict:
    spec = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": f"/srv/{name}"}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": spec}


def claim_body(name: str, size: str = "500Mi", storage_class: str | None = None) -> dict:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": spec}


def with_claim(name: str, claim: str) -> dict:
    return pod_body(name, volumes=[{"name": "data",
                                    "persistentVolumeClaim": {"claimName": claim}}])


def test_a_pod_waits_for_its_claim_to_exist_and_be_bound(k8s_api, core, ns):
    core.create_namespaced_pod(ns, with_claim("reader", "data"))
    event = k8s_api.wait_for(lambda: k8s_api.events(ns, involved_name="reader",
                                                    reason="FailedScheduling"),
                             message="FailedScheduling")[0]
    assert event["message"] == ('0/3 nodes are available: persistentvolumeclaim "data" not '
                                'found. preemption: 0/3 nodes are available: 3 Preemption is '
                                'not helpful for scheduling.')
    pod = core.read_namespaced_pod("reader", ns)
    assert (pod.status.phase, condition(pod, "PodScheduled").reason) == \
        ("Pending", "Unschedulable")

    core.create_namespaced_persistent_volume_claim(ns, claim_body("data"))  # no volume yet
    k8s_api.wait_for(lambda: "unbound immediate PersistentVolumeClaims" in (
        condition(core.read_namespaced_pod("reader", ns), "PodScheduled").message or ""),
        message="the unbound claim's message")
    assert core.read_namespaced_persistent_volume_claim("data", ns).status.phase == "Pending"

    k8s_api.controller.pause()  # three volumes at once: the binder picks the smallest fit
    core.create_persistent_volume(volume_body("small", "100Mi"))  # too small
    core.create_persistent_volume(volume_body("big", "10Gi"))
    core.create_persistent_volume(volume_body("right", "1Gi"))
    k8s_api.controller.resume()
    k8s_api.wait_for(lambda: core.read_namespaced_pod("reader", ns).status.phase == "Running",
                     message="the pod running")
    claim = core.read_namespaced_persistent_volume_claim("data", ns)
    assert (claim.status.phase, claim.spec.volume_name, claim.status.capacity) == \
        ("Bound", "right", {"storage": "1Gi"})
    volume = core.read_persistent_volume("right")
    assert (volume.status.phase, volume.spec.claim_ref.name, volume.spec.claim_ref.namespace) \
        == ("Bound", "data", ns)
    assert core.read_persistent_volume("small").status.phase == "Available"


def test_a_claim_of_a_storage_class_nobody_provides_stays_pending(k8s_api, core, ns):
    core.create_persistent_volume(volume_body("plain"))
    core.create_namespaced_persistent_volume_claim(ns, claim_body("fast", storage_class="fast"))
    event = k8s_api.wait_for(lambda: k8s_api.events(ns, involved_name="fast"),
                             message="the binder's event")[0]
    assert (event["reason"], event["message"]) == (
        "ProvisioningFailed", 'storageclass.storage.k8s.io "fast" not found')
    assert core.read_namespaced_persistent_volume_claim("fast", ns).status.phase == "Pending"
    assert core.read_persistent_volume("plain").status.phase == "Available"


# --- the default ServiceAccount ------------------------------------------------------------------

def test_pods_wait_for_the_namespaces_default_service_account(k8s_api, core, batch):
    k8s_api.settings.service_account_delay_seconds = 1.0
    core.create_namespace({"metadata": {"name": "fresh"}})
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod("fresh", pod_body("early"))
    assert refused.value.status == 403
    assert status_of(refused.value)["message"] == (
        'pods "early" is forbidden: error looking up service account fresh/default: '
        'serviceaccount "default" not found')
    batch.create_namespaced_job("fresh", job_body("train", completions=1))
    event = k8s_api.wait_for(lambda: k8s_api.events("fresh", involved_name="train",
                                                    reason="FailedCreate"),
                             message="the Job's FailedCreate")[0]
    assert "error looking up service account fresh/default" in event["message"]
    k8s_api.wait_for(lambda: pods_of(core, "fresh", "train-"), timeout=5,
                     message="the Job's pod, once the account exists")
    assert core.read_namespaced_service_account("default", "fresh").metadata.name == "default"
    core.create_namespaced_pod("fresh", pod_body("later"))


# --- disruptions -------------------------------------------------------------------------------

def test_an_evicted_pod_is_marked_and_deleted_gracefully(k8s_api, core, ns):
    k8s_api.settings.pod_termination_seconds = 0.5
    core.create_namespaced_pod(ns, pod_body("victim"))
    k8s_api.wait_for(lambda: core.read_namespaced_pod("victim", ns).status.phase == "Running")
    core.create_namespaced_pod_eviction("victim", ns, {"metadata": {"name": "victim",
                                                                    "namespace": ns}})
    pod = core.read_namespaced_pod("victim", ns)
    target = condition(pod, "DisruptionTarget")
    assert (target.status, target.reason) == ("True", "EvictionByEvictionAPI")
    assert pod.metadata.deletion_timestamp is not None
    k8s_api.wait_for(lambda: not pods_of(core, ns, "victim"), message="the pod gone")


def test_a_lost_nodes_pods_stay_terminating_until_force_deleted(k8s_api, core, ns):
    for i in range(3):
        core.create_namespaced_pod(ns, pod_body(f"p{i}"))
    k8s_api.wait_for(lambda: all(p.status.phase == "Running" for p in pods_of(core, ns, "p"))
                     and len(pods_of(core, ns, "p")) == 3)
    lost = core.read_namespaced_pod("p1", ns).spec.node_name
    k8s_api.controller.lose_node(lost)
    time.sleep(0.5)
    stranded = [p for p in pods_of(core, ns, "p") if p.spec.node_name == lost]
    assert stranded and all(p.metadata.deletion_timestamp for p in stranded)
    assert all(condition(p, "DisruptionTarget").reason == "DeletionByTaintManager"
               for p in stranded)
    others = [p for p in pods_of(core, ns, "p") if p.spec.node_name != lost]
    assert all(p.metadata.deletion_timestamp is None for p in others)
    core.create_namespaced_pod(ns, pod_body("newcomer"))
    k8s_api.wait_for(lambda: core.read_namespaced_pod("newcomer", ns).spec.node_name)
    assert core.read_namespaced_pod("newcomer", ns).spec.node_name != lost
    for pod in stranded:
        core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    assert not [p for p in pods_of(core, ns, "p") if p.spec.node_name == lost]


# --- init containers ---------------------------------------------------------------------------

def test_init_containers_keep_the_pod_pending(k8s_api, core, ns):
    k8s_api.settings.pod_start_seconds = 1.0
    body = pod_body("initialized")
    body["spec"]["initContainers"] = [{"name": "setup", "image": "busybox:1.36"}]
    core.create_namespaced_pod(ns, body)
    pod = k8s_api.wait_for(lambda: (p := core.read_namespaced_pod("initialized", ns))
                           .spec.node_name and p)
    assert pod.status.phase == "Pending"
    initialized = condition(pod, "Initialized")
    assert (initialized.status, initialized.reason) == ("False", "ContainersNotInitialized")
    assert pod.status.container_statuses[0].state.waiting.reason == "PodInitializing"
    row = core.api_client.call_api(*core.api_client.param_serialize(
        "GET", f"/api/v1/namespaces/{ns}/pods/initialized", auth_settings=["BearerToken"],
        header_params={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"}))
    row.read()
    assert '"Init:0/1"' in row.data.decode()
    k8s_api.wait_for(lambda: core.read_namespaced_pod("initialized", ns).status.phase ==
                     "Running", timeout=5)
