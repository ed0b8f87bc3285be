"""Sessions: a notebook (JupyterLab) or a VisualDL of its owner's, run as a job.

A session is an ordinary job of one trainer (``Job.session`` says which kind): it waits for
its owner's quota, fair share and budgets, is given a predicted start, and holds what it asks
for while it runs, as any job. Its one replica runs the launcher
(``python -m paddlecloud_sdk.sessions KIND``), which serves on the replica's own loopback, at
its port (``server_port``) with a token (``paddlecloud_core.contract.session_token``) that only
the portal has: the portal's proxy (``interactive.services.route_open``) adds it to what it
forwards, so only the session's owner, logged in to the portal, reaches the server. Its
package is an empty directory of the job's own (``jobs/NAME/session``).

Code in a notebook submits jobs as its owner: its replica reaches the portal (locally through
the job's relay) with an API token of the owner's for this session alone
(``contract.session_api_token``: derived from the portal's secret, so never stored, only its
digest as for any token), valid for ``TOKEN_HOURS`` from the last time the portal saw the
session running and revoked the moment it ends (``session_ended``).

A session idle for its ``idle`` time is stopped (``sessions_idle_check``, every
``IDLE_CHECK_SECONDS`` in a worker): a notebook whose kernels are all idle (none busy, none
active since: Jupyter's ``/api/kernels``, asked through ``Backend.port_open`` with its token),
a VisualDL nobody has looked at through its routes (their ``last_seen``). Its idle time runs
from the last moment it was seen in use (``Session.active_at``), or from its start. Its event
says why; its usage (and so its budget use) ends with the stop. ``session_keep`` exempts it.
GPU use is not read: no backend here reports a replica's GPU utilisation, so a session with
GPUs is stopped on its kernels alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import shlex
import string
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import ApiToken
from accounts.services import token_bound
from jobs.backends import backend_for
from jobs.backends.base import BackendError
from jobs.models import Job, JobEvent, Replica
from jobs.services import job_submit, killed_stop
from jobs.states import FINAL_JOB_STATES, JobState
from jobs.transitions import job_transition
from kernel.errors import ConflictError, NotFoundError, PaddleCloudError, ValidationError
from paddlecloud_core.contract import session_api_token, session_token
from paddlecloud_core.layout import pfs_home
from paddlecloud_core.quantity import QuantityError, parse_seconds
from paddlecloud_core.spec import name_problem, name_taken
from pfs.services import pfs_mkdir, pfs_remove

from .models import ProxyRoute, Session
from .upstream import MAX_ANSWER, http_request

logger = logging.getLogger(__name__)

KINDS = ("notebook", "visualdl")
IDLE_DEFAULT = 3600
IDLE_MOST = 7 * 86400
IDLE_RULE = "a length of time from 1s to 7d: 90s, 30m, 1h, 1d"
TOKEN_HOURS = 1
IDLE_CHECK_SECONDS = 15.0
PROBE_SECONDS = 10.0  # a server that has not answered by then is not seen in use
LAUNCHER = ("python", "-m", "paddlecloud_sdk.sessions")
PACKAGE_DIR = "session"  # the session's package: jobs/NAME/session, empty
NAME_ALPHABET = string.ascii_lowercase + string.digits


# --- starting, listing, stopping ---------------------------------------------------------------

def idle_parse(value, field: str = "idle") -> int:
    """An idle limit as users write it (``1h``, ``30m``, 90): seconds; a 400 naming ``field``
    and the rule otherwise. None or empty: ``IDLE_DEFAULT``."""
    if value is None or value == "":
        return IDLE_DEFAULT
    try:
        seconds = parse_seconds(value) if not isinstance(value, bool) else -1
    except QuantityError:
        seconds = -1
    if not 1 <= seconds <= IDLE_MOST:
        raise ValidationError.for_field(field, f"{IDLE_RULE}, not {value!r}")
    return seconds


def idle_shown(seconds: int) -> str:
    """Seconds as people write a length of time: ``1h``, ``90m``, ``45s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _name(kind: str, given: str) -> str:
    if given:
        return given
    return f"{kind}-" + "".join(secrets.choice(NAME_ALPHABET) for _ in range(5))


