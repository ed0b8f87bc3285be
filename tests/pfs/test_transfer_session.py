"""The byte endpoints (``pfs.transfer``) with a browser's session: the dashboard uploads and
downloads with the session cookie; a request that changes something also needs the CSRF
token, so another site cannot make a logged-in browser upload."""

from __future__ import annotations

import hashlib

import pytest
import requests

from tests.conftest import PASSWORD
from tests.factories import HOME

CONTENT = "/api/v1/pfs/content"


def browser_session(portal) -> requests.Session:
    """Logged in through the login page, as a browser is: a session and a CSRF cookie."""
    session = requests.Session()
    session.get(f"{portal.url}/login/").raise_for_status()
    response = session.post(f"{portal.url}/login/", data={
        "username": "alice", "password": PASSWORD,
        "csrfmiddlewaretoken": session.cookies["csrftoken"]}, allow_redirects=False)
    assert response.status_code == 302, response.text
    assert "sessionid" in session.cookies
    return session


def put(session, portal, name: str, data: bytes, **headers) -> requests.Response:
    return session.put(f"{portal.url}{CONTENT}", params={"path": f"{HOME}/{name}"}, data=data,
                       headers={"X-Checksum-Sha256": hashlib.sha256(data).hexdigest(),
                                **headers})


@pytest.fixture
def session(live_portal):
    return browser_session(live_portal)


def test_a_session_with_the_csrf_token_uploads_and_downloads(live_portal, session):
    data = b"from the browser\n"
    response = put(session, live_portal, "a.txt", data,
                   **{"X-CSRFToken": session.cookies["csrftoken"]})
    assert response.status_code == 201, response.text
    assert (live_portal.home / "a.txt").read_bytes() == data

    download = session.get(f"{live_portal.url}{CONTENT}",
                           params={"path": f"{HOME}/a.txt", "datacenter": "datacenter1"})
    assert download.status_code == 200
    assert download.content == data


@pytest.mark.parametrize("headers", [
    pytest.param({}, id="cookie-only"),
    pytest.param({"X-CSRFToken": "x" * 32}, id="wrong-token"),
    pytest.param({"Origin": "https://evil.example.com"}, id="other-origin"),
])
def test_a_cross_site_put_with_only_the_cookie_is_refused(live_portal, session, headers):
    if "Origin" in headers:  # even with the right token, from another site's page
        headers = {**headers, "X-CSRFToken": session.cookies["csrftoken"]}
    response = put(session, live_portal, "evil.txt", b"planted", **headers)
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["code"] == "permission_denied"
    assert "CSRF" in body["message"]
    assert not (live_portal.home / "evil.txt").exists()


def test_a_resumable_upload_needs_the_token_for_its_chunks(live_portal, session):
    token = session.cookies["csrftoken"]
    data = b"0123456789"
    created = session.post(f"{live_portal.url}/api/v1/pfs/uploads", json={
        "path": f"{HOME}/r.bin", "size": len(data)}, headers={"X-CSRFToken": token})
    assert created.status_code == 201, created.text
    url = f"{live_portal.url}/api/v1/pfs/uploads/{created.json()['id']}"
    checksum = {"X-Checksum-Sha256": hashlib.sha256(data).hexdigest()}

    refused = session.patch(url, data=data, headers={"Upload-Offset": "0", **checksum})
    assert refused.status_code == 403
    sent = session.patch(url, data=data, headers={"Upload-Offset": "0", "X-CSRFToken": token,
                                                  **checksum})
    assert sent.status_code == 201, sent.text
    assert (live_portal.home / "r.bin").read_bytes() == data


def test_after_logging_out_the_cookie_no_longer_works(live_portal, session):
    token = session.cookies["csrftoken"]
    session.post(f"{live_portal.url}/logout/", data={"csrfmiddlewaretoken": token})
    response = put(session, live_portal, "late.txt", b"late", **{"X-CSRFToken": token})
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
