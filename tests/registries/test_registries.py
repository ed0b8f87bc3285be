"""Registry credentials: the API, what bad input gets, encryption at rest, key rotation, and
that the password leaks through nothing (API, pages, admin, logs, repr, audit log)."""

from __future__ import annotations

import logging

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection

from accounts.models import AuditEntry
from registries import crypto
from registries.models import Registry
from registries.services import registry_password
from tests.conftest import assert_error
from tests.factories import PACKAGE

pytestmark = pytest.mark.django_db

URL = "/api/v1/registries/"
PASSWORD = "hunter2-Pa55w0rd-!"


def add(client, name="mine", **fields):
    body = {"name": name, "server": "registry.example.com:5000", "username": "bob",
            "password": PASSWORD, **fields}
    return client.post(URL, body, format="json")


def test_add_list_show_change_and_delete(token_client, alice, datacenter,
                                         django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = add(token_client)
    assert response.status_code == 201, response.content
    assert set(response.json()) == {"name", "server", "username", "datacenter", "created_at",
                                    "updated_at"}
    assert len(callbacks) == 1  # the pull secret is written once this is committed
    listed = token_client.get(URL).json()
    assert [(r["name"], r["server"], r["username"]) for r in listed] == [
        ("mine", "registry.example.com:5000", "bob")]
    assert token_client.get(f"{URL}mine/").json()["username"] == "bob"

    changed = token_client.patch(f"{URL}mine/", {"password": "new-one", "username": "carol"},
                                 format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["username"] == "carol"
    assert registry_password(Registry.objects.get()) == "new-one"

    assert token_client.delete(f"{URL}mine/").status_code == 204
    assert token_client.get(URL).json() == []
    assert_error(token_client.get(f"{URL}mine/"), 404, "not_found", "registry")
    actions = list(AuditEntry.objects.exclude(action="token.create").order_by("id")
                   .values_list("action", "actor_name", "target"))
    assert actions == [("registry.create", "alice", "alice/mine"),
                       ("registry.update", "alice", "alice/mine"),
                       ("registry.delete", "alice", "alice/mine")]
    assert AuditEntry.objects.get(action="registry.update").details == {
        "changed": ["username", "password"]}


@pytest.mark.parametrize(("fields", "field", "says"), [
    ({"server": "https://registry.example.com"}, "server", "without https://"),
    ({"server": "not a host!"}, "server", "is not a host[:port]"),
    ({"server": "registry.example.com:70000"}, "server", "port 70000 is not between"),
    ({"server": "-bad-.example.com"}, "server", "is not a host[:port]"),
    ({"server": ""}, "server", "required"),
    ({"username": ""}, "username", "required"),
    ({"username": "   "}, "username", "required"),
    ({"username": "a:b"}, "username", "may not contain ':'"),
    ({"password": ""}, "password", "required"),
    ({"password": "x" * 8193}, "password", "at most 8192 characters"),
    ({"name": "My_Registry"}, "name", "only lower-case letters"),
    ({"name": "x" * 41}, "name", "at most 40 characters"),
    ({"colour": "blue"}, "colour", "unknown field"),
])
def test_bad_input_is_refused_naming_the_field(token_client, fields, field, says):
    body = assert_error(add(token_client, **fields), 400, "invalid", field)
    assert says in body["fields"][field][0]
    assert not Registry.objects.exists()


def test_good_servers_are_accepted(token_client):
    for i, server in enumerate(["docker.io", "localhost:5000", "10.0.0.5:5000", "[::1]:5000",
                                "ghcr.io", "my-registry.internal.example.com"]):
        assert add(token_client, f"r{i}", server=server).status_code == 201, server


def test_a_duplicate_name_is_refused_with_every_other_mistake(token_client):
    assert add(token_client).status_code == 201
    body = assert_error(add(token_client, server="bad host"), 400, "invalid")
    assert set(body["fields"]) == {"name", "server"}
    assert "already have registry credentials named 'mine'" in body["fields"]["name"][0]


def test_the_name_cannot_be_changed(token_client):
    add(token_client)
    assert_error(token_client.patch(f"{URL}mine/", {"name": "other"}, format="json"), 400,
                 "invalid", "name")
    assert_error(token_client.patch(f"{URL}mine/", ["not", "an", "object"], format="json"),
                 400, "invalid")


def test_another_users_credentials_are_not_found(token_client, api, make_user, datacenter):
    add(token_client)
    bob = make_user("bob")
    from accounts.services import token_create

    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(bob).raw}")
    assert api.get(URL).json() == []
    assert_error(api.get(f"{URL}mine/"), 404, "not_found")
    assert_error(api.delete(f"{URL}mine/"), 404, "not_found")
    assert Registry.objects.count() == 1


# -- the password at rest and in every output ---------------------------------------------------

def test_the_database_never_holds_the_plaintext(token_client):
    add(token_client)
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM registries_registry")
        row = cursor.fetchone()
    stored = b"".join(bytes(value) if isinstance(value, memoryview) else str(value).encode()
                      for value in row)
    assert PASSWORD.encode() not in stored
    token = bytes(Registry.objects.get().password_encrypted)
    assert token.startswith(b"gAAAAA")  # a Fernet token
    assert Fernet(crypto.configured_keys()[0]).decrypt(token) == PASSWORD.encode()


def test_the_password_leaks_through_nothing(token_client, admin_browser, alice, caplog,
                                            django_capture_on_commit_callbacks):
    caplog.set_level(logging.DEBUG)
    with django_capture_on_commit_callbacks(execute=True):
        outputs = [add(token_client).content,
                   token_client.get(URL).content,
                   token_client.get(f"{URL}mine/").content,
                   token_client.patch(f"{URL}mine/", {"password": PASSWORD},
                                      format="json").content]
    registry = Registry.objects.get()
    outputs += [repr(registry).encode(), str(registry).encode(),
                admin_browser.get("/admin/registries/registry/").content,
                admin_browser.get(f"/admin/registries/registry/{registry.pk}/change/").content,
                admin_browser.get("/admin/accounts/auditentry/").content,
                token_client.get("/api/schema/").content,
                caplog.text.encode(),
                str(list(AuditEntry.objects.values())).encode()]
    for output in outputs:
        assert PASSWORD.encode() not in output
    assert b"registry.example.com:5000" in outputs[5]  # the admin does show the credential


def test_keys_rotate(token_client, settings):
    old_key = settings.PADDLECLOUD_CREDENTIAL_KEYS[0]
    add(token_client)
    before = bytes(Registry.objects.get().password_encrypted)

    new_key = Fernet.generate_key().decode()
    settings.PADDLECLOUD_CREDENTIAL_KEYS = [new_key, old_key]  # the new key first
    assert registry_password(Registry.objects.get()) == PASSWORD  # old ones still decrypt
    call_command("rotate_credential_keys")
    after = bytes(Registry.objects.get().password_encrypted)
    assert after != before
    assert Fernet(new_key).decrypt(after) == PASSWORD.encode()

    settings.PADDLECLOUD_CREDENTIAL_KEYS = [new_key]  # the old key can go now
    assert registry_password(Registry.objects.get()) == PASSWORD
    settings.PADDLECLOUD_CREDENTIAL_KEYS = [old_key]  # but not the new one
    with pytest.raises(crypto.CredentialKeyError, match="cannot be decrypted"):
        registry_password(Registry.objects.get())
    with pytest.raises(CommandError, match="cannot be decrypted"):
        call_command("rotate_credential_keys")


def test_a_debug_install_makes_its_own_key_once(settings, tmp_path):
    settings.PADDLECLOUD_CREDENTIAL_KEYS = []
    settings.DEBUG = True
    settings.VAR_DIR = tmp_path
    first = crypto.encrypt("pw")
    assert (tmp_path / "credential_keys").stat().st_mode & 0o777 == 0o600
    assert crypto.decrypt(first) == "pw"
    assert crypto.configured_keys() == crypto.configured_keys()


def test_without_debug_the_keys_must_be_set(settings):
    from django.core.exceptions import ImproperlyConfigured

    settings.PADDLECLOUD_CREDENTIAL_KEYS = []
    settings.DEBUG = False
    with pytest.raises(ImproperlyConfigured, match="PADDLECLOUD_CREDENTIAL_KEYS is not set"):
        crypto.encrypt("pw")
    settings.PADDLECLOUD_CREDENTIAL_KEYS = ["not-a-key"]
    with pytest.raises(ImproperlyConfigured, match="32 url-safe base64-encoded bytes"):
        crypto.encrypt("pw")


# -- jobs that pull with a credential ----------------------------------------------------------

def test_a_job_names_its_credential_and_keeps_it_until_it_ends(token_client, alice,
                                                               pfs_home):
    (pfs_home / "pkg").mkdir()
    job = {"name": "private", "package": PACKAGE, "entry": "x",
           "image": "registry.example.com:5000/me/img:1"}
    body = assert_error(token_client.post("/api/v1/jobs/", {**job, "registry": "nope"},
                                          format="json"), 400, "invalid", "registry")
    assert "no registry credentials named 'nope'" in body["message"]

    add(token_client)
    submitted = token_client.post("/api/v1/jobs/", {**job, "registry": "mine"}, format="json")
    assert submitted.status_code == 201, submitted.content
    assert submitted.json()["registry"] == "mine"
    assert_error(token_client.delete(f"{URL}mine/"), 409, "registry_in_use", "registry")

    assert token_client.post("/api/v1/jobs/private/kill").status_code == 200
    assert token_client.delete(f"{URL}mine/").status_code == 204
    assert token_client.get("/api/v1/jobs/private/").json()["registry"] is None


def test_admins_delete_a_credential_through_the_service(admin_browser, token_client):
    add(token_client)
    registry = Registry.objects.get()
    response = admin_browser.post("/admin/registries/registry/", {
        "action": "delete_credentials", "_selected_action": [registry.pk]}, follow=True)
    assert "Deleted 1 credential(s)." in response.content.decode()
    assert not Registry.objects.exists()
    entry = AuditEntry.objects.get(action="registry.delete")
    assert (entry.actor_name, entry.target) == ("root", "alice/mine")
