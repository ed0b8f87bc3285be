"""The submit page's "auto (earliest start)" in Chromium, for alice with accounts in two
datacenters: the job goes where it would start first (datacenter2, free, rather than the busy
datacenter1), and the page it lands on says why. Jobs are admitted, never started (held
tasks)."""

from __future__ import annotations

from playwright.sync_api import expect

from jobs.models import Job
from tests.e2e.conftest import job_form_fill, login
from tests.factories import PACKAGE, package_write
from tests.jobs.test_sooner import busy  # noqa: F401 - a fixture


def test_auto_places_the_job_where_it_starts_first(page, live_portal, busy,  # noqa: F811
                                                   pfs_home):
    package_write(pfs_home.parents[2] / "datacenter2" / "home" / "alice")
    login(page, next_path="/jobs/new/")
    job_form_fill(page, "wide", PACKAGE, trainers="2")
    page.get_by_label("CPU per trainer").fill("1")
    page.locator("#id_datacenter").select_option("auto")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url("**/jobs/wide/")
    expect(page.locator(".messages")).to_contain_text(
        "job wide submitted; placed in datacenter2: starts now (datacenter1: in 60 min)")
    assert Job.objects.get(name="wide").datacenter.name == "datacenter2"
