"""A job's master, the portal's side (docs/master.md): the dataset checked at submission and cut
into tasks, leases, done and failed, passes, trainers that die or restart, many trainers at
once on PostgreSQL, and the calls over HTTP with the job's token."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from functools import partial

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.master import dispatch
from jobs.master.dataset import dataset_spans
from jobs.models import Job, JobEvent, Replica, Task
from kernel.errors import ValidationError
from paddlecloud_sdk import recordio
from tests.factories import HOME, submit_job
from tests.processes import run_python

DATA = f"{HOME}/data"


@pytest.fixture
def dataset(pfs_home):
    """1000 records in 4 RecordIO files of 2 chunks each (250 records a file), and a text
    file of 7 lines."""
    data = pfs_home / "data"
    data.mkdir()
    number = 0
    for part in range(4):
        # 125 records of 11 bytes a chunk
        with recordio.Writer(data / f"part-{part}.recordio", max_chunk_size=125 * 11) as w:
            for _ in range(250):
                w.write(f"record-{number:04d}".encode())
                number += 1
    (data / "notes.txt").write_text("".join(f"line {i}\n" for i in range(7)))
    return data


submit = partial(submit_job, name="reader")


def trainers(job, count: int) -> None:
    """The job's trainer replicas, running (the engine's rows, without processes)."""
    Replica.objects.filter(job=job).delete()
    for index in range(count):
        Replica.objects.create(job=job, role="trainer", index=index, state="running")


def read_all(job, trainer: int = 0) -> list[dict]:
    """Every task the trainer gets, reported done at once, until the master says done."""
    got = []
    while True:
        answer = dispatch.task_next(job, trainer)
        if answer.get("done"):
            return got
        assert "task" in answer, answer
        got.append(answer["task"])
        dispatch.task_done(job, answer["task"]["id"], trainer, answer["task"]["lease"])


# --- the dataset at submission -----------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"dataset": f"{DATA}/none-*.recordio"}, "dataset", "matches no file"),
    ({"dataset": "/pfs/datacenter1/home/bob/data/*.recordio"}, "dataset", ""),
    ({"dataset": "/pfs/datacenter1/home/alice/*/part-0.recordio"}, "dataset",
     "only the last part of the path"),
    ({"dataset": "data/*.recordio"}, "dataset", "a glob of files in PFS"),
    ({"dataset": f"{DATA}/*.recordio", "task_records": 0}, "task_records", "between 1"),
    ({"dataset": f"{DATA}/*.recordio", "dataset_unit": "records"}, "task_records", "required"),
    ({"dataset": f"{DATA}/*.recordio", "dataset_unit": "pages"}, "dataset_unit", "one of"),
    ({"task_records": 20}, "dataset", "required with"),
])
def test_a_dataset_that_cannot_be_read_is_refused_naming_the_field(
        alice, datacenter, package, dataset, fields, field, message):
    with pytest.raises(ValidationError) as refused:
        submit(alice, datacenter, **fields)
    assert message in refused.value.fields[field][0]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_dataset_is_kept_with_its_unit(alice, datacenter, package, dataset):
    job = submit(alice, datacenter, dataset=f"{DATA}/part-*.recordio", task_records=20)
    assert (job.dataset, job.dataset_unit, job.task_records) == (
        f"{DATA}/part-*.recordio", "records", 20)
    assert submit(alice, datacenter, name="files",
                  dataset=f"{DATA}/part-[01].recordio").dataset_unit == "file"


# --- cutting it --------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize(("glob", "unit", "size", "tasks", "first"), [
    ("part-*.recordio", "file", None, 4, {"path": f"{DATA}/part-0.recordio", "kind": "file"}),
    ("part-*.recordio", "chunk", None, 8, {"path": f"{DATA}/part-0.recordio", "kind": "chunk",
                                           "offset": 0}),
    ("part-*.recordio", "records", 20, 52, {"path": f"{DATA}/part-0.recordio",
                                            "kind": "records", "start": 0, "count": 20}),
    ("notes.txt", "records", 3, 3, {"path": f"{DATA}/notes.txt", "kind": "records",
                                     "start": 0, "count": 3}),
], ids=["file", "chunk", "records", "lines"])
def test_the_dataset_is_cut_as_asked(alice, datacenter, package, dataset, glob, unit, size,
                                     tasks, first):
    job = submit(alice, datacenter, dataset=f"{DATA}/{glob}", dataset_unit=unit,
                 task_records=size)
    spans = dataset_spans(job)
    assert len(spans) == tasks and spans[0] == [first]
    if unit == "records":  # every record once, a file's last task the rest of it
        counts = [s[0]["count"] for s in spans]
        assert sum(counts) == (1000 if glob.endswith("recordio") else 7)
    if unit == "chunk":  # each chunk where its header is
        chunks = recordio.load_index(dataset / "part-1.recordio")
        assert [s[0]["offset"] for s in spans if s[0]["path"].endswith("part-1.recordio")] \
            == [c.offset for c in chunks]


# --- leases, passes, failures ------------------------------------------------------------------

@pytest.mark.django_db
def test_each_task_is_done_once_a_pass_then_the_trainers_are_told_it_is_over(
        alice, datacenter, package, dataset):
    job = submit(alice, datacenter, dataset=f"{DATA}/part-*.recordio", dataset_unit="chunk",
                 passes=2)
    trainers(job, 2)
    got = read_all(job, 0)
    assert [(t["pass"], t["index"]) for t in got] == [(p, i) for p in range(2) for i in range(8)]
    assert dispatch.task_next(job, 1) == {"done": True}
    progress = dispatch.tasks_progress(job)
    assert [(p["pass"], p["done"], p["total"]) for p in progress["passes"]] == [(0, 8, 8),
                                                                                (1, 8, 8)]
    assert progress["current_pass"] is None


@pytest.mark.django_db
def test_the_next_pass_waits_for_every_task_of_this_one(alice, datacenter, package, dataset):
    job = submit(alice, datacenter, dataset=f"{DATA}/part-[01].recordio", passes=2)
    trainers(job, 2)
    first = dispatch.task_next(job, 0)["task"]
    second = dispatch.task_next(job, 1)["task"]
    assert dispatch.task_next(job, 0) != {"done": True}  # gives first back: trainer 0 restarted
    third = dispatch.task_next(job, 0)
    assert third["task"]["index"] == first["index"] and third["task"]["pass"] == 0
    dispatch.task_done(job, third["task"]["id"], 0, third["task"]["lease"])
    assert dispatch.task_next(job, 0) == {"wait": dispatch.WAIT_SECONDS}  # trainer 1 holds one
    dispatch.task_done(job, second["id"], 1, second["lease"])
    assert dispatch.task_next(job, 0)["task"]["pass"] == 1


@pytest.mark.django_db
def test_a_stale_lease_changes_nothing(alice, datacenter, package, dataset, settings):
    job = submit(alice, datacenter, dataset=f"{DATA}/part-0.recordio")
    trainers(job, 2)
    task = dispatch.task_next(job, 0)["task"]
    Task.objects.filter(pk=task["id"]).update(
        lease_expires=timezone.now() - timedelta(seconds=1))  # trainer 0 stalled
    again = dispatch.task_next(job, 1)["task"]
    assert again["id"] == task["id"] and again["lease"] != task["lease"]
    for call in (dispatch.task_renew, dispatch.task_done):
        with pytest.raises(dispatch.LeaseLost):
            call(job, task["id"], 0, task["lease"])
    with pytest.raises(dispatch.LeaseLost):
        dispatch.task_failed(job, task["id"], 0, task["lease"], "late")
    assert Task.objects.get(pk=task["id"]).state == "leased"  # still trainer 1's
    assert dispatch.task_done(job, again["id"], 1, again["lease"]) == {"done": True}
    events = list(JobEvent.objects.filter(job=job, to_state="waiting")
                  .values_list("reason", flat=True))
    assert events == ["task 0 of pass 1 dispatched again: trainer-0 let its lease expire"]


@pytest.mark.django_db
def test_a_trainer_that_ended_gives_its_task_back_at_once(alice, datacenter, package,
                                                          dataset):
    job = submit(alice, datacenter, dataset=f"{DATA}/part-0.recordio")
    trainers(job, 2)
    task = dispatch.task_next(job, 0)["task"]
    assert dispatch.task_next(job, 1) == {"wait": dispatch.WAIT_SECONDS}
    Replica.objects.filter(job=job, index=0).update(state="failed")
    assert dispatch.task_next(job, 1)["task"]["id"] == task["id"]


@pytest.mark.django_db
def test_a_task_failing_everywhere_is_set_aside(alice, datacenter, package, dataset):
    job = submit(alice, datacenter, dataset=f"{DATA}/part-0.recordio")
    trainers(job, 3)
    answers = []
    for trainer in range(dispatch.TASK_FAILURES):
        task = dispatch.task_next(job, trainer)["task"]
        answers.append(dispatch.task_failed(job, task["id"], trainer, task["lease"],
                                          "ValueError: bad record"))
    assert answers == [{"retried": True}] * (dispatch.TASK_FAILURES - 1) + [{"set_aside": True}]
    assert dispatch.task_next(job, 0) == {"done": True}  # the pass is over without it
    reason = JobEvent.objects.filter(job=job, to_state="set_aside").get().reason
    assert reason == ("task 0 of pass 1 set aside: it failed 3 times, last on trainer-2: "
                      "ValueError: bad record")


@pytest.mark.django_db(transaction=True)
def test_many_trainers_at_once_never_share_a_task(alice, datacenter, package, dataset):
    """16 trainers on PostgreSQL take the 52 tasks of 2 passes concurrently (SKIP LOCKED):
    each task is handed out and done exactly once a pass."""
    job = submit(alice, datacenter, dataset=f"{DATA}/part-*.recordio", task_records=20,
                 passes=2)
    trainers(job, 16)
    done: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def trainer(index: int) -> None:
        try:
            while True:
                answer = dispatch.task_next(job, index)
                if answer.get("done"):
                    return
                if "wait" in answer:
                    continue
                task = answer["task"]
                dispatch.task_done(job, task["id"], index, task["lease"])
                with lock:
                    done.append((task["pass"], task["index"]))
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=trainer, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert sorted(done) == [(p, i) for p in range(2) for i in range(52)]
    assert not Task.objects.filter(job=job, attempts__gt=1).exists()


@pytest.mark.django_db(transaction=True)
def test_trainers_asking_together_as_a_pass_ends_both_go_on_to_the_next(
        alice, datacenter, package, dataset):
    """Two trainers finish a pass together and ask at the same moment: one makes the next
    pass, the other takes a task of it (it is not told the job is over a pass early)."""
    passes = 5
    job = submit(alice, datacenter, dataset=f"{DATA}/part-[01].recordio", passes=passes)
    trainers(job, 2)
    together = threading.Barrier(2)
    answers: dict[int, list[dict]] = {0: [], 1: []}

    def trainer(index: int) -> None:
        try:
            for _ in range(passes + 1):
                together.wait(30)
                answer = dispatch.task_next(job, index)
                answers[index].append(answer)
                if "task" in answer:
                    dispatch.task_done(job, answer["task"]["id"], index, answer["task"]["lease"])
                together.wait(30)  # both have reported their task done: the pass is over
        finally:
            connection.close()

    threads = [threading.Thread(target=trainer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for index in (0, 1):
        assert [sorted(a) for a in answers[index]] == [["task"]] * passes + [["done"]], answers
    for pass_no in range(passes):
        assert sorted(answers[i][pass_no]["task"]["index"] for i in (0, 1)) == [0, 1]
        assert {answers[i][pass_no]["task"]["pass"] for i in (0, 1)} == {pass_no}


# --- over HTTP ---------------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_calls_need_the_jobs_own_token(alice, datacenter, package, dataset):
    job = submit(alice, datacenter, dataset=f"{DATA}/part-0.recordio")
    other = submit(alice, datacenter, name="other", dataset=f"{DATA}/part-1.recordio")
    trainers(job, 1)
    client = APIClient()
    url = f"/api/v1/master/{job.uid}/next"
    for token in ("", "pcm_nope", dispatch.master_token(other)):
        response = client.post(url, {"trainer": 0}, format="json",
                               HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 404, response.content
        assert response.json()["code"] == "not_found"
    assert dispatch.master_token(job) != dispatch.master_token(other)
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {dispatch.master_token(job)}"}
    bad = client.post(url, {"trainer": "zero"}, format="json", **bearer)
    assert bad.status_code == 400 and "trainer" in bad.json()["fields"]
    task = client.post(url, {"trainer": 0}, format="json", **bearer).json()["task"]
    assert task["spans"] == [{"path": f"{DATA}/part-0.recordio", "kind": "file"}]
    base = f"/api/v1/master/{job.uid}/tasks/{task['id']}"
    renewed = client.post(f"{base}/renew", {"trainer": 0, "lease": task["lease"]},
                          format="json", **bearer)
    assert renewed.json() == {"lease_seconds": 30}
    unknown = client.post(f"{base}/finish", {"trainer": 0, "lease": task["lease"]},
                          format="json", **bearer)
    assert unknown.status_code == 404 and "renew, done, failed or release" in unknown.json()[
        "message"]
    lost = client.post(f"{base}/done", {"trainer": 0, "lease": "someone-elses"},
                       format="json", **bearer)
    assert lost.status_code == 409 and lost.json()["code"] == "lease_lost"
    ok = client.post(f"{base}/done", {"trainer": 0, "lease": task["lease"]}, format="json",
                     **bearer)
    assert ok.json() == {"done": True}
    assert client.post(url, {"trainer": 0}, format="json", **bearer).json() == {"done": True}


@pytest.mark.django_db
def test_the_owner_sees_each_pass_and_who_holds_what(alice, datacenter, package, dataset,
                                                     token_client):
    job = submit(alice, datacenter, dataset=f"{DATA}/part-*.recordio", passes=2)
    trainers(job, 2)
    task = dispatch.task_next(job, 1)["task"]
    answer = token_client.get("/api/v1/jobs/reader/tasks").json()
    assert answer["passes"] == [{"pass": 0, "waiting": 3, "leased": 1, "done": 0,
                                 "set_aside": 0, "total": 4}]
    assert answer["current_pass"] == 0 and answer["total_passes"] == 2
    held = [t for t in answer["tasks"] if t["state"] == "leased"]
    assert [(t["index"], t["trainer"]) for t in held] == [(task["index"], 1)]


# --- on SQLite ----------------------------------------------------------------------------------

ON_SQLITE = """
import json, threading, django
django.setup()
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from accounts.services import datacenter_upsert, user_upsert
from jobs.master import dispatch
from jobs.models import Replica, Task
from jobs.services import job_submit