def session_start(user, datacenter, kind: str, *, name: str = "", cpu=None, memory=None,
                  gpu=None, image: str = "", idle=None, args: Sequence[str] = (),
                  jobs: Sequence[str] = (), env: dict | None = None) -> Session:
    """Start a session of ``kind`` for ``user``: a job named ``name`` (else ``KIND-xxxxx``) of
    one trainer with ``cpu``, ``memory``, ``gpu`` and ``image`` (the job's defaults where not
    given, the rules of ``submit``), stopped once idle for ``idle`` (``idle_parse``). Its
    launcher gets ``args`` after the kind (VisualDL: what it shows). ``jobs`` names jobs of
    the user's it is about (VisualDL's), each checked. Every problem is a 400 naming its
    field; nothing is left of a start refused."""
    if kind not in KINDS:
        raise ValidationError.for_field("kind", f"one of {', '.join(KINDS)}, not {kind!r}")
    seconds = idle_parse(idle)
    name = _name(kind, name if isinstance(name, str) else "")
    if (problem := name_problem(name)) is not None:
        raise ValidationError.for_field("name", problem)
    shown = list(dict.fromkeys(jobs))
    known = set(Job.objects.filter(owner=user, datacenter=datacenter, name__in=shown)
                .values_list("name", flat=True))
    if missing := [job for job in shown if job not in known]:
        raise ValidationError.for_field("jobs", f"you have no job named {missing[0]!r} in "
                                                f"datacenter {datacenter.name!r}")
    if Job.objects.filter(owner=user, name=name).exists():
        raise ValidationError.for_field("name", name_taken(name))
    home = pfs_home(datacenter.name, user.username)
    package = f"{home}/jobs/{name}/{PACKAGE_DIR}"
    if not image and kind == "notebook":
        image = settings.PADDLECLOUD_NOTEBOOK_IMAGE  # empty: a job's default
    data = {"name": name, "package": package, "trainers": 1,
            "entry": shlex.join([*LAUNCHER, kind, *args]), "image": image or "",
            "env": env or {}}
    for field, value in (("cpu", cpu), ("memory", memory), ("gpu", gpu)):
        if value not in (None, ""):
            data[field] = value
    made = _package_make(user, datacenter, home, name)
    try:
        with transaction.atomic():
            job = job_submit(user, datacenter, data, session=kind).job
            token = token_bound(user, datacenter, session_api_token(settings.SECRET_KEY,
                                                                    job.uid),
                                name=f"{kind} {name}", expires_at=_token_expiry())
            session = Session.objects.create(job=job, kind=kind, idle_seconds=seconds,
                                             jobs=shown, api_token=token)
    except BaseException:
        if made:
            _package_remove(user, datacenter, made)
        raise
    return session


def _package_make(user, datacenter, home: str, name: str) -> str | None:
    """The session's package directory, made; what to remove should its start be refused
    (the job's directory, when it was made here; else None)."""
    top = f"{home}/jobs/{name}"
    try:
        pfs_mkdir(user, datacenter, f"{home}/jobs", parents=True)
        try:
            pfs_mkdir(user, datacenter, top)
            made = top
        except PaddleCloudError:  # it is there: an earlier job's of the name
            made = None
        pfs_mkdir(user, datacenter, f"{top}/{PACKAGE_DIR}", parents=True)
    except PaddleCloudError as exc:
        raise ValidationError.for_field(
            "name", f"cannot make the session's directory {top}/{PACKAGE_DIR}: "
                    f"{exc.message}") from None
    return made or f"{top}/{PACKAGE_DIR}"


def _package_remove(user, datacenter, path: str) -> None:
    try:
        pfs_remove(user, datacenter, path, recursive=True)
    except PaddleCloudError:
        logger.warning("could not remove %s after a refused session start", path)


def _token_expiry() -> datetime:
    return timezone.now() + timedelta(hours=TOKEN_HOURS)


def _sessions(user, datacenter):
    return (Session.objects.filter(job__owner=user, job__datacenter=datacenter)
            .select_related("job", "job__datacenter", "job__owner"))


def session_list(user, datacenter, *, kind: str | None = None, ended: bool = False):
    """The user's sessions in the datacenter, newest first: those that have not ended (with
    ``ended``, all whose jobs are still in the history); of one ``kind`` if given."""
    if kind and kind not in KINDS:
        raise ValidationError.for_field("kind", f"one of {', '.join(KINDS)}, not {kind!r}")
    found = _sessions(user, datacenter)
    if kind:
        found = found.filter(kind=kind)
    if not ended:
        found = found.exclude(job__state__in=FINAL_JOB_STATES)
    return found.order_by("-created_at", "-id")


