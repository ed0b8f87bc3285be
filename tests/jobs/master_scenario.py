"""The master's end-to-end scenario, whatever runs the trainers (the local backend:
test_master_e2e.py; Kubernetes with pods that really run: test_master_on_kubernetes.py): a job
of 3 trainers reads 1 000 records in 50 tasks, 2 passes, through ``paddlecloud_sdk.master``
from the portal over HTTP; a trainer is killed mid-task, or the portal's worker restarted
mid-pass; every record is delivered by a task completed exactly once per pass."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from jobs import engine
from jobs.backends import backend_for
from jobs.files import output_dir
from jobs.models import Job, JobEvent, Task
from paddlecloud_sdk import recordio
from tests.factories import HOME, package_write, submit_job
from tests.polling import wait

# Each trainer: for every task it is given, note it (taken), read its records (SLOW seconds
# each for trainer SLOW_TRAINER), and once the master has the task done, write the records it
# read (committed): output/node_N/tasks.txt, a line a task.
# READ_TASKS is that loop, for a program that has set ``me`` and ``slow``.
READ_TASKS = """\
from paddlecloud_sdk import master
out = os.path.join(os.environ["PADDLE_OUTPUT_DIR"], f"node_{me}")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "tasks.txt"), "a") as log:
    for task in master.tasks():
        print("taken", task["pass"], task["index"], flush=True)
        records = []
        for record in task:
            records.append(record.decode())
            time.sleep(slow)
        log.write(f"{task['pass']} {task['index']} {' '.join(records)}\\n")
        log.flush()
print("no more tasks", flush=True)
"""
TRAINER = """\
import os, time
me = int(os.environ["PADDLE_TRAINER_ID"])
slow = float(os.environ.get("SLOW", "0")) if me == int(os.environ.get("SLOW_TRAINER", -1)) else 0
""" + READ_TASKS
FINAL = ("succeeded", "failed", "killed")


def recordio_dataset_write(home) -> str:
    """The dataset in ``home`` on disk: 1000 records r0..r999 in 5 RecordIO files,
    data/part-*.recordio. Its PFS glob."""
    (home / "data").mkdir()
    for part in range(5):
        with recordio.Writer(home / "data" / f"part-{part}.recordio") as writer:
            for number in range(part * 200, part * 200 + 200):
                writer.write(f"r{number}".encode())
    return f"{HOME}/data/part-*.recordio"


def dataset_job(live_portal) -> Callable[..., Job]:
    """alice's trainer package and dataset (1000 records in 5 RecordIO files) in her PFS
    home; a function submitting the job that reads them (50 tasks of 20 records, 2 passes,
    3 trainers, restart limit 1), ``env`` its variables."""
    package_write(live_portal.home, TRAINER)
    dataset = recordio_dataset_write(live_portal.home)

    def submit(**env) -> Job:
        return submit_job(live_portal.user, live_portal.datacenter, "reader", trainers=3,
                          passes=2, restart_limit=1, dataset=dataset, task_records=20, env=env)

    return submit


@contextmanager
def one_trainer_job(live_portal, program: str, timeout: float = 60) -> Iterator[tuple[Job, str]]:
    """A job with a dataset (so a master, and in a sandbox a relay) whose one trainer runs
    ``program``, run to its end: the job and its trainer's log, stopped and removed after."""
    home = live_portal.home
    package_write(home, program)
    (home / "data").mkdir()
    (home / "data" / "part-0.txt").write_text("a\nb\n")
    job = submit_job(live_portal.user, live_portal.datacenter, "reader",
                     dataset=f"{HOME}/data/part-*.txt")
    try:
        engine.job_launch(job.pk)
        deadline = time.monotonic() + timeout
        while engine.job_sync(job.pk):
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(0.1)
        job.refresh_from_db()
        yield job, (output_dir(job) / "node_0" / "train.log").read_text()
    finally:
        backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)
        backend_for(job.datacenter).cleanup(job)


def taken(job, trainer: int) -> list[str]:
    log = output_dir(job) / f"node_{trainer}" / "train.log"
    return [line for line in (log.read_text().splitlines() if log.exists() else [])
            if line.startswith("taken ")]


def committed(job) -> dict[int, Counter]:
    """Records of the tasks the trainers finished, by pass: each record with its count. A
    trainer stopped after writing a task's line but before the master heard it was done has
    the task read again by another (delivery is at least once): its line is then written
    twice, with the same records, and counts once — what the docs ask of a trainer that
    commits per task (keyed by pass and index)."""
    lines: dict[tuple[int, int], list[str]] = {}
    for path in output_dir(job).glob("node_*/tasks.txt"):
        for line in path.read_text().splitlines():
            pass_no, index, *records = line.split()
            key = (int(pass_no), int(index))
            assert lines.setdefault(key, records) == records, key  # the same task, the same
    seen: dict[int, Counter] = {0: Counter(), 1: Counter()}
    for (pass_no, _), records in lines.items():
        seen[pass_no].update(records)
    return seen


def state(job) -> str:
    job.refresh_from_db()
    return job.state


def assert_exactly_once(job) -> None:
    assert state(job) == "succeeded", (job.state_reason, list(job.events.values_list(
        "reason", flat=True)))
    assert_every_record_once(job)


def assert_every_record_once(job) -> None:
    """Every task of both passes done, and every record committed once a pass."""
    tasks = Task.objects.filter(job=job)
    assert tasks.count() == 100 and set(tasks.values_list("state", flat=True)) == {"done"}
    expected = Counter(f"r{n}" for n in range(1000))
    for pass_no, seen in committed(job).items():
        assert seen == expected, (pass_no, len(seen), sum(seen.values()))


def trainer_killed_mid_task(job, kill: Callable[[], None], *,
                            describe: Callable[[], str] = str) -> None:
    """Once trainer 1 (the slow one) has taken a task, ``kill()`` it; the job succeeds with
    every record once a pass, and trainer 1's task is dispatched again at once (its replica
    ended, or its restart asked for another task), not after the 30 s lease. ``describe()``
    says more when the job does not get there."""
    wait(lambda: taken(job, 1), 60, lambda: f"trainer 1 to take a task: {describe()}")
    killed_at = time.time()
    kill()
    wait(lambda: state(job) in FINAL, 180, lambda: f"the job to end: {describe()}")
    assert_exactly_once(job)
    again = JobEvent.objects.filter(job=job, to_state="waiting", from_state="leased",
                                    reason__contains="trainer-1").first()
    assert again is not None, "trainer 1's task was not dispatched again"
    assert again.time.timestamp() - killed_at < 30


def worker_restarted_mid_pass(submit: Callable[..., Job], *, timeout: float = 180) -> Job:
    """The job runs on a worker of its own, which is stopped once 10 tasks of the first
    pass are done and started again a second later; every record is still read once a pass."""
    from paddlecloud.worker import EmbeddedWorker

    worker = EmbeddedWorker(concurrency=2, beat=False)
    worker.start()
    try:
        job = submit(SLOW_TRAINER="0", SLOW="0.02")
        wait(lambda: Task.objects.filter(job=job, state="done").count() >= 10, 120,
                 "the first pass to be under way")
        worker.stop()
        time.sleep(1)
        worker = EmbeddedWorker(concurrency=2, beat=False)
        worker.start()
        wait(lambda: state(job) in FINAL, timeout, "the job to end")
    finally:
        worker.stop()
    assert_exactly_once(job)
    return job