call_command("migrate", verbosity=0)
datacenter = datacenter_upsert("datacenter1")[0]
alice = user_upsert("alice", password="a-long-password-1", datacenter_names=["datacenter1"])[0]
home = settings.PADDLECLOUD_PFS_ROOT / "datacenter1" / "home" / "alice"
(home / "pkg").mkdir(parents=True)
(home / "pkg" / "train.py").write_text("")
(home / "lines.txt").write_text("".join(f"line {i}\\n" for i in range(60)))
job = job_submit(alice, datacenter, {
    "name": "lite", "package": "/pfs/datacenter1/home/alice/pkg", "entry": "python train.py",
    "dataset": "/pfs/datacenter1/home/alice/lines.txt", "task_records": 5, "passes": 2,
    "trainers": 4}).job
Replica.objects.filter(job=job).update(state="running")
held = dispatch.task_next(job, 0)["task"]
again = dispatch.task_next(job, 0)["task"]  # trainer 0 restarted: its task goes back
done, lock = [], threading.Lock()
dispatch.task_done(job, again["id"], 0, again["lease"])
done.append((again["pass"], again["index"]))

def trainer(index):
    try:
        while "done" not in (answer := dispatch.task_next(job, index)):
            if "task" in answer:
                task = answer["task"]
                dispatch.task_done(job, task["id"], index, task["lease"])
                with lock:
                    done.append((task["pass"], task["index"]))
    finally:
        connection.close()

