"""Single sign-on in Chromium: the login page's button, the real OpenID provider's pages
(tests/oidc_provider.py), back to the dashboard with the datacenter the group maps to; then
`paddlectl login --web` approved on the /device/ page, and logging out."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from accounts.models import SsoGroupMapping
from tests.e2e.conftest import screenshot
from tests.oidc_provider import oidc_provider, web_login
from tests.paddlectl.conftest import Cli

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_log_in_with_the_identity_provider_then_approve_paddlectl(page, live_portal, settings,
                                                                  tmp_path):
    SsoGroupMapping.objects.create(group="ml", datacenter=live_portal.datacenter)
    with oidc_provider(live_portal, settings, tmp_path, name="Example SSO") as provider:
        provider.account("sub-mia", preferred_username="Mia", email="mia@example.org",
                         email_verified=True, groups=["ml"])
        page.goto("/jobs/")
        screenshot(page, "sso-login")
        page.get_by_role("link", name="Log in with Example SSO").click()
        # The provider's own pages (oidc-provider's development interactions).
        page.locator("input[name=login]").fill("sub-mia")
        page.locator("input[name=password]").fill("anything")
        page.get_by_role("button", name="Sign-in").click()
        page.get_by_role("button", name="Continue").click()
        page.wait_for_url(f"{live_portal.url}/jobs/")
        expect(page.locator(".who")).to_have_text("mia")
        expect(page.locator(".dc")).to_have_text("datacenter1")

        cli = Cli(tmp_path / "home")
        cli.write_config([{"name": "datacenter1", "username": "mia",
                           "endpoint": live_portal.url}])
        with web_login(cli) as (process, url):
            page.goto(url)
            expect(page.get_by_text("asks to log in as mia to datacenter1")).to_be_visible()
            screenshot(page, "sso-device-approve")
            page.get_by_role("button", name="Approve").click()
            expect(page.locator("#device-done")).to_contain_text("paddlectl is logged in as mia")
            _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert cli("get", "jobs").returncode == 0

        page.get_by_role("button", name="Log out").click()
        page.wait_for_url(re.compile(r"/login/"))
        expect(page.get_by_role("link", name="Log in with Example SSO")).to_be_visible()
