"""Notebooks as users run them: ``paddlectl notebook`` against the live portal, a real JupyterLab
(the portal's Python's) in a sandboxed local job run by a real Celery worker, reached through
``Backend.port_open`` with its token; stopped by its owner, or by the idle check once its
kernels are idle past its limit, unless kept."""

from __future__ import annotations

import json
import threading

import pytest
from django.conf import settings

from accounts.models import ApiToken
from interactive.models import Session
from jobs.backends import backend_for
from jobs.models import Job, JobEvent, Replica, Usage
from jobs.states import JobState, ReplicaState
from paddlecloud_core.contract import session_token
from tests.interactive.notebooks import (
    jupyter,
    kernel_run,
    notebook_running,
    route_entered,
    stopped_when_idle,
    through_route,
)
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

    # Through the portal's proxy, as alice's browser: a kernel started over Jupyter's REST API
    # runs code there, in her notebook's environment.
    host, cookie, landing = route_entered(live_cli.portal, live_cli.portal.user, "nb")
    assert landing == "/lab"
    status, kernel = through_route(live_cli.portal, host, cookie, "POST", "/api/kernels",
                                   {"name": "python3"})
    assert status == 201, kernel
    said = kernel_run(live_cli.portal, host, cookie, kernel["id"], (
        "import os, yaml\n"
        "config = yaml.safe_load(open(os.environ['PADDLE_CONFIG']))\n"
        "print(os.environ['PADDLE_NOTEBOOK'], os.getcwd(), config['datacenters'][0]['username'],"
        " 'PADDLECLOUD_API_TOKEN' in os.environ, 6 * 7)"))
    home = backend_for(job.datacenter).paths(job).pfs_home  # its kernels start there
    assert said == f"YES {home} alice False 42\n", said
    assert through_route(live_cli.portal, host, "", "GET", "/api/kernels")[0] == 404

    ok(live_cli("notebook", "stop", "nb"))
    job.refresh_from_db()
    assert (job.state, job.state_reason) == (JobState.KILLED, "stopped by alice")
    wait(lambda: Replica.objects.get(job=job).state == ReplicaState.KILLED, timeout=30,
         message="its replica to stop")
    assert ApiToken.objects.get(pk=token.pk).state == "revoked"
    assert "no notebooks" in ok(live_cli("notebook", "ls")).stdout
    assert "nb " in ok(live_cli("notebook", "ls", "-a")).stdout


def test_a_notebook_is_stopped_once_its_kernels_are_idle_past_its_limit_and_a_kept_one_is_not(
        live_cli, celery_worker):
    portal = live_cli.portal
    for name in ("lab", "kept"):  # kept while they start: their idle time is the test's
        ok(live_cli("notebook", "start", "-name", name, "-idle", "3s"))
        ok(live_cli("notebook", "keep", name))
    lab, kept = (notebook_running(portal.home, name) for name in ("lab", "kept"))
    host, cookie, _ = route_entered(portal, portal.user, "lab")
    kernel = through_route(portal, host, cookie, "POST", "/api/kernels", {"name": "python3"})[1]

    # A cell runs for longer than its idle limit (checks come every 15 s): it is in use.
    said: list[str] = []
    cell = threading.Thread(target=lambda: said.append(kernel_run(
        portal, host, cookie, kernel["id"], "import time; time.sleep(20); print('done')")))
    cell.start()
    wait(lambda: any(k["execution_state"] == "busy" for k in jupyter(lab, "GET",
                                                                     "/api/kernels")[1]),
         timeout=30, message="the cell to run")
    ok(live_cli("notebook", "keep", "lab", "--off"))
    cell.join(60)
    assert said == ["done\n"]
    lab.refresh_from_db()
    assert lab.state == JobState.RUNNING, lab.state_reason

    # Then idle: stopped, with an event that says why; its use ends there.
    lab = stopped_when_idle(lab, "1 kernel, none busy", "3s")
    assert JobEvent.objects.filter(job=lab, reason__startswith="no longer kept by alice").exists()
    wait(lambda: Usage.objects.filter(job_key=lab.pk).exists() and not Usage.objects.filter(
        job_key=lab.pk, ended_at__isnull=True).exists(), timeout=30, message="its use to end")

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


def test_two_notebooks_of_a_portal_without_sandboxes_each_serve_on_their_own_port(
        live_cli, celery_worker, settings):
    settings.PADDLECLOUD_LOCAL_SANDBOX = "off"  # replicas share the machine's loopback
    for name in ("one", "two"):
        ok(live_cli("notebook", "start", "-name", name))
    jobs = [notebook_running(live_cli.portal.home, name) for name in ("one", "two")]
    ports = {Replica.objects.get(job=job).endpoint for job in jobs}
    assert len(ports) == 2
    for job in jobs:
        status, contents = jupyter(job, "GET", "/api/contents")
        assert status == 200 and "jobs" in {entry["name"] for entry in contents["content"]}
    ok(live_cli("notebook", "stop", "one", "two"))
    wait(lambda: not Replica.objects.exclude(state=ReplicaState.KILLED).exists(), timeout=30,
         message="their replicas to stop")
