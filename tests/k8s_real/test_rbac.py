"""deploy/rbac.yaml as the real API server's authorizer reads it: the portal's ServiceAccount
may do exactly what its cluster-wide ClusterRole grants (tests/test_deploy.py pins that list)
and nothing else, outside the namespaces it makes; in one it makes, also what its namespace
role grants, once it has bound it there. It reads no Secret of a namespace it did not make."""

from __future__ import annotations

import pytest

from tests.k8s_real.api import Api
from tests.real_kube.control_plane import NODE_NAME
from tests.test_deploy import CLUSTER_RBAC, NAMESPACE_RBAC, NAMESPACE_ROLE

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# What the portal must not touch at all, beside the verbs RBAC leaves out of its rules.
NOT_GRANTED = [("", "serviceaccounts"), ("", "pods/exec"), ("", "nodes/proxy"),
               ("rbac.authorization.k8s.io", "roles"),
               ("rbac.authorization.k8s.io", "clusterrolebindings"),
               ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
               ("apps", "deployments")]


@pytest.fixture(scope="module")
def portal(real_kube):
    api = Api(real_kube.portal_kubeconfig)
    yield api
    api.close()


def allowed(api: Api, group: str, resource: str, verb: str, namespace: str = "",
            name: str = "") -> bool:
    """What the server's authorizer says, asked as the portal (SelfSubjectAccessReview)."""
    resource, _, subresource = resource.partition("/")
    answer = api.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"group": group, "resource": resource,
                                        "subresource": subresource, "verb": verb,
                                        "namespace": namespace, "name": name}}})
    assert answer.status == 201, answer.body
    return answer.body["status"]["allowed"]


# `bind` is granted on the namespace role by name: asked of no name, it is refused.
BY_NAME = {("rbac.authorization.k8s.io", "clusterroles")}


@pytest.mark.parametrize(("group", "resource"), [*CLUSTER_RBAC, *NAMESPACE_RBAC, *NOT_GRANTED],
                         ids=lambda v: v or "core")
def test_the_server_grants_the_portal_exactly_its_cluster_role(portal, group, resource):
    granted = set() if (group, resource) in BY_NAME else CLUSTER_RBAC.get((group, resource),
                                                                          set())
    for namespace in ("", "kube-system"):
        decided = {verb for verb in VERBS
                   if allowed(portal, group, resource, verb, namespace)}
        assert decided == granted, (namespace or "cluster-wide", resource)


def test_the_portal_may_bind_its_namespace_role_and_no_other(portal):
    group, resource = next(iter(BY_NAME))
    assert allowed(portal, group, resource, "bind", name=NAMESPACE_ROLE)
    for other in ("admin", "edit", "cluster-admin", "paddlecloud-portal"):
        assert not allowed(portal, group, resource, "bind", name=other)


def test_what_it_is_refused_is_refused(portal):
    """Real requests, not reviews: 403 for what the role leaves out."""
    assert portal.get("Secret").status == 403  # list secrets in every namespace
    pods = portal.get("Pod")  # nor pods: it watches those of its namespaces, one by one
    assert pods.status == 403, pods.body
    assert portal.request("GET", "/api/v1/pods?watch=true&timeoutSeconds=1").status == 403
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "portal-made"}}
    assert portal.create(node, dry_run=True).status == 403
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    refused = portal.create(pod, dry_run=True)
    assert refused.status == 403
    assert "system:serviceaccount:paddlecloud:paddlecloud" in refused.message


def test_what_it_is_granted_works(portal):
    nodes = portal.get("Node")
    assert nodes.ok
    assert portal.get("Namespace", name="paddlecloud").ok
    assert portal.get("Namespace").ok  # the pod watch and the orphans' sweep list them
    if nodes.body["items"]:  # the node agent's Node, where this checkout has one
        assert NODE_NAME in {n["metadata"]["name"] for n in nodes.body["items"]}
