"""Errors users can act on, and the one JSON shape every API error takes.

Services raise a ``PaddleCloudError`` subclass; views never build error bodies by hand. Every
error answer of the API is::

    {"code": "not_a_member", "message": "datacenter: you are not a member of 'dc2'",
     "fields": {"datacenter": ["you are not a member of 'dc2'"]}}

``code`` is stable and machine-readable, ``message`` is one line a user can act on (it names
the field and the rule), ``fields`` maps each offending field to its messages.

An outage of PostgreSQL or Redis is never a 500: whatever it breaks answers 503 with
``Retry-After`` (``outage``; the API in this shape with code ``unavailable``, the pages with
a page of their own: ``OutageMiddleware``, ``handler500``), and a full file system is 507.
"""

from __future__ import annotations

import errno
import logging
import sys
import uuid

import redis.exceptions
from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpResponse, JsonResponse
from django.views.csrf import csrf_failure as django_csrf_failure
from django.views.defaults import ERROR_PAGE_TEMPLATE, bad_request, page_not_found, server_error
from kombu.exceptions import OperationalError as BrokerError
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

from paddlecloud_core.errors import causes
from paddlecloud_core.quantity import format_bytes

logger = logging.getLogger(__name__)


class PaddleCloudError(Exception):
    """Base of every error a user can act on: a code, an HTTP status, a message, fields."""

    code = "error"
    status = 400

    def __init__(self, message: str, *, fields: dict[str, list[str]] | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}
        if code:
            self.code = code

    @classmethod
    def for_field(cls, field: str, message: str, **kwargs) -> PaddleCloudError:
        """An error about one field: the message names it, ``fields`` carries it."""
        return cls(f"{field}: {message}", fields={field: [message]}, **kwargs)


class ValidationError(PaddleCloudError):
    code = "invalid"
    status = 400


class AuthenticationError(PaddleCloudError):
    code = "not_authenticated"
    status = 401


class ForbiddenError(PaddleCloudError):
    code = "permission_denied"
    status = 403


class NotFoundError(PaddleCloudError):
    code = "not_found"
    status = 404


class ConflictError(PaddleCloudError):
    code = "conflict"
    status = 409


class LengthRequiredError(PaddleCloudError):
    code = "length_required"
    status = 411


class TooLargeError(PaddleCloudError):
    code = "too_large"
    status = 413


class RangeNotSatisfiableError(PaddleCloudError):
    """A ``Range`` outside the file; ``size`` goes into ``Content-Range: bytes */size``."""

    code = "range_not_satisfiable"
    status = 416

    def __init__(self, message: str, *, size: int, **kwargs):
        super().__init__(message, **kwargs)
        self.size = size


class UnprocessableError(PaddleCloudError):
    """Well-formed, but the content is wrong (e.g. a checksum that does not match)."""

    code = "unprocessable"
    status = 422


class ThrottledError(PaddleCloudError):
    code = "throttled"
    status = 429

    def __init__(self, message: str, *, retry_after: int, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class UnavailableError(PaddleCloudError):
    """A service the request needs is down (the database, Redis): try again shortly."""

    code = "unavailable"
    status = 503
    retry_after = 5  # seconds: a restart, a failover


class StorageFullError(PaddleCloudError):
    code = "storage_full"
    status = 507


# What each outage says, by the errors its clients raise: the database's (a refused or lost
# connection, a pool with none to give), Redis's as the cache, the channel layer and the
# Celery broker (kombu's wraps redis-py's) meet it.
DATABASE_DOWN = (OperationalError, InterfaceError)
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, BrokerError)
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def outage(exc: BaseException) -> UnavailableError | None:
    """The 503 that ``exc`` (or an error behind it) calls for when it says the database or
    Redis is unreachable; None for any other error (an error of ours is an answer already,
    whatever it was raised while handling)."""
    if isinstance(exc, PaddleCloudError):
        return None
    for cause in causes(exc):
        if isinstance(cause, DATABASE_DOWN):
            return UnavailableError("the database is unavailable")
        if isinstance(cause, REDIS_DOWN):
            return UnavailableError("the queue is unavailable")
        if isinstance(cause, DatabaseError):  # a query's own error (an IntegrityError …)
            return None
    return None


