"""Runs side by side (issue 39): ``GET /api/v1/compare/?jobs=a,b`` — the final and best value
of each metric each job reported, what differs in their specs and environments (secret-looking
variables' values never shown), and one metric's curves; another user's job is not found.
Metrics files written for real in a PFS home on disk, as a replica writes them."""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_error
from tests.factories import job_row
from tests.jobs.files import metrics_path

URL = "/api/v1/compare/"
pytestmark = pytest.mark.django_db


def run(owner, datacenter, name: str, losses: list[float], *, accs=(), **fields):
    """``owner``'s job ``name`` whose trainer 0 reported ``losses`` (and ``accs``), a step
    each from 1."""
    job = job_row(owner, datacenter, name, replicas={}, **fields)
    path = metrics_path(job, job.replicas.get(role="trainer", index=0))
    path.parent.mkdir(parents=True, exist_ok=True)
    accs = list(accs)
    path.write_text("".join(
        json.dumps({"step": step, "time": 1763700000.0 + 10 * step, "loss": loss,
                    **({"acc": accs[step - 1]} if step <= len(accs) else {})}) + "\n"
        for step, loss in enumerate(losses, 1)))
    return job


def test_the_table_holds_each_jobs_final_and_best_value_of_each_metric(
        token_client, alice, datacenter, pfs_home):
    run(alice, datacenter, "lr-1", [3.0, 1.0, 2.0], accs=[0.2, 0.7, 0.5])
    run(alice, datacenter, "lr-2", [4.0, 3.5])
    answer = token_client.get(URL, {"jobs": "lr-1,lr-2"})
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert [job["name"] for job in data["jobs"]] == ["lr-1", "lr-2"]
    assert data["metrics"] == ["acc", "loss"]
    assert data["table"] == [
        # a loss is best lowest, an accuracy highest
        {"job": "lr-1", "metric": "acc", "goal": "max", "final": 0.5, "final_step": 3,
         "best": 0.7, "best_step": 2, "points": 3},
        {"job": "lr-1", "metric": "loss", "goal": "min", "final": 2.0, "final_step": 3,
         "best": 1.0, "best_step": 2, "points": 3},
        {"job": "lr-2", "metric": "loss", "goal": "min", "final": 3.5, "final_step": 2,
         "best": 3.5, "best_step": 2, "points": 2}]
    assert (data["metric"], data["series"]) == (None, [])

    curves = token_client.get(URL, {"jobs": "lr-2,lr-1", "metric": "loss"}).json()
    assert curves["metric"] == "loss"
    assert curves["series"] == [
        {"job": "lr-2", "step": [1, 2], "time": [1763700010.0, 1763700020.0],
         "value": [4.0, 3.5]},
        {"job": "lr-1", "step": [1, 2, 3], "time": [1763700010.0, 1763700020.0,
                                                   1763700030.0], "value": [3.0, 1.0, 2.0]}]


def test_the_diff_holds_only_what_differs_and_never_a_secrets_value(
        token_client, alice, datacenter, pfs_home):
    run(alice, datacenter, "a", [1.0], trainers=2, env={
        "LR": "0.1", "BATCH": "64", "WANDB_API_KEY": "k-aaaa", "DB_PASSWORD": "same-pw"})
    run(alice, datacenter, "b", [1.0], trainers=4, env={
        "LR": "0.01", "BATCH": "64", "WANDB_API_KEY": "k-bbbb", "DB_PASSWORD": "other-pw"})
    run(alice, datacenter, "c", [1.0], trainers=2, env={"LR": "0.1", "BATCH": "64"})
    answer = token_client.get(URL, {"jobs": "a,b,c"})
    assert answer.status_code == 200, answer.content
    for secret in ("k-aaaa", "k-bbbb", "same-pw", "other-pw"):
        assert secret not in answer.content.decode()
    diff = {row["field"]: row for row in answer.json()["diff"]}
    assert set(diff) == {"trainers", "env.LR", "env.WANDB_API_KEY", "env.DB_PASSWORD"}
    assert diff["trainers"]["values"] == {"a": 2, "b": 4, "c": 2}
    assert diff["env.LR"] == {"field": "env.LR", "secret": False,
                              "values": {"a": "0.1", "b": "0.01", "c": "0.1"}}
    assert diff["env.WANDB_API_KEY"] == {"field": "env.WANDB_API_KEY", "secret": True,
                                         "values": {"a": "(hidden)", "b": "(hidden)",
                                                    "c": None}}


def test_another_users_job_is_not_found_and_nothing_of_it_is_told(
        token_client, alice, make_user, datacenter, pfs_home):
    run(alice, datacenter, "mine", [1.0])
    bob = make_user("bob")
    run(bob, datacenter, "theirs", [0.5], env={"TOKEN": "bobs-token"})
    body = assert_error(token_client.get(URL, {"jobs": "mine,theirs"}), 404, "not_found")
    assert body == assert_error(token_client.get(URL, {"jobs": "mine,nothing"}), 404,
                                "not_found") | {"message": body["message"]}
    assert "'theirs'" in body["message"]
    assert "bob" not in json.dumps(body) and "0.5" not in json.dumps(body)


def test_between_one_and_twenty_jobs(token_client, alice, datacenter, pfs_home):
    names = [f"j{i}" for i in range(21)]
    for name in names:
        job_row(alice, datacenter, name)
    assert_error(token_client.get(URL), 400, "invalid", field="jobs")
    body = assert_error(token_client.get(URL, {"jobs": ",".join(names)}), 400, "invalid",
                        field="jobs")
    assert "at most 20 jobs, not 21" in body["message"]
    data = token_client.get(URL, {"jobs": ",".join(names[:20])}).json()
    assert len(data["jobs"]) == 20
    # a job that never started has no metrics: an empty table, not an error
    assert (data["table"], data["metrics"]) == ([], [])
