"""Runs side by side (issue 39): ``GET /api/v1/compare/?jobs=a,b`` — the final and best value
of each metric each job reported, what differs in their specs and environments (secret-looking
variables' values never shown), and one metric's curves — thinned along the axis asked for,
smoothed before thinning, while the table is exact — another user's job is not found. Metrics
files written for real in a PFS home on disk, as a replica writes them; each parsed once and
read on from where it stopped as it grows (``jobs.metrics_cache``)."""

from __future__ import annotations

import json
import math
import os

import pytest

from jobs.compare import DEFAULT_POINTS
from jobs.curves import smoothed
from jobs.metrics_cache import MetricsCache
from jobs.models import Job
from tests.conftest import assert_error
from tests.factories import job_row
from tests.jobs.files import file_at, metrics_path

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
        {"job": "lr-2", "points": 2, "step": [1, 2], "time": [1763700010.0, 1763700020.0],
         "value": [4.0, 3.5]},
        {"job": "lr-1", "points": 3, "step": [1, 2, 3],
         "time": [1763700010.0, 1763700020.0, 1763700030.0], "value": [3.0, 1.0, 2.0]}]
    assert (curves["x"], curves["smoothing"], curves["max_points"]) == (
        "step", 0.0, DEFAULT_POINTS)


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


