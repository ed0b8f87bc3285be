"""Benchmark: how fast the embedded portal takes job submissions and gets their replicas running.

    .venv/bin/python bench/submit.py [--jobs 1,10,100] [--port P] [--keep] [--redis]

It starts the portal as a user would (``manage.py migrate``, ``manage.py demo``, ``manage.py
runportal``) in a fresh temporary PADDLECLOUD_VAR_DIR, on the embedded default (SQLite, the
in-process Celery worker, the local backend), puts a trainer package whose entry is ``sleep 3``
in the demo user's PFS home, then for each job count N: submits N one-trainer jobs from a
small thread pool, times each submission, and waits until every job has been running (or has
already succeeded). Between rounds it waits for the jobs to succeed and deletes them. Figures go
to standard output as a table and one JSON line per round; progress goes to standard error.
The portal is always stopped and the temporary directory removed (unless --keep).

This is a benchmark, not a test: it prints figures and exits 1 only if a round failed (an
error answer, a failed job, or a timeout). See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # portal.py, when this script is not run as bench/submit.py
    sys.path.insert(0, str(BENCH))
from portal import (  # noqa: E402
    BenchError,
    KeepAlive,
    Portal,
    Stopped,
    cell,
    free_port,
    handle_signals,
    log,
    percentile,
)

DATACENTER = "datacenter1"
USERNAME = "demo"
PACKAGE = f"/pfs/{DATACENTER}/home/{USERNAME}/bench"
ENTRY = "sleep 3"
KEPT_WITH_REDIS = ("DATABASE_URL", "REDIS_URL")

REQUEST_TIMEOUT = 30.0  # one HTTP request
POLL_INTERVAL = 0.5  # between two looks at the job list
PAGE_LIMIT = 500


# --- the portal --------------------------------------------------------------------------------


class DemoPortal(Portal):
    """The portal set up as a user would: migrate, then ``manage.py demo``; with --redis, the
    environment's DATABASE_URL / REDIS_URL stay."""

    def __init__(self, port: int, *, keep: bool, redis: bool):
        super().__init__(port, keep=keep)
        self.redis = redis
        self.kept_vars = KEPT_WITH_REDIS if redis else ()
        self.password = ""  # the demo user's, once set up

    def setup(self) -> None:
        if self.redis:
            used = [k for k in KEPT_WITH_REDIS if os.environ.get(k)]
            log(f"--redis: keeping {', '.join(used) or 'nothing (neither is set)'}")
        super().setup()
        self.manage("demo", "--endpoint", self.base)
        self.password = (self.var / "demo-password").read_text().strip()


# --- HTTP --------------------------------------------------------------------------------------


class Client(KeepAlive):
    """One keep-alive connection to the portal (one per thread)."""

    def __init__(self, base: str, token: str | None = None):
        super().__init__(urlsplit(base).hostname, urlsplit(base).port, REQUEST_TIMEOUT)
        self.token = token

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return self.send(method, path, data, headers)


def list_jobs(client: Client, **query: str) -> list[dict]:
    """Every job matching the query, following the cursor pagination's ``next`` links."""
    path = f"/api/v1/jobs/?{urlencode({**query, 'limit': PAGE_LIMIT})}"
    jobs: list[dict] = []
    for _ in range(10_000):  # bounded: 5 million jobs
        status, page = client.request("GET", path)
        if status != 200 or not isinstance(page, dict):
            raise BenchError(f"GET {path} answered {status}: {page}")
        jobs.extend(page["results"])
        if not page.get("next"):
            return jobs
        parts = urlsplit(page["next"])
        path = f"{parts.path}?{parts.query}"
    raise BenchError(f"GET {path}: too many pages")


# --- one round ---------------------------------------------------------------------------------


@dataclass
class Round:
    jobs: int
    submissions_per_s: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    all_running_s: float | None = None
    error: str | None = None
    latencies: list[float] = field(default_factory=list, repr=False)

    def as_json(self) -> str:
        def rounded(value, digits):
            return None if value is None else round(value, digits)

        return json.dumps({"bench": "submit", "jobs": self.jobs,
                           "submissions_per_s": rounded(self.submissions_per_s, 1),
                           "submit_p50_ms": rounded(self.p50_ms, 1),
                           "submit_p95_ms": rounded(self.p95_ms, 1),
                           "all_running_s": rounded(self.all_running_s, 2),
                           "ok": self.error is None, "error": self.error})


