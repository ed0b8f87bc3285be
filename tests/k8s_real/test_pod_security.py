"""Pod Security admission in the real API server: a namespace labelled as the portal labels
its users' (enforce restricted, latest) refuses a privileged pod, and admits one that meets the
standard. Asked as the admin: what refuses the pod is the namespace's level, not RBAC."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.k8s_real.api import Api


@pytest.fixture
def admin(real_kube):
    api = Api(real_kube.admin_kubeconfig)
    yield api
    api.close()


@pytest.fixture
def restricted(admin):
    name = f"restricted-{uuid.uuid4().hex[:8]}"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest"}}}
    assert admin.create(namespace).ok
    # A pod needs the namespace's default ServiceAccount, which the controllers make.
    deadline = time.monotonic() + 30
    while not admin.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").ok:
        assert time.monotonic() < deadline, "no default ServiceAccount in a new namespace"
        time.sleep(0.1)
    yield name
    assert admin.delete(namespace).ok


def pod(namespace: str, security: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": security}],
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}}}}


def test_a_restricted_namespace_refuses_a_privileged_pod(admin, restricted):
    refused = admin.create(pod(restricted, {"privileged": True}), dry_run=True)
    assert refused.status == 403
    assert 'violates PodSecurity "restricted:latest"' in refused.message
    assert "privileged" in refused.message
    fit = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert admin.create(pod(restricted, fit), dry_run=True).ok
