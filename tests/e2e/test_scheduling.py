"""The scheduling model in Chromium: a job submitted with priority high from the form while
the quota is full — the dry run says where it would queue and when it would start, its page
says why it is not running and when it should start, and the box goes, live, once it is
admitted. Jobs are admitted, never started (held tasks): no process runs."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from accounts.services import quota_set
from jobs.models import Job
from jobs.services import job_kill
from scheduling.admission import quota_admit
from tests.e2e.conftest import login, screenshot
from tests.factories import PACKAGE, package_write, submit_job

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d"


@pytest.fixture
def full_quota(live_portal, held_tasks):
    """alice's one CPU held by her job ``holder`` for 30 minutes at most (its deadline)."""
    quota_set(None, live_portal.datacenter, live_portal.user, cpu=1000, jobs=10, queued=10)
    package_write(live_portal.home, "print('hello')\n")
    holder = submit_job(live_portal.user, live_portal.datacenter, "holder",
                        deadline_seconds=1800)
    assert holder.state == "starting"
    return holder


def test_a_high_priority_job_on_a_full_quota_says_why_it_waits_and_when_it_starts(
        page, live_portal, full_quota):
    login(page, next_path="/jobs/new/")
    page.get_by_label("Name", exact=True).fill("urgent")
    page.get_by_label("Trainer package").fill(PACKAGE)
    page.get_by_label("Entry command").fill("python train.py")
    expect(page.get_by_label("Priority")).to_have_value("normal")
    page.get_by_label("Priority").select_option("high")

    page.get_by_role("button", name="Show what would be created").click()
    expect(page.locator("#admission")).to_have_text(re.compile(
        r"It would queue at #1 \(waiting for quota: cpu 1 asked, 0 of 1 free\);\s+start "
        rf"predicted around {WHEN} UTC \(in 30 min\), between {WHEN} and {WHEN} UTC\."))
    expect(page.get_by_label("Priority")).to_have_value("high")  # kept for the submit
    assert not Job.objects.filter(name="urgent").exists()

    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url("**/jobs/urgent/")
    box = page.get_by_role("region", name="Why it is not running")
    expect(box).to_be_visible()
    field = lambda name: box.locator(f'dd[data-field="{name}"]')  # noqa: E731
    expect(field("waits-for")).to_have_text("your quota")
    expect(field("reason")).to_have_text("waiting for quota: cpu 1 asked, 0 of 1 free")
    expect(field("position")).to_have_text("#1 of your waiting jobs")
    expect(field("priority")).to_have_text("high")
    expect(field("predicted")).to_have_text(re.compile(
        rf"around {WHEN} UTC \(in 30 min\), between {WHEN} and {WHEN} UTC"))
    expect(page.locator('#job-state [data-part="predicted"]')).to_have_text("starts ~in 30 min")
    screenshot(page, "job-waiting")

    # The holder ends and the job is admitted: the page says so without reloading.
    job_kill(live_portal.user, live_portal.datacenter, "holder")
    quota_admit(live_portal.user.pk, live_portal.datacenter.pk)
    expect(page.locator('#job-state [data-part="label"]')).to_have_text("starting",
                                                                        timeout=15_000)
    expect(box).to_be_hidden()
    expect(page.locator('#job-state [data-part="predicted"]')).to_be_hidden()
