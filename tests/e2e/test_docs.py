"""The documentation site (mkdocs.yml, docs/), built strictly as `./dev docs` builds it, served
from 127.0.0.1 and read in Chromium: the home page with its picture and its three parts, the
`paddlectl` reference generated from the CLI's parsers, and the API reference rendered from the
portal's OpenAPI schema by the ReDoc the site carries (nothing is fetched from elsewhere)."""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import expect

from paddlectl.commands import COMMANDS
from tests.e2e.conftest import screenshot, watched_page

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
# ReDoc's logo in its "API docs by Redocly" link, which it drops when the logo does not load
# (as the portal's own /api/redoc/ does under its policy: tests/e2e/test_policy.py). Refused
# here, as it is for a reader without the internet.
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site's URL: built into a directory of the test's, served by a thread."""
    built = tmp_path_factory.mktemp("site")
    made = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(built)],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True,
        text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(built)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def reader(browser, site, request):
    """A page of the site (``watched_page``); fails too on any request that leaves 127.0.0.1
    (a CDN the offline site must not need)."""
    elsewhere = []
    with watched_page(browser, site, request) as page:
        page.console.allow(REDOC_LOGO)
        page.context.route(REDOC_LOGO, lambda route: route.abort())
        page.on("request", lambda r: r.url.startswith((site, "data:", "blob:", REDOC_LOGO))
                or elsewhere.append(r.url))
        yield page
    assert not elsewhere, f"the site asked for what is not its own: {elsewhere}"


def heading(page, text: str):
    """The page's heading that says ``text`` (and its permalink, ¶)."""
    return page.get_by_role("heading", name=re.compile(rf"^{re.escape(text)}( ¶)?$"))


def test_the_home_page_shows_the_picture_and_leads_to_each_readers_part(reader):
    reader.goto("/index.html")
    expect(heading(reader, "PaddleCloud")).to_be_visible()
    picture = reader.get_by_role("img", name="The job page of fit_a_line")
    expect(picture).to_be_visible()
    assert picture.evaluate("img => img.naturalWidth") > 0  # the file is there, not a broken icon
    content = reader.locator("article")
    for name in ("Quick start", "Running in a cluster", "Architecture"):
        expect(content.get_by_role("link", name=name, exact=True)).to_be_visible()
    content.get_by_role("link", name="Quick start", exact=True).click()
    expect(heading(reader, "Quick start")).to_be_visible()
    expect(reader.locator("article code").filter(has_text="./dev up").first).to_be_visible()
    screenshot(reader, "docs-home")


def test_the_paddlectl_reference_has_every_command_and_flag_of_the_parsers(reader):
    reader.goto("/users/paddlectl-reference.html")
    for name in COMMANDS:
        expect(heading(reader, f"paddlectl {name}")).to_be_visible()
    flags = reader.locator("h3", has_text="paddlectl submit").locator(
        "xpath=following::table[1]")
    shown = flags.inner_text()
    for action in COMMANDS["submit"].parser()._actions:
        if action.help != argparse.SUPPRESS:
            long = [s for s in action.option_strings if s.startswith("--")]
            assert not long or long[0] in shown, (long, shown)
    assert "--parallelism" in shown
    screenshot(reader, "docs-paddlectl-reference")


def test_the_api_reference_renders_the_portals_schema(reader):
    reader.console.allow("Failed to load resource: net::ERR_FAILED")  # REDOC_LOGO, refused
    reader.goto("/users/api-reference.html")
    api = reader.locator("#api-reference")
    expect(api.get_by_role("heading", name="PaddleCloud API")).to_be_visible(timeout=30_000)
    # an operation of the schema, with its path, as ReDoc lays it out
    expect(api.get_by_text("/api/v1/jobs/", exact=True).first).to_be_attached()
    screenshot(reader, "docs-api-reference")
