"""examples/fit_a_line reading a job's dataset through its master: real PaddlePaddle, two
collective (all-reduce) trainers run by the portal's Celery worker on the local backend, the
master over HTTP. The master hands out tasks as the trainers ask, so one of them is left
without rows while the other trains a pass's last task: the trainers must still step
together, the one without rows with a step of weight 0 — and every row of every pass is
trained exactly once."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from jobs.files import checkpoints_dir, output_dir
from jobs.models import Job, Task
from jobs.services import job_submit
from tests.factories import HOME
from tests.jobs.master_scenario import FINAL, state
from tests.polling import wait

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fit_a_line"
ROWS = 64  # a file's
PASSES = 3
PASS_LINE = re.compile(r"^trainer (\d+) pass (\d+) done: (\d+) rows in (\d+) steps \((\d+) with "
                       r"a trainer without rows\), (\d+) of them here; mean loss (\S+)$",
                       re.MULTILINE)


def trainer_log(job: Job, index: int) -> str:
    path = output_dir(job) / f"node_{index}" / "train.log"
    return path.read_text() if path.exists() else ""


def journal(job: Job, index: int) -> list[dict]:
    """The tasks trainer ``index`` trained and reported done (node_N/tasks.jsonl)."""
    path = output_dir(job) / f"node_{index}" / "tasks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def lines_of(span: dict) -> list[tuple[str, int]]:
    """The rows a span holds: (file, line)."""
    name = Path(span["path"]).name
    if span["kind"] == "file":
        return [(name, line) for line in range(ROWS)]
    assert span["kind"] == "records", span
    return [(name, line) for line in range(span["start"], span["start"] + span["count"])]


def run(live_portal, **fields) -> tuple[Job, dict[int, str]]:
    """fit_a_line submitted as docs/users/quickstart.md does (its directory and its data/
    uploaded to alice's home: ``paddlectl cp -r data …/data/fit_a_line``) with ``fields``, run
    to its end."""
    home = live_portal.home
    shutil.copytree(EXAMPLE, home / "fit_a_line", ignore=shutil.ignore_patterns(
        "__pycache__", "output"))
    shutil.copytree(EXAMPLE / "data", home / "data" / "fit_a_line")
    spec = {**json.loads((EXAMPLE / "job.json").read_text()),
            "package": f"{HOME}/fit_a_line", "passes": PASSES, **fields}
    job = job_submit(live_portal.user, live_portal.datacenter, spec).job
    deadline = time.monotonic() + 120
    while job.state not in ("succeeded", "failed", "killed"):
        assert time.monotonic() < deadline, f"still {job.state}"
        time.sleep(0.25)
        job.refresh_from_db()
    logs = {i: trainer_log(job, i) for i in range(2)}
    assert job.state == "succeeded", (job.state_reason, logs)
    for i in range(2):
        assert f"trainer {i}/2 reads the job's dataset through its master" in logs[i]
        assert f"trainer {i} finished {PASSES} passes" in logs[i], logs[i]
    return job, logs


def assert_every_row_once_a_pass(job: Job, logs: dict[int, str], files: list[str],
                                 tasks_a_pass: int) -> dict:
    """The master completed each task once a pass, each by the first trainer given it; the
    trainers reported each done after training all its rows, and trained each row of the
    dataset once a pass between them. Each pass's account (trainer, pass) -> (rows, steps,
    steps with a trainer without rows, rows of the trainer, mean loss), from the logs."""
    tasks = list(Task.objects.filter(job=job).order_by("pass_no", "index"))
    assert [(t.pass_no, t.index) for t in tasks] == [
        (p, i) for p in range(PASSES) for i in range(tasks_a_pass)]
    assert {(t.state, t.attempts, t.failures) for t in tasks} == {("done", 1, 0)}

    done = {(entry["pass"], entry["index"]): (i, entry) for i in range(2)
            for entry in journal(job, i)}
    assert len(done) == sum(len(journal(job, i)) for i in range(2)) == len(tasks)
    for task in tasks:
        trainer, entry = done[(task.pass_no, task.index)]
        assert trainer == task.trainer  # the trainer the master says completed it
        assert entry["done"] is True and entry["spans"] == task.spans, entry
        assert entry["rows"] == sum(len(lines_of(span)) for span in task.spans), entry
    everything = Counter((name, line) for name in files for line in range(ROWS))
    for pass_no in range(PASSES):
        trained = Counter(row for (p, _), (_, entry) in done.items() if p == pass_no
                          for span in entry["spans"] for row in lines_of(span))
        assert trained == everything, pass_no
    assert {i for i, _ in done.values()} == {0, 1}  # both trainers had tasks

    # Each trainer's account of each pass: the rows of its steps, summed over the trainers,
    # are the dataset's; the same steps on both; the two share the rows.
    # (trainer, pass from 0): the logs number passes from 1, as the events and get tasks do
    passes = {(int(t), int(p) - 1): m for t, p, *m in PASS_LINE.findall(logs[0] + logs[1])}
    assert sorted(passes) == [(t, p) for t in range(2) for p in range(PASSES)], logs
    for pass_no in range(PASSES):
        both = [passes[(t, pass_no)] for t in range(2)]
        assert both[0][:3] == both[1][:3]
        assert int(both[0][0]) == len(files) * ROWS
        assert int(both[0][3]) + int(both[1][3]) == len(files) * ROWS

    # It learned: the loss trainer 0 reported fell tenfold, and the model fits the test set.
    metrics = [m for line in (output_dir(job) / "node_0" / "metrics.jsonl").read_text()
               .splitlines() if "checkpoint" not in (m := json.loads(line))]  # the SDK's
    assert [m["step"] for m in metrics] == list(range(1, len(metrics) + 1))
    assert metrics[-1]["loss"] < metrics[0]["loss"] / 10, metrics
    summary = json.loads((output_dir(job) / "model" / "summary.json").read_text())
    assert summary["test_loss"] < 0.1, summary
    return passes


@pytest.mark.django_db(transaction=True)
def test_a_trainer_without_a_task_steps_with_the_other(live_portal, celery_worker):
    """Seven files, a task each: the trainers take two at a time, in step, and the seventh
    leaves one of them without a task while the other trains it (four steps)."""
    files = [f"part-{n:05d}.txt" for n in range(7)]
    job, logs = run(live_portal, dataset=f"{HOME}/data/fit_a_line/part-0000[0-6].txt",
                    dataset_unit="file")
    passes = assert_every_row_once_a_pass(job, logs, files, tasks_a_pass=7)
    assert int(passes[(0, 0)][2]) >= 4, logs[0]  # steps with a trainer without rows
    assert "no rows (waiting for a task): weight 0" in logs[0] + logs[1]


@pytest.mark.django_db(transaction=True)
def test_the_readmes_submission_trains_every_row_once_a_pass(live_portal, celery_worker):
    """The whole dataset in tasks of 40 lines (40 and 24 of each file: batches of 16, 16, 8
    and 16, 8), as the docs submit it."""
    files = [f"part-{n:05d}.txt" for n in range(8)]
    job, logs = run(live_portal, dataset=f"{HOME}/data/fit_a_line/part-*.txt",
                    task_records=40)
    assert_every_row_once_a_pass(job, logs, files, tasks_a_pass=16)


def test_the_shipped_dataset_is_the_one_the_example_generates(tmp_path):
    """examples/fit_a_line/data/ is what ``python train.py --write-data DIR`` writes: the
    rows the example generates when it runs without a dataset, as text."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fit_a_line_train", EXAMPLE / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    train.write_text_dataset(tmp_path)
    shipped = sorted(p.name for p in (EXAMPLE / "data").iterdir())
    assert shipped == sorted(p.name for p in tmp_path.iterdir())
    for name in shipped:
        assert (EXAMPLE / "data" / name).read_bytes() == (tmp_path / name).read_bytes(), name


