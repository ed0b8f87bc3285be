"""Input the database cannot store (kernel/storable.py) — the NUL character in any text,
a whole number past 64 bits — is a 400 that names the field, over real HTTP, wherever it
comes in: a job's fields, a registry's, a name in the path, a query parameter, a page, a
WebSocket. Nothing is half-written (the master's calls: tests/jobs/test_master_app.py)."""

from __future__ import annotations

import pytest
import requests
from django.test import Client

from jobs.models import Job
from registries.models import Registry
from tests.factories import HOME, PACKAGE
from tests.ws import ws_messages

pytestmark = pytest.mark.django_db(transaction=True)


def refused(response, field: str, code: str = "unstorable") -> dict:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == code and field in body["fields"], body
    assert field in body["message"], body
    return body


@pytest.fixture
def job_body(live_portal) -> dict:
    (live_portal.home / "pkg").mkdir()
    return {"name": "fit", "package": PACKAGE,
            "entry": "python train.py"}


@pytest.mark.parametrize(("change", "field", "code"), [
    ({"env": {"API_KEY": "sk-\x00"}}, "env.API_KEY", "unstorable"),
    ({"entry": "python train.py --lr=0.1\x00"}, "entry", "unstorable"),
    ({"topology": "topo\x00.py"}, "topology", "unstorable"),
    ({"name": "fit\x00"}, "name", "unstorable"),
    ({"package": f"{HOME}/pkg\x00"}, "package", "unstorable"),
    ({"image": "paddle\x00"}, "image", "unstorable"),
    ({"env": {"API\x00KEY": "x"}}, "env", "unstorable"),
    ({"passes": 2**64}, "passes", "unstorable"),
    # Past a column's range, yet a quantity: the field's own rule (paddlecloud_core.spec).
    ({"pscpu": "99999999999999"}, "pscpu", "invalid"),
    ({"psmemory": "9999999Ei"}, "psmemory", "invalid"),
    ({"cpu": "1000001", "trainers": 1}, "cpu", "invalid"),
])
def test_a_job_with_what_the_database_cannot_store_is_refused_naming_the_field(
        live_portal, job_body, change, field, code):
    session = live_portal.session()
    refused(session.post(f"{live_portal.url}/api/v1/jobs/", json={**job_body, **change}), field,
            code)
    assert not Job.objects.exists()
    # The same job without it is taken.
    created = session.post(f"{live_portal.url}/api/v1/jobs/", json=job_body)
    assert created.status_code == 201, created.text


def test_a_registry_credential_with_a_nul_is_refused(live_portal):
    session = live_portal.session()
    answer = session.post(f"{live_portal.url}/api/v1/registries/", json={
        "name": "hub", "server": "registry.example.com", "username": "alice",
        "password": "hunter2\x00"})
    refused(answer, "password")
    assert not Registry.objects.exists()


@pytest.mark.parametrize(("path", "field"), [
    ("/api/v1/jobs/fit%00/", "path"),
    ("/api/v1/jobs/fit%00/events", "path"),
    ("/api/v1/registries/hub%00/", "path"),
    ("/api/v1/jobs/?name=fit%00", "name"),
    ("/api/v1/jobs/?state=running%00", "state"),
    ("/api/v1/pfs/files?path=/pfs/datacenter1/home/alice/%00", "path"),
    ("/api/v1/pfs/stat?path=%00", "path"),
    ("/api/v1/pfs/content?path=/pfs/datacenter1/home/alice/a%00", "path"),  # before Django
])
def test_a_nul_in_the_path_or_a_query_parameter_is_refused(live_portal, path, field):
    refused(live_portal.session().get(f"{live_portal.url}{path}"), field)


def test_a_page_with_a_nul_in_its_path_or_query_is_a_400_page(live_portal):
    browser = Client()
    browser.force_login(live_portal.user)
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    for path in ("/jobs/fit%00/", "/files/?path=%00", "/jobs/?page=%00"):
        page = requests.get(f"{live_portal.url}{path}", cookies=cookies, timeout=20)
        assert page.status_code == 400, (path, page.text[:500])
        assert "must not contain the NUL character" in page.text


def test_a_websocket_with_a_nul_in_its_path_is_refused(live_portal):
    (message,) = ws_messages(live_portal, "/ws/jobs/fit%00/")
    assert (message["type"], message["code"]) == ("error", "unstorable"), message
