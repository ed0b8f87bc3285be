"""A WebSocket is opened only from a page of the site itself — the same scheme, host and port
as the handshake, judged as Django's CSRF check judges an Origin — or of a trusted origin.
Real handshakes with the live portal, carrying a logged-in user's session cookie."""

from __future__ import annotations

import json
import socket

import pytest
from channels.layers import channel_layers
from django.test import Client
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.factories import job_row


def open_socket(portal, origin: str, *, host: str | None = None, headers=None) -> int:
    """101 when the handshake is accepted, else the status it was refused with."""
    client = Client()
    client.force_login(portal.user)
    port = portal.url.rsplit(":", 1)[1]
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as sock:
        uri = f"ws://{host or f'127.0.0.1:{port}'}/ws/jobs/"
        try:
            with connect(uri, sock=sock, open_timeout=10, additional_headers={
                    "Cookie": f"sessionid={client.cookies['sessionid'].value}",
                    "Origin": origin, **(headers or {})}):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code


@pytest.fixture
def portal(live_portal, settings):
    """The live portal, answering for 127.0.0.1 and localhost only."""
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    # A channel layer is bound to the event loop that first used it: each test's server
    # runs its own loop, so it gets its own layer (live_portal drops it as the server ends).
    channel_layers.backends.clear()
    return live_portal


def test_a_page_of_the_site_itself_opens_a_socket(portal):
    assert open_socket(portal, f"http://127.0.0.1:{portal.port}") == 101


@pytest.mark.parametrize("origin", [
    pytest.param("http://127.0.0.1:9999", id="other-port"),
    pytest.param("https://127.0.0.1:{port}", id="other-scheme"),
    pytest.param("http://localhost:{port}", id="other-host-also-allowed"),
    pytest.param("http://evil.example:{port}", id="other-host"),
    pytest.param("http://127.0.0.1", id="no-port"),
    pytest.param("null", id="opaque"),
])
def test_a_page_of_another_origin_is_refused(portal, origin):
    assert open_socket(portal, origin.format(port=portal.port)) == 403


def test_a_host_not_allowed_is_refused_even_from_its_own_origin(portal):
    assert open_socket(portal, f"http://evil.example:{portal.port}",
                       host=f"evil.example:{portal.port}") == 403


def test_a_trusted_origin_opens_a_socket(portal, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://portal.example.com", "https://*.example.org"]
    assert open_socket(portal, "https://portal.example.com") == 101
    assert open_socket(portal, "https://dashboards.example.org") == 101
    assert open_socket(portal, "http://portal.example.com") == 403  # not that scheme


def test_behind_a_tls_proxy_the_site_is_https(portal, settings):
    settings.TRUSTED_PROXIES = 1
    https = {"X-Forwarded-Proto": "https"}
    assert open_socket(portal, f"https://127.0.0.1:{portal.port}", headers=https) == 101
    assert open_socket(portal, f"http://127.0.0.1:{portal.port}", headers=https) == 403
    assert open_socket(portal, f"http://127.0.0.1:{portal.port}") == 101


def client_socket(portal, token: str, path: str = ""):
    """A handshake as paddlectl makes it: its token, no Origin, no cookie."""
    sock = socket.create_connection(("127.0.0.1", portal.port), timeout=10)
    return connect(f"ws://127.0.0.1:{portal.port}/ws/jobs/{path}", sock=sock, open_timeout=10,
                   additional_headers={"Authorization": f"Bearer {token}"})


def test_a_client_opens_a_socket_with_its_token_and_no_origin(portal):
    from accounts.services import token_create, token_revoke

    job_row(portal.user, portal.datacenter, "fit")
    issued = token_create(portal.user)
    with client_socket(portal, issued.raw, "fit/") as ws:
        first = json.loads(ws.recv(timeout=10))
    assert first["type"] == "job" and first["job"]["name"] == "fit"  # as a page's socket

    with pytest.raises(InvalidStatus) as refused:
        client_socket(portal, issued.raw[:-2] + "xx")
    assert refused.value.response.status_code == 403
    token_revoke(portal.user, issued.token.pk)
    with pytest.raises(InvalidStatus) as refused:
        client_socket(portal, issued.raw)
    assert refused.value.response.status_code == 403


def test_a_clients_token_acts_in_its_datacenter_only(portal):
    from accounts.services import token_create

    issued = token_create(portal.user)
    with client_socket(portal, issued.raw, "?datacenter=elsewhere") as ws:
        said = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    assert ws.close_code == 4403
    assert said["type"] == "error" and said["code"] == "wrong_datacenter"
    assert f"this token is for datacenter {portal.datacenter.name!r}" in said["message"]
