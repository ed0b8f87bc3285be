"""A VisualDL session's runs (paddlecloud_sdk.sessions.visualdl): what jobs reported with
``report()`` becomes VisualDL scalars, read back with VisualDL's own reader; the launcher serves
them with VisualDL's own server, and leaves nothing behind."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from visualdl import LogReader, LogWriter

from paddlecloud_core.contract import SESSION_PORT_VARIABLE, SESSION_TOKEN_VARIABLE
from paddlecloud_core.layout import output_rel
from paddlecloud_sdk import report
from paddlecloud_sdk.sessions.visualdl import RUN_FILE, Runs
from tests.outages import free_port
from tests.polling import wait

LAUNCHER = [sys.executable, "-m", "paddlecloud_sdk.sessions", "visualdl"]


def output(home: Path, job: str) -> Path:
    return home.joinpath(*output_rel(job))


def reported(monkeypatch, home: Path, job: str, *, trainer: int = 0, role: str = "",
             **steps_metrics) -> None:
    """``report(step=s, **metrics)`` for each ``s: metrics`` of ``steps_metrics`` (keys
    ``s<step>``), as job ``job``'s trainer (or pserver) ``trainer`` would."""
    monkeypatch.setenv("PADDLE_OUTPUT_DIR", str(output(home, job)))
    monkeypatch.setenv("PADDLE_TRAINER_ID", str(trainer))
    if role:
        monkeypatch.setenv("TRAINING_ROLE", role)
        monkeypatch.setenv("PADDLE_PSERVER_ID", str(trainer))
    else:
        monkeypatch.delenv("TRAINING_ROLE", raising=False)
    for key, metrics in steps_metrics.items():
        report(step=int(key.removeprefix("s")), **metrics)


def scalars(runs: Path, job: str) -> dict[str, list[tuple[int, float]]]:
    """What VisualDL's own reader finds in job ``job``'s run: ``{tag: [(step, value), …]}``."""
    reader = LogReader(file_path=str(runs / job / RUN_FILE))
    return {tag: [(record.id, record.value) for record in reader.get_data("scalar", tag)]
            for tag in reader.get_tags()["scalar"]}


@pytest.fixture
def home(tmp_path):
    (tmp_path / "home" / "jobs").mkdir(parents=True)
    return tmp_path / "home"


def test_reported_metrics_are_visualdl_scalars_of_the_jobs_run(home, tmp_path, monkeypatch):
    reported(monkeypatch, home, "mnist", s0={"loss": 2.0, "accuracy": 0.1},
             s10={"loss": 0.5, "accuracy": 0.75}, s20={"loss": float("inf")})
    reported(monkeypatch, home, "mnist", trainer=1, s0={"loss": 2.5})
    reported(monkeypatch, home, "mnist", trainer=0, role="PSERVER", s3={"rows": 7})
    runs = Runs(["mnist"], home, tmp_path / "runs")
    assert runs.sync() == 7
    runs.close()
    found = scalars(tmp_path / "runs", "mnist")
    assert sorted(found) == ["accuracy", "loss", "pserver-0/rows", "trainer-1/loss"]
    assert found["accuracy"] == [(0, pytest.approx(0.1)), (10, 0.75)]
    assert found["loss"][:2] == [(0, 2.0), (10, 0.5)]
    assert found["loss"][2][0] == 20 and math.isnan(found["loss"][2][1])  # reported infinite
    assert found["trainer-1/loss"] == [(0, 2.5)]
    assert found["pserver-0/rows"] == [(3, 7.0)]
    # The run is named by its job (VisualDL shows the run's display name).
    reader = LogReader(file_path=str(tmp_path / "runs" / "mnist" / RUN_FILE))
    assert reader.get_data("meta_data", "meta_data_tag")[0].meta_data.display_name == "mnist"


def test_lines_are_converted_as_they_come_and_never_twice(home, tmp_path, monkeypatch):
    reported(monkeypatch, home, "grows", s1={"loss": 1.0})
    runs = Runs(["grows"], home, tmp_path / "runs")
    assert runs.sync() == 1
    assert runs.sync() == 0  # nothing new: nothing written
    metrics = output(home, "grows") / "node_0" / "metrics.jsonl"
    with metrics.open("a") as file:  # a line being written (no newline yet), and junk
        file.write('not json\n{"step": -1, "loss": 3}\n{"step": 2, "lo')
    assert runs.sync() == 0
    with metrics.open("a") as file:
        file.write('ss": 0.5}\n')
    reported(monkeypatch, home, "grows", s3={"loss": 0.25})
    assert runs.sync() == 2
    runs.close()
    assert scalars(tmp_path / "runs", "grows") == {"loss": [(1, 1.0), (2, 0.5), (3, 0.25)]}


def test_a_job_without_metrics_or_output_yet_has_no_run_until_it_reports(home, tmp_path,
                                                                           monkeypatch):
    runs = Runs(["later"], home, tmp_path / "runs")
    assert runs.sync() == 0
    assert not (tmp_path / "runs" / "later" / RUN_FILE).exists()
    reported(monkeypatch, home, "later", s5={"loss": 1.5})
    assert runs.sync() == 1
    runs.close()
    assert scalars(tmp_path / "runs", "later") == {"loss": [(5, 1.5)]}


