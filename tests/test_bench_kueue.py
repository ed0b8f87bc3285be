"""bench/admission.py --kueue (issue 34): Kueue's baseline scenario, scaled for Kueue's runner,
is the portal's benchmark's scale: as many ClusterQueues as users' queues, in the baseline's
cohorts of 6, each with the same count of each class as a user's queue in admission.py.

Pure: Kueue's config read from its module in Go's module cache, no cluster."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import admission_plan as admission  # noqa: E402
import kueue_scheduler  # noqa: E402

from tests.real_kube.kueue import kueue_source  # noqa: E402


@pytest.mark.parametrize(("jobs", "users", "cohorts", "queues"),
                         [(3000, 30, 5, 6), (15000, 30, 5, 6), (300, 5, 1, 5)])
def test_kueues_scaled_baseline_is_the_portal_benchmarks_scale(jobs, users, cohorts, queues):
    source = kueue_source()
    if not source.exists():
        pytest.skip(f"Kueue's module is not in Go's module cache ({source})")
    config = kueue_scheduler.scaled_config(source, jobs, users)
    (cohort,) = config["cohorts"]
    (queue_set,) = cohort["queuesSets"]
    assert (cohort["count"], queue_set["count"]) == (cohorts, queues)
    per_queue = {w["className"]: s["count"] for s in queue_set["workloadsSets"]
                 for w in s["workloads"]}
    plan = admission.Plan(jobs, users)
    assert per_queue == dict(Counter(kind for _, kind in plan.per_user))
    # The rest is the baseline's: quota, borrowing, classes' sizes, run times and pacing.
    assert (queue_set["nominalQuota"], queue_set["borrowingLimit"]) == (20, 100)
    sizes = {w["className"]: (int(w["request"]), w["runtimeMs"] / 1000, s["creationIntervalMs"]
                              / 1000) for s in queue_set["workloadsSets"] for w in s["workloads"]}
    assert sizes == {name: (cpus, runs, every) for name, (_, cpus, runs, every)
                     in admission.CLASSES.items()}


def test_reading_the_scenario_leaves_the_portals_job_starts_alone():
    """The benchmark's workers route job starts to a queue nobody reads (admission_worker);
    importing that into the suite's process would leave every later job of the suite
    ``starting``."""
    from kernel.celery import app

    assert "admission_worker" not in sys.modules
    assert not app.conf.task_routes
