"""Benchmark: predicted start times and fair shares over a team's week (issue 22).

    .venv/bin/python bench/eta.py [--trace bench/traces/team-week.json] [--jobs N]
        [--horizon SECONDS] [--json]

It replays the committed trace (bench/traces/team-week.json, made by bench/eta_trace.py: 2 000
jobs of ten users over a week) through the scheduling model the portal's admission plans with
(``paddlecloud_core.scheduling.schedule``), with a simulated clock. Events are the jobs'
arrivals and ends; at each event time the pool is built as ``scheduling.pool.pool_load`` builds it
— running jobs' ends and waiting jobs' run times ESTIMATED from their owner's earlier jobs
that succeeded (``estimate``, by ``shape``), never from their true run time — and what the
plan admits starts, to run its TRUE run time (a job past its deadline ends at the deadline
and, having failed, tells nothing of run times).

At each job's arrival its start is predicted with ``forecast(pool, now, only=[id])`` (what
the API and ``paddlectl submit --dry-run`` show), and by two baselines in the same run:
"now" (every job starts at once: the error is the wait itself) and FIFO (the waiting jobs in
order of submission, each started as soon as it fits the capacity as the running jobs end,
with the same estimates; no fair share, priorities, quotas or backfill). Reported:

- the median actual wait, the median absolute error of each predictor and the figure the
  issue sets a target for: over the jobs that waited, median |predicted - actual start| over
  the median actual wait — target <= 50 % (also shown: the median of each job's own
  |error| / wait, and over all jobs);
- how often the actual start fell within the predicted range [low, high];
- issue 40's two targets, each beside its figure with OK or MISSED (in the JSON line under
  ``targets``): ``relative_median`` (the median of each waiting job's |error| / its wait)
  <= 0.25 and ``in_range_all`` (the actual start in the range, of all jobs scored) >= 0.85;
- per user, the GPU time they got against their fair share: at each moment, the datacenter's
  GPUs shared out by weighted max-min fairness among the users who wanted GPUs then (a user
  wants the GPUs of their running and waiting jobs, at most their quota), integrated over the
  week (see bench/README.md).

Figures go to standard output (a table; one JSON line with --json), progress to standard
error. A missed target is reported ("missed"), not an error: it exits 1 only on a crash or
if a job never started (a scheduling bug). Standard library and the project only.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for path in (BENCH, ROOT):  # eta_trace, and the project when run as bench/eta.py
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
from eta_trace import TRACE  # noqa: E402

from paddlecloud_core.scheduling import (  # noqa: E402
    HORIZON,
    Limit,
    Pool,
    Vec,
    Waiting,
    estimate,
    forecast,
    schedule,
    shape,
)
from paddlecloud_core.scheduling import running as running_job  # noqa: E402

TARGET = 0.5  # median |error| <= 50 % of the median actual wait (issue 22)
# Issue 40.2's targets for the forecast: each waiting job's own |error| / wait, at the median,
# at most; the actual start within the predicted range, of all jobs scored, at least.
TARGETS = {"relative_median": ("<=", 0.25), "in_range_all": (">=", 0.85)}
HISTORY = 50  # each owner's last succeeded jobs read for run times (scheduling.pool.HISTORY)
PREDICTORS = ("forecast", "fifo", "now")


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the trace ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    id: int
    owner: int
    name: str
    arrival: float
    need: Vec  # the whole request, one job of the concurrent-jobs quota included
    priority: int
    deadline: float | None
    run: float  # its TRUE run time, were it not for the deadline
    kind: tuple = ()  # scheduling.shape: what its run time is looked up by
    tasks: int = 0  # its master's tasks over all its passes (0: it has no master)
    startup: float = 0.0  # how long it runs before its first task

    def progress(self, elapsed: float) -> float | None:
        """The part of its tasks done ``elapsed`` seconds into its run, as the portal counts
        them (``scheduling.pool.work_done``): whole tasks, at an even pace after its startup.
        None: no master, nothing counted."""
        if not self.tasks:
            return None
        pace = max(elapsed - self.startup, 0.0) / (self.run - self.startup)
        return math.floor(self.tasks * min(pace, 1.0)) / self.tasks

    @property
    def duration(self) -> float:
        """How long it really holds its resources: its run time, or its deadline if shorter."""
        return self.run if self.deadline is None else min(self.run, self.deadline)

    @property
    def succeeds(self) -> bool:
        return self.deadline is None or self.run <= self.deadline


@dataclass
class Trace:
    capacity: Limit
    quotas: dict[int, Limit]
    weights: dict[int, float]
    names: dict[int, str]
    jobs: list[Job]


def load(path: Path, limit: int | None = None) -> Trace:
    """The trace file, its first ``limit`` jobs (by arrival) only if given."""
    data = json.loads(path.read_text())
    ids = {u["name"]: u["id"] for u in data["users"]}
    jobs = []
    for j in data["jobs"][:limit]:
        need = Vec(cpu=j["cpu"], memory=j["memory"], gpu=j["gpu"], jobs=1)
        jobs.append(Job(j["id"], ids[j["owner"]], j["name"], j["arrival"], need, j["priority"],
                        j["deadline"], j["run"], shape(j["name"], need), j.get("tasks", 0),
                        j.get("startup", 0.0)))
    return Trace(capacity=Limit(**data["capacity"]),
                 quotas={u["id"]: Limit(**u["quota"]) for u in data["users"]},
                 weights={u["id"]: u["weight"] for u in data["users"]},
                 names={u["id"]: u["name"] for u in data["users"]},
                 jobs=sorted(jobs, key=lambda j: (j.arrival, j.id)))


# --- the replay ---------------------------------------------------------------------------------

@dataclass
class Record:
    """One job's predicted and actual start."""

    job: Job
    predicted: dict[str, float | None] = field(default_factory=dict)  # by predictor
    low: float | None = None  # forecast's range
    high: float | None = None
    start: float | None = None
    unknown: str = ""  # why the forecast could tell no start ("": it predicted one)

    @property
    def wait(self) -> float:
        return self.start - self.job.arrival