def storage_full(exc: BaseException) -> StorageFullError | None:
    """The 507 for an ``OSError`` saying the file system (or its quota) is full (PFS's
    storage says it where it writes; any other such error is answered the same)."""
    if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
        return StorageFullError("the file service is full")
    return None


def body_too_large() -> TooLargeError:
    """A request body over DATA_UPLOAD_MAX_MEMORY_SIZE, the most the portal reads whole (the
    PFS byte streams, which it does not, have limits of their own)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return TooLargeError.for_field(
        "body", f"the request body is over the limit of {limit} bytes ({format_bytes(limit)})")


def error_body(code: str, message: str, fields: dict | None = None) -> dict:
    return {"code": code, "message": message, "fields": fields or {}}


def _flatten(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as ``{"a.b": ["msg", ...]}``."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            out.update(_flatten(value, name))
    elif isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            out[prefix] = [str(item) for item in detail]
        else:
            for index, item in enumerate(detail):
                out.update(_flatten(item, f"{prefix}[{index}]" if prefix else str(index)))
    else:
        out[prefix] = [str(detail)]
    return out


def _validation_body(exc: drf.ValidationError) -> dict:
    fields = _flatten(exc.detail)
    general = fields.pop("non_field_errors", []) + fields.pop("", [])
    parts = list(general) + [f"{name}: {msgs[0]}" for name, msgs in fields.items()]
    message = "; ".join(parts) or "invalid request"
    return error_body("invalid", message, fields)


_DRF_CODES = {
    drf.ParseError: "malformed_request",
    drf.NotAuthenticated: "not_authenticated",
    drf.AuthenticationFailed: "authentication_failed",
    drf.PermissionDenied: "permission_denied",
    drf.NotFound: "not_found",
    drf.MethodNotAllowed: "method_not_allowed",
    drf.NotAcceptable: "not_acceptable",
    drf.UnsupportedMediaType: "unsupported_media_type",
    drf.Throttled: "throttled",
}


def render_error(exc, context=None) -> tuple[int, dict, dict[str, str]]:
    """Any exception as (status, body, headers) in the one shape; unexpected ones are logged
    with a reference and answered without details."""
    headers: dict[str, str] = {}
    exc = outage(exc) or storage_full(exc) or exc
    if isinstance(exc, RequestDataTooBig):
        exc = body_too_large()
    elif isinstance(exc, DisallowedHost):
        exc = ValidationError.for_field(
            "Host", "not a name this portal answers to (ALLOWED_HOSTS)", code="disallowed_host")
    if isinstance(exc, PaddleCloudError):
        body = error_body(exc.code, exc.message, exc.fields)
        status = exc.status
        if isinstance(exc, ThrottledError | UnavailableError):
            headers["Retry-After"] = str(exc.retry_after)
        if isinstance(exc, UnavailableError):
            logger.warning("%s: %s", _view_name(context), exc.message)
        if isinstance(exc, RangeNotSatisfiableError):
            headers["Content-Range"] = f"bytes */{exc.size}"
    elif isinstance(exc, Http404):
        body, status = error_body("not_found", "not found"), 404
    elif isinstance(exc, DjangoPermissionDenied):
        body, status = error_body("permission_denied", "permission denied"), 403
    elif isinstance(exc, drf.ValidationError):
        body, status = _validation_body(exc), 400
    elif isinstance(exc, drf.APIException):
        # A code given where the exception was raised (``code="token_expired"``) wins.
        given = getattr(exc.detail, "code", None)
        code = given if given and given != exc.default_code else None
        code = code or next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), None)
        code = code or str(exc.default_code)
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if isinstance(exc, drf.ParseError):
            detail = f"request body is not valid JSON: {detail.removeprefix('JSON parse error - ')}"
        body, status = error_body(code, str(detail)), exc.status_code
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
    else:
        reference = uuid.uuid4().hex[:12]
        logger.error("unhandled error in %s (reference %s)", _view_name(context), reference,
                     exc_info=exc)
        body = error_body(
            "server_error",
            f"internal error (reference {reference}); the administrators can find it in the logs",
        )
        status = 500
    return status, body, headers


def exception_handler(exc, context):
    """DRF's EXCEPTION_HANDLER: every error, expected or not, in the one shape."""
    status, body, headers = render_error(exc, context)
    set_rollback()
    return Response(body, status=status, headers=headers)


