"""Tenants on the real control plane, the portal as its own ServiceAccount (deploy/rbac.yaml,
its token): it runs a job in the namespace it makes, where it binds its namespace role to
itself, and reads nothing of a namespace it did not make (no Secret, no ConfigMap, no pod: it
watches the pods of its namespaces, one by one); each user namespace gets the NetworkPolicies
that keep other tenants out and its pods in."""

from __future__ import annotations

import uuid

import pytest

from jobs import engine
from jobs.backends import backend_for
from jobs.backends.kubernetes.client import kube_for
from jobs.backends.kubernetes.manifests import network_policies
from jobs.backends.kubernetes.names import PORTAL_BINDING, PORTAL_NAMESPACE_ROLE
from jobs.backends.kubernetes.pods_watch import pod_cache
from paddlecloud_core.contract import job_namespace
from tests.factories import package_write, submit_job
from tests.jobs.files import TRAINER
from tests.jobs.test_engine_contract import run_until
from tests.k8s_real.api import Api
from tests.kube import datacenter_set
from tests.polling import wait

pytestmark = [pytest.mark.real_kubernetes, pytest.mark.django_db]


@pytest.fixture
def elsewhere(real_kube):
    """A namespace the portal did not make (an admin's, unlabelled), holding a Secret, a
    ConfigMap and a pod; gone after the test."""
    admin = Api(real_kube.admin_kubeconfig)
    name = f"team-b-{uuid.uuid4().hex[:6]}"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    try:
        assert admin.create(namespace).ok
        for obj in ({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                     "metadata": {"name": "db-password", "namespace": name},
                     "stringData": {"password": "s3cret"}},
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "settings", "namespace": name},
                     "data": {"url": "postgres://db"}}):
            answer = admin.create(obj)
            assert answer.ok, answer.body
        yield name
    finally:
        admin.delete(namespace)
        admin.close()


def test_the_portal_runs_a_job_in_its_namespace_and_reads_nothing_elsewhere(
        real_kube, real_kube_datacenter, alice, pfs_home, held_starts, elsewhere):
    datacenter = real_kube_datacenter
    package_write(pfs_home, TRAINER)
    job = submit_job(alice, datacenter, "least", image="python:3.11-slim",
                     env={"LINES": "step 1", "SECONDS": "0", "CODE": "0"})
    engine.job_launch(job.pk)
    run_until(job, {"succeeded"})

    portal = Api(real_kube.portal_kubeconfig)
    try:
        # Its rights in its namespace are the ones it bound there, to itself.
        mine = job_namespace(datacenter, alice.username)
        binding = portal.get("RoleBinding", mine, PORTAL_BINDING)
        assert binding.ok, binding.body
        assert binding.body["roleRef"]["name"] == PORTAL_NAMESPACE_ROLE
        assert binding.body["subjects"] == [{"kind": "ServiceAccount", "name": "paddlecloud",
                                             "namespace": "paddlecloud"}]
        assert portal.get("ConfigMap", mine).ok

        # Nothing of a namespace it did not make.
        for kind, name in (("Secret", "db-password"), ("ConfigMap", "settings")):
            refused = portal.get(kind, elsewhere, name)
            assert refused.status == 403, (kind, refused.body)
            assert "system:serviceaccount:paddlecloud:paddlecloud" in refused.message
        assert portal.get("Secret", elsewhere).status == 403
        assert portal.get("Secret").status == 403  # nor in every namespace at once
        assert portal.get("ConfigMap").status == 403
    finally:
        portal.close()


