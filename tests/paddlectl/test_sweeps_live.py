"""``paddlectl sweep SPEC.yaml``, ``get sweeps`` and ``kill SWEEP`` in a subprocess against the
live portal, the trials run by a real Celery worker on the local backend."""

from __future__ import annotations

import time

import pytest
import yaml

from tests.factories import HOME
from tests.paddlectl.test_jobs_live import fails, ok, table

pytestmark = pytest.mark.django_db(transaction=True)

# A trial reports its loss (its LR) and then waits to be stopped.
TRAINER = """\
import os, time
from paddlecloud_sdk import report
report(step=1, loss=float(os.environ["LR"]))
time.sleep(600)
"""


def spec(**changes) -> dict:
    return {"name": "lr", "method": "grid", "parallel": 2,
            "job": {"entry": "python train.py", "package": f"{HOME}/waiter"},
            "space": {"env.LR": [0.5, 0.25, 0.125]},
            "objective": {"metric": "loss"}, **changes}


@pytest.fixture
def reaper():
    """Leaves no trial running, whatever becomes of the test."""
    yield
    from jobs.backends import backend_for
    from jobs.models import Job

    for job in Job.objects.select_related("datacenter", "owner"):
        backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)


def test_a_sweep_is_started_listed_and_killed_with_paddlectl(live_cli, celery_worker, reaper):
    pkg = live_cli.portal.home / "waiter"
    pkg.mkdir()
    (pkg / "train.py").write_text(TRAINER)
    bad = live_cli.cwd / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec(max_trials=0, method="bayes")))
    fails(live_cli("sweep", str(bad)), 1, "max_trials: a whole number from 1 to 1000",
          "method: unknown method 'bayes'")
    good = live_cli.cwd / "sweep.yaml"
    good.write_text(yaml.safe_dump(spec()))
    assert ok(live_cli("sweep", str(good))).stdout == \
        "sweep lr started: 3 trials, 2 running 1 to submit (lr-1, lr-2)\n"

    deadline = time.monotonic() + 60
    while "loss 0.25 (lr-2: env.LR=0.25)" not in (out := ok(live_cli("get", "sweeps")).stdout):
        assert time.monotonic() < deadline, out
        time.sleep(0.2)
    rows = table(out)
    assert rows[0][:6] == ["NAME", "STATE", "METHOD", "TRIALS", "PROGRESS", "BEST"]
    assert rows[1][:6] == ["lr", "running", "grid", "2/3", "2 running 1 to submit",
                           "loss 0.25 (lr-2: env.LR=0.25)"]
    assert rows[1][6] == ("unknown (no trial has finished yet: how long one takes is not "
                          "known)")
    trials = table(ok(live_cli("get", "sweeps", "lr")).stdout)[3:]
    assert trials == [["JOB", "STATE", "SETTINGS", "STOPPED EARLY"],
                      ["lr-1", "running", "env.LR=0.5", "-"],
                      ["lr-2", "running", "env.LR=0.25", "-"]]

    # get jobs: the sweep's trials are one row of the sweep; scripts still get every job
    jobs = table(ok(live_cli("get", "jobs")).stdout)
    assert [row[:2] for row in jobs[1:]] == [["lr", "sweep running"]], jobs
    assert jobs[1][-1] == ("2/3 trials: 2 running 1 to submit; best loss 0.25 "
                           "(lr-2: env.LR=0.25)")
    assert sorted(j["name"] for j in yaml.safe_load(
        ok(live_cli("get", "jobs", "-o", "json")).stdout)) == ["lr-1", "lr-2"]
    assert ok(live_cli("kill", "lr")).stdout == \
        "sweep lr killed: its 2 trials are being stopped, no more are submitted\n"
    rows = table(ok(live_cli("get", "sweeps")).stdout)
    assert rows[1][:5] == ["lr", "killed", "grid", "2/3", "2 killed"]
    fails(live_cli("kill", "nothing"), 3, "no job named 'nothing'")
