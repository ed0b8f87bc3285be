"""``paddlectl get checkpoints JOB`` against the live portal: a kubectl-style table of the job's
checkpoints, newest first (one damaged shown so, with why), and the API's data with -o json.
No job runs (queued work is held): the checkpoints are written by the SDK's own ``save`` into
the job's checkpoint directory, as its trainer 0 would."""

from __future__ import annotations

import json

import pytest

from jobs.files import checkpoints_dir
from paddlecloud_core.layout import checkpoint_dirname
from paddlecloud_sdk import checkpoint
from tests.factories import submit_job
from tests.paddlectl.test_jobs_live import fails, ok, table

pytestmark = pytest.mark.django_db(transaction=True)


def test_get_checkpoints_lists_them_newest_first(live_cli, package, held_tasks, monkeypatch):
    portal = live_cli.portal
    job = submit_job(portal.user, portal.datacenter, "fit", package=package)
    assert ok(live_cli("get", "checkpoints", "fit")).stdout == (
        "job fit has no checkpoints in /pfs/datacenter1/home/alice/jobs/fit/checkpoints (its "
        "trainers save them with paddlecloud_sdk.checkpoint.save)\n")

    monkeypatch.setenv("PADDLE_CHECKPOINT_DIR", str(checkpoints_dir(job)))
    monkeypatch.setenv("PADDLE_JOB_UID", str(job.uid))
    monkeypatch.setenv("PADDLE_OUTPUT_DIR", str(portal.home / "out"))
    for step in (100, 200, 300):
        checkpoint.save(b"x" * step, step, pass_=step // 100 - 1)
    damaged = checkpoints_dir(job) / checkpoint_dirname(300) / "state.bin"
    damaged.write_bytes(b"x" * 299)

    shown = table(ok(live_cli("get", "checkpoints", "fit")).stdout)
    assert shown[0] == ["STEP", "PASS", "SAVED", "SIZE", "COMPLETE", "RESUMED BY"]
    assert [row[0] for row in shown[1:]] == ["300", "200", "100"]
    assert shown[1] == ["300", "-", "-", "-", "no: its file 'state.bin' has 299 bytes, its "
                                              "manifest says 300", "-"]
    assert [row[1] for row in shown[2:]] == ["1", "0"]
    assert [row[3:] for row in shown[2:]] == [["200", "yes", "-"], ["100", "yes", "-"]]
    assert shown[2][2].endswith(" ago)")  # local time and age, as kubectl's tables

    wide = table(ok(live_cli("get", "checkpoints", "fit", "-o", "wide")).stdout)
    assert wide[0][-1] == "PATH" and wide[2][-1] == (
        "/pfs/datacenter1/home/alice/jobs/fit/checkpoints/" + checkpoint_dirname(200))

    data = json.loads(ok(live_cli("get", "checkpoints", "fit", "-o", "json")).stdout)
    assert data["job"] == "fit"
    assert [(c["step"], c["pass"], c["size"], c["complete"]) for c in data["checkpoints"]] == [
        (300, None, None, False), (200, 1, 200, True), (100, 0, 100, True)]
    assert data["runs"] == []

    fails(live_cli("get", "checkpoints"), 1, "name one job: paddlectl get checkpoints JOB")
    fails(live_cli("get", "checkpoints", "nosuch"), 3, "no job named 'nosuch'")


def test_submit_resume_from_starts_a_job_from_another_jobs_checkpoint(
        live_cli, package, held_tasks, monkeypatch):
    """``submit -resume-from JOB[:STEP]``: checked by the portal (the error names the field
    and the rule); without a step, the latest complete checkpoint, which the job shows."""
    portal = live_cli.portal
    job = submit_job(portal.user, portal.datacenter, "fit", package=package)
    monkeypatch.setenv("PADDLE_CHECKPOINT_DIR", str(checkpoints_dir(job)))
    monkeypatch.setenv("PADDLE_JOB_UID", str(job.uid))
    monkeypatch.setenv("PADDLE_OUTPUT_DIR", str(portal.home / "out"))
    for step in (100, 200):
        checkpoint.save(b"x" * step, step)

    fails(live_cli("submit", "-jobname", "tuned", "-entry", "python train.py",
                   "-resume-from", "fit:150", package), 1,
          "resume_from: job fit has no checkpoint of step 150 (its complete ones: 200, 100)")
    ok(live_cli("submit", "-jobname", "tuned", "-entry", "python train.py",
                "-resume-from", "fit", package))
    shown = json.loads(ok(live_cli("get", "jobs", "tuned", "-o", "json")).stdout)
    assert shown["resume_from"] == "fit:200"
