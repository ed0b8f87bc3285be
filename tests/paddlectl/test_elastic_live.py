"""paddlectl and elastic trainers: ``submit -trainers MIN:MAX`` (and the seeds'
``-parallelism MIN:MAX``), its mistakes named by the server, and ``get jobs`` / ``get job``
showing how many trainers a job holds and its range."""

from __future__ import annotations

import json

import pytest

from tests.factories import HOME
from tests.paddlectl import test_jobs_live
from tests.paddlectl.test_jobs_live import fails, ok, table

# The ``package`` fixture: the seeds' package in alice's home.
pytestmark = pytest.mark.package(test_jobs_live.TRAINER, "package")


def _data(live_cli) -> str:
    (live_cli.portal.home / "data").mkdir()
    (live_cli.portal.home / "data" / "part-0.txt").write_text("1\n2\n3\n")
    return f"{HOME}/data/part-*.txt"


def test_submit_a_range_of_trainers_and_see_it(live_cli, package):
    dataset = _data(live_cli)
    # No worker runs here: the job is admitted (it holds its trainers) and stays starting.
    submitted = ok(live_cli("submit", "-jobname", "el", "-entry", "python train.py",
                            "-trainers", "2:5", "-pservers", "1", "-dataset", dataset,
                            "-trainers-below-min-seconds", "120", package)).stdout
    assert submitted.startswith("job el submitted: starting\n")
    rows = table(ok(live_cli("get", "jobs")).stdout)
    assert rows[0][:4] == ["NAME", "STATE", "TRAINERS", "PSERVERS"]
    # The default quota (4 CPU) has room for the pserver and 3 trainers of 1 CPU.
    assert rows[1][:4] == ["el", "starting", "3 (2\u20135)", "1"]
    job = json.loads(ok(live_cli("get", "job", "el", "-o", "json")).stdout)
    assert (job["trainers"], job["trainers_min"], job["trainers_held"], job["trainers_lost"],
            job["trainers_lost_limit"], job["trainers_below_min_seconds"]) == (5, 2, 3, 0, 5, 120)
    # The seeds' flag takes a range too.
    ok(live_cli("submit", "-jobname", "seeds", "-entry", "python train.py", "-parallelism",
                "1:2", "-pservers", "1", "-dataset", dataset, "-dry-run", package))


def test_a_range_the_rules_refuse_is_named(live_cli, package):
    dataset = _data(live_cli)
    base = ("submit", "-jobname", "bad", "-entry", "python train.py")
    fails(live_cli(*base, "-trainers", "2:4", "-dataset", dataset, package), 1,
          "trainers: a range (2:4) needs parameter servers")
    fails(live_cli(*base, "-trainers", "2:4", "-pservers", "1", package), 1,
          "trainers: a range (2:4) needs a dataset")
    fails(live_cli(*base, "-parallelism", "5:3", package), 1,
          "trainers: MIN must be at most MAX, not 5:3")
    fails(live_cli(*base, "-trainers-lost-limit", "2", package), 1,
          "trainers_lost_limit: only with a range of trainers")
