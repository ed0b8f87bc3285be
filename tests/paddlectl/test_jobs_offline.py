"""The job commands without a server: what is checked here before any request, how a
submission is built from the seeds' flags, and the job columns' formatting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from paddlecloud_client.errors import UsageError
from paddlectl.args import CliParser
from paddlectl.commands.jobs import _submission, name_problem, setup_submit
from paddlectl.output import JOB_COLUMNS, format_duration, format_since


def submission(*argv: str) -> dict:
    parser = CliParser("paddlectl submit")
    setup_submit(parser)
    return _submission(parser.parse_intermixed_args([*argv, "/pfs/dc/home/u/pkg"]))


def test_the_seeds_flags_become_the_apis_fields():
    seeds = submission("-jobname", "my-paddlecloud-job", "-cpu", "1", "-gpu", "0", "-memory",
                       "1Gi", "-parallelism", "10", "-pscpu", "1", "-pservers", "3",
                       "-psmemory", "1Gi", "-passes", "1", "-entry", "python train.py",
                       "-topology", "conf.py", "-image", "me/img:1")
    assert seeds == {"name": "my-paddlecloud-job", "cpu": "1", "gpu": 0, "memory": "1Gi",
                     "trainers": 10, "pscpu": "1", "pservers": 3, "psmemory": "1Gi",
                     "passes": 1, "entry": "python train.py", "topology": "conf.py",
                     "image": "me/img:1"}
    dashed = submission("--jobname", "x", "--parallelism", "2", "--restart-limit", "3",
                        "--deadline", "60", "--ttl", "0", "-e", "A=1", "--env", "B=x=y")
    assert dashed == {"name": "x", "trainers": 2, "restart_limit": 3, "deadline_seconds": 60,
                      "ttl_seconds_after_finished": 0, "env": {"A": "1", "B": "x=y"}}
    # What is not a whole number goes as typed: the server names the mistake.
    assert submission("-gpu", "two", "-cpu", "abc") == {"gpu": "two", "cpu": "abc"}


def test_env_without_a_value_comes_from_here(monkeypatch):
    monkeypatch.setenv("DATA_DIR", "/pfs/dc/public/data")
    assert submission("-e", "DATA_DIR")["env"] == {"DATA_DIR": "/pfs/dc/public/data"}
    monkeypatch.delenv("DATA_DIR")
    with pytest.raises(UsageError, match="use KEY=VALUE"):
        submission("-e", "DATA_DIR")


@pytest.mark.parametrize(("name", "problem"), [
    ("fit-a-line", None), ("a", None), ("x" * 40, None), (None, "required"),
    ("fit_a_line", "'_' is not allowed"), ("fit.a", "'.' is not allowed"),
    ("Fit", "lower-case"), ("x" * 41, "at most 40"), ("-x", "starting and ending"),
    ("x-", "starting and ending"), ("a b", "only lower-case letters"),
])
def test_job_names_follow_the_servers_rule(name, problem):
    found = name_problem(name)
    assert found is None if problem is None else problem in found


def test_a_local_package_is_checked_before_any_request(offline_cli):
    (offline_cli.cwd / "pkg").mkdir()
    # The endpoint refuses connections: each of these fails before it is needed.
    for args, message in [
        (("-jobname", "Bad_Name", "pkg"), "submit: jobname: 'Bad_Name': '_' is not allowed"),
        (("-jobname", "ok", "missing"), "submit: missing does not exist"),
        (("-jobname", "ok", "-topology", "../v1.py", "pkg"), "submit: topology: a path inside"),
        (("-jobname", "ok", "-topology", "v1.py", "pkg"), "submit: topology: v1.py is not a file"),
    ]:
        result = offline_cli("submit", "-entry", "python train.py", *args)
        assert (result.returncode, result.stdout) == (1, ""), result.stderr
        assert result.stderr.startswith(f"paddlectl: {message}"), result.stderr
    result = offline_cli("get", "frobs")
    assert (result.returncode, result.stderr) == (
        1, "paddlectl: get: unknown resource 'frobs': use jobs, workers JOB, tasks JOB, "
           "checkpoints JOB, registry, quota, group, usage, audit or sweeps\n")
    assert offline_cli("get", "quota", "x").returncode == 1


def test_ages_and_durations():
    now = datetime(2026, 11, 21, 10, 5, tzinfo=UTC)
    assert format_since("2026-11-21T10:02:00Z", now=now) == "3m"
    assert format_since(None) == "-"
    assert [format_duration(s) for s in (0, 59, 60, 7200, 2 * 86400)] == \
        ["0s", "59s", "1m", "2h", "2d"]
    duration = next(c for c in JOB_COLUMNS if c.header == "duration")
    started = datetime.now(UTC) - timedelta(minutes=5)
    assert duration.value({"started_at": started.isoformat(), "finished_at":
                           (started + timedelta(seconds=90)).isoformat()}) == "1m"
    assert duration.value({"started_at": started.isoformat()}) == "5m"
    assert duration.value({"started_at": None}) is None


def test_the_dataset_flags_become_the_apis_fields():
    dataset = "/pfs/dc/home/u/data/part-*.recordio"
    assert submission("--dataset", dataset, "--dataset-unit", "records", "--task-records",
                      "40") == {"dataset": dataset, "dataset_unit": "records",
                                "task_records": 40}
    assert submission("-dataset", dataset, "-dataset-unit", "chunk") == {
        "dataset": dataset, "dataset_unit": "chunk"}
    # As typed: the server names the mistake (a unit it does not know, a size that is not one).
    assert submission("-dataset", dataset, "-dataset-unit", "pages", "-task-records", "x") == {
        "dataset": dataset, "dataset_unit": "pages", "task_records": "x"}


def test_get_tasks_names_one_job(offline_cli):
    for args in (("get", "tasks"), ("get", "tasks", "a", "b")):
        result = offline_cli(*args)
        assert (result.returncode, result.stderr) == (
            1, "paddlectl: get tasks: name one job: paddlectl get tasks JOB\n")
