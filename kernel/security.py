"""HTTP hardening that Django does not do by itself.

- ``ContentSecurityPolicyMiddleware``: the pages' Content-Security-Policy (settings), on
  every HTML answer.
- ``security_headers``: what Django's security middlewares add to an answer, for the answers
  made before Django (the PFS byte streams), so that both send the same.
- ``BodyLimitMiddleware``: a request body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused (413)
  before anything reads it, where Django would answer 400 and log an error.
- ``websocket_origin_allowed``: a WebSocket handshake is judged by its Origin as Django's
  CSRF check judges a form's.
- ``ForwardedHeaders``: X-Forwarded-For and X-Forwarded-Proto are believed from the trusted
  proxies' addresses only, and dropped from everyone else's requests.
"""

from __future__ import annotations

import functools
import io
import ipaddress

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.deprecation import MiddlewareMixin

from paddlecloud_core.contract import RELAY_SOURCE_ADDRESS

from .errors import request_too_large


def no_view(request):
    """The ``get_response`` of a Django middleware used for one of its methods alone."""
    return None


def asgi_request(scope) -> ASGIRequest:
    """Django's request for an ASGI scope, without its body: a WebSocket handshake as the
    GET it is (ws as http, wss as https)."""
    if scope["type"] == "websocket":
        scheme = "https" if scope.get("scheme") == "wss" else "http"
        scope = {**scope, "type": "http", "method": "GET", "scheme": scheme}
    return ASGIRequest(scope, io.BytesIO())


def websocket_origin_allowed(scope) -> bool:
    """Whether a WebSocket handshake comes from a page of this site: its Origin is the site's
    own (scheme, host and port: the handshake's Host, which must be in ALLOWED_HOSTS; https
    for wss, also when a trusted proxy's X-Forwarded-Proto says so: ``ForwardedHeaders``) or one of
    CSRF_TRUSTED_ORIGINS. Django's CSRF check judges the Origin of a form the same way; this
    is that check (a private method of Django's, pinned by tests/test_websocket_origin.py).
    A handshake without an Origin is not from a browser's page and is refused too."""
    request = asgi_request(scope)
    if "HTTP_ORIGIN" not in request.META:
        return False
    return CsrfViewMiddleware(no_view)._origin_verified(request)


def content_security_policy(path: str) -> str:
    """The policy of the page at ``path``: PADDLECLOUD_CSP, with the directives of the
    PADDLECLOUD_CSP_EXCEPTIONS entry whose path prefix it starts with in their stead."""
    policy = dict(settings.PADDLECLOUD_CSP)
    for prefix, directives in settings.PADDLECLOUD_CSP_EXCEPTIONS.items():
        if path.startswith(prefix):
            policy.update(directives)
    return "; ".join(f"{name} {value}" for name, value in policy.items())


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Every HTML answer gets its page's policy, unless it has one of its own. (With DEBUG on,
    error answers go without: Django's debug pages are made of inline styles and scripts.)"""

    def process_response(self, request, response):
        if (response.get("Content-Type", "").startswith("text/html")
                and "Content-Security-Policy" not in response
                and not (settings.DEBUG and response.status_code >= 400)):
            response["Content-Security-Policy"] = content_security_policy(request.path)
        return response


def security_headers(request) -> dict[str, str]:
    """The headers Django's SecurityMiddleware and XFrameOptionsMiddleware give an answer to
    ``request`` (X-Content-Type-Options, Referrer-Policy, Cross-Origin-Opener-Policy,
    X-Frame-Options; Strict-Transport-Security over HTTPS), asked of them: one source of
    truth for the answers Django makes and those made before it."""
    response = HttpResponse()
    del response["Content-Type"]
    SecurityMiddleware(no_view).process_response(request, response)
    XFrameOptionsMiddleware(no_view).process_response(request, response)
    return dict(response.items())


def https_redirect(request) -> HttpResponse | None:
    """The redirect to HTTPS that Django's SecurityMiddleware answers (SECURE_SSL_REDIRECT), if
    this request gets one."""
    return SecurityMiddleware(no_view).process_request(request)


class BodyLimitMiddleware(MiddlewareMixin):
    """413 for a body over DATA_UPLOAD_MAX_MEMORY_SIZE, in the API's error shape under /api/
    and as a page elsewhere. Every body counts, files in a multipart form too (Django's own
    limit leaves those out): no page of the portal takes files in a form, uploads go to the
    PFS byte streams, which are answered before Django."""

    def process_request(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        length = request.META.get("CONTENT_LENGTH") or ""
        if limit is not None and length.isascii() and length.isdigit() and int(length) > limit:
            return request_too_large(request)
        return None


@functools.lru_cache(maxsize=8)
def _proxy_networks(addresses: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(address, strict=False) for address in addresses)


def proxy_trusted(peer: str | None) -> bool:
    """Whether the connection's peer is one of the proxies in front (TRUSTED_PROXIES, from an
    address of TRUSTED_PROXY_ADDRESSES) — never a job's relay, whose traffic is a job's."""
    if not settings.TRUSTED_PROXIES or not peer:
        return False
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    if address == ipaddress.ip_address(RELAY_SOURCE_ADDRESS):
        return False
    return any(address in network
               for network in _proxy_networks(tuple(settings.TRUSTED_PROXY_ADDRESSES)))


def _header(headers, name: bytes) -> str:
    """A header's values, joined as one list (a proxy may add its own line)."""
    return ",".join(value.decode("latin-1") for key, value in headers if key == name)


def forwarded_scope(scope: dict) -> dict:
    """The request as the app is to see it. From a trusted proxy (``proxy_trusted``): the
    client is the address the TRUSTED_PROXIES-th proxy from here had the request from (in
    X-Forwarded-For), the scheme what the nearest says (X-Forwarded-Proto). From anyone else:
    without any X-Forwarded-* header, which they could have made up, so nothing behind
    (Django, the throttling of logins, the byte streams) can believe one."""
    headers = scope.get("headers") or []
    if not any(key.startswith(b"x-forwarded-") for key, _ in headers):
        return scope
    peer = (scope.get("client") or (None,))[0]
    if not proxy_trusted(peer):
        return {**scope, "headers": [(key, value) for key, value in headers
                                     if not key.startswith(b"x-forwarded-")]}
    scope = dict(scope)
    hops = [hop.strip() for hop in _header(headers, b"x-forwarded-for").split(",")]
    hops = [hop for hop in hops if hop]
    if hops:
        scope["client"] = (hops[-min(settings.TRUSTED_PROXIES, len(hops))], 0)
    proto = _header(headers, b"x-forwarded-proto").split(",")[-1].strip().lower()
    if proto in ("http", "https"):
        secure = proto == "https"
        scope["scheme"] = ("wss" if secure else "ws") if scope["type"] == "websocket" else proto
    return scope


class ForwardedHeaders:
    """The outermost part of the ASGI app: every HTTP request and WebSocket handshake passes
    ``forwarded_scope`` first (the server's own proxy handling is off: runportal)."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            scope = forwarded_scope(scope)
        return await self.application(scope, receive, send)