def session_get(user, datacenter, name: str) -> Session:
    """One of the user's sessions; anything else (another's, a job that is no session) is
    not found."""
    session = _sessions(user, datacenter).filter(job__name=name).first()
    if session is None:
        raise NotFoundError(f"you have no session named {name!r} in datacenter "
                            f"{datacenter.name!r}")
    return session


def session_stop(user, datacenter, name: str) -> Session:
    """Stop a session (its job ends, ``killed``, with the reason ``stopped by USER``)."""
    session = session_get(user, datacenter, name)
    _stop(session, f"stopped by {user.username}")
    return session


def _stop(session: Session, reason: str) -> None:
    job = session.job
    if job.state in FINAL_JOB_STATES:
        raise ConflictError(f"session {job.name!r} has already ended ({job.state})",
                            code="job_ended")
    with transaction.atomic():
        job_transition(job, JobState.KILLED, reason)
        killed_stop([job])


def session_keep(user, datacenter, name: str, keep: bool = True) -> Session:
    """Keep a session alive however long it is idle (``keep``), or let its idle limit apply
    again (its idle time then runs from now). Said in its job's events."""
    session = session_get(user, datacenter, name)
    job = session.job
    if job.state in FINAL_JOB_STATES:
        raise ConflictError(f"session {job.name!r} has already ended ({job.state})",
                            code="job_ended")
    if session.kept == keep:
        return session
    with transaction.atomic():
        session.kept = keep
        session.active_at = timezone.now()
        session.save(update_fields=["kept", "active_at"])
        said = ("kept alive by {user}: not stopped when idle" if keep else
                "no longer kept by {user}: stopped once idle for {idle}")
        JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state,
                                reason=said.format(user=user.username,
                                                   idle=idle_shown(session.idle_seconds)))
    return session


def server_port(replica: Replica) -> int:
    """The port a session's server listens on: its replica's (``PADDLECLOUD_SESSION_PORT``,
    the port of its endpoint, which the portal gave it before it started)."""
    port = replica.endpoint.rpartition(":")[2]
    if not port.isdigit():
        raise BackendError(f"{replica.name} has no port yet: it has not started")
    return int(port)


def session_idle_at(session: Session) -> datetime | None:
    """When the session is stopped if it stays idle (None: it is kept, or not running)."""
    job = session.job
    if session.kept or job.state != JobState.RUNNING:
        return None
    since = max(filter(None, (session.active_at, job.started_at)))
    return since + timedelta(seconds=session.idle_seconds)


def session_ended(sender, owner_id=None, datacenter_id=None, job_ids=(), **kwargs) -> None:
    """Jobs ended (``jobs.signals.job_ended``, in their transaction): the API tokens of those
    that were sessions are revoked with them."""
    ApiToken.objects.filter(interactive_session__job_id__in=list(job_ids),
                            revoked_at__isnull=True).update(revoked_at=timezone.now())


# --- idle sessions -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Seen:
    """What a probe saw of a session: when it was last in use (None: not known), and why
    (for the event that stops it)."""

    active_at: datetime | None
    said: str


def sessions_idle_check(now: datetime | None = None) -> int:
    """Every running session: its token renewed, and, unless kept, when it was last in use
    asked (``PROBES``); one idle past its limit is stopped with an event saying so. Returns
    how many were stopped."""
    now = now or timezone.now()
    running = list(Session.objects.filter(job__state=JobState.RUNNING)
                   .select_related("job", "job__datacenter", "job__owner", "api_token"))
    renew = [s.api_token_id for s in running if s.api_token_id and not s.api_token.revoked_at
             and s.api_token.expires_at < now + timedelta(hours=TOKEN_HOURS) / 2]
    if renew:
        ApiToken.objects.filter(pk__in=renew, revoked_at__isnull=True).update(
            expires_at=now + timedelta(hours=TOKEN_HOURS))
    watched = [s for s in running if not s.kept]
    if not watched:
        return 0
    ids = [s.job_id for s in watched]
    trainers = {r.job_id: r for r in Replica.objects.filter(
        job_id__in=ids, role=Replica.Role.TRAINER, index=0)}
    looked = dict(ProxyRoute.objects.filter(job_id__in=ids).values("job_id")
                  .annotate(last=Max("last_seen")).values_list("job_id", "last"))
    seen = asyncio.run(_probe_all([Probe(s, backend_for(s.job.datacenter),
                                         trainers.get(s.job_id), looked.get(s.job_id))
                                   for s in watched]))
    stopped = 0
    for session, found in zip(watched, seen, strict=True):
        if found.active_at is not None and found.active_at > session.active_at:
            session.active_at = min(found.active_at, now)
            Session.objects.filter(pk=session.pk, active_at__lt=session.active_at).update(
                active_at=session.active_at)
        due = session_idle_at(session)
        if due is None or now < due:
            continue
        since = max(filter(None, (session.active_at, session.job.started_at)))
        reason = (f"stopped: idle for {idle_shown(int((now - since).total_seconds()))} "
                  f"({found.said}), past its idle limit of {idle_shown(session.idle_seconds)}")
        try:
            _stop(session, reason)
        except ConflictError:
            continue  # it ended meanwhile
        stopped += 1
    return stopped


