"""Browser tests: Playwright drives Debian's Chromium (``/usr/bin/chromium``, headless) against
the real ASGI app served by uvicorn (the ``live_portal`` fixture), with a real Celery worker.

Every page a test opens is watched: an error in the browser console or an uncaught exception
fails the test. Screenshots go to ``test-artifacts/screenshots/`` (``PADDLECLOUD_ARTIFACTS``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest
from django.db import connections

from tests.conftest import PASSWORD

CHROMIUM = os.environ.get("PADDLECLOUD_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("PADDLECLOUD_ARTIFACTS")
                 or Path(__file__).resolve().parents[2] / "test-artifacts")

pytestmark = pytest.mark.browser


@pytest.fixture(scope="package")
def browser():
    """One Chromium for the browser tests, stopped after the last of them: Playwright's sync
    API keeps an event loop running in this thread while it lives, and tests after these use
    asyncio themselves."""
    if not shutil.which(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: `apt-get install chromium` (./dev test "
                    f"installs it)", pytrace=False)
    from playwright.sync_api import sync_playwright

    # The sync API runs an event loop in this thread; Django must still let the tests use the
    # ORM here meanwhile (and only meanwhile: subprocesses after these tests inherit it).
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox"])
        yield browser
        browser.close()
    # Connections opened while Playwright's loop ran may be cut by a live server's clean-up
    # without this thread noticing: the tests after these start with fresh ones.
    connections.close_all()


class ConsoleWatch:
    """What the page said in its console at level error, and uncaught exceptions."""

    def __init__(self, page):
        self.errors: list[str] = []
        self.allowed: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))

    def _console(self, message):
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def allow(self, fragment: str) -> None:
        """An error the test provokes on purpose (a 400 the form shows, say)."""
        self.allowed.append(fragment)

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(a in e for a in self.allowed)]


@contextlib.contextmanager
def watched_page(browser, base_url: str, request):
    """A page in a fresh browser context (no cookies) on ``base_url``: a screenshot when the
    test failed, and a failure on console errors."""
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.console = ConsoleWatch(page)
    yield page
    try:
        outcome = getattr(request.node, "rep_call", None)
        if outcome is not None and outcome.failed:
            screenshot(page, f"FAILED-{request.node.name}")
    finally:
        context.close()
    errors = page.console.unexpected()
    assert not errors, "the browser console reported errors:\n" + "\n".join(errors)


@pytest.fixture
def page(browser, live_portal, request):
    """A fresh browser context (no cookies) on the live portal; fails on console errors."""
    with watched_page(browser, live_portal.url, request) as page:
        yield page


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def screenshot(page, name: str) -> Path:
    """Save a full-page screenshot as a test artifact, taken from the top of the page (so the
    sticky header is where it belongs)."""
    path = ARTIFACTS / "screenshots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(path), full_page=True)
    return path


def login(page, username: str = "alice", password: str = PASSWORD, next_path: str = "/"):
    page.goto(f"/login/?next={next_path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login/" not in url)


def job_form_fill(page, name: str, package: str, trainers: str | None = None):
    """The submit page's form filled in (after ``login(page, next_path="/jobs/new/")``): a job
    ``name`` of ``package`` running ``python train.py``, with ``trainers`` if given."""
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Trainer package").fill(package)
    page.get_by_label("Entry command").fill("python train.py")
    if trainers is not None:
        page.get_by_label("Trainers", exact=True).fill(trainers)
