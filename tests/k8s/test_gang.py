"""Gang scheduling in the fake cluster: Kueue's and Volcano's CRDs served from the real
definitions (tests/k8s_api_server/crds/), Kueue admitting Jobs and StatefulSets within a
ClusterQueue's quota, Volcano binding a PodGroup's pods all at once or not at all."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.k8s_api_server import crds

from .helpers import condition, job_body, pod_body, statefulset_body, status_of

KUEUE, VOLCANO = "kueue.x-k8s.io", "scheduling.volcano.sh"
V1BETA1 = "v1beta1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GATE = "kueue.x-k8s.io/admission"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@pytest.fixture
def custom(api_client):
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def kueue(k8s_api):
    return k8s_api.install("kueue")


@pytest.fixture
def volcano(k8s_api):
    return k8s_api.install("volcano")


# --- bodies -----------------------------------------------------------------------------------

def flavor(name: str = "default") -> dict:
    return {"apiVersion": f"{KUEUE}/{V1BETA1}", "kind": "ResourceFlavor",
            "metadata": {"name": name}}


def cluster_queue(name: str = "gpus", *, gpus: int = 2, strategy: str = "BestEffortFIFO",
                  resources: tuple = ("nvidia.com/gpu",)) -> dict:
    quota = {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": gpus}
    return {"apiVersion": f"{KUEUE}/{V1BETA1}", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "queueingStrategy": strategy,
                     "resourceGroups": [{
                         "coveredResources": list(resources),
                         "flavors": [{"name": "default", "resources": [
                             {"name": r, "nominalQuota": quota[r]} for r in resources]}]}]}}


def local_queue(cluster: str = "gpus", name: str = "paddlecloud") -> dict:
    return {"apiVersion": f"{KUEUE}/{V1BETA1}", "kind": "LocalQueue",
            "metadata": {"name": name}, "spec": {"clusterQueue": cluster}}


def queued_job(name: str, *, pods: int = 2, gpus_per_pod: int = 1, queue: str = "paddlecloud",
               suspend: bool | None = True) -> dict:
    """The portal's trainers: an Indexed Job, suspended, in the namespace's LocalQueue."""
    body = job_body(name, completions=pods)
    body["metadata"]["labels"] = {QUEUE_LABEL: queue}
    if suspend is not None:
        body["spec"]["suspend"] = suspend
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": str(gpus_per_pod)}}
    return body


def pod_group(name: str = "train", *, min_member: int = 3, queue: str | None = None,
              **spec) -> dict:
    body = {"apiVersion": f"{VOLCANO}/{V1BETA1}", "kind": "PodGroup",
            "metadata": {"name": name}, "spec": {"minMember": min_member, **spec}}
    if queue is not None:
        body["spec"]["queue"] = queue
    return body


def gang_pod(name: str, group: str = "train") -> dict:
    body = pod_body(name, schedulerName="volcano", restartPolicy="Never")
    body["metadata"]["annotations"] = {GROUP_ANNOTATION: group}
    return body


def setup_kueue(custom, ns: str, **queue) -> None:
    custom.create_cluster_custom_object(KUEUE, V1BETA1, "resourceflavors", flavor())
    custom.create_cluster_custom_object(KUEUE, V1BETA1, "clusterqueues", cluster_queue(**queue))
    custom.create_namespaced_custom_object(KUEUE, V1BETA1, ns, "localqueues", local_queue())


def workload_of(k8s_api, ns: str, owner: str) -> dict | None:
    return next((w for w in k8s_api.store.list("workloads.kueue.x-k8s.io", ns)
                 if w["metadata"]["ownerReferences"][0]["name"] == owner), None)


def reserved(k8s_api, ns: str, owner: str) -> dict | None:
    """The owner's Workload's QuotaReserved condition, once it has one."""
    workload = workload_of(k8s_api, ns, owner)
    return next((c for c in ((workload or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == "QuotaReserved"), None)


def running(core, ns: str, prefix: str) -> list:
    return [p for p in core.list_namespaced_pod(ns).items
            if p.metadata.name.startswith(prefix) and p.status.phase == "Running"]


def pending_workloads(raw, ns: str, queue: str = "paddlecloud", **query) -> dict:
    return raw("GET", f"/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/{ns}/localqueues/"
                      f"{queue}/pendingworkloads", query=list(query.items()))


def assert_custom_objects_valid(k8s_api) -> None:
    """What the fake's Kueue and Volcano wrote is valid against the real CRDs."""
    checked = 0
    for rt in k8s_api.api.types:
        if isinstance(rt, crds.CustomType):
            for obj in k8s_api.store.list(rt.key):
                assert crds.problems(obj) == [], obj["metadata"]["name"]
                checked += 1
    assert checked


# --- serving custom resources ---------------------------------------------------------------

