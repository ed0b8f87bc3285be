"""Periodic housekeeping for accounts (scheduled by celery beat, see CELERY_BEAT_SCHEDULE)."""

import logging

from celery import shared_task

from . import services

logger = logging.getLogger(__name__)


@shared_task(name="accounts.tasks.token_purge")
def token_purge(older_than_days: int = 30) -> int:
    """Delete API tokens that expired or were revoked more than ``older_than_days`` ago."""
    deleted = services.token_purge(older_than_days=older_than_days)
    if deleted:
        logger.info("purged %d stale API tokens", deleted)
    return deleted