class Replay:
    """The datacenter over the trace with a simulated clock: who waits, who runs, what the
    owners' earlier jobs ran (what the portal's estimates read), and the GPU-seconds each
    user held and was due."""

    def __init__(self, trace: Trace, horizon: float = HORIZON):
        self.trace, self.horizon = trace, horizon
        self.waiting: dict[int, Job] = {}  # in order of arrival
        self.running: dict[int, tuple[Job, float]] = {}  # id -> (job, started)
        self.ends: list[tuple[float, int]] = []  # heap of (true end, id)
        self.history: dict[int, list] = defaultdict(list)  # owner -> [(shape, seconds)]
        self.versions: dict[int, int] = defaultdict(int)  # owner -> history changes
        self.estimates: dict = {}  # (owner, version, shape, deadline) -> Estimate
        self.records: dict[int, Record] = {job.id: Record(job) for job in trace.jobs}
        self.never: dict[int, str] = {}  # refused by the plan: more than a limit
        self.gpu_got: dict[int, float] = defaultdict(float)  # GPU-seconds held
        self.gpu_fair: dict[int, float] = defaultdict(float)  # GPU-seconds due (fair share)
        self.gpu_idle_wanted = 0.0  # GPU-seconds idle while a job that needs GPUs waited
        self.forecast_seconds: list[float] = []  # wall time of each forecast call
        self.schedule_seconds = 0.0

    def estimate(self, job: Job):
        key = (job.owner, self.versions[job.owner], job.kind, job.deadline)
        if key not in self.estimates:
            self.estimates[key] = estimate(self.history[job.owner], job.kind, job.deadline)
        return self.estimates[key]

    def pool(self, now: float) -> Pool:
        """The pool as ``scheduling.pool.pool_load`` reads it from the database at ``now``."""
        running = [running_job(job.id, job.owner, job.need, began, self.estimate(job), now,
                               name=job.name, deadline=job.deadline,
                               progress=job.progress(now - began))
                   for job, began in self.running.values()]
        waiting = [Waiting(id=job.id, owner=job.owner, need=job.need, submitted=job.arrival,
                           priority=job.priority, name=job.name, run=self.estimate(job),
                           deadline=job.deadline) for job in self.waiting.values()]
        t = self.trace
        return Pool(capacity=t.capacity, quotas=t.quotas, weights=t.weights, running=running,
                    waiting=waiting, names=t.names)

    def run(self) -> None:
        arrivals = self.trace.jobs
        i, now, clock = 0, 0.0, time.monotonic()
        while i < len(arrivals) or self.ends:
            later = arrivals[i].arrival if i < len(arrivals) else float("inf")
            if self.ends:
                later = min(later, self.ends[0][0])
            self.account(now, later)
            now = later
            while self.ends and self.ends[0][0] <= now:  # ends first: their room is free now
                _, job_id = heapq.heappop(self.ends)
                job, began = self.running.pop(job_id)
                if job.succeeds:  # a job failed at its deadline is not in the history
                    self.history[job.owner] = (self.history[job.owner]
                                               + [(job.kind, now - began)])[-HISTORY:]
                    self.versions[job.owner] += 1
            new = []
            while i < len(arrivals) and arrivals[i].arrival <= now:
                self.waiting[arrivals[i].id] = arrivals[i]
                new.append(arrivals[i])
                i += 1
            pool = self.pool(now)
            for job in new:
                self.predict(job, pool, now)
            began = time.perf_counter()
            plan = schedule(pool, now)
            self.schedule_seconds += time.perf_counter() - began
            for job_id in plan.admit:
                job = self.waiting.pop(job_id)
                self.records[job_id].start = now
                self.running[job_id] = (job, now)
                heapq.heappush(self.ends, (now + job.duration, job_id))
            for job_id, reason in plan.never.items():
                self.waiting.pop(job_id)
                self.never[job_id] = reason.message
            if new and new[-1].id % 200 == 0:
                log(f"{new[-1].id} jobs arrived, {len(self.waiting)} waiting, "
                    f"{len(self.running)} running, day {now / 86400:.2f}, "
                    f"{time.monotonic() - clock:.0f} s")
        # Whatever still waits has no job left to end that could make room: it never starts.

    def predict(self, job: Job, pool: Pool, now: float) -> None:
        record = self.records[job.id]
        began = time.perf_counter()
        got = forecast(pool, now, only=[job.id], horizon=self.horizon)[job.id]
        self.forecast_seconds.append(time.perf_counter() - began)
        record.predicted["forecast"], record.low, record.high = got.start, got.low, got.high
        record.unknown = got.unknown
        record.predicted["fifo"] = fifo_start(pool, now, job.id)
        record.predicted["now"] = now

    def account(self, start: float, end: float) -> None:
        """The GPU-seconds each user held from ``start`` to ``end`` (nothing changes between
        two events), and what they were due: the GPUs shared out by weighted max-min fairness
        among the users who wanted GPUs (their running and waiting jobs' GPUs, at most their
        quota's)."""
        if end <= start:
            return
        held: dict[int, int] = defaultdict(int)
        wanted: dict[int, int] = defaultdict(int)
        for job, _ in self.running.values():
            held[job.owner] += job.need.gpu
            wanted[job.owner] += job.need.gpu
        for job in self.waiting.values():
            wanted[job.owner] += job.need.gpu
        for owner in wanted:
            quota = self.trace.quotas[owner].gpu
            if quota is not None:
                wanted[owner] = min(wanted[owner], quota)
        fair = water_fill(self.trace.capacity.gpu, wanted, self.trace.weights)
        for owner, gpus in held.items():
            self.gpu_got[owner] += gpus * (end - start)
        if any(job.need.gpu for job in self.waiting.values()):  # GPUs idle, GPU jobs waiting
            self.gpu_idle_wanted += (self.trace.capacity.gpu - sum(held.values())) * (end - start)
        for owner, gpus in fair.items():
            self.gpu_fair[owner] += gpus * (end - start)


