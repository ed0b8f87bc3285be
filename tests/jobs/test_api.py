"""The jobs REST API (/api/v1/jobs/…) as a user of it sees it: submitting, listing, looking at
workers, events and logs, killing and deleting — with real processes on the local backend.

Most tests drive a job by hand with the engine (``job_launch``, then ``job_sync`` until it
ends); under the default ``django_db`` the start that a submission queues on commit never runs.
One test follows a log while the job really runs on the Celery worker."""

from __future__ import annotations

import itertools
import os
import re
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.utils import timezone

from accounts.models import AuditEntry
from accounts.services import quota_set
from jobs import engine, tasks
from jobs.backends import backend_for
from jobs.backends.local.backend import job_dir
from jobs.files import output_dir
from jobs.models import Job, JobEvent, Replica
from paddlecloud_core.layout import log_relpath
from tests.conftest import BAD_FLAGS, FLAG_SPELLINGS, assert_error, streamed
from tests.factories import PACKAGE, job_fields, job_row
from tests.jobs.files import log_path

URL = "/api/v1/jobs/"
DRIVE_TIMEOUT = 15.0

# A trainer (or pserver) that prints LINES lines, one every EVERY seconds, then sleeps SLEEP
# seconds and exits CODE. With STUBBORN set it ignores SIGTERM, and run as STUBBORN runs it
# (not under a shell, which SIGTERM would end) only SIGKILL ends it.
TRAINER = """\
import os, signal, sys, time
if os.environ.get("STUBBORN"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
tid = os.environ.get("TRAINER_ID") or "ps" + os.environ["PADDLE_PSERVER_ID"]
for i in range(int(os.environ.get("LINES", "3"))):
    print(f"trainer {tid} line {i}", flush=True)
    time.sleep(float(os.environ.get("EVERY", "0")))
time.sleep(float(os.environ.get("SLEEP", "0")))
sys.exit(int(os.environ.get("CODE", "0")))
"""

pytestmark = [pytest.mark.django_db, pytest.mark.package(TRAINER)]


def job_url(name: str, what: str = "") -> str:
    return f"{URL}{name}/{what}"


@pytest.fixture
def reaper(pfs_home):
    """Leaves no replica process behind, whatever state a test left its jobs in."""
    yield
    for job in Job.objects.select_related("datacenter", "owner"):
        backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)


@pytest.fixture
def submit(token_client, alice, datacenter, package, reaper):
    """``submit(name="fit-a-line", **fields)``: alice's job posted to the API; its answer."""
    def post(name="fit-a-line", **fields):
        data = job_fields(alice, datacenter, name, package=package, **fields)
        response = token_client.post(URL, data, format="json")
        assert response.status_code == 201, response.content
        return response.json()

    return post


def drive(name: str, *, until: str | None = None, timeout: float = DRIVE_TIMEOUT) -> Job:
    """Start the job and follow it as the worker would, until it ends (or reaches ``until``)."""
    job = Job.objects.get(name=name)
    engine.job_launch(job.pk)
    deadline = time.monotonic() + timeout
    while True:
        running = engine.job_sync(job.pk)
        job.refresh_from_db()
        if job.state == until or not running:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {name} still {job.state} after {timeout}s: "
                                 f"{[str(e) for e in job.events.all()]}")
        time.sleep(0.05)


def runner_pids(job: Job) -> list[int]:
    refs = [r.backend_ref for r in job.replicas.all()]
    assert all(ref.startswith("pid:") for ref in refs), refs
    return [int(ref.removeprefix("pid:")) for ref in refs]


