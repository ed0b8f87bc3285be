"""A datacenter put on the Kubernetes backend for one test, whichever cluster the test runs
against (the fake API server with scripted pods or with pods that really run, or the real
control plane of tests/real_kube)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import yaml

from accounts.execution import backend_settings_fields
from accounts.models import Datacenter
from jobs.backends.kubernetes.client import kube_forget
from jobs.backends.kubernetes.pods_watch import pod_caches_stop

RBAC = Path(__file__).resolve().parent.parent / "deploy" / "rbac.yaml"
CLUSTER_ROLE = "paddlecloud-portal"  # the one bound cluster-wide


def portal_roles() -> dict[str, list[dict]]:
    """The rules of deploy/rbac.yaml's ClusterRoles, by name."""
    return {doc["metadata"]["name"]: doc["rules"] for doc in yaml.safe_load_all(RBAC.read_text())
            if doc and doc["kind"] == "ClusterRole"}


def portal_kubeconfig(fake) -> Path:
    """The kubeconfig the portal uses on the fake API server ``fake``: its requests are held
    to deploy/rbac.yaml, as in a cluster (403 for anything it does not grant): its bound
    ClusterRole everywhere, the namespace role where the portal bound it."""
    roles = portal_roles()
    fake.settings.portal_rules = roles.pop(CLUSTER_ROLE)
    fake.settings.portal_namespace_roles = roles
    return fake.portal_kubeconfig_path


def pfs_volume(pfs_root: Path | str) -> dict:
    """The datacenter's PFS root (``home/``, ``public/``) as a hostPath the pods mount."""
    return {"hostPath": {"path": str(pfs_root), "type": "Directory"}}


def nfs_pfs_volume(pfs_root: Path | str) -> dict:
    """The datacenter's PFS root on the real control plane: an NFS PersistentVolume of the
    server the node agent plays with this machine's directories (tests/real_kube/node.py), as
    deploy/admission-policy.yaml allows a PFS (a hostPath or local volume is refused)."""
    from tests.real_kube.control_plane import NFS_SERVER

    return {"persistentVolume": {"nfs": {"server": NFS_SERVER, "path": str(pfs_root)}}}


@contextlib.contextmanager
def on_real_kubernetes(datacenter, settings, cluster, pfs_root: Path | str):
    """``datacenter`` on the real control plane ``cluster`` (the ``real_kube`` fixture), as
    the portal's ServiceAccount, its PFS ``pfs_root``. What the portal made there for the
    block (its users' namespaces, their PFS volumes) is deleted after it, and waited for: the
    next test meets a cluster without them."""
    from jobs.backends.kubernetes.names import MANAGED_BY, MANAGED_BY_LABEL
    from tests.real_kube.control_plane import api_client

    try:
        with on_kubernetes(datacenter, settings, cluster.portal_kubeconfig,
                           nfs_pfs_volume(pfs_root), timeout=5) as on:
            yield on
    finally:
        with api_client(cluster.admin_kubeconfig) as api:
            _remove_managed(api, f"{MANAGED_BY_LABEL}={MANAGED_BY}")


def _remove_managed(api, selector: str, timeout: float = 60) -> None:
    """Delete the portal's namespaces and PersistentVolumes (``selector``) and wait until
    they are gone (a namespace goes once the namespace controller has emptied it)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)

    def left() -> list[str]:
        return [*(f"namespace/{n.metadata.name}"
                  for n in core.list_namespace(label_selector=selector).items),
                *(f"persistentvolume/{v.metadata.name}"
                  for v in core.list_persistent_volume(label_selector=selector).items)]

    for kind_name in left():
        kind, name = kind_name.split("/")
        try:
            if kind == "namespace":
                _empty_claims(api, name, timeout)
            (core.delete_namespace if kind == "namespace" else core.delete_persistent_volume)(
                name, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise
    deadline = time.monotonic() + timeout
    while remaining := left():
        assert time.monotonic() < deadline, f"still on the cluster after {timeout} s: {remaining}"
        time.sleep(0.2)


def datacenter_set(datacenter, **fields) -> Datacenter:
    """Write ``fields`` on the datacenter in the database, unchecked: its own, and its
    backend's settings by their names (``kube_volume``, …); ``datacenter`` is read again."""
    names = backend_settings_fields()
    settings_ = {name: value for name, value in fields.items() if name in names}
    own = {name: value for name, value in fields.items() if name not in names}
    Datacenter.objects.filter(pk=datacenter.pk).update(
        backend_settings={**datacenter.backend_settings, **settings_}, **own)
    datacenter.refresh_from_db()
    return datacenter


@contextlib.contextmanager
def on_kubernetes(datacenter, settings, kubeconfig, kube_volume: dict, *, timeout: float = 2):
    """``datacenter`` on the Kubernetes backend of ``kubeconfig`` for the block; the backend's
    cached clients and pod watches go with it."""
    settings.PADDLECLOUD_KUBE_TIMEOUT = timeout
    settings.PADDLECLOUD_KUBE_ATTEMPTS = 3
    datacenter_set(datacenter, backend="kubernetes", kubeconfig=str(kubeconfig),
                   kube_volume=kube_volume)
    try:
        yield datacenter
    finally:
        pod_caches_stop()
        kube_forget()


def _empty_claims(api, namespace: str, timeout: float) -> None:
    """Delete the namespace's pods (no grace: the test is over; their StatefulSets and Jobs
    first, which would make them again) and claims, and wait until they are gone. Left to the
    namespace controller, a claim held by its ``pvc-protection`` finalizer sends the namespace
    round the controller's back-off: 11 s a test, 6 s so."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    client.AppsV1Api(api).delete_collection_namespaced_stateful_set(
        namespace, propagation_policy="Orphan")
    client.BatchV1Api(api).delete_collection_namespaced_job(
        namespace, propagation_policy="Orphan")
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    core.delete_collection_namespaced_persistent_volume_claim(namespace)
    deadline = time.monotonic() + timeout
    while (core.list_namespaced_pod(namespace).items
           or core.list_namespaced_persistent_volume_claim(namespace).items):
        assert time.monotonic() < deadline, f"{namespace}'s pods or claims are still there"
        time.sleep(0.1)
