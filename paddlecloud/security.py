"""HTTP hardening that Django does not do by itself.

- ``BodyLimitMiddleware``: a request body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused (413)
  before anything reads it, where Django would answer 400 and log an error.
- ``websocket_origin_allowed``: a WebSocket handshake is judged by its Origin as Django's
  CSRF check judges a form's.
"""

from __future__ import annotations

import io

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.deprecation import MiddlewareMixin

from .errors import request_too_large


def _nothing(request):  # the middlewares below are used for one method each
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
    for wss, or behind TRUSTED_PROXIES when X-Forwarded-Proto says so) or one of
    CSRF_TRUSTED_ORIGINS. Django's CSRF check judges the Origin of a form the same way; this
    is that check (a private method of Django's, pinned by tests/test_websocket_origin.py).
    A handshake without an Origin is not from a browser's page and is refused too."""
    request = asgi_request(scope)
    if "HTTP_ORIGIN" not in request.META:
        return False
    return CsrfViewMiddleware(_nothing)._origin_verified(request)


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
