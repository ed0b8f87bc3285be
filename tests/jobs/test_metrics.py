"""Training metrics: the records of a worker's ``metrics.jsonl`` (jobs/metrics.py) and
``GET /api/v1/jobs/{name}/metrics`` — files written for real in a PFS home on disk, one job
run for real on the local backend with ``paddlecloud_sdk.report`` in its trainers."""

from __future__ import annotations

import json
import math
import time

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts.services import token_create
from jobs import engine
from jobs.backends import backend_for
from jobs.metrics import metric_names, metric_record, metric_records, metrics_read
from jobs.models import Job
from tests.conftest import PASSWORD, assert_error
from tests.factories import job_row
from tests.jobs.files import file_at, metrics_path

URL = "/api/v1/jobs/"

# A trainer that reports one line per step, as a user's trainer would.
TRAINER = """\
from paddlecloud_sdk import env, report
for step in range(1, 6):
    report(step=step, loss=10.0 / step, trainer=env.trainer_id())
print("trainer", env.trainer_id(), "reported", flush=True)
"""


def metrics_url(name: str) -> str:
    return f"{URL}{name}/metrics"


def make_job(owner, datacenter, name: str, trainers: int = 1, pservers: int = 0) -> Job:
    return job_row(owner, datacenter, name, trainers=trainers, pservers=pservers, replicas={})