def test_custom_resources_are_served_only_once_installed(k8s_api, raw, custom, ns):
    with pytest.raises(ApiException) as refused:
        custom.list_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups")
    assert refused.value.status == 404
    assert KUEUE not in [g["name"] for g in raw("GET", "/apis")["groups"]]
    k8s_api.install("kueue", "volcano", controllers=False)
    groups = {g["name"]: g for g in raw("GET", "/apis")["groups"]}
    assert groups[VOLCANO]["preferredVersion"]["groupVersion"] == f"{VOLCANO}/v1beta1"
    listing = raw("GET", f"/apis/{KUEUE}/v1beta1")
    found = {r["name"]: r for r in listing["resources"]}
    assert set(found) >= {"localqueues", "localqueues/status", "clusterqueues", "workloads",
                          "resourceflavors"}
    assert "resourceflavors/status" not in found  # the CRD has no status subresource
    assert found["clusterqueues"]["namespaced"] is False
    assert found["localqueues"]["shortNames"] == ["queue", "queues", "lq"]
    volcano = {r["name"]: r for r in raw("GET", f"/apis/{VOLCANO}/v1beta1")["resources"]}
    assert volcano["podgroups"]["kind"] == "PodGroup" and "podgroups/status" not in volcano


def test_custom_objects_through_the_official_client(k8s_api, custom, ns):
    k8s_api.install("volcano", controllers=False)
    created = custom.create_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups",
                                                     pod_group("train", min_member=2))
    assert created["spec"] == {"minMember": 2, "queue": "default"}  # the schema's default
    assert created["metadata"]["generation"] == 1 and created["metadata"]["uid"]
    read = custom.get_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", "train")
    assert read["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    patched = custom.patch_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", "train",
                                                    {"spec": {"minMember": 3}})
    assert patched["spec"]["minMember"] == 3 and patched["metadata"]["generation"] == 2
    listed = custom.list_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups")
    assert listed["kind"] == "PodGroupList" and [i["metadata"]["name"] for i in
                                                 listed["items"]] == ["train"]
    queue = custom.create_cluster_custom_object(VOLCANO, V1BETA1, "queues", {
        "apiVersion": f"{VOLCANO}/{V1BETA1}", "kind": "Queue", "metadata": {"name": "team"},
        "spec": {"capability": {"nvidia.com/gpu": 4}}})
    assert queue["spec"]["weight"] == 1 and "namespace" not in queue["metadata"]
    gone = custom.delete_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", "train")
    assert gone["status"] == "Success" and gone["details"]["group"] == VOLCANO
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", "train")
    assert status_of(missing.value)["message"] == \
        'podgroups.scheduling.volcano.sh "train" not found'


@pytest.mark.parametrize(("body", "code", "message"), [
    (pod_group(minMembers=3), 400,
     'PodGroup in version "v1beta1" cannot be handled as a PodGroup: strict decoding error: '
     'unknown field "spec.minMembers"'),
    (pod_group(min_member=-1), 422,
     'PodGroup.scheduling.volcano.sh "train" is invalid: spec.minMember: Invalid value: -1: '
     'spec.minMember in body should be greater than or equal to 0'),
    (pod_group(min_member="3"), 422,
     'PodGroup.scheduling.volcano.sh "train" is invalid: [spec.minMember: Invalid value: '
     '"string": spec.minMember in body must be of type integer: "string", <nil>: Invalid '
     'value: "null": some validation rules were not checked because the object was invalid; '
     'correct the existing errors to complete validation]'),
    (pod_group(queue="Team_A"), 422,
     'PodGroup.scheduling.volcano.sh "train" is invalid: spec.queue: Invalid value: "Team_A": '
     "spec.queue in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
     "[a-z0-9])?)*$'"),
    (pod_group(networkTopology={"mode": "strict"}), 422,
     'PodGroup.scheduling.volcano.sh "train" is invalid: spec.networkTopology.mode: '
     'Unsupported value: "strict": supported values: "hard", "soft"'),
])
def test_invalid_custom_objects_are_refused_with_the_servers_messages(k8s_api, custom, ns,
                                                                      body, code, message):
    k8s_api.install("volcano", controllers=False)
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", body)
    assert refused.value.status == code
    assert status_of(refused.value)["message"] == message
    assert crds.problems(body)  # the same refusal without a server


