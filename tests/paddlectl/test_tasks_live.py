"""``paddlectl submit -dataset`` and ``paddlectl get tasks`` against the live portal: the master's
progress pass by pass, each task with -o wide, the API's data with -o json|yaml. No job runs
(queued work is held): the master is asked for tasks as a trainer would."""

from __future__ import annotations

import json

import pytest
import yaml

from jobs.master import dispatch
from jobs.models import Job
from paddlecloud_sdk import recordio
from tests.factories import HOME, package_write
from tests.paddlectl.test_jobs_live import fails, ok, table

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dataset(live_cli, held_tasks):
    home = live_cli.portal.home
    package_write(home)
    (home / "data").mkdir()
    for part in range(3):
        with recordio.Writer(home / "data" / f"part-{part}.recordio") as w:
            for number in range(10):
                w.write(f"{part}-{number}".encode())
    return f"{HOME}/data/part-*.recordio"


def test_submit_with_a_dataset_and_follow_its_tasks(live_cli, dataset):
    ok(live_cli("submit", "-jobname", "reader", "-entry", "python train.py", "-passes", "2",
                "-dataset", dataset, "-dataset-unit", "records", "-task-records", "5",
                f"{HOME}/pkg"))
    job = Job.objects.get(name="reader")
    assert (job.dataset, job.dataset_unit, job.task_records) == (dataset, "records", 5)
    info = yaml.safe_load(ok(live_cli("get", "jobs", "reader", "-o", "yaml")).stdout)
    assert (info["dataset"], info["dataset_unit"], info["task_records"]) == (
        dataset, "records", 5)
    assert ok(live_cli("get", "tasks", "reader")).stdout == (
        f"job reader has no tasks yet: its master cuts {dataset} into tasks when a trainer "
        "first asks for one\n")

    # Trainer 1 does two tasks and holds a third; trainer 0 fails one.
    for _ in range(2):
        task = dispatch.task_next(job, 1)["task"]
        dispatch.task_done(job, task["id"], 1, task["lease"])
    held = dispatch.task_next(job, 1)["task"]
    failing = dispatch.task_next(job, 0)["task"]
    dispatch.task_failed(job, failing["id"], 0, failing["lease"], "ValueError: x")

    shown = table(ok(live_cli("get", "tasks", "reader")).stdout)
    assert shown == [
        ["PASS", "STATE", "DONE", "LEASED", "WAITING", "SET ASIDE", "TOTAL", "PROGRESS"],
        ["1", "current", "2", "1", "3", "0", "6", "33%"],
        ["2", "to come", "-", "-", "-", "-", "-", "-"]]
    wide = ok(live_cli("get", "tasks", "reader", "-o", "wide")).stdout
    passes, tasks = wide.split("\n\n")
    assert table(passes) == shown
    tasks = table(tasks)
    assert tasks[0] == ["ID", "PASS", "INDEX", "STATE", "TRAINER", "ATTEMPTS", "FAILURES",
                        "LEASE EXPIRES"]
    assert [row[1:7] for row in tasks[1:]] == [
        ["1", "0", "done", "trainer-1", "1", "0"], ["1", "1", "done", "trainer-1", "1", "0"],
        ["1", "2", "leased", "trainer-1", "1", "0"], ["1", "3", "waiting", "trainer-0", "1", "1"],
        ["1", "4", "waiting", "-", "0", "0"], ["1", "5", "waiting", "-", "0", "0"]]
    assert tasks[3][0] == str(held["id"]) and tasks[3][7].endswith("s)")  # "… (in 29s)"
    assert [row[7] for row in tasks[1:] if row[3] != "leased"] == ["-"] * 5

    as_json = json.loads(ok(live_cli("get", "tasks", "reader", "-o", "json")).stdout)
    assert as_json["passes"] == [{"pass": 0, "waiting": 3, "leased": 1, "done": 2,
                                  "set_aside": 0, "total": 6}]
    assert (as_json["current_pass"], as_json["total_passes"], len(as_json["tasks"])) == (
        0, 2, 6)
    assert yaml.safe_load(ok(live_cli("get", "tasks", "reader", "-o", "yaml")).stdout) == \
        as_json


def test_a_job_without_a_dataset_has_no_tasks(live_cli, dataset):
    ok(live_cli("submit", "-jobname", "plain", "-entry", "python train.py", f"{HOME}/pkg"))
    assert ok(live_cli("get", "tasks", "plain")).stdout == (
        "job plain has no dataset, so no master and no tasks (submit it with -dataset GLOB)\n")
    fails(live_cli("get", "tasks", "nosuchjob"), 3)
    fails(live_cli("submit", "-jobname", "bad", "-entry", "python train.py", "-dataset",
                   f"{HOME}/data/none-*", f"{HOME}/pkg"), 1, "dataset: ", "matches no file")
