"""A datacenter put on the Kubernetes backend for one test, whichever cluster the test runs
against (the fake API server with scripted pods or with pods that really run, or a real
cluster)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import yaml

from accounts.models import Datacenter
from jobs.backends.kubernetes.client import kube_forget
from jobs.backends.kubernetes.pods_watch import pod_caches_stop

RBAC = Path(__file__).resolve().parent.parent / "deploy" / "rbac.yaml"


def portal_rules() -> list[dict]:
    """The rules deploy/rbac.yaml grants the portal (its ClusterRole's)."""
    roles = [doc for doc in yaml.safe_load_all(RBAC.read_text())
             if doc and doc["kind"] == "ClusterRole"]
    assert len(roles) == 1, "deploy/rbac.yaml has one ClusterRole"
    return roles[0]["rules"]


def portal_kubeconfig(fake) -> Path:
    """The kubeconfig the portal uses on the fake API server ``fake``: its requests are held
    to deploy/rbac.yaml, as in a cluster (403 for anything it does not grant)."""
    fake.settings.portal_rules = portal_rules()
    return fake.portal_kubeconfig_path


def pfs_volume(pfs_root: Path | str) -> dict:
    """The datacenter's PFS root (``home/``, ``public/``) as a hostPath the pods mount."""
    return {"hostPath": {"path": str(pfs_root), "type": "Directory"}}


@contextlib.contextmanager
def on_kubernetes(datacenter, settings, kubeconfig, kube_volume: dict, *, timeout: float = 2):
    """``datacenter`` on the Kubernetes backend of ``kubeconfig`` for the block; the backend's
    cached clients and pod watches go with it."""
    settings.PADDLECLOUD_KUBE_TIMEOUT = timeout
    settings.PADDLECLOUD_KUBE_ATTEMPTS = 3
    Datacenter.objects.filter(pk=datacenter.pk).update(
        backend="kubernetes", kubeconfig=str(kubeconfig), kube_volume=kube_volume)
    datacenter.refresh_from_db()
    try:
        yield datacenter
    finally:
        pod_caches_stop()
        kube_forget()
