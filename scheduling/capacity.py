"""A datacenter's capacity taken from its cluster (``Datacenter.capacity_from_cluster``): what
its nodes offer jobs (``Backend.capacity``; on Kubernetes, ``backends.kubernetes.nodes``),
read again by the reconciler on each run. When the numbers change, what fits changes, so the
datacenter's waiting jobs are admitted again."""

from __future__ import annotations

import logging

from django.utils import timezone

from accounts.models import Datacenter
from jobs.backends import backend_for
from jobs.backends.base import BackendError
from paddlecloud_core.quantity import format_bytes_about, format_cpu

from .admission import admission_request, waiting_queues

logger = logging.getLogger(__name__)


def capacity_refresh(datacenter) -> bool:
    """Ask the datacenter's cluster what it offers and save that as its capacity, with when;
    if a number changed, have its waiting jobs admitted again. Returns whether it was
    refreshed: not when its backend cannot tell, nor when the cluster cannot be asked (then
    the last numbers stay, and a warning says why)."""
    try:
        found = backend_for(datacenter).capacity(datacenter)
    except BackendError as exc:
        logger.warning("datacenter %s: its capacity stays as it was, its cluster could not "
                       "say what its nodes offer: %s", datacenter.name, exc)
        return False
    if found is None:
        return False
    numbers = {"capacity_cpu": found.cpu, "capacity_memory": found.memory,
               "capacity_gpu": found.gpu}
    changed = any(getattr(datacenter, field) != value for field, value in numbers.items())
    # Only these fields: the reconciler's copy of the datacenter may be older than the row.
    Datacenter.objects.filter(pk=datacenter.pk).update(**numbers,
                                                       capacity_updated_at=timezone.now())
    for field, value in numbers.items():
        setattr(datacenter, field, value)
    if changed:
        logger.info("datacenter %s: its cluster's nodes now offer %s CPU, %s of memory and "
                    "%d GPU", datacenter.name, format_cpu(found.cpu),
                    format_bytes_about(found.memory), found.gpu)
        capacity_changed_admit(datacenter)
    return True


def capacity_changed_admit(datacenter) -> None:
    """The datacenter's capacity changed: have each queue with jobs waiting there admitted
    again (``admission_request``: once the change is committed, once per queue)."""
    for owner_id, datacenter_id in waiting_queues(datacenter=datacenter):
        admission_request(owner_id, datacenter_id)
