"""A session opened in its owner's browser: a proxy route to its server's port with its token
as the upstream header (``services.route_open``; the token is never shown), and the URL that
enters it (``services.route_enter_url``: a one-time ticket at the route's own origin)."""

from __future__ import annotations

from django.conf import settings

from jobs.services import job_worker
from jobs.states import JobState
from kernel.errors import ConflictError
from paddlecloud_core.contract import session_token

from .services import route_enter_url, route_open
from .sessions import server_port, session_get

# Where each kind lands.
LANDING = {"notebook": "/lab", "visualdl": "/"}


def session_open(user, datacenter, name: str, request) -> str:
    """The URL that takes ``request``'s browser into the user's running session ``name``; a
    409 saying so while it waits or after it ended."""
    session = session_get(user, datacenter, name)
    job = session.job
    if job.state != JobState.RUNNING:
        raise ConflictError(f"{session.kind} {name} is {job.state}, not running"
                            + (f": {job.state_reason}" if job.state_reason else "")
                            + "; it opens once it runs", code="job_not_running")
    replica = job_worker(job, None, building=False)  # its one trainer
    route = route_open(user, job, port=server_port(replica), replica=replica,
                       label=f"{session.kind} {name}",
                       purpose=session.kind, headers={
                           "Authorization": f"token {session_token(settings.SECRET_KEY, job.uid)}"})
    return route_enter_url(route, request, LANDING.get(session.kind, "/"))
