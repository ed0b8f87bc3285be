"""Benchmark: admitting queued jobs, many users at once, as running jobs end (issue 20).

    DATABASE_URL=postgres://… REDIS_URL=redis://… .venv/bin/python bench/admission.py \
        [--jobs 3000] [--users 30] [--workers 2] [--keep] [--kueue [--kubeconfig FILE]]

Kueue's scheduler performance test (test/performance/scheduler, configs/baseline: 15 000
workloads over 30 ClusterQueues of 20 CPUs, admitted in 351 s, ~43/s) scaled to this machine:
``--jobs`` jobs over ``--users`` users' queues (a queue is a user's jobs in one datacenter),
each user's a tenth large (20 CPUs, runs 1 s), a fifth medium (5 CPUs, 0.5 s) and the rest
small (1 CPU, 0.2 s), in the order Kueue's generator creates them, with a quota of 20 CPUs.

It needs PostgreSQL and Redis (DATABASE_URL, REDIS_URL): it makes a scratch database beside
DATABASE_URL's (its name plus ``_bench``), migrates it, makes the users and their jobs (waiting,
made in bulk), and starts ``--workers`` Celery worker processes (``celery worker -P solo``, the
portal's tasks). Then, the clock started, it asks for each queue's admission (``jobs_admit``, as
a raised quota would) and plays the nodes: an admitted job's start is routed to a queue no worker
reads (bench/admission_worker.py), and the benchmark moves each admitted job to ``running`` and,
its run time after its admission, to ``succeeded`` — the engine's own transition, which signals
the end, which queues the owner's ``jobs_admit``. No beat runs: every admission after the first
comes from a job's end. Afterwards it checks, from the recorded JobEvents alone, that every job
was admitted once and that at no moment did a user's admitted jobs hold more than their quota,
and counts the jobs admitted ahead of an earlier one of their user (backfilled where they could
not delay it: docs/admin/scheduling.md). The workers are stopped and the scratch
database dropped (unless --keep), whatever happens. With ``--kueue``, Kueue's own test follows
on the real Kueue, scaled alike, and both rates are printed (bench/kueue_scheduler.py).

Figures go to standard output (a table and one JSON line), progress to standard error. It exits
1 if the run failed or a check found a job not admitted once or a quota exceeded; a missed target is
reported, not an error. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # portal.py, when this script is not run as bench/admission.py
    sys.path.insert(0, str(BENCH))
from admission_plan import CLASSES, CPU, QUOTA_CPUS, QUOTA_JOBS, Plan  # noqa: E402
from portal import BenchError, Stopped, cell, handle_signals, log, percentile  # noqa: E402

ROOT = BENCH.parent  # the project: manage.py
DATACENTER = "datacenter1"
TARGET_PER_S = 150.0  # admissions per second (issue 42; issue 20 asked for 100)
KUEUE_RATIO_GOAL = 2.0  # and at least twice Kueue's own rate on the same machine (issue 42)
KUEUE_PER_S = 15_000 / 351  # Kueue's baseline: 15 000 workloads in 351 s
POLL = 0.01  # seconds between two looks for newly admitted jobs
WORKER_READY_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


# --- set-up ------------------------------------------------------------------------------------


def scratch_url(url: str) -> tuple[str, str]:
    """The scratch database's URL beside DATABASE_URL's, and its name."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/") + "_bench"
    return urlunsplit(parts._replace(path="/" + name)), name


