"""Sessions on the real database, without processes (held_tasks): a start makes one trainer's
job of the owner's with an API token for it; the idle check renews the token of a running
session, stops one whose server does not answer once its idle time has passed (with an event
that says so) and leaves a kept one alone; an ended session's token is revoked."""

from __future__ import annotations

import shlex
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from accounts.models import ApiToken
from interactive.models import Session
from interactive.sessions import TOKEN_HOURS, session_keep, session_start, sessions_idle_check
from jobs.models import Job, JobEvent
from jobs.states import JobState
from kernel.errors import ValidationError
from paddlecloud_core.contract import session_api_token
from tests.factories import job_row

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks")]


def running(session: Session, since: timedelta) -> Session:
    """The session's job as if it had run for ``since`` (no process: its server never
    answers)."""
    started = timezone.now() - since
    Job.objects.filter(pk=session.job_id).update(state=JobState.RUNNING, started_at=started)
    Session.objects.filter(pk=session.pk).update(active_at=started)
    return Session.objects.select_related("job", "api_token").get(pk=session.pk)


def test_a_session_is_a_job_of_one_trainer_with_a_token_of_its_own(alice, datacenter,
                                                                   pfs_home):
    session = session_start(alice, datacenter, "notebook", gpu=0, cpu="2", idle="45m")
    job = session.job
    assert job.name.startswith("notebook-") and len(job.name) == len("notebook-") + 5
    assert (job.session, job.trainers, job.cpu) == ("notebook", 1, 2000)
    assert job.state == JobState.STARTING  # admitted as any job: alice's quota has room
    assert session.idle_seconds == 45 * 60 and (pfs_home / "jobs" / job.name / "session").is_dir()
    token = session.api_token
    assert token.user == alice and token.datacenter == datacenter and token.state == "active"
    assert token.digest == ApiToken.digest_of(session_api_token(settings.SECRET_KEY, job.uid))
    with pytest.raises(ValidationError) as refused:
        session_start(alice, datacenter, "notebook", name=job.name)
    assert "name" in refused.value.fields
    with pytest.raises(ValidationError) as refused:
        session_start(alice, datacenter, "visualdl", jobs=["nope"])
    assert refused.value.fields == {"jobs": ["you have no job named 'nope' in datacenter "
                                             f"'{datacenter.name}'"]}


def test_the_idle_check_renews_tokens_stops_the_idle_and_spares_the_kept(alice, datacenter,
                                                                         pfs_home):
    idle = running(session_start(alice, datacenter, "notebook", name="idle", idle="10m"),
                   timedelta(minutes=11))
    kept = running(session_start(alice, datacenter, "notebook", name="kept", idle="10m"),
                   timedelta(minutes=11))
    session_keep(alice, datacenter, "kept")
    ApiToken.objects.filter(pk=kept.api_token_id).update(
        expires_at=timezone.now() + timedelta(minutes=5))

    assert sessions_idle_check() == 1
    stopped = Job.objects.get(name="idle")
    assert stopped.state == JobState.KILLED
    assert stopped.state_reason.startswith("stopped: idle for 11m (its server did not answer: ")
    assert stopped.state_reason.endswith("past its idle limit of 10m")
    assert JobEvent.objects.filter(job=stopped, reason=stopped.state_reason).exists()
    assert ApiToken.objects.get(pk=idle.api_token_id).state == "revoked"

    assert Job.objects.get(name="kept").state == JobState.RUNNING
    renewed = ApiToken.objects.get(pk=kept.api_token_id)
    assert renewed.state == "active"
    assert renewed.expires_at > timezone.now() + timedelta(hours=TOKEN_HOURS) / 2


def test_a_session_waits_for_its_owners_quota_as_any_job(alice, datacenter, pfs_home):
    from accounts.services import quota_set

    quota_set(None, datacenter, alice, cpu=1000)  # millicores: one notebook at a time
    first = session_start(alice, datacenter, "notebook", name="first")
    second = session_start(alice, datacenter, "notebook", name="second")
    assert first.job.state == JobState.STARTING
    second.job.refresh_from_db()
    assert second.job.state == JobState.QUEUED and "cpu" in second.job.state_reason.lower()


def test_a_notebook_without_an_image_gets_the_notebooks_default(alice, datacenter, pfs_home,
                                                                 settings):
    settings.PADDLECLOUD_NOTEBOOK_IMAGE = "registry.example.com/lab:4.6"
    assert session_start(alice, datacenter, "notebook", name="a").job.image == \
        "registry.example.com/lab:4.6"
    assert session_start(alice, datacenter, "notebook", name="b",
                         image="paddlepaddle/paddle:3.0").job.image == "paddlepaddle/paddle:3.0"


def test_the_sessions_api_lists_in_flat_queries_and_says_what_is_wrong(
        alice, datacenter, pfs_home, token_client, assert_queries_flat):
    session_start(alice, datacenter, "notebook", name="one")
    small, large = assert_queries_flat(
        lambda: token_client.get("/api/v1/sessions/?kind=notebook"),
        lambda: [session_start(alice, datacenter, "notebook", name=n) for n in ("two", "three")])
    assert [s["name"] for s in small.json()] == ["one"]
    assert [s["name"] for s in large.json()] == ["three", "two", "one"]
    row = large.json()[0]
    assert (row["kind"], row["cpu"], row["memory"], row["idle"], row["kept"]) == (
        "notebook", "1", "1Gi", "1h", False)
    refused = token_client.post("/api/v1/sessions/", {"kind": "notebook", "idle": "0s"},
                                format="json")
    assert refused.status_code == 400 and "idle" in refused.json()["fields"]
    assert token_client.post("/api/v1/sessions/nope/stop").status_code == 404
    kept = token_client.post("/api/v1/sessions/one/keep", {"keep": True}, format="json")
    assert kept.status_code == 200 and kept.json()["kept"] is True
    stopped = token_client.post("/api/v1/sessions/one/stop")
    assert (stopped.status_code, stopped.json()["state"]) == (200, "killed")
    assert token_client.post("/api/v1/sessions/one/stop").status_code == 409
    assert [s["name"] for s in token_client.get("/api/v1/sessions/").json()] == ["three", "two"]


def test_visualdl_over_the_api_shows_the_jobs_asked_and_is_reused(
        alice, datacenter, pfs_home, token_client):
    job_row(alice, datacenter, "fit")
    job_row(alice, datacenter, "fit2")
    first = token_client.post("/api/v1/sessions/", {"kind": "visualdl", "jobs": ["fit2", "fit"]},
                              format="json")
    assert first.status_code == 201, first.json()
    session = Session.objects.get(job__name=first.json()["name"])
    assert session.jobs == ["fit", "fit2"]
    assert shlex.split(session.job.entry)[-2:] == ["fit", "fit2"]  # its launcher is told them
    again = token_client.post("/api/v1/sessions/", {"kind": "visualdl", "jobs": ["fit", "fit2"]},
                              format="json")
    assert (again.status_code, again.json()["name"]) == (200, first.json()["name"])
    for body, field in (({"kind": "visualdl"}, "jobs"),
                        ({"kind": "visualdl", "jobs": ["fit"], "cpu": "4"}, "cpu")):
        refused = token_client.post("/api/v1/sessions/", body, format="json")
        assert refused.status_code == 400 and field in refused.json()["fields"], refused.json()
    assert Session.objects.count() == 1