def alive(pid: int) -> bool:
    """Whether the process runs (an exited child not yet reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [job["name"] for job in response.json()["results"]]


# --- submitting -------------------------------------------------------------------------------


def test_submit_records_an_admitted_job_and_queues_one_start(
        token_client, package, reaper, django_capture_on_commit_callbacks, held_tasks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = token_client.post(URL, {
            "jobname": "fit-a-line", "parallelism": 2, "package": package,
            "entry": "python train.py", "cpu": "1", "memory": "1Gi"}, format="json")
    assert response.status_code == 201, response.content
    job = response.json()
    assert job["name"] == "fit-a-line"
    assert job["trainers"] == 2
    # It fits the quota (2 of 4 CPUs): admitted at once, its replicas not started yet.
    assert (job["state"], job["state_reason"]) == ("starting", "admitted: its quota is free")
    assert job["queue_position"] is None
    assert (job["cpu"], job["memory"]) == ("1", "1Gi")
    assert job["datacenter"] == "datacenter1"
    assert job["package"] == PACKAGE
    assert job["entry"] == "python train.py"
    assert job["registry"] is None
    assert job["started_at"] is not None and job["finished_at"] is None

    # The job alone adds what would start it sooner (null: it does not wait).
    assert token_client.get(job_url("fit-a-line")).json() == {**job, "sooner": None}
    workers = token_client.get(job_url("fit-a-line", "workers")).json()
    assert [(w["name"], w["state"]) for w in workers] == [("trainer-0", "pending"),
                                                          ("trainer-1", "pending")]

    # Exactly one start is queued once the job is committed: of this job (the rest tell the
    # dashboards, or count for the metrics).
    for callback in callbacks:
        if getattr(callback, "__qualname__", "") != "_after_commit.<locals>.send":
            callback()
    assert held_tasks.sent == [("jobs.tasks.job_start", (Job.objects.get(name="fit-a-line").pk,))]


def test_a_gpu_job_that_names_no_image_runs_the_cuda_build_and_says_so(
        token_client, package, alice, datacenter, kube_datacenter, held_tasks, settings):
    """-gpu > 0 and no image: the CUDA build of the default image's Paddle (the portal's, or
    the datacenter's GPU image); a CPU job keeps the default image, and an image named wins.
    The job says which image it runs, in the API (and ``paddlectl get jobs -o wide``)."""
    quota_set(None, datacenter, alice, cpu=8000, gpu=4)

    def image_of(name: str, **fields) -> str:
        response = token_client.post(URL, {"name": name, "package": package,
                                           "entry": "python train.py", **fields}, format="json")
        assert response.status_code == 201, response.content
        shown = token_client.get(job_url(name)).json()
        assert shown["image"] == response.json()["image"]
        return shown["image"]

    assert image_of("gpu", gpu=1) == "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"
    assert image_of("cpu") == "paddlepaddle/paddle:2.6.1"
    assert image_of("named", gpu=2, image="registry.example.com/paddle:mine") == \
        "registry.example.com/paddle:mine"
    datacenter.gpu_image = "registry.example.com/paddle:3.0.0-gpu-cuda12.6"
    datacenter.save()
    assert image_of("gpu-here", gpu=1) == "registry.example.com/paddle:3.0.0-gpu-cuda12.6"
    # A datacenter whose CPU image is its administrator's own, without a GPU image: that
    # image (the portal cannot know its CUDA build), not another Paddle's.
    datacenter.gpu_image, datacenter.default_image = "", "registry.example.com/paddle:2.5"
    datacenter.save()
    assert image_of("gpu-own", gpu=1) == "registry.example.com/paddle:2.5"


def test_a_job_that_runs_as_processes_says_it_runs_no_image(token_client, package, alice,
                                                             datacenter, held_tasks):
    """On a datacenter whose replicas run as processes on the portal's machine, the job, its
    dry run and the job's page all say it runs no image (not the default image it never
    pulls)."""
    quota_set(None, datacenter, alice, cpu=8000, gpu=4)
    body = {"name": "local", "package": package, "entry": "python train.py",
            "image": "registry.example.com/paddle:mine"}
    plan = token_client.post(URL, {**body, "dry_run": True}, format="json")
    assert plan.status_code == 200 and plan.json()["job"]["image"] is None, plan.content
    response = token_client.post(URL, body, format="json")
    assert response.status_code == 201 and response.json()["image"] is None, response.content
    assert token_client.get(job_url("local")).json()["image"] is None


def test_dry_run_shows_the_plan_and_creates_nothing(
        token_client, package, alice, datacenter, django_capture_on_commit_callbacks):
    quota_set(None, datacenter, alice, cpu=8000, gpu=4)
    with django_capture_on_commit_callbacks() as callbacks:
        response = token_client.post(URL, {
            "name": "probe", "package": package, "entry": "python train.py", "trainers": 3,
            "cpu": "2", "memory": "2Gi", "gpu": 1, "pservers": 2, "pscpu": "500m",
            "psmemory": "512Mi", "dry_run": True}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"dry_run", "job", "replicas", "admission", "objects", "yaml"}
    assert (body["objects"], body["yaml"]) == ([], "")  # a local datacenter creates none
    assert body["dry_run"] is True
    job = body["job"]
    assert (job["name"], job["package"], job["entry"]) == ("probe", PACKAGE, "python train.py")
    assert (job["trainers"], job["pservers"], job["gpu"]) == (3, 2, 1)
    assert job["image"] is None  # a local datacenter's replicas run as processes
    replicas = body["replicas"]
    assert [(r["role"], r["index"]) for r in replicas] == [
        ("pserver", 0), ("pserver", 1), ("trainer", 0), ("trainer", 1), ("trainer", 2)]
    for replica in replicas:
        assert set(replica) == {"name", "role", "index", "cpu", "memory", "gpu"}
        assert replica["name"] == f"{replica['role']}-{replica['index']}"
        if replica["role"] == "pserver":
            assert (replica["cpu"], replica["memory"], replica["gpu"]) == \
                (job["pscpu"], job["psmemory"], 0)
        else:
            assert (replica["cpu"], replica["memory"], replica["gpu"]) == \
                (job["cpu"], job["memory"], 1)
    assert replicas[0]["cpu"] != replicas[-1]["cpu"]  # pservers get pscpu, not cpu

    assert callbacks == []
    assert not Job.objects.exists()
    assert names(token_client.get(URL)) == []
    assert_error(token_client.get(job_url("probe")), 404, "not_found")


def test_dry_run_answers_cpu_and_memory_as_the_job_does(token_client, package):
    response = token_client.post(URL, {
        "name": "probe", "package": package, "entry": "python train.py", "cpu": "1",
        "memory": "1Gi", "pservers": 1, "pscpu": "500m", "psmemory": "512Mi",
        "dry_run": True}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    job = body["job"]
    assert (job["cpu"], job["memory"], job["pscpu"], job["psmemory"]) == \
        ("1", "1Gi", "500m", "512Mi")
    assert [(r["cpu"], r["memory"]) for r in body["replicas"]] == [("500m", "512Mi"),
                                                                    ("1", "1Gi")]


def test_a_second_job_of_the_same_name_is_refused(token_client, submit):
    first = submit("fit-a-line")
    response = token_client.post(URL, {"name": "fit-a-line", "package": PACKAGE,
                                       "entry": "python other.py"}, format="json")
    body = assert_error(response, 400, "invalid", field="name")
    assert "already have a job named 'fit-a-line'" in body["fields"]["name"][0]
    assert Job.objects.count() == 1
    assert token_client.get(job_url("fit-a-line")).json()["created_at"] == first["created_at"]


def test_a_body_that_is_not_an_object_is_refused(token_client, package):
    response = token_client.post(URL, [{"name": "fit-a-line", "package": package,
                                        "entry": "python train.py"}], format="json")
    body = assert_error(response, 400, "invalid")
    assert "JSON object" in body["message"]
    assert not Job.objects.exists()


def test_a_bad_submission_names_every_wrong_field(token_client, package):
    response = token_client.post(URL, {"name": "Fit_A_Line", "package": package,
                                       "trainers": 0, "memory": "lots", "colour": "blue"},
                                 format="json")
    body = assert_error(response, 400, "invalid")
    assert set(body["fields"]) == {"name", "entry", "trainers", "memory", "colour"}
    for field in body["fields"]:
        assert f"{field}: " in body["message"]
    assert not Job.objects.exists()


# --- listing ----------------------------------------------------------------------------------


def test_the_list_is_newest_first(token_client, submit):
    for name in ("first", "second", "third"):
        submit(name)
    response = token_client.get(URL)
    assert names(response) == ["third", "second", "first"]
    # The quota allows 2 jobs at once: the third waits, first in line.
    assert [(j["state"], j["queue_position"]) for j in response.json()["results"]] == [
        ("queued", 1), ("starting", None), ("starting", None)]


def test_the_list_filters_by_state_and_name(token_client, alice, datacenter):
    job_row(alice, datacenter, "fit-a-line", state="succeeded")
    job_row(alice, datacenter, "refit", state="failed")
    job_row(alice, datacenter, "fit-more", state="running")
    job_row(alice, datacenter, "other", state="killed")

    assert names(token_client.get(URL, {"state": "succeeded,failed"})) == ["refit",
                                                                          "fit-a-line"]
    assert names(token_client.get(URL, {"state": "running"})) == ["fit-more"]
    assert names(token_client.get(URL, {"name": "fit"})) == ["fit-more", "refit", "fit-a-line"]
    assert names(token_client.get(URL, {"name": "fit", "state": "killed"})) == []

    body = assert_error(token_client.get(URL, {"state": "succeeded,bogus"}), 400, "invalid",
                        field="state")
    assert "'bogus'" in body["message"]


def test_the_list_pages_with_a_cursor(token_client, alice, datacenter):
    for i in range(5):
        job_row(alice, datacenter, f"job-{i}")
    seen, pages = [], 0
    url = f"{URL}?limit=2"
    while url:
        response = token_client.get(url)
        page = names(response)
        assert len(page) <= 2
        seen += page
        pages += 1
        url = response.json()["next"]
        assert pages <= 5, "the cursor does not end"
    assert pages == 3
    assert seen == [f"job-{i}" for i in (4, 3, 2, 1, 0)]  # each exactly once, newest first


def test_jobs_of_another_datacenter_are_not_listed(token_client, alice, datacenter,
                                                   other_datacenter):
    job_row(alice, datacenter, "here")
    job_row(alice, other_datacenter, "elsewhere")
    assert names(token_client.get(URL)) == ["here"]
    assert_error(token_client.get(job_url("elsewhere")), 404, "not_found")


# --- who may see what -------------------------------------------------------------------------


def test_another_users_job_is_not_found_by_any_endpoint(token_client, make_user, datacenter):
    bob = make_user("bob")
    secret = Job.objects.create(owner=bob, datacenter=datacenter, name="secret",
                                package="/pfs/datacenter1/home/bob/pkg", entry="x", image="i")
    Replica.objects.create(job=secret, role="trainer", index=0)

    for method, what in [("get", ""), ("delete", ""), ("post", "kill"), ("get", "workers"),
                         ("get", "events"), ("get", "logs")]:
        response = getattr(token_client, method)(job_url("secret", what))
        body = assert_error(response, 404, "not_found")
        assert "bob" not in body["message"], (method, what)

    secret.refresh_from_db()
    assert (secret.owner, secret.state, secret.finished_at) == (bob, "pending", None)
    assert not JobEvent.objects.filter(job=secret).exists()
    assert names(token_client.get(URL)) == []


def test_without_a_token_nothing_is_answered(api, alice, datacenter):
    job_row(alice, datacenter, "fit-a-line")
    for method, url in [("get", URL), ("post", URL), ("get", job_url("fit-a-line")),
                        ("post", job_url("fit-a-line", "kill")),
                        ("get", job_url("fit-a-line", "logs"))]:
        assert_error(getattr(api, method)(url), 401, "not_authenticated")
    assert Job.objects.get(name="fit-a-line").state == "pending"


# --- a job that runs --------------------------------------------------------------------------


def test_a_two_trainer_job_runs_and_keeps_its_logs(token_client, submit, pfs_home):
    submit("fit-a-line", trainers=2, env={"LINES": "5"})
    job = drive("fit-a-line")
    assert job.state == "succeeded", job.state_reason
    assert token_client.get(job_url("fit-a-line")).json()["state"] == "succeeded"

    workers = token_client.get(job_url("fit-a-line", "workers")).json()
    assert [(w["name"], w["role"], w["index"], w["state"], w["exit_code"]) for w in workers] == [
        ("trainer-0", "trainer", 0, "succeeded", 0), ("trainer-1", "trainer", 1, "succeeded", 0)]
    endpoints = [w["endpoint"] for w in workers]
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", e) for e in endpoints), endpoints
    assert len(set(endpoints)) == 2

    events = token_client.get(job_url("fit-a-line", "events")).json()["results"]
    assert (events[0]["worker"], events[0]["from_state"], events[0]["to_state"],
            events[0]["reason"]) == (None, "", "pending", "submitted by alice")
    assert (events[1]["worker"], events[1]["to_state"]) == (None, "starting")
    assert (events[-1]["worker"], events[-1]["to_state"]) == (None, "succeeded")
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    for worker in ("trainer-0", "trainer-1"):
        chain = [(e["from_state"], e["to_state"]) for e in events if e["worker"] == worker]
        assert chain[0] == ("pending", "starting"), chain
        assert chain[-1][1] == "succeeded", chain
        assert all(a[1] == b[0] for a, b in itertools.pairwise(chain)), chain
    job_chain = [(e["from_state"], e["to_state"]) for e in events if e["worker"] is None]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(job_chain)), job_chain

    expected = "".join(f"trainer 1 line {i}\n" for i in range(5))
    response = token_client.get(job_url("fit-a-line", "logs"), {"worker": "trainer-1"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert streamed(response).decode() == expected
    default = token_client.get(job_url("fit-a-line", "logs"))
    assert streamed(default).decode().startswith("trainer 0 line 0\n")
    tail = token_client.get(job_url("fit-a-line", "logs"), {"worker": "trainer-1", "tail": 2})
    assert streamed(tail).decode() == "trainer 1 line 3\ntrainer 1 line 4\n"

    body = assert_error(token_client.get(job_url("fit-a-line", "logs"), {"worker": "nope"}),
                        404, "not_found", field="worker")
    assert "'nope'" in body["message"] and "trainer-0, trainer-1" in body["message"]
    assert_error(token_client.get(job_url("fit-a-line", "logs"), {"tail": "abc"}),
                 400, "invalid", field="tail")
    # Where an answer begins (Log-Offset), and from there on (offset=): a byte of the file.
    assert tail["Log-Offset"] == str(len(expected) - len("trainer 1 line 3\ntrainer 1 line 4\n"))
    part = token_client.get(job_url("fit-a-line", "logs"), {"worker": "trainer-1",
                                                            "offset": "17"})
    assert (part["Log-Offset"], streamed(part).decode()) == ("17", expected[17:])
    for bad in ("-1", "x", "17:", "17:uid", str(2**63)):
        assert_error(token_client.get(job_url("fit-a-line", "logs"), {"offset": bad}),
                     400, "invalid", field="offset")
    # A cursor naming a pod (no pod ever ran this job's log): nothing to go on from.
    assert_error(token_client.get(job_url("fit-a-line", "logs"), {"offset": "17:ab-12:0"}),
                 409, "log_gone", field="offset")

    # The seeds' layout in the owner's PFS home, kept after the job ended.
    log = pfs_home / "jobs" / "fit-a-line" / "output" / "node_1" / "train.log"
    assert log.read_text() == expected
    assert (pfs_home / "jobs" / "fit-a-line" / "output" / "node_0" / "train.log").is_file()


def test_a_missing_entry_command_fails_the_job(token_client, submit):
    submit("typo", entry="no-such-command")
    job = drive("typo")
    assert job.state == "failed"
    detail = token_client.get(job_url("typo")).json()
    assert detail["state"] == "failed"
    assert "command not found" in detail["state_reason"]

    workers = token_client.get(job_url("typo", "workers")).json()
    assert [(w["name"], w["state"], w["exit_code"]) for w in workers] == [
        ("trainer-0", "failed", 127)]
    events = token_client.get(job_url("typo", "events")).json()["results"]
    assert events[-1]["to_state"] == "failed" and events[-1]["worker"] is None
    assert "command not found" in events[-1]["reason"]
    assert any(e["worker"] == "trainer-0" and "command not found" in e["reason"]
               for e in events)
    log = streamed(token_client.get(job_url("typo", "logs"))).decode()
    assert "no-such-command" in log and "not found" in log


# --- following a log while the job runs on the worker -----------------------------------------


@pytest.mark.django_db(transaction=True)
def test_following_a_log_streams_it_until_the_trainer_ends(celery_worker, token_client,
                                                           submit):
    submit("follow-me", env={"LINES": "10", "EVERY": "0.2"})
    started = time.monotonic()
    response = token_client.get(job_url("follow-me", "logs"), {"follow": "1"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")

    async def consume() -> list[bytes]:
        return [chunk async for chunk in response.streaming_content]

    chunks = async_to_sync(consume)()
    took = time.monotonic() - started
    assert took < 15, f"following the log took {took:.1f}s"
    assert b"".join(chunks).decode() == "".join(f"trainer 0 line {i}\n" for i in range(10))
    assert len(chunks) > 1  # it arrived while the trainer was printing, not all at the end

    deadline = time.monotonic() + 10
    while (state := token_client.get(job_url("follow-me")).json()["state"]) != "succeeded":
        assert time.monotonic() < deadline, f"the job stayed {state}"
        time.sleep(0.1)


@pytest.mark.parametrize(("value", "follows"), FLAG_SPELLINGS)
def test_follow_takes_every_spelling_of_a_boolean(token_client, alice, datacenter, pfs_home,
                                                  value, follows):
    job = job_row(alice, datacenter, "fit", state="running")
    replica = Replica.objects.create(job=job, role="trainer", index=0, state="running")
    log = log_path(job, replica)
    log.parent.mkdir(parents=True)
    log.write_bytes(b"line 0\n")
    response = token_client.get(job_url("fit", "logs"), {"follow": value})
    assert response.status_code == 200, response.content

    async def read() -> bytes:
        chunks = aiter(response.streaming_content)
        got = [await anext(chunks)]
        # Followed, the log stays open while the worker runs and ends when it does.
        with log.open("ab") as f:
            f.write(b"line 1\n")
        await sync_to_async(Replica.objects.filter(pk=replica.pk).update)(state="succeeded")
        return b"".join(got + [chunk async for chunk in chunks])

    assert async_to_sync(read)() == (b"line 0\nline 1\n" if follows else b"line 0\n")


@pytest.mark.parametrize("value", BAD_FLAGS)
def test_follow_is_a_boolean_or_a_400_naming_it(token_client, alice, datacenter, value):
    job = job_row(alice, datacenter, "fit")
    Replica.objects.create(job=job, role="trainer", index=0)
    body = assert_error(token_client.get(job_url("fit", "logs"), {"follow": value}), 400,
                        "invalid", field="follow")
    assert body["fields"]["follow"] == [
        "a boolean: 1, true, yes or on for true; 0, false, no or off for false (any case)"]


# --- kill and delete --------------------------------------------------------------------------


def test_killing_a_running_job_stops_every_replica(token_client, submit, monkeypatch,
                                                   django_capture_on_commit_callbacks, held_tasks):
    submit("sleeper", trainers=2, pservers=1, env={"LINES": "1", "SLEEP": "60"})
    job = drive("sleeper", until="running")
    assert job.state == "running"
    pids = runner_pids(job)
    assert len(pids) == 3
    for pid in pids:
        os.kill(pid, 0)  # running

    stops = []
    held_tasks.run("jobs.tasks.job_stop", stops.append)
    with django_capture_on_commit_callbacks(execute=True):
        response = token_client.post(job_url("sleeper", "kill"))
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "killed"
    assert response.json()["state_reason"] == "killed by alice"
    assert stops == [job.pk]  # the stop is queued once, for this job

    engine.job_halt(job.pk)  # what the queued job_stop task does
    workers = token_client.get(job_url("sleeper", "workers")).json()
    assert {w["name"]: w["state"] for w in workers} == {
        "pserver-0": "killed", "trainer-0": "killed", "trainer-1": "killed"}
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)  # nor anything the runner started

    assert token_client.get(job_url("sleeper")).json()["state"] == "killed"
    assert_error(token_client.post(job_url("sleeper", "kill")), 409, "job_ended")


def test_delete_only_ended_jobs_and_keep_their_output(token_client, submit, pfs_home,
                                                      monkeypatch, held_tasks,
                                                      django_capture_on_commit_callbacks):
    submit("sleeper", env={"LINES": "1", "SLEEP": "60"})
    job = drive("sleeper", until="running")
    assert job.state == "running"
    log = pfs_home / "jobs" / "sleeper" / "output" / "node_0" / "train.log"
    deadline = time.monotonic() + DRIVE_TIMEOUT
    while not (log.exists() and log.read_text()):  # the trainer has written its line
        assert time.monotonic() < deadline, "the trainer wrote nothing"
        time.sleep(0.05)

    body = assert_error(token_client.delete(job_url("sleeper")), 409, "job_not_ended")
    assert "kill it first" in body["message"]
    assert token_client.get(job_url("sleeper")).json()["state"] == "running"

    assert token_client.post(job_url("sleeper", "kill")).status_code == 200
    engine.job_halt(job.pk)
    removals = []
    held_tasks.run("jobs.tasks.job_remains_remove", removals.append)
    with django_capture_on_commit_callbacks(execute=True):
        response = token_client.delete(job_url("sleeper"))
    assert response.status_code == 204, response.content
    assert_error(token_client.get(job_url("sleeper")), 404, "not_found")
    assert names(token_client.get(URL)) == []
    assert len(removals) == 1  # what is left of it is removed on the worker
    tasks.job_remains_remove(*removals)
    assert log.read_text() == "trainer 0 line 0\n"
    assert not job_dir(job).exists()  # the private copy of the package is gone

    again = token_client.post(URL, {"name": "sleeper", "package": PACKAGE,
                                    "entry": "python train.py"}, format="json")
    assert again.status_code == 201, again.content
    assert again.json()["state"] == "starting"
    workers = token_client.get(job_url("sleeper", "workers")).json()
    assert [(w["name"], w["state"]) for w in workers] == [("trainer-0", "pending")]
    events = token_client.get(job_url("sleeper", "events")).json()["results"]
    assert [e["to_state"] for e in events] == ["pending", "starting"]


STUBBORN = {"entry": "exec python train.py",
            "env": {"LINES": "1", "SLEEP": "60", "STUBBORN": "1"}}


def stubborn_pids(job: Job) -> list[int]:
    """The runners of a running job's STUBBORN trainers, once each has written its line (and
    so ignores SIGTERM)."""
    deadline = time.monotonic() + DRIVE_TIMEOUT
    logs = [output_dir(job) / log_relpath("trainer", i) for i in range(job.trainers)]
    while not all(log.exists() and log.read_text() for log in logs):
        assert time.monotonic() < deadline, "the trainers wrote nothing"
        time.sleep(0.05)
    return runner_pids(job)


def test_a_delete_leaves_stopping_the_replicas_to_its_removal_task(
        token_client, submit, monkeypatch, django_capture_on_commit_callbacks, held_tasks):
    monkeypatch.setattr("jobs.engine.STOP_GRACE_SECONDS", 3.0)
    submit("stubborn", trainers=2, **STUBBORN)
    job = drive("stubborn", until="running")
    assert job.state == "running"
    pids = stubborn_pids(job)
    stops, removals = [], []
    held_tasks.run("jobs.tasks.job_stop", stops.append)
    held_tasks.run("jobs.tasks.job_remains_remove", removals.append)
    with django_capture_on_commit_callbacks(execute=True):
        assert token_client.post(job_url("stubborn", "kill")).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        started = time.monotonic()
        response = token_client.delete(job_url("stubborn"))
        took = time.monotonic() - started
    assert response.status_code == 204, response.content
    assert took < 1.5, f"the delete took {took:.1f}s"  # stopping them takes the 3 s grace
    assert_error(token_client.get(job_url("stubborn")), 404, "not_found")
    assert [pid for pid in pids if alive(pid)] == pids  # the request stopped nothing
    entry = AuditEntry.objects.get(action="job.delete")
    assert (entry.actor_name, entry.target, entry.details) == ("alice", "alice/stubborn", {})

    # The kill's stop finds the job gone; the removal the delete queued (once) stops them.
    assert stops == [job.pk]
    tasks.job_stop(*stops)
    assert [pid for pid in pids if alive(pid)] == pids
    assert removals == [{"id": job.pk, "uid": str(job.uid), "name": "stubborn",
                         "datacenter_id": job.datacenter_id, "owner_id": job.owner_id,
                         "replicas": [["trainer", 0], ["trainer", 1]]}]
    started = time.monotonic()
    tasks.job_remains_remove(*removals)
    assert 3.0 <= time.monotonic() - started < 13  # SIGTERM, the grace, then SIGKILL
    assert [pid for pid in pids if alive(pid)] == []
    assert not job_dir(job).exists()
    tasks.job_remains_remove(*removals)  # a second run finds nothing left to do


@pytest.mark.django_db(transaction=True)
def test_kill_then_delete_answers_at_once_and_the_worker_stops_the_replicas(
        celery_worker, token_client, submit, monkeypatch):
    """`paddlectl kill` and at once `paddlectl delete job` while the replicas take their grace
    to stop: the delete does not wait for them; the worker stops them."""
    monkeypatch.setattr("jobs.engine.STOP_GRACE_SECONDS", 3.0)
    submit("stubborn", **STUBBORN)
    deadline = time.monotonic() + DRIVE_TIMEOUT
    while token_client.get(job_url("stubborn")).json()["state"] != "running":
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.1)
    job = Job.objects.get(name="stubborn")
    pids = stubborn_pids(job)
    assert token_client.post(job_url("stubborn", "kill")).status_code == 200
    started = time.monotonic()
    response = token_client.delete(job_url("stubborn"))
    took = time.monotonic() - started
    assert response.status_code == 204, response.content
    assert took < 1.5, f"the delete took {took:.1f}s"  # stopping the trainer takes 3 s
    assert names(token_client.get(URL)) == []
    deadline = time.monotonic() + 3.0 + 10
    while [pid for pid in pids if alive(pid)]:
        assert time.monotonic() < deadline, "the trainer still runs"
        time.sleep(0.1)
    while job_dir(job).exists():
        assert time.monotonic() < deadline, "what the job kept is still there"
        time.sleep(0.1)


def test_a_job_past_its_ttl_is_removed_as_a_delete_is_by_the_system(
        token_client, submit, monkeypatch, django_capture_on_commit_callbacks, held_tasks):
    submit("brief", ttl_seconds_after_finished=60, env={"LINES": "1"})
    job = drive("brief")
    assert job.state == "succeeded"
    assert job_dir(job).exists()
    removals = []
    held_tasks.run("jobs.tasks.job_remains_remove", removals.append)
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.jobs_reconcile()["expired"] == 0  # not yet
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(seconds=61))
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.jobs_reconcile()["expired"] == 1
    assert_error(token_client.get(job_url("brief")), 404, "not_found")
    entry = AuditEntry.objects.get(action="job.delete")
    assert (entry.actor, entry.actor_name, entry.target, entry.datacenter, entry.details) == (
        None, "system", "alice/brief", "datacenter1",
        {"reason": "ttl", "ttl_seconds_after_finished": 60})
    assert len(removals) == 1  # the same removal as a delete's, on the worker
    tasks.job_remains_remove(*removals)
    assert not job_dir(job).exists()
    assert (output_dir(job) / log_relpath("trainer", 0)).read_text() == "trainer 0 line 0\n"


def test_deleting_a_just_killed_job_leaves_no_process_running(token_client, submit):
    submit("sleeper", trainers=2, env={"LINES": "1", "SLEEP": "60"})
    job = drive("sleeper", until="running")
    assert job.state == "running"
    pids = runner_pids(job)
    try:
        # `paddlectl kill sleeper` and at once `paddlectl delete job sleeper`: the stop the
        # kill queued has not run yet when the delete arrives.
        assert token_client.post(job_url("sleeper", "kill")).status_code == 200
        assert token_client.delete(job_url("sleeper")).status_code == 204
        tasks.job_stop(job.pk)  # the queued stop now runs on the worker: the job is gone
        # The removal the delete queued is lost here (it never runs): the reconciler's sweep
        # of orphans ends what is left.
        tasks.jobs_reconcile()
        time.sleep(0.5)
        assert [pid for pid in pids if alive(pid)] == []
    finally:
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
