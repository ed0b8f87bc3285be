"""Checkpoints as a contract of the platform (issue 37), on the local backend through the
running portal (a real Celery worker on Redis, real processes, real PostgreSQL): where a job's
checkpoints live and what its replicas are told of them."""

from __future__ import annotations

import json
import time

import pytest

from jobs.files import checkpoints_dir, home_dir, output_dir
from jobs.models import Job
from jobs.services import job_delete
from paddlecloud_core.layout import OUTPUT_MARKER, checkpoints_aside
from tests.conftest import assert_error
from tests.factories import PACKAGE

transactional = pytest.mark.django_db(transaction=True)

# Writes what it was told of checkpoints into its output, and what it found in the directory
# named; leaves a file there.
TELLING_TRAINER = """\
import json, os
ckpt = os.environ["PADDLE_CHECKPOINT_DIR"]
seen = sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else None
with open(os.path.join(ckpt, "left-by-" + os.environ["TRAINER_ID"]), "w") as f:
    f.write("x")
out = os.environ["PADDLE_OUTPUT_DIR"]
with open(os.path.join(out, "told-" + os.environ["TRAINER_ID"] + ".json"), "w") as f:
    json.dump({"dir": ckpt, "keep": os.environ["PADDLE_KEEP_CHECKPOINTS"], "seen": seen}, f)
"""


def ended(job: Job, timeout: float = 60) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.state in ("succeeded", "failed", "killed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job stayed {job.state}; events: {list(job.events.all())}")


def told(job: Job, trainer: int) -> dict:
    return json.loads((output_dir(job) / f"told-{trainer}.json").read_text())


@transactional
@pytest.mark.package(TELLING_TRAINER)
def test_every_replica_gets_its_jobs_checkpoint_directory_and_how_many_to_keep(
        celery_worker, submit, pfs_home):
    job = ended(submit("ckpt", trainers=2, keep_checkpoints=5))
    assert job.state == "succeeded", list(job.events.all())
    where = pfs_home / "jobs" / "ckpt" / "checkpoints"
    assert checkpoints_dir(job) == where
    for trainer in (0, 1):
        assert told(job, trainer)["dir"] == str(where)
        assert told(job, trainer)["keep"] == "5"
        assert OUTPUT_MARKER in told(job, trainer)["seen"]  # made before any replica started
    assert sorted(p.name for p in where.iterdir()) == [OUTPUT_MARKER, "left-by-0", "left-by-1"]


@transactional
@pytest.mark.package(TELLING_TRAINER)
def test_a_new_job_of_a_name_starts_with_none_of_the_earlier_ones_checkpoints(
        celery_worker, submit, alice, datacenter):
    first = ended(submit("again"))
    assert first.state == "succeeded", list(first.events.all())
    assert told(first, 0)["keep"] == "3"  # the default
    job_delete(alice, datacenter, "again")

    second = ended(submit("again"))
    assert second.state == "succeeded", list(second.events.all())
    assert told(second, 0)["seen"] == [OUTPUT_MARKER]  # not the first one's
    kept = home_dir(second) / "jobs" / "again" / checkpoints_aside(str(first.uid))
    assert (kept / "left-by-0").is_file()  # set aside, not lost


def test_keep_checkpoints_out_of_range_is_refused_naming_the_field(token_client, package):
    for value in (0, -1, 1001, "many"):
        response = token_client.post("/api/v1/jobs/", {
            "name": "ckpt", "package": PACKAGE, "entry": "python train.py",
            "keep_checkpoints": value}, format="json")
        body = assert_error(response, 400, "invalid", "keep_checkpoints")
        assert "keep_checkpoints: " in body["message"]
        if value != "many":
            assert "between 1 and 1000" in body["message"], body
    assert not Job.objects.exists()
