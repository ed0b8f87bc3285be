"""Every API error has one shape — {"code", "message", "fields"} — and never a traceback."""

from __future__ import annotations

import json
import logging
import re
from urllib.parse import urlencode

import pytest
from django.test import Client
from rest_framework.test import APIClient
from rest_framework.views import APIView

from accounts.services import token_create
from accounts.views import VersionView
from tests.conftest import PASSWORD, assert_error

pytestmark = pytest.mark.django_db


def test_malformed_json(api):
    response = api.post("/api/v1/auth/token/", data="{bad", content_type="application/json")
    body = assert_error(response, 400, "malformed_request")
    assert body["message"].startswith("request body is not valid JSON")


def test_wrong_media_type(api):
    response = api.post("/api/v1/auth/token/", data="username=a", content_type="text/plain")
    assert_error(response, 415, "unsupported_media_type")


def test_field_errors_are_named_in_message_and_fields(api):
    body = assert_error(api.post("/api/v1/auth/token/", {}, format="json"), 400, "invalid")
    assert set(body["fields"]) == {"username", "password"}
    assert "username: This field is required." in body["message"]


@pytest.mark.parametrize("debug", [True, False])
def test_unknown_api_url_is_a_json_404(api, settings, debug):
    settings.DEBUG = debug
    body = assert_error(api.get("/api/v1/no-such-thing"), 404, "not_found")
    assert "/api/v1/no-such-thing" in body["message"]


def test_method_not_allowed(token_client):
    assert_error(token_client.put("/api/v1/me", {}, format="json"), 405, "method_not_allowed")


def test_session_requests_need_csrf(alice):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    body = assert_error(client.post("/api/v1/auth/tokens/", {}, format="json"), 403,
                        "permission_denied")
    assert "CSRF" in body["message"]


def test_unexpected_failure_is_a_500_without_a_traceback(api, monkeypatch, caplog):
    def boom(self, request):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(VersionView, "get", boom)
    response = api.get("/api/v1/version")
    body = assert_error(response, 500, "server_error")
    assert "secret internals" not in response.content.decode()
    assert "reference" in body["message"]
    assert "secret internals" in caplog.text  # the administrators can find it


def test_version_needs_no_login(api):
    response = api.get("/api/v1/version")
    assert response.status_code == 200
    from paddlecloud import __version__

    assert response.json() == {"server": __version__, "api": "v1"}


# --- bodies the API cannot take: too deep, too large -----------------------------------------

WRITE_METHODS = ("post", "put", "patch", "delete")
SAMPLES = {"int": "1", "uuid": "00000000-0000-4000-8000-000000000000"}  # others: "x"


def _routes(patterns=None, prefix=""):
    from django.urls import URLResolver, get_resolver

    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern.callback


def _url(route: str) -> str:
    """A path the route matches: converters get sample values, simple regexes their text."""
    path = re.sub(r"<(?:(\w+):)?\w+>", lambda m: SAMPLES.get(m[1], "x"), route)
    path = path.replace("^", "").replace("$", "").replace("/?", "/")
    assert not re.search(r"[()\[\]*+?\\|]", path), f"teach _url this route: {route}"
    return "/" + path


def json_routes() -> list[tuple[str, str]]:
    """(method, path) of every API view that takes a JSON body, from the URLconf."""
    found = []
    for route, callback in _routes():
        view = getattr(callback, "cls", None)
        if view is None or not issubclass(view, APIView):
            continue
        if not any(parser.media_type == "application/json" for parser in view.parser_classes):
            continue
        found += [(method, _url(route)) for method in WRITE_METHODS if hasattr(view, method)]
    return found


def _send(method: str, path: str, body: bytes, user) -> object:
    client = APIClient()  # a fresh token each time: DELETE /auth/token/ revokes the one it uses
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user).raw}")
    return getattr(client, method)(path, data=body, content_type="application/json")


def test_the_json_routes_are_found():
    routes = json_routes()
    for expected in [("post", "/api/v1/auth/token/"), ("post", "/api/v1/jobs/"),
                     ("post", "/api/v1/pfs/mkdir"), ("patch", "/api/v1/registries/x/")]:
        assert expected in routes


def test_a_body_nested_too_deeply_is_malformed_on_every_json_route(alice, caplog):
    deep = b"[" * 100_000 + b"]" * 100_000
    parsed = []
    for method, path in json_routes():
        bad = _send(method, path, b"{bad", alice)
        response = _send(method, path, deep, alice)
        # Answered like any body that is not JSON: 400 where the view reads the body, and
        # what the view answers anyway where it does not.
        assert response.status_code == bad.status_code, (method, path, response.content)
        if bad.status_code >= 400 and bad.json()["code"] == "malformed_request":
            body = assert_error(response, 400, "malformed_request")
            assert "nested too deeply" in body["message"], body
            parsed.append((method, path))
        elif bad.status_code >= 400:
            assert response.json()["code"] == bad.json()["code"], (method, path)
    assert ("post", "/api/v1/auth/token/") in parsed  # logging in too
    assert len(parsed) >= 6, parsed
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_body_over_the_limit_is_413_on_every_json_route(alice, settings, caplog):
    big = b'{"name": "' + b"x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE + b'"}'
    for method, path in json_routes():
        response = _send(method, path, big, alice)
        body = assert_error(response, 413, "too_large", "body")
        assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in body["message"], (path, body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def dashboard_form_paths() -> list[str]:
    return [_url(route) for route, _callback in _routes()
            if not route.startswith(("api/", "admin/", "^api/"))]


@pytest.mark.parametrize("path", dashboard_form_paths())
def test_a_form_over_the_limit_is_a_413_page(alice, settings, caplog, path):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    form = urlencode({"name": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE})  # as browsers send
    response = client.post(path, form, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 413, response.content[:300]
    assert response["Content-Type"].startswith("text/html")
    assert "2560Ki" in response.content.decode()
    assert response["X-Frame-Options"] == "DENY"  # a page like any other
    assert "Content-Security-Policy" in response
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_body_just_under_the_limit_is_read(api, alice, settings):
    padding = settings.DATA_UPLOAD_MAX_MEMORY_SIZE - 100
    body = json.dumps({"username": "alice", "password": PASSWORD, "name": "x" * padding})
    response = api.post("/api/v1/auth/token/", data=body, content_type="application/json")
    body = assert_error(response, 400, "invalid", "name")  # read, and judged on its fields


def test_a_body_found_too_large_inside_a_view_is_413_too():
    from django.core.exceptions import RequestDataTooBig

    from kernel.errors import render_error

    status, body, _headers = render_error(RequestDataTooBig("over"), "SomeView")
    assert (status, body["code"], list(body["fields"])) == (413, "too_large", ["body"])
