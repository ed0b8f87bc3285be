"""Execution backends: where a job's replicas run. ``backend_for(datacenter)`` picks one."""

from __future__ import annotations

from functools import cache


@cache
def _backend(name: str):
    # Imported here: a process loads only the backends its datacenters use (the Kubernetes
    # client is slow to import and needs nothing on a machine that runs jobs locally).
    if name == "local":
        from .local.backend import LocalBackend

        return LocalBackend()
    if name == "kubernetes":
        from .kubernetes.backend import KubernetesBackend

        return KubernetesBackend()
    raise ValueError(f"no execution backend named {name!r}")


def backend_for(datacenter):
    return _backend(datacenter.backend)
