"""Sweeps through the portal on the local backend: fit_a_line over learning rates, its trials
run by the Celery worker as ordinary jobs, the clearly worse ones stopped early by the median
rule from what they report(); and a kill that stops every trial."""

from __future__ import annotations

import shutil

import pytest
from rest_framework.test import APIClient

from accounts.services import quota_set, token_create
from experiments.models import Sweep
from jobs.models import Job, Replica
from jobs.states import FINAL_REPLICA_STATES
from paddlecloud_core import experiments as rules
from tests.factories import HOME
from tests.jobs.test_examples_on_portal import EXAMPLES
from tests.polling import wait

# The first three learn (they run together: none is stopped, the rule waits for 3 others);
# from the fourth on, the learning rates that barely move the loss are stopped early.
GOOD = [0.1, 0.05, 0.03]
BAD = [1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4]
LATER = [0.02, 0.04]


def trials_shown() -> list:
    return list(Job.objects.filter(trial__isnull=False).values_list("name", "state",
                                                                    "state_reason"))


@pytest.fixture
def owner_api(alice, datacenter, pfs_home) -> APIClient:
    quota_set(None, datacenter, alice, jobs=3)  # parallel 3: the default quota runs 2
    shutil.copytree(EXAMPLES / "fit_a_line", pfs_home / "fit_a_line",
                    ignore=shutil.ignore_patterns("__pycache__"))
    client = APIClient()
    token = token_create(alice, datacenter_name=datacenter.name).raw
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def sweep_data(rates: list[float], passes: int, **changes) -> dict:
    return {"name": "lr", "method": "grid", "parallel": 3,
            "job": {"entry": "python train.py", "package": f"{HOME}/fit_a_line",
                    "trainers": 1, "passes": passes,
                    "env": {"CHECKPOINT_EVERY": "1000000"}},
            "space": {"env.LEARNING_RATE": rates},
            "objective": {"metric": "loss", "mode": "minimize"},
            "stopping": {"rule": "median", "grace_steps": 20, "min_trials": 3}, **changes}


