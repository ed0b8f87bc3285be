"""The StatefulSet controller: ordinal pods with stable names, recreation of deleted and
failed pods, in-place restarts, scaling and rolling updates."""

from __future__ import annotations

from .helpers import statefulset_body


def _pods(core, ns: str, app: str):
    return sorted(core.list_namespaced_pod(ns, label_selector=f"app={app}").items,
                  key=lambda p: p.metadata.name)


def _ready(apps, ns: str, name: str, replicas: int):
    sts = apps.read_namespaced_stateful_set(name, ns)
    return sts if sts.status.ready_replicas == replicas == sts.status.replicas else None


def test_pods_are_created_in_order_with_stable_identities(k8s_api, core, apps, ns):
    sts = apps.create_namespaced_stateful_set(ns, statefulset_body("ps", replicas=3))
    ready = k8s_api.wait_for(lambda: _ready(apps, ns, "ps", 3), message="3 ready replicas")
    assert ready.status.available_replicas == 3
    assert ready.status.current_revision == ready.status.update_revision
    pods = _pods(core, ns, "ps")
    assert [p.metadata.name for p in pods] == ["ps-0", "ps-1", "ps-2"]
    for ordinal, pod in enumerate(pods):
        labels = pod.metadata.labels
        assert labels["statefulset.kubernetes.io/pod-name"] == f"ps-{ordinal}"
        assert labels["apps.kubernetes.io/pod-index"] == str(ordinal)
        assert labels["controller-revision-hash"] == ready.status.update_revision
        assert (pod.spec.hostname, pod.spec.subdomain) == (f"ps-{ordinal}", "ps")
        assert pod.metadata.owner_references[0].uid == sts.metadata.uid
    created = [e["message"] for e in sorted(
        k8s_api.events(ns, involved_name="ps", reason="SuccessfulCreate"),
        key=lambda e: e["metadata"]["name"])]
    assert created == [f"create Pod ps-{i} in StatefulSet ps successful" for i in range(3)]


def test_deleted_and_failed_pods_come_back_under_the_same_name(k8s_api, core, apps, ns):
    apps.create_namespaced_stateful_set(ns, statefulset_body("ps", replicas=2))
    k8s_api.wait_for(lambda: _ready(apps, ns, "ps", 2), message="2 ready replicas")
    first = {p.metadata.name: p.metadata.uid for p in _pods(core, ns, "ps")}
    core.delete_namespaced_pod("ps-0", ns)
    k8s_api.controller.set_pod_phase(ns, "ps-1", "Failed", reason="Evicted",
                                     message="The node was low on resource: memory.")
    def replaced() -> dict | None:
        pods = {p.metadata.name: p for p in _pods(core, ns, "ps")}
        fresh = set(pods) == {"ps-0", "ps-1"} and all(
            p.metadata.uid != first[n] and p.status.phase == "Running" for n, p in pods.items())
        return pods if fresh else None

    k8s_api.wait_for(replaced, message="both pods replaced and running")
    assert k8s_api.events(ns, involved_name="ps", reason="RecreatingFailedPod")


def test_a_container_exit_restarts_it_in_place(k8s_api, core, apps, ns):
    apps.create_namespaced_stateful_set(ns, statefulset_body("ps", replicas=1))
    k8s_api.wait_for(lambda: _ready(apps, ns, "ps", 1), message="a ready replica")
    uid = core.read_namespaced_pod("ps-0", ns).metadata.uid
    k8s_api.controller.terminate_container(ns, "ps-0", exit_code=137, reason="OOMKilled")
    backing_off = core.read_namespaced_pod("ps-0", ns).status.container_statuses[0]
    assert backing_off.state.waiting.reason == "CrashLoopBackOff"
    assert backing_off.last_state.terminated.reason == "OOMKilled"
    restarted = k8s_api.wait_for(lambda: core.read_namespaced_pod("ps-0", ns).status
                                 .container_statuses[0].state.running and
                                 core.read_namespaced_pod("ps-0", ns), message="restarted")
    status = restarted.status.container_statuses[0]
    assert (restarted.metadata.uid, status.restart_count) == (uid, 1)
    assert status.last_state.terminated.exit_code == 137


def test_scaling_down_removes_the_highest_ordinals(k8s_api, core, apps, ns):
    apps.create_namespaced_stateful_set(ns, statefulset_body("ps", replicas=3,
                                                             podManagementPolicy="Parallel"))
    k8s_api.wait_for(lambda: _ready(apps, ns, "ps", 3), message="3 ready replicas")
    apps.patch_namespaced_stateful_set("ps", ns, {"spec": {"replicas": 1}})
    k8s_api.wait_for(lambda: [p.metadata.name for p in _pods(core, ns, "ps")] == ["ps-0"],
                     message="only ps-0 left")


def test_a_template_change_rolls_the_pods(k8s_api, core, apps, ns):
    apps.create_namespaced_stateful_set(ns, statefulset_body("ps", replicas=2))
    old = k8s_api.wait_for(lambda: _ready(apps, ns, "ps", 2), message="2 ready replicas")
    apps.patch_namespaced_stateful_set("ps", ns, {"spec": {"template": {"spec": {
        "containers": [{"name": "pserver", "image": "paddle:2.7"}]}}}})
    def rolled():
        sts = _ready(apps, ns, "ps", 2)
        done = sts and sts.status.observed_generation == sts.metadata.generation and \
            sts.status.updated_replicas == 2 and \
            sts.status.current_revision == sts.status.update_revision != \
            old.status.update_revision
        return sts if done else None

    k8s_api.wait_for(rolled, message="all pods on the new revision")
    assert {p.spec.containers[0].image for p in _pods(core, ns, "ps")} == {"paddle:2.7"}


def test_quota_refusals_are_failed_create_events(k8s_api, core, apps, ns):
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "pods"},
                                               "spec": {"hard": {"pods": "1"}}})
    apps.create_namespaced_stateful_set(ns, statefulset_body("ps", replicas=2))
    event = k8s_api.wait_for(lambda: k8s_api.events(ns, involved_name="ps",
                                                    reason="FailedCreate"))[0]
    assert (event["type"], event["message"]) == (
        "Warning", 'create Pod ps-1 in StatefulSet ps failed error: pods "ps-1" is forbidden: '
                   'exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1')
    assert [p.metadata.name for p in _pods(core, ns, "ps")] == ["ps-0"]