threads = [threading.Thread(target=trainer, args=(i,)) for i in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(60)
print(json.dumps({"vendor": connection.vendor, "first": [held["index"], again["index"]],
                  "done": sorted(done), "attempts": sorted(Task.objects.values_list(
                      "attempts", flat=True))}))
"""


def test_on_sqlite_each_task_is_done_once_a_pass(tmp_path):
    """The embedded default's SQLite (one writer at a time, no SKIP LOCKED) keeps the same
    promise: 4 trainers at once, 2 passes of 12 tasks, each task done once a pass; a trainer
    that asks again while holding a task gets the next, and its first goes to another."""
    result = run_python(["-c", ON_SQLITE], tmp_path / "var")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["vendor"] == "sqlite"
    assert found["first"] == [0, 1]
    assert found["done"] == [[p, i] for p in range(2) for i in range(12)]
    assert found["attempts"] == [1] * 23 + [2]


# --- calls answered together (jobs/master/app.py: one transaction, one commit) -----------------

def call_args(job, action: str, body: dict, task_id: int | None = None,
              token: str | None = None) -> tuple:
    """``master_call``'s arguments, as the ASGI app passes them."""
    return (str(job.uid), dispatch.master_token(job) if token is None else token, action,
            task_id, body)


@pytest.mark.django_db
def test_calls_answered_together_are_each_answered_as_if_alone(alice, datacenter, package,
                                                              dataset):
    job = submit(alice, datacenter, dataset=f"{DATA}/part-*.recordio", dataset_unit="chunk")
    trainers(job, 4)
    dispatch.task_next(job, 3)  # the pass is made, the sweep done: the takes go together
    answers = dispatch.master_calls([
        call_args(job, "next", {"trainer": 0}), call_args(job, "next", {"trainer": 1}),
        call_args(job, "next", {"trainer": 0}, token="pcm_wrong"),
        call_args(job, "next", {"trainer": "x"}), call_args(job, "next", {"trainer": 2})])
    tasks = [answer["task"] for answer, error in answers if error is None]
    assert len(tasks) == 3 and len({t["id"] for t in tasks}) == 3, answers
    assert [type(error).__name__ for _, error in answers] == [
        "NoneType", "NoneType", "NotFoundError", "ValidationError", "NoneType"]
    first, second, third = tasks
    answers = dispatch.master_calls([
        call_args(job, "done", {"trainer": 0, "lease": first["lease"]}, first["id"]),
        call_args(job, "done", {"trainer": 1, "lease": "stale"}, second["id"]),
        call_args(job, "done", {"trainer": 2, "lease": third["lease"]}, third["id"]),
        call_args(job, "done", {"trainer": 0, "lease": first["lease"]}, first["id"]),  # again
        call_args(job, "renew", {"trainer": 1, "lease": second["lease"]}, second["id"])])
    assert [answer for answer, _ in answers] == [
        {"done": True}, None, {"done": True}, {"done": True},
        {"lease_seconds": dispatch._lease_seconds()}]
    assert isinstance(answers[1][1], dispatch.LeaseLost)
    states = dict(Task.objects.filter(pk__in=[t["id"] for t in tasks])
                  .values_list("pk", "state"))
    assert states == {first["id"]: "done", second["id"]: "leased", third["id"]: "done"}


@pytest.mark.django_db
def test_nexts_answered_together_as_a_pass_runs_out_wait_then_go_on(alice, datacenter,
                                                                    package, dataset):
    """Four trainers ask together for the 2 tasks of a pass: two get them, two are told to
    wait; their dones and nexts together then start the second pass, and after it the
    trainers are told it is over."""
    job = submit(alice, datacenter, dataset=f"{DATA}/part-0.recordio", dataset_unit="chunk",
                 passes=2)
    trainers(job, 4)
    answers = [answer for answer, error in dispatch.master_calls(
        [call_args(job, "next", {"trainer": i}) for i in range(4)]) if error is None]
    assert [sorted(answer) for answer in answers] == [["task"], ["task"], ["wait"], ["wait"]]
    held = [answer["task"] for answer in answers[:2]]
    answers = dispatch.master_calls(
        [call_args(job, "done", {"trainer": i, "lease": task["lease"]}, task["id"])
         for i, task in enumerate(held)]
        + [call_args(job, "next", {"trainer": i}) for i in range(4)])
    assert [answer for answer, _ in answers[:2]] == [{"done": True}, {"done": True}]
    got = [(i, answer["task"]) for i, (answer, _) in enumerate(answers[2:]) if "task" in answer]
    assert sorted((task["pass"], task["index"]) for _, task in got) == [(1, 0), (1, 1)]
    for i, task in got:
        dispatch.task_done(job, task["id"], i, task["lease"])
    assert [answer for answer, _ in dispatch.master_calls(
        [call_args(job, "next", {"trainer": i}) for i in range(2)])] == [{"done": True}] * 2
    assert not Task.objects.filter(job=job).exclude(state="done").exists()
