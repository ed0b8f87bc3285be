"""The Audit and Usage pages in Chromium against the live portal: who sees what. alice sees
her own entries (and what an admin did to her job), bob, who leads her group, sees hers
too, carol sees none of theirs, the admin sees everyone's; the filter narrows, the export
links give the same entries as CSV; the Usage page charts alice's use."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from accounts.models import Membership, Team
from accounts.services import token_create, token_revoke, user_upsert
from jobs.services import job_kill
from tests.conftest import PASSWORD
from tests.e2e.conftest import login, screenshot
from tests.factories import job_row
from tests.jobs.test_budgets import hours_ago_within_a_day, ran

pytestmark = pytest.mark.browser


@pytest.fixture
def people(live_portal):
    alice, datacenter = live_portal.user, live_portal.datacenter
    users = {"alice": alice}
    for name, staff in (("bob", False), ("carol", False), ("root", True)):
        users[name] = user_upsert(name, password=PASSWORD, datacenter_names=["datacenter1"],
                                  staff=staff)[0]
    team = Team.objects.create(datacenter=datacenter, name="vision")
    Membership.objects.filter(user__in=[alice, users["bob"]]).update(team=team)
    Membership.objects.filter(user=users["bob"]).update(lead=True)
    token_revoke(alice, token_create(alice, name="laptop").token.pk)
    job_row(alice, datacenter, "fit", state="running")
    job_kill(alice, datacenter, "fit", by=users["root"])
    token_create(users["carol"], name="carols-ci")
    began = hours_ago_within_a_day(3, timedelta(hours=1))
    ran(alice, datacenter, "earlier", gpu=2, began=began, ended=began + timedelta(hours=1))
    return users


def targets(page) -> list[str]:
    """The What column of the entries shown."""
    return page.locator("#audit-entries tbody tr td:nth-child(4)").all_text_contents()


@pytest.mark.parametrize("who, sees, not_sees", [
    ("alice", ["alice/fit", "alice/pct_"], ["carol/pct_"]),
    ("bob", ["alice/fit", "alice/pct_"], ["carol/pct_"]),
    ("carol", ["carol/pct_"], ["alice/fit", "alice/pct_"]),
    ("root", ["alice/fit", "alice/pct_", "carol/pct_"], []),
])
def test_who_sees_which_audit_entries(page, people, who, sees, not_sees):
    login(page, who, next_path="/audit/")
    expect(page.get_by_role("heading", name="Audit trail")).to_be_visible()
    shown = " ".join(targets(page))
    for target in sees:
        assert target in shown, (who, target, shown)
    for target in not_sees:
        assert target not in shown, (who, target, shown)
    if who == "bob":
        expect(page.locator(".page-header")).to_contain_text(
            "the members of the group you lead (vision)")
    screenshot(page, f"audit-{who}")


def test_filter_and_export_the_audit_trail(page, people):
    login(page, "alice", next_path="/audit/")
    # What the admin did to her job is hers to see, with who did it.
    row = page.locator("#audit-entries tbody tr", has_text="alice/fit")
    expect(row).to_contain_text("root")
    expect(row).to_contain_text("job.kill")
    page.get_by_label("Action").select_option("token.revoke")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**action=token.revoke**")
    assert [t.startswith("alice/pct_") for t in targets(page)] == [True]
    href = page.locator("#audit-csv").get_attribute("href")
    answer = page.request.get(href)
    assert answer.ok and answer.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.text())))
    assert [(r["actor"], r["action"]) for r in rows] == [("alice", "token.revoke")]
    # No form on the page changes an entry: its only one is the filter, sent by GET (the
    # header's log-out form aside).
    assert page.locator("main form").count() == 1
    assert page.locator("main form[method=post]").count() == 0


def test_the_usage_page_charts_alices_use(page, people):
    login(page, "alice", next_path="/usage/?by=month")
    expect(page.locator("#usage-total")).to_contain_text("2.0 GPU-hours")
    expect(page.locator("#chart-gpu_hours rect")).to_have_count(2)  # last month and this one
    expect(page.locator("#usage-rows tbody tr")).to_have_count(1)
    screenshot(page, "usage-alice")
    # carol, who leads nothing, cannot ask for the group's.
    page.context.clear_cookies()
    page.console.allow("403 (Forbidden)")  # the page that says so is a 403
    login(page, "carol", next_path="/usage/?group=vision")
    expect(page.locator("#usage-error")).to_contain_text("you do not lead group vision")


def test_an_admin_makes_a_member_their_groups_lead(page, people):
    """The admin ticks "group lead" on bob's membership; bob's Usage page then has the
    group's report, alice's use in it."""
    Membership.objects.filter(user=people["bob"]).update(lead=False)
    user_upsert("root", superuser=True)
    login(page, "root", next_path=f"/admin/accounts/user/{people['bob'].pk}/change/")
    page.locator("input[name='memberships-0-lead']").check()
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    assert Membership.objects.get(user=people["bob"]).lead
    page.context.clear_cookies()
    login(page, "bob", next_path="/usage/?per=group&by=month")
    expect(page.locator("#usage-rows tbody tr")).to_have_count(1)
    expect(page.locator("#usage-rows tbody tr")).to_contain_text("vision")
    expect(page.locator("#usage-total")).to_contain_text("2.0 GPU-hours")
