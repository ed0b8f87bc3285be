"""PodSecurity admission: a namespace's ``pod-security.kubernetes.io/enforce`` level (privileged,
baseline, restricted) refuses the pods that violate it with the real plugin's 403 message, also
when a controller creates them (a ``FailedCreate`` event); workloads themselves are admitted."""

from __future__ import annotations

import pytest
from kubernetes import client

from .helpers import job_body, pod_body, statefulset_body, status_of

ENFORCE = "pod-security.kubernetes.io/enforce"
RESTRICTED_DEFAULT_POD = (
    'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container '
    '"main" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
    '(container "main" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true '
    '(pod or container "main" must set securityContext.runAsNonRoot=true), seccompProfile (pod '
    'or container "main" must set securityContext.seccompProfile.type to "RuntimeDefault" or '
    '"Localhost")')


def _namespace(k8s_api, core, name: str, level: str | None, **labels: str) -> str:
    """A namespace enforcing ``level`` (None: no label), ready for pods."""
    if level is not None:
        labels[ENFORCE] = level
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    k8s_api.wait_for(lambda: k8s_api.store.get("serviceaccounts", name, "default"),
                     message="the namespace's default ServiceAccount")
    return name


def _locked_down(name: str, **spec) -> dict:
    """A pod the restricted level admits."""
    body = pod_body(name, securityContext={"runAsNonRoot": True, "runAsUser": 1000,
                                           "seccompProfile": {"type": "RuntimeDefault"}}, **spec)
    body["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return body


def _host_path(body: dict) -> dict:
    body["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": "/var/data"}}]
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return body


def _refusal(core, namespace: str, body: dict) -> dict:
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(namespace, body)
    assert refused.value.status == 403
    return status_of(refused.value)


def test_restricted_refuses_a_pod_that_sets_nothing_with_the_plugins_message(k8s_api, core):
    ns = _namespace(k8s_api, core, "locked", "restricted")
    status = _refusal(core, ns, pod_body("x"))
    assert status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 403,
        "reason": "Forbidden", "details": {"name": "x", "kind": "pods"},
        "message": f'pods "x" is forbidden: {RESTRICTED_DEFAULT_POD}'}
    assert core.list_namespaced_pod(ns).items == []


def test_baseline_admits_the_pod_restricted_refuses(k8s_api, core):
    ns = _namespace(k8s_api, core, "base", "baseline")
    core.create_namespaced_pod(ns, pod_body("x"))
    k8s_api.wait_for(lambda: core.read_namespaced_pod("x", ns).status.phase == "Running",
                     message="Running")


@pytest.mark.parametrize(("level", "refusal"), [
    ("baseline", 'violates PodSecurity "baseline:latest": hostPath volumes (volume "data")'),
    # restricted reports hostPath through its own volume check, which overrides baseline's
    ("restricted", 'violates PodSecurity "restricted:latest": restricted volume types (volume '
                   '"data" uses restricted volume type "hostPath")'),
    ("privileged", None),
])
def test_a_host_path_volume_needs_the_privileged_level(k8s_api, core, level, refusal):
    ns = _namespace(k8s_api, core, "host", level)
    body = _host_path(_locked_down("p"))
    if refusal is None:
        assert core.create_namespaced_pod(ns, body).metadata.name == "p"
    else:
        assert _refusal(core, ns, body)["message"] == f'pods "p" is forbidden: {refusal}'


def test_restricted_admits_a_locked_down_pod(k8s_api, core):
    ns = _namespace(k8s_api, core, "locked", "restricted")
    body = _locked_down("p", volumes=[
        {"name": "scratch", "emptyDir": {}},
        {"name": "ca", "configMap": {"name": "kube-root-ca.crt"}},
        {"name": "work", "persistentVolumeClaim": {"claimName": "work"}}])
    body["spec"]["initContainers"] = [{**body["spec"]["containers"][0], "name": "init"}]
    assert core.create_namespaced_pod(ns, body).metadata.name == "p"


