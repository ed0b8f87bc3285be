"""Failed logins are counted before the password is checked, so parallel guesses cannot slip
past the limit: real parallel requests to the live portal, with a real (slow) password hasher."""

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


def form_login(portal, password: str) -> str:
    """The same, from the browser's login form."""
    page = requests.get(f"{portal.url}/login/", timeout=60)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]
    response = requests.post(f"{portal.url}/login/", timeout=60, allow_redirects=False,
                             cookies=page.cookies, headers={"Referer": f"{portal.url}/login/"},
                             data={"username": "alice", "password": password,
                                   "csrfmiddlewaretoken": token})
    if response.status_code == 302:
        return "ok"
    assert response.status_code == 200, response.status_code
    if "too many failed logins" in response.text:
        return "throttled"
    assert "Please enter a correct username and password" in response.text
    return "wrong"


@pytest.mark.parametrize("login", [api_login, form_login], ids=["token-endpoint", "login-form"])
def test_parallel_wrong_passwords_are_checked_only_up_to_the_limit(live_portal, settings, login):
    # The suite hashes with MD5 for speed; a real hasher makes each check take long enough
    # for parallel attempts to overlap, as they do against a real portal.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    live_portal.user.set_password(PASSWORD)
    live_portal.user.save()
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