def water_fill(supply: float, wanted: dict[int, float], weights: dict[int, float]) -> dict:
    """Weighted max-min fair shares of ``supply``: each user gets ``level * weight``, or what
    they want if less, the level as high as the supply allows."""
    fair: dict[int, float] = {}
    active = {u for u, w in wanted.items() if w > 0}
    left = float(supply)
    while active:
        level = left / sum(weights.get(u, 1.0) for u in active)
        sated = {u for u in active if wanted[u] <= level * weights.get(u, 1.0)}
        if not sated:
            fair.update({u: level * weights.get(u, 1.0) for u in active})
            break
        for u in sated:
            fair[u] = wanted[u]
            left -= wanted[u]
        active -= sated
    return fair


def fifo_start(pool: Pool, now: float, job_id: int) -> float | None:
    """The naive baseline: the waiting jobs in order of submission, each started as soon as
    it fits the datacenter's capacity (and never before the one ahead of it), running jobs
    ending and started ones running as estimated. Quotas, fair share, priorities and
    backfill are not modelled."""
    cap = pool.capacity
    free = {r: getattr(cap, r) for r in ("cpu", "memory", "gpu")}
    ends: list[tuple[float, int, Vec]] = []
    for n, run in enumerate(pool.running):
        for r in free:
            free[r] -= getattr(run.held, r)
        heapq.heappush(ends, (run.ends, n, run.held))
    t = now
    for n, job in enumerate(sorted(pool.waiting, key=lambda w: (w.submitted, w.id)),
                            len(ends)):
        while any(getattr(job.need, r) > free[r] for r in free):
            if not ends:
                return None  # bigger than the capacity
            ended, _, held = heapq.heappop(ends)
            t = max(t, ended)
            for r in free:
                free[r] += getattr(held, r)
        if job.id == job_id:
            return t
        for r in free:
            free[r] -= getattr(job.need, r)
        heapq.heappush(ends, (t + job.run.seconds, n, job.need))
    return None


