"""Per-user limits on what costs the portal without counting against a quota: WebSockets open
at once (PADDLECLOUD_WEBSOCKETS_PER_USER; one more is closed with 4429 and a reason) and dry
runs of job submissions per minute (PADDLECLOUD_DRY_RUNS_PER_MINUTE; one more is a 429 with
Retry-After). Real WebSockets and real requests to the live portal."""

from __future__ import annotations

import contextlib
import json

import pytest
import requests
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from accounts.services import user_upsert
from tests.conftest import PASSWORD
from tests.factories import PACKAGE, package_write

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = "/api/v1/jobs/"
SPEC = {"name": "plan", "package": PACKAGE,
        "entry": "python train.py"}


def socket_for(portal, user, stack: contextlib.ExitStack):
    """A WebSocket of the dashboard's job list, opened as ``user``'s logged-in page does."""
    client = Client()
    client.force_login(user)
    return stack.enter_context(connect(
        f"{portal.url.replace('http', 'ws', 1)}/ws/jobs/", open_timeout=10,
        additional_headers={"Cookie": f"sessionid={client.cookies['sessionid'].value}",
                            "Origin": portal.url}))


def still_open(socket) -> bool:
    """Accepted and kept: the job list has nothing to say yet, and the socket stays open."""
    try:
        message = socket.recv(timeout=0.5)
    except TimeoutError:
        return True
    except ConnectionClosed:
        return False
    raise AssertionError(f"unexpected message {message}")


def refusal(socket) -> tuple[dict, int, str]:
    """The error message of a refused socket, its close code and reason."""
    message = json.loads(socket.recv(timeout=10))
    with pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=10)
    return message, closed.value.rcvd.code, closed.value.rcvd.reason


def test_a_user_has_at_most_so_many_websockets_open(live_portal, settings):
    settings.PADDLECLOUD_WEBSOCKETS_PER_USER = 3
    alice = live_portal.user
    bob = user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])[0]
    with contextlib.ExitStack() as stack:
        first, *others = [socket_for(live_portal, alice, stack) for _ in range(3)]
        assert all(still_open(socket) for socket in (first, *others))

        message, code, reason = refusal(socket_for(live_portal, alice, stack))
        assert message == {
            "type": "error", "code": "throttled",
            "message": "too many open WebSockets: at most 3 per user; close one (a page open "
                       "in another tab or browser) and try again"}
        assert code == 4429
        assert reason.startswith("too many open WebSockets: at most 3 per user")

        assert still_open(socket_for(live_portal, bob, stack))  # another user's are his own
        first.close()  # one of alice's closed: its slot is free again
        assert still_open(socket_for(live_portal, alice, stack))
        assert refusal(socket_for(live_portal, alice, stack))[1] == 4429


def test_dry_runs_are_limited_per_user_per_minute(live_portal, settings):
    settings.PADDLECLOUD_DRY_RUNS_PER_MINUTE = 3
    package_write(live_portal.home, "print('hi')\n")
    alice = live_portal.session()
    for _ in range(3):
        plan = alice.post(f"{live_portal.url}{JOBS}", json={**SPEC, "dry_run": True},
                          timeout=60)
        assert plan.status_code == 200, plan.text
        assert plan.json()["dry_run"] is True

    refused = alice.post(f"{live_portal.url}{JOBS}", json={**SPEC, "dry_run": True}, timeout=60)
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "throttled"
    assert body["message"].startswith("too many dry runs: at most 3 in 60 seconds; try again in")
    assert 0 < int(refused.headers["Retry-After"]) <= 60

    # Bob has dry runs of his own.
    bob = user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])[0]
    (live_portal.home.parent / "bob" / "pkg").mkdir(parents=True)
    (live_portal.home.parent / "bob" / "pkg" / "train.py").write_text("print('hi')\n")
    bobs = requests.Session()
    bobs.headers["Authorization"] = f"Bearer {live_portal.token(bob)}"
    answer = bobs.post(f"{live_portal.url}{JOBS}", timeout=60, json={
        **SPEC, "package": "/pfs/datacenter1/home/bob/pkg", "dry_run": True})
    assert answer.status_code == 200, answer.text