def test_crd_validation_rules_and_requirements(k8s_api, custom, raw, ns):
    k8s_api.install("kueue", controllers=False)
    custom.create_namespaced_custom_object(KUEUE, V1BETA1, ns, "localqueues", local_queue("a"))
    with pytest.raises(ApiException) as immutable:
        custom.patch_namespaced_custom_object(KUEUE, V1BETA1, ns, "localqueues", "paddlecloud",
                                              {"spec": {"clusterQueue": "b"}})
    assert status_of(immutable.value)["message"] == (
        'LocalQueue.kueue.x-k8s.io "paddlecloud" is invalid: spec.clusterQueue: Invalid value: '
        '"string": field is immutable')
    bad_queue = cluster_queue(gpus=2)
    bad_queue["spec"]["resourceGroups"][0]["coveredResources"].append("cpu")
    with pytest.raises(ApiException) as rule:
        custom.create_cluster_custom_object(KUEUE, V1BETA1, "clusterqueues", bad_queue)
    assert status_of(rule.value)["message"] == (
        'ClusterQueue.kueue.x-k8s.io "gpus" is invalid: spec.resourceGroups[0]: Invalid value: '
        '"object": flavors must have the same number of resources as the coveredResources')
    with pytest.raises(ApiException) as required:
        custom.create_namespaced_custom_object(KUEUE, V1BETA1, ns, "workloads", {
            "apiVersion": f"{KUEUE}/{V1BETA1}", "kind": "Workload", "metadata": {"name": "w"},
            "spec": {"queueName": "paddlecloud"}})
    assert status_of(required.value)["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.podSets"}]
    with pytest.raises(ApiException) as strategic:  # custom resources have no patch strategy
        raw("PATCH", f"/apis/{KUEUE}/v1beta1/namespaces/{ns}/localqueues/paddlecloud",
            {"metadata": {"labels": {"a": "b"}}},
            content_type="application/strategic-merge-patch+json")
    assert strategic.value.status == 415


def test_problems_checks_an_object_without_a_server():
    assert crds.problems(pod_group(min_member=2, minResources={"cpu": "4", "memory": "8Gi",
                                                               "nvidia.com/gpu": 2})) == []
    assert crds.problems(pod_group(minResources={"cpu": "four"}))[0].startswith(
        "spec.minResources.cpu: Invalid value: \"four\": spec.minResources.cpu in body should "
        "match '^(\\+|-)?")
    queue = {**local_queue("a"), "metadata": {"name": "paddlecloud", "namespace": "n"}}
    assert crds.problems(queue) == []
    assert crds.problems(queue, old={**queue, "spec": {"clusterQueue": "b"}}) == [
        'spec.clusterQueue: Invalid value: "string": field is immutable']
    assert crds.problems({**queue, "spec": {"clusterQueue": "a", "cohort": "x"}}) == [
        'unknown field "spec.cohort"']
    assert crds.defaulted(cluster_queue())["spec"]["queueingStrategy"] == "BestEffortFIFO"


def test_unknown_fields_are_dropped_with_a_warning_when_asked(k8s_api, raw, ns):
    k8s_api.install("kueue", controllers=False)
    created = raw("POST", f"/apis/{KUEUE}/v1beta1/namespaces/{ns}/localqueues",
                  {**local_queue(), "spec": {"clusterQueue": "gpus", "cohort": "x"}},
                  query=[("fieldValidation", "Warn")])
    assert created["spec"] == {"clusterQueue": "gpus", "stopPolicy": "None"}
    assert raw.headers["Warning"] == ('299 - "This version is deprecated. Use v1beta2 instead.", '
                                      '299 - "unknown field \\"spec.cohort\\""')


def test_the_portals_rules_cover_custom_groups(k8s_api, custom, ns):
    k8s_api.install("kueue", "volcano", controllers=False)
    k8s_api.settings.portal_rules = [
        {"apiGroups": [KUEUE], "resources": ["localqueues"], "verbs": ["create", "get"]},
        {"apiGroups": [VOLCANO], "resources": ["*"], "verbs": ["*"]}]
    with config.new_client_from_config(config_file=str(k8s_api.portal_kubeconfig_path)) as api:
        portal = client.CustomObjectsApi(api)
        portal.create_namespaced_custom_object(KUEUE, V1BETA1, ns, "localqueues", local_queue())
        portal.create_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", pod_group())
        with pytest.raises(ApiException) as forbidden:
            portal.delete_namespaced_custom_object(KUEUE, V1BETA1, ns, "localqueues",
                                                   "paddlecloud")
    assert status_of(forbidden.value)["message"] == (
        'localqueues.kueue.x-k8s.io "paddlecloud" is forbidden: User '
        '"system:serviceaccount:paddlecloud:paddlecloud" cannot delete resource "localqueues" '
        f'in API group "{KUEUE}" in the namespace "{ns}"')


