"""The account pages in Chromium against the live portal: tokens (and the paddlectl config
they come with, used by the real paddlectl), registries, quota, the Admin link, and an
expired session that sends the user to log in and back."""

from __future__ import annotations

import re

import pytest
from django.contrib.sessions.models import Session
from playwright.sync_api import expect

from accounts.models import ApiToken, Quota
from accounts.services import user_upsert
from pfs.models import Usage
from registries.models import Registry
from tests.conftest import PASSWORD
from tests.e2e.conftest import login, screenshot
from tests.paddlectl.conftest import Cli

pytestmark = pytest.mark.browser

SECRET = "registry-secret-0123"


def field_error(page, field_id: str):
    return page.locator(f".field:has(#{field_id}) .field-error")


def test_create_a_token_use_it_with_paddlectl_then_revoke_it(page, live_portal, tmp_path):
    (live_portal.home / "from-the-portal.txt").write_text("hi\n")
    login(page, next_path="/tokens/")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.get_by_label("Label").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("status")).to_contain_text("Token “laptop” created for datacenter1")
    raw = page.locator("#token-raw").text_content()
    assert raw.startswith("pct_")
    config, tokens = (page.locator(f"#snippet-{name}").text_content()
                      for name in ("config", "tokens"))
    assert f"endpoint: {live_portal.url}" in config
    assert raw in tokens
    screenshot(page, "tokens")

    # The Copy buttons put exactly the snippet on the clipboard.
    page.locator('button[data-copy="#snippet-config"]').click()
    assert page.evaluate("navigator.clipboard.readText()") == config

    # Pasted into ~/.paddle, paddlectl works with the token (the password in the config is
    # the placeholder: a login would fail).
    cli = Cli(tmp_path)
    cli.write_config([], text=config)
    cli.tokens_file.write_text(tokens)
    listing = cli("ls", "/pfs/datacenter1/home/alice")
    assert listing.returncode == 0, listing.stderr
    assert "from-the-portal.txt" in listing.stdout
    token = ApiToken.objects.get(digest=ApiToken.digest_of(raw))
    assert token.last_used_at is not None

    # Shown once: sending the form again (a reload) makes no second token and shows none.
    page.reload()
    expect(page.get_by_role("status")).to_contain_text("That form was sent already")
    expect(page.locator("#token-raw")).to_have_count(0)
    assert ApiToken.objects.count() == 1

    # Revoked (after confirming), the token is refused.
    page.get_by_role("button", name="Revoke laptop").click()
    page.get_by_role("dialog").get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("status")).to_contain_text("Revoked token laptop")
    expect(page.get_by_text("Revoked and expired (1)")).to_be_visible()
    token.refresh_from_db()
    assert token.state == "revoked"
    refused = cli("ls", "/pfs/datacenter1/home/alice")
    assert refused.returncode == 2, (refused.stdout, refused.stderr)


def test_registries_add_with_errors_beside_fields_never_showing_the_password(page,
                                                                            live_portal):
    login(page, next_path="/registries/")
    expect(page.get_by_text("No registry credentials yet.")).to_be_visible()
    page.get_by_label("Name", exact=True).fill("private")
    page.get_by_label("Server").fill("https://registry.example.com")
    page.get_by_label("Username at the registry").fill("bob")
    page.get_by_label("Password or access token").fill(SECRET)
    page.get_by_role("button", name="Add credentials").click()
    expect(field_error(page, "id_server")).to_have_text(
        "'https://registry.example.com': write the host[:port] alone, without https://")
    expect(page.get_by_label("Name", exact=True)).to_have_value("private")  # kept for the next try
    expect(page.get_by_label("Password or access token")).to_have_value("")
    assert SECRET not in page.content()
    assert not Registry.objects.exists()

    page.get_by_label("Server").fill("registry.example.com:5000")
    page.get_by_label("Password or access token").fill(SECRET)
    page.get_by_role("button", name="Add credentials").click()
    expect(page.get_by_role("status")).to_have_text(
        "Added registry credentials 'private' (bob@registry.example.com:5000).")
    row = page.locator("#registry-private")
    expect(row).to_contain_text("registry.example.com:5000")
    expect(row).to_contain_text("no active jobs")

    row.get_by_role("link", name="Change").click()
    expect(page.get_by_role("heading", name="Change private")).to_be_visible()
    expect(page.locator("#id_private_username")).to_have_value("bob")
    expect(page.locator("#id_private_password")).to_have_value("")
    assert SECRET not in page.content()
    screenshot(page, "registries")


