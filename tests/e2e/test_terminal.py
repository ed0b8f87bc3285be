"""The job page's terminal in Chromium: a shell in a running local job's worker (xterm.js
over the exec WebSocket), where what is typed runs as the worker runs and its output shows;
the shell's end is said; it is in the audit log."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from accounts.models import AuditEntry
from jobs.backends.local.backend import home_ids
from jobs.models import Job
from tests.e2e.conftest import login, screenshot
from tests.factories import submit_job
from tests.polling import wait

pytestmark = pytest.mark.package("import time; time.sleep(600)\n")
WAIT = 25_000  # ms


def test_a_shell_in_a_running_worker_from_the_job_page(page, live_portal, celery_worker,
                                                       package):
    job = submit_job(live_portal.user, live_portal.datacenter, "fit", package=package,
                     trainers=2)
    wait(lambda: Job.objects.get(pk=job.pk).state == "running", 60, "the job never ran")
    # xterm.js writes its theme into <style> elements of its own, which the portal's
    # Content-Security-Policy refuses (static/css/terminal.css has what it needs).
    page.console.allow("Applying inline style violates the following Content Security Policy "
                       "directive 'style-src 'self''")
    login(page, next_path="/jobs/fit/")
    terminal = page.locator("#terminal")
    page.locator("#terminal-worker").select_option("trainer-1")
    page.get_by_role("button", name="Open a shell").click()
    expect(page.locator("#terminal-status")).to_have_text(
        "A shell in trainer-1, as the worker runs.", timeout=WAIT)
    page.keyboard.type("echo worker-$PADDLE_TRAINER_ID-$((6*7)); id -u\n")
    expect(terminal).to_contain_text("worker-1-42", timeout=WAIT)
    expect(terminal).to_contain_text(str(home_ids(live_portal.user)[0]))
    screenshot(page, "job-terminal")

    page.keyboard.type("exit 3\n")
    expect(page.locator("#terminal-status")).to_have_text(
        "The shell in trainer-1 ended (exit 3).", timeout=WAIT)
    expect(page.get_by_role("button", name="Open a shell")).to_be_visible()
    entry = AuditEntry.objects.get(action=AuditEntry.Action.JOB_EXEC)
    assert (entry.actor_name, entry.target, entry.details["worker"], entry.details["tty"]) == \
        ("alice", "alice/fit", "trainer-1", True)