def _kubectl(k8s_api, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([KUBECTL, "--kubeconfig", str(k8s_api.kubeconfig_path), *args],
                            capture_output=True, text=True, timeout=30, check=False)
    assert (result.returncode == 0) == ok, result.stderr
    return result


@needs_kubectl
def test_kubectl_applies_lists_and_deletes_custom_resources(k8s_api, ns, tmp_path):
    k8s_api.install("kueue", "volcano", controllers=False)
    manifest = tmp_path / "group.yaml"
    manifest.write_text(yaml.safe_dump(pod_group("train", min_member=3, minMember_typo=1)))
    refused = _kubectl(k8s_api, "apply", "-n", ns, "-f", str(manifest), ok=False)
    assert 'strict decoding error: unknown field "spec.minMember_typo"' in refused.stderr
    manifest.write_text(yaml.safe_dump(pod_group("train", min_member=3)))
    assert "podgroup.scheduling.volcano.sh/train created" in _kubectl(
        k8s_api, "apply", "-n", ns, "-f", str(manifest)).stdout
    manifest.write_text(yaml.safe_dump(pod_group("train", min_member=4)))
    assert "podgroup.scheduling.volcano.sh/train configured" in _kubectl(
        k8s_api, "apply", "-n", ns, "-f", str(manifest)).stdout
    table = _kubectl(k8s_api, "get", "pg", "-n", ns).stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "MINMEMBER", "RUNNINGS", "AGE"]
    assert table[1].split()[:2] == ["train", "4"]  # no status yet: blank cells
    wide = _kubectl(k8s_api, "get", "podgroups", "-n", ns, "-o", "wide").stdout
    assert wide.splitlines()[1].split()[-1] == "default"  # the QUEUE column (priority 1)
    as_json = json.loads(_kubectl(k8s_api, "get", "podgroup", "train", "-n", ns, "-o",
                                  "json").stdout)
    assert as_json["spec"] == {"minMember": 4, "queue": "default"}
    listed = _kubectl(k8s_api, "get", "clusterqueues")
    assert "Warning: This version is deprecated. Use v1beta2 instead." in listed.stderr
    assert "podgroup.scheduling.volcano.sh \"train\" deleted" in _kubectl(
        k8s_api, "delete", "podgroup", "train", "-n", ns).stdout


# --- scheduling gates -------------------------------------------------------------------------

def test_a_gated_pod_is_not_scheduled_until_its_gates_are_gone(k8s_api, core, ns):
    body = pod_body("gated", schedulingGates=[{"name": "example.com/wait"}])
    created = core.create_namespaced_pod(ns, body)
    assert (condition(created, "PodScheduled").reason,
            condition(created, "PodScheduled").message) == (
        "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")
    for _ in range(3):
        k8s_api.controller.sync()
    assert core.read_namespaced_pod("gated", ns).spec.node_name is None
    with pytest.raises(ApiException) as added:
        core.patch_namespaced_pod("gated", ns, {"spec": {"schedulingGates": [
            {"name": "example.com/wait"}, {"name": "example.com/more"}]}})
    assert status_of(added.value)["message"] == (
        'Pod "gated" is invalid: spec.schedulingGates: Forbidden: only deletion is allowed, '
        "but found new scheduling gate 'example.com/more'")
    core.patch_namespaced_pod("gated", ns, {"spec": {"schedulingGates": None}})
    k8s_api.wait_for(lambda: core.read_namespaced_pod("gated", ns).status.phase == "Running",
                     message="the ungated pod running")


# --- Kueue ------------------------------------------------------------------------------------

def test_kueue_admits_jobs_within_the_cluster_queues_quota(k8s_api, kueue, core, batch, custom,
                                                           raw, ns):
    setup_kueue(custom, ns, gpus=2)
    batch.create_namespaced_job(ns, queued_job("first"))
    k8s_api.wait_for(lambda: len(running(core, ns, "first-")) == 2, message="first's pods")
    batch.create_namespaced_job(ns, queued_job("second"))
    k8s_api.wait_for(lambda: reserved(k8s_api, ns, "second"), message="second's Workload")
    first, second = workload_of(k8s_api, ns, "first"), workload_of(k8s_api, ns, "second")
    job = batch.read_namespaced_job("first", ns)
    assert re.fullmatch(r"job-first-[0-9a-f]{5}", first["metadata"]["name"])
    assert first["metadata"]["labels"] == {"kueue.x-k8s.io/job-uid": job.metadata.uid}
    assert first["metadata"]["ownerReferences"][0]["uid"] == job.metadata.uid
    assert first["spec"]["queueName"] == "paddlecloud"
    assert [(p["name"], p["count"]) for p in first["spec"]["podSets"]] == [("main", 2)]
    assert first["status"]["admission"] == {"clusterQueue": "gpus", "podSetAssignments": [
        {"name": "main", "count": 2, "flavors": {"nvidia.com/gpu": "default"},
         "resourceUsage": {"nvidia.com/gpu": "2"}}]}
    assert {c["type"]: c["status"] for c in first["status"]["conditions"]} == \
        {"QuotaReserved": "True", "Admitted": "True"}
    assert job.spec.suspend is False
    assert reserved(k8s_api, ns, "second")["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor default, 2 more needed")
    assert reserved(k8s_api, ns, "second")["reason"] == "Pending"
    assert batch.read_namespaced_job("second", ns).spec.suspend is True
    assert not [p for p in core.list_namespaced_pod(ns).items
                if p.metadata.name.startswith("second-")]
    summary = pending_workloads(raw, ns)
    assert summary["kind"] == "PendingWorkloadsSummary"
    assert [(i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"],
             i["priority"], i["localQueueName"]) for i in summary["items"]] == [
        (second["metadata"]["name"], 0, 0, 0, "paddlecloud")]
    queue = custom.get_namespaced_custom_object(KUEUE, V1BETA1, ns, "localqueues", "paddlecloud")
    assert (queue["status"]["pendingWorkloads"], queue["status"]["admittedWorkloads"],
            queue["status"]["reservingWorkloads"]) == (1, 1, 1)
    cluster = custom.get_cluster_custom_object(KUEUE, V1BETA1, "clusterqueues", "gpus")
    assert cluster["status"]["flavorsUsage"] == [{"name": "default", "resources": [
        {"name": "nvidia.com/gpu", "total": "2", "borrowed": "0"}]}]
    for pod in running(core, ns, "first-"):
        k8s_api.controller.terminate_container(ns, pod.metadata.name, exit_code=0)
    k8s_api.wait_for(lambda: len(running(core, ns, "second-")) == 2,
                     message="second admitted once first completed")
    finished = workload_of(k8s_api, ns, "first")
    assert {c["type"]: c["reason"] for c in finished["status"]["conditions"]}["Finished"] == \
        "Succeeded"
    assert finished["metadata"].get("finalizers") in (None, [])
    assert pending_workloads(raw, ns)["items"] == []
    assert k8s_api.events(ns, involved_name="first", reason="CreatedWorkload")
    assert_custom_objects_valid(k8s_api)


