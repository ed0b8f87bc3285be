"""VisualDL for a user's jobs (interactive.visualdl) on the live portal, the local backend and a
real Celery worker: a session job runs the launcher, which serves both jobs' runs with their
scalar tags (VisualDL's own HTTP API, asked through the portal's proxy as a browser does); the
same jobs reuse it; another user gets 404; nobody looking stops it, with an event."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.utils import timezone

from interactive.models import ProxyRoute, Session
from interactive.sessions import http_json, session_stop, sessions_idle_check
from interactive.visualdl import READY_PATH, visualdl_find, visualdl_open
from jobs.backends.base import BackendError
from jobs.models import Job, JobEvent, Replica
from jobs.states import FINAL_JOB_STATES, JobState
from kernel.errors import ValidationError
from paddlecloud_core.contract import SESSION_PORT, session_token
from tests.factories import job_row
from tests.jobs.files import log_path, metrics_path
from tests.polling import wait

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
    reported(live_portal, "resnet", s0={"loss": 3.0}, s5={"loss": 1.0})
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


def running(session: Session) -> Job:
    job = session.job
    wait(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING, 90,
         lambda: f"the session to run; it is {Job.objects.get(pk=job.pk).state}: "
                 f"{Job.objects.get(pk=job.pk).state_reason}")
    return Job.objects.get(pk=job.pk)


def asked(job: Job, target: str):
    """What the session's VisualDL answers ``target`` (JSON), asked as the proxy asks it:
    through ``port_open``, with the session's token."""
    job = Job.objects.select_related("datacenter", "owner").get(pk=job.pk)
    replica = Replica.objects.get(job=job, role="trainer", index=0)

    headers = {"Authorization": f"token {session_token(settings.SECRET_KEY, job.uid)}"}
    return asyncio.run(http_json(job, replica, SESSION_PORT, target, headers))


def answering(job: Job):
    def runs():
        try:
            return asked(job, READY_PATH)
        except (OSError, ValueError, BackendError):  # not listening yet
            return None

    def log() -> str:
        path = log_path(job, job.replicas.get())
        return "VisualDL to answer in the session; its log:\n" + (
            path.read_text(errors="replace")[-3000:] if path.exists() else "(none)")

    wait(runs, 90, log)


def idle_check(now) -> int:
    """``sessions_idle_check`` as the worker runs it, at ``now``. Its probes read the database
    in asgiref's one thread for sync code, whose connection an earlier test's portal may have
    cut as it ended (``close_server_connections``): that thread starts on a new one."""
    asyncio.run(sync_to_async(connections.close_all)())
    return sessions_idle_check(now=now)


def test_visualdl_for_two_jobs_serves_both_runs_and_is_reused_for_them(
        live_portal, celery_worker, two_jobs, stopped_at_end):
    session, started = visualdl_open(live_portal.user, live_portal.datacenter,
                                     ["resnet", "mnist", "mnist"])
    assert started and session.kind == "visualdl" and session.jobs == ["mnist", "resnet"]
    job = running(session)
    assert job.session == "visualdl" and job.trainers == 1
    answering(job)
    tags = asked(job, "/app/api/scalar/tags")["data"]
    assert dict(zip(tags["runs"], map(sorted, tags["tags"]), strict=True)) == {
        "mnist": ["acc", "loss"], "resnet": ["loss"]}
    points = asked(job, "/app/api/scalar/list?run=resnet&tag=loss")["data"]
    assert [(step, value) for _, step, value in points] == [(0, 3.0), (5, 1.0)]
    # The same jobs again (in any order): the same session; other jobs: another.
    again, started = visualdl_open(live_portal.user, live_portal.datacenter,
                                   ["mnist", "resnet"])
    assert (again.pk, started) == (session.pk, False)
    assert visualdl_find(live_portal.user, live_portal.datacenter, ["mnist"]) is None


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
    session, _ = visualdl_open(live_portal.user, live_portal.datacenter, ["mnist"])
    job = running(session)
    answering(job)
    # Looked at through a route a moment ago: kept running.
    ProxyRoute.objects.create(key="visualdltestroute", owner=job.owner, datacenter=job.datacenter,
                              job=job, replica=job.replicas.get(), port=SESSION_PORT,
                              purpose="visualdl")
    looked = timezone.now()
    ProxyRoute.objects.filter(job=job).update(last_seen=looked)
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
