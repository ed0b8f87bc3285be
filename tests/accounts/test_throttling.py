"""Failed logins are counted before the password is checked, so parallel guesses cannot slip
past the limit: real parallel requests to the live portal, with a real (slow) password hasher.
Every way to present a password — the token endpoint, the login page (also beside single
sign-on's button), the admin's login (also when single sign-on turned the login page's
passwords off), a code of ``paddlectl login --web`` — counts on the same counters."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.test import Client

from tests.conftest import PASSWORD

TOKEN_URL = "/api/v1/auth/token/"
BURST = 25


def api_login(portal, password: str) -> str:
    """'ok', 'wrong' or 'throttled', from the token endpoint."""
    response = requests.post(f"{portal.url}{TOKEN_URL}", timeout=60,
                             json={"username": "alice", "password": password})
    outcome = {201: "ok", 401: "wrong", 429: "throttled"}.get(response.status_code)
    assert outcome, (response.status_code, response.text)
    if outcome == "wrong":
        assert response.json()["code"] == "invalid_credentials"
    return outcome


def form_login(portal, password: str, path: str = "/login/",
               session: requests.Session | None = None) -> str:
    """The same, from the browser's login form (the dashboard's, or the admin's at
    /admin/login/); ``session`` keeps the login."""
    session = session or requests.Session()
    url = f"{portal.url}{path}"
    page = session.get(url, timeout=60)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]
    response = session.post(url, timeout=60, allow_redirects=False, headers={"Referer": url},
                            data={"username": "alice", "password": password,
                                  "csrfmiddlewaretoken": token})
    if response.status_code == 302:
        return "ok"
    assert response.status_code == 200, response.status_code
    if "too many failed logins" in response.text:
        return "throttled"
    # (the admin's says "the correct username and password for a staff account")
    assert re.search("Please enter (a|the) correct username and password", response.text)
    return "wrong"


def admin_login(portal, password: str) -> str:
    """The same, from the Django admin's login form (alice is staff)."""
    return form_login(portal, password, path="/admin/login/")


def staff(user) -> None:
    user.is_staff = user.is_superuser = True
    user.save()


@pytest.mark.parametrize("login", [api_login, form_login, admin_login],
                         ids=["token-endpoint", "login-form", "admin-login"])
def test_parallel_wrong_passwords_are_checked_only_up_to_the_limit(live_portal, settings, login):
    # The suite hashes with MD5 for speed; a real hasher makes each check take long enough
    # for parallel attempts to overlap, as they do against a real portal.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    live_portal.user.set_password(PASSWORD)
    staff(live_portal.user)
    assert settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT == 5

    first_refusal = threading.Event()

    def wrong(_):
        outcome = login(live_portal, "wrong password")
        if outcome == "throttled":
            first_refusal.set()
        return outcome

    with ThreadPoolExecutor(BURST + 1) as pool:
        burst = [pool.submit(wrong, i) for i in range(BURST)]
        # The right password, sent while the wrong ones are still being checked (once the
        # first of them has been refused; or, should none be, after them all).
        while not first_refusal.wait(0.05) and not all(f.done() for f in burst):
            pass
        right = pool.submit(login, live_portal, PASSWORD)
        outcomes = [f.result() for f in burst]

    assert outcomes.count("wrong") == 5, outcomes
    assert outcomes.count("throttled") == BURST - 5, outcomes
    assert right.result() == "throttled"


def test_a_form_sent_without_a_password_does_not_clear_the_failures(alice):
    client = Client()
    for _ in range(4):
        client.post("/login/", {"username": "alice", "password": "wrong password"})
    client.post("/login/", {"username": "alice", "password": ""})  # nothing checked
    client.post("/login/", {"username": "alice", "password": "wrong password"})
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 200
    assert "too many failed logins for this username" in response.content.decode()


def test_every_way_to_present_a_password_counts_on_one_counter(live_portal, settings):
    settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT_PER_ADDRESS = 4
    staff(live_portal.user)
    browser = requests.Session()
    assert form_login(live_portal, PASSWORD, session=browser) == "ok"
    # One failure each way, from one address: a wrong code on the page that approves
    # `paddlectl login --web`, a wrong password at the token endpoint, the login page and the
    # admin's login page.
    wrong_code = browser.get(f"{live_portal.url}/device/?code=BBBB-BBBB", timeout=60)
    assert "no login waits for this code" in wrong_code.text
    assert api_login(live_portal, "wrong password") == "wrong"
    assert form_login(live_portal, "wrong password") == "wrong"
    assert admin_login(live_portal, "wrong password") == "wrong"
    # The address has had its four: every way now refuses even the right password.
    for login in (api_login, form_login, admin_login):
        assert login(live_portal, PASSWORD) == "throttled", login.__name__
    refused = requests.post(f"{live_portal.url}{TOKEN_URL}", timeout=60,
                            json={"username": "alice", "password": PASSWORD})
    assert "too many failed logins from your address" in refused.json()["message"]


@pytest.mark.parametrize("only", [False, True], ids=["beside-sso", "sso-only"])
def test_with_single_sign_on_the_password_fallbacks_are_throttled(live_portal, settings, only):
    """With single sign-on on, passwords are still taken by the login page (beside the
    button, unless PADDLECLOUD_OIDC_ONLY), the admin's login page and the token endpoint."""
    settings.PADDLECLOUD_OIDC_ISSUER = "https://login.example.com"
    settings.PADDLECLOUD_OIDC_CLIENT_ID = "portal"
    settings.PADDLECLOUD_OIDC_ONLY = only
    staff(live_portal.user)
    fallbacks = [admin_login] if only else [form_login, admin_login]
    for attempt in range(settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT):
        assert fallbacks[attempt % len(fallbacks)](live_portal, "wrong password") == "wrong"
    for login in (*fallbacks, api_login):
        assert login(live_portal, PASSWORD) == "throttled", login.__name__
