"""The examples/ trainer packages, submitted to the portal and run by its Celery worker on the
local backend with the environment contract — as `./dev up` runs fit_a_line."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from accounts.services import token_create
from jobs.files import output_dir
from jobs.models import Job
from jobs.services import job_submit
from tests.factories import HOME

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(alice, datacenter, pfs_home, example: str, timeout: float = 240) -> Job:
    shutil.copytree(EXAMPLES / example, pfs_home / example,
                    ignore=shutil.ignore_patterns("__pycache__"))
    spec = json.loads((EXAMPLES / example / "job.json").read_text())
    spec["package"] = f"{HOME}/{example}"
    job = job_submit(alice, datacenter, spec).job
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.state in ("succeeded", "failed", "killed"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"{example} still {job.state} after {timeout}s")


def losses(job: Job) -> list[float]:
    """ps_numpy writes its own metrics.jsonl in the output directory."""
    lines = (output_dir(job) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if line.strip()]


def reported(job: Job, worker: str = "trainer-0") -> dict:
    """What the job's page plots: GET /api/v1/jobs/{name}/metrics, as its owner."""
    client = APIClient()
    token = token_create(job.owner, datacenter_name=job.datacenter.name).raw
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = client.get(f"/api/v1/jobs/{job.name}/metrics", {"worker": worker})
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.django_db(transaction=True)
def test_fit_a_line_trains_with_two_trainers(celery_worker, alice, datacenter, pfs_home):
    job = run_example(alice, datacenter, pfs_home, "fit_a_line")
    logs = {r.name: (output_dir(job) / f"node_{r.index}" / "train.log").read_text()
            for r in job.replicas.all()}
    assert job.state == "succeeded", (job.state_reason, logs)
    assert job.trainers == 2
    # PaddlePaddle's noise: its ccache warning, its banner of FLAGS and its glog INFO lines
    # ("I1126 16:50:11.261121     4 tcp_store.cc:336] create libuv server …").
    for log in logs.values():
        assert "ccache" not in log and "Modified FLAGS" not in log, log
        assert not re.search(r"^I\d{4} \d\d:\d\d:\d\d", log, re.M), log
        assert "trainer" in log  # what the job itself printed
    # trainer 0 reports the mean loss of every step with paddlecloud_sdk.report (and each
    # checkpoint it saves, every 20 steps)
    metrics = reported(job)
    assert (metrics["worker"], metrics["names"]) == ("trainer-0", ["checkpoint", "loss"])
    records = [r for r in metrics["records"] if "loss" in r["metrics"]]
    assert len(records) >= 2
    steps = [r["step"] for r in records]
    assert steps == list(range(1, len(records) + 1)), steps
    loss = [r["metrics"]["loss"] for r in records]
    assert all(value is not None for value in loss), loss
    assert loss[-1] < loss[0] / 10, loss
    assert reported(job, "trainer-1")["records"] == []  # only trainer 0 reports
    assert any((output_dir(job) / "model").iterdir())


@pytest.mark.django_db(transaction=True)
def test_the_parameter_server_example_trains(celery_worker, alice, datacenter, pfs_home):
    job = run_example(alice, datacenter, pfs_home, "ps_numpy")
    assert job.state == "succeeded", job.state_reason
    assert job.pservers >= 1
    roles = set(job.replicas.values_list("role", "state"))
    assert ("pserver", "succeeded") in roles and ("trainer", "succeeded") in roles
    loss = losses(job)
    assert loss[-1] < loss[0], loss
