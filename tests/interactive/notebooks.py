"""Notebooks in tests: Jupyter asked through ``Backend.port_open`` with the notebook's token
(as the portal's idle check asks it), and a notebook waited for until its JupyterLab answers."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings

from interactive.sessions import http_request
from jobs.backends import backend_for
from jobs.models import Job, Replica
from jobs.states import JobState
from paddlecloud_core.contract import SESSION_PORT, session_token
from tests.polling import wait


def jupyter(job, method: str, target: str, *, token: str | None = "", body: dict | None = None):
    """Jupyter's answer to a request sent to the notebook's server through ``port_open``,
    with its token (``token=None``: none): (status, JSON or None)."""
    replica = Replica.objects.get(job=job, role="trainer")
    backend = backend_for(job.datacenter)
    headers = {} if token is None else {
        "Authorization": f"token {token or session_token(settings.SECRET_KEY, job.uid)}"}
    payload = json.dumps(body).encode() if body is not None else b""
    if payload:
        headers["Content-Type"] = "application/json"
    # In a thread of its own: a browser test's thread runs Playwright's event loop.
    with ThreadPoolExecutor(1) as pool:
        status, answer = pool.submit(asyncio.run, http_request(
            backend, job, replica, SESSION_PORT, method, target, headers, payload)).result()
    try:
        return status, json.loads(answer) if answer else None
    except ValueError:
        return status, None


def jupyter_up(job, seen: list) -> bool:
    try:
        return jupyter(job, "GET", "/api/status")[0] == 200
    except Exception as exc:
        seen[:] = [repr(exc)]
        return False


def notebook_running(home, name: str) -> Job:
    """alice's notebook ``name`` once it runs and its JupyterLab answers (its log, in ``home``,
    said if it does not)."""
    job = wait(lambda: Job.objects.filter(name=name, state=JobState.RUNNING).first(),
               timeout=90, message=lambda: f"notebook {name} to run: " + repr(list(
                   Job.objects.values_list("state", "state_reason"))))
    log = home / "jobs" / name / "output" / "node_0" / "train.log"
    seen: list[str] = []
    wait(lambda: jupyter_up(job, seen), timeout=90, message=lambda: f"JupyterLab to answer "
         f"({seen}); its log: " + (log.read_text()[-3000:] if log.exists() else "none"))
    return job