def test_baseline_checks_come_first_then_restricted_ones_each_in_id_order(k8s_api, core):
    ns = _namespace(k8s_api, core, "locked", "restricted")
    body = _locked_down("p", hostNetwork=True)
    body["spec"]["securityContext"]["runAsUser"] = 0
    body["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
    body["spec"]["containers"][0]["securityContext"].update(
        privileged=True, capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]})
    body["spec"]["initContainers"] = [{"name": "init", "image": "busybox:1.36"}]
    assert _refusal(core, ns, body)["message"] == (
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": host namespaces '
        '(hostNetwork=true), hostPort (container "main" uses hostPort 80), privileged '
        '(container "main" must not set securityContext.privileged=true), '
        'allowPrivilegeEscalation != false (container "init" must set '
        'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container '
        '"init" must set securityContext.capabilities.drop=["ALL"]; container "main" must not '
        'include "SYS_ADMIN" in securityContext.capabilities.add), runAsUser=0 (pod must not '
        'set runAsUser=0)')


def test_the_message_names_the_enforced_version(k8s_api, core):
    ns = _namespace(k8s_api, core, "pinned", "restricted",
                    **{"pod-security.kubernetes.io/enforce-version": "v1.31"})
    message = _refusal(core, ns, pod_body("x"))["message"]
    assert message == 'pods "x" is forbidden: ' + RESTRICTED_DEFAULT_POD.replace(
        "restricted:latest", "restricted:v1.31")


def test_a_job_whose_pods_violate_the_level_gets_failed_create_events(k8s_api, core, batch):
    ns = _namespace(k8s_api, core, "train", "restricted")
    job = batch.create_namespaced_job(ns, job_body("train", completions=1))
    assert job.metadata.name == "train"  # the workload itself is admitted
    event = k8s_api.wait_for(lambda: k8s_api.events(ns, involved_name="train",
                                                    reason="FailedCreate"),
                             message="the Job's FailedCreate event")[0]
    assert event["type"] == "Warning" and event["source"]["component"] == "job-controller"
    assert event["message"].startswith('Error creating: pods "train-0-')
    assert event["message"].endswith(
        ' is forbidden: ' + RESTRICTED_DEFAULT_POD.replace('"main"', '"trainer"'))
    k8s_api.controller.sync()
    assert core.list_namespaced_pod(ns).items == []
    core.patch_namespace(ns, {"metadata": {"labels": {ENFORCE: "baseline"}}})
    k8s_api.wait_for(lambda: core.list_namespaced_pod(ns).items,
                     message="the Job's pod once the namespace allows it")


def test_a_statefulset_whose_pods_violate_the_level_gets_failed_create_events(k8s_api, core,
                                                                              apps):
    ns = _namespace(k8s_api, core, "serve", "baseline")
    body = statefulset_body("ps", replicas=1)
    body["spec"]["template"]["spec"]["hostNetwork"] = True
    apps.create_namespaced_stateful_set(ns, body)
    event = k8s_api.wait_for(lambda: k8s_api.events(ns, involved_name="ps",
                                                    reason="FailedCreate"),
                             message="the StatefulSet's FailedCreate event")[0]
    assert event["message"] == (
        'create Pod ps-0 in StatefulSet ps failed error: pods "ps-0" is forbidden: violates '
        'PodSecurity "baseline:latest": host namespaces (hostNetwork=true)')
    assert core.list_namespaced_pod(ns).items == []


def test_an_unlabelled_namespace_allows_everything(k8s_api, core, ns):
    body = _host_path(pod_body("root", hostNetwork=True, hostPID=True))
    body["spec"]["containers"][0]["securityContext"] = {
        "privileged": True, "runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}}
    assert core.create_namespaced_pod(ns, body).metadata.name == "root"


def test_a_namespace_with_a_bad_level_is_invalid(core):
    with pytest.raises(client.ApiException) as refused:
        core.create_namespace({"metadata": {"name": "odd", "labels": {
            ENFORCE: "strict", "pod-security.kubernetes.io/enforce-version": "1.31"}}})
    assert refused.value.status == 422
    status = status_of(refused.value)
    assert (status["reason"], status["message"]) == ("Invalid", (
        'Namespace "odd" is invalid: [metadata.labels[pod-security.kubernetes.io/enforce]: '
        'Invalid value: "strict": must be one of privileged, baseline, restricted, '
        'metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: "1.31": '
        'must be "latest" or "v1.x"]'))
    assert [c["field"] for c in status["details"]["causes"]] == [
        "metadata.labels[pod-security.kubernetes.io/enforce]",
        "metadata.labels[pod-security.kubernetes.io/enforce-version]"]
