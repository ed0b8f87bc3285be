"""Notebooks in tests: Jupyter asked through ``Backend.port_open`` with the notebook's token
(as the portal's idle check asks it), and a notebook waited for until its JupyterLab answers."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings

from interactive.sessions import server_port
from interactive.upstream import http_request
from jobs.backends import backend_for
from jobs.models import Job, JobEvent, Replica
from jobs.states import FINAL_JOB_STATES, JobState
from paddlecloud_core.contract import session_token
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
            backend, job, replica, server_port(replica), method, target, headers,
            payload)).result()
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
    log = home / "jobs" / name / "output" / "node_0" / "train.log"

    def said() -> str:
        return "its log: " + (log.read_text()[-3000:] if log.exists() else "none")

    job = wait(lambda: Job.objects.filter(name=name, state__in=(
        JobState.RUNNING, *FINAL_JOB_STATES)).first(), timeout=90,
        message=lambda: f"notebook {name} to run: " + repr(list(
            Job.objects.values_list("state", "state_reason"))))
    assert job.state == JobState.RUNNING, f"{job.state}: {job.state_reason}; {said()}"
    seen: list[str] = []
    wait(lambda: jupyter_up(job, seen), timeout=90,
         message=lambda: f"JupyterLab to answer ({seen}); {said()}")
    return job


def stopped_when_idle(job, said: str, limit: str) -> Job:
    """The notebook ``job`` once the idle check has stopped it, saying why (``said``: what it
    saw of its kernels, past its idle ``limit``) in its state and in the event of its stop."""
    job = wait(lambda: Job.objects.filter(pk=job.pk, state=JobState.KILLED).first(),
               timeout=90, message="the idle notebook to be stopped")
    assert job.state_reason.startswith("stopped: idle for ")
    assert f"({said}), past its idle limit of {limit}" in job.state_reason, job.state_reason
    assert JobEvent.objects.filter(job=job, to_state=JobState.KILLED,
                                   reason=job.state_reason).exists()
    return job


def route_entered(live_portal, user, name: str) -> tuple[str, str, str]:
    """``user`` entered into their notebook ``name`` as a browser is (``opening.session_open``,
    then the route's ``/_paddlecloud/enter``), without one: (the route's host, its cookie,
    where the portal sent them)."""
    import http.client
    from urllib.parse import urlsplit

    from django.test import RequestFactory

    from interactive.opening import session_open

    request = RequestFactory().get("/", HTTP_HOST=f"localhost:{live_portal.port}")
    request.user = user
    url = urlsplit(session_open(user, live_portal.datacenter, name, request))
    connection = http.client.HTTPConnection("127.0.0.1", live_portal.port, timeout=30)
    try:
        connection.request("GET", f"{url.path}?{url.query}", headers={"Host": url.netloc})
        answer = connection.getresponse()
        answer.read()
        cookie = answer.getheader("Set-Cookie", "").split(";", 1)[0]
    finally:
        connection.close()
    assert answer.status in (302, 303) and cookie, (answer.status, answer.getheaders())
    return url.netloc, cookie, answer.getheader("Location")


def through_route(live_portal, host: str, cookie: str, method: str, path: str,
                  body: dict | None = None) -> tuple[int, object]:
    """A request to the route (its Host, its cookie): (status, JSON or None)."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", live_portal.port, timeout=30)
    try:
        headers = {"Host": host, **({"Cookie": cookie} if cookie else {})}
        payload = json.dumps(body).encode() if body is not None else None
        if payload is not None:
            headers["Content-Type"] = "application/json"
        connection.request(method, path, body=payload, headers=headers)
        answer = connection.getresponse()
        data = answer.read()
    finally:
        connection.close()
    try:
        return answer.status, json.loads(data) if data else None
    except ValueError:
        return answer.status, None


def kernel_run(live_portal, host: str, cookie: str, kernel: str, code: str) -> str:
    """What ``code`` prints, run by the notebook's kernel ``kernel`` over Jupyter's kernel
    WebSocket through the route (the messaging protocol as JSON)."""
    import socket
    import uuid

    from websockets.sync.client import connect

    session, msg_id = uuid.uuid4().hex, uuid.uuid4().hex
    request = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "session": session,
                          "username": "test", "version": "5.3", "date": ""},
               "parent_header": {}, "metadata": {}, "channel": "shell",
               "content": {"code": code, "silent": False, "store_history": False,
                           "user_expressions": {}, "allow_stdin": False,
                           "stop_on_error": True}}
    sock = socket.create_connection(("127.0.0.1", live_portal.port), timeout=30)
    printed = []
    with connect(f"ws://{host}/api/kernels/{kernel}/channels?session_id={session}", sock=sock,
                 additional_headers={"Cookie": cookie}, open_timeout=30) as ws:
        ws.send(json.dumps(request))
        while True:
            message = json.loads(ws.recv(timeout=120))
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message["header"]["msg_type"], message["content"]
            if kind == "stream":
                printed.append(content["text"])
            elif kind == "error":
                raise AssertionError("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(printed)