def test_the_visibility_api_through_the_official_client(k8s_api, kueue, batch, custom, raw,
                                                        ns):
    setup_kueue(custom, ns, gpus=0)
    for name in ("a", "b", "c"):
        batch.create_namespaced_job(ns, queued_job(name))
    k8s_api.wait_for(lambda: all(reserved(k8s_api, ns, n) for n in "abc"), message="pending")
    assert reserved(k8s_api, ns, "a")["message"] == (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor default, previously considered podsets requests (0) + current podset request "
        "(2) > maximum capacity (0)")
    # The client escapes the "/", which the server decodes, as a real one does.
    summary = custom.get_namespaced_custom_object("visibility.kueue.x-k8s.io", "v1beta1", ns,
                                                  "localqueues", "paddlecloud/pendingworkloads")
    owners = [i["metadata"]["ownerReferences"][0]["name"] for i in summary["items"]]
    assert owners == ["a", "b", "c"]
    assert [i["positionInLocalQueue"] for i in summary["items"]] == [0, 1, 2]
    page = pending_workloads(raw, ns, offset=1, limit=1)["items"]
    assert [(i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in page] == [(1, 1)]
    cluster = raw("GET", "/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/gpus/"
                         "pendingworkloads")
    assert [i["positionInClusterQueue"] for i in cluster["items"]] == [0, 1, 2]
    found = {r["name"]: r["verbs"] for r in
             raw("GET", "/apis/visibility.kueue.x-k8s.io/v1beta1")["resources"]}
    assert found["localqueues/pendingworkloads"] == ["get"] and found["localqueues"] == []
    k8s_api.settings.portal_rules = [{"apiGroups": ["visibility.kueue.x-k8s.io"],
                                      "resources": ["localqueues/pendingworkloads"],
                                      "verbs": ["get"]}]
    with config.new_client_from_config(config_file=str(k8s_api.portal_kubeconfig_path)) as api:
        portal = client.CustomObjectsApi(api)
        assert len(portal.get_namespaced_custom_object(
            "visibility.kueue.x-k8s.io", "v1beta1", ns, "localqueues",
            "paddlecloud/pendingworkloads")["items"]) == 3
        with pytest.raises(ApiException) as forbidden:
            portal.list_namespaced_custom_object(KUEUE, V1BETA1, ns, "workloads")
    assert forbidden.value.status == 403


@pytest.mark.parametrize("propagation", ["Background", "Orphan"])
def test_a_deleted_job_gives_its_quota_back(k8s_api, kueue, core, batch, custom, ns,
                                            propagation):
    setup_kueue(custom, ns, gpus=2)
    batch.create_namespaced_job(ns, queued_job("first"))
    k8s_api.wait_for(lambda: len(running(core, ns, "first-")) == 2, message="first's pods")
    first = workload_of(k8s_api, ns, "first")["metadata"]["name"]
    batch.create_namespaced_job(ns, queued_job("second"))
    k8s_api.wait_for(lambda: reserved(k8s_api, ns, "second"), message="second's Workload")
    batch.delete_namespaced_job("first", ns, propagation_policy=propagation)
    k8s_api.wait_for(lambda: len(running(core, ns, "second-")) == 2,
                     message="second admitted once first was deleted")
    left = k8s_api.get("workloads.kueue.x-k8s.io", ns, first)
    if propagation == "Background":  # the garbage collector deletes it with its Job
        assert left is None
    else:  # orphaned: Kueue finishes it
        assert [(c["reason"], c["message"]) for c in left["status"]["conditions"]
                if c["type"] == "Finished"] == [
            ("OwnerNotFound", "The workload's owner no longer exists")]


@pytest.mark.parametrize(("strategy", "third_admitted"), [("BestEffortFIFO", True),
                                                          ("StrictFIFO", False)])
def test_queueing_strategies(k8s_api, kueue, custom, batch, raw, ns, strategy, third_admitted):
    setup_kueue(custom, ns, gpus=3, strategy=strategy)
    batch.create_namespaced_job(ns, queued_job("big", pods=2))
    k8s_api.wait_for(lambda: (reserved(k8s_api, ns, "big") or {}).get("status") == "True",
                     message="big admitted")
    batch.create_namespaced_job(ns, queued_job("blocked", pods=2))
    batch.create_namespaced_job(ns, queued_job("small", pods=1))
    k8s_api.wait_for(lambda: reserved(k8s_api, ns, "blocked"), message="blocked pending")
    for _ in range(3):
        k8s_api.controller.sync()
    assert bool((reserved(k8s_api, ns, "small") or {}).get("status") == "True") == \
        third_admitted
    positions = [(i["metadata"]["ownerReferences"][0]["name"], i["positionInClusterQueue"])
                 for i in pending_workloads(raw, ns)["items"]]
    assert positions == ([("blocked", 0)] if third_admitted else [("blocked", 0), ("small", 1)])


def test_workloads_wait_for_their_queues(k8s_api, kueue, core, batch, custom, raw, ns):
    batch.create_namespaced_job(ns, queued_job("train", suspend=None))
    assert batch.read_namespaced_job("train", ns).spec.suspend is True  # Kueue's webhook
    k8s_api.wait_for(lambda: reserved(k8s_api, ns, "train"), message="a condition")
    assert (reserved(k8s_api, ns, "train")["reason"], reserved(k8s_api, ns, "train")[
        "message"]) == ("Inadmissible", "LocalQueue paddlecloud doesn't exist")
    with pytest.raises(ApiException) as missing:
        pending_workloads(raw, ns)
    assert status_of(missing.value)["message"] == \
        'localqueue.visibility.kueue.x-k8s.io "paddlecloud" not found'
    custom.create_namespaced_custom_object(KUEUE, V1BETA1, ns, "localqueues", local_queue())
    k8s_api.wait_for(lambda: reserved(k8s_api, ns, "train")["message"] ==
                     "ClusterQueue gpus doesn't exist", message="the next blocker")
    queue = custom.get_namespaced_custom_object(KUEUE, V1BETA1, ns, "localqueues", "paddlecloud")
    assert [(c["type"], c["status"], c["reason"]) for c in queue["status"]["conditions"]] == [
        ("Active", "False", "ClusterQueueDoesNotExist")]
    unselective = cluster_queue()
    del unselective["spec"]["namespaceSelector"]  # null: no namespace may use it
    custom.create_cluster_custom_object(KUEUE, V1BETA1, "clusterqueues", unselective)
    k8s_api.wait_for(lambda: reserved(k8s_api, ns, "train")["message"] ==
                     "ClusterQueue gpus is inactive", message="the flavor missing")
    custom.create_cluster_custom_object(KUEUE, V1BETA1, "resourceflavors", flavor())
    k8s_api.wait_for(lambda: reserved(k8s_api, ns, "train")["message"] ==
                     "workload namespace doesn't match ClusterQueue selector",
                     message="the namespace not selected")
    custom.patch_cluster_custom_object(KUEUE, V1BETA1, "clusterqueues", "gpus",
                                       {"spec": {"namespaceSelector": {}}})
    k8s_api.wait_for(lambda: len(running(core, ns, "train-")) == 2, message="train running")


def test_statefulset_pods_are_gated_until_admitted(k8s_api, kueue, core, apps, custom, ns):
    setup_kueue(custom, ns, gpus=1)
    body = statefulset_body("ps", replicas=2, podManagementPolicy="Parallel")
    body["metadata"]["labels"] = {QUEUE_LABEL: "paddlecloud"}
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "1"}}
    sts = apps.create_namespaced_stateful_set(ns, body)
    assert sts.spec.template.metadata.annotations == {
        "kueue.x-k8s.io/pod-suspending-parent": "statefulset"}
    k8s_api.wait_for(lambda: reserved(k8s_api, ns, "ps") and
                     len(core.list_namespaced_pod(ns).items) == 2, message="gated pods")
    workload = workload_of(k8s_api, ns, "ps")
    assert re.fullmatch(r"statefulset-ps-[0-9a-f]{5}", workload["metadata"]["name"])
    assert reserved(k8s_api, ns, "ps")["message"] == (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor default, previously considered podsets requests (0) + current podset request "
        "(2) > maximum capacity (1)")
    k8s_api.wait_for(lambda: all(
        p.metadata.labels.get("kueue.x-k8s.io/pod-group-name") == workload["metadata"]["name"]
        for p in core.list_namespaced_pod(ns).items), message="the pod group labels")
    for pod in core.list_namespaced_pod(ns).items:
        assert [g.name for g in pod.spec.scheduling_gates] == [GATE]
        assert pod.spec.node_name is None
        assert condition(pod, "PodScheduled").reason == "SchedulingGated"
        assert pod.metadata.annotations["kueue.x-k8s.io/pod-group-total-count"] == "2"
    custom.patch_cluster_custom_object(KUEUE, V1BETA1, "clusterqueues", "gpus", {"spec": {
        "resourceGroups": cluster_queue(gpus=2)["spec"]["resourceGroups"]}})
    k8s_api.wait_for(lambda: len(running(core, ns, "ps-")) == 2, message="ungated and running")
    assert all(not p.spec.scheduling_gates for p in core.list_namespaced_pod(ns).items)
    assert_custom_objects_valid(k8s_api)