def test_quota_bars_with_numbers_red_when_full(page, live_portal):
    Quota.objects.filter(user=live_portal.user).update(storage=2048)
    Usage.objects.update_or_create(user=live_portal.user, datacenter=live_portal.datacenter,
                                   defaults={"used": 2048})
    login(page, next_path="/quota/")
    bars = page.get_by_role("progressbar")
    expect(bars).to_have_count(6)  # cpu, memory, gpu, jobs, queued, storage
    expect(page.locator("#quota-cpu")).to_contain_text("0 of 4")
    expect(page.locator("#quota-queued")).to_contain_text("0 of 100")
    expect(page.locator("#quota-storage")).to_contain_text("2Ki of 2Ki")
    expect(page.locator("#quota-storage")).to_have_class(re.compile(r"\bfull\b"))
    expect(page.locator("#quota-storage .bar")).to_have_attribute("aria-valuenow", "100")
    fill = page.locator("#quota-storage .bar rect")  # (an SVG rect: no style="" in a page)
    color = fill.evaluate("rect => getComputedStyle(rect).fill")
    assert color == "rgb(192, 38, 45)"  # --danger
    assert fill.bounding_box()["width"] == page.locator("#quota-storage .bar").bounding_box()[
        "width"]  # all of it
    expect(page.locator("#quota-cpu")).not_to_have_class(re.compile(r"\bfull\b"))
    expect(page.get_by_role("cell", name="datacenter1 current")).to_be_visible()
    screenshot(page, "quota")


def test_staff_see_the_admin_link_and_others_do_not(page, live_portal):
    login(page, next_path="/quota/")
    expect(page.get_by_role("navigation", name="Session")).to_contain_text("alice")
    expect(page.get_by_role("link", name="Admin")).to_have_count(0)
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login/$"))

    user_upsert("root", password=PASSWORD, datacenter_names=["datacenter1"], staff=True,
                superuser=True)
    login(page, "root", next_path="/quota/")
    page.get_by_role("link", name="Admin").click()
    expect(page).to_have_url(re.compile(r"/admin/$"))
    expect(page.get_by_role("heading", name="Site administration")).to_be_visible()


def test_an_expired_session_logs_in_again_and_comes_back(page, live_portal, tmp_path):
    (live_portal.home / "runs").mkdir()
    login(page, next_path="/files/")
    page.get_by_role("link", name="runs/").click()
    expect(page.locator(".breadcrumbs [aria-current=page]")).to_have_text("runs")

    # The session ends on the server: the next page asks to log in, then shows that page.
    Session.objects.all().delete()
    page.get_by_role("link", name="Quota").click()
    expect(page).to_have_url(re.compile(r"/login/\?next=/quota/$"))
    log_in_here(page)
    expect(page).to_have_url(re.compile(r"/quota/$"))

    # An API call after it ends (an upload) goes the same way, back to the folder it was in.
    page.goto("/files/?path=/pfs/datacenter1/home/alice/runs")
    Session.objects.all().delete()
    page.console.allow("401 (Unauthorized)")
    (tmp_path / "late.txt").write_text("late\n")
    page.locator("#upload-input").set_input_files(str(tmp_path / "late.txt"))
    expect(page).to_have_url(re.compile(r"/login/\?next="))
    log_in_here(page)
    expect(page).to_have_url(re.compile(r"/files/\?path=/pfs/datacenter1/home/alice/runs$"))
    expect(page.locator(".breadcrumbs [aria-current=page]")).to_have_text("runs")
    assert not (live_portal.home / "runs" / "late.txt").exists()


def log_in_here(page) -> None:
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login/" not in url)
