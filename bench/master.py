"""Benchmark: tasks the job master serves per second to 8, 64 and 256 concurrent trainers, on
PostgreSQL, beside the same lease/complete cycle done directly in PostgreSQL.

    .venv/bin/python bench/master.py [--trainers 8,64,256] [--seconds 10] [--tasks 20000]
                                     [--rate 500] [--rate-trainers 64]
                                     [--passes 20] [--database paddlecloud_bench_master]
                                     [--redis-db 12] [--connection-limit 80]
                                     [--peer-connections 64] [--no-peer] [--debug-off]
                                     [--portal-env NAME=VALUE] [--port P] [--keep]

It creates a fresh PostgreSQL database and a role of the same name (``--database``, on
``--pg``: 127.0.0.1:5432 as postgres; the role is no superuser, so the database's
``--connection-limit`` holds: the server is shared) and uses an empty Redis database
(``--redis-db``; 14 and 15 are the tests'). Then it starts the portal as a user would
(``manage.py migrate``, ``manage.py demo``, ``manage.py runportal``: one uvicorn process with
the embedded Celery worker) with DATABASE_URL and REDIS_URL pointing at them, in a fresh
temporary PADDLECLOUD_VAR_DIR. It puts a text file of ``--tasks`` lines in the demo user's PFS
home. Each round submits a job with that file as its dataset (``task_records`` 1: one task a
line; ``--passes`` passes; one trainer whose entry only sleeps: the benchmark's threads are the
trainers), waits until it runs, and kills it after the round. The job's master token comes from
a ``manage.py shell`` (``jobs.master.dispatch.master_token``) and is never printed.

Each round, for C trainers:

- portal: C threads, each with its own keep-alive HTTP connection and trainer id (0..C-1),
  loop ``POST /api/v1/master/<uid>/next`` then ``POST …/tasks/<id>/done`` for ``--seconds``.
  Each reports ``done`` before asking ``next`` again (asking again gives the held task back).
  A ``{"wait": s}`` answer is obeyed (the thread sleeps, as a trainer would). A thread that gets
  an error answer stops, as ``paddlecloud_sdk.master`` does on a 500.
- peer: the same cycle with no portal in between: C threads on PostgreSQL with psycopg,
  ``SELECT … FOR UPDATE SKIP LOCKED LIMIT 1`` then ``UPDATE`` to leased in one transaction,
  then ``UPDATE`` to done, on a table made ``LIKE jobs_task INCLUDING ALL`` and filled with the
  round's job's tasks. At most ``--peer-connections`` connections: above that, the threads share
  them, first come first served.

Then, at ``--rate-trainers`` (64), an open-loop round on the same job, portal then peer:
the same threads keep a timetable (cycle n due ``n / --rate`` s into the window, on thread
n mod C) and ``next`` is timed from when its cycle was due, so a slow answer's effect on the
cycles behind it counts (no coordinated omission). Its JSON line has ``goal``: issue 42's p95
of ``next`` <= 30 ms at >= 500 tasks/s, ``OK`` or ``MISSED``; and how late the client itself
woke (``late_*_ms``), to show it was not the limit.

Before the timed part, the round's first ``next`` makes the pass (untimed), and every thread
does one untimed cycle. Only answers to requests started in the timed window count. Figures go
to standard output as one JSON line per round and a table at the end; progress goes to standard
error. The portal is always stopped, the database and role dropped, the Redis database flushed
(it was empty) and the temporary directory removed, even on Ctrl-C (unless --keep, which keeps
the directory, the database and the role). Exit 1 if a round had errors; a missed target only
prints ``below``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import json
import os
import re
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # portal.py, submit.py, when not run as bench/master.py
    sys.path.insert(0, str(BENCH))
from portal import (  # noqa: E402
    HOST,
    BenchError,
    KeepAlive,
    Stopped,
    cell,
    free_port,
    handle_signals,
    log,
    percent,
)
from submit import DATACENTER, USERNAME, Client, DemoPortal, login, percentile  # noqa: E402

PACKAGE = f"/pfs/{DATACENTER}/home/{USERNAME}/bench"
ENTRY = "sleep 3600"  # the job's own trainer: the benchmark's threads are the trainers
DATA_DIR = "benchdata"
DATASET = f"/pfs/{DATACENTER}/home/{USERNAME}/{DATA_DIR}/lines-*.txt"
JOB_PREFIX = "bench-master-"
# The last line of a traceback in the portal's log: ``psycopg.OperationalError: …``
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Timeout)\b: ")
PEER_JOB_BASE = 1_000_000  # the peer's rows' job_id (no such job: the peer table has no FK)

TARGET_TASKS_PER_S = 500.0  # at TARGET_TRAINERS
TARGET_TRAINERS = 64
TARGET_NEXT_P95_MS = 50.0
# Issue 42's goal, at an offered load (the open-loop round): p95 of next <= 30 ms while 500
# tasks/s are offered and served, at 64 trainers.
GOAL_RATE = 500.0
GOAL_NEXT_P95_MS = 30.0
DRAIN_GRACE_S = 0.1  # open loop: the last cycles due are answered this long after the window
BACKLOG_LIMIT_S = 5.0  # open loop: a thread this far behind its timetable gives up its rest
REQUEST_TIMEOUT = 60.0
RUNNING_TIMEOUT = 120.0  # for the rounds' jobs to run
JOIN_TIMEOUT = 90.0  # after a round's window, for its threads to finish their last cycle
REFUSED_REDIS_DBS = (14, 15)  # the tests'

JOB_CODE = """
from jobs.models import Job
from jobs.master.dispatch import master_token
job = Job.objects.get(name=P["name"])
answer([str(job.uid), master_token(job), job.pk])
"""


# --- the portal, the database, Redis -----------------------------------------------------------


class MasterPortal(DemoPortal):
    """The portal as a user runs it (migrate, demo, runportal) on our PostgreSQL database and
    Redis database."""

    def __init__(self, port: int, *, keep: bool, database_url: str, redis_url: str,
                 more_env: dict[str, str]):
        super().__init__(port, keep=keep, redis=False)
        self.database_url = database_url
        self.redis_url = redis_url
        self.more_env = more_env
        self.log_offset = 0

    def extra_env(self) -> dict[str, str]:
        return {"DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url,
                **self.more_env}

    def new_errors(self) -> dict[str, int]:
        """The exceptions the portal logged since the last call (the last line of each
        traceback), with how often."""
        try:
            with self.log_path.open("rb") as out:
                out.seek(self.log_offset)
                text = out.read()
        except OSError:
            return {}
        self.log_offset += len(text)
        found: dict[str, int] = {}
        for line in text.decode(errors="replace").splitlines():
            if EXCEPTION_LINE.match(line):
                found[line[:300]] = found.get(line[:300], 0) + 1
        return found


class Database:
    """Our own PostgreSQL database and role: created for the run (neither may exist), dropped
    after. The role is not a superuser, so the database's connection limit holds for it: the
    server (max_connections) is shared with other runs, and a portal that opens a connection
    per request in flight could otherwise take all of them."""

    def __init__(self, server: str, name: str, connection_limit: int):
        self.server = server.rstrip("/")
        self.name = name
        self.limit = connection_limit
        host = self.server.split("@", 1)[-1]
        # a password of the run's own: the server may ask for one (it is never printed)
        self.password = secrets.token_hex(16)
        self.url = f"postgres://{name}:{self.password}@{host}/{name}"
        self.role_created = self.created = False

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(f"{self.server}/postgres", autocommit=True, connect_timeout=10)

    def create(self) -> None:
        with self.admin() as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (self.name,)).fetchone():
                raise BenchError(f"database {self.name} exists already (a run's leftover?): "
                                 f"drop it, or pass --database with another name")
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                            (self.name,)).fetchone():
                raise BenchError(f"role {self.name} exists already (a run's leftover?): "
                                 f"drop it, or pass --database with another name")
            conn.execute(f'CREATE ROLE "{self.name}" LOGIN NOSUPERUSER '
                         f"PASSWORD '{self.password}'")
            self.role_created = True
            conn.execute(f'CREATE DATABASE "{self.name}" OWNER "{self.name}" '
                         f"CONNECTION LIMIT {self.limit}")
            self.created = True
        log(f"database and role {self.name} created (at most {self.limit} connections)")

    def close(self, keep: bool) -> None:
        """Drop the database and role, or (``--keep``) say how to drop them later."""
        if keep:
            log(f"kept database and role {self.name} (drop them: psql -c 'DROP "
                f"DATABASE {self.name}' -c 'DROP ROLE {self.name}')")
        else:
            self.drop()

    def drop(self) -> None:
        try:
            with self.admin() as conn:
                if self.created:
                    conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
                    log(f"database {self.name} dropped")
                if self.role_created:
                    conn.execute(f'DROP ROLE IF EXISTS "{self.name}"')
        except psycopg.Error as exc:
            log(f"could not drop database or role {self.name}: {exc}")

    def max_connections(self) -> int:
        with self.admin() as conn:
            return int(conn.execute("SHOW max_connections").fetchone()[0])


class ConnectionWatch(threading.Thread):
    """The most connections to our database at once, sampled every 0.1 s (from the server's
    maintenance database: it does not count against our limit)."""

    def __init__(self, database: Database):
        super().__init__(daemon=True, name="connection-watch")
        self.database = database
        self.stop = threading.Event()
        self.most = 0

    def run(self) -> None:
        with contextlib.suppress(psycopg.Error), self.database.admin() as conn:
            while not self.stop.wait(0.1):
                count = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                     (self.database.name,)).fetchone()[0]
                self.most = max(self.most, count)

    def finish(self) -> int:
        self.stop.set()
        self.join(timeout=5)
        return self.most


class RedisDb:
    """A Redis database that must be empty at the start; flushed at the end (all its keys are
    then the portal's)."""

    def __init__(self, host: str, port: int, db: int):
        self.url = f"redis://{host}:{port}/{db}"
        self.client = redis.Redis(host=host, port=port, db=db, socket_timeout=10)
        self.db = db
        self.checked = False

    def check_empty(self) -> None:
        keys = self.client.dbsize()
        if keys:
            raise BenchError(f"Redis database {self.db} holds {keys} keys: pass --redis-db "
                             f"with an empty one")
        self.checked = True

    def flush(self) -> None:
        if self.checked:
            with contextlib.suppress(redis.RedisError):
                self.client.flushdb()
                log(f"Redis database {self.db} flushed")
        self.client.close()


# --- CPU ---------------------------------------------------------------------------------------


TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def process_cpu(pid: int) -> float:
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def postgres_cpu() -> float | None:
    """CPU seconds of every PostgreSQL process: the live ones, plus what the postmaster has
    reaped (its children's cutime + cstime: backends that have exited). Includes other users'
    sessions on the same server."""
    procs: dict[int, list[str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/comm") as comm:
                if comm.read().strip() != "postgres":
                    continue
            procs[int(entry.name)] = _stat_fields(int(entry.name))
        except OSError:
            continue
    postmasters = [fields for fields in procs.values() if int(fields[1]) not in procs]
    if len(postmasters) != 1:
        return None  # no server here, or several: not ours to add up
    total = sum((int(f[11]) + int(f[12])) / TICKS for f in procs.values())
    return total + (int(postmasters[0][13]) + int(postmasters[0][14])) / TICKS


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def cpu_stalled() -> float | None:
    """Seconds some runnable task waited for a CPU (/proc/pressure/cpu "some"); None without
    PSI."""
    try:
        with open("/proc/pressure/cpu") as pressure:
            some = pressure.readline().split()
        return int(dict(part.split("=") for part in some[1:])["total"]) / 1e6
    except (OSError, KeyError, ValueError):
        return None


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    total = sum(values[:8])  # without guest (counted in user)
    return total - idle, total


class CpuMeter:
    def __init__(self, portal_pid: int):
        self.portal_pid = portal_pid

    def sample(self) -> dict:
        return {"bench": own_cpu(), "portal": process_cpu(self.portal_pid),
                "postgres": postgres_cpu(), "stalled": cpu_stalled(),
                "machine": machine_busy(), "time": time.monotonic()}

    @staticmethod
    def shares(first: dict, last: dict) -> dict:
        """CPU over the window, as a share of one core (1.0 = one core busy)."""
        wall = last["time"] - first["time"]

        def share(key):
            if first[key] is None or last[key] is None or wall <= 0:
                return None
            return (last[key] - first[key]) / wall

        busy = last["machine"][0] - first["machine"][0]
        total = last["machine"][1] - first["machine"][1]
        return {"bench_cpu": share("bench"), "portal_cpu": share("portal"),
                "postgres_cpu": share("postgres"), "cpu_wait": share("stalled"),
                "machine_busy": busy / total if total else None}


# --- one round ---------------------------------------------------------------------------------


@dataclass
class Round:
    layer: str  # portal or peer
    trainers: int
    rate: float | None = None  # offered tasks/s (open loop); None: closed loop
    seconds: float = 0.0
    tasks: int = 0
    waits: int = 0
    errors: int = 0
    first_error: str | None = None
    next_ms: list[float] = field(default_factory=list, repr=False)
    done_ms: list[float] = field(default_factory=list, repr=False)
    # open loop: how late a trainer thread woke for a cycle it was free to start on time (the
    # client's own lag), how many cycles were due while the thread was still in the last
    # one (the server's), and the last answer's time after the window closed
    late_ms: list[float] = field(default_factory=list, repr=False)
    behind: int = 0
    dropped: int = 0  # cycles never sent: their thread was BACKLOG_LIMIT_S behind
    drain_s: float = 0.0
    cpu: dict = field(default_factory=dict)
    connections: int | None = None  # the peer's
    db_connections: int | None = None  # the most to our database at once
    portal_errors: dict = field(default_factory=dict)  # what the portal logged
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def loop(self) -> str:
        return "closed" if self.rate is None else "open"

    @property
    def label(self) -> str:
        return self.layer if self.rate is None else f"{self.layer}@{self.rate:g}"

    def finished(self, window: Window) -> None:
        """A counted cycle's last answer came now: how long after the window it was."""
        late = time.perf_counter() - window.end
        if late > self.drain_s:
            with self.lock:
                self.drain_s = max(self.drain_s, late)

    def error(self, message: str) -> None:
        with self.lock:
            self.errors += 1
            if self.first_error is None:
                self.first_error = message

    @property
    def ok(self) -> bool:
        return self.errors == 0

    @property
    def tasks_per_s(self) -> float | None:
        """Closed loop: tasks ÷ the window. Open loop: the tasks of the cycles due in the
        window ÷ (the window + how long after it the last was answered, less DRAIN_GRACE_S
        for the cycles still in flight at its end): a backlog lowers it."""
        if not self.seconds:
            return None
        return self.tasks / (self.seconds + max(0.0, self.drain_s - DRAIN_GRACE_S))

    def pct(self, values: list[float], p: float) -> float | None:
        return percentile(values, p) if values else None

    def figures(self) -> dict:
        def r(value, digits=1):
            return None if value is None else round(value, digits)

        return {
            "tasks_per_s": r(self.tasks_per_s),
            "next_p50_ms": r(self.pct(self.next_ms, 50), 2),
            "next_p95_ms": r(self.pct(self.next_ms, 95), 2),
            "next_p99_ms": r(self.pct(self.next_ms, 99), 2),
            "next_max_ms": r(max(self.next_ms, default=None), 2),
            "done_p50_ms": r(self.pct(self.done_ms, 50), 2),
            "done_p95_ms": r(self.pct(self.done_ms, 95), 2),
            "done_p99_ms": r(self.pct(self.done_ms, 99), 2),
            # the trainers' time spent waiting for answers: near 1 unless the client lags
            # (closed loop; in the open loop the threads idle between cycles by design)
            "in_requests": r((sum(self.next_ms) + sum(self.done_ms)) / 1000
                             / (self.trainers * self.seconds), 3)
            if self.seconds and self.rate is None else None,
            **({} if self.rate is None else {
                "late_p50_ms": r(self.pct(self.late_ms, 50), 2),
                "late_p95_ms": r(self.pct(self.late_ms, 95), 2),
                "late_max_ms": r(max(self.late_ms, default=None), 2),
                "behind": self.behind, "dropped": self.dropped,
                "drain_s": r(self.drain_s, 3)}),
        }

    def goal(self) -> str | None:
        """Issue 42's goal for an open-loop round: "OK" or "MISSED" (None: closed loop)."""
        if self.rate is None:
            return None
        p95, rate = self.pct(self.next_ms, 95), self.tasks_per_s
        met = (self.ok and not self.dropped and p95 is not None and p95 <= GOAL_NEXT_P95_MS
               and rate is not None and rate >= GOAL_RATE and self.trainers >= TARGET_TRAINERS)
        return "OK" if met else "MISSED"

    def targets(self) -> dict:
        """Each figure beside the issue's target: "ok", "below", or None (no target)."""
        rate, p95 = self.tasks_per_s, self.pct(self.next_ms, 95)
        if self.rate is not None:  # issue 18's targets are for the closed loop
            return {"tasks_per_s": None, "next_p95": None}
        return {
            "tasks_per_s": None if self.trainers != TARGET_TRAINERS or rate is None
            else ("ok" if rate >= TARGET_TASKS_PER_S else "below"),
            "next_p95": None if p95 is None
            else ("ok" if p95 <= TARGET_NEXT_P95_MS else "below"),
        }

    def as_json(self, ratio: float | None = None) -> str:
        cpu = {k: None if v is None else round(v, 3) for k, v in self.cpu.items()}
        goal = {} if self.rate is None else {"goal": {
            "next_p95_ms": self.figures()["next_p95_ms"], "tasks_per_s": self.figures()[
                "tasks_per_s"], "wanted": f"next p95 <= {GOAL_NEXT_P95_MS:g} ms at >= "
                                          f"{GOAL_RATE:g} tasks/s, {TARGET_TRAINERS} trainers",
            "result": self.goal()}}
        return json.dumps({"bench": "master", "layer": self.layer, "loop": self.loop,
                           "offered_per_s": self.rate, "trainers": self.trainers,
                           "seconds": round(self.seconds, 2), "tasks": self.tasks,
                           **self.figures(), **goal, "next_count": len(self.next_ms),
                           "waits": self.waits, "portal_over_peer": None if ratio is None
                           else round(ratio, 3), "targets": self.targets(),
                           "peer_connections": self.connections,
                           "db_connections_max": self.db_connections, **cpu,
                           "errors": self.errors, "ok": self.ok, "error": self.first_error,
                           "portal_errors": self.portal_errors})


class Window:
    """The timed part: threads wait at a barrier after their untimed cycle; ``start`` is set
    when all are there, and requests started before ``end`` count."""

    def __init__(self, parties: int, seconds: float):
        # + the main thread; the window is set before any thread is let through
        self.barrier = threading.Barrier(parties + 1, action=self._set)
        self.seconds = seconds
        self.start = self.end = 0.0
        self.stop = threading.Event()  # Ctrl-C, or an aborted round

    def _set(self) -> None:
        self.start = time.perf_counter()
        self.end = self.start + self.seconds

    def open(self, timeout: float) -> None:
        self.barrier.wait(timeout=timeout)  # the threads are warm

    def counting(self, started: float) -> bool:
        return self.start <= started < self.end

    def over(self) -> bool:
        return self.stop.is_set() or time.perf_counter() >= self.end


class Trainer(KeepAlive):
    """One trainer's keep-alive HTTP connection to the master."""

    def __init__(self, port: int, uid: str, token: str, index: int):
        super().__init__(HOST, port, REQUEST_TIMEOUT)
        self.index = index
        self.base = f"/api/v1/master/{uid}"
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                        "Accept": "application/json"}

    def post(self, path: str, body: dict) -> tuple[int, object]:
        return self.send("POST", self.base + path, json.dumps(body).encode(), self.headers,
                         limit=300)

    # one cycle: next, then done (or obey a wait)

    def cycle(self, result: Round | None, window: Window | None,
              due: float | None = None) -> bool:
        """One next → done; records into ``result`` when started (or, open loop, ``due``) in
        the window. ``next`` is timed from ``due`` when given: the moment the timetable
        wanted it sent, so that a late start counts. False when the trainer should stop
        (dataset over, or an error)."""
        started = time.perf_counter()
        try:
            status, answer = self.post("/next", {"trainer": self.index})
        except (OSError, http.client.HTTPException) as exc:
            return self._failed(result, f"trainer {self.index} next: {exc!r}")
        origin = started if due is None else due
        took = time.perf_counter() - origin
        counted = result is not None and window is not None and window.counting(origin)
        if status != 200 or not isinstance(answer, dict):
            return self._failed(result, f"trainer {self.index} next answered {status}: "
                                        f"{answer}")
        if counted:
            result.next_ms.append(took * 1000)
        if "wait" in answer:
            if counted:
                with result.lock:
                    result.waits += 1
            pause = float(answer["wait"])
            if window is not None:
                pause = max(0.0, min(pause, window.end - time.perf_counter()))
                window.stop.wait(pause)
            else:
                time.sleep(pause)
            return True
        if answer.get("done") is True:
            return self._failed(result, "every pass is over: the dataset ran out (raise "
                                        "--tasks or --passes)")
        task = answer["task"]
        started = time.perf_counter()
        try:
            status, done = self.post(f"/tasks/{task['id']}/done",
                                     {"trainer": self.index, "lease": task["lease"]})
        except (OSError, http.client.HTTPException) as exc:
            return self._failed(result, f"trainer {self.index} done: {exc!r}")
        took = time.perf_counter() - started
        if status != 200 or done != {"done": True}:
            return self._failed(result, f"trainer {self.index} done of task {task['id']} "
                                        f"answered {status}: {done}")
        if counted:
            result.done_ms.append(took * 1000)
            with result.lock:
                result.tasks += 1
            result.finished(window)
        return True

    @staticmethod
    def _failed(result: Round | None, message: str) -> bool:
        if result is None:
            raise BenchError(message)
        result.error(message)
        return False


class PeerPool:
    """At most ``size`` psycopg connections to our database, shared by the peer's threads,
    handed over first come, first served (a thread that gives one back while others wait
    does not get it again before them)."""

    def __init__(self, url: str, size: int):
        self.url = url
        self.size = size
        self.lock = threading.Lock()
        self.free: list[psycopg.Connection] = []
        self.waiting: collections.deque[list] = collections.deque()  # [event, connection]
        self.all: list[psycopg.Connection] = []

    def grow(self, count: int) -> None:
        while len(self.all) < min(count, self.size):
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
            self.all.append(conn)
            self.give_back(conn)

    def take(self) -> psycopg.Connection:
        with self.lock:
            if self.free:
                return self.free.pop()
            slot = [threading.Event(), None]
            self.waiting.append(slot)
        if not slot[0].wait(REQUEST_TIMEOUT):
            with self.lock:
                if slot[1] is None:
                    self.waiting.remove(slot)
                    raise TimeoutError("no peer connection free in time")
        return slot[1]

    def give_back(self, conn: psycopg.Connection) -> None:
        with self.lock:
            if self.waiting:
                slot = self.waiting.popleft()
                slot[1] = conn
                slot[0].set()
            else:
                self.free.append(conn)

    @contextlib.contextmanager
    def connection(self):
        conn = self.take()
        try:
            yield conn
        finally:
            self.give_back(conn)

    def close(self) -> None:
        for conn in self.all:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self.all.clear()


PEER_NEXT = ("SELECT id, pass_no, index, spans FROM bench_peer_task "
             "WHERE job_id = %s AND pass_no = 0 AND state = 'waiting' "
             "ORDER BY index LIMIT 1 FOR UPDATE SKIP LOCKED")
PEER_LEASE = ("UPDATE bench_peer_task SET state = 'leased', trainer = %s, lease = %s, "
              "lease_expires = now() + interval '30 seconds', attempts = attempts + 1, "
              "updated_at = now() WHERE id = %s")
PEER_DONE = ("UPDATE bench_peer_task SET state = 'done', lease = '', lease_expires = NULL, "
             "updated_at = now() WHERE id = %s AND job_id = %s AND state = 'leased' "
             "AND trainer = %s AND lease = %s")


class PeerTrainer:
    """The same cycle straight on PostgreSQL: lease (SELECT … FOR UPDATE SKIP LOCKED, UPDATE,
    one transaction), then done (one UPDATE)."""

    def __init__(self, pool: PeerPool, job_id: int, index: int):
        self.pool = pool
        self.job_id = job_id
        self.index = index

    def close(self) -> None:
        pass

    def cycle(self, result: Round | None, window: Window | None,
              due: float | None = None) -> bool:
        started = time.perf_counter()
        try:
            with self.pool.connection() as conn, conn.transaction():
                row = conn.execute(PEER_NEXT, (self.job_id,)).fetchone()
                if row is not None:
                    lease = secrets.token_hex(8)
                    conn.execute(PEER_LEASE, (self.index, lease, row[0]))
        except (psycopg.Error, TimeoutError) as exc:
            return Trainer._failed(result, f"peer {self.index} next: {exc!r}")
        origin = started if due is None else due
        took = time.perf_counter() - origin
        counted = result is not None and window is not None and window.counting(origin)
        if counted:
            result.next_ms.append(took * 1000)
        if row is None:
            return Trainer._failed(result, "the peer's tasks ran out (raise --tasks)")
        started = time.perf_counter()
        try:
            with self.pool.connection() as conn:
                updated = conn.execute(PEER_DONE, (row[0], self.job_id, self.index,
                                                   lease)).rowcount
        except (psycopg.Error, TimeoutError) as exc:
            return Trainer._failed(result, f"peer {self.index} done: {exc!r}")
        took = time.perf_counter() - started
        if updated != 1:
            return Trainer._failed(result, f"peer {self.index}: done of task {row[0]} "
                                           f"updated {updated} rows")
        if counted:
            result.done_ms.append(took * 1000)
            with result.lock:
                result.tasks += 1
            result.finished(window)
        return True


def run_round(result: Round, trainers: list, seconds: float, meter: CpuMeter,
              database: Database) -> Round:
    """Each trainer a thread: one untimed cycle, the barrier, then cycles until the window
    closes: each as soon as the last is answered (closed loop), or (open loop, ``result.rate``
    R) on a timetable: cycle n of the window is due at n ÷ R s, on thread n mod C, whatever
    the answers before it took."""
    window = Window(len(trainers), seconds)
    watch = ConnectionWatch(database)
    count = len(trainers)

    def closed(trainer) -> None:
        while not window.over() and trainer.cycle(result, window):
            pass

    def timetable(position: int, trainer) -> None:
        cycles = range(position, int(result.rate * seconds), count)
        for sent, n in enumerate(cycles):
            due = window.start + n / result.rate
            wait = due - time.perf_counter()
            if wait < -BACKLOG_LIMIT_S:  # hopeless: the rest is not sent, and counted so
                with result.lock:
                    result.dropped += len(cycles) - sent
                return
            if wait > 0:
                if window.stop.wait(wait):
                    return
                late = time.perf_counter() - due
                with result.lock:
                    result.late_ms.append(late * 1000)
            else:  # the last cycle ran into this one's turn
                with result.lock:
                    result.behind += 1
            if window.stop.is_set() or not trainer.cycle(result, window, due):
                return

    def work(position: int, trainer) -> None:
        try:
            warm = trainer.cycle(result, None) if result.ok else False
        except BenchError as exc:
            result.error(f"warm-up: {exc}")
            warm = False
        try:
            window.barrier.wait()
        except threading.BrokenBarrierError:
            return
        if warm:
            closed(trainer) if result.rate is None else timetable(position, trainer)

    threads = [threading.Thread(target=work, args=(i, t), daemon=True,
                                name=f"{result.label}-{t.index}")
               for i, t in enumerate(trainers)]
    try:
        watch.start()
        for thread in threads:
            thread.start()
        try:
            window.open(timeout=JOIN_TIMEOUT + REQUEST_TIMEOUT)
        except threading.BrokenBarrierError:
            raise BenchError("the trainers' warm-up cycles did not finish in time") from None
        first = meter.sample()
        while time.perf_counter() < window.end:
            time.sleep(min(0.1, max(0.0, window.end - time.perf_counter())))
        last = meter.sample()
        result.seconds = window.seconds
        result.cpu = CpuMeter.shares(first, last)
        deadline = time.monotonic() + JOIN_TIMEOUT
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            result.error("some trainers were still in a request long after the window")
    finally:
        result.db_connections = watch.finish()
        window.stop.set()
        window.barrier.abort()
        for thread in threads:  # Ctrl-C or an error: the threads end at their next check
            thread.join(timeout=REQUEST_TIMEOUT if thread.is_alive() else 0)
        for trainer in trainers:
            trainer.close()
    return result


# --- the whole run -----------------------------------------------------------------------------


def make_data(var: Path, lines: int) -> None:
    home = var / "pfs" / DATACENTER / "home" / USERNAME
    package = home / "bench"
    package.mkdir(parents=True, exist_ok=True)
    (package / "README").write_text("A trainer package for bench/master.py: its entry only "
                                    "sleeps; the benchmark's threads are the trainers.\n")
    data = home / DATA_DIR
    data.mkdir(parents=True, exist_ok=True)
    with (data / "lines-0.txt").open("w") as out:
        out.writelines(f"record {i:08d} 0123456789abcdef0123456789abcdef\n"
                       for i in range(lines))


def submit_job(client: Client, count: int, passes: int) -> str:
    name = f"{JOB_PREFIX}{count}"
    body = {"name": name, "package": PACKAGE, "entry": ENTRY, "trainers": 1,
            "dataset": DATASET, "dataset_unit": "records", "task_records": 1,
            "passes": passes}
    status, answer = client.request("POST", "/api/v1/jobs/", body)
    if status != 201:
        raise BenchError(f"submitting {name} answered {status}: {answer}")
    return name


def wait_running(client: Client, names: list[str]) -> None:
    """The jobs' own trainer runs (it only sleeps): a trainer replica that ended would make
    the master give back trainer 0's leases. (One job at a time: the demo datacenter queues
    the third.)"""
    deadline = time.monotonic() + RUNNING_TIMEOUT
    while True:
        states = {}
        for name in names:
            status, job = client.request("GET", f"/api/v1/jobs/{name}/")
            if status != 200 or not isinstance(job, dict):
                raise BenchError(f"GET job {name} answered {status}: {job}")
            states[name] = job["state"]
        bad = {n: s for n, s in states.items() if s in ("failed", "killed", "succeeded")}
        if bad:
            raise BenchError(f"a job ended before its round: {bad}")
        if all(s == "running" for s in states.values()):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"the jobs did not run within {RUNNING_TIMEOUT:.0f} s: {states}")
        time.sleep(0.5)


def kill_jobs(client: Client, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(OSError, http.client.HTTPException):
            client.request("POST", f"/api/v1/jobs/{name}/kill", {})


def make_pass(port: int, uid: str, token: str) -> None:
    """The job's first ``next`` (trainer 0) makes pass 0 from the dataset: untimed."""
    started = time.perf_counter()
    trainer = Trainer(port, uid, token, 0)
    try:
        trainer.cycle(None, None)
    finally:
        trainer.close()
    log(f"  pass 0 made by the first next + done: {time.perf_counter() - started:.2f} s")


def fill_peer(database_url: str, job_pk: int, peer_job: int) -> int:
    """The peer's table, like jobs_task, with the portal job's pass 0 as waiting tasks."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_peer_task "
                     "(LIKE jobs_task INCLUDING ALL)")
        rows = conn.execute(
            "INSERT INTO bench_peer_task (job_id, pass_no, index, spans, state, trainer, lease, "
            "lease_expires, attempts, failures, trained, updated_at) "
            "SELECT %s, 0, index, spans, 'waiting', NULL, '', NULL, 0, 0, 0, now() "
            "FROM jobs_task WHERE job_id = %s AND pass_no = 0", (peer_job, job_pk)).rowcount
        conn.execute("ANALYZE bench_peer_task")
    return rows


def table(pairs: list[tuple[Round, Round | None]]) -> str:
    lines = [f"{'layer':<10} {'trainers':>8} {'tasks/s':>8} {'vs 500@64':>9} "
             f"{'next p50':>9} {'p95':>7} {'p99':>7} {'vs 50ms':>7} {'30ms@500':>8} "
             f"{'late p95':>8} {'done p50':>9} "
             f"{'p95':>7} {'waits':>5} {'portal/peer':>11} {'bench cpu':>9} "
             f"{'portal cpu':>10} {'pg cpu':>7} {'machine':>7} {'cpu wait':>8} "
             f"{'db conns':>8}  result"]
    for portal, peer in pairs:
        ratio = ratio_of(portal, peer)
        for r in (portal, peer):
            if r is None:
                continue
            f, t = r.figures(), r.targets()
            lines.append(
                f"{r.label:<10} {r.trainers:>8} {cell(f['tasks_per_s']):>8} "
                f"{t['tasks_per_s'] or '-':>9} {cell(f['next_p50_ms']):>9} "
                f"{cell(f['next_p95_ms']):>7} {cell(f['next_p99_ms']):>7} "
                f"{t['next_p95'] or '-':>7} {r.goal() or '-':>8} "
                f"{cell(f.get('late_p95_ms')):>8} {cell(f['done_p50_ms']):>9} "
                f"{cell(f['done_p95_ms']):>7} {r.waits:>5} "
                f"{cell(ratio, 2) if r is portal else '':>11} "
                f"{percent(r.cpu.get('bench_cpu')):>9} {percent(r.cpu.get('portal_cpu')):>10} "
                f"{percent(r.cpu.get('postgres_cpu')):>7} {percent(r.cpu.get('machine_busy')):>7} "
                f"{percent(r.cpu.get('cpu_wait')):>8} {cell(r.db_connections, 0):>8}  "
                + ("ok" if r.ok else f"FAILED: {r.errors} of {r.trainers} trainers stopped on "
                                      f"an error; first: {short(r.first_error, 60)}")
                + "".join(f"; portal logged {n} x {short_exception(line, 110)}"
                          for line, n in list(r.portal_errors.items())[:1]))
    return "\n".join(lines)


def short(text: str | None, most: int) -> str:
    """``text`` cut to its first ``most`` characters (the JSON line has it whole)."""
    text = text or ""
    return text if len(text) <= most else text[:most - 1] + "…"


def short_exception(line: str, most: int) -> str:
    """An exception line cut in the middle: its class, then the end of its message (where
    psycopg's FATAL is)."""
    if len(line) <= most:
        return line
    head = line[:line.find(": ") + 2]
    return head + "…" + line[-(most - len(head) - 1):]


def ratio_of(portal: Round, peer: Round | None) -> float | None:
    if peer is None or not portal.tasks_per_s or not peer.tasks_per_s:
        return None
    return portal.tasks_per_s / peer.tasks_per_s


def counts_arg(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated whole numbers") from None
    if not counts or any(not 1 <= n <= 1000 for n in counts) or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"{text!r}: distinct trainer counts from 1 to 1000")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Tasks per second the job master serves to C trainers on PostgreSQL, "
                    "beside the same cycle straight on PostgreSQL.")
    parser.add_argument("--trainers", type=counts_arg, default=[8, 64, 256],
                        help="concurrent trainers, one round each (default 8,64,256)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="timed part of each round (default 10)")
    parser.add_argument("--rate", type=float, default=GOAL_RATE,
                        help="tasks/s offered in the open-loop round, after the closed-loop "
                             f"one at --rate-trainers (default {GOAL_RATE:g}; 0: none)")
    parser.add_argument("--rate-trainers", type=int, default=TARGET_TRAINERS,
                        help=f"trainers of the open-loop round (default {TARGET_TRAINERS}); "
                             "added to --trainers if not there")
    parser.add_argument("--tasks", type=int, default=20_000,
                        help="lines of the dataset: tasks per pass (default 20000)")
    parser.add_argument("--passes", type=int, default=20, help="the jobs' passes (default 20)")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432",
                        help="the PostgreSQL server (default postgres://postgres@127.0.0.1:5432)")
    parser.add_argument("--database", default="paddlecloud_bench_master",
                        help="the database created for the run and dropped after")
    parser.add_argument("--redis-db", type=int, default=12,
                        help="an empty Redis database on 127.0.0.1:6379 (default 12)")
    parser.add_argument("--connection-limit", type=int, default=80,
                        help="our database's CONNECTION LIMIT (default 80; the server is "
                             "shared)")
    parser.add_argument("--portal-env", action="append", default=[], metavar="NAME=VALUE",
                        help="more environment for the portal, e.g. DATABASE_CONN_MAX_AGE=60 "
                             "(not the default: for comparisons)")
    parser.add_argument("--debug-off", action="store_true",
                        help="run the portal as docker-compose.yml and deploy/ do: DEBUG=0 "
                             "(with a random SECRET_KEY, and SECURE_SSL_REDIRECT=0 for plain "
                             "HTTP)")
    parser.add_argument("--peer-connections", type=int, default=64,
                        help="the peer's connections at most (default 64)")
    parser.add_argument("--no-peer", action="store_true", help="portal rounds only")
    parser.add_argument("--port", type=int, default=0, help="portal port (default: a free one)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory, the portal log and the database")
    args = parser.parse_args(argv)
    if args.rate < 0:
        parser.error("--rate: tasks per second, 0 for no open-loop round")
    if args.rate and not 1 <= args.rate_trainers <= 1000:
        parser.error("--rate-trainers: from 1 to 1000")
    if args.rate and args.rate_trainers not in args.trainers:
        args.trainers.append(args.rate_trainers)
    if args.redis_db in REFUSED_REDIS_DBS:
        parser.error(f"--redis-db {args.redis_db}: the tests use 14 and 15")
    if not 1 <= args.peer_connections <= args.connection_limit - 5:
        parser.error("--peer-connections: from 1 to the connection limit less 5")
    more_env = ({"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(50),
                 "SECURE_SSL_REDIRECT": "0"} if args.debug_off else {})
    for item in args.portal_env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--portal-env {item!r}: NAME=VALUE")
        more_env[name] = value

    handle_signals()
    began = time.monotonic()
    pairs: list[tuple[Round, Round | None]] = []
    database = Database(args.pg, args.database, args.connection_limit)
    redis_db = RedisDb(HOST, 6379, args.redis_db)
    portal = MasterPortal(args.port or free_port(), keep=args.keep, database_url=database.url,
                          redis_url=redis_db.url, more_env=more_env)
    control: Client | None = None
    pool: PeerPool | None = None
    names: list[str] = []
    code = 0
    try:
        redis_db.check_empty()
        database.create()
        log(f"PostgreSQL max_connections {database.max_connections()}")
        if more_env:
            log(f"portal environment added: {', '.join(sorted(more_env))}"
                + (" (--debug-off)" if args.debug_off else ""))
        make_data(portal.var, args.tasks)
        portal.start()
        meter = CpuMeter(portal.pid)
        control = Client(portal.base, login(portal.base, portal.password))
        pool = None if args.no_peer else PeerPool(database.url, args.peer_connections)
        for count in args.trainers:
            name = submit_job(control, count, args.passes)
            names.append(name)
            uid, token, pk = portal.django(JOB_CODE, name=name)
            wait_running(control, [name])
            log(f"round {count}: job {name} running (dataset {args.tasks} tasks a pass, "
                f"{args.passes} passes); portal, {count} trainers, {args.seconds:.0f} s")
            make_pass(portal.port, uid, token)
            rates = [None, args.rate] if args.rate and count == args.rate_trainers else [None]
            for number, rate in enumerate(rates):
                result = Round("portal", count, rate)
                if rate is not None:
                    log(f"round {count}: portal, open loop: {rate:g} tasks/s offered")
                portal.new_errors()  # from here on, the round's
                run_round(result, [Trainer(portal.port, uid, token, i) for i in range(count)],
                          args.seconds, meter, database)
                result.portal_errors = portal.new_errors()
                log(f"  {result.tasks} tasks ({result.tasks_per_s or 0:.1f}/s), "
                    f"next p95 {result.figures()['next_p95_ms']} ms, {result.errors} errors")
                peer = None
                if pool is not None:
                    peer_job = PEER_JOB_BASE + count + number * 10_000
                    rows = fill_peer(database.url, pk, peer_job)
                    pool.grow(count)
                    log(f"round {count}: peer{'' if rate is None else f' @{rate:g}/s'}, "
                        f"{count} trainers on {min(count, pool.size)} connections, "
                        f"{rows} tasks")
                    peer = run_round(Round("peer", count, rate),
                                     [PeerTrainer(pool, peer_job, i) for i in range(count)],
                                     args.seconds, meter, database)
                    peer.connections = min(count, pool.size)
                    log(f"  {peer.tasks} tasks ({peer.tasks_per_s or 0:.1f}/s), "
                        f"next p95 {peer.figures()['next_p95_ms']} ms, {peer.errors} errors")
                pairs.append((result, peer))
                print(result.as_json(ratio_of(result, peer)), flush=True)
                if peer is not None:
                    print(peer.as_json(), flush=True)
                for r in (result, peer):
                    if r is not None and not r.ok:
                        log(f"{r.label} round {count} failed: {r.first_error}")
                        code = 1
                if code:
                    break
            kill_jobs(control, [name])  # so the next round's job runs
            if code:
                log(f"portal log:\n{portal.log_tail()}")
                break
    except BenchError as exc:
        log(f"failed: {exc}")
        code = 1
    except (KeyboardInterrupt, Stopped):
        log("interrupted")
        code = 130
    finally:
        def first():
            if pool is not None:
                pool.close()
            if control is not None:
                kill_jobs(control, names)
                control.close()

        try:
            portal.shut_down(first)
        finally:
            database.close(args.keep)
            redis_db.flush()
    if pairs:
        print(table(pairs), flush=True)
        print(f"targets (issue 18, closed loop): >= {TARGET_TASKS_PER_S:.0f} tasks/s at "
              f"{TARGET_TRAINERS} trainers; p95 of next <= {TARGET_NEXT_P95_MS:.0f} ms",
              flush=True)
        print(f"goal (issue 42, open loop: layer@rate): p95 of next <= {GOAL_NEXT_P95_MS:g} "
              f"ms, timed from when the timetable wanted it sent, at >= {GOAL_RATE:g} tasks/s "
              f"served, {TARGET_TRAINERS} trainers", flush=True)
    log(f"run time {time.monotonic() - began:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
