""""You would start sooner if…" in Chromium: the submit page's dry run of a job that would wait
for the quota shows the change that would start it sooner, with its predicted start, and so
does the page of the job once it is queued. Jobs are admitted, never started (held tasks)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from accounts.services import quota_set
from tests.e2e.conftest import job_form_fill, login
from tests.e2e.test_scheduling import full_quota  # noqa: F401 - a fixture
from tests.factories import PACKAGE


@pytest.fixture
def half_full(live_portal, full_quota):  # noqa: F811 - the fixture imported
    """alice's 2 CPUs: one held by ``holder`` for 30 minutes at most (its deadline)."""
    quota_set(None, live_portal.datacenter, live_portal.user, cpu=2000, jobs=10, queued=10)


def test_the_dry_run_shows_what_would_start_the_job_sooner(page, live_portal, half_full):
    login(page, next_path="/jobs/new/")
    job_form_fill(page, "wide", PACKAGE, trainers="2")

    page.get_by_role("button", name="Show what would be created").click()
    expect(page.locator("#admission")).to_contain_text(
        "It would queue at #1 (waiting for quota: cpu 2 asked, 1 of 2 free)")
    sooner = page.locator("#sooner")
    expect(sooner).to_contain_text("It would start sooner if submitted with:")
    expect(sooner.locator("li")).to_have_text(
        ["-trainers 1: would start now with -trainers 1 (now: in 30 min)"])

    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url("**/jobs/wide/")
    box = page.get_by_role("region", name="Why it is not running")
    expect(box.locator("#sooner li")).to_have_text(
        ["-trainers 1: would start now with -trainers 1 (now: in 30 min)"])