STEP_LINE = re.compile(r"^trainer (\d+) pass (\d+) step (\d+) (?:(\d+) rows|no rows)",
                       re.MULTILINE)


@pytest.mark.django_db(transaction=True)
def test_killed_mid_run_both_trainers_resume_from_the_checkpoint_and_train_each_row_once(
        live_portal, celery_worker):
    """Trainer 1 killed (SIGKILL) once the trainers have saved a checkpoint: the portal
    restarts both (a collective job restarts together), both resume from the latest
    checkpoint (not step 0), and the master from where that checkpoint left the pass: the
    rows each pass's steps trained — those of the first run up to the checkpoint, then those
    of the second — are the dataset's, none lost, none twice (counted from the trainers'
    logs: a step's rows on each trainer)."""
    home = live_portal.home
    shutil.copytree(EXAMPLE, home / "fit_a_line", ignore=shutil.ignore_patterns(
        "__pycache__", "output"))
    shutil.copytree(EXAMPLE / "data", home / "data" / "fit_a_line")
    spec = {**json.loads((EXAMPLE / "job.json").read_text()),
            "package": f"{HOME}/fit_a_line", "passes": 6, "restart_limit": 1,
            "dataset": f"{HOME}/data/fit_a_line/part-*.txt", "task_records": 40,
            "env": {"CHECKPOINT_EVERY": "10"}}
    job = job_submit(live_portal.user, live_portal.datacenter, spec).job
    ckpt = checkpoints_dir(job)

    def saved() -> list[int]:
        return sorted(int(p.name.removeprefix("step-")) for p in ckpt.glob("step-*"))

    wait(lambda: saved() and saved()[-1] >= 20, 120, lambda: f"a checkpoint: {saved()}")
    trainer = job.replicas.get(role="trainer", index=1)
    os.killpg(int(trainer.backend_ref.removeprefix("pid:")), signal.SIGKILL)
    wait(lambda: state(job) in FINAL, 180, "the job to end")
    logs = {i: trainer_log(job, i) for i in range(2)}
    assert job.state == "succeeded", (job.state_reason, logs)

    first, second = {}, {}
    for i in range(2):
        assert "--- restart 1 ---" in logs[i], logs[i]
        before, after = logs[i].split("--- restart 1 ---")
        resumed = re.search(r"trainer \d resumed from the checkpoint of step (\d+)", after)
        assert resumed, after
        first[i], second[i] = before, after
    step = int(re.search(r"from the checkpoint of step (\d+)", second[0])[1])
    assert step >= 20 and f"from the checkpoint of step {step} " in second[1]
    assert "trainer 0 finished" in second[0] and "trainer 1 finished" in second[1]

    rows: Counter = Counter()  # (pass) -> rows trained into the model that went on
    for i in range(2):
        for run, keep in ((first[i], lambda s: s <= step), (second[i], lambda s: s > step)):
            for _, pass_no, at, n in STEP_LINE.findall(run):
                if keep(int(at)):
                    rows[int(pass_no) - 1] += int(n or 0)  # the logs count from 1
    assert rows == {p: 8 * ROWS for p in range(6)}, rows
    assert set(Task.objects.filter(job=job).values_list("state", flat=True)) == {"done"}
    summary = json.loads((output_dir(job) / "model" / "summary.json").read_text())
    assert summary["test_loss"] < 0.1, summary