class Bench:
    def __init__(self, base: str, token: str, *, threads: int, timeout: float):
        self.base = base
        self.token = token
        self.threads = threads
        self.timeout = timeout
        self.local = threading.local()
        self.clients: list[Client] = []
        self.lock = threading.Lock()
        self.control = Client(base, token)  # for polling, from the main thread

    def client(self) -> Client:
        client = getattr(self.local, "client", None)
        if client is None:
            client = self.local.client = Client(self.base, self.token)
            with self.lock:
                self.clients.append(client)
        return client

    def close(self) -> None:
        for client in [*self.clients, self.control]:
            client.close()

    def submit(self, name: str) -> tuple[float, int, object]:
        body = {"name": name, "package": PACKAGE, "entry": ENTRY, "trainers": 1}
        start = time.perf_counter()
        status, answer = self.client().request("POST", "/api/v1/jobs/", body)
        return time.perf_counter() - start, status, answer

    def run(self, count: int) -> Round:
        result = Round(count)
        prefix = f"b{count}-"
        names = [f"{prefix}{i}" for i in range(count)]
        log(f"round {count}: submitting {count} job(s) from {self.threads} threads")
        pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="submit")
        try:
            first = time.perf_counter()
            outcomes = list(pool.map(self.submit, names))
            submitted = time.perf_counter()
        finally:  # on Ctrl-C, drop what has not been sent yet
            pool.shutdown(wait=True, cancel_futures=True)
        result.latencies = [latency for latency, _, _ in outcomes]
        result.submissions_per_s = count / (submitted - first)
        result.p50_ms = percentile(result.latencies, 50) * 1000
        result.p95_ms = percentile(result.latencies, 95) * 1000
        refused = [(name, status, answer) for name, (_, status, answer) in zip(names, outcomes,
                                                                                 strict=True)
                   if status != 201]
        log(f"round {count}: submitted in {submitted - first:.2f} s "
            f"({result.submissions_per_s:.1f}/s, p50 {result.p50_ms:.0f} ms, "
            f"p95 {result.p95_ms:.0f} ms)")
        if refused:
            name, status, answer = refused[0]
            result.error = (f"{len(refused)} of {count} submissions refused; first: {name} "
                            f"answered {status}: {answer}")
            return result
        try:
            result.all_running_s = self.wait_running(set(names), prefix, first)
        except BenchError as exc:
            result.error = str(exc)
        return result

    def failed(self, names: set[str], prefix: str) -> None:
        bad = [job for job in list_jobs(self.control, state="failed,killed", name=prefix)
               if job["name"] in names]
        if bad:
            raise BenchError(f"{len(bad)} job(s) ended badly; first: {bad[0]['name']} "
                             f"{bad[0]['state']}: {bad[0]['state_reason']}")

    def wait_running(self, names: set[str], prefix: str, first: float) -> float:
        """Seconds from the first submission until every job has been running (a job counts
        once it is running or has already succeeded; each has one replica, and a job runs only
        once all its replicas do)."""
        deadline = time.monotonic() + self.timeout
        seen: set[str] = set()
        last_report = time.monotonic()
        while True:
            running = list_jobs(self.control, state="running,succeeded", name=prefix)
            seen |= {job["name"] for job in running} & names
            if seen == names:
                return time.perf_counter() - first
            self.failed(names, prefix)
            if time.monotonic() > deadline:
                raise BenchError(f"timeout: after {self.timeout:.0f} s only {len(seen)} of "
                                 f"{len(names)} jobs had been running")
            if time.monotonic() - last_report > 10:
                log(f"  {len(seen)} of {len(names)} jobs have been running")
                last_report = time.monotonic()
            time.sleep(POLL_INTERVAL)

    def wait_ended_and_delete(self, count: int) -> None:
        """Wait (bounded) for the round's jobs to succeed, then delete them."""
        prefix = f"b{count}-"
        names = {f"{prefix}{i}" for i in range(count)}
        deadline = time.monotonic() + self.timeout
        while True:
            mine = [job for job in list_jobs(self.control, name=prefix) if job["name"] in names]
            live = [job for job in mine if job["state"] not in ("succeeded", "failed", "killed")]
            if not live:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"timeout: {len(live)} of round {count}'s jobs still not ended "
                                 f"after {self.timeout:.0f} s (e.g. {live[0]['name']} is "
                                 f"{live[0]['state']})")
            time.sleep(POLL_INTERVAL)
        start = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="delete")
        try:
            outcomes = list(pool.map(
                lambda job: (job["name"], *self.client().request(
                    "DELETE", f"/api/v1/jobs/{job['name']}/")), mine))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        refused = [outcome for outcome in outcomes if outcome[1] != 204]
        if refused:
            raise BenchError(f"{len(refused)} deletions refused; first: {refused[0]}")
        log(f"round {count}: {len(mine)} job(s) ended and deleted "
            f"(deletions took {time.perf_counter() - start:.2f} s)")


