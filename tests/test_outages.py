"""Redis or PostgreSQL down: the portal never answers 500. What cannot work answers 503 with
Retry-After (the API in its error shape, code ``unavailable``; the pages a page); what only
decorates (predicted starts) is left out; a submission whose job committed answers 201 (its
start is queued later by the reconciler); /healthz says what is down, /readyz answers 503.

The portal runs in a process of its own (``runportal``) on the test's database, with a Redis
server of the test's own that the test stops, or reaching PostgreSQL through a proxy that the
test closes: real refused connections, nothing patched."""

from __future__ import annotations

import pytest
import requests

from jobs.models import Job
from jobs.states import JobState
from tests.factories import PACKAGE, job_fields, job_row
from tests.polling import wait

pytestmark = [pytest.mark.redis]


def api_session(user) -> requests.Session:
    from accounts.services import token_create

    session = requests.Session()
    session.headers["Authorization"] = \
        f"Bearer {token_create(user, datacenter_name='datacenter1').raw}"
    return session


def login_page(portal, session: requests.Session) -> str:
    """The login form's CSRF token (its cookie set in ``session``)."""
    page = session.get(f"{portal.url}/login/", timeout=10)
    assert page.status_code == 200, page.text
    return session.cookies["csrftoken"]


def page_login(portal, session: requests.Session, password: str) -> requests.Response:
    """Logged in through the login page, as a browser is."""
    token = login_page(portal, session)
    return session.post(f"{portal.url}/login/", timeout=10, allow_redirects=False,
                        data={"username": "alice", "password": password,
                              "csrfmiddlewaretoken": token},
                        headers={"Referer": f"{portal.url}/login/"})


def assert_unavailable(response: requests.Response, what: str) -> None:
    """A 503 with Retry-After: 5 in the API's error shape."""
    assert response.status_code == 503, (response.status_code, response.text[:500])
    assert response.headers["Retry-After"] == "5"
    assert response.json() == {"code": "unavailable", "message": f"the {what} is unavailable",
                               "fields": {}}


def assert_no_500(portal) -> None:
    """Not one request answered 500 (the access log says each answer's status)."""
    output = portal.output()
    assert '" 500' not in output and "Internal Server Error" not in output, output


def assert_unavailable_page(response: requests.Response, what: str) -> None:
    assert response.status_code == 503, (response.status_code, response.text[:500])
    assert response.headers["Retry-After"] == "5"
    assert response.headers["Content-Type"].startswith("text/html")
    assert f"The {what} is unavailable" in response.text


def test_redis_down_answers_what_it_can_and_503_for_the_rest(portal_process, own_redis, alice,
                                                             datacenter, package):
    from tests.conftest import PASSWORD

    portal = portal_process(REDIS_URL=own_redis.url)
    api = api_session(alice)
    browser = requests.Session()
    assert page_login(portal, browser, PASSWORD).status_code == 302
    # A job waiting for quota: the lists show its predicted start (cached in Redis).
    job_row(alice, datacenter, "waiting", state=JobState.QUEUED)
    assert api.get(f"{portal.url}/api/v1/jobs/", timeout=10).status_code == 200

    own_redis.stop()

    # Lists and pages: served, the forecast computed without its cache.
    listed = api.get(f"{portal.url}/api/v1/jobs/", timeout=10)
    assert listed.status_code == 200, listed.text[:500]
    assert [job["name"] for job in listed.json()["results"]] == ["waiting"]
    page = browser.get(f"{portal.url}/jobs/", timeout=10)
    assert page.status_code == 200 and "waiting" in page.text

    # A submission commits its job and says so; its start is queued later (the reconciler).
    submitted = api.post(f"{portal.url}/api/v1/jobs/", timeout=30,
                         json=job_fields(alice, datacenter, "fit", package=PACKAGE))
    assert submitted.status_code == 201, submitted.text[:500]
    assert Job.objects.filter(owner=alice, name="fit").count() == 1

    # A login cannot be counted against its limit: refused for now, on the API and the page.
    assert_unavailable(requests.post(f"{portal.url}/api/v1/auth/token/", timeout=10, json={
        "username": "alice", "password": PASSWORD}), "queue")
    assert_unavailable_page(page_login(portal, requests.Session(), PASSWORD), "queue")

    healthz = requests.get(f"{portal.url}/healthz", timeout=10)
    assert healthz.status_code == 200
    assert healthz.json()["status"] == "degraded"
    assert healthz.json()["checks"]["database"] == {"ok": True}
    assert healthz.json()["checks"]["redis"]["ok"] is False
    assert healthz.json()["checks"]["redis"]["error"]
    readyz = requests.get(f"{portal.url}/readyz", timeout=10)
    assert readyz.status_code == 503 and readyz.headers["Retry-After"] == "5"
    assert readyz.json() == healthz.json()

    own_redis.start()
    assert requests.get(f"{portal.url}/readyz", timeout=10).json() == {
        "status": "ok", "checks": {"database": {"ok": True}, "redis": {"ok": True}}}
    assert requests.post(f"{portal.url}/api/v1/auth/token/", timeout=10, json={
        "username": "alice", "password": PASSWORD}).status_code == 201
    assert_no_500(portal)