def server_sql(url: str, *statements: str) -> None:
    """Run statements on the server of ``url``, connected to its ``postgres`` database."""
    import psycopg

    parts = urlsplit(url)
    with psycopg.connect(host=parts.hostname, port=parts.port or 5432, user=parts.username,
                         password=parts.password, dbname="postgres", autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def make_jobs(plan: Plan) -> None:
    """The datacenter, the users with their quotas, and every job waiting (``pending``, made
    in bulk: their submissions' own admissions are bench/submit.py's business)."""
    from django.conf import settings
    from django.utils import timezone

    from accounts.services import datacenter_upsert, user_upsert
    from jobs.models import Job

    datacenter = datacenter_upsert(DATACENTER, description="bench")[0]
    # Nobody logs in: the cheapest hasher, not 30 rounds of PBKDF2.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    each = plan.jobs // plan.users
    base = timezone.now() - timedelta(hours=1)
    rows = []
    for u in range(plan.users):
        user = user_upsert(f"user{u:02d}", password=uuid.uuid4().hex,
                           datacenter_names=[DATACENTER], quota={
                               "cpu": QUOTA_CPUS * CPU, "jobs": QUOTA_JOBS, "queued": each,
                               "memory": 2**40})[0]
        for i, (name, kind) in enumerate(plan.per_user):
            rows.append(Job(owner=user, datacenter=datacenter, name=name, image="paddle",
                            package=f"/pfs/{DATACENTER}/home/{user.username}/pkg",
                            entry="python train.py", cpu=CLASSES[kind][1] * CPU,
                            created_at=base + timedelta(milliseconds=i)))
    Job.objects.bulk_create(rows, batch_size=1000)


class Workers:
    """``count`` Celery worker processes (``-P solo``: one task at a time each)."""

    def __init__(self, count: int, env: dict, logs: Path):
        self.count, self.env, self.logs = count, env, logs
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        for i in range(self.count):
            out = (self.logs / f"worker{i}.log").open("w")
            self.processes.append(subprocess.Popen(  # noqa: S603 - celery, our tasks
                [sys.executable, "-m", "celery", "-A", "admission_worker", "worker", "-P",
                 "solo", "-n", f"bench-admission{i}@%h", "-Q", "celery", "-l", "warning",
                 "--without-heartbeat", "--without-mingle", "--without-gossip"],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True))
            out.close()
        deadline = time.monotonic() + WORKER_READY_TIMEOUT
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise BenchError(f"a worker exited {process.returncode} at start:\n"
                                     f"{self.log_tail()}")
            replies = worker_app().control.ping(timeout=0.5)
            names = {name for reply in replies for name in reply
                     if name.startswith("bench-admission")}
            if len(names) >= self.count:
                log(f"{self.count} workers ready (pids "
                    f"{', '.join(str(p.pid) for p in self.processes)})")
                return
        raise BenchError(f"the workers were not ready within {WORKER_READY_TIMEOUT:.0f} s:\n"
                         f"{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        tails = []
        for path in sorted(self.logs.glob("worker*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(tails)

    def cpu_seconds(self) -> float:
        """The CPU time the workers have used so far (user and system)."""
        total = 0
        for process in self.processes:
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log(f"worker {process.pid} did not stop within {STOP_TIMEOUT:.0f} s: SIGKILL")
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_TIMEOUT)


def worker_app():
    """The workers' Celery app (``admission_worker``), imported once Django is set up on the
    scratch database: the portal's modules read its settings as they are imported."""
    from admission_worker import app

    return app


def queues_clear() -> None:
    """Drop what waits in the broker's queues (a message of an earlier run, the starts)."""
    from admission_worker import STARTS_QUEUE

    with worker_app().connection_for_write() as conn:
        client = conn.default_channel.client
        client.delete("celery", STARTS_QUEUE)


# --- the run: the nodes --------------------------------------------------------------------------


def run(plan: Plan, timeout: float) -> float:
    """Ask every queue's admission, then run each admitted job for its class's run time and end
    it, until every job has ended. Returns the wall-clock time the clock started."""
    from django.utils import timezone

    from accounts.models import Datacenter
    from jobs.models import Job
    from jobs.states import JobState
    from jobs.transitions import job_transition, jobs_transition
    from kernel.queue import JOBS_ADMIT, task_later

    datacenter = Datacenter.objects.get(name=DATACENTER)
    runtime = {name: CLASSES[kind][2] for name, kind in plan.per_user}
    names = dict(Job.objects.filter(datacenter=datacenter).values_list("pk", "name"))
    users = sorted(Job.objects.filter(datacenter=datacenter).order_by()
                   .values_list("owner_id", flat=True).distinct())
    started = timezone.now()
    for user_id in users:
        task_later(JOBS_ADMIT, user_id, datacenter.pk)
    seen: set[int] = set()
    due: list[tuple] = []  # (end time, job id)
    ended, deadline = 0, time.monotonic() + timeout
    last_report = time.monotonic()
    while ended < plan.jobs:
        if time.monotonic() > deadline:
            raise BenchError(f"{plan.jobs - ended} jobs had not ended after {timeout:.0f} s")
        admitted = [(pk, at) for pk, at in Job.objects.filter(
            datacenter=datacenter, state=JobState.STARTING).values_list("pk", "admitted_at")
            if pk not in seen]
        if admitted:
            # Its replicas run: the engine's next look says so (not timed here: not admission).
            jobs_transition([Job(pk=pk) for pk, _ in admitted], JobState.RUNNING,
                            {pk: "every replica is running" for pk, _ in admitted})
            for pk, at in admitted:
                seen.add(pk)
                heapq.heappush(due, (at + timedelta(seconds=runtime[names[pk]]), pk))
        now = timezone.now()
        while due and due[0][0] <= now:
            _, pk = heapq.heappop(due)
            # As the engine ends a job whose trainers all exited 0: one transaction per job,
            # whose job_ended signal queues the owner's admission.
            job_transition(Job(pk=pk), JobState.SUCCEEDED, "every trainer exited 0")
            ended += 1
        if time.monotonic() - last_report > 5:
            log(f"{len(seen)} admitted, {ended} ended")
            last_report = time.monotonic()
        wait = POLL if not due else min(POLL, max((due[0][0] - now).total_seconds(), 0))
        time.sleep(wait)
    return started


# --- what the events say -----------------------------------------------------------------------


@dataclass
class Result:
    jobs: int
    users: int
    workers: int
    wall_s: float | None = None
    ideal_s: float | None = None
    lag_p50_ms: float | None = None
    lag_p95_ms: float | None = None
    lag_max_ms: float | None = None
    worker_cpu_ms: float | None = None  # the workers' CPU time per admission
    nodes_cpu_ms: float | None = None  # the benchmark's own (the nodes') per job
    out_of_order: list[str] = field(default_factory=list)  # admitted twice, or never
    # Jobs admitted while an earlier job of their user still waited: backfilled beside a big
    # job's reservation (docs/admin/scheduling.md), counted, not an error.
    ahead: int = 0
    over_quota: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def per_s(self) -> float | None:
        return self.jobs / self.wall_s if self.wall_s else None

    @property
    def ratio(self) -> float | None:
        return self.per_s / TARGET_PER_S if self.per_s else None

    def as_json(self) -> str:
        def rounded(value, digits):
            return None if value is None else round(value, digits)

        return json.dumps({
            "bench": "admission", "jobs": self.jobs, "users": self.users,
            "workers": self.workers, "wall_s": rounded(self.wall_s, 3),
            "admissions_per_s": rounded(self.per_s, 1), "target_per_s": TARGET_PER_S,
            "ratio": rounded(self.ratio, 2),
            "rate_goal": None if self.ratio is None else ("OK" if self.ratio >= 1 else "MISSED"),
            "ideal_s": rounded(self.ideal_s, 3),
            "lag_p50_ms": rounded(self.lag_p50_ms, 1), "lag_p95_ms": rounded(self.lag_p95_ms, 1),
            "lag_max_ms": rounded(self.lag_max_ms, 1),
            "worker_cpu_ms_per_admission": rounded(self.worker_cpu_ms, 2),
            "nodes_cpu_ms_per_job": rounded(self.nodes_cpu_ms, 2),
            "admitted_once": not self.out_of_order, "backfilled": self.ahead,
            "within_quota": not self.over_quota,
            "error": self.error})


def ideal_seconds(plan: Plan) -> float:
    """When the last job would be admitted if admission took no time: each queue in order,
    the head admitted the moment it fits, each job ending its run time later. What the run
    time alone allows; the measured time above it is admission's."""
    last = 0.0
    cpus = {kind: c for kind, (_, c, _, _) in CLASSES.items()}
    now, used, count, running = 0.0, 0, 0, []  # one queue (all alike)
    for _, kind in plan.per_user:
        while used + cpus[kind] > QUOTA_CPUS or count + 1 > QUOTA_JOBS:
            now, freed = heapq.heappop(running)
            used, count = used - freed, count - 1
        heapq.heappush(running, (now + CLASSES[kind][2], cpus[kind]))
        used, count = used + cpus[kind], count + 1
        last = now
    return last


def check(plan: Plan, started, result: Result) -> None:
    """Order, quota and timing, from the jobs' recorded events alone."""
    from accounts.models import Datacenter
    from accounts.selectors import quota_get
    from jobs.models import Job, JobEvent
    from jobs.states import FINAL_JOB_STATES, JobState
    from scheduling.admission import COMPUTE
    from scheduling.pool import request_vec

    datacenter = Datacenter.objects.get(name=DATACENTER)
    jobs = {job.pk: job for job in Job.objects.filter(datacenter=datacenter)
            .select_related("owner")}
    events = list(JobEvent.objects.filter(job__datacenter=datacenter).filter(
        to_state__in=[JobState.STARTING, *FINAL_JOB_STATES])
        .order_by("time", "id").values_list("job_id", "to_state", "time", "id"))
    starts = defaultdict(list)  # owner -> [(time, event id, job id)]
    ends = defaultdict(list)
    for job_id, state, at, event_id in events:
        owner = jobs[job_id].owner_id
        (starts if state == JobState.STARTING else ends)[owner].append((at, event_id, job_id))
    admitted = [job_id for owner in starts for _, _, job_id in starts[owner]]
    if len(admitted) != len(jobs) or len(set(admitted)) != len(jobs):
        result.out_of_order.append(f"{len(set(admitted))} of {len(jobs)} jobs admitted, "
                                   f"{len(admitted) - len(set(admitted))} twice")
    lags = []
    for owner, owner_starts in starts.items():
        username = jobs[owner_starts[0][2]].owner.username
        submitted = sorted((j for j in jobs.values() if j.owner_id == owner),
                           key=lambda j: (j.created_at, j.pk))
        order = [job_id for _, _, job_id in owner_starts]
        place = {job.pk: i for i, job in enumerate(submitted)}
        waiting = set(place)
        for job_id in order:
            if any(place[other] < place[job_id] for other in waiting):
                result.ahead += 1
            waiting.discard(job_id)
        # Every moment, in time order; a start and an end at the same instant count the start
        # first (never hiding an excess).
        quota = quota_get(jobs[order[0]].owner, datacenter)
        moments = sorted([(at, 0, eid, +1, jid) for at, eid, jid in owner_starts]
                         + [(at, 1, eid, -1, jid) for at, eid, jid in ends[owner]])
        held = dict.fromkeys(COMPUTE, 0)
        last_end = None
        for at, _, _, sign, job_id in moments:
            asked = request_vec(jobs[job_id])
            for resource in COMPUTE:
                held[resource] += sign * getattr(asked, resource)
            if sign < 0:
                last_end = at
                continue
            if last_end is not None:
                lags.append((at - last_end).total_seconds())
            over = [r for r in COMPUTE if held[r] > getattr(quota, r)]
            if over:
                result.over_quota.append(f"{username} at {at.isoformat()}: {over[0]} "
                                         f"{held[over[0]]} of {getattr(quota, over[0])}")
    last_start = max(at for owner in starts for at, _, _ in starts[owner])
    result.wall_s = (last_start - started).total_seconds()
    result.ideal_s = ideal_seconds(plan)
    if lags:
        result.lag_p50_ms = percentile(lags, 50) * 1000
        result.lag_p95_ms = percentile(lags, 95) * 1000
        result.lag_max_ms = max(lags) * 1000


def table(result: Result) -> str:
    lines = ["  jobs  users  workers   wall s  ideal s  admitted/s  target  ratio  "
             "lag p50 ms  lag p95 ms  worker CPU ms  result"]
    outcome = "ok" if result.error is None else f"FAILED: {result.error}"
    if result.out_of_order:
        outcome = f"NOT ADMITTED ONCE: {result.out_of_order[0]}"
    if result.over_quota:
        outcome = f"OVER QUOTA: {result.over_quota[0]}"
    if outcome == "ok" and result.ratio is not None:
        outcome = "ok, target OK" if result.ratio >= 1 else "ok, target MISSED"
    lines.append(
        f"{result.jobs:>6}  {result.users:>5}  {result.workers:>7}  {cell(result.wall_s, 2):>7}"
        f"  {cell(result.ideal_s, 2):>7}  {cell(result.per_s):>10}  {TARGET_PER_S:>6.0f}  "
        f"{cell(result.ratio, 2):>5}  {cell(result.lag_p50_ms):>10}  "
        f"{cell(result.lag_p95_ms):>10}  {cell(result.worker_cpu_ms):>13}  {outcome}")
    lines.append(f"target: >= {TARGET_PER_S:.0f} admissions/s (Kueue's baseline: "
                 f"{KUEUE_PER_S:.0f}/s); ideal s: when the last job would be admitted if "
                 "admission took no time; lag: from a job's end to its owner's next admission; "
                 "worker CPU ms: the workers' CPU time per admission")
    lines.append(f"backfilled: {result.ahead} jobs admitted ahead of an earlier job of their "
                 "user, where they could not delay it")
    return "\n".join(lines)


def kueue_ratio(result: Result, kueue) -> dict:
    """Our rate over Kueue's on the same machine, beside its goal (the JSON line's fields)."""
    ratio = result.per_s / kueue.per_s if result.per_s and kueue.per_s else None
    return {"kueue_ratio": None if ratio is None else round(ratio, 2),
            "kueue_ratio_target": KUEUE_RATIO_GOAL,
            "kueue_ratio_goal": None if ratio is None else (
                "OK" if ratio >= KUEUE_RATIO_GOAL else "MISSED")}


def kueue_table(result: Result, kueue) -> str:
    """Kueue's rate on this machine beside ours, and the ratio beside the target."""
    ratio = result.per_s / kueue.per_s if result.per_s and kueue.per_s else None
    classes = ", ".join(f"{name} {ms / 1000:.1f} s" for name, ms in
                        kueue.avg_ms_to_admission.items())
    return "\n".join([
        "                 workloads   wall s  last admission s  admitted/s",
        f"portal           {result.jobs:>9}  {cell(result.wall_s, 2):>7}  "
        f"{cell(result.wall_s, 2):>16}  {cell(result.per_s):>10}",
        f"Kueue {kueue.version:<10} {kueue.workloads:>9}  {cell(kueue.runner_wall_s, 2):>7}  "
        f"{cell(kueue.last_admission_s, 2):>16}  {cell(kueue.per_s):>10}"
        + (f"  FAILED: {kueue.error}" if kueue.error else ""),
        f"portal / Kueue: {cell(ratio, 2)} "
        f"{kueue_ratio(result, kueue)['kueue_ratio_goal'] or '-'} (goal: >= "
        f"{KUEUE_RATIO_GOAL:.0f}x Kueue here, and >= {TARGET_PER_S:.0f} admissions/s, "
        f"{TARGET_PER_S / KUEUE_PER_S:.1f}x Kueue's published baseline of "
        f"{KUEUE_PER_S:.0f}/s; here Kueue made {cell(kueue.per_s)}/s, "
        f"so the target is {cell(TARGET_PER_S / kueue.per_s if kueue.per_s else None, 2)}x "
        "Kueue on this machine)",
        f"Kueue: its runner's scenario (configs/baseline scaled), wall s as its baseline "
        f"measures it (generation to the last workload finished), last admission s from its "
        f"start; {kueue.evictions} evictions; average time to admission: {classes or '-'}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Admit queued jobs of many users as running jobs end, on PostgreSQL, "
                    "Redis and Celery worker processes; check order and quota.")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs in all (default 3000)")
    parser.add_argument("--users", type=int, default=30, help="users' queues (default 30)")
    parser.add_argument("--workers", type=int, default=2,
                        help="Celery worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds the run may take (default 600)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the scratch database and the workers' logs")
    parser.add_argument("--kueue", action="store_true",
                        help="then run Kueue's scheduler performance test (its baseline, "
                             "scaled alike) on the real Kueue and compare")
    parser.add_argument("--kubeconfig",
                        help="with --kueue: an admin's kubeconfig of a running control plane "
                             "(default: start one)")
    args = parser.parse_args(argv)

    database_url, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    if not (database_url or "").startswith("postgres") or not redis_url:
        log("set DATABASE_URL (PostgreSQL) and REDIS_URL: this benchmark runs on them")
        return 2
    handle_signals()
    began = time.monotonic()
    result = Result(args.jobs, args.users, args.workers)
    url, name = scratch_url(database_url)
    tmp = Path(tempfile.mkdtemp(prefix="paddlecloud-bench-admission-"))
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "paddlecloud.settings",
           "PADDLECLOUD_VAR_DIR": str(tmp / "var"),
           "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT)])}
    workers = Workers(args.workers, env, tmp)
    code = 0
    try:
        plan = Plan(args.jobs, args.users)
        server_sql(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
                   f'CREATE DATABASE "{name}"')
        os.environ.update({k: env[k] for k in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE",
                                               "PADDLECLOUD_VAR_DIR")})
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        make_jobs(plan)
        log(f"{plan.jobs} jobs waiting in {plan.users} queues; database {name}")
        queues_clear()
        workers.start()
        cpu = time.process_time(), workers.cpu_seconds()
        started = run(plan, args.timeout)
        result.nodes_cpu_ms = (time.process_time() - cpu[0]) * 1000 / plan.jobs
        result.worker_cpu_ms = (workers.cpu_seconds() - cpu[1]) * 1000 / plan.jobs
        check(plan, started, result)
    except BenchError as exc:
        result.error = str(exc)
        log(f"failed: {exc}\n{workers.log_tail()}")
        code = 1
    except (KeyboardInterrupt, Stopped):
        log("interrupted")
        result.error = "interrupted"
        code = 130
    except Exception as exc:  # the set-up (settings, migrations) or the run broke: clean up
        result.error = f"{type(exc).__name__}: {exc}"
        log(f"failed:\n{traceback.format_exc()}")
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        workers.stop()
        with contextlib.suppress(Exception):
            queues_clear()
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        if args.keep:
            log(f"kept database {name} and {tmp}")
        else:
            with contextlib.suppress(Exception):
                server_sql(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            shutil.rmtree(tmp, ignore_errors=True)
    if result.out_of_order or result.over_quota:
        code = code or 1
    kueue = None
    if args.kueue and code != 130:
        from kueue_scheduler import run_logged

        log(f"Kueue's scheduler performance test, {args.jobs} workloads in {args.users} "
            "ClusterQueues")
        kueue = run_logged(args.jobs, args.users, args.timeout, args.kubeconfig)
        code = code or (1 if kueue.error else 0)
    print(json.dumps({**json.loads(result.as_json()),
                      **(kueue.as_dict() | kueue_ratio(result, kueue) if kueue else {})}),
          flush=True)
    print(table(result), flush=True)
    if kueue is not None:
        print(kueue_table(result, kueue), flush=True)
    log(f"run time {time.monotonic() - began:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
