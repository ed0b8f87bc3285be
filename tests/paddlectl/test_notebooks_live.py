"""Notebooks as users run them: ``paddlectl notebook`` against the live portal, a real JupyterLab
(the portal's Python's) in a sandboxed local job run by a real Celery worker, reached through
``Backend.port_open`` with its token; stopped by its owner, or by the idle check once its
kernels are idle past its limit, unless kept."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from accounts.models import ApiToken
from interactive.models import Session
from jobs.models import Job, JobEvent, Replica, Usage
from jobs.states import JobState, ReplicaState
from paddlecloud_core.contract import session_token
from tests.interactive.notebooks import jupyter, notebook_running
from tests.polling import wait

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def test_a_notebook_is_started_listed_reached_with_its_token_alone_and_stopped(live_cli,
                                                                             celery_worker):
    (live_cli.portal.home / "data.txt").write_text("in alice's home\n")
    started = ok(live_cli("notebook", "start", "-name", "nb", "-idle", "1h", "-cpu", "500m"))
    assert "notebook nb" in started.stdout and "/notebooks/nb/open" in started.stdout
    job = notebook_running(live_cli.portal.home, "nb")
    assert job.session == "notebook" and job.cpu == 500 and job.trainers == 1

    listed = ok(live_cli("notebook", "ls")).stdout
    row = next(line.split() for line in listed.splitlines() if line.startswith("nb "))
    assert row[1:3] == ["running", "500m"] and "1h" in listed

    # Its root is alice's home; without its token Jupyter answers nothing.
    status, contents = jupyter(job, "GET", "/api/contents")
    assert status == 200 and "data.txt" in {entry["name"] for entry in contents["content"]}
    assert jupyter(job, "GET", "/api/contents", token=None)[0] in (401, 403)
    assert jupyter(job, "GET", "/api/contents", token="pcs_wrong")[0] in (401, 403)
    # Its token never shows: not in its spec, its events, nor what the API says of it.
    secret = session_token(settings.SECRET_KEY, job.uid)
    shown = live_cli("notebook", "ls", "-o", "json").stdout + live_cli(
        "get", "jobs", "nb", "-o", "json").stdout
    assert secret not in shown and secret not in json.dumps(job.env)
    token = Session.objects.get(job=job).api_token
    assert token.state == "active"

    ok(live_cli("notebook", "stop", "nb"))
    job.refresh_from_db()
    assert (job.state, job.state_reason) == (JobState.KILLED, "stopped by alice")
    wait(lambda: Replica.objects.get(job=job).state == ReplicaState.KILLED, timeout=30,
         message="its replica to stop")
    assert ApiToken.objects.get(pk=token.pk).state == "revoked"
    assert "no notebooks" in ok(live_cli("notebook", "ls")).stdout
    assert "nb " in ok(live_cli("notebook", "ls", "-a")).stdout


def test_an_idle_notebook_is_stopped_with_an_event_saying_why_and_a_kept_one_is_not(
        live_cli, celery_worker):
    ok(live_cli("notebook", "start", "-name", "idle", "-idle", "3s"))
    ok(live_cli("notebook", "start", "-name", "kept", "-idle", "3s"))
    ok(live_cli("notebook", "keep", "kept"))
    idle, kept = (notebook_running(live_cli.portal.home, name) for name in ("idle", "kept"))
    status, kernel = jupyter(idle, "POST", "/api/kernels", body={"name": "python3"})
    assert status == 201, kernel

    idle = wait(lambda: Job.objects.filter(pk=idle.pk, state=JobState.KILLED).first(),
                timeout=90, message="the idle notebook to be stopped")
    assert idle.state_reason.startswith("stopped: idle for ")
    assert "1 kernel, none busy" in idle.state_reason and "idle limit of 3s" in idle.state_reason
    assert JobEvent.objects.filter(job=idle, to_state=JobState.KILLED,
                                   reason=idle.state_reason).exists()
    # Its use ends with the stop: its usage rows are closed.
    wait(lambda: Usage.objects.filter(job_key=idle.pk).exists() and not Usage.objects.filter(
        job_key=idle.pk, ended_at__isnull=True).exists(),
         timeout=30, message="its usage to end")

    kept.refresh_from_db()
    assert kept.state == JobState.RUNNING
    assert JobEvent.objects.filter(job=kept, reason__startswith="kept alive by alice").exists()
    ok(live_cli("notebook", "stop", "kept"))


def test_a_start_refused_says_which_field_and_leaves_nothing(live_cli):
    result = live_cli("notebook", "start", "-idle", "forever", "-name", "bad")
    assert result.returncode != 0 and "idle" in result.stderr and "90s, 30m" in result.stderr
    result = live_cli("notebook", "start", "-memory", "lots", "-name", "bad")
    assert result.returncode != 0 and "memory" in result.stderr
    assert not Job.objects.exists() and not Session.objects.exists()
    assert not (live_cli.portal.home / "jobs" / "bad").exists()
