"""The audit trail users can read (``accounts.audit.audit_visible``, ``GET /api/v1/audit``, the
Audit page): each user what they did and what was done to what is theirs, a group lead their
group's members', an admin everything; filtered by action and time; exported as CSV and JSON;
token changes recorded; and no entry can be changed or deleted through the portal (the API,
the admin, the pages), nor by code that saves or deletes one."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import AuditEntry, Membership, Team
from accounts.services import token_create, token_revoke
from jobs.services import job_delete, job_kill
from registries.services import registry_create
from tests.conftest import PASSWORD, assert_error
from tests.factories import submit_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(make_user, datacenter, pfs_home, held_tasks):
    """alice and bob in group vision, bob its lead; carol in no group; root an admin. alice
    submits a job that root kills and she deletes, adds a registry credential, makes and
    revokes a token; carol makes a token."""
    users = {name: make_user(name) for name in ("alice", "bob", "carol")}
    users["root"] = make_user("root", staff=True)
    team = Team.objects.create(datacenter=datacenter, name="vision")
    Membership.objects.filter(user__in=[users["alice"], users["bob"]]).update(team=team)
    Membership.objects.filter(user=users["bob"]).update(lead=True)
    (pfs_home / "pkg").mkdir()
    alice = users["alice"]
    submit_job(alice, datacenter, "fit")
    job_kill(alice, datacenter, "fit", by=users["root"])
    job_delete(alice, datacenter, "fit")
    registry_create(alice, datacenter, {"name": "hub", "server": "registry.example.com",
                                        "username": "alice", "password": "s3cret"})
    token_revoke(alice, token_create(alice, name="laptop").token.pk)
    token_create(users["carol"], name="ci")
    return users


def api_as(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user).raw}")
    return client


def seen(user, query: str = "") -> list[tuple[str, str, str]]:
    """(actor, action, whose) of each entry ``user`` reads, oldest first, the making of the
    unnamed tokens the tests' API clients ask with left out."""
    response = api_as(user).get(f"/api/v1/audit?{query}")
    assert response.status_code == 200, response.content
    return [(e["actor"], e["action"], e["whose"]) for e in reversed(response.json())
            if not (e["action"] == "token.create" and e["details"]["name"] == "")]


ALICES = [("alice", "job.submit", "alice"), ("root", "job.kill", "alice"),
          ("alice", "job.delete", "alice"), ("alice", "registry.create", "alice"),
          ("alice", "token.create", "alice"), ("alice", "token.revoke", "alice")]


def test_each_sees_their_own_a_lead_their_groups_an_admin_all(people):
    alice, bob, carol, root = (people[n] for n in ("alice", "bob", "carol", "root"))
    assert seen(alice) == ALICES
    assert seen(carol) == [("carol", "token.create", "carol")]
    assert seen(bob) == ALICES  # his own (none besides asking) and his member alice's
    everything = seen(root)
    assert [e for e in everything if e[2] != "root"] == [*ALICES,
                                                          ("carol", "token.create", "carol")]
    # Narrowed: by action, by user (a lead's member; nothing of carol for bob), by time.
    assert seen(bob, "action=job.kill,job.delete") == ALICES[1:3]
    assert seen(bob, "user=carol") == []
    assert seen(root, "user=carol") == [("carol", "token.create", "carol")]
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    assert seen(alice, f"since={later.replace('+00:00', 'Z')}") == []
    assert seen(alice, f"until={later.replace('+00:00', 'Z')}") == ALICES
    assert_error(api_as(alice).get("/api/v1/audit?action=job.fly"), 400, "invalid", "action")
    assert_error(api_as(alice).get("/api/v1/audit?since=soon"), 400, "invalid", "since")
    # Never a secret: the registry's password is nowhere in what alice reads.
    assert "s3cret" not in api_as(alice).get("/api/v1/audit").content.decode()


def test_exported_as_csv_and_json(people):
    client = api_as(people["alice"])
    response = client.get("/api/v1/audit?format=csv&action=token.revoke")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["actor"], r["action"], r["whose"], r["datacenter"]) for r in rows] == [
        ("alice", "token.revoke", "alice", "datacenter1")]
    assert json.loads(rows[0]["details"]) == {"name": "laptop"}
    assert rows[0]["target"].startswith("alice/pct_")
    as_json = client.get("/api/v1/audit?format=json&action=token.revoke").json()
    assert [(e["actor"], e["target"]) for e in as_json] == [("alice", rows[0]["target"])]


def test_entries_cannot_be_changed_or_deleted_through_the_portal(people):
    entry = AuditEntry.objects.filter(action="job.kill").get()
    before = list(AuditEntry.objects.values_list("pk", "actor_name", "action", "target"))
    # The API: read only, whoever asks.
    for user in (people["alice"], people["root"]):
        client = api_as(user)
        for method in ("post", "put", "patch", "delete"):
            response = getattr(client, method)("/api/v1/audit", {"action": "job.submit"},
                                               format="json")
            assert response.status_code == 405, (method, response.content)
    # The admin, as a superuser: no add, change or delete, one by one or in bulk.
    admin = Client()
    assert admin.login(username="root", password=PASSWORD)
    people["root"].is_superuser = True
    people["root"].save()
    url = f"/admin/accounts/auditentry/{entry.pk}/"
    assert admin.get(url + "change/").status_code == 200  # to read
    assert admin.post(url + "change/", {"action": "job.submit",
                                        "target": "x"}).status_code == 403
    assert admin.post(url + "delete/", {"post": "yes"}).status_code == 403
    assert admin.post("/admin/accounts/auditentry/add/", {}).status_code == 403
    admin.post("/admin/accounts/auditentry/", {"action": "delete_selected",
                                               "_selected_action": [entry.pk], "post": "yes"})
    # The pages take no POST.
    browser = Client()
    assert browser.login(username="alice", password=PASSWORD)
    assert browser.post("/audit/", {"action": "job.kill"}).status_code == 405
    # Code that tries is refused too.
    entry.target = "someone/else"
    with pytest.raises(TypeError, match="never changed"):
        entry.save()
    with pytest.raises(TypeError, match="never deleted"):
        entry.delete()
    # Every entry is as it was (the API clients' tokens added theirs, nothing else changed).
    assert list(AuditEntry.objects.filter(pk__in=[e[0] for e in before]).values_list(
        "pk", "actor_name", "action", "target")) == before


def test_the_audit_page_shows_what_the_api_does(people):
    def page(user, query=""):
        client = Client()
        assert client.login(username=user, password=PASSWORD)
        response = client.get(f"/audit/{query}")
        assert response.status_code == 200
        return response.content.decode()

    assert "alice/fit" in page("alice") and "alice/fit" in page("bob")
    assert "alice/fit" not in page("carol") and "carol/pct_" in page("carol")
    assert "carol/pct_" not in page("alice") and "carol/pct_" in page("root")
    assert "job.kill" in page("alice", "?action=job.kill")
    assert "job.submit" not in page("alice", "?action=job.kill").split("<tbody>")[1]
    assert 'href="/api/v1/audit?action=job.kill&amp;format=csv"' in page(
        "alice", "?action=job.kill")