# --- the figures --------------------------------------------------------------------------------

def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def figures(replay: Replay) -> dict:
    records = list(replay.records.values())
    started = [r for r in records if r.start is not None]
    waited = [r for r in started if r.wait > 0]
    out: dict = {
        "jobs": len(records), "started": len(started), "never": len(replay.never),
        "not_started": [r.job.id for r in records
                        if r.start is None and r.job.id not in replay.never],
        "waited": len(waited),
        "wait_median_s": median([r.wait for r in started]),
        "wait_median_waited_s": median([r.wait for r in waited]),
        "wait_p90_waited_s": (statistics.quantiles([r.wait for r in waited], n=10)[-1]
                              if len(waited) > 1 else None),
    }
    def error(r: Record, p: str) -> float:  # a start not predicted (beyond the horizon): inf
        return float("inf") if r.predicted[p] is None else abs(r.predicted[p] - r.start)

    # The forecast says "unknown" where nothing tells (scheduling.forecast): no time is given,
    # so none is scored; how many is a figure of its own (the baselines always give a time).
    told = [r for r in started if not r.unknown]
    told_waited = [r for r in waited if not r.unknown]
    for p in PREDICTORS:
        scored, scored_waited = (told, told_waited) if p == "forecast" else (started, waited)
        mae = median([error(r, p) for r in scored_waited])
        wait = out["wait_median_waited_s"]
        out[p] = {
            "mae_all_s": median([error(r, p) for r in scored]),
            "mae_waited_s": mae,
            "ratio": mae / wait if mae is not None and wait else None,
            "relative_median": median([error(r, p) / r.wait for r in scored_waited]),
            "unpredicted": sum(r.predicted[p] is None for r in scored),
        }
    out["forecast"]["unknown"] = len(started) - len(told)
    out["forecast"]["unknown_waited"] = len(waited) - len(told_waited)

    def within(r: Record) -> bool:
        return (r.low is not None and r.high is not None
                and r.low - 1e-6 <= r.start <= r.high + 1e-6)
    out["forecast"]["no_range"] = sum(r.low is None or r.high is None for r in told)
    out["forecast"]["in_range_all"] = sum(map(within, told)) / len(told) if told else None
    out["forecast"]["in_range_waited"] = (sum(map(within, told_waited)) / len(told_waited)
                                          if told_waited else None)
    out["targets"] = {name: target(f"{op} {bound}", out["forecast"][name], op, bound)
                      for name, (op, bound) in TARGETS.items()}
    calls = replay.forecast_seconds
    out["forecast_ms"] = {"calls": len(calls), "total_s": sum(calls),
                          "median": median(calls) and median(calls) * 1e3,
                          "max": max(calls) * 1e3 if calls else None}
    out["schedule_s"] = replay.schedule_seconds

    got_total = sum(replay.gpu_got.values())
    fair_total = sum(replay.gpu_fair.values())
    users = []
    for owner, name in replay.trace.names.items():
        jobs = [r for r in started if r.job.owner == owner]
        got, fair = replay.gpu_got.get(owner, 0.0), replay.gpu_fair.get(owner, 0.0)
        if not jobs and not fair:
            continue
        users.append({
            "user": name, "weight": replay.trace.weights[owner], "jobs": len(jobs),
            "wait_median_s": median([r.wait for r in jobs]),
            "gpu_hours": got / 3600, "fair_gpu_hours": fair / 3600,
            "share": got / got_total if got_total else None,
            "fair_share": fair / fair_total if fair_total else None,
            "ratio": (got / got_total) / (fair / fair_total)
            if got_total and fair_total and fair else None})
    out["users"] = users
    out["gpu_hours"] = got_total / 3600
    out["fair_gpu_hours"] = fair_total / 3600
    span = max((r.start + r.job.duration for r in started), default=0.0)
    out["span_hours"] = span / 3600
    out["gpu_idle_wanted_hours"] = replay.gpu_idle_wanted / 3600
    out["gpu_busy"] = (got_total / (replay.trace.capacity.gpu * span)
                       if span and replay.trace.capacity.gpu else None)
    return out