def test_visualdl_logs_a_job_wrote_itself_are_runs_read_where_they_are(home, tmp_path):
    own = output(home, "own") / "vdl" / "train"
    with LogWriter(logdir=str(own)) as writer:
        writer.add_scalar(tag="train/acc", value=0.5, step=1)
    before = {path: path.stat().st_mtime_ns for path in home.rglob("*")}
    runs = Runs(["own"], home, tmp_path / "runs")
    runs.sync()
    runs.sync()  # a second look links nothing twice
    runs.close()
    linked = [path for path in (tmp_path / "runs" / "own").rglob("*") if path.is_symlink()]
    assert [path.relative_to(tmp_path / "runs") for path in linked] == [
        Path("own/output/vdl/train", next(own.iterdir()).name)]
    reader = LogReader(logdir=[str(tmp_path / "runs" / "own")])
    assert reader.runs() == [str(tmp_path / "runs" / "own" / "output" / "vdl" / "train")]
    # The job's own files were only read.
    assert {path: path.stat().st_mtime_ns for path in home.rglob("*")} == before


def test_the_sdk_needs_no_visualdl(tmp_path):
    """report() and this module import without VisualDL (a trainer's image need not have it);
    only converting asks for it."""
    code = (
        "import sys\n"
        "sys.modules['visualdl'] = None\n"  # any import of it fails
        "import paddlecloud_sdk, paddlecloud_sdk.sessions.visualdl\n"
        "paddlecloud_sdk.report(step=1, loss=0.5)\n"
        "print(open('output/node_0/metrics.jsonl').read(), end='')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["loss"] == 0.5


def test_the_launcher_serves_every_job_as_a_run_and_leaves_nothing_behind(home, tmp_path,
                                                                          monkeypatch):
    reported(monkeypatch, home, "first", s1={"loss": 1.0})
    reported(monkeypatch, home, "second", s1={"loss": 2.0, "accuracy": 0.5})
    port = free_port()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    token = "pcs_" + "ab" * 32
    launcher = subprocess.Popen(
        [*LAUNCHER, "--home", str(home), "--every", "0.2", "first", "second"],
        env={**os.environ, "PYTHONPATH": str(Path.cwd()), "TMPDIR": str(scratch),
             SESSION_PORT_VARIABLE: str(port), SESSION_TOKEN_VARIABLE: token},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        api = f"http://127.0.0.1:{port}/app/api"
        proxy = {"Authorization": f"token {token}"}  # what the portal's proxy adds

        def tags():
            try:
                return requests.get(f"{api}/scalar/tags", headers=proxy, timeout=5).json()["data"]
            except requests.ConnectionError:
                return None

        found = wait(tags, 60, "VisualDL answering")
        assert dict(zip(found["runs"], map(sorted, found["tags"]), strict=True)) == {
            "first": ["loss"], "second": ["accuracy", "loss"]}
        # What a job reports while VisualDL runs is there too.
        reported(monkeypatch, home, "first", s2={"loss": 0.5})

        def first_loss():
            answer = requests.get(f"{api}/scalar/list", params={"run": "first", "tag": "loss"},
                                  headers=proxy, timeout=5).json()["data"]
            return [step for _, step, _ in answer] == [1, 2]

        wait(first_loss, 60, "the new step in VisualDL")
        # Where the portal's proxy lands a browser: VisualDL's scalars.
        landing = requests.get(f"http://127.0.0.1:{port}/", headers=proxy, timeout=5,
                               allow_redirects=False)
        assert (landing.status_code, landing.headers["Location"]) == (302, "/app/scalar")
        page = requests.get(f"http://127.0.0.1:{port}/app/index", headers=proxy, timeout=5)
        assert page.status_code == 200 and "<html" in page.text.lower()
        # Without the session's token (anything else in the replica's network): refused.
        for wrong in ({}, {"Authorization": "token nope"}, {"Authorization": token}):
            answer = requests.get(f"{api}/runs", headers=wrong, timeout=5)
            assert answer.status_code == 403, wrong
            assert "first" not in answer.text
        assert list(scratch.iterdir())  # its runs, in its temporary directory
    finally:
        launcher.send_signal(signal.SIGTERM)
        out, _ = launcher.communicate(timeout=30)
    assert launcher.returncode == 0, out
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(("arguments", "said"), [
    (["Bad_Name"], "job name 'Bad_Name'"),
    (["--port", "0", "job"], "--port: a TCP port from 1 to 65535, got 0"),
    (["--every", "0", "job"], "--every: a number of seconds > 0, got 0"),
    (["--home", "/nonexistent", "job"], "--home: /nonexistent has no jobs/ directory"),
])
def test_the_launcher_refuses_what_it_cannot_serve(arguments, said):
    done = subprocess.run([*LAUNCHER, *arguments], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 2
    assert said in done.stderr


def test_outside_a_job_the_home_must_be_given(monkeypatch):
    monkeypatch.delenv("PADDLE_PFS_HOME", raising=False)
    env = {key: value for key, value in os.environ.items() if key != "PADDLE_PFS_HOME"}
    done = subprocess.run([*LAUNCHER, "job"],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**env, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 2
    assert "PADDLE_PFS_HOME is not set" in done.stderr


def test_without_visualdl_it_says_what_to_install(home):
    code = ("import sys\n"
            "sys.modules['visualdl'] = None\n"  # not importable, as in an image without it
            "from paddlecloud_sdk.sessions.__main__ import main\n"
            f"sys.exit(main(['visualdl', '--home', {str(home)!r}, 'job']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 1
    assert "VisualDL is not installed in this image" in done.stderr
