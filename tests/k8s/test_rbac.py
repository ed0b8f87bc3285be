"""RBAC for the portal's account (rbac.py): its requests are held to the rules it is given,
as a ClusterRole bound to it would hold them; the admin's are not."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
         {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
         {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete"]}]
USER = "system:serviceaccount:paddlecloud:paddlecloud"


@pytest.fixture
def portal_api(k8s_api):
    """An API client of the fake server as the portal's account, held to RULES."""
    k8s_api.settings.portal_rules = RULES
    with config.new_client_from_config(config_file=str(k8s_api.portal_kubeconfig_path)) as api:
        yield api


def test_the_portal_may_do_what_its_rules_grant(portal_api, core, ns):
    core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "busybox"}]}})
    pods = client.CoreV1Api(portal_api).list_pod_for_all_namespaces()
    assert [p.metadata.name for p in pods.items] == ["p"]
    job = {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}
    client.BatchV1Api(portal_api).create_namespaced_job(ns, job)
    client.BatchV1Api(portal_api).delete_namespaced_job("j", ns)


@pytest.mark.parametrize(("call", "message"), [
    (lambda api, ns: client.CoreV1Api(api).delete_namespaced_pod("p", ns),
     'pods "p" is forbidden: User "{user}" cannot delete resource "pods" in API group "" '
     'in the namespace "{ns}"'),
    (lambda api, ns: client.CoreV1Api(api).read_namespaced_pod("p", ns),
     'pods "p" is forbidden: User "{user}" cannot get resource "pods" in API group "" '
     'in the namespace "{ns}"'),
    (lambda api, ns: client.BatchV1Api(api).list_namespaced_job(ns),
     'jobs.batch is forbidden: User "{user}" cannot list resource "jobs" in API group '
     '"batch" in the namespace "{ns}"'),
    (lambda api, ns: client.CoreV1Api(api).create_namespace({"metadata": {"name": "x"}}),
     'namespaces is forbidden: User "{user}" cannot create resource "namespaces" in API '
     'group "" at the cluster scope'),
    (lambda api, ns: client.CoreV1Api(api).create_namespaced_pod_eviction(
        "p", ns, {"metadata": {"name": "p"}}),
     'pods "p" is forbidden: User "{user}" cannot create resource "pods/eviction" in API '
     'group "" in the namespace "{ns}"'),
])
def test_anything_else_is_forbidden_as_a_real_server_says(portal_api, ns, call, message):
    with pytest.raises(ApiException) as refused:
        call(portal_api, ns)
    assert refused.value.status == 403
    status = json.loads(refused.value.body)
    assert (status["reason"], status["message"]) == (
        "Forbidden", message.format(user=USER, ns=ns))


def test_the_admin_and_a_portal_without_rules_are_not_held(k8s_api, core, ns):
    k8s_api.settings.portal_rules = None
    with config.new_client_from_config(config_file=str(k8s_api.portal_kubeconfig_path)) as api:
        client.CoreV1Api(api).create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    k8s_api.settings.portal_rules = RULES
    core.delete_namespaced_config_map("c", ns)  # the admin's token
