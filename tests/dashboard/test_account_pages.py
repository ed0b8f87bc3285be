"""The account pages with Django's test client on PostgreSQL: registries, quota, tokens, the
datacenter switch, and the home page that leads to the jobs list."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from accounts.models import ApiToken, Quota
from accounts.services import token_create
from paddlecloud_client.config import config_load
from paddlecloud_client.tokens import TokenCache, token_key
from pfs.models import Usage
from registries.models import Registry
from registries.services import registry_password
from tests.conftest import PASSWORD
from tests.factories import PACKAGE

pytestmark = pytest.mark.django_db

SECRET = "s3cret-registry-password"
PAGES = ["/files/", "/registries/", "/quota/", "/tokens/"]


def text(response) -> str:
    return html.unescape(response.content.decode())


def field_block(body: str, field_id: str) -> str:
    """The ``.field`` wrapper holding the input ``field_id``: what is shown beside it."""
    start = body.index(f'id="{field_id}"')
    opening = body.rindex('<div class="field', 0, start)
    return body[opening:body.index("</div>", start)]


def field_errors(body: str, field_id: str) -> list[str]:
    return re.findall(r'<p class="field-error"[^>]*>(.*?)</p>', field_block(body, field_id))


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


# ---------------------------------------------------------------------------------------------
# Every page


@pytest.mark.parametrize("path", PAGES)
def test_each_page_renders_for_a_member(browser, pfs_home, path):
    response = browser.get(path)
    assert response.status_code == 200
    body = text(response)
    assert 'aria-current="page"' in body  # its tab in the header is marked
    assert "Traceback" not in body


@pytest.mark.parametrize("path", [*PAGES, "/"])
def test_anonymous_users_are_sent_to_log_in_and_back(db, path):
    response = Client().get(path + "?x=1")
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}%3Fx%3D1"


def test_home_leads_to_the_jobs_list(browser):
    response = browser.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/jobs/"


@pytest.mark.parametrize("path", PAGES)
def test_a_user_of_no_datacenter_is_told_so(make_user, path):
    client = Client()
    client.force_login(make_user("bob", datacenters=()))
    response = client.get(path)
    assert response.status_code == 200
    assert "not a member of any datacenter" in text(response)


# ---------------------------------------------------------------------------------------------
# Registries


def registry_add(browser, **fields):
    data = {"action": "add", "name": "mine", "server": "registry.example.com:5000",
            "username": "bob", "password": SECRET, **fields}
    return browser.post("/registries/", data)


def test_add_a_registry_then_see_it_listed_without_its_password(browser, alice, datacenter):
    response = registry_add(browser)
    assert response.status_code == 302
    assert response["Location"] == "/registries/"
    page = browser.get("/registries/")
    assert messages_of(page) == [
        "Added registry credentials 'mine' (bob@registry.example.com:5000)."]
    body = text(page)
    assert '<tr id="registry-mine">' in body
    assert "registry.example.com:5000" in body
    assert "no active jobs" in body
    assert SECRET not in body
    registry = Registry.objects.get(owner=alice, datacenter=datacenter)
    assert registry_password(registry) == SECRET


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"server": "https://registry.example.com"}, "server", "without https://"),
        ({"server": "registry.example.com:70000"}, "server", "port 70000 is not between"),
        ({"name": "Not_A_Name"}, "name", "only lower-case letters"),
        ({"username": "a:b"}, "username", "may not contain ':'"),
        ({"server": ""}, "server", "This field is required."),
        ({"password": ""}, "password", "This field is required."),
    ],
)
def test_a_bad_registry_is_refused_beside_the_field_and_nothing_is_stored(
        browser, fields, field, says):
    response = registry_add(browser, **fields)
    assert response.status_code == 200
    body = text(response)
    errors = field_errors(body, f"id_{field}")
    assert len(errors) == 1 and says in errors[0], errors
    assert SECRET not in body  # not even in the form shown again
    assert 'name="password" value' not in body
    assert not Registry.objects.exists()


def test_every_mistake_of_a_registry_is_shown_at_once(browser):
    """The form's own rule (a required field) and the service's (a server with a scheme)."""
    response = registry_add(browser, server="https://registry.example.com", password="")
    body = text(response)
    assert field_errors(body, "id_password") == ["This field is required."]
    [server] = field_errors(body, "id_server")
    assert "https://" in html.unescape(server), server
    assert not Registry.objects.exists()


def test_every_mistake_of_a_registry_change_is_shown_at_once(browser):
    registry_add(browser)
    response = browser.post("/registries/", {
        "action": "change", "name": "mine", "server": "https://registry.example.com",
        "username": "", "password": ""})
    body = text(response)
    assert field_errors(body, "id_mine_username") == ["This field is required."]
    assert "https://" in html.unescape(field_errors(body, "id_mine_server")[0])
    assert Registry.objects.get().server == "registry.example.com:5000"


def test_a_duplicate_registry_name_is_refused_beside_the_name(browser):
    registry_add(browser)
    response = registry_add(browser, server="other.example.com")
    assert "already have registry credentials named 'mine'" in field_errors(
        text(response), "id_name")[0]
    assert Registry.objects.get().server == "registry.example.com:5000"


def test_change_a_registry_keeping_or_replacing_the_password(browser):
    registry_add(browser)
    form = text(browser.get("/registries/?change=mine"))
    assert 'id="change-mine"' in form
    assert 'value="bob"' in form and SECRET not in form

    response = browser.post("/registries/", {"action": "change", "name": "mine",
                                             "server": "registry.example.com:5000",
                                             "username": "carol", "password": ""})
    assert response.status_code == 302
    registry = Registry.objects.get()
    assert (registry.username, registry_password(registry)) == ("carol", SECRET)

    browser.post("/registries/", {"action": "change", "name": "mine", "server": "r.example.com",
                                  "username": "carol", "password": "another-one"})
    registry.refresh_from_db()
    assert (registry.server, registry_password(registry)) == ("r.example.com", "another-one")
    assert messages_of(browser.get("/registries/"))[-1] == "Changed registry credentials 'mine'."


def test_a_bad_change_is_shown_beside_the_field_in_the_open_form(browser):
    registry_add(browser)
    response = browser.post("/registries/", {"action": "change", "name": "mine",
                                             "server": "http://x", "username": "carol",
                                             "password": "typed-but-refused"})
    assert response.status_code == 200
    body = text(response)
    assert 'id="change-mine"' in body
    assert "without http://" in field_errors(body, "id_mine_server")[0]
    assert "typed-but-refused" not in body and SECRET not in body
    registry = Registry.objects.get()
    assert (registry.username, registry_password(registry)) == ("bob", SECRET)


def test_deleting_a_registry_asks_first(browser):
    registry_add(browser)
    asked = browser.post("/registries/", {"action": "delete", "name": "mine"})
    assert asked.status_code == 200
    body = text(asked)
    assert "Delete registry credentials?" in body
    assert '<input type="hidden" name="name" value="mine">' in body
    assert '<input type="hidden" name="confirm" value="yes">' in body
    assert Registry.objects.exists()

    done = browser.post("/registries/", {"action": "delete", "name": "mine", "confirm": "yes"})
    assert done.status_code == 302
    assert not Registry.objects.exists()
    assert messages_of(browser.get("/registries/")) == ["Deleted registry credentials 'mine'."]


def test_a_registry_in_use_shows_its_jobs_and_is_not_deleted(browser, token_client, pfs_home):
    registry_add(browser)
    (pfs_home / "pkg").mkdir()
    submitted = token_client.post("/api/v1/jobs/", {
        "name": "private", "package": PACKAGE, "entry": "x",
        "image": "registry.example.com:5000/me/img:1", "registry": "mine"}, format="json")
    assert submitted.status_code == 201, submitted.content
    assert "1 active job" in text(browser.get("/registries/"))

    browser.post("/registries/", {"action": "delete", "name": "mine", "confirm": "yes"})
    assert Registry.objects.exists()
    message = messages_of(browser.get("/registries/"))[0]
    assert "job 'private' pulls its image with 'mine'" in message


def test_the_registry_password_is_on_no_page(browser, pfs_home):
    registry_add(browser)
    browser.post("/registries/", {"action": "change", "name": "mine",
                                  "server": "registry.example.com", "username": "bob",
                                  "password": SECRET + "2"})
    for path in [*PAGES, "/registries/?change=mine"]:
        body = browser.get(path).content.decode()
        assert SECRET not in body, path


def test_another_users_registries_are_not_shown_nor_deleted(browser, make_user, datacenter):
    bob = Client()
    bob.force_login(make_user("bob"))
    registry_add(bob, name="bobs")
    assert "bobs" not in text(browser.get("/registries/"))
    browser.post("/registries/", {"action": "delete", "name": "bobs", "confirm": "yes"})
    assert Registry.objects.filter(name="bobs").exists()


# ---------------------------------------------------------------------------------------------
# Quota


def test_quota_shows_a_bar_per_resource_red_when_full(browser, alice, datacenter, pfs_home):
    Quota.objects.filter(user=alice, datacenter=datacenter).update(storage=20 * 2**20, gpu=0)
    Usage.objects.update_or_create(user=alice, datacenter=datacenter,
                                   defaults={"used": 20 * 2**20 + 1})
    body = text(browser.get("/quota/"))
    meters = {name: full for full, name in re.findall(
        r'<div class="meter( full)?" id="quota-(\w+)"', body)}
    assert meters == {"cpu": "", "memory": "", "gpu": "", "jobs": "", "queued": "",
                      "storage": " full"}
    assert "0 of 4" in body  # CPU
    assert "0 of 8Gi" in body  # memory
    assert "20.0Mi of 20Mi" in body  # storage, as the Files page shows it
    assert 'aria-valuenow="100"' in body
    assert "none allowed" in body  # no GPUs


def test_quota_lists_every_datacenter_of_the_user(make_user, other_datacenter):
    alice = make_user("alice", datacenters=("datacenter1", "datacenter2"))
    Quota.objects.filter(user=alice, datacenter=other_datacenter).update(cpu=500)
    client = Client()
    client.force_login(alice)
    body = text(client.get("/quota/"))
    assert "<strong>datacenter1</strong> <span" in body  # current, marked so
    assert '<td class="num">500m</td>' in body


# ---------------------------------------------------------------------------------------------
# Tokens


def pre(body: str, element_id: str) -> str:
    return re.search(rf'<pre id="{element_id}">(.*?)</pre>', body, re.S).group(1)


def test_create_a_token_shown_once_with_a_config_paddlectl_loads(browser, alice, tmp_path):
    response = browser.post("/tokens/", {"action": "create", "name": "laptop",
                                         "datacenter": "datacenter1", "expires_in_days": "7"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    body = text(response)
    raw = re.search(r'<div class="secret" id="token-raw">(pct_[\w-]+)</div>', body).group(1)
    token = ApiToken.objects.get(digest=ApiToken.digest_of(raw))
    assert (token.user, token.name, token.datacenter.name) == (alice, "laptop", "datacenter1")

    # Pasted as they are, the two files make paddlectl use the token.
    (tmp_path / "config").write_text(pre(body, "snippet-config"))
    (tmp_path / "tokens.json").write_text(pre(body, "snippet-tokens"))
    config = config_load(tmp_path / "config")
    dc = config.datacenter()
    assert (dc.name, dc.username, dc.endpoint) == ("datacenter1", "alice", "http://testserver")
    cached = TokenCache(tmp_path / "tokens.json").get(token_key(dc.endpoint, dc.name,
                                                                dc.username))
    assert cached["token"] == raw and cached["id"] == token.pk

    # Shown once: the page does not show it again.
    again = text(browser.get("/tokens/"))
    assert raw not in again
    assert f"{token.prefix}…" in again


def test_a_token_form_sent_twice_makes_one_token(browser):
    once = re.search(r'name="once" value="([^"]+)"', text(browser.get("/tokens/"))).group(1)
    data = {"action": "create", "name": "ci", "datacenter": "datacenter1",
            "expires_in_days": "30", "once": once}
    assert 'id="token-raw"' in text(browser.post("/tokens/", data))
    again = browser.post("/tokens/", data)  # a reload of the answer, a double click
    assert again.status_code == 302
    assert ApiToken.objects.count() == 1
    page = browser.get("/tokens/")
    assert "That form was sent already" in messages_of(page)[0]
    assert f'value="{once}"' not in text(page)  # a fresh form sends a fresh token


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"expires_in_days": "0"}, "expires_in_days", "greater than or equal to 1"),
        ({"expires_in_days": "1000"}, "expires_in_days", "less than or equal to 366"),
        ({"expires_in_days": ""}, "expires_in_days", "This field is required."),
        ({"datacenter": "datacenter2"}, "datacenter", "Select a valid choice"),
        ({"name": "x" * 101}, "name", "at most 100 characters"),
    ],
)
def test_a_bad_token_request_is_refused_beside_the_field(browser, other_datacenter, fields,
                                                         field, says):
    data = {"action": "create", "name": "", "datacenter": "datacenter1",
            "expires_in_days": "30", **fields}
    body = text(browser.post("/tokens/", data))
    errors = field_errors(body, f"id_{field}")
    assert len(errors) == 1 and says in errors[0], errors
    assert 'id="token-raw"' not in body
    assert not ApiToken.objects.exists()


def test_revoke_a_token_after_confirming(browser, alice):
    token = token_create(alice, datacenter_name="datacenter1", name="ci").token
    asked = browser.post("/tokens/", {"action": "revoke", "token": token.pk})
    assert asked.status_code == 200
    assert "Revoke this token?" in text(asked)
    token.refresh_from_db()
    assert token.state == "active"

    done = browser.post("/tokens/", {"action": "revoke", "token": token.pk, "confirm": "yes"})
    assert done.status_code == 302
    token.refresh_from_db()
    assert token.state == "revoked"
    page = browser.get("/tokens/")
    assert messages_of(page) == [f"Revoked token ci ({token.prefix}…)."]
    assert "Revoked and expired (1)" in text(page)


def test_another_users_token_cannot_be_revoked(browser, make_user):
    bobs = token_create(make_user("bob"), datacenter_name="datacenter1").token
    browser.post("/tokens/", {"action": "revoke", "token": bobs.pk, "confirm": "yes"})
    bobs.refresh_from_db()
    assert bobs.state == "active"
    assert messages_of(browser.get("/tokens/")) == [f"you have no token with id {bobs.pk}"]


def test_the_tokens_page_offers_a_config_for_every_datacenter(make_user, other_datacenter,
                                                               tmp_path):
    client = Client()
    client.force_login(make_user("alice", datacenters=("datacenter1", "datacenter2")))
    (tmp_path / "config").write_text(pre(text(client.get("/tokens/")), "snippet-config"))
    config = config_load(tmp_path / "config")
    assert [dc.name for dc in config.datacenters] == ["datacenter1", "datacenter2"]
    assert config.current == "datacenter1"
    assert PASSWORD not in (tmp_path / "config").read_text()


# ---------------------------------------------------------------------------------------------
# The datacenter switch


@pytest.fixture
def member_of_two(make_user, other_datacenter) -> Client:
    client = Client()
    client.force_login(make_user("alice", datacenters=("datacenter1", "datacenter2")))
    return client


def test_switch_to_another_datacenter_of_the_user(member_of_two):
    response = member_of_two.post("/datacenter", {"datacenter": "datacenter2",
                                                  "next": "/quota/?a=1"})
    assert response.status_code == 302
    assert response["Location"] == "/quota/?a=1"
    assert member_of_two.session["datacenter"] == "datacenter2"
    body = text(member_of_two.get("/quota/"))
    assert 'data-datacenter="datacenter2"' in body
    assert '<option value="datacenter2" selected>' in body


def test_switch_refuses_a_datacenter_the_user_is_not_in(browser, other_datacenter):
    response = browser.post("/datacenter", {"datacenter": "datacenter2", "next": "/quota/"})
    assert response.status_code == 302
    assert "datacenter" not in browser.session
    page = browser.get("/quota/")
    assert messages_of(page) == [
        "datacenter: you are not a member of datacenter 'datacenter2'"]
    assert 'data-datacenter="datacenter1"' in text(page)


@pytest.mark.parametrize("target", ["https://evil.example.com/", "//evil.example.com/", ""])
def test_switch_goes_back_only_to_a_page_of_the_portal(member_of_two, target):
    response = member_of_two.post("/datacenter", {"datacenter": "datacenter2", "next": target})
    assert response["Location"] == "/"


def test_switch_is_a_post(member_of_two):
    assert member_of_two.get("/datacenter").status_code == 405
