"""Input the database cannot store is a 400 that names the field, never a 500.

PostgreSQL refuses the NUL character in any text (psycopg will not even send it), and no
column holds a whole number past a signed 64-bit one. Neither is ever meaningful in a field of
the portal — an environment value, an entry, a name, a PFS path, a password — so they are
refused where every input comes in, before any rule of a field is applied:

- a JSON body (``kernel.parsers.JSONParser``, and the master's calls answered before
  Django, ``jobs.master.app``): every key and string, every whole number, however deep;
- a request's path and query parameters, for every page, API view and WebSocket
  (``UnstorableInputMiddleware``; ``kernel.before_django`` and ``jobs.consumers`` for
  what is answered outside Django's middleware);
- a form's fields: Django's forms refuse NUL themselves (``ProhibitNullCharactersValidator``).

A narrower column (a 32-bit count, say) is the field's own rule to bound (``paddlecloud_core
.spec.INTEGERS``, the master's ``trainer``).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponseBadRequest, JsonResponse
from django.utils.deprecation import MiddlewareMixin
from django.utils.html import escape
from django.views.defaults import ERROR_PAGE_TEMPLATE

from .errors import ValidationError, error_body

NUL_RULE = "must not contain the NUL character (\\u0000)"
WHOLE_MAX = 2**63 - 1
WHOLE_RULE = f"a whole number from {-WHOLE_MAX - 1} to {WHOLE_MAX}"


def _problem(value: Any, field: str) -> tuple[str, str] | None:
    """The first (field, rule) of ``value`` the database could not store, or None."""
    if isinstance(value, str):
        return (field, NUL_RULE) if "\x00" in value else None
    if isinstance(value, int) and not isinstance(value, bool):
        return None if -WHOLE_MAX - 1 <= value <= WHOLE_MAX else (field, WHOLE_RULE)
    if isinstance(value, dict):
        for key, item in value.items():
            key = str(key)
            if "\x00" in key:
                return (field or "body", f"its names {NUL_RULE}")
            found = _problem(item, f"{field}.{key}" if field else key)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _problem(item, f"{field}[{index}]" if field else f"[{index}]")
            if found:
                return found
    return None


def storable(data: Any, field: str = "") -> Any:
    """``data`` (parsed JSON) as it came, or the 400 naming the first field in it the
    database could not store (``env.API_KEY``, ``entry``, ``trainer``)."""
    found = _problem(data, field)
    if found:
        raise ValidationError.for_field(found[0] or "body", found[1], code="unstorable")
    return data


def request_problem(request) -> ValidationError | None:
    """What in a request's path or query parameters the database could not store (the 400
    naming ``path`` or the parameter), or None. For any Django request, ASGI's (a WebSocket
    handshake's too, ``security.asgi_request``) and WSGI's alike."""
    if "\x00" in request.path:
        return ValidationError.for_field("path", NUL_RULE, code="unstorable")
    for name, values in request.GET.lists():
        if "\x00" in name:
            return ValidationError.for_field("query", f"its names {NUL_RULE}",
                                             code="unstorable")
        if any("\x00" in value for value in values):
            return ValidationError.for_field(name, NUL_RULE, code="unstorable")
    return None


class UnstorableInputMiddleware(MiddlewareMixin):
    """A path or query parameter with a NUL is a 400: in the API's error shape under /api/,
    as a page elsewhere. (Bodies are judged by the parsers and forms that read them.)"""

    def process_request(self, request):
        error = request_problem(request)
        if error is None:
            return None
        if request.path.startswith("/api/"):
            return JsonResponse(error_body(error.code, error.message, error.fields), status=400)
        return HttpResponseBadRequest(ERROR_PAGE_TEMPLATE % {
            "title": "Bad Request (400)", "details": escape(error.message)})
