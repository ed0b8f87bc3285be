"""API tokens: issue, use, expiry, revocation, listing, hashing at rest, login throttling."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.services import token_create, token_purge
from tests.conftest import PASSWORD, assert_error

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/v1/auth/token/"
TOKENS_URL = "/api/v1/auth/tokens/"


def login(api, username="alice", password=PASSWORD, address="10.0.0.1", **fields):
    return api.post(TOKEN_URL, {"username": username, "password": password, **fields},
                    format="json", REMOTE_ADDR=address)


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_login_issues_a_token_that_authenticates(api, alice):
    response = login(api, name="laptop")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["token"].startswith("pct_")
    assert body["username"] == "alice"
    assert body["datacenter"] == "datacenter1"
    assert body["name"] == "laptop"
    assert body["state"] == "active"
    assert body["token"].startswith(body["prefix"])

    me = bearer(body["token"]).get("/api/v1/me")
    assert me.status_code == 200
    assert me.json()["username"] == "alice"


def test_token_expires_after_the_configured_days(api, alice, settings):
    settings.PADDLECLOUD_TOKEN_TTL_DAYS = 7
    body = login(api).json()
    token = ApiToken.objects.get(pk=body["id"])
    assert abs(token.expires_at - (timezone.now() + timedelta(days=7))) < timedelta(minutes=1)


def test_default_lifetime_is_thirty_days(api, alice):
    token = ApiToken.objects.get(pk=login(api).json()["id"])
    assert abs(token.expires_at - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)


def test_only_a_digest_is_stored(api, alice):
    raw = login(api).json()["token"]
    token = ApiToken.objects.get()
    assert token.digest == ApiToken.digest_of(raw) != raw
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_apitoken")
        stored = " ".join(str(value) for row in cursor.fetchall() for value in row)
    assert raw not in stored
    assert raw not in repr(token) and raw not in str(token)


def test_wrong_password_and_unknown_user_get_the_same_answer(api, alice):
    wrong = assert_error(login(api, password="nope"), 401, "invalid_credentials")
    unknown = assert_error(login(api, username="mallory"), 401, "invalid_credentials")
    assert wrong["message"] == unknown["message"] == "username or password is incorrect"
    assert not ApiToken.objects.exists()


def test_disabled_user_cannot_log_in_or_use_a_token(api, alice):
    raw = token_create(alice).raw
    alice.is_active = False
    alice.save()
    assert_error(login(api), 401, "invalid_credentials")
    assert_error(bearer(raw).get("/api/v1/me"), 401, "user_disabled")


def test_missing_fields_are_named(api, db):
    body = assert_error(api.post(TOKEN_URL, {"username": "alice"}, format="json"),
                        400, "invalid", field="password")
    assert body["fields"]["password"] == ["This field is required."]


def test_expired_token_is_refused_with_advice(alice):
    issued = token_create(alice)
    ApiToken.objects.filter(pk=issued.token.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1))
    response = bearer(issued.raw).get("/api/v1/me")
    body = assert_error(response, 401, "token_expired")
    assert "paddlectl login" in body["message"]
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_unknown_token_is_refused(db):
    assert_error(bearer("pct_not-a-real-token").get("/api/v1/me"), 401, "invalid_token")


def test_malformed_authorization_header(db):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer two parts")
    assert_error(client.get("/api/v1/me"), 401, "authentication_failed")


def test_no_credentials(api, db):
    response = api.get("/api/v1/me")
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_delete_revokes_the_token_in_use(token_client):
    assert token_client.delete(TOKEN_URL).status_code == 204
    body = assert_error(token_client.get("/api/v1/me"), 401, "token_revoked")
    assert "revoked" in body["message"]
    assert ApiToken.objects.get().revoked_at is not None


def test_delete_without_a_token_explains(api, alice):
    api.force_login(alice)
    body = assert_error(api.delete(TOKEN_URL), 400, "no_token")
    assert "/api/v1/auth/tokens/" in body["message"]


def test_list_shows_only_own_tokens_and_marks_the_current_one(token_client, make_user):
    other = token_create(token_client.issued.token.user, name="ci").token
    bob = make_user("bob")
    token_create(bob)
    response = token_client.get(TOKENS_URL)
    assert response.status_code == 200
    rows = response.json()
    assert {row["id"] for row in rows} == {token_client.issued.token.pk, other.pk}
    current = {row["id"]: row["current"] for row in rows}
    assert current == {token_client.issued.token.pk: True, other.pk: False}
    assert all("token" not in row and "digest" not in row for row in rows)


def test_list_shows_expired_and_revoked_states(token_client):
    alice = token_client.issued.token.user
    expired = token_create(alice).token
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(days=1))
    revoked = token_create(alice).token
    token_client.delete(f"{TOKENS_URL}{revoked.pk}/")
    states = {row["id"]: row["state"] for row in token_client.get(TOKENS_URL).json()}
    assert states[expired.pk] == "expired"
    assert states[revoked.pk] == "revoked"
    assert states[token_client.issued.token.pk] == "active"


def test_revoke_by_id_and_not_someone_elses(token_client, make_user):
    alice = token_client.issued.token.user
    spare = token_create(alice)
    assert token_client.delete(f"{TOKENS_URL}{spare.token.pk}/").status_code == 204
    assert_error(bearer(spare.raw).get("/api/v1/me"), 401, "token_revoked")

    bobs = token_create(make_user("bob"))
    assert_error(token_client.delete(f"{TOKENS_URL}{bobs.token.pk}/"), 404, "not_found")
    assert bearer(bobs.raw).get("/api/v1/me").status_code == 200


def test_create_a_named_token_with_a_lifetime(token_client):
    response = token_client.post(TOKENS_URL, {"name": "ci", "expires_in_days": 2}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "ci"
    assert bearer(body["token"]).get("/api/v1/me").status_code == 200
    token = ApiToken.objects.get(pk=body["id"])
    assert token.expires_at - timezone.now() < timedelta(days=2, minutes=1)


@pytest.mark.parametrize("days", [0, 367, "soon"])
def test_token_lifetime_out_of_range(token_client, days):
    response = token_client.post(TOKENS_URL, {"expires_in_days": days}, format="json")
    assert_error(response, 400, "invalid", field="expires_in_days")
    assert ApiToken.objects.count() == 1


def test_purge_deletes_only_long_dead_tokens(alice):
    live = token_create(alice).token
    old_expired = token_create(alice).token
    old_revoked = token_create(alice).token
    recently_revoked = token_create(alice).token
    long_ago = timezone.now() - timedelta(days=31)
    ApiToken.objects.filter(pk=old_expired.pk).update(expires_at=long_ago)
    ApiToken.objects.filter(pk=old_revoked.pk).update(revoked_at=long_ago)
    ApiToken.objects.filter(pk=recently_revoked.pk).update(revoked_at=timezone.now())
    assert token_purge() == 2
    assert set(ApiToken.objects.values_list("pk", flat=True)) == {live.pk, recently_revoked.pk}


# --- throttling of failed logins ---------------------------------------------------------------


def test_repeated_failures_are_throttled_per_user_and_address(api, alice, settings):
    settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT = 3
    for _ in range(3):
        assert_error(login(api, password="wrong"), 401, "invalid_credentials")
    response = login(api)  # even the right password now waits
    body = assert_error(response, 429, "throttled")
    assert "too many failed logins" in body["message"]
    assert 0 < int(response["Retry-After"]) <= settings.PADDLECLOUD_LOGIN_FAILURE_WINDOW
    assert not ApiToken.objects.exists()

    # Alice logging in from elsewhere is not locked out by failures from that address.
    assert login(api, address="10.0.0.2").status_code == 201


def test_success_resets_the_count(api, alice, settings):
    settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT = 3
    for _ in range(2):
        login(api, password="wrong")
    assert login(api).status_code == 201
    for _ in range(2):
        login(api, password="wrong")
    assert login(api).status_code == 201


def test_one_address_cannot_spray_many_usernames(api, make_user, settings):
    settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT_PER_ADDRESS = 4
    make_user("bob")
    for name in ("u1", "u2", "u3", "u4"):
        assert_error(login(api, username=name, password="x"), 401, "invalid_credentials")
    assert_error(login(api, username="bob"), 429, "throttled")
    assert login(api, username="bob", address="10.9.9.9").status_code == 201


def test_throttle_window_expires(api, alice, settings):
    settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT = 1
    settings.PADDLECLOUD_LOGIN_FAILURE_WINDOW = 1
    login(api, password="wrong")
    assert_error(login(api), 429, "throttled")
    import time

    time.sleep(1.2)
    assert login(api).status_code == 201


def test_a_stale_token_or_session_does_not_block_login(api, alice):
    api.credentials(HTTP_AUTHORIZATION="Bearer pct_stale")
    assert login(api).status_code == 201
    session = APIClient(enforce_csrf_checks=True)
    session.force_login(alice)
    assert login(session).status_code == 201