def _view_name(context) -> str:
    if isinstance(context, str):
        return context
    view = context.get("view") if context else None
    return type(view).__name__ if view is not None else "?"


# Django-level handlers, for requests Django refuses (400: a Host not in ALLOWED_HOSTS, say),
# URLs no API view answers (404) and failures outside DRF (500). Under /api/ they answer in
# the JSON shape; elsewhere Django's pages.


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def handler400(request, exception=None):
    if _is_api(request):
        if isinstance(exception, DisallowedHost | RequestDataTooBig):
            status, body, _headers = render_error(exception)
            return JsonResponse(body, status=status)
        return JsonResponse(error_body("bad_request", "bad request"), status=400)
    return bad_request(request, exception)


def handler404(request, exception=None):
    if _is_api(request):
        return JsonResponse(error_body("not_found", f"no API endpoint at {request.path}"),
                            status=404)
    return page_not_found(request, exception)


def handler500(request):
    # Called while the exception is handled (from a middleware or anywhere outside a view).
    unavailable = outage(sys.exc_info()[1] or Exception())
    if unavailable is not None:
        return unavailable_response(request, unavailable)
    if _is_api(request):
        return JsonResponse(error_body("server_error", "internal error"), status=500)
    return server_error(request)


def unavailable_response(request, error: UnavailableError) -> HttpResponse:
    """The 503 of an outage: the API's JSON shape under /api/, a page elsewhere."""
    if _is_api(request):
        response = JsonResponse(error_body(error.code, error.message), status=503)
    else:
        message = f"{error.message[0].upper()}{error.message[1:]}"
        response = HttpResponse(ERROR_PAGE_TEMPLATE % {
            "title": "Service Unavailable (503)",
            "details": f"{message} for a moment: try again in a few seconds.",
        }, status=503)
    response["Retry-After"] = str(error.retry_after)
    return response


class OutageMiddleware:
    """A view (a page, or an API view outside DRF) that fails because the database or Redis is
    down answers 503 with Retry-After, not 500. (DRF's views answer through
    ``exception_handler``; failures outside any view, through ``handler500``.)"""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        unavailable = outage(exception)
        if unavailable is None:
            return None
        logger.warning("%s: %s", request.path, unavailable.message)
        return unavailable_response(request, unavailable)


def request_too_large(request):
    """The answer to a body over the limit (kernel.security refuses it before any view)."""
    error = body_too_large()
    if _is_api(request):
        return JsonResponse(error_body(error.code, error.message, error.fields), status=413)
    rule = error.fields["body"][0]
    return HttpResponse(ERROR_PAGE_TEMPLATE % {
        "title": "Request Entity Too Large (413)",
        "details": f"{rule[0].upper()}{rule[1:]}: go back and send less at once.",
    }, status=413)


def csrf_failure(request, reason=""):
    if _is_api(request):
        return JsonResponse(
            error_body("csrf_failed", f"CSRF check failed: {reason}; send the X-CSRFToken header "
                       "or authenticate with a token"),
            status=403,
        )
    return django_csrf_failure(request, reason)
