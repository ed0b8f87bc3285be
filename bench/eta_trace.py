"""A team's week of jobs for bench/eta.py, drawn from a seeded generator (issue 22).

    .venv/bin/python bench/eta_trace.py [--seed 22] [--out bench/traces/team-week.json]

The trace is committed (bench/traces/team-week.json) so every run replays the same week;
tests/test_bench_eta.py regenerates it from ``SEED`` and compares, so it cannot drift from
this file. Change the generator, then write the trace anew with this command.

The week: ten users of one datacenter (64 CPUs, 256 GiB, 16 GPUs), each with habits of their
own (``USERS``): two heavy GPU users who submit sweeps of many same-named jobs
(``sweep-lr-17``), big multi-trainer jobs (8 GPUs on two trainers or eight), CPU-only
pipelines, short debugging jobs with a deadline and a high priority now and then, low
priority evaluations, a night owl. Arrivals follow a daily and weekly rhythm (working hours,
a quiet Friday afternoon, a quieter weekend). Each job carries its TRUE run time: log-normal
around its kind's typical time (per user and kind), so the run times of a user's earlier jobs
of a kind say something of the next one, with noise. A job that reads a dataset (all but
the RL and plotting kinds) does so through its master, in ``PASSES`` passes of
``TASKS_PER_PASS`` tasks, the portal's measure of its progress: it does them at an even pace
once started up (``startup``: image, imports, data opened; drawn apart, so that adding it left
the week's jobs as they were). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

SEED = 22
JOBS = 2000
WEEK = 7 * 24 * 3600
TRACE = Path(__file__).resolve().parent / "traces" / "team-week.json"
FORMAT = "paddlecloud-eta-trace/1"
GI = 2**30
CORE = 1000  # millicores
# A job that reads its dataset through its master: its passes and tasks a pass (the portal
# counts its tasks done over them: ``scheduling.pool.work_done``), and how long it runs before
# its first task (image, imports, data opened), drawn between these, seconds.
PASSES, TASKS_PER_PASS = 5, 8
STARTUP = (30.0, 240.0)

# The datacenter's capacity and each user's quota, as the scheduling model's Limit counts
# them: cpu in millicores, memory in bytes, gpu, jobs (concurrent).
CAPACITY = {"cpu": 64 * CORE, "memory": 256 * GI, "gpu": 16}
QUOTA = {"cpu": 48 * CORE, "memory": 192 * GI, "gpu": 8, "jobs": 16}

# Hours of a weekday people submit in, by weight (the rest of the day: ``0.05``), and how busy
# each day of the week is (Monday first).
OFFICE_HOURS = {8: 0.5, 9: 1.5, 10: 3, 11: 3, 12: 1, 13: 1.5, 14: 3, 15: 3, 16: 3, 17: 2,
                18: 1, 19: 0.5}
OFFICE_DAYS = (1.0, 1.1, 1.1, 1.0, 0.7, 0.08, 0.05)
NIGHT_HOURS = {19: 1, 20: 2, 21: 3, 22: 3, 23: 2, 0: 1.5, 1: 1, 2: 0.5}
NIGHT_DAYS = (1.0, 1.0, 1.0, 1.0, 1.0, 0.7, 0.7)


@dataclass(frozen=True)
class Kind:
    """One kind of a user's jobs: its name stem, its size per trainer, its typical run time
    (the median, seconds) and how widely it varies (sigma of the log), how many are submitted
    at once (a sweep: ``batch`` (least, most)), and how often it has a priority or a deadline."""

    stem: str
    share: float  # of the user's jobs
    trainers: int
    cpu: int  # cores per trainer
    memory: int  # GiB per trainer
    gpu: int  # per trainer
    typical: float  # seconds
    sigma: float
    batch: tuple[int, int] = (1, 1)
    priority: tuple[tuple[int, float], ...] = ()  # (priority, probability); else 0
    deadline: float | None = None  # seconds, for the share ``deadline_share`` of the jobs
    deadline_share: float = 0.0
    master: bool = True  # reads a dataset through the job's master (progress: its tasks)


@dataclass(frozen=True)
class User:
    name: str
    jobs: int  # in the week
    rhythm: str  # "office", "night" or "any"
    kinds: tuple[Kind, ...]
    weight: float = 1.0
    quota: dict | None = None  # None: QUOTA


MIN = 60.0
HOUR = 3600.0
USERS = (
    # Heavy GPU user, weight 2: learning-rate and weight-decay sweeps of one-GPU jobs.
    User("alice", 560, "office", weight=2.0, quota=dict(QUOTA, gpu=12), kinds=(
        Kind("sweep-lr", 0.6, 1, 3, 12, 1, 40 * MIN, 0.35, batch=(8, 32)),
        Kind("sweep-wd", 0.4, 1, 3, 12, 1, 25 * MIN, 0.35, batch=(8, 24)))),
    # Heavy GPU user: fine-tuning sweeps of two-GPU jobs.
    User("bob", 190, "office", kinds=(
        Kind("bert-ft", 1.0, 1, 6, 24, 2, 45 * MIN, 0.4, batch=(4, 12)),)),
    # Big data-parallel jobs: eight trainers of one GPU each.
    User("carol", 12, "office", kinds=(
        Kind("resnet-dist", 1.0, 8, 3, 12, 1, 3 * HOUR, 0.3, batch=(1, 2)),)),
    # CPU-only data pipelines.
    User("dave", 300, "office", kinds=(
        Kind("etl", 1.0, 1, 8, 32, 0, 30 * MIN, 0.5, batch=(1, 6)),)),
    # Short debugging runs: a deadline, often a high priority.
    User("erin", 250, "office", kinds=(
        Kind("debug", 1.0, 1, 3, 12, 1, 10 * MIN, 0.6, batch=(1, 2),
             priority=((1, 0.3),), deadline=30 * MIN, deadline_share=1.0),)),
    # The night owl: reinforcement learning on four GPUs, started in the evening.
    User("frank", 28, "night", kinds=(
        Kind("ppo", 1.0, 1, 12, 48, 4, 3 * HOUR, 0.4, batch=(1, 3), master=False),)),
    # Evaluations on CPUs, low priority, capped by a deadline.
    User("grace", 300, "office", kinds=(
        Kind("eval", 1.0, 1, 2, 8, 0, 15 * MIN, 0.5, batch=(5, 20),
             priority=((-1, 0.8),), deadline=HOUR, deadline_share=1.0),)),
    # Pre-training on two trainers of four GPUs, any time of the week, often urgent.
    User("heidi", 5, "any", kinds=(
        Kind("llm-pt", 1.0, 2, 12, 48, 4, 7 * HOUR, 0.25, priority=((1, 0.5),)),)),
    # Mixed: one-GPU CNNs and CPU tokenizing, some with a deadline.
    User("ivan", 200, "office", kinds=(
        Kind("cnn", 0.5, 1, 3, 12, 1, 50 * MIN, 0.45, batch=(1, 4)),
        Kind("tokenize", 0.5, 1, 4, 16, 0, 20 * MIN, 0.5, batch=(1, 8),
             deadline=2 * HOUR, deadline_share=0.5))),
    # A light user: a fine-tuning now and then, plots.
    User("judy", 155, "office", kinds=(
        Kind("finetune", 0.3, 1, 3, 12, 1, 90 * MIN, 0.4),
        Kind("plot", 0.7, 1, 1, 4, 0, 5 * MIN, 0.7, batch=(1, 3), master=False))),
)


def hour_weights(rhythm: str) -> list[float]:
    """How likely a session starts in each hour of the week (168 hours, Monday 00:00 first)."""
    if rhythm == "any":
        return [1.0 if h // 24 < 5 else 0.5 for h in range(168)]
    hours, days = (OFFICE_HOURS, OFFICE_DAYS) if rhythm == "office" else (NIGHT_HOURS, NIGHT_DAYS)
    weights = []
    for h in range(168):
        day, hour = divmod(h, 24)
        weight = hours.get(hour, 0.05) * days[day]
        if rhythm == "office" and day == 4 and hour >= 14:  # Friday afternoon
            weight *= 0.4
        weights.append(weight)
    return weights


def make_trace(seed: int = SEED) -> dict:
    """The week: the datacenter, its users and their jobs (ids in order of arrival)."""
    rng = random.Random(seed)  # noqa: S311 (a simulation's draws, no secret)
    # Drawn apart, so that the week's jobs are those drawn before progress was in the trace.
    startups = random.Random(seed + 1)  # noqa: S311
    jobs = []
    for user in USERS:
        weights = hour_weights(user.rhythm)
        counters: dict[str, int] = {}
        left = user.jobs
        while left:
            # A session: one kind, a batch of jobs submitted a few seconds apart (a script).
            kind = rng.choices(user.kinds, [k.share for k in user.kinds])[0]
            hour = rng.choices(range(168), weights)[0]
            at = hour * 3600 + rng.uniform(0, 3600)
            count = min(left, rng.randint(*kind.batch))
            left -= count
            for _ in range(count):
                counters[kind.stem] = number = counters.get(kind.stem, 0) + 1
                priority = 0
                for value, probability in kind.priority:
                    if rng.random() < probability:
                        priority = value
                deadline = kind.deadline if rng.random() < kind.deadline_share else None
                run = round(max(kind.typical * math.exp(rng.gauss(0.0, kind.sigma)), 30.0), 1)
                jobs.append({
                    "owner": user.name, "name": f"{kind.stem}-{number}",
                    "arrival": round(min(at, WEEK - 1), 1), "trainers": kind.trainers,
                    "cpu": kind.trainers * kind.cpu * CORE,
                    "memory": kind.trainers * kind.memory * GI,
                    "gpu": kind.trainers * kind.gpu, "priority": priority,
                    "deadline": deadline, "run": run,
                    "tasks": PASSES * TASKS_PER_PASS if kind.master else 0,
                    "startup": (round(min(startups.uniform(*STARTUP), run / 2), 1)
                                if kind.master else 0.0)})
                at += rng.uniform(2.0, 20.0)
    jobs.sort(key=lambda j: (j["arrival"], j["owner"], j["name"]))
    jobs = [{"id": n, **job} for n, job in enumerate(jobs, 1)]
    assert len(jobs) == JOBS, len(jobs)
    return {
        "format": FORMAT, "seed": seed, "week_seconds": WEEK, "capacity": CAPACITY,
        "users": [{"id": n, "name": u.name, "weight": u.weight, "quota": u.quota or QUOTA}
                  for n, u in enumerate(USERS, 1)],
        "jobs": jobs}


def dumps(trace: dict) -> str:
    """The trace as committed: compact JSON, the header on the first lines and one job a line
    (small diffs)."""
    head = {k: v for k, v in trace.items() if k != "jobs"}
    lines = ["{" + ",\n".join(f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'))}"
                              for k, v in head.items()) + ',\n"jobs":[']
    lines.append(",\n".join(json.dumps(j, separators=(",", ":")) for j in trace["jobs"]))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=TRACE)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(make_trace(args.seed)))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
