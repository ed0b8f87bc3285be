"""Interactive work's periodic work: idle sessions stopped (``sessions.sessions_idle_check``),
every IDLE_CHECK_SECONDS in every worker, one worker at a time."""

from __future__ import annotations

from django.core.cache import cache

from kernel.celery import every_worker

from .sessions import IDLE_CHECK_SECONDS, sessions_idle_check

IDLE_CHECK_DUE = "interactive:sessions-idle-check"


@every_worker(1)
def sessions_idle_when_due() -> None:
    """Each worker looks every second; the first to find that no check began in the last
    IDLE_CHECK_SECONDS runs it: a session idle past its limit is stopped within that (and
    the check's own time), whichever workers live."""
    if cache.add(IDLE_CHECK_DUE, 1, IDLE_CHECK_SECONDS):
        sessions_idle_check()
