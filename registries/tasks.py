"""Keeping the cluster's pull secrets in line with the credentials (idempotent tasks)."""

from __future__ import annotations

from celery import shared_task
from django.contrib.auth import get_user_model

from accounts.models import Datacenter
from jobs.backends import backend_for

from .models import Registry


@shared_task(name="registries.tasks.pull_secret_sync", acks_late=True)
def pull_secret_sync(registry_id: int) -> None:
    """Write the credential's pull secret as it is now (a later change queues another)."""
    registry = Registry.objects.select_related("datacenter", "owner").filter(
        pk=registry_id).first()
    if registry is not None:
        backend_for(registry.datacenter).pull_secret_apply(registry)


@shared_task(name="registries.tasks.pull_secret_remove", acks_late=True)
def pull_secret_remove(datacenter_id: int, owner_id: int, name: str) -> None:
    datacenter = Datacenter.objects.filter(pk=datacenter_id).first()
    owner = get_user_model().objects.filter(pk=owner_id).first()
    if datacenter is None or owner is None:
        return
    if Registry.objects.filter(datacenter=datacenter, owner=owner, name=name).exists():
        return  # made again since: its own sync task keeps the secret
    backend_for(datacenter).pull_secret_delete(datacenter, owner, name)