@pytest.mark.timeout(900)
@pytest.mark.django_db(transaction=True)
def test_a_sweep_of_twelve_trials_stops_the_clearly_worse_ones_early(
        celery_worker, owner_api, alice):
    rates = GOOD + BAD + LATER
    answer = owner_api.post("/api/v1/sweeps/", sweep_data(rates, passes=150), format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["progress"]["running"] + answer.json()["progress"]["waiting"] == 3
    assert answer.json()["progress"]["to_submit"] == 9

    def done():
        shown = owner_api.get("/api/v1/sweeps/lr/").json()
        # never more than `parallel` trials live at once
        assert shown["progress"]["running"] + shown["progress"]["waiting"] <= 3, shown
        return shown if shown["state"] == "done" else None

    shown = wait(done, timeout=800, every=0.5, message="the sweep did not end")
    trials = {t["settings"]["env.LEARNING_RATE"]: t for t in shown["trials"]}
    assert len(trials) == 12 and shown["trials_total"] == 12
    assert [t["job"] for t in shown["trials"]] == [f"lr-{n}" for n in range(1, 13)]
    for rate in GOOD:
        assert (trials[rate]["state"], trials[rate]["stopped_early"]) == ("succeeded", None)
    for rate in BAD:
        why = trials[rate]["stopped_early"]
        assert trials[rate]["counted"] == "stopped", trials[rate]
        assert why.startswith("stopped early: loss ") and "median" in why, why
        job = Job.objects.get(owner=alice, name=trials[rate]["job"])
        assert job.state == "killed" and job.state_reason == why
        assert job.events.filter(to_state="killed", reason=why).exists()
    progress = shown["progress"]
    assert progress["stopped"] >= len(BAD) and progress["done"] >= len(GOOD), progress
    assert sum(progress.values()) == 12
    best = shown["best"]
    assert best["settings"]["env.LEARNING_RATE"] in GOOD + LATER and best["value"] < 0.1, best
    # the trials are the owner's ordinary jobs, each linked to its sweep
    assert Job.objects.filter(owner=alice, trial__sweep__name="lr").count() == 12
    assert shown["predicted_end"]["unknown"] is None


@pytest.mark.timeout(300)
@pytest.mark.django_db(transaction=True)
def test_killing_a_sweep_stops_every_trial_and_submits_no_more(celery_worker, owner_api):
    answer = owner_api.post("/api/v1/sweeps/", sweep_data(
        [0.05] * 6, passes=100_000, stopping=None, objective=None), format="json")
    assert answer.status_code == 201, answer.content
    wait(lambda: Job.objects.filter(trial__sweep__name="lr", state="running").count() == 3,
         timeout=120, message=lambda: f"three trials did not start: {trials_shown()}")
    killed = owner_api.post("/api/v1/sweeps/lr/kill")
    assert killed.status_code == 200, killed.content
    shown = killed.json()
    assert shown["state"] == "killed"
    assert [t["state"] for t in shown["trials"]] == ["killed"] * 3
    assert shown["progress"]["killed"] == 3 and shown["progress"]["to_submit"] == 0
    wait(lambda: not Replica.objects.filter(job__trial__sweep__name="lr")
         .exclude(state__in=FINAL_REPLICA_STATES).exists(),
         timeout=10, message="the trials' replicas did not stop within 10 s")
    assert Sweep.objects.get(name="lr").trials.count() == 3  # nothing submitted after
    assert owner_api.post("/api/v1/sweeps/lr/kill").status_code == 409
    deleted = owner_api.delete("/api/v1/sweeps/lr/")
    assert deleted.status_code == 204, deleted.content
    assert not Job.objects.filter(name__startswith="lr-").exists()


# ASHA over two learning rates: trial N's rate is drawn from the seed (``trial_settings``), and
# seed 70 draws good, bad, bad, good. fit_a_line is deterministic (fixed seeds): the two good
# trials report the same loss at every step, so neither is ever below the other at a rung.
ASHA_GOOD, ASHA_BAD, ASHA_SEED = 0.1, 1e-6, 70
ASHA_RUNG = 16  # the first rung (steps); then 48, 144, … up to 150 passes of 32 steps


@pytest.mark.timeout(300)
@pytest.mark.django_db(transaction=True)
def test_asha_drops_the_clearly_worse_trials_at_a_rung_and_fills_their_slots(
        celery_worker, owner_api, alice):
    data = sweep_data([ASHA_GOOD, ASHA_BAD], passes=150, method="asha", seed=ASHA_SEED,
                      max_trials=4, parallel=2, stopping=None,
                      asha={"min_steps": ASHA_RUNG, "reduction_factor": 3})
    checked = rules.sweep_check(data)
    assert [rules.trial_settings(checked, n)["env.LEARNING_RATE"] for n in range(1, 5)] == [
        ASHA_GOOD, ASHA_BAD, ASHA_BAD, ASHA_GOOD]
    answer = owner_api.post("/api/v1/sweeps/", data, format="json")
    assert answer.status_code == 201, answer.content
    assert [t["job"] for t in answer.json()["trials"]] == ["lr-1", "lr-2"]

    def done():
        shown = owner_api.get("/api/v1/sweeps/lr/").json()
        assert shown["progress"]["running"] + shown["progress"]["waiting"] <= 2, shown
        return shown if shown["state"] == "done" else None

    shown = wait(done, timeout=240, every=0.5,
                 message=lambda: f"the sweep did not end: {trials_shown()}")
    assert shown["method"] == "asha"
    trials = {t["job"]: t for t in shown["trials"]}
    assert list(trials) == ["lr-1", "lr-2", "lr-3", "lr-4"]
    jobs = {job.name: job for job in Job.objects.filter(owner=alice, trial__sweep__name="lr")}
    for name in ("lr-2", "lr-3"):  # the bad ones: dropped at a rung, in the rule's words
        why = trials[name]["stopped_early"]
        assert trials[name]["counted"] == "stopped", trials[name]
        assert why.startswith("stopped early by ASHA at rung step "), why
        assert "not among the best" in why, why
        assert jobs[name].state == "killed" and jobs[name].state_reason == why
        assert jobs[name].events.filter(to_state="killed", reason=why).exists()
    for name in ("lr-1", "lr-4"):  # the good ones: promoted at every rung, to the end
        assert (trials[name]["state"], trials[name]["stopped_early"]) == ("succeeded", None)
        metrics = owner_api.get(f"/api/v1/jobs/{name}/metrics").json()
        assert metrics["records"][-1]["step"] == 150 * 32, metrics["records"][-1]
    # A dropped trial's slot went to the next trial at once: lr-3 was submitted when lr-2
    # was stopped, while lr-1 still ran (not when lr-1 ended); lr-4 once a slot was free:
    # lr-3 stopped or lr-1 ended, whichever came first (on a busy machine lr-1 may end before
    # lr-3 reaches its rung).
    stopped = {name: jobs[name].events.get(to_state="killed", replica=None).time
               for name in ("lr-2", "lr-3")}
    assert stopped["lr-2"] <= jobs["lr-3"].created_at < jobs["lr-1"].finished_at
    assert min(stopped["lr-3"], jobs["lr-1"].finished_at) <= jobs["lr-4"].created_at
    assert shown["progress"] == {"done": 2, "running": 0, "waiting": 0, "stopped": 2,
                                 "killed": 0, "removed": 0, "to_submit": 0}
    assert shown["best"]["settings"] == {"env.LEARNING_RATE": ASHA_GOOD}
