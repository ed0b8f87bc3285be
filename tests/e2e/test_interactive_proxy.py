"""A job's port in Chromium, through the portal's proxy (interactive/proxy.py), with a real local
job serving HTTP and a WebSocket page: the owner, logged in to the portal at localhost, follows
the portal's link and lands on the app at the route's own origin (``{key}.localhost``, which
Chromium resolves itself); the app never gets the portal's session cookie nor the route's; the
page's WebSocket talks to the app; another user and a browser with no login get 404."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from accounts.services import user_upsert
from tests.conftest import PASSWORD
from tests.e2e.conftest import login, screenshot, watched_page
from tests.interactive.apps import HTTP_PORT, WS_PORT
from tests.interactive.fixtures import serving_job  # noqa: F401 - the fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def test_the_owner_uses_the_app_at_its_own_origin_and_nobody_else_does(
        browser, live_portal, serving_job, request):  # noqa: F811 - the fixture
    portal = f"http://localhost:{live_portal.port}"
    with watched_page(browser, portal, request) as page:
        login(page)
        # From the job's page: "Open port…", a worker and a port, and the app in a new tab.
        page.goto("/jobs/web/")
        page.get_by_text("Open port…").click()
        form = page.locator("#open-port")
        form.get_by_label("Worker").select_option("trainer-0")
        form.get_by_label("Port").fill(str(HTTP_PORT))
        with page.context.expect_page() as opened:
            form.get_by_role("button", name="Open", exact=True).click()
        app = opened.value
        app.wait_for_url("http://*.localhost:*/")
        assert json.loads(app.locator("body").inner_text())["path"] == "/"
        app.close()

        page.goto(f"/api/v1/jobs/web/ports/{HTTP_PORT}/open?path=/hello%3Fseen")
        key = page.url.split("//", 1)[1].split(".", 1)[0]
        origin = f"http://{key}.localhost:{live_portal.port}"
        assert page.url == f"{origin}/hello?seen"
        seen = json.loads(page.locator("body").inner_text())
        cookies = {n.lower(): v for n, v in seen["headers"].items()}.get("cookie", "")
        # The portal's cookies are its host's only; the route's own is taken out on the way.
        assert "sessionid" not in cookies and "csrftoken" not in cookies
        assert "paddlecloud_route" not in cookies
        jar = {c["name"]: c for c in page.context.cookies()}
        assert jar["sessionid"]["domain"] == "localhost"
        assert jar["paddlecloud_route"]["domain"] == f"{key}.localhost"
        assert jar["paddlecloud_route"]["httpOnly"] and jar["paddlecloud_route"]["sameSite"] \
            == "Lax"
        assert page.evaluate("document.cookie") == "app_cookie=from-the-app"  # its own only

        # The app's page talks to it over a WebSocket, through the proxy.
        page.goto(f"{portal}/api/v1/jobs/web/ports/{WS_PORT}/open?path=/page")
        expect(page.locator("#said")).to_have_text("echo: hi from the page")
        screenshot(page, "job-port-through-the-proxy")
        route_url = f"{origin}/hello"

    user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])
    with watched_page(browser, portal, request) as page:
        page.console.allow("404")
        login(page, "bob")
        answer = page.goto(route_url)
        assert answer.status == 404
        assert page.locator("body").inner_text().strip() == "Not found."
        answer = page.goto(f"/api/v1/jobs/web/ports/{HTTP_PORT}/open")
        assert answer.status == 404
    with watched_page(browser, portal, request) as page:  # nobody logged in
        page.console.allow("404")
        answer = page.goto(route_url)
        assert answer.status == 404
