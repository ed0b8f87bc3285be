"""Routes as the services make them (interactive/services.py), without a job running: who may
open one, the same route given again, the headers encrypted and never shown, the origin a
browser is sent to, the cookie's binding to its user and password, the keys rotated."""

from __future__ import annotations

import re

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.test import RequestFactory

from interactive import services
from interactive.models import ProxyRoute
from jobs.states import JobState
from kernel.errors import ConflictError, NotFoundError, ValidationError
from tests.factories import job_row

pytestmark = pytest.mark.django_db

TOKEN = "token sEcReT-of-the-session"


@pytest.fixture
def running(alice, datacenter):
    return job_row(alice, datacenter, "web", replicas={}, state=JobState.RUNNING)


def test_the_owner_or_an_admin_opens_a_route_to_a_running_job(running, alice, make_user):
    route = services.route_open(alice, running, port=8888)
    assert (route.owner, route.replica.name, route.port) == (alice, "trainer-0", 8888)
    assert services.route_open(alice, running, port=8888) == route  # the same, again
    assert re.fullmatch(f"[a-z0-9]{{{services.KEY_LENGTH}}}", route.key)  # a host's label

    bob = make_user("bob")
    with pytest.raises(NotFoundError):
        services.route_open(bob, running, port=8888)
    root = make_user("root", staff=True)
    assert services.route_open(root, running, port=8888).owner == root

    with pytest.raises(ValidationError, match="port: a TCP port"):
        services.route_open(alice, running, port=0)
    running.state = JobState.SUCCEEDED
    running.save()
    with pytest.raises(ConflictError, match="'web' is succeeded, not running"):
        services.route_open(alice, running, port=8888)


def test_headers_are_encrypted_and_never_shown(running, alice):
    route = services.route_open(alice, running, port=8888,
                                headers={"Authorization": TOKEN}, purpose="notebook")
    stored = bytes(ProxyRoute.objects.get(pk=route.pk).headers_encrypted)
    assert TOKEN.encode() not in stored
    assert TOKEN not in repr(route) and TOKEN not in str(route)
    assert services.route_headers(route) == {"Authorization": TOKEN}
    # Other headers, another route; the same ones, the same route.
    assert services.route_open(alice, running, port=8888, purpose="notebook") != route
    assert services.route_open(alice, running, port=8888, headers={"Authorization": TOKEN},
                               purpose="notebook") == route


def test_keys_rotate_for_the_headers(running, alice, settings):
    route = services.route_open(alice, running, port=8888, headers={"Authorization": TOKEN})
    new_key = Fernet.generate_key().decode()
    settings.PADDLECLOUD_CREDENTIAL_KEYS = [new_key, *settings.PADDLECLOUD_CREDENTIAL_KEYS]
    call_command("rotate_credential_keys")
    settings.PADDLECLOUD_CREDENTIAL_KEYS = [new_key]
    assert services.route_headers(ProxyRoute.objects.get(pk=route.pk)) == {
        "Authorization": TOKEN}


@pytest.mark.parametrize(("domain", "host", "secure", "origin"), [
    ("localhost", "localhost:8000", False, "http://{key}.localhost:8000"),
    ("localhost", "127.0.0.1:8000", False, "http://{key}.localhost:8000"),
    ("localhost", "[::1]:8000", False, "http://{key}.localhost:8000"),
    ("sessions.example.com", "paddlecloud.example.com", True,
     "https://{key}.sessions.example.com"),
    ("sessions.example.com:8443", "paddlecloud.example.com", True,
     "https://{key}.sessions.example.com:8443"),
])
def test_the_browser_is_sent_to_the_routes_own_origin(running, alice, settings, domain, host,
                                                      secure, origin):
    settings.PADDLECLOUD_SESSIONS_DOMAIN = domain
    settings.ALLOWED_HOSTS = ["*"]
    route = services.route_open(alice, running, port=8888)
    request = RequestFactory().get("/", HTTP_HOST=host, secure=secure)
    request.user = alice
    url = services.route_enter_url(route, request, "/lab?x=1")
    expected = origin.format(key=route.key)
    assert url.startswith(f"{expected}/_paddlecloud/enter?ticket=")
    assert url.endswith("&next=%2Flab%3Fx%3D1")


def test_a_cookie_is_the_users_and_the_routes_until_the_password_changes(running, alice):
    route = services.route_open(alice, running, port=8888)
    request = RequestFactory().get("/", HTTP_HOST="localhost:8000")
    request.user = alice
    ticket = services.route_enter_url(route, request).split("ticket=")[1].split("&")[0]
    assert services.ticket_take("0" * services.KEY_LENGTH, ticket) is None  # another route's
    assert services.ticket_take(route.key, ticket) is None  # used up by the try above
    ticket = services.route_enter_url(route, request).split("ticket=")[1].split("&")[0]
    cookie = services.ticket_take(route.key, ticket)
    assert services.route_pass(route.key, cookie).route == route
    assert services.route_pass("0" * services.KEY_LENGTH, cookie) is None
    alice.set_password("a new one, quite long")
    alice.save()
    assert services.route_pass(route.key, cookie) is None


@pytest.mark.parametrize(("asked", "landing"), [
    ("/lab", "/lab"), ("//evil.example.com/", "/"), ("/\\evil", "/"),
    ("https://evil.example.com/", "/"), ("", "/"), ("/a\nb", "/")])
def test_only_a_path_of_the_route_is_landed_on(asked, landing):
    assert services.safe_next(asked) == landing
