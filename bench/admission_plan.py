"""The scenario of ``bench/admission.py``: Kueue's baseline workload classes and the jobs of one
run. Apart so that what reads the scenario without running it (``tests/test_bench_kueue.py``)
does not import ``admission_worker``, which routes the portal's job starts away from its workers
in the process that imports it."""

from __future__ import annotations

from dataclasses import dataclass, field

from portal import BenchError

CPU = 1000  # millicores
# Kueue's baseline workload classes: share of a queue's jobs, CPUs, run time, and the interval
# at which its generator creates them (which decides the submission order).
CLASSES = {"small": (0.7, 1, 0.2, 0.1), "medium": (0.2, 5, 0.5, 0.5),
           "large": (0.1, 20, 1.0, 1.2)}
QUOTA_CPUS = 20
QUOTA_JOBS = 20  # Kueue counts no jobs: as many as the CPUs allow (20 small ones)


@dataclass
class Plan:
    """The jobs of one run: each job's class by name, and the users' queues."""

    jobs: int
    users: int
    per_user: list[tuple[str, str]] = field(default_factory=list)  # (name, class), in order

    def __post_init__(self):
        if self.jobs % self.users:
            raise BenchError(f"--jobs {self.jobs} is not a multiple of --users {self.users}")
        each = self.jobs // self.users
        counts = {c: round(each * share) for c, (share, *_) in CLASSES.items()}
        counts["small"] += each - sum(counts.values())
        timed = [(i * interval, n, c, i) for n, (c, (_, _, _, interval))
                 in enumerate(CLASSES.items()) for i in range(counts[c])]
        self.per_user = [(f"{c}-{i:04d}", c) for _, _, c, i in sorted(timed)]