def test_the_pod_watch_sees_the_jobs_pods_with_the_rights_of_its_namespaces(
        real_kube, real_kube_datacenter, alice, pfs_home, held_starts):
    """The portal may not read the pods of the whole cluster (tests/k8s_real/test_rbac.py:
    403), only those of the namespaces it made: its pod watch, as its ServiceAccount, started
    before alice's namespace exists, watches that namespace once the portal makes it (and
    binds its rights there), and sees the job's pod run and end."""
    datacenter = real_kube_datacenter
    package_write(pfs_home, TRAINER)
    cache = pod_cache(kube_for(datacenter))
    mine = job_namespace(datacenter, alice.username)
    assert cache.synced(timeout=30) and mine not in cache.namespaces()
    job = submit_job(alice, datacenter, "watched", image="python:3.11-slim",
                     env={"LINES": "step 1", "SECONDS": "2", "CODE": "0"})
    engine.job_launch(job.pk)
    phases = set()

    def ended() -> bool:
        phases.update(p["status"].get("phase") for p in cache.job_pods(str(job.uid)))
        return "Succeeded" in phases

    wait(ended, timeout=120, message=lambda: f"the pod's end in the watch (seen: {phases})")
    assert "Running" in phases and mine in cache.namespaces()
    run_until(job, {"succeeded"})


def test_a_user_namespace_gets_network_policies_the_server_accepts(
        real_kube, real_kube_datacenter, alice, pfs_home, held_starts):
    """Which traffic the policies let through cannot be shown here: the test node's network
    is the node agent's own (no network plugin that implements NetworkPolicy: Calico, Cilium,
    …), on which a policy changes nothing. So the real API server shows what it can: it
    accepts the policies the portal makes as its ServiceAccount (its schema, the
    admission policy), keeps them as written, resolves their namespace selectors to the
    namespaces meant (the cluster's DNS in kube-system, the portal's in paddlecloud, no
    other tenant's), their pod selector to the job's pods; and a changed egress setting
    reaches them at the next job."""
    datacenter = datacenter_set(real_kube_datacenter, kube_egress=["10.0.0.0/8", "0.0.0.0/0"])
    package_write(pfs_home, TRAINER)
    job = submit_job(alice, datacenter, "fenced", image="python:3.11-slim",
                     env={"LINES": "", "SECONDS": "60", "CODE": "0"})
    engine.job_launch(job.pk)
    mine = job_namespace(datacenter, alice.username)
    admin = Api(real_kube.admin_kubeconfig)
    try:
        def stored() -> dict[str, dict]:
            answer = admin.get("NetworkPolicy", mine)
            assert answer.ok, answer.body
            return {p["metadata"]["name"]: p["spec"] for p in answer.body["items"]}

        meant = {p["metadata"]["name"]: p["spec"] for p in network_policies(
            datacenter, mine, {})}
        assert stored() == meant
        assert meant["paddlecloud-egress"]["egress"][0]["to"][1] == {
            "ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}

        def namespaces(policy: str) -> list[str]:
            rule, = meant[policy]["egress"]
            peer, = rule["to"]
            labels = ",".join(f"{k}={v}" for k, v in
                              peer["namespaceSelector"]["matchLabels"].items())
            answer = admin.request("GET", f"/api/v1/namespaces?labelSelector={labels}")
            return [n["metadata"]["name"] for n in answer.body["items"]]

        assert namespaces("paddlecloud-dns") == ["kube-system"]
        assert namespaces("paddlecloud-master") == ["paddlecloud"]
        # podSelector {} in the namespace: every pod of it, the job's among them.
        pods = wait(lambda: admin.get("Pod", mine).body.get("items"), timeout=60,
                    message=f"a pod in {mine}")
        assert {p["metadata"]["labels"]["paddlecloud.org/job-uid"] for p in pods} == {
            str(job.uid)}

        # The datacenter closes its egress: the namespace is brought up to date when the
        # portal next ensures it (a job's start, a pull secret's write).
        datacenter = datacenter_set(datacenter, kube_egress=[])
        backend = backend_for(datacenter)
        backend._namespace_ensure(kube_for(datacenter), datacenter, alice)
        assert stored()["paddlecloud-egress"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    finally:
        admin.close()

