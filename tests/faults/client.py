"""What the fault suite drives the deployment with and what it checks after each fault.

``Api`` speaks to the portal as paddlectl does (a bearer token, JSON) and records every
answer, so that a test can say none was a 500 (``contract_breaches``: 503 comes with
``Retry-After`` and code ``unavailable``; a full PFS is 507 ``storage_full``). ``User`` is one
user's side of a test: their trainer package, their jobs (submitted with an
``Idempotency-Key``, retried as the clients retry), what their trainers did (each start
appends a line to ``starts.log`` in the home) and the checks of the issue: no job lost, none
run twice, never over quota, nothing left running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import requests

from jobs.backends.netns import process_argvs
from tests.polling import wait

from .deployment import DATACENTER, JOBS_QUOTA, Deployment

FINAL = ("succeeded", "failed", "killed")
ACTIVE = ("starting", "running")

# The trainer of every job: says it started (in the home, appended: a second start of the
# same attempt shows), then per its first argument ends at once (quick), waits until the test
# releases it (hold: a file named after the job appears in release/), or prints numbered lines
# (count N).
TRAINER = """\
import os, sys, time
mode, name = sys.argv[1], sys.argv[2]
home = os.environ["HOME"]
with open(os.path.join(home, "starts.log"), "a") as log:
    log.write(f"{name} {os.environ.get('PADDLE_TRAINER_ID', '0')}\\n")
if mode == "hold":
    while not os.path.exists(os.path.join(home, "release", name)):
        time.sleep(0.05)
elif mode == "count":
    for n in range(int(sys.argv[4])):
        print(f"line {n}", flush=True)
        time.sleep(0.05)
