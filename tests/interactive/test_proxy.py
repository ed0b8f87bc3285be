"""The proxy to a running job's port (interactive/proxy.py) through the live portal, with a real
local job serving HTTP and a WebSocket: its owner enters a route with a one-time ticket and is
served, bodies streamed both ways, WebSocket messages passed; the route's cookie never reaches
the app; anyone else — another user, nobody, a page of another site — is told the route does not
exist or refused; and the route ends with its job. (Clients here reach the portal's address with
the route's Host; Chromium, which resolves *.localhost itself, is in tests/e2e.)"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from urllib.parse import urlsplit

import pytest
import requests
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from accounts.models import AuditEntry
from interactive.models import ProxyRoute
from jobs.models import Job
from tests.polling import wait

from .apps import HTTP_PORT, WS_PORT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


class Route:
    """A route's enter URL, as the API answered it, reached at the portal's own address."""

    def __init__(self, portal, url: str):
        self.portal, self.url = portal, url
        parts = urlsplit(url)
        self.host, self.enter = parts.netloc, f"{parts.path}?{parts.query}"
        self.key = parts.hostname.split(".")[0]
        self.origin = f"http://{self.host}"
        self.cookie = None

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def request(self, method: str, path: str, *, cookie: str | None = None, headers=None,
                **kwargs) -> requests.Response:
        headers = {"Host": self.host, **(headers or {})}
        if cookie or self.cookie:
            headers["Cookie"] = cookie or self.cookie
        return requests.request(method, f"{self.portal.url}{path}", headers=headers,
                                allow_redirects=False, timeout=30, **kwargs)

    def enter_now(self) -> requests.Response:
        answer = self.get(self.enter)
        if answer.status_code == 302:
            self.cookie = answer.headers["Set-Cookie"].split(";")[0]
        return answer

    def websocket(self, path: str, **headers):
        sock = socket.create_connection(("127.0.0.1", self.portal.port), timeout=10)
        return connect(f"ws://{self.host}{path}", sock=sock, open_timeout=10,
                       additional_headers={**({"Cookie": self.cookie} if self.cookie else {}),
                                           "Origin": self.origin, **headers})


def route_open(portal, port: int, user=None, **body) -> requests.Response:
    return portal.session(user).post(f"{portal.url}/api/v1/jobs/web/ports/{port}/open",
                                     json=body, timeout=30)


def opened(portal, port: int, **body) -> Route:
    answer = route_open(portal, port, **body)
    assert answer.status_code == 200, answer.text
    return Route(portal, answer.json()["url"])


def test_the_owner_is_served_by_the_app_through_the_route_and_its_cookie_stays_out(
        live_portal, serving_job):
    route = opened(live_portal, HTTP_PORT, path="/hello?from=enter")
    assert route.host == f"{route.key}.localhost:{live_portal.port}"
    entered = route.enter_now()
    assert entered.status_code == 302
    assert entered.headers["Location"] == "/hello?from=enter"
    cookie = entered.headers["Set-Cookie"]
    assert cookie.startswith("paddlecloud_route=")
    assert {"HttpOnly", "SameSite=Lax", "Path=/"} <= {p.strip() for p in cookie.split(";")}
    assert "Domain" not in cookie  # host-only: the route's own host

    seen = route.get("/hello?from=enter", cookie=f"{route.cookie}; theirs=kept")
    assert seen.status_code == 200
    got = seen.json()
    headers = {name.lower(): value for name, value in got["headers"].items()}
    assert got["path"] == "/hello?from=enter"
    assert headers["cookie"] == "theirs=kept"  # the route's cookie never reaches the app
    assert headers["host"] == f"127.0.0.1:{HTTP_PORT}"
    assert seen.headers["Set-Cookie"].startswith("app_cookie=")  # the app's own come back

    # A body streamed up (8 MiB) and the answer back.
    body = os.urandom(8 << 20)
    posted = route.request("POST", "/upload", data=body)
    assert posted.json() == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}

    # An answer streamed down: its first line comes before the app has written the rest.
    with route.get("/stream", stream=True) as streaming:
        lines = streaming.iter_lines()
        assert next(lines) == b"first"
        assert route.get("/release").status_code == 200  # only now does the app go on
        assert list(lines) == [b"last"]

    # The app's redirect to its own address comes back as the route's.
    moved = route.get("/elsewhere")
    assert moved.status_code == 302
    assert moved.headers["Location"] == f"{route.origin}/hello"

    entry = AuditEntry.objects.get(action="job.port_open")
    assert (entry.actor_name, entry.target) == ("alice", "alice/web")
    assert entry.details == {"worker": "trainer-0", "port": HTTP_PORT, "route": route.key,
                             "purpose": ""}


def test_a_ticket_enters_once(live_portal, serving_job):
    route = opened(live_portal, HTTP_PORT)
    assert route.enter_now().status_code == 302
    again = route.get(route.enter)
    assert again.status_code == 404
    assert "Set-Cookie" not in again.headers
    forged = route.get(route.enter.replace("ticket=", "ticket=x"))
    assert forged.status_code == 404


def test_nobody_else_passes_and_the_route_ends_with_its_job(live_portal, serving_job):
    from accounts.services import user_upsert
    from tests.conftest import PASSWORD

    bob = user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])[0]
    route = opened(live_portal, HTTP_PORT)
    route.enter_now()
    assert route.get("/hello").status_code == 200

    # bob cannot open alice's job's port, and gets nothing from her route without her cookie.
    refused = route_open(live_portal, HTTP_PORT, user=bob)
    assert refused.status_code == 404
    assert live_portal.session(bob).get(
        f"{live_portal.url}/api/v1/jobs/web/ports/{HTTP_PORT}/open", timeout=30,
        allow_redirects=False).status_code == 404
    for cookie in ("", "paddlecloud_route=forged", f"paddlecloud_route={route.key}"):
        answer = route.get("/hello", cookie=cookie or "none=1")
        assert (answer.status_code, answer.text) == (404, "Not found.\n")
    # A route that does not exist is told apart from one that does by nobody.
    unknown = Route(live_portal, route.url.replace(route.key, "0" * len(route.key)))
    assert unknown.get("/hello", cookie=route.cookie).status_code == 404

    # Another site's page (another route's, say) cannot use alice's cookie for her.
    other = f"http://{'1' * len(route.key)}.localhost:{live_portal.port}"
    assert route.request("POST", "/upload", data=b"x", headers={"Origin": other}
                         ).status_code == 403
    assert route.request("POST", "/upload", data=b"x", headers={
        "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}).status_code == 403
    assert route.request("POST", "/upload", data=b"x", headers={"Origin": route.origin}
                         ).status_code == 200

    # The job ends: its routes go, and the cookie passes no more.
    live_portal.session().post(f"{live_portal.url}/api/v1/jobs/web/kill", timeout=30)
    wait(lambda: Job.objects.get(pk=serving_job.pk).state in ("killed", "failed", "succeeded"),
         message="the job to end")
    wait(lambda: not ProxyRoute.objects.filter(job=serving_job).exists(),
         message="the job's routes to go")
    assert route.get("/hello").status_code == 404
    ended = route_open(live_portal, HTTP_PORT)
    assert ended.status_code == 409
    assert "not running" in ended.json()["message"]


def test_websocket_messages_pass_both_ways_for_the_owner_only(live_portal, serving_job):
    route = opened(live_portal, WS_PORT)
    with pytest.raises(InvalidStatus) as refused:  # without the route's cookie
        route.websocket("/echo").close()
    assert refused.value.response.status_code == 404
    route.enter_now()
    with route.websocket("/echo", Cookie=f"{route.cookie}; theirs=kept") as ws:
        ws.send("hello")
        assert ws.recv(timeout=10) == "echo: hello"
        big = os.urandom(900_000)  # (the app takes messages up to 1 MiB)
        ws.send(big)
        assert ws.recv(timeout=30) == big
        ws.send("your cookies?")
        assert ws.recv(timeout=10) == "theirs=kept"  # never the route's
        ws.send("close")  # the app closes: so does the browser's socket, with its code
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd.code == 4001
    other = f"http://{'1' * len(route.key)}.localhost:{live_portal.port}"
    with pytest.raises(InvalidStatus) as cross:
        route.websocket("/echo", Origin=other).close()
    assert cross.value.response.status_code == 403


def test_the_api_answers_clear_errors(live_portal, serving_job):
    nothing = route_open(live_portal, 1)
    assert nothing.status_code == 200  # a route: the app's absence shows when it is used
    route = Route(live_portal, nothing.json()["url"])
    route.enter_now()
    answer = route.get("/")
    assert answer.status_code == 502
    assert "nothing listens on port 1" in answer.text
    bad = route_open(live_portal, 70000)
    assert bad.status_code == 400
    assert bad.json()["fields"] == {"port": ["a TCP port: a number from 1 to 65535"]}
    worker = route_open(live_portal, HTTP_PORT, worker="trainer-9")
    assert worker.status_code == 404
    assert "no worker 'trainer-9'" in worker.json()["message"]
    assert json.loads(route_open(live_portal, HTTP_PORT).text)["url"].startswith("http://")
