"""The sweeps API: a sweep refused names the field and the rule and leaves nothing (no sweep,
no job); one accepted submits its first trials as ordinary jobs, is one row with its progress,
and goes on exactly once however many workers advance it at the same time."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from accounts.services import quota_set
from experiments.models import Sweep, Trial
from experiments.services import sweep_advance
from jobs.models import Job, Replica
from jobs.services import job_kill
from tests.jobs.files import metrics_path

URL = "/api/v1/sweeps/"


def sweep(package: str, **changes) -> dict:
    data = {"name": "lr", "parallel": 2, "max_trials": 4, "method": "random", "seed": 3,
            "job": {"entry": "python train.py", "package": package, "cpu": "1"},
            "space": {"env.LEARNING_RATE": {"min": 0.001, "max": 0.1, "log": True},
                      "arg.layers": [1, 2]},
            "objective": {"metric": "loss"}, "stopping": {"rule": "median"}}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


REFUSED = [
    ({"method": "bayes"}, "method", "unknown method 'bayes'; use grid, random, asha"),
    ({"max_trials": 0}, "max_trials", "a whole number from 1 to 1000"),
    ({"max_trials": -2}, "max_trials", "a whole number from 1 to 1000"),
    ({"max_trials": None}, "max_trials", "required: a whole number from 1 to 1000"),
    ({"space": {"LEARNING_RATE": [1]}}, "space.LEARNING_RATE", "not a key of the space"),
    ({"space": {"env.LR": []}}, "space.env.LR", "a list of 1 to 1000 values"),
    ({"space": {"env.LR": {"min": 1, "max": 0}}}, "space.env.LR", "with numbers A < B"),
    ({"space": "lr"}, "space", "required: an object"),
    ({"parallel": 0}, "parallel", "a whole number from 1 to 1000"),
    ({"objective": {"metric": "loss", "mode": "lowest"}}, "objective.mode", "'lowest'"),
    ({"stopping": {"rule": "median", "grace_steps": -1}}, "stopping.grace_steps", ">= 0"),
    ({"name": "LR"}, "name", "lower-case"),
    ({"job": {"entry": "python train.py", "trainers": 0}}, "job.trainers", ""),
    ({"job": {"entry": "python train.py", "package": "/pfs/datacenter1/home/alice/nothing"}},
     "job.package", ""),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("changes", "field", "says"), REFUSED,
                         ids=[f"{field}-{i}" for i, (_, field, _) in enumerate(REFUSED)])
def test_a_refused_sweep_names_the_field_and_leaves_nothing(
        token_client, package, held_tasks, changes, field, says):
    answer = token_client.post(URL, sweep(package, **changes), format="json")
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert field in body["fields"], body
    assert says in body["fields"][field][0], body
    assert body["message"].startswith(f"{field}: ") or f"; {field}: " in body["message"], body
    assert not Sweep.objects.exists() and not Job.objects.exists()


@pytest.mark.django_db
def test_a_sweep_submits_its_first_trials_and_is_one_row(token_client, package, held_tasks,
                                                         alice):
    answer = token_client.post(URL, sweep(package), format="json")
    assert answer.status_code == 201, answer.content
    shown = answer.json()
    assert (shown["name"], shown["state"], shown["trials_total"]) == ("lr", "running", 4)
    assert shown["progress"] == {"done": 0, "running": 2, "waiting": 0, "stopped": 0,
                                 "killed": 0, "removed": 0, "to_submit": 2}
    assert [t["job"] for t in shown["trials"]] == ["lr-1", "lr-2"]
    assert shown["predicted_end"] == {
        "at": None, "unknown": "no trial has finished yet: how long one takes is not known"}
    # each trial an ordinary job of its owner with its settings: env and entry arguments
    for trial in Trial.objects.select_related("job"):
        job = trial.job
        assert job.owner == alice and job.cpu == 1000
        assert job.env == {"LEARNING_RATE": str(trial.settings["env.LEARNING_RATE"])}
        assert job.entry == f"python train.py --layers={trial.settings['arg.layers']}"
    listed = token_client.get(URL).json()
    assert [(s["name"], s["progress"]["running"]) for s in listed] == [("lr", 2)]
    again = token_client.post(URL, sweep(package), format="json")
    assert again.status_code == 400 and "already have a sweep named 'lr'" in \
        again.json()["fields"]["name"][0]
    assert token_client.get(f"{URL}nothing/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_two_workers_advancing_a_sweep_at_once_submit_each_trial_once(
        token_client, package, held_tasks, alice, datacenter):
    assert token_client.post(URL, sweep(package), format="json").status_code == 201
    for name in ("lr-1", "lr-2"):
        job_kill(alice, datacenter, name)
    pk = Sweep.objects.get().pk
    start, errors = threading.Barrier(2), []

    def advance():
        try:
            start.wait()
            sweep_advance(pk)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=advance) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Sweep.objects.get().problem == ""  # neither found the other's trial in its way
    assert list(Trial.objects.values_list("number", flat=True)) == [1, 2, 3, 4]
    assert sorted(Job.objects.values_list("name", flat=True)) == ["lr-1", "lr-2", "lr-3", "lr-4"]
    sweep_advance(pk)  # once more: nothing left to submit
    assert Trial.objects.count() == 4


@pytest.mark.django_db
def test_the_list_takes_as_many_queries_for_many_sweeps_as_for_one(
        token_client, package, held_tasks, alice, datacenter, assert_queries_flat):
    quota_set(None, datacenter, alice, jobs=2)  # trials wait: their starts are predicted
    # A job of alice's holds one of her places throughout, so that jobs are active in both
    # lists (their progress is read with one query, whatever their number).
    held = token_client.post("/api/v1/jobs/", {"name": "held", "entry": "python train.py",
                                               "package": package, "cpu": "1"}, format="json")
    assert held.status_code == 201, held.content

    def add(name: str) -> None:
        answer = token_client.post(URL, sweep(package, name=name), format="json")
        assert answer.status_code == 201, answer.content
        now = timezone.now()  # its first trial took 10 minutes: the sweep's end is predicted
        Job.objects.filter(name=f"{name}-1").update(
            state="succeeded", started_at=now - timedelta(minutes=10), finished_at=now)

    add("a")
    _, large = assert_queries_flat(lambda: token_client.get(URL),
                                   lambda: (add("b"), add("c")))
    assert [s["name"] for s in large.json()] == ["c", "b", "a"]
    for shown in large.json():
        progress = shown["progress"]
        assert (progress["done"], progress["waiting"] + progress["running"]) == (1, 1), shown
        assert shown["predicted_end"]["at"] or shown["predicted_end"]["unknown"], shown


def reports(job, losses: list[float]) -> None:
    """What the SDK's report() writes for trainer 0, with its checkpoint metric between."""
    path = metrics_path(job, job.replicas.get(role=Replica.Role.TRAINER, index=0))
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": step, "time": 1.0, "loss": loss})
             for step, loss in enumerate(losses, 1)]
    lines.insert(1, json.dumps({"step": 1, "time": 1.0, "checkpoint": 1}))
    path.write_text("\n".join(lines) + "\n")
    Job.objects.filter(pk=job.pk).update(state="running", started_at=timezone.now())


