"""The pages under their Content-Security-Policy in Chromium: a page that broke it (an inline
script or style, a handler attribute, an asset from elsewhere) would say so in the console,
which fails the test. The dashboard's own pages are covered by every browser test; these are
the pages that are not the dashboard's: the Django admin and the API docs."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from accounts.models import AuditEntry, Quota
from accounts.services import user_upsert
from jobs.models import Job
from tests.conftest import PASSWORD
from tests.e2e.conftest import login, screenshot

pytestmark = pytest.mark.browser


@pytest.fixture
def staff(live_portal):
    return user_upsert("root", password=PASSWORD, datacenter_names=["datacenter1"],
                       staff=True, superuser=True)[0]


def test_the_admin_works_under_its_policy(page, live_portal, staff):
    Job.objects.create(owner=live_portal.user, datacenter=live_portal.datacenter, name="train",
                       package="/pfs/datacenter1/home/alice/pkg", entry="python train.py",
                       image="paddle")
    AuditEntry.objects.create(actor=staff, actor_name="root", action="quota.change",
                              target="alice")
    login(page, "root", next_path="/admin/")
    expect(page.get_by_role("heading", name="Site administration")).to_be_visible()
    # A change list with actions, one without (Django adds a <style> of its own there), a
    # change form with its scripts (related-object popups, the quota inline, date widgets).
    for path, heading in [("/admin/jobs/job/", "Select job to view"),
                          ("/admin/accounts/auditentry/", "Select audit entry to view"),
                          ("/admin/accounts/quota/", "Select quota to change")]:
        page.goto(path)
        expect(page.get_by_role("heading", name=heading)).to_be_visible()
    page.goto(f"/admin/accounts/user/{live_portal.user.pk}/change/")
    expect(page.get_by_role("heading", name="alice")).to_be_visible()
    page.goto("/admin/accounts/quota/")
    quota = Quota.objects.get(user=live_portal.user)
    page.goto(f"/admin/accounts/quota/{quota.pk}/change/")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    screenshot(page, "admin-under-csp")


def test_the_swagger_ui_works_under_its_policy(page, live_portal):
    page.goto("/api/docs/")
    expect(page.get_by_role("heading", name=re.compile("PaddleCloud API"))).to_be_visible()
    expect(page.get_by_text("/api/v1/auth/token/").first).to_be_visible()
    screenshot(page, "api-docs")


def test_redoc_works_under_its_policy(page, live_portal):
    # ReDoc's own logo comes from its makers' site: refused (no asset comes from elsewhere),
    # and ReDoc hides it.
    page.console.allow("https://cdn.redoc.ly/redoc/logo-mini.svg")
    page.goto("/api/redoc/")
    # ReDoc renders the whole schema before its first heading: seconds on a busy machine.
    expect(page.get_by_role("heading", name=re.compile("PaddleCloud API"))).to_be_visible(
        timeout=30_000)
    expect(page.get_by_role("heading", name="Exchange username and password for an API token")
           ).to_be_visible()
    screenshot(page, "api-redoc")
