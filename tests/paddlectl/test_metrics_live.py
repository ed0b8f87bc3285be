"""``paddlectl metrics``: what a job's trainers reported with ``paddlecloud_sdk.report``, printed
by paddlectl in a subprocess against the live portal, the job run by a real Celery worker on
the local backend."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.factories import HOME
from tests.paddlectl.test_jobs_live import fails, ok, table

pytestmark = pytest.mark.django_db(transaction=True)

# Trainer i reports 3 steps; trainer 0 also a metric that is sometimes missing or nan.
TRAINER = """\
from paddlecloud_sdk import env, report
tid = env.trainer_id()
for step in range(1, 4):
    extra = {"acc": [0.5, float("nan")][step - 1]} if tid == 0 and step < 3 else {}
    report(step=step * 10, loss=1.0 / (step + tid), count=step, **extra)
"""


@pytest.fixture
def reported_job(live_cli, celery_worker):
    pkg = live_cli.portal.home / "reporter"
    pkg.mkdir()
    (pkg / "train.py").write_text(TRAINER)
    ok(live_cli("submit", "-jobname", "reporter", "-parallelism", "2", "-entry",
                "python train.py", f"{HOME}/reporter"))
    http = live_cli.portal.session()
    url = f"{live_cli.portal.url}/api/v1/jobs/reporter/"
    deadline = time.monotonic() + 30
    while (job := http.get(url).json())["state"] not in ("succeeded", "failed", "killed"):
        assert time.monotonic() < deadline, f"the job stayed {job['state']}"
        time.sleep(0.1)
    assert job["state"] == "succeeded", job["state_reason"]
    yield "reporter"
    from jobs.backends import backend_for
    from jobs.models import Job

    for job in Job.objects.select_related("datacenter", "owner"):
        backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)


def test_metrics_prints_a_row_per_report_and_a_column_per_metric(live_cli, reported_job):
    name = reported_job
    assert table(ok(live_cli("metrics", name)).stdout) == [
        ["STEP", "ACC", "COUNT", "LOSS"],
        ["10", "0.5", "1", "1"],
        ["20", "-", "2", "0.5"],  # nan is written as null, shown as -
        ["30", "-", "3", "0.333333"]]  # not reported in this step
    assert table(ok(live_cli("metrics", name, "-w", "trainer-1")).stdout) == [
        ["STEP", "COUNT", "LOSS"], ["10", "1", "0.5"], ["20", "2", "0.333333"],
        ["30", "3", "0.25"]]
    assert ok(live_cli("metrics", name, "--worker", "trainer-1")).stdout == \
        ok(live_cli("metrics", name, "-worker", "trainer-1")).stdout

    # -o json and yaml: the API's answer as it came.
    data = json.loads(ok(live_cli("metrics", name, "-o", "json")).stdout)
    assert (data["worker"], data["names"]) == ("trainer-0", ["acc", "count", "loss"])
    assert [(r["seq"], r["step"], r["metrics"]) for r in data["records"]] == [
        (0, 10, {"loss": 1.0, "count": 1, "acc": 0.5}),
        (1, 20, {"loss": 0.5, "count": 2, "acc": None}),
        (2, 30, {"loss": 1 / 3, "count": 3})]
    assert all(isinstance(r["time"], float) for r in data["records"])
    assert yaml.safe_load(ok(live_cli("metrics", name, "-w", "trainer-1", "-o", "yaml")
                              ).stdout)["worker"] == "trainer-1"

    fails(live_cli("metrics", name, "-w", "trainer-7"), 3, "has no worker 'trainer-7'",
          "trainer-0, trainer-1")
    fails(live_cli("metrics", "nope"), 3, "you have no job named 'nope'")
    fails(live_cli("metrics"), 1, "metrics: the following arguments are required: JOB")


def test_a_worker_that_reported_nothing(live_cli, reported_job):
    from jobs.models import Job
    from tests.jobs.files import metrics_path

    job = Job.objects.get(name=reported_job)
    metrics_path(job, job.replicas.get(index=0)).unlink()
    assert ok(live_cli("metrics", reported_job)).stdout == \
        "trainer-0 of job reporter has reported no metrics yet (paddlecloud_sdk.report)\n"
    assert json.loads(ok(live_cli("metrics", reported_job, "-o", "json")).stdout) == {
        "worker": "trainer-0", "names": [], "records": []}