# --- Volcano ----------------------------------------------------------------------------------

def _group(custom, ns: str, name: str = "train") -> dict:
    return custom.get_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", name)


def _unschedulable(group: dict) -> str | None:
    return next((c["message"] for c in (group.get("status") or {}).get("conditions") or []
                 if c["type"] == "Unschedulable"), None)


def test_volcano_binds_a_gang_only_once_it_is_complete(k8s_api, volcano, core, custom, ns):
    custom.create_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", pod_group())
    for name in ("w-0", "w-1"):
        core.create_namespaced_pod(ns, gang_pod(name))
    # Written as each member comes: wait for the one that has seen both.
    k8s_api.wait_for(lambda: "2 Pending" in (_unschedulable(_group(custom, ns)) or ""),
                     message="the gang condition")
    group = _group(custom, ns)
    assert group["status"]["phase"] == "Inqueue"
    assert _unschedulable(group) == ("3/2 tasks in gang unschedulable: pod group is not ready, "
                                     "2 Pending, 3 minAvailable; Pending: 2 Unschedulable")
    for pod in core.list_namespaced_pod(ns).items:
        assert pod.spec.node_name is None
        assert condition(pod, "PodScheduled").reason == "Unschedulable"
    core.create_namespaced_pod(ns, gang_pod("w-2"))
    k8s_api.wait_for(lambda: len(running(core, ns, "w-")) == 3, message="the gang running")
    k8s_api.wait_for(lambda: _group(custom, ns)["status"].get("running") == 3,
                     message="the PodGroup's count")
    group = _group(custom, ns)
    assert (group["status"]["phase"], group["status"]["succeeded"]) == ("Running", 0)
    assert k8s_api.events(ns, involved_name="w-2", reason="Scheduled")[0]["source"] == {
        "component": "volcano"}
    for pod in running(core, ns, "w-"):
        k8s_api.controller.terminate_container(ns, pod.metadata.name, exit_code=0)
    k8s_api.wait_for(lambda: _group(custom, ns)["status"]["phase"] == "Completed",
                     message="the PodGroup completed")
    assert_custom_objects_valid(k8s_api)


