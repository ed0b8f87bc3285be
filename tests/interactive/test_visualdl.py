"""VisualDL for a user's jobs (interactive.visualdl) on the live portal, the local backend and a
real Celery worker: a session job runs the launcher, which serves both jobs' runs (and the
VisualDL records one wrote itself) with their scalar tags (VisualDL's own HTTP API, asked
through the portal's proxy as a browser does); the same jobs reuse it; another user gets 404;
nobody looking stops it, with an event."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta

import pytest
import requests
from asgiref.sync import sync_to_async
from django.db import connections
from visualdl import LogWriter

from interactive.models import ProxyRoute, Session
from interactive.sessions import session_stop, sessions_idle_check
from interactive.visualdl import visualdl_find, visualdl_open
from jobs.files import output_dir
from jobs.models import Job, JobEvent, Replica
from jobs.states import FINAL_JOB_STATES, JobState
from kernel.errors import ValidationError
from tests.conftest import PASSWORD
from tests.factories import job_row
from tests.jobs.files import log_path, metrics_path
from tests.polling import wait

from .test_proxy import Route

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def reported(portal, name: str, **metrics_by_step) -> Job:
    """``portal``'s user's job ``name``, ended, whose trainer 0 reported ``{step: metrics}``
    (keys ``s<step>``) as ``paddlecloud_sdk.report`` writes them."""
    job = job_row(portal.user, portal.datacenter, name, replicas={}, state=JobState.SUCCEEDED)
    path = metrics_path(job, job.replicas.get(role="trainer", index=0))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(
        json.dumps({"step": int(key[1:]), "time": 1763700000.0 + int(key[1:]), **metrics})
        + "\n" for key, metrics in metrics_by_step.items()))
    return job


@pytest.fixture
def two_jobs(live_portal):
    reported(live_portal, "mnist", s0={"loss": 2.0, "acc": 0.1}, s5={"loss": 0.5, "acc": 0.8})
    resnet = reported(live_portal, "resnet", s0={"loss": 3.0}, s5={"loss": 1.0})
    # resnet also wrote VisualDL's records itself, as a job with VisualDL in its image may.
    with LogWriter(logdir=str(output_dir(resnet) / "vdl")) as writer:
        writer.add_scalar(tag="train/lr", value=0.1, step=1)
    return ["mnist", "resnet"]


@pytest.fixture
def stopped_at_end(live_portal):
    """The sessions a test starts, stopped at its end (their replicas gone)."""
    yield
    for session in Session.objects.select_related("job", "job__owner", "job__datacenter"):
        job = session.job
        job.refresh_from_db()
        if job.state not in FINAL_JOB_STATES:
            session_stop(job.owner, job.datacenter, job.name)
        wait(lambda job=job: not Replica.objects.filter(job=job).exclude(
            state__in=("succeeded", "failed", "killed", "lost")).exists(), 60,
             "the session's replica to end")


def idle_check(now) -> int:
    """``sessions_idle_check`` as the worker runs it, at ``now``. Its probes read the database
    in asgiref's one thread for sync code, whose connection an earlier test's portal may have
    cut as it ended (``close_server_connections``): that thread starts on a new one."""
    asyncio.run(sync_to_async(connections.close_all)())
    return sessions_idle_check(now=now)


def logged_in(portal, username: str = "alice") -> requests.Session:
    """A browser's session on the portal's pages, logged in through the login page."""
    browser = requests.Session()
    browser.get(f"{portal.url}/login/", timeout=30)
    answer = browser.post(f"{portal.url}/login/", timeout=30, allow_redirects=False,
                          data={"username": username, "password": PASSWORD,
                                "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
                          headers={"Referer": f"{portal.url}/login/"})
    assert answer.status_code == 302, answer.text
    return browser


def opened(portal, browser: requests.Session, jobs: list[str]) -> str:
    """"Open in VisualDL" for ``jobs``: the name of the session it leads to."""
    answer = browser.post(f"{portal.url}/visualdl/", data={
        "jobs": jobs, "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
        headers={"Referer": f"{portal.url}/jobs/"}, allow_redirects=False, timeout=30)
    assert answer.status_code == 302, answer.text
    return answer.headers["Location"].rstrip("/").rsplit("/", 1)[1]


def entered(portal, browser: requests.Session, name: str) -> Route:
    """The session's page, looked at until it sends the browser to VisualDL (meanwhile it
    says it is starting); the route it goes to, entered."""
    def sent():
        answer = browser.get(f"{portal.url}/visualdl/{name}/", allow_redirects=False,
                             timeout=30)
        if answer.status_code == 200:
            assert "Starting: " in answer.text and 'http-equiv="refresh"' in answer.text
            return None
        assert answer.status_code == 302, answer.text
        return answer.headers["Location"]

    route = Route(portal, wait(sent, 90, lambda: f"VisualDL to answer; the session's log:\n"
                                                 f"{session_log(name)}"))
    assert route.enter_now().status_code == 302
    return route


def both_runs_shown(route: Route) -> None:
    """VisualDL's own API, through the proxy as the browser's page asks it: ``two_jobs``'
    runs, their tags and points."""
    tags = route.get("/app/api/scalar/tags").json()["data"]
    assert dict(zip(tags["runs"], map(sorted, tags["tags"]), strict=True)) == {
        "mnist": ["acc", "loss"], "resnet": ["loss"], "resnet/output/vdl": ["train/lr"]}
    points = route.get("/app/api/scalar/list?run=resnet&tag=loss").json()["data"]
    assert [(step, value) for _, step, value in points] == [(0, 3.0), (5, 1.0)]


def others_refused(portal, route: Route, name: str, username: str = "bob") -> requests.Session:
    """Another user, logged in: the session's page is not found, nor VisualDL through its
    route (with no cookie of the route's, or with his portal session's); his browser."""
    other = logged_in(portal, username)
    assert other.get(f"{portal.url}/visualdl/{name}/", timeout=30).status_code == 404
    for cookie in ("none=1", f"sessionid={other.cookies['sessionid']}"):
        answer = route.get("/app/api/scalar/tags", cookie=cookie)
        assert (answer.status_code, "mnist" in answer.text) == (404, False)
    return other


def session_log(name: str) -> str:
    job = Job.objects.get(name=name)
    replica = job.replicas.first()
    path = log_path(job, replica) if replica else None
    return path.read_text(errors="replace")[-3000:] if path and path.exists() else "(none)"


def test_visualdl_for_two_jobs_serves_both_runs_to_its_owner_alone(
        live_portal, celery_worker, two_jobs, stopped_at_end, make_user):
    alice = logged_in(live_portal)
    name = opened(live_portal, alice, ["resnet", "mnist"])
    session = Session.objects.get(job__name=name)
    assert session.kind == "visualdl" and session.jobs == ["mnist", "resnet"]
    assert session.job.trainers == 1 and session.job.session == "visualdl"
    route = entered(live_portal, alice, name)
    both_runs_shown(route)
    page = route.get("/app/index")
    assert page.status_code == 200 and "VisualDL" in page.text
    # The same jobs again (in any order): the same session; other jobs would get another.
    assert opened(live_portal, alice, ["mnist", "resnet"]) == name
    assert visualdl_find(live_portal.user, live_portal.datacenter, ["mnist"]) is None

    # Another user: its page is not found, VisualDL neither, and alice's jobs are not his.
    make_user("bob")
    bob = others_refused(live_portal, route, name)
    refused = bob.post(f"{live_portal.url}/visualdl/", data={
        "jobs": ["mnist"], "csrfmiddlewaretoken": bob.cookies["csrftoken"]},
        headers={"Referer": f"{live_portal.url}/jobs/"}, timeout=30)
    assert "you have no job named" in refused.text and "mnist" in refused.text
    assert Session.objects.count() == 1


def test_only_the_users_own_jobs_and_a_few_at_a_time(live_portal, two_jobs, make_user):
    bob = make_user("bob")
    with pytest.raises(ValidationError, match="you have no job named 'mnist'") as refused:
        visualdl_open(bob, live_portal.datacenter, ["mnist"])
    assert list(refused.value.fields) == ["jobs"]
    with pytest.raises(ValidationError, match="tick at least one job"):
        visualdl_open(live_portal.user, live_portal.datacenter, [])
    with pytest.raises(ValidationError, match="at most 20 jobs in one VisualDL, not 21"):
        visualdl_open(live_portal.user, live_portal.datacenter, [f"j{i}" for i in range(21)])
    assert not Job.objects.filter(session="visualdl").exists()


def test_nobody_looking_stops_it_with_an_event(live_portal, celery_worker, two_jobs,
                                               stopped_at_end, settings):
    settings.PADDLECLOUD_VISUALDL_IDLE = "1m"
    name = opened(live_portal, logged_in(live_portal), ["mnist"])
    job = Job.objects.get(name=name)
    route = entered(live_portal, logged_in(live_portal), name)
    assert route.get("/app/api/runs").status_code == 200
    # Looked at a moment ago (the route saw the request): kept running.
    looked = ProxyRoute.objects.get(job=job).last_seen
    assert idle_check(looked + timedelta(seconds=30)) == 0
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    # A minute after the last look: stopped, and its events say why.
    assert idle_check(looked + timedelta(seconds=61)) == 1
    job.refresh_from_db()
    assert job.state == JobState.KILLED
    event = JobEvent.objects.filter(job=job, to_state=JobState.KILLED).get()
    assert re.fullmatch(r"stopped: idle for 61s \(nobody looked at it\), past its idle limit of 1m",
                        event.reason), \
        event.reason
