"""Every API error has one shape — {"code", "message", "fields"} — and never a traceback."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.views import VersionView
from tests.conftest import assert_error

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