def test_a_held_member_keeps_the_whole_gang_unbound(k8s_api, volcano, core, custom, ns):
    custom.create_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", pod_group())
    k8s_api.controller.hold_pods("w-2", namespace=ns)
    for name in ("w-0", "w-1", "w-2"):
        core.create_namespaced_pod(ns, gang_pod(name))
    k8s_api.wait_for(lambda: _unschedulable(_group(custom, ns)), message="the gang condition")
    for _ in range(3):
        k8s_api.controller.sync()
    assert [p.spec.node_name for p in core.list_namespaced_pod(ns).items] == [None] * 3
    k8s_api.controller.release_pods("w-2", namespace=ns)
    k8s_api.wait_for(lambda: len(running(core, ns, "w-")) == 3, message="the gang running")


def test_a_gang_of_a_job_and_a_statefulset(k8s_api, volcano, core, batch, apps, custom, ns):
    """The portal's shape: trainers (a Job) and pservers (a StatefulSet), one PodGroup."""
    custom.create_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups",
                                           pod_group("job-1", min_member=3))
    trainers = job_body("train", completions=2)
    pservers = statefulset_body("ps", replicas=1, podManagementPolicy="Parallel")
    for body in (trainers, pservers):
        body["spec"]["template"]["spec"]["schedulerName"] = "volcano"
        body["spec"]["template"]["metadata"]["annotations"] = {GROUP_ANNOTATION: "job-1"}
    batch.create_namespaced_job(ns, trainers)
    k8s_api.wait_for(lambda: _unschedulable(_group(custom, ns, "job-1")), message="waiting")
    assert [p.spec.node_name for p in core.list_namespaced_pod(ns).items] == [None, None]
    apps.create_namespaced_stateful_set(ns, pservers)
    k8s_api.wait_for(lambda: len(running(core, ns, "")) == 3, message="all three running")
    assert _group(custom, ns, "job-1")["status"]["phase"] == "Running"