# --- the whole run -----------------------------------------------------------------------------


def make_package(var: Path) -> None:
    package = var / "pfs" / DATACENTER / "home" / USERNAME / "bench"
    package.mkdir(parents=True, exist_ok=True)
    (package / "README").write_text(f"A trainer package for bench/submit.py: its entry is "
                                    f"`{ENTRY}`; nothing here runs.\n")


def login(base: str, password: str) -> str:
    client = Client(base)
    try:
        status, answer = client.request("POST", "/api/v1/auth/token/",
                                        {"username": USERNAME, "password": password,
                                         "datacenter": DATACENTER, "name": "bench"})
    finally:
        client.close()
    if status != 201 or not isinstance(answer, dict):
        raise BenchError(f"login answered {status}: {answer}")
    return answer["token"]


def table(rounds: list[Round]) -> str:
    lines = [f"{'jobs':>6}  {'submit/s':>9}  {'p50 ms':>8}  {'p95 ms':>8}  "
             f"{'all running s':>13}  result"]
    for r in rounds:
        lines.append(f"{r.jobs:>6}  {cell(r.submissions_per_s, 1):>9}  {cell(r.p50_ms, 1):>8}  "
                     f"{cell(r.p95_ms, 1):>8}  {cell(r.all_running_s, 2):>13}  "
                     f"{'ok' if r.error is None else 'FAILED: ' + r.error}")
    return "\n".join(lines)


def job_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated whole numbers") from None
    if not counts or any(not 1 <= n <= 1000 for n in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: job counts from 1 to 1000")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Submit N jobs to a fresh embedded portal and time them until they run.")
    parser.add_argument("--jobs", type=job_counts, default=[1, 10, 100],
                        help="job counts, one round each (default 1,10,100)")
    parser.add_argument("--port", type=int, default=0, help="portal port (default: a free one)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary var dir and the portal log")
    parser.add_argument("--redis", action="store_true",
                        help="keep REDIS_URL / DATABASE_URL from the environment")
    parser.add_argument("--threads", type=int, default=8, help="submitting threads (default 8)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds a round may wait for its jobs (default 300)")
    args = parser.parse_args(argv)

    handle_signals()
    began = time.monotonic()
    rounds: list[Round] = []
    portal = DemoPortal(args.port or free_port(), keep=args.keep, redis=args.redis)
    bench = None
    code = 0
    try:
        portal.start()
        make_package(portal.var)
        bench = Bench(portal.base, login(portal.base, portal.password), threads=args.threads,
                      timeout=args.timeout)
        for count in args.jobs:
            result = bench.run(count)
            rounds.append(result)
            print(result.as_json(), flush=True)
            if result.error is not None:
                log(f"round {count} failed: {result.error}; portal log:\n{portal.log_tail()}")
                code = 1
                break
            bench.wait_ended_and_delete(count)  # so rounds do not overlap (and none outlives us)
    except BenchError as exc:
        log(f"failed: {exc}")
        code = 1
    except (KeyboardInterrupt, Stopped):
        log("interrupted")
        code = 130
    finally:
        if bench is not None:
            bench.close()
        portal.shut_down()
    if rounds:
        print(table(rounds), flush=True)
    log(f"run time {time.monotonic() - began:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
