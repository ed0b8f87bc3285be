"""Routes: a browser's way to one port of a running replica, through the portal's proxy
(``interactive.proxy``), at an origin of its own: ``{key}.{PADDLECLOUD_SESSIONS_DOMAIN}``.

- ``route_open`` makes one (the job's owner, or an admin); ``route_enter_url`` is where the
  portal sends the browser: the route's ``/_paddlecloud/enter`` with a one-time ticket (valid
  ``TICKET_SECONDS``, used once) and the path to land on.
- Entering (``ticket_take``) gives the browser the route's own cookie (``cookie_make``): signed,
  bound to the user, the route and the user's password (a new password ends it), valid
  ``COOKIE_SECONDS``. The portal's own cookies never reach a route's origin (they are host-only
  on the portal's host), and the route's never reaches the portal.
- Every request through the proxy is checked again (``route_pass``): the cookie, the route,
  the user still the job's owner or an admin, the job still running. Anyone else is told the
  route does not exist.
- A route ends with its job (``job_ended_routes_end``). Its upstream headers (a session's
  token) are encrypted with the credential keys and never shown.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from accounts.audit import audit_record
from accounts.models import AuditEntry
from jobs.models import Job, Replica
from jobs.services import job_worker
from jobs.states import JobState
from kernel.errors import ConflictError, NotFoundError, ValidationError
from registries import crypto

from .models import ProxyRoute

KEY_LENGTH = 20  # [a-z0-9]: ~103 bits
KEY_ALPHABET = string.ascii_lowercase + string.digits
TICKET_SECONDS = 60
COOKIE_SECONDS = 12 * 3600
COOKIE_NAME = "paddlecloud_route"
SEEN_EVERY = timedelta(seconds=10)  # ``last_seen`` is written at most this often
ENTER_PATH = "/_paddlecloud/enter"
_TICKETS = "interactive:ticket:"
_SALT = "interactive.route"


def _may_reach(user, job) -> bool:
    """Whether ``user`` may reach the job's ports: its owner, or an admin."""
    return user.is_active and (job.owner_id == user.pk or user.is_staff)


def port_check(port) -> int:
    """A TCP port number, or ValidationError naming the field."""
    try:
        port = int(port)
    except (TypeError, ValueError):
        port = 0
    if not 1 <= port <= 65535:
        raise ValidationError.for_field("port", "a TCP port: a number from 1 to 65535")
    return port


def job_reachable(user, job) -> None:
    """NotFoundError unless ``user`` may reach the job's ports; ConflictError (saying so)
    unless it runs."""
    if not _may_reach(user, job):
        raise NotFoundError(f"you have no job named {job.name!r}")
    if job.state != JobState.RUNNING:
        raise ConflictError(f"job {job.name!r} is {job.state}, not running: only a running "
                            "job's ports can be reached", code="job_not_running")


def route_open(user, job: Job, *, port: int, replica: Replica | None = None,
               headers: dict[str, str] | None = None, label: str = "",
               purpose: str = "") -> ProxyRoute:
    """A route for ``user`` to ``port`` of the job's ``replica`` (its first trainer by
    default), adding ``headers`` to every request sent there (never shown). The user's route
    there already, if they have one with the same headers and purpose. The job must run, and
    be the user's (or the user an admin)."""
    port = port_check(port)
    job_reachable(user, job)
    replica = replica or job_worker(job, None, building=False)
    headers = {str(k): str(v) for k, v in (headers or {}).items()}
    for route in ProxyRoute.objects.filter(owner=user, job=job, replica=replica, port=port,
                                           purpose=purpose):
        if route_headers(route) == headers:
            return route
    route = ProxyRoute.objects.create(
        key="".join(secrets.choice(KEY_ALPHABET) for _ in range(KEY_LENGTH)),
        owner=user, datacenter=job.datacenter, job=job, replica=replica, port=port,
        headers_encrypted=crypto.encrypt(json.dumps(headers)) if headers else None,
        purpose=purpose, label=label[:200])
    audit_record(user, AuditEntry.Action.PORT_OPEN, f"{job.owner.username}/{job.name}",
                 datacenter=job.datacenter, whose=job.owner, worker=replica.name, port=port,
                 route=route.key, purpose=purpose)
    return route


def route_headers(route: ProxyRoute) -> dict[str, str]:
    """What the route adds to every request it sends upstream (decrypted)."""
    if not route.headers_encrypted:
        return {}
    return json.loads(crypto.decrypt(bytes(route.headers_encrypted)))


