"""Everything the fake stores, including what its controllers write (status, events, pods),
must itself be valid against the real schemas: a backend tested here meets real objects."""

from __future__ import annotations

import kubernetes_validate

from tests.k8s_api_server import resources

from .helpers import condition, job_body, pod_body, statefulset_body


def test_every_stored_object_is_schema_valid(k8s_api, core, apps, batch, ns):
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "q"},
                                               "spec": {"hard": {"pods": "20"}}})
    core.create_namespaced_service(ns, {"metadata": {"name": "ps"}, "spec": {
        "clusterIP": "None", "selector": {"app": "ps"}, "ports": [{"port": 7164}]}})
    apps.create_namespaced_stateful_set(ns, statefulset_body("ps", replicas=2))
    k8s_api.controller.script_pods("train-*", lines=["done"], exit_code=0)
    batch.create_namespaced_job(ns, job_body("train", completions=2))
    k8s_api.controller.hold_pods("stuck", reason="ErrImagePull")
    core.create_namespaced_pod(ns, pod_body("stuck"))
    k8s_api.wait_for(lambda: condition(batch.read_namespaced_job("train", ns), "Complete"),
                     message="the job complete")
    k8s_api.wait_for(lambda: apps.read_namespaced_stateful_set("ps", ns).status.ready_replicas
                     == 2, message="the replicas ready")
    checked = 0
    for rt in resources.ALL:
        for obj in k8s_api.store.list(rt.key):
            kubernetes_validate.validate(obj, "1.31", strict=True)
            checked += 1
    assert checked > 30


def test_an_idle_cluster_writes_nothing(k8s_api, core, apps, batch, ns):
    """Controllers write only on change: watchers see no spurious MODIFIED events."""
    apps.create_namespaced_stateful_set(ns, statefulset_body("ps", replicas=2))
    batch.create_namespaced_job(ns, job_body("train", completions=2))
    k8s_api.controller.hold_pods("held", reason="Unschedulable")
    core.create_namespaced_pod(ns, pod_body("held"))
    k8s_api.wait_for(lambda: batch.read_namespaced_job("train", ns).status.ready == 2 and
                     apps.read_namespaced_stateful_set("ps", ns).status.ready_replicas == 2,
                     message="everything running")
    for _ in range(3):
        k8s_api.controller.sync()  # let the last status updates land
    settled = k8s_api.store.rv
    for _ in range(10):
        k8s_api.controller.sync()
    assert k8s_api.store.rv == settled
