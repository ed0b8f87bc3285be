"""Owner references, deletion propagation and namespace deletion, as the garbage collector
and the namespace controller of a real cluster carry them out."""

from __future__ import annotations

import pytest
from kubernetes import client

from .helpers import job_body, pod_body, status_of


def _names(items) -> list[str]:
    return sorted(o.metadata.name for o in items)


def _owned_by(owner) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name,
            "uid": owner.metadata.uid}


def _job_pods(core, ns: str, job: str):
    return core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items


def test_deleting_a_root_cascades_through_three_levels(k8s_api, core, batch, ns):
    root = core.create_namespaced_config_map(ns, {"metadata": {"name": "root"}})
    body = job_body("train")
    body["metadata"]["ownerReferences"] = [_owned_by(root)]
    batch.create_namespaced_job(ns, body)
    k8s_api.wait_for(lambda: len(_job_pods(core, ns, "train")) == 2, message="the job's pods")
    core.delete_namespaced_config_map("root", ns)
    k8s_api.wait_for(lambda: not batch.list_namespaced_job(ns).items, message="job collected")
    k8s_api.wait_for(lambda: not _job_pods(core, ns, "train"), message="pods collected")


def test_foreground_deletion_keeps_the_owner_until_dependents_are_gone(k8s_api, core, batch,
                                                                       ns):
    k8s_api.settings.pod_termination_seconds = 0.3
    batch.create_namespaced_job(ns, job_body("train"))
    k8s_api.wait_for(lambda: all(p.status.phase == "Running"
                                 for p in _job_pods(core, ns, "train") or [None] if p),
                     message="running pods")
    batch.delete_namespaced_job("train", ns, propagation_policy="Foreground")
    held = batch.read_namespaced_job("train", ns)
    assert held.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in held.metadata.finalizers
    k8s_api.wait_for(lambda: not batch.list_namespaced_job(ns).items, message="job gone")
    assert not _job_pods(core, ns, "train")


def test_orphaned_dependents_lose_the_reference_and_stay(k8s_api, core, batch, ns):
    batch.create_namespaced_job(ns, job_body("train"))
    k8s_api.wait_for(lambda: len(_job_pods(core, ns, "train")) == 2)
    batch.delete_namespaced_job("train", ns, propagation_policy="Orphan")
    pods = _job_pods(core, ns, "train")
    assert len(pods) == 2 and all(not p.metadata.owner_references for p in pods)


def test_batch_v1_jobs_orphan_their_pods_by_default(k8s_api, core, batch, ns):
    """A real server keeps a Job's pods unless the delete asks for propagation."""
    batch.create_namespaced_job(ns, job_body("train", completions=1))
    k8s_api.wait_for(lambda: len(_job_pods(core, ns, "train")) == 1)
    batch.delete_namespaced_job("train", ns)
    k8s_api.controller.sync()
    assert len(_job_pods(core, ns, "train")) == 1


def test_a_reference_to_a_missing_owner_among_live_ones_is_dropped(k8s_api, core, ns):
    live = core.create_namespaced_config_map(ns, {"metadata": {"name": "live"}})
    body = pod_body("p")
    body["metadata"]["ownerReferences"] = [
        _owned_by(live), {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone",
                          "uid": "00000000-0000-0000-0000-000000000000"}]
    core.create_namespaced_pod(ns, body)
    k8s_api.wait_for(lambda: len(core.read_namespaced_pod("p", ns).metadata.owner_references)
                     == 1, message="the dangling reference dropped")


def test_deleting_a_namespace_deletes_its_content(k8s_api, core, batch, ns):
    batch.create_namespaced_job(ns, job_body("train"))
    core.create_namespaced_config_map(ns, {"metadata": {"name": "held",
                                                        "finalizers": ["example.com/keep"]}})
    k8s_api.wait_for(lambda: len(_job_pods(core, ns, "train")) == 2)
    core.delete_namespace(ns)
    k8s_api.wait_for(lambda: not batch.list_namespaced_job(ns).items)
    k8s_api.wait_for(lambda: _names(core.list_namespaced_config_map(ns).items) == ["held"])
    assert not core.list_namespaced_pod(ns).items
    assert core.read_namespace(ns).status.phase == "Terminating"
    with pytest.raises(client.ApiException) as error:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "new"}})
    assert (error.value.status, status_of(error.value)["message"]) == (
        403, f'configmaps "new" is forbidden: unable to create new content in namespace {ns} '
             f'because it is being terminated')
    core.patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}})
    k8s_api.wait_for(lambda: ns not in _names(core.list_namespace().items), message="ns gone")


def test_built_in_namespaces_cannot_be_deleted(core):
    with pytest.raises(client.ApiException) as error:
        core.delete_namespace("default")
    assert (error.value.status, status_of(error.value)["message"]) == (
        403, 'namespaces "default" is forbidden: this namespace may not be deleted')