def route_host(route: ProxyRoute, portal_host: str) -> str:
    """The route's host (and port): its key under PADDLECLOUD_SESSIONS_DOMAIN, with the
    portal's port (``portal_host``, as the browser reached the portal) unless the domain names
    one."""
    domain = settings.PADDLECLOUD_SESSIONS_DOMAIN
    port = re.fullmatch(r"(?:\[[^]]*\]|[^:]*):(\d+)", portal_host)
    if ":" not in domain and port:
        domain = f"{domain}:{port[1]}"
    return f"{route.key}.{domain}"


def route_origin(route: ProxyRoute, request) -> str:
    """The route's origin, as the browser that made ``request`` to the portal reaches it."""
    return f"{request.scheme}://{route_host(route, request.get_host())}"


def safe_next(path: str | None) -> str:
    """A path on the route's own origin to land on ("/" for anything else)."""
    path = path or "/"
    if not path.startswith("/") or path.startswith(("//", "/\\")) or any(
            ord(c) < 0x20 for c in path):
        return "/"
    return path


def route_enter_url(route: ProxyRoute, request, path: str = "/") -> str:
    """Where the portal sends ``request``'s browser to enter the route: its origin's
    ``/_paddlecloud/enter`` with a one-time ticket for ``request.user``, to land on ``path``."""
    ticket = secrets.token_urlsafe(24)
    cache.set(_TICKETS + ticket, [route.key, request.user.pk], TICKET_SECONDS)
    query = urlencode({"ticket": ticket, "next": safe_next(path)})
    return f"{route_origin(route, request)}{ENTER_PATH}?{query}"


@dataclass(frozen=True)
class Pass:
    """A request let through to its route: the route (its job and replica with it), the
    headers it adds."""

    route: ProxyRoute
    headers: dict[str, str]


def _route(key: str) -> ProxyRoute | None:
    return (ProxyRoute.objects.select_related("job", "job__datacenter", "job__owner",
                                              "replica", "owner")
            .filter(key=key).first())


def _passes(route: ProxyRoute | None, user_id) -> bool:
    return (route is not None and route.owner_id == user_id
            and _may_reach(route.owner, route.job) and route.job.state == JobState.RUNNING)


def ticket_take(key: str, ticket: str) -> str | None:
    """The route's cookie for the user a ticket was given to, if the ticket is one for this
    route, not used and not expired (it is used up now, whatever the answer); else None."""
    if not ticket or len(ticket) > 100:
        return None
    held = cache.get(_TICKETS + ticket)
    if not held or not cache.delete(_TICKETS + ticket):  # another took it first
        return None
    route_key, user_id = held
    route = _route(key)
    if route_key != key or not _passes(route, user_id):
        return None
    return signing.dumps({"r": key, "u": user_id, "h": route.owner.get_session_auth_hash()},
                         salt=_SALT)


def route_pass(key: str, cookie: str | None) -> Pass | None:
    """The route if ``cookie`` (the route's own) lets its bearer through now; else None."""
    if not cookie:
        return None
    try:
        held = signing.loads(cookie, salt=_SALT, max_age=COOKIE_SECONDS)
    except signing.BadSignature:
        return None
    if not isinstance(held, dict) or held.get("r") != key:
        return None
    route = _route(key)
    if not _passes(route, held.get("u")) or not constant_time_compare(
            str(held.get("h")), route.owner.get_session_auth_hash()):
        return None
    route_seen(route)
    return Pass(route=route, headers=route_headers(route))


def route_seen(route: ProxyRoute) -> None:
    """Traffic passed the route now (written at most every ``SEEN_EVERY``)."""
    now = timezone.now()
    if now - route.last_seen >= SEEN_EVERY:
        ProxyRoute.objects.filter(pk=route.pk, last_seen__lt=now - SEEN_EVERY).update(
            last_seen=now)
        route.last_seen = now


def route_rotate_keys() -> int:
    """Every route's headers encrypted again with the newest credential key
    (``rotate_credential_keys``); how many."""
    return crypto.rows_rotate(ProxyRoute, "headers_encrypted")


def job_ended_routes_end(sender, job_ids, **kwargs) -> None:
    """``jobs.signals.job_ended``: the ended jobs' routes go (nothing passes them any more)."""
    ProxyRoute.objects.filter(job_id__in=job_ids).delete()


def port_forward_audit(user, job: Job, replica: Replica, port: int) -> None:
    """The audit entry of a port forwarded (``paddlectl port-forward``)."""
    audit_record(user, AuditEntry.Action.PORT_FORWARD, f"{job.owner.username}/{job.name}",
                 datacenter=job.datacenter, whose=job.owner, worker=replica.name, port=port)