@pytest.mark.django_db
def test_a_trial_worse_than_the_median_is_stopped_and_its_slot_refilled_at_once(
        token_client, package, held_tasks, alice, datacenter, pfs_home):
    """The rule applied by the portal, step by step: trials' reports (files as the SDK writes
    them) read by the objective's name, the worse trial killed with the rule's words, counted
    as stopped, and the next trial submitted in the same pass."""
    quota_set(None, datacenter, alice, jobs=10)
    answer = token_client.post(URL, sweep(
        package, parallel=3, max_trials=5, method="grid", seed=None,
        space={"env.LEARNING_RATE": [0.1, 0.05, 0.00001, 0.02, 0.03]},
        stopping={"rule": "median", "grace_steps": 2, "min_trials": 2}), format="json")
    assert answer.status_code == 201, answer.content
    jobs = {j.name: j for j in Job.objects.all()}
    reports(jobs["lr-1"], [9, 4, 2, 1])
    reports(jobs["lr-2"], [9, 5, 3, 2])
    reports(jobs["lr-3"], [9, 9, 9])  # running means at step 3 of the others: 5, 5.667
    sweep_advance(Sweep.objects.get().pk)

    stopped = Job.objects.get(name="lr-3")
    why = ("stopped early: loss 9 (its best) at step 3 above the median 5.333 of 2 other trials "
           "at that step")
    assert (stopped.state, stopped.state_reason) == ("killed", why)
    assert stopped.events.filter(to_state="killed", reason=why).exists()
    shown = token_client.get(f"{URL}lr/").json()
    assert [t["job"] for t in shown["trials"]] == ["lr-1", "lr-2", "lr-3", "lr-4"]  # at once
    assert shown["trials"][2]["stopped_early"] == why
    assert (shown["progress"]["stopped"], shown["progress"]["killed"]) == (1, 0)
    assert shown["best"] == {"trial": 1, "job": "lr-1", "value": 1,
                             "settings": {"env.LEARNING_RATE": 0.1}}

    # a trial its owner kills is killed, not stopped early, and is not judged again
    job_kill(alice, datacenter, "lr-2")
    sweep_advance(Sweep.objects.get().pk)
    shown = token_client.get(f"{URL}lr/").json()
    assert (shown["progress"]["stopped"], shown["progress"]["killed"]) == (1, 1)
    assert shown["trials"][1]["stopped_early"] is None
    assert [t["job"] for t in shown["trials"]][-1] == "lr-5"


