"""Execution backends: where a job's replicas run. ``backend_for(datacenter)`` picks one.

The registry: each backend is a package here, and a line of ``BACKENDS`` offers it to
datacenters (``accounts.execution``): its name, its settings (form and rules), its checks of a
submission (``spec_problems``) and its ``Backend`` class, imported when first used.
"""

from __future__ import annotations

from functools import cache

from django.utils.module_loading import import_string

from accounts.execution import backend_kind, backend_register

from .kubernetes.settings import KUBERNETES
from .local import LOCAL

BACKENDS = (LOCAL, KUBERNETES)

for _kind in BACKENDS:
    backend_register(_kind)


@cache
def _backend(name: str):
    # Imported here: a process loads only the backends its datacenters use (the Kubernetes
    # client is slow to import and needs nothing on a machine that runs jobs locally).
    backend = import_string(backend_kind(name).backend)()
    backend.name = name
    return backend


def backend_for(datacenter):
    return _backend(datacenter.backend)


def image_shown(datacenter, image: str) -> str | None:
    """The image a job of ``datacenter`` runs, as users are told: none (None) where its
    replicas run as processes on the portal's machine, whatever image its spec names."""
    return image if backend_for(datacenter).runs_images else None
