"""The master's calls over real HTTP, answered before Django (jobs/master/app.py): the API's
error shape, naming the field; the token checked before anything else; the security headers
Django's answers carry; and the threads that keep database connections stop with the server."""

from __future__ import annotations

import http.client
import json
import threading
import time
from urllib.parse import urlsplit

import pytest

from jobs.master.dispatch import master_token
from jobs.models import Task
from jobs.services import job_submit
from tests.factories import HOME, PACKAGE, package_write

pytestmark = pytest.mark.django_db(transaction=True)


def call(portal, path: str, body: bytes | str, token: str = "") -> tuple[int, dict, object]:
    where = urlsplit(portal.url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:
        connection.request("POST", path, body=body, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read()), response.headers
    finally:
        connection.close()


@pytest.fixture
def job(live_portal):
    home = live_portal.home
    package_write(home, "")
    (home / "lines.txt").write_text("".join(f"line {i}\n" for i in range(10)))
    return job_submit(live_portal.user, live_portal.datacenter, {
        "name": "fast", "package": PACKAGE, "entry": "python train.py",
        "dataset": f"{HOME}/lines.txt", "task_records": 5}).job


def master_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("master-db-")]


def test_a_trainer_takes_and_completes_tasks_over_http(live_portal, job):
    base, token = f"/api/v1/master/{job.uid}", master_token(job)
    status, answer, headers = call(live_portal, f"{base}/next", '{"trainer": 0}', token)
    assert status == 200, answer
    task = answer["task"]
    assert (task["pass"], task["index"], task["spans"]) == (0, 0, [
        {"path": f"{HOME}/lines.txt", "kind": "records", "start": 0,
         "count": 5}])
    assert headers["X-Content-Type-Options"] == "nosniff"  # Django's security headers
    assert headers["X-Frame-Options"] == "DENY"
    status, answer, _ = call(live_portal, f"{base}/tasks/{task['id']}/done",
                             json.dumps({"trainer": 0, "lease": task["lease"]}), token)
    assert (status, answer) == (200, {"done": True})
    assert Task.objects.get(pk=task["id"]).state == "done"
    assert master_threads()  # the calls ran on the master's threads


def test_the_master_threads_close_their_connections_when_stopped(live_portal, job):
    from django.db import connection

    from paddlecloud.asgi import http

    def backends() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND pid <> pg_backend_pid()")
            return cursor.fetchone()[0]

    before = backends()
    for trainer in range(8):  # enough calls at once for every thread to open its connection
        call(live_portal, f"/api/v1/master/{job.uid}/next", json.dumps({"trainer": trainer}),
             master_token(job))
    assert len(master_threads()) == http.threads.size
    http.stop()
    assert master_threads() == []
    deadline = time.monotonic() + 10  # a closed connection's backend takes a moment to exit
    while backends() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backends() <= before


@pytest.mark.parametrize(("path", "body", "token", "status", "field"), [
    ("next", '{"trainer": 0}', "pcm_wrong", 404, None),
    ("next", '{"trainer": 0}', "", 404, None),
    ("next", '{"trainer": ', "mine", 400, "body"),
    ("next", '{"trainer": -1}', "mine", 400, "trainer"),
    ("next", '[1, 2]', "mine", 400, "trainer"),
    ("tasks/1/done", '{"trainer": 0}', "mine", 400, "lease"),
    ("tasks/1/finish", '{"trainer": 0, "lease": "x"}', "mine", 404, None),
    # What the database cannot store (kernel/storable.py): a 400 naming it, not a 500.
    ("next", '{"trainer": 2147483648}', "mine", 400, "trainer"),  # 2**31
    ("next", '{"trainer": 1000}', "mine", 400, "trainer"),  # no job has a trainer-1000
    ("next", '{"trainer": 0, "x": 99999999999999999999}', "mine", 400, "x"),
    ("tasks/1/done", '{"trainer": 0, "lease": "ab\\u0000"}', "mine", 400, "lease"),
    ("tasks/1/done", '{"trainer": 0, "lease": "x", "\\u0000": 1}', "mine", 400, "body"),
])
def test_bad_calls_get_the_apis_errors_and_change_nothing(live_portal, job, path, body, token,
                                                          status, field):
    token = master_token(job) if token == "mine" else token
    got, answer, _ = call(live_portal, f"/api/v1/master/{job.uid}/{path}", body, token)
    assert got == status, answer
    assert set(answer) == {"code", "message", "fields"}
    if field:
        assert field in answer["fields"], answer
    assert not Task.objects.filter(job=job).exclude(state="waiting").exists()


def test_a_reason_the_database_cannot_store_is_refused_and_the_task_stays_held(live_portal,
                                                                                job):
    base, token = f"/api/v1/master/{job.uid}", master_token(job)
    _, answer, _ = call(live_portal, f"{base}/next", '{"trainer": 0}', token)
    task = answer["task"]
    for action in ("release", "failed"):
        status, answer, _ = call(live_portal, f"{base}/tasks/{task['id']}/{action}", json.dumps(
            {"trainer": 0, "lease": task["lease"], "reason": "out of memory\x00"}), token)
        assert (status, answer["code"], list(answer["fields"])) == (400, "unstorable",
                                                                     ["reason"]), answer
    held = Task.objects.get(pk=task["id"])
    assert (held.state, held.lease, held.failures) == ("leased", task["lease"], 0)
    assert not job.events.filter(reason__contains="out of memory").exists()


def test_a_body_too_large_is_refused(live_portal, job):
    body = json.dumps({"trainer": 0, "lease": "x", "reason": "x" * 70_000})
    status, answer, _ = call(live_portal, f"/api/v1/master/{job.uid}/tasks/1/failed", body,
                             master_token(job))
    assert status == 400 and answer["code"] == "too_long" and "body" in answer["fields"]


def test_many_trainers_over_http_have_each_task_done_once_a_pass(live_portal):
    """16 trainers at once over HTTP, each on its keep-alive connection: the master's
    threads answer the calls that wait together (one transaction each time), and every task
    of both passes is handed out once and done once."""
    home = live_portal.home
    package_write(home, "")
    (home / "many.txt").write_text("".join(f"line {i}\n" for i in range(120)))
    job = job_submit(live_portal.user, live_portal.datacenter, {
        "name": "many", "package": PACKAGE, "entry": "python train.py", "passes": 2,
        "dataset": f"{HOME}/many.txt", "task_records": 1}).job
    base, token = f"/api/v1/master/{job.uid}", master_token(job)
    where = urlsplit(live_portal.url)
    done: list[tuple[int, int]] = []
    errors: list[object] = []

    def trainer(index: int) -> None:
        connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

        def post(path: str, body: dict) -> dict:
            connection.request("POST", base + path, body=json.dumps(body), headers=headers)
            response = connection.getresponse()
            answer = json.loads(response.read())
            if response.status != 200:
                raise AssertionError(f"{path}: {response.status} {answer}")
            return answer

        try:
            while True:
                answer = post("/next", {"trainer": index})
                if answer.get("done"):
                    return
                if "wait" in answer:
                    time.sleep(0.05)
                    continue
                task = answer["task"]
                post(f"/tasks/{task['id']}/done", {"trainer": index, "lease": task["lease"]})
                done.append((task["pass"], task["index"]))
        except Exception as exc:  # reported in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    # trainers 1 to 16: the job's own trainer-0 may end, and its leases would come back
    threads = [threading.Thread(target=trainer, args=(i,)) for i in range(1, 17)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert sorted(done) == [(p, i) for p in range(2) for i in range(120)]
    assert not Task.objects.filter(job=job, attempts__gt=1).exists()