@dataclass(frozen=True)
class Probe:
    """What the check asks about one session, read before it asks (no database meanwhile):
    its backend, its replica, when its routes last carried a request."""

    session: Session
    backend: object
    replica: Replica | None
    looked_at: datetime | None


async def _probe_all(probes: list[Probe]) -> list[Seen]:
    return await asyncio.gather(*(_probe(probe) for probe in probes))


async def _probe(probe: Probe) -> Seen:
    try:
        return await asyncio.wait_for(PROBES[probe.session.kind](probe), PROBE_SECONDS)
    except (BackendError, OSError, TimeoutError, ValueError) as exc:
        return Seen(None, f"its server did not answer: {exc or 'no answer in time'}")


async def _notebook_seen(probe: Probe) -> Seen:
    """A notebook's kernels (Jupyter's ``/api/kernels``, not counted as activity itself): in
    use now if one is busy (running code), else last active when the latest was (a kernel no
    page has connected to stays ``starting``: it runs nothing)."""
    job = probe.session.job
    if probe.replica is None:
        raise BackendError(f"job {job.name!r} has no trainer-0")
    token = session_token(settings.SECRET_KEY, job.uid)
    status, body = await http_request(probe.backend, job, probe.replica,
                                      server_port(probe.replica), "GET",
                                      "/api/kernels?no_track_activity=1",
                                      {"Authorization": f"token {token}"})
    if status != 200:
        raise ValueError(f"its server answered /api/kernels with {status}")
    kernels = json.loads(body)
    if not isinstance(kernels, list):
        raise ValueError("its server's /api/kernels is not a list")
    if any(k.get("execution_state") == "busy" for k in kernels):
        return Seen(timezone.now(), "a kernel is busy")
    gpus = ""
    if job.gpu:  # a GPU computing (a process the kernels started and left) is use too
        busy = await gpus_in_use(probe.backend, job, probe.replica)
        if busy:
            return Seen(timezone.now(), "its GPUs are in use")
        gpus = ", its GPUs unused" if busy is False else ", its GPUs' use not known"
    if not kernels:
        return Seen(None, f"no kernel running{gpus}")
    times = [t for t in (parse_datetime(k.get("last_activity") or "") for k in kernels) if t]
    return Seen(max(times) if times else None,
                f"{len(kernels)} kernel{'s' * (len(kernels) != 1)}, none busy{gpus}")


GPU_QUERY = ("nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits")


async def gpus_in_use(backend, job, replica) -> bool | None:
    """Whether a GPU the replica sees is computing now: ``nvidia-smi``, run in the replica as
    it runs (``Backend.exec_open``), gives one a utilisation above 0 %. None when it cannot
    tell (no ``nvidia-smi`` there, it failed, or said nothing it reads)."""
    try:
        process = await backend.exec_open(job, replica, list(GPU_QUERY), tty=False)
    except BackendError:
        return None
    said = b""
    try:
        while True:
            stream, data = await process.read()
            if not data:
                break
            if stream == process.STDOUT and len(said) < MAX_ANSWER:
                said += data
        status = await process.wait()
    finally:
        await process.close()
    percents = [line.strip() for line in said.decode(errors="replace").splitlines()]
    if status != 0 or not percents or not all(p.isdigit() for p in percents):
        return None
    return any(int(p) > 0 for p in percents)


async def _visualdl_seen(probe: Probe) -> Seen:
    """VisualDL: when its routes last carried a request (``ProxyRoute.last_seen``)."""
    return Seen(probe.looked_at, "nobody looked at it")


PROBES = {"notebook": _notebook_seen, "visualdl": _visualdl_seen}
