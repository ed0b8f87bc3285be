"""Periodic PFS upkeep: forget abandoned uploads, measure every home's usage again."""

from __future__ import annotations

import logging

from celery import shared_task

from accounts.models import Membership

from . import services

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def uploads_purge() -> int:
    return services.uploads_purge()


@shared_task(ignore_result=True)
def usage_measure_all() -> int:
    """Jobs write into homes behind the file service's back; a walk puts usage right."""
    count = 0
    for membership in Membership.objects.select_related("user", "datacenter"):
        try:
            services.usage_measure(membership.user, membership.datacenter)
            count += 1
        except Exception:
            logger.exception("measuring PFS usage of %s failed", membership)
    return count