def write(job: Job, worker: str, text: str):
    role, index = worker.split("-")
    path = metrics_path(job, job.replicas.get(role=role, index=int(index)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def line(step, **metrics) -> str:
    return json.dumps({"step": step, "time": 1763700000.0 + step, **metrics}) + "\n"


# --- reading the file -----------------------------------------------------------------------


def test_a_record_is_the_step_time_and_every_metric():
    assert metric_record(4, '{"step": 120, "time": 1763700000.5, "loss": 0.53, "lr": 1}') == {
        "seq": 4, "step": 120, "time": 1763700000.5, "metrics": {"loss": 0.53, "lr": 1}}
    assert metric_record(0, b'{"step": 0, "loss": null}\n') == {
        "seq": 0, "step": 0, "time": None, "metrics": {"loss": None}}


def test_non_finite_values_and_values_that_are_not_numbers():
    record = metric_record(1, '{"step": 1, "time": Infinity, "loss": NaN, "acc": -Infinity, '
                              '"note": "text", "flag": true, "list": [1], "ok": 2.5}')
    assert record == {"seq": 1, "step": 1, "time": None,
                      "metrics": {"loss": None, "acc": None, "ok": 2.5}}


@pytest.mark.parametrize("text", [
    "", "\n", "not json", "[1, 2]", '"step"', "{}", '{"loss": 0.5}',
    '{"step": "1", "loss": 0.5}', '{"step": 1.5, "loss": 0.5}', '{"step": true, "loss": 0.5}',
    '{"step": -1, "loss": 0.5}', '{"step": 1}', '{"step": 1, "time": 5.0}',
    '{"step": 1, "note": "only text"}', '{"step": 1, "loss": 0.5', b'\xff\xfe{"step": 1}',
    "[" * 100_000,
])
def test_lines_that_are_not_records(text):
    assert metric_record(0, text) is None


def test_many_lines_give_what_each_gives_alone_even_lines_that_only_parse_together():
    good = [line(step, loss=1.0 / (step + 1)).strip() for step in range(300)]
    # Lines that are not records alone, but that joined into one JSON array would read as
    # records with other lines (an object left open on one line, closed on the next; two
    # objects on one line): they must give what they give alone, and the rest is unchanged.
    tricky = ['{"step": 1000, "loss": [1', '{"step": 1001, "loss": 2}]}',
              '{"step": 1002, "loss": 3},{"step": 1003, "loss": 4}',
              '{"step": 1004, "loss": 1}, 5', '{"step": 1005, "a": "}', '{"step": 1006}',
              ' {"step": 1007, "loss": 7} ', '{"step": 1008, "loss": {"x": 1}}', "garbage"]
    for at in (0, 150, 299):
        lines = good[:at] + tricky + good[at:]
        alone = [record for seq, text in enumerate(lines, 7)
                 if (record := metric_record(seq, text)) is not None]
        assert metric_records(7, lines) == alone
        assert [r["step"] for r in alone if r["step"] >= 1000] == [1007]
    assert metric_records(0, good) == [metric_record(seq, text)
                                       for seq, text in enumerate(good)]


def test_reading_numbers_every_line_and_skips_the_bad_ones(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(line(1, loss=3.0) + "garbage\n" + line(2, loss=2.0) + "\n"
                    + line(3, loss=1.0) + '{"step": 4, "lo')
    file = file_at(path)
    records, next_line, more = metrics_read(file)
    assert [(r["seq"], r["step"], r["metrics"]) for r in records] == [
        (0, 1, {"loss": 3.0}), (2, 2, {"loss": 2.0}), (4, 3, {"loss": 1.0})]
    assert (next_line, more) == (5, False)  # the partial last line is not counted yet
    assert metric_names(records) == ["loss"]

    # Resuming from a line number: no record twice, none missed.
    assert metrics_read(file, 5) == ([], 5, False)
    assert [r["seq"] for r in metrics_read(file, 1)[0]] == [2, 4]
    assert [r["seq"] for r in metrics_read(file, 3)[0]] == [4]
    with path.open("a") as f:
        f.write('ss": 0.5}\n' + line(5, loss=0.25, acc=0.9))
    records, next_line, _ = metrics_read(file, 5)
    assert [(r["seq"], r["step"]) for r in records] == [(5, 4), (6, 5)]
    assert next_line == 7
    assert metric_names(metrics_read(file)[0]) == ["acc", "loss"]

    # At most ``limit`` records at a time, and where to go on from.
    records, next_line, more = metrics_read(file, 0, limit=2)
    assert ([r["seq"] for r in records], next_line, more) == ([0, 2], 3, True)
    records, next_line, more = metrics_read(file, next_line, limit=2)
    assert ([r["seq"] for r in records], next_line, more) == ([4, 5], 6, True)
    assert metrics_read(file, next_line, limit=2) == ([metrics_read(file, 6)[0][0]], 7, False)


def test_reading_a_file_that_is_not_there_or_shorter(tmp_path):
    assert metrics_read(file_at(tmp_path / "none.jsonl")) == ([], 0, False)
    assert metrics_read(file_at(tmp_path / "none.jsonl"), 7) == ([], 7, False)
    path = tmp_path / "metrics.jsonl"
    path.write_text(line(1, loss=1.0))
    assert metrics_read(file_at(path), 10) == ([], 10, False)
    with pytest.raises(ValueError, match="first must be >= 0"):
        metrics_read(file_at(path), -1)


# --- the API --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_api_serves_a_workers_records_and_metric_names(token_client, alice, datacenter,
                                                           pfs_home):
    job = make_job(alice, datacenter, "fit-a-line", trainers=2, pservers=1)
    path = write(job, "trainer-0", line(1, loss=4.0) + "oops\n" + line(2, loss=2.0, acc=0.5)
                 + line(3, loss=float("nan")) + '{"step": 4, "loss"')
    assert path == pfs_home / "jobs" / "fit-a-line" / "output" / "node_0" / "metrics.jsonl"
    write(job, "trainer-1", line(7, other=1))
    # pserver 0's log is in node_0 too, beside trainer 0's: its metrics have a file of their own
    assert write(job, "pserver-0", line(9, pushes=3)) == path.with_name("server-metrics.jsonl")

    response = token_client.get(metrics_url("fit-a-line"))  # trainer-0 by default
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {
        "worker": "trainer-0", "names": ["acc", "loss"],
        "records": [
            {"seq": 0, "step": 1, "time": 1763700001.0, "metrics": {"loss": 4.0}},
            {"seq": 2, "step": 2, "time": 1763700002.0, "metrics": {"loss": 2.0, "acc": 0.5}},
            {"seq": 3, "step": 3, "time": 1763700003.0, "metrics": {"loss": None}},
        ], "next": 4, "more": False}
    assert token_client.get(metrics_url("fit-a-line"), {"worker": "trainer-0"}).json() == \
        response.json()

    other = token_client.get(metrics_url("fit-a-line"), {"worker": "trainer-1"}).json()
    assert (other["worker"], other["names"], [r["metrics"] for r in other["records"]]) == \
        ("trainer-1", ["other"], [{"other": 1}])
    pserver = token_client.get(metrics_url("fit-a-line"), {"worker": "pserver-0"}).json()
    assert (pserver["names"], [r["step"] for r in pserver["records"]]) == (["pushes"], [9])


@pytest.mark.django_db
def test_a_worker_that_reported_nothing_has_no_records(token_client, alice, datacenter,
                                                       pfs_home):
    make_job(alice, datacenter, "quiet")
    response = token_client.get(metrics_url("quiet"))
    assert response.status_code == 200, response.content
    assert response.json() == {"worker": "trainer-0", "names": [], "records": [], "next": 0,
                               "more": False}


@pytest.mark.django_db
def test_an_unknown_worker_is_the_error_the_logs_give(token_client, alice, datacenter,
                                                      pfs_home):
    make_job(alice, datacenter, "fit-a-line", trainers=2)
    url = f"{URL}fit-a-line/"
    body = assert_error(token_client.get(metrics_url("fit-a-line"), {"worker": "nope"}),
                        404, "not_found", field="worker")
    assert "'nope'" in body["message"] and "trainer-0, trainer-1" in body["message"]
    assert body == token_client.get(f"{url}logs", {"worker": "nope"}).json()


@pytest.mark.django_db
def test_another_users_job_is_not_found(token_client, make_user, datacenter, pfs_home):
    bob = make_user("bob")
    secret = make_job(bob, datacenter, "secret")
    write(secret, "trainer-0", line(1, loss=1.0))
    body = assert_error(token_client.get(metrics_url("secret")), 404, "not_found")
    assert "bob" not in body["message"]
    assert body == token_client.get(metrics_url("no-such-job")).json() | {
        "message": body["message"]}
    assert "'secret'" in body["message"]


@pytest.mark.django_db
def test_without_credentials_nothing_is_answered(api, alice, datacenter, pfs_home):
    make_job(alice, datacenter, "fit-a-line")
    assert_error(api.get(metrics_url("fit-a-line")), 401, "not_authenticated")


@pytest.mark.django_db
def test_a_browser_session_reads_them_in_the_datacenter_it_names(make_user, datacenter,
                                                                 other_datacenter, pfs_home):
    alice = make_user("alice", datacenters=("datacenter1", "datacenter2"))
    write(make_job(alice, datacenter, "here"), "trainer-0", line(1, loss=1.0))
    there = make_job(alice, other_datacenter, "there")
    assert metrics_path(there, there.replicas.get()).is_relative_to(
        other_datacenter.pfs_root_path)
    write(there, "trainer-0", line(2, loss=2.0))
    browser = Client()
    assert browser.login(username="alice", password=PASSWORD)

    def steps(name, **params) -> list[int]:
        response = browser.get(metrics_url(name), params)
        assert response.status_code == 200, response.content
        return [r["step"] for r in response.json()["records"]]

    assert steps("here") == [1]  # the first datacenter
    assert_error(browser.get(metrics_url("there")), 404, "not_found")
    assert steps("there", datacenter="datacenter2") == [2]
    assert browser.get(metrics_url("there"), HTTP_X_PADDLE_DATACENTER="datacenter2"
                       ).json()["records"][0]["step"] == 2
    assert_error(browser.get(metrics_url("here"), {"datacenter": "datacenter2"}),
                 404, "not_found")

    # A token is bound to its datacenter.
    token = APIClient()
    token.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_create(alice, datacenter_name='datacenter2').raw}")
    assert [r["step"] for r in token.get(metrics_url("there")).json()["records"]] == [2]
    assert_error(token.get(metrics_url("here")), 404, "not_found")
    assert_error(token.get(metrics_url("there"), {"datacenter": "datacenter1"}),
                 403, "wrong_datacenter", field="datacenter")


# --- a job that reports -----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_trainer_that_calls_report_is_served_by_the_api(token_client, pfs_home):
    pkg = pfs_home / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text(TRAINER)
    response = token_client.post(URL, {"name": "reporter", "package": "/pfs/datacenter1/home/"
                                       "alice/pkg", "entry": "python train.py", "trainers": 2},
                                 format="json")
    assert response.status_code == 201, response.content
    job = Job.objects.get(name="reporter")
    try:
        engine.job_launch(job.pk)
        deadline = time.monotonic() + 30
        while engine.job_sync(job.pk):
            assert time.monotonic() < deadline, "the job did not end in 30 s"
            time.sleep(0.05)
    finally:
        backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)
    job.refresh_from_db()
    assert job.state == "succeeded", job.state_reason

    for index in (0, 1):
        body = token_client.get(metrics_url("reporter"), {"worker": f"trainer-{index}"}).json()
        assert body["names"] == ["loss", "trainer"]
        records = body["records"]
        assert [r["seq"] for r in records] == [0, 1, 2, 3, 4]
        assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
        assert [r["metrics"] for r in records] == [
            {"loss": 10.0 / step, "trainer": index} for step in range(1, 6)]
        times = [r["time"] for r in records]
        assert times == sorted(times) and all(math.isfinite(t) for t in times)
        assert abs(times[-1] - time.time()) < 60
        # Beside the worker's log, in the owner's PFS home: it outlives the job.
        node = pfs_home / "jobs" / "reporter" / "output" / f"node_{index}"
        assert sorted(p.name for p in node.iterdir()) == ["metrics.jsonl", "train.log"]