def target(text: str, value: float | None, op: str, bound: float) -> dict:
    """A figure beside its target: OK or MISSED (a figure not measured misses)."""
    met = value is not None and (value <= bound if op == "<=" else value >= bound)
    return {"value": value, "target": text, "result": "OK" if met else "MISSED"}


def finite(value):
    """``value`` with every infinite float (an error without a prediction) as None: JSON."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, float):
        return None if value == float("inf") else round(value, 4)
    return value


def hours(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds == float("inf"):
        return "inf"
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def pct(value: float | None) -> str:
    return "-" if value is None else ("inf" if value == float("inf") else f"{100 * value:.0f} %")


def report(f: dict) -> str:
    lines = [
        f"jobs {f['jobs']}: started {f['started']}, refused (never fit) {f['never']}, never "
        f"started {len(f['not_started'])}; {f['waited']} waited",
        f"actual wait: median {hours(f['wait_median_s'])} (all jobs), "
        f"{hours(f['wait_median_waited_s'])} (jobs that waited), p90 "
        f"{hours(f['wait_p90_waited_s'])} (jobs that waited)",
        "",
        "predicted start vs actual start; 'error/wait' = over the jobs that waited, median "
        "|predicted - actual| / median actual wait",
        f"{'predictor':<10}{'MAE waited':>12}{'error/wait':>12}{'target':>9}  {'result':<8}"
        f"{'med job |err|/wait':>19}{'MAE all':>11}{'in [low,high]':>15}",
    ]
    for p in PREDICTORS:
        g = f[p]
        met = g["ratio"] is not None and g["ratio"] <= TARGET
        in_range = (f"{pct(g['in_range_all'])} / {pct(g['in_range_waited'])}"
                    if p == "forecast" else "-")
        lines.append(f"{p:<10}{hours(g['mae_waited_s']):>12}{pct(g['ratio']):>12}"
                     f"{'<= 50 %':>9}  {('met' if met else 'missed') if p == 'forecast' else '':<8}"
                     f"{pct(g['relative_median']):>19}{hours(g['mae_all_s']):>11}{in_range:>15}")
    lines.append("(in [low,high]: of all jobs / of those that waited; forecast \"unknown\" "
                 f"(nothing told when what it waited for ends): {f['forecast']['unknown']} jobs "
                 f"({f['forecast']['unknown_waited']} of those that waited), not scored; "
                 f"not within the horizon: {f['forecast']['unpredicted']} jobs, counted as an "
                 "infinite error; "
                 f"no range (low or high not within the horizon): {f['forecast']['no_range']} "
                 "jobs, counted as out of range)")
    lines.append("issue 40's targets: " + "; ".join(
        f"{name} {pct(f['targets'][name]['value'])} (target {op} {pct(bound)}): "
        f"{f['targets'][name]['result']}" for name, (op, bound) in TARGETS.items()))
    ms = f["forecast_ms"]
    lines.append(f"forecast(): {ms['calls']} calls, {ms['total_s']:.1f} s in all, median "
                 f"{ms['median']:.1f} ms, max {ms['max']:.0f} ms; schedule(): "
                 f"{f['schedule_s']:.1f} s in all")
    lines += [
        "",
        f"GPU time: {f['gpu_hours']:.0f} GPU-hours used over {f['span_hours']:.0f} h "
        f"({pct(f['gpu_busy'])} of the GPUs); {f['gpu_idle_wanted_hours']:.0f} GPU-hours idle "
        "while a job needing GPUs waited",
        "fair share: at each moment, the GPUs shared by weighted max-min fairness among the "
        "users wanting GPUs (their jobs' GPUs, at most their quota)",
        f"{'user':<8}{'weight':>7}{'jobs':>6}{'med wait':>11}{'GPU-h':>8}{'share':>8}"
        f"{'fair GPU-h':>12}{'fair share':>12}{'share/fair':>12}",
    ]
    for u in f["users"]:
        lines.append(f"{u['user']:<8}{u['weight']:>7.1f}{u['jobs']:>6}"
                     f"{hours(u['wait_median_s']):>11}{u['gpu_hours']:>8.1f}{pct(u['share']):>8}"
                     f"{u['fair_gpu_hours']:>12.1f}{pct(u['fair_share']):>12}"
                     f"{'-' if u['ratio'] is None else format(u['ratio'], '.2f'):>12}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--jobs", type=int, default=None, help="the first N jobs only")
    parser.add_argument("--horizon", type=float, default=HORIZON,
                        help="how far forecast() looks, seconds (default: the core's)")
    parser.add_argument("--json", action="store_true", help="one JSON line after the table")
    args = parser.parse_args(argv)
    trace = load(args.trace, args.jobs)
    log(f"replaying {len(trace.jobs)} jobs of {args.trace.name}")
    began = time.monotonic()
    replay = Replay(trace, args.horizon)
    replay.run()
    f = figures(replay)
    f["wall_s"] = time.monotonic() - began
    print(report(f))
    print(f"replay: {f['wall_s']:.1f} s")
    if args.json:
        print(json.dumps(finite(f)))
    if f["not_started"]:
        print(f"FAILED: {len(f['not_started'])} jobs never started (first: "
              f"{f['not_started'][:10]})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