def long_run(owner, datacenter, name: str, i: int, points: int):
    """A run of ``points`` reports (loss, acc) with a spike and a dip of its own; every 10th
    report has no time (a clock that failed), and it paused for an hour half way."""
    job = job_row(owner, datacenter, name, replicas={})
    path = metrics_path(job, job.replicas.get(role="trainer", index=0))
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for step in range(points):
        loss = 2 / (1 + (1 + i / 10) * step / 100) * (1 + 0.1 * math.sin(step * (i + 3)))
        if step == 1000 + i:
            loss = 90.0 + i  # a spike
        if step == 7000 + i:
            loss = 0.0001 * (i + 1)  # the best, once
        moment = 1763700000.0 + step * 0.5 + (3600 if step >= points // 2 else 0)
        lines.append(json.dumps({"step": step, **({} if step % 10 == 9 else {"time": moment}),
                                 "loss": loss, "acc": 1 - loss / 100}))
    path.write_text("\n".join(lines) + "\n")
    return job


def test_twenty_runs_of_ten_thousand_points_answer_thinned_curves_and_exact_values(
        token_client, alice, datacenter, pfs_home):
    names = [f"run-{i}" for i in range(20)]
    for i, name in enumerate(names):
        long_run(alice, datacenter, name, i, 10_000)
    answer = token_client.get(URL, {"jobs": ",".join(names), "metric": "loss"})
    assert answer.status_code == 200, answer.content
    data = answer.json()
    # the table is from every point: the dip is the best, the last report the final
    rows = {row["job"]: row for row in data["table"] if row["metric"] == "loss"}
    for i, name in enumerate(names):
        last = 2 / (1 + (1 + i / 10) * 9999 / 100) * (1 + 0.1 * math.sin(9999 * (i + 3)))
        assert rows[name] == {"job": name, "metric": "loss", "goal": "min", "final": last,
                              "final_step": 9999, "best": 0.0001 * (i + 1),
                              "best_step": 7000 + i, "points": 10_000}
    # each curve thinned to the default, keeping its ends, its spike and its dip
    assert len(data["series"]) == 20
    for i, one in enumerate(data["series"]):
        assert one["job"] == names[i] and one["points"] == 10_000
        assert DEFAULT_POINTS // 4 < len(one["value"]) <= DEFAULT_POINTS
        assert len(one["step"]) == len(one["time"]) == len(one["value"])
        assert one["step"] == sorted(one["step"])
        assert (one["step"][0], one["step"][-1]) == (0, 9999)
        assert one["value"][one["step"].index(1000 + i)] == 90.0 + i
        assert one["value"][one["step"].index(7000 + i)] == pytest.approx(0.0001 * (i + 1))
        assert None in one["time"]  # along step, the points without a time are drawn too
    assert len(answer.content) < 2_000_000  # 200 000 points would be about 8 MB

    # along time: thinned along time, without the points that have none; the hour's pause
    # leaves both halves their detail
    timed = token_client.get(URL, {"jobs": "run-0,run-1", "metric": "loss", "x": "time",
                                   "max_points": "400"}).json()
    assert timed["x"] == "time"
    for one in timed["series"]:
        assert None not in one["time"] and len(one["value"]) <= 400
        assert one["time"] == sorted(one["time"])
        assert one["step"][-1] == 9998  # 9999 has no time
        assert sum(t > 1763700000.0 + 3600 for t in one["time"]) > 100

    # every point, when asked
    whole = token_client.get(URL, {"jobs": "run-3", "metric": "acc",
                                   "max_points": "100000"}).json()
    assert whole["series"][0]["step"] == list(range(10_000))


def test_smoothing_is_taken_over_every_point_before_thinning(
        token_client, alice, datacenter, pfs_home):
    long_run(alice, datacenter, "run-5", 5, 10_000)
    data = token_client.get(URL, {"jobs": "run-5", "metric": "loss", "smoothing": "0.9",
                                  "max_points": "800"}).json()
    one = data["series"][0]
    assert data["smoothing"] == 0.9 and len(one["smoothed"]) == len(one["value"]) <= 800
    records = [json.loads(line) for line in metrics_path(
        *_trainer("run-5")).read_text().splitlines()]
    full = smoothed([record["loss"] for record in records], 0.9)
    for step, value in zip(one["step"], one["smoothed"], strict=True):
        assert value == pytest.approx(full[step], rel=1e-6)
    # not the average of the thinned points: after the spike the two differ
    assert smoothed(one["value"], 0.9) != pytest.approx(one["smoothed"], rel=1e-3)


def _trainer(name: str):
    job = Job.objects.get(name=name)
    return job, job.replicas.get(role="trainer", index=0)


def test_curve_options_out_of_range_are_refused_naming_the_field(
        token_client, alice, datacenter, pfs_home):
    run(alice, datacenter, "a", [1.0])
    for field, value, says in (("x", "epoch", "step or time"),
                               ("smoothing", "1", "from 0 (none) to 0.99"),
                               ("smoothing", "nan", "from 0 (none) to 0.99"),
                               ("max_points", "3", "from 4 to 100000"),
                               ("max_points", "lots", "from 4 to 100000")):
        body = assert_error(token_client.get(URL, {"jobs": "a", "metric": "loss",
                                                   field: value}), 400, "invalid",
                            field=field)
        assert says in body["message"], body


def test_a_growing_file_is_parsed_from_where_it_stopped_and_a_rewritten_one_again(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 10.0 - s}) + "\n"
                            for s in range(5)) + '{"step": 5, "lo')
    cache = MetricsCache()
    file = file_at(path)
    loss = cache.columns(file, 100)["loss"]
    assert list(loss.step) == [0, 1, 2, 3, 4]  # the last line is still being written
    assert (loss.final, loss.final_step, loss.low, loss.low_step) == (6.0, 4, 6.0, 4)

    # The job writes on. Were the file parsed again, the first line's change (in place,
    # before where the parse stopped and the bytes it checks) would show; it does not.
    with path.open("r+") as f:
        f.write('{"step": 0, "loss": 99.0}')
    with path.open("a") as f:
        f.write('ss": 1.5}\n' + json.dumps({"step": 6, "loss": 0.5, "acc": 0.9, "epoch": 2})
                + "\n")
    columns = cache.columns(file, 100)
    assert list(columns["loss"].step) == [0, 1, 2, 3, 4, 5, 6]
    assert list(columns["loss"].value) == [10.0, 9.0, 8.0, 7.0, 6.0, 1.5, 0.5]
    assert (columns["loss"].high, columns["acc"].final) == (10.0, 0.9)
    assert repr(columns["epoch"].final) == "2"  # the table's figures as reported, not floats
    assert len(loss.value) == 5  # what an earlier request holds does not change under it

    # Rewritten (shorter): parsed from the start.
    path.write_text(json.dumps({"step": 0, "loss": 3.0}) + "\n")
    assert list(cache.columns(file, 100)["loss"].value) == [3.0]
    # Rewritten at the same size, another mtime: parsed from the start.
    path.write_text(json.dumps({"step": 0, "loss": 4.0}) + "\n")
    os.utime(path, ns=(1, 1))
    assert list(cache.columns(file, 100)["loss"].value) == [4.0]
    # Gone: nothing.
    path.unlink()
    assert cache.columns(file, 100) == {}


def test_the_cache_holds_at_most_its_limit_of_values_dropping_the_oldest(tmp_path):
    cache = MetricsCache(limit=25)
    files = []
    for name in "abc":
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n"
                                for s in range(10)))
        files.append(file_at(path))
    for file in files:
        cache.columns(file, 100)
    assert cache.held() == 20  # a's 10 dropped for c's
    assert [key[1] for key in cache.files()] == [("b.jsonl",), ("c.jsonl",)]
    cache.columns(files[1], 100)  # b used again: c is now the oldest
    cache.columns(files[0], 100)
    assert [key[1] for key in cache.files()] == [("b.jsonl",), ("a.jsonl",)]
    # one file bigger than the whole cache is read, not kept
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(30)))
    assert len(cache.columns(file_at(big), 100)["loss"].value) == 30
    assert cache.held() == 20
    # at most the records asked for
    assert len(cache.columns(file_at(big), 12)["loss"].value) == 12
