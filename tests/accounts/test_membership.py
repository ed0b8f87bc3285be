"""A user may act only in datacenters they belong to — at login and on every request."""

from __future__ import annotations

import uuid

import pytest
from django.urls import URLResolver, get_resolver, reverse
from django.urls.converters import IntConverter, UUIDConverter

from accounts.api import DatacenterAPIView
from accounts.models import Membership, Quota
from accounts.services import token_create
from tests.conftest import PASSWORD, assert_error

pytestmark = pytest.mark.django_db


def datacenter_endpoints(patterns=None) -> list[tuple[str, str]]:
    """(method, URL) of every API view that acts in a datacenter, found in the URLconf."""
    found = []
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            found += datacenter_endpoints(pattern.url_patterns)
            continue
        view = getattr(pattern.callback, "view_class", None)
        if view is None or not issubclass(view, DatacenterAPIView):
            continue
        kwargs = {name: 7 if isinstance(converter, IntConverter)
                  else uuid.UUID(int=7) if isinstance(converter, UUIDConverter) else "x"
                  for name, converter in pattern.pattern.converters.items()}
        url = reverse(pattern.name, kwargs=kwargs)
        found += [(method, url) for method in ("get", "post", "patch", "put", "delete")
                  if hasattr(view, method)]
    return found


ENDPOINTS = datacenter_endpoints()


def test_every_api_view_of_a_datacenter_is_found():
    urls = {url for _method, url in ENDPOINTS}
    assert {"/api/v1/me", "/api/v1/jobs/", "/api/v1/jobs/x/logs", "/api/v1/pfs/files",
            "/api/v1/registries/x/", "/api/v1/quota"} <= urls
    assert len(ENDPOINTS) >= 20


@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
def test_without_credentials_every_datacenter_endpoint_is_a_401(api, alice, method, url):
    assert_error(getattr(api, method)(url, {}, format="json"), 401, "not_authenticated")


@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
def test_a_removed_member_is_refused_by_every_datacenter_endpoint(token_client, alice, method,
                                                                  url):
    Membership.objects.filter(user=alice).delete()
    body = assert_error(getattr(token_client, method)(url, {}, format="json"), 403,
                        "not_a_member", field="datacenter")
    assert "'datacenter1'" in body["message"]


@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
def test_a_token_is_refused_in_another_datacenter_by_every_endpoint(
        token_client, other_datacenter, method, url):
    response = getattr(token_client, method)(url, {}, format="json",
                                             HTTP_X_PADDLE_DATACENTER="datacenter2")
    assert_error(response, 403, "wrong_datacenter", field="datacenter")


def test_login_to_a_datacenter_you_do_not_belong_to(api, alice, other_datacenter):
    response = api.post("/api/v1/auth/token/", {"username": "alice", "password": PASSWORD,
                                                "datacenter": "datacenter2"}, format="json")
    body = assert_error(response, 403, "not_a_member", field="datacenter")
    assert body["fields"]["datacenter"] == ["you are not a member of datacenter 'datacenter2'"]


def test_unknown_datacenter_gets_the_same_answer(api, alice):
    response = api.post("/api/v1/auth/token/", {"username": "alice", "password": PASSWORD,
                                                "datacenter": "nowhere"}, format="json")
    body = assert_error(response, 403, "not_a_member", field="datacenter")
    assert "'nowhere'" in body["message"]


def test_login_names_the_datacenter_of_the_token(api, make_user, other_datacenter):
    make_user("carol", datacenters=("datacenter1", "datacenter2"))
    response = api.post("/api/v1/auth/token/", {"username": "carol", "password": PASSWORD,
                                                "datacenter": "datacenter2"}, format="json")
    assert response.status_code == 201
    assert response.json()["datacenter"] == "datacenter2"
    default = api.post("/api/v1/auth/token/", {"username": "carol", "password": PASSWORD},
                       format="json")
    assert default.json()["datacenter"] == "datacenter1"  # the first one joined


def test_a_user_in_no_datacenter_cannot_get_a_token(api, make_user):
    make_user("dave", datacenters=())
    response = api.post("/api/v1/auth/token/", {"username": "dave", "password": PASSWORD},
                        format="json")
    body = assert_error(response, 403, "not_a_member", field="datacenter")
    assert "administrator" in body["message"]


def test_removing_a_member_takes_effect_at_once(token_client, alice):
    assert token_client.get("/api/v1/me").status_code == 200
    Membership.objects.filter(user=alice).delete()
    assert_error(token_client.get("/api/v1/me"), 403, "not_a_member", field="datacenter")


def test_a_token_acts_only_in_its_datacenter(make_user, other_datacenter, api):
    carol = make_user("carol", datacenters=("datacenter1", "datacenter2"))
    raw = token_create(carol, datacenter_name="datacenter1").raw
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/me", HTTP_X_PADDLE_DATACENTER="datacenter1").status_code == 200
    body = assert_error(api.get("/api/v1/me", HTTP_X_PADDLE_DATACENTER="datacenter2"), 403,
                        "wrong_datacenter", field="datacenter")
    assert "log in to that datacenter" in body["message"]


def test_session_users_pick_a_datacenter_they_belong_to(api, make_user, other_datacenter):
    carol = make_user("carol", datacenters=("datacenter1", "datacenter2"))
    api.force_login(carol)
    assert api.get("/api/v1/me").json()["datacenter"]["name"] == "datacenter1"
    assert api.get("/api/v1/me?datacenter=datacenter2").json()["datacenter"]["name"] == \
        "datacenter2"
    alice = make_user("alice")
    api.force_login(alice)
    assert_error(api.get("/api/v1/me", HTTP_X_PADDLE_DATACENTER="datacenter2"), 403,
                 "not_a_member", field="datacenter")


def test_me_shows_datacenters_and_the_quota_of_the_current_one(make_user, other_datacenter,
                                                                 api):
    carol = make_user("carol", datacenters=("datacenter1", "datacenter2"))
    Quota.objects.filter(user=carol, datacenter__name="datacenter2").update(
        cpu=500, memory=3 * 2**30, gpu=2, jobs=7, queued=25, storage=5 * 2**40)
    raw = token_create(carol, datacenter_name="datacenter2").raw
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = api.get("/api/v1/me").json()
    assert body["username"] == "carol"
    assert body["datacenter"] == {"name": "datacenter2", "description": "second",
                                  "backend": "local"}
    assert [dc["name"] for dc in body["datacenters"]] == ["datacenter1", "datacenter2"]
    assert body["quota"] == {
        "cpu": {"limit": "500m", "limit_value": 500},
        "memory": {"limit": "3Gi", "limit_value": 3 * 2**30},
        "gpu": {"limit": "2", "limit_value": 2},
        "jobs": {"limit": "7", "limit_value": 7},
        "queued": {"limit": "25", "limit_value": 25},
        "storage": {"limit": "5Ti", "limit_value": 5 * 2**40},
    }


def test_me_query_count_is_fixed(token_client, django_assert_max_num_queries):
    with django_assert_max_num_queries(5):
        assert token_client.get("/api/v1/me").status_code == 200
