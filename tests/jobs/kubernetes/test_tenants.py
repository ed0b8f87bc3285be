"""Tenants on the real control plane, the portal as its own ServiceAccount (deploy/rbac.yaml,
its token): it runs a job in the namespace it makes, where it binds its namespace role to
itself, and reads nothing of a namespace it did not make (no Secret, no ConfigMap)."""

from __future__ import annotations

import uuid

import pytest

from jobs import engine
from jobs.backends.kubernetes.names import PORTAL_BINDING, PORTAL_NAMESPACE_ROLE
from paddlecloud_core.contract import job_namespace
from tests.factories import package_write, submit_job
from tests.jobs.files import TRAINER
from tests.jobs.test_engine_contract import run_until
from tests.k8s_real.api import Api

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