"""


@dataclasses.dataclass
class Answer:
    method: str
    path: str
    status: int | None  # None: no answer (refused, cut off, timed out)
    headers: Mapping[str, str]
    body: object
    at: float  # time.monotonic() when it came
    error: str = ""

    def __str__(self):
        body = " ".join(str(self.body).split())[:200]  # a page's HTML on one line
        return f"{self.method} {self.path} -> {self.status or self.error} {body}"

    @property
    def code(self) -> str | None:
        return self.body.get("code") if isinstance(self.body, dict) else None


class Api:
    def __init__(self, url: str, token: str | None = None):
        self.url, self.token = url, token
        self.answers: list[Answer] = []
        self._lock = threading.Lock()

    def call(self, method: str, path: str, *, json=None, headers=None, data=None,
             params=None, auth: bool = True, timeout: float = 15) -> Answer:
        sent = dict(headers or {})
        if auth and self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        try:
            response = requests.request(method, f"{self.url}{path}", json=json, data=data,
                                        params=params, headers=sent, timeout=timeout)
        except requests.RequestException as exc:
            answer = Answer(method, path, None, {}, None, time.monotonic(),
                            error=type(exc).__name__)
        else:
            try:
                body = response.json()
            except ValueError:
                body = response.text
            answer = Answer(method, path, response.status_code, response.headers, body,
                            time.monotonic())  # headers: any case, as HTTP has them
        with self._lock:
            self.answers.append(answer)
        return answer

    def submit(self, fields: dict, *, key: str | None = None, until: float = 0.0) -> Answer:
        """POST a job as paddlectl does: with an Idempotency-Key, sent again with the same
        key after a connection error or a 503 (honouring Retry-After) until ``until``
        (time.monotonic()); the last answer."""
        key = key or str(uuid.uuid4())
        while True:
            answer = self.call("POST", "/api/v1/jobs/", json=fields,
                               headers={"Idempotency-Key": key})
            if answer.status not in (None, 503) or time.monotonic() >= until:
                return answer
            retry = answer.headers.get("Retry-After", "1")
            time.sleep(min(float(retry) if retry.isdigit() else 1.0,
                           max(until - time.monotonic(), 0), 5))


def contract_breaches(answers: list[Answer]) -> list[str]:
    """The answers that break the contract of an outage: a 5xx that is not a 503 with
    Retry-After and code ``unavailable`` (nor a full PFS's 507 ``storage_full``); the same
    request and status once, with how often it came."""
    breaches: dict[tuple, list[Answer]] = {}
    for answer in answers:
        if answer.status is None or answer.status < 500:
            continue
        if answer.status == 503 and answer.headers.get("Retry-After") and (
                answer.code == "unavailable" or answer.path in ("/readyz",)):
            continue
        if answer.status == 507 and answer.code == "storage_full":
            continue
        breaches.setdefault((answer.method, answer.path, answer.status), []).append(answer)
    return [f"{len(seen)} x {seen[0]}" for seen in breaches.values()]


class QuotaWatch:
    """Samples the database while a test runs: each time a user holds more active jobs than
    their quota, it is noted (samples the database cannot answer are skipped)."""

    def __init__(self, deployment: Deployment):
        self.deployment = deployment
        self.over: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults-quota", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _run(self):
        while not self._stop.wait(0.25):
            with contextlib.suppress(Exception):
                for owner, count in self.deployment.sql(
                        "SELECT owner_id, count(*) FROM jobs_job WHERE state IN ('starting', "
                        "'running') GROUP BY owner_id"):
                    if count > JOBS_QUOTA:
                        self.over.append(f"user {owner}: {count} active jobs, quota "
                                         f"{JOBS_QUOTA}")


class User:
    """One test's user: their API, home, package and jobs."""

    def __init__(self, deployment: Deployment, name: str, info: dict):
        self.deployment, self.name, self.id = deployment, name, info["id"]
        self.api = Api(deployment.url, info["token"])
        self.home = deployment.home(name)
        (self.home / "pkg").mkdir(parents=True, exist_ok=True)
        (self.home / "pkg" / "train.py").write_text(TRAINER)
        self.keys: dict[str, str] = {}  # job name: the Idempotency-Key it was submitted with
        self.quota: QuotaWatch | None = None  # set by the ``user`` fixture

    # --- jobs -----------------------------------------------------------------------------

    def fields(self, name: str, mode: str = "quick", *args: str, **fields) -> dict:
        entry = " ".join(["python train.py", mode, name, self.deployment.token, *args])
        return {"name": name, "package": f"/pfs/{DATACENTER}/home/{self.name}/pkg",
                "entry": entry, "cpu": "100m", "memory": "64Mi", **fields}

    def submit(self, name: str, mode: str = "quick", *args: str, until: float = 0.0,
               **fields) -> Answer:
        key = self.keys.setdefault(name, str(uuid.uuid4()))
        return self.api.submit(self.fields(name, mode, *args, **fields), key=key, until=until)

    def run(self, name: str, mode: str = "hold", *args: str, **fields) -> dict:
        """Submit a job and wait until it runs (its trainer started); its row."""
        answer = self.submit(name, mode, *args, **fields)
        assert answer.status == 201, answer
        wait(lambda: self.job(name) and self.job(name)["state"] == "running"
             and self.starts(name), 30, lambda: f"{name} does not run: {self.job(name)}\n"
                                                f"{self.deployment.logs()}")
        return self.job(name)

    def release(self, name: str) -> None:
        """Let the job's held trainers end (well)."""
        (self.home / "release").mkdir(exist_ok=True)
        (self.home / "release" / name).touch()

    def job(self, name: str) -> dict | None:
        """The job's row as the database has it (None: there is none)."""
        rows = self.deployment.sql(
            "SELECT id, uid, state, state_reason FROM jobs_job WHERE owner_id = %s AND "
            "name = %s", self.id, name)
        if not rows:
            return None
        job_id, uid, state, reason = rows[0]
        replicas = self.deployment.sql(
            "SELECT role, index, state, restarts, attempt, exit_code FROM jobs_replica "
            "WHERE job_id = %s ORDER BY role, index", job_id)
        return {"id": job_id, "uid": str(uid), "state": state, "reason": reason,
                "replicas": [dict(zip(("role", "index", "state", "restarts", "attempt",
                                       "exit_code"), r, strict=True)) for r in replicas]}

    def jobs(self) -> dict[str, dict]:
        names = [name for (name,) in self.deployment.sql(
            "SELECT name FROM jobs_job WHERE owner_id = %s", self.id)]
        return {name: self.job(name) for name in names}

    def wait_state(self, name: str, states: tuple[str, ...] | str, timeout: float) -> dict:
        states = (states,) if isinstance(states, str) else states
        return wait(lambda: (job := self.job(name)) and job["state"] in states and job,
                    timeout, lambda: f"{name} is not {'/'.join(states)} within {timeout} s: "
                                     f"{self.job(name)}")

    def starts(self, name: str) -> int:
        """How many times a trainer of ``name`` started."""
        log = self.home / "starts.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return sum(1 for line in lines if line.split()[0] == name)

    def runner_pid(self, job: dict, replica: str = "trainer-0") -> int:
        """The pid of the replica's runner (its process group: bwrap and the trainer)."""
        pid_file = self.deployment.job_dir(job["uid"]) / "run" / f"{replica}.pid"
        return json.loads(pid_file.read_text())["pid"]

    def trainer_pid(self, name: str) -> int:
        """The host pid of ``name``'s trainer process (python train.py … in its sandbox)."""
        token = self.deployment.token.encode()
        for pid, argv in process_argvs():
            if argv[1:2] == [b"train.py"] and name.encode() in argv and token in argv:
                return pid
        raise AssertionError(f"no trainer process of {name}")

    # --- the checks ----------------------------------------------------------------

    def problems(self) -> list[str]:
        """What breaks the invariants now: a job submitted (201) that is gone, two jobs for
        one Idempotency-Key, a trainer that started more often than its attempts, a 500."""
        found = []
        jobs = self.jobs()
        for answer in self.api.answers:
            if answer.method == "POST" and answer.path == "/api/v1/jobs/" and \
                    answer.status == 201 and answer.body.get("name") not in jobs:
                found.append(f"lost: {answer.body.get('name')} was accepted (201), and is gone")
        for name, job in jobs.items():
            attempts = sum(r["attempt"] + 1 for r in job["replicas"]
                           if r["state"] != "pending" or r["attempt"])
            if self.starts(name) > attempts:
                found.append(f"run twice: {name}'s trainers started {self.starts(name)} "
                             f"times for {attempts} attempts ({job})")
        found += [f"contract: {breach}" for breach in contract_breaches(self.api.answers)]
        found += [f"over quota: {over}" for over in (self.quota.over if self.quota else [])]
        return found

    def left_running(self) -> list[str]:
        """Processes of this user's ended jobs that still run (runners, sandboxes, trainers,
        network holders)."""
        found = []
        ended = {job["uid"]: name for name, job in self.jobs().items()
                 if job["state"] in FINAL}
        for pid, argv in process_argvs():
            line = b" ".join(argv)
            for uid, name in ended.items():
                if str(self.deployment.job_dir(uid)).encode() in line:
                    found.append(f"{name}: pid {pid} {line[:200]!r}")
        return found

    def end_all(self, timeout: float = 30) -> None:
        """Kill what still runs of this user's jobs (through the API) and wait until each has
        ended and left nothing running."""
        for name, job in self.jobs().items():
            if job["state"] not in FINAL:
                self.release(name)
                self.api.call("POST", f"/api/v1/jobs/{name}/kill")
        wait(lambda: all(job["state"] in FINAL for job in self.jobs().values()), timeout,
             lambda: f"jobs do not end: {self.jobs()}")
        wait(lambda: not self.left_running(), 15,
             lambda: "left running after their jobs ended:\n  " + "\n  ".join(
                 self.left_running()))


def kill_process(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def home_usage(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