def test_database_down_answers_503_never_500(portal_process, database_proxy, alice, datacenter,
                                             package):
    from tests.conftest import PASSWORD

    portal = portal_process(database_port=database_proxy.port)
    api = api_session(alice)
    browser = requests.Session()
    assert page_login(portal, browser, PASSWORD).status_code == 302
    assert api.get(f"{portal.url}/api/v1/jobs/", timeout=10).status_code == 200

    database_proxy.stop()

    assert_unavailable(api.get(f"{portal.url}/api/v1/jobs/", timeout=10), "database")
    assert_unavailable(api.post(f"{portal.url}/api/v1/jobs/", timeout=10, json=job_fields(
        alice, datacenter, "fit", package=PACKAGE)), "database")
    assert_unavailable(requests.post(f"{portal.url}/api/v1/auth/token/", timeout=10, json={
        "username": "alice", "password": PASSWORD}), "database")
    # The file service's streams, answered before Django, alike.
    assert_unavailable(api.get(f"{portal.url}/api/v1/pfs/content", timeout=10,
                               params={"path": f"{PACKAGE}/train.py"}), "database")
    assert_unavailable_page(browser.get(f"{portal.url}/jobs/", timeout=10), "database")

    healthz = requests.get(f"{portal.url}/healthz", timeout=10)
    assert healthz.status_code == 200
    assert healthz.json()["status"] == "degraded"
    assert healthz.json()["checks"]["database"]["ok"] is False
    readyz = requests.get(f"{portal.url}/readyz", timeout=10)
    assert readyz.status_code == 503 and readyz.headers["Retry-After"] == "5"

    database_proxy.start()
    wait(lambda: requests.get(f"{portal.url}/readyz", timeout=10).status_code == 200,
         timeout=15, message="the portal did not get its database back")
    assert api.get(f"{portal.url}/api/v1/jobs/", timeout=10).status_code == 200
    assert browser.get(f"{portal.url}/jobs/", timeout=10).status_code == 200
    assert_no_500(portal)



def test_a_database_that_never_answers_is_down_within_its_connect_timeout(
        portal_process, database_proxy, alice):
    """A database host that takes connections and then says nothing (one dropping packets):
    the portal gives up connecting after DATABASE_CONNECT_TIMEOUT and answers as for any
    outage, rather than hanging its requests and its health checks."""
    portal = portal_process(database_port=database_proxy.port, DATABASE_CONNECT_TIMEOUT="2")
    api = api_session(alice)
    database_proxy.silent = True

    healthz = requests.get(f"{portal.url}/healthz", timeout=30)
    assert healthz.status_code == 200
    assert healthz.json()["checks"]["database"]["ok"] is False
    assert "timeout" in healthz.json()["checks"]["database"]["error"]
    assert requests.get(f"{portal.url}/readyz", timeout=30).status_code == 503
    assert_unavailable(api.get(f"{portal.url}/api/v1/jobs/", timeout=30), "database")

    database_proxy.silent = False
    wait(lambda: requests.get(f"{portal.url}/readyz", timeout=30).status_code == 200,
         timeout=15, message="the portal did not get its database back")
    assert_no_500(portal)
