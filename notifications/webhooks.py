"""Webhooks: where they may point, how they are signed, and one POST.

**Where.** A webhook is a request the portal makes on a user's behalf, so it must not become a
way into the portal's own network (SSRF): its URL's host is resolved and every address it has
must be a public one, or in ``PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS`` (the administrator's
list, e.g. ``10.1.2.0/24`` for a chat server inside), when the subscription is made and again
at each sending; the request goes to the address checked (a name that resolves elsewhere the
second time is not followed), redirects are not followed.

**Signed** as Stripe and GitHub do: ``PaddleCloud-Signature: t=TIMESTAMP,v1=HEX``, HEX the
HMAC-SHA256, keyed with the subscription's secret, of ``TIMESTAMP.BODY``; a receiver checks
it and refuses a timestamp older than a few minutes (a replay). ``PaddleCloud-Notification-Id``
is the notification's id, the same at each attempt: a receiver drops one it has seen.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
import ssl
from urllib.parse import urlsplit

import urllib3
from django.conf import settings

SIGNATURE_HEADER = "PaddleCloud-Signature"
ID_HEADER = "PaddleCloud-Notification-Id"
EVENT_HEADER = "PaddleCloud-Event"
TIMEOUT_SECONDS = 10
URL_MAX = 2000


class DestinationError(Exception):
    """A webhook's URL the portal will not send to, and why (in words)."""


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``PaddleCloud-Signature`` header's value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def _allowed_networks():
    return [ipaddress.ip_network(n, strict=False)
            for n in settings.PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS]


def destination(url: str) -> tuple[str, str, int, str]:
    """The URL's scheme, host, port and the address to send to, checked; DestinationError
    says what is wrong."""
    if not isinstance(url, str) or not url:
        raise DestinationError("required: the webhook's URL, e.g. https://hooks.example.com/x")
    if len(url) > URL_MAX:
        raise DestinationError(f"at most {URL_MAX} characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DestinationError(f"{url!r} is not an http:// or https:// URL")
    if parts.username or parts.password:
        raise DestinationError("may not carry a user name or password (put a token in the "
                               "path, or rely on the signature)")
    if parts.scheme == "http" and not settings.PADDLECLOUD_WEBHOOK_ALLOW_HTTP:
        raise DestinationError("must be https:// (the administrator allows plain http:// with "
                               "PADDLECLOUD_WEBHOOK_ALLOW_HTTP)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationError(f"{url!r} has no valid port") from None
    try:
        found = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise DestinationError(f"host {parts.hostname!r} does not resolve") from None
    addresses = sorted({info[4][0] for info in found})
    allowed = _allowed_networks()
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])
        if any(ip in network for network in allowed):
            continue
        if not ip.is_global:
            raise DestinationError(
                f"host {parts.hostname!r} is at {ip}, an address of a private or reserved "
                "network, where webhooks may not go (the administrator allows networks with "
                "PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS)")
    return parts.scheme, parts.hostname, port, addresses[0]


def webhook_post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST ``body`` to ``url`` at the address its check found; the response's status.
    Raises DestinationError or an OSError/urllib3 error (the attempt failed)."""
    scheme, host, port, address = destination(url)
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = host if port in (80, 443) else f"{host}:{port}"
    if scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            address, port, server_hostname=host, assert_hostname=host,
            ssl_context=ssl.create_default_context(), timeout=TIMEOUT_SECONDS, retries=False)
    else:
        pool = urllib3.HTTPConnectionPool(address, port, timeout=TIMEOUT_SECONDS,
                                          retries=False)
    with pool:
        response = pool.urlopen("POST", path, body=body, redirect=False,
                                headers={**headers, "Host": host_header,
                                         "Content-Type": "application/json",
                                         "User-Agent": "PaddleCloud-Webhook"})
        return response.status


def slack_body(payload: dict) -> dict:
    """The payload as Slack's and Mattermost's incoming webhooks take it."""
    return {"text": payload["text"]}


def body_of(payload: dict, format: str) -> bytes:
    data = slack_body(payload) if format == "slack" else payload
    return json.dumps(data, sort_keys=True).encode()
