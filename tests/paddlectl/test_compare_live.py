"""``paddlectl compare JOB...``: runs side by side, printed by paddlectl in a subprocess against
the live portal — a row per job and metric (final and best), then what differs in their specs
and environments; ``-o json`` and ``-o csv`` as the other commands print them."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.factories import job_row
from tests.jobs.files import metrics_path
from tests.paddlectl.test_jobs_live import fails, ok, table

pytestmark = pytest.mark.django_db(transaction=True)


def run(portal, name: str, losses: list[float], **fields):
    job = job_row(portal.user, portal.datacenter, name, replicas={}, **fields)
    path = metrics_path(job, job.replicas.get(role="trainer", index=0))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": 10 * step, "time": 1763700000.0 + step,
                                        "loss": loss}) + "\n"
                            for step, loss in enumerate(losses, 1)))


def test_compare_prints_the_table_then_what_differs(live_cli):
    run(live_cli.portal, "lr-1", [2.0, 0.5, 0.75], env={"LR": "0.1", "HF_TOKEN": "hf-one"})
    run(live_cli.portal, "lr-2", [3.0, 2.5], env={"LR": "0.01", "HF_TOKEN": "hf-two"},
        passes=3)
    out = ok(live_cli("compare", "lr-1", "lr-2")).stdout
    assert "hf-one" not in out and "hf-two" not in out
    metrics, diff = out.split("\n\n")
    assert table(metrics) == [
        ["JOB", "METRIC", "FINAL", "AT STEP", "BEST", "AT STEP", "GOAL"],
        ["lr-1", "loss", "0.75", "30", "0.5", "20", "min"],
        ["lr-2", "loss", "2.5", "20", "2.5", "20", "min"]]
    assert table(diff) == [["FIELD", "LR-1", "LR-2"], ["passes", "1", "3"],
                           ["env.HF_TOKEN", "(hidden)", "(hidden)"],
                           ["env.LR", "0.1", "0.01"]]

    data = json.loads(ok(live_cli("compare", "lr-1", "lr-2", "-metric", "loss", "-o", "json")
                         ).stdout)
    assert [s["value"] for s in data["series"]] == [[2.0, 0.5, 0.75], [3.0, 2.5]]
    rows = list(csv.reader(io.StringIO(ok(live_cli("compare", "lr-1", "lr-2", "-o", "csv")
                                          ).stdout)))
    assert rows[0] == ["job", "metric", "final", "at step", "best", "at step", "goal",
                       "points"]
    assert rows[1:] == [["lr-1", "loss", "0.75", "30", "0.5", "20", "min", "3"],
                        ["lr-2", "loss", "2.5", "20", "2.5", "20", "min", "2"]]


def test_compare_names_what_is_wrong(live_cli):
    run(live_cli.portal, "mine", [1.0])
    fails(live_cli("compare", "mine", "nobodys"), 3, "you have no job named 'nobodys'")
    fails(live_cli("compare", *(f"j{i}" for i in range(21))), 1, "jobs: at most 20 jobs")
    fails(live_cli("compare"), 1, "compare: the following arguments are required: JOB")