def test_volcano_queues(k8s_api, volcano, core, custom, ns):
    queues = {q["metadata"]["name"]: q for q in
              custom.list_cluster_custom_object(VOLCANO, V1BETA1, "queues")["items"]}
    assert queues["default"]["status"]["state"] == "Open"
    assert queues["default"]["spec"] == {"weight": 1, "reclaimable": True,
                                         "dequeueStrategy": "traverse"}
    with pytest.raises(ApiException) as undeletable:
        custom.delete_cluster_custom_object(VOLCANO, V1BETA1, "queues", "default")
    assert status_of(undeletable.value)["message"] == (
        'admission webhook "validatequeue.volcano.sh" denied the request: `default` queue can '
        "not be deleted")
    with pytest.raises(ApiException) as no_queue:
        custom.create_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups",
                                               pod_group(queue="team"))
    assert no_queue.value.status == 400
    assert status_of(no_queue.value)["message"] == (
        'admission webhook "validatepodgroup.volcano.sh" denied the request: unable to find '
        'queue: queue.scheduling.volcano.sh "team" not found')
    custom.create_cluster_custom_object(VOLCANO, V1BETA1, "queues", {
        "apiVersion": f"{VOLCANO}/{V1BETA1}", "kind": "Queue", "metadata": {"name": "team"}})
    k8s_api.wait_for(lambda: (custom.get_cluster_custom_object(
        VOLCANO, V1BETA1, "queues", "team").get("status") or {}).get("state") == "Open",
        message="the queue open")
    custom.create_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups",
                                           pod_group(queue="team", min_member=1))
    k8s_api.wait_for(lambda: _group(custom, ns).get("status", {}).get("phase") == "Inqueue",
                     message="the PodGroup enqueued")
    custom.patch_cluster_custom_object_status(VOLCANO, V1BETA1, "queues", "team",
                                              {"status": {"state": "Closed"}})
    core.create_namespaced_pod(ns, gang_pod("w-0"))  # a closed queue allocates nothing
    k8s_api.wait_for(lambda: _unschedulable(_group(custom, ns)), message="the gang condition")
    assert core.read_namespaced_pod("w-0", ns).spec.node_name is None
    custom.patch_cluster_custom_object_status(VOLCANO, V1BETA1, "queues", "team",
                                              {"status": {"state": "Open"}})
    k8s_api.wait_for(lambda: len(running(core, ns, "w-")) == 1, message="bound once open")
    team = custom.get_cluster_custom_object(VOLCANO, V1BETA1, "queues", "team")
    assert team["status"]["running"] == 1


def test_volcano_pods_wait_without_volcano_and_alone_get_a_group(k8s_api, core, custom, ns):
    core.create_namespaced_pod(ns, pod_body("lonely", schedulerName="volcano"))
    for _ in range(3):
        k8s_api.controller.sync()
    pod = core.read_namespaced_pod("lonely", ns)
    assert pod.spec.node_name is None and not pod.status.conditions  # nobody schedules it
    k8s_api.install("volcano")
    k8s_api.wait_for(lambda: core.read_namespaced_pod("lonely", ns).status.phase == "Running",
                     message="bound by Volcano")
    pod = core.read_namespaced_pod("lonely", ns)
    group = pod.metadata.annotations[GROUP_ANNOTATION]
    assert group == f"podgroup-{pod.metadata.uid}"
    assert _group(custom, ns, group)["spec"] == {"minMember": 1, "queue": "default"}


def test_an_idle_cluster_with_kueue_and_volcano_writes_nothing(k8s_api, kueue, volcano, core,
                                                               batch, custom, ns):
    """The add-ons' controllers write only on change: watchers see no spurious events."""
    setup_kueue(custom, ns, gpus=2)
    batch.create_namespaced_job(ns, queued_job("first"))
    batch.create_namespaced_job(ns, queued_job("second"))
    custom.create_namespaced_custom_object(VOLCANO, V1BETA1, ns, "podgroups", pod_group())
    for name in ("w-0", "w-1"):
        core.create_namespaced_pod(ns, gang_pod(name))
    k8s_api.wait_for(lambda: len(running(core, ns, "first-")) == 2 and
                     reserved(k8s_api, ns, "second") and _unschedulable(_group(custom, ns)),
                     message="everything settled")
    k8s_api.controller.pause()
    for _ in range(3):
        k8s_api.controller.sync()
    settled = k8s_api.store.rv
    for _ in range(10):
        k8s_api.controller.sync()
    assert k8s_api.store.rv == settled