JOBS = "/api/v1/jobs/"


def listed(client, query: str = "") -> list[tuple[str, str]]:
    answer = client.get(f"{JOBS}{query}")
    assert answer.status_code == 200, answer.content
    return [(row["kind"], row["name"]) for row in answer.json()["results"]]


@pytest.mark.django_db
def test_the_job_list_shows_a_sweep_as_one_row_with_its_trials_a_click_away(
        token_client, package, held_tasks, alice, datacenter, assert_queries_flat):
    quota_set(None, datacenter, alice, jobs=10)

    def job(name: str) -> None:
        answer = token_client.post(JOBS, {"name": name, "entry": "python train.py",
                                          "package": package, "cpu": "1"}, format="json")
        assert answer.status_code == 201, answer.content

    job("before")
    assert token_client.post(URL, sweep(package), format="json").status_code == 201
    job("after")
    job_kill(alice, datacenter, "lr-1")
    sweep_advance(Sweep.objects.get().pk)  # lr-3 takes its slot: newer than "after"
    assert Job.objects.filter(name="lr-3").exists()

    # one row for the sweep, where its first trial is; a sweep's newer trial moves nothing
    assert listed(token_client) == [("job", "after"), ("sweep", "lr"), ("job", "before")]
    row = token_client.get(JOBS).json()["results"][1]
    assert (row["state"], row["method"], row["trials_total"]) == ("running", "random", 4)
    assert row["progress"] == {"done": 0, "running": 2, "waiting": 0, "stopped": 0,
                               "killed": 1, "removed": 0, "to_submit": 1}
    assert row["progress_shown"] == "0 done, 2 running, 0 waiting, 0 stopped, 1 killed, " \
                                    "1 to submit"
    assert [t["job"] for t in row["trials"]] == ["lr-1", "lr-2", "lr-3"]
    assert row["predicted_end"]["unknown"].startswith("no trial has finished yet")
    assert (row["url"], row["trials_url"]) == ("/api/v1/sweeps/lr/", "/api/v1/jobs/?sweep=lr")
    assert "spec" not in row and "best" in row

    # pages count the sweep once
    names, query = [], "?limit=1"
    while query:
        page = token_client.get(f"{JOBS}{query}").json()
        names += [row["name"] for row in page["results"]]
        query = page["next"] and "?" + page["next"].split("?", 1)[1]
    assert names == ["after", "lr", "before"]

    # filters: a sweep is listed when one of its trials matches them
    assert listed(token_client, "?state=killed") == [("sweep", "lr")]
    assert listed(token_client, "?name=lr-") == [("sweep", "lr")]
    assert listed(token_client, "?name=aft") == [("job", "after")]
    assert listed(token_client, "?state=succeeded") == []

    # its trials, as jobs' rows; every job, unfolded
    assert listed(token_client, "?sweep=lr") == [("job", "lr-3"), ("job", "lr-2"),
                                                 ("job", "lr-1")]
    assert listed(token_client, "?sweep=lr&state=killed") == [("job", "lr-1")]
    assert [name for _, name in listed(token_client, "?unfolded=true")] == [
        "lr-3", "after", "lr-2", "lr-1", "before"]
    missing = token_client.get(f"{JOBS}?sweep=nothing")
    assert missing.status_code == 404 and "no sweep named 'nothing'" in missing.json()["message"]
    assert token_client.get(f"{JOBS}?unfolded=maybe").status_code == 400

    # the rows of more sweeps take no more queries (trials wait in both lists: alice's quota
    # is full; the forecast, kept while no job moves, is made before each count)
    quota_set(None, datacenter, alice, jobs=4)

    def more(*names) -> None:
        for name in names:
            answer = token_client.post(URL, sweep(package, name=name), format="json")
            assert answer.status_code == 201, answer.content
        token_client.get(JOBS)

    more("b")
    _, large = assert_queries_flat(lambda: token_client.get(JOBS), lambda: more("c", "d"))
    assert [(r["kind"], r["name"]) for r in large.json()["results"]] == [
        ("sweep", "d"), ("sweep", "c"), ("sweep", "b"), ("job", "after"), ("sweep", "lr"),
        ("job", "before")]
    assert large.json()["results"][0]["progress"]["waiting"] == 2
