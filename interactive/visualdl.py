"""VisualDL for one job or several of a user's: a session that shows their curves.

"Open in VisualDL" (a job's page, a selection in the job list) calls ``visualdl_open``: the
user's VisualDL session for that same set of jobs if one is still waiting or running, else a
new one (``interactive.sessions.session_start``, kind ``visualdl``: a job of the user's, under
their quota, fair share and budgets like any). Its replica runs
``python -m paddlecloud_sdk.sessions visualdl JOB…``, which reads the jobs' directories in the
owner's home, one run per job (their ``report()`` metrics converted as they grow, and the
VisualDL logs they wrote themselves), and serves VisualDL on the session's port of its own
loopback, asking the session's token of every request.

``visualdl_enter`` is where the browser goes next: while the session waits or VisualDL is not
answering yet, nothing (the page says so and looks again); then the URL that enters it through
the user's proxy route (``interactive.opening.session_open``, which adds the session's token
upstream). A session nobody has looked at through its routes for ``PADDLECLOUD_VISUALDL_IDLE``
is stopped with an event saying so (``sessions_idle_check``: the routes' ``last_seen``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from jobs.backends import backend_for
from jobs.backends.base import BackendError
from jobs.services import job_worker
from jobs.states import FINAL_JOB_STATES, JobState
from kernel.errors import ConflictError, NotFoundError, ValidationError
from paddlecloud_core.contract import session_token

from .models import Session
from .opening import session_open
from .sessions import server_port, session_get, session_list, session_start
from .upstream import http_request

KIND = "visualdl"
MAX_JOBS = 20  # as many as the compare page shows
# What the session's VisualDL answers once it reads its runs (VisualDL's own API).
READY_PATH = "/app/api/runs"
READY_SECONDS = 10.0


def visualdl_jobs(names: Sequence[str]) -> list[str]:
    """The jobs a VisualDL is asked for, as its session keeps them: each once, sorted. A 400
    naming ``jobs`` when there are none or more than MAX_JOBS."""
    if isinstance(names, str) or not all(isinstance(name, str) for name in names):
        raise ValidationError.for_field("jobs", "a list of job names")
    wanted = sorted({name.strip() for name in names if name.strip()})
    if not wanted:
        raise ValidationError.for_field("jobs", "tick at least one job to open VisualDL for")
    if len(wanted) > MAX_JOBS:
        raise ValidationError.for_field("jobs", f"at most {MAX_JOBS} jobs in one VisualDL, "
                                                f"not {len(wanted)}")
    return wanted


def visualdl_open(user, datacenter, names: Sequence[str]) -> tuple[Session, bool]:
    """The user's VisualDL session for the jobs ``names`` (each a job of theirs in the
    datacenter), and whether it was started now: one already waiting or running for the same
    jobs is reused."""
    wanted = visualdl_jobs(names)
    with transaction.atomic():
        # One at a time for the user: a button pressed twice starts one VisualDL, not two.
        get_user_model().objects.select_for_update().filter(pk=user.pk).exists()
        if (session := visualdl_find(user, datacenter, wanted)) is not None:
            return session, False
        return session_start(user, datacenter, KIND, jobs=wanted, args=wanted,
                             idle=settings.PADDLECLOUD_VISUALDL_IDLE,
                             cpu=settings.PADDLECLOUD_VISUALDL_CPU,
                             memory=settings.PADDLECLOUD_VISUALDL_MEMORY), True


def visualdl_find(user, datacenter, names: Sequence[str]) -> Session | None:
    """The user's VisualDL session for the jobs ``names`` that is waiting or running, if
    there is one."""
    wanted = visualdl_jobs(names)
    for session in session_list(user, datacenter, kind=KIND):
        if sorted(session.jobs) == wanted:
            return session
    return None


def visualdl_get(user, datacenter, name: str) -> Session:
    """One of the user's VisualDL sessions; anything else is not found."""
    session = session_get(user, datacenter, name)
    if session.kind != KIND:
        raise NotFoundError(f"you have no VisualDL session named {name!r}")
    return session


@dataclass(frozen=True)
class Entry:
    """Where a VisualDL session stands for a browser that wants to look at it: ``url`` to
    send it to once VisualDL answers, else why not yet (``waiting``)."""

    session: Session
    url: str | None
    waiting: str


def visualdl_enter(user, datacenter, name: str, request) -> Entry:
    """The URL that enters the session's VisualDL through the user's route to it, once its
    job runs and VisualDL answers; until then why not. A session that has ended is a 409
    that says how it ended."""
    session = visualdl_get(user, datacenter, name)
    job = session.job
    if job.state in FINAL_JOB_STATES:
        raise ConflictError(f"VisualDL session {job.name} has ended ({job.state}"
                            + (f": {job.state_reason}" if job.state_reason else "") + ")",
                            code="job_ended")
    if job.state != JobState.RUNNING:
        return Entry(session, None, f"its job is {job.state}"
                     + (f": {job.state_reason}" if job.state_reason else ""))
    headers = {"Authorization": f"token {session_token(settings.SECRET_KEY, job.uid)}"}
    try:
        async_to_sync(_answers)(backend_for(job.datacenter), job,
                                job_worker(job, None, building=False), headers)
    except (BackendError, OSError, TimeoutError, ValueError) as exc:
        return Entry(session, None, f"VisualDL is starting ({exc})")
    return Entry(session, session_open(user, datacenter, name, request), "")


async def _answers(backend, job, replica, headers: dict[str, str]) -> None:
    """VisualDL answers with its runs within READY_SECONDS (else BackendError, OSError,
    TimeoutError or ValueError)."""
    status, _ = await asyncio.wait_for(http_request(
        backend, job, replica, server_port(replica), "GET", READY_PATH, headers),
        READY_SECONDS)
    if status != 200:
        raise ValueError(f"it answered {READY_PATH} with {status}")
