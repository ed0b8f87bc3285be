"""A datacenter put on the Kubernetes backend for one test, whichever cluster the test runs
against (the fake API server with scripted pods or with pods that really run, or a real
cluster)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from accounts.models import Datacenter
from jobs.backends.kubernetes.client import kube_forget
from jobs.backends.kubernetes.pods_watch import pod_caches_stop


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
