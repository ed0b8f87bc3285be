"""paddlecloud_sdk.report: training metrics as JSON lines beside the replica's log, where the
portal reads them (jobs/metrics.py) — written for real into a temporary output directory."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

import paddlecloud_sdk
from jobs.metrics import metrics_read
from paddlecloud_core.layout import log_relpath, metrics_relpath
from paddlecloud_sdk import report
from paddlecloud_sdk.metrics import metrics_file
from tests.jobs.files import file_at
from tests.sdk.conftest import set_env
from tests.sdk.test_env import contract_env


@pytest.fixture
def output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("PADDLE_OUTPUT_DIR", str(out))
    return out


def lines(path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_report_is_exported_by_the_sdk():
    assert paddlecloud_sdk.report is report
    assert "report" in paddlecloud_sdk.__all__


def test_each_call_appends_one_line_with_step_time_and_the_metrics(output):
    before = time.time()
    report(step=0, loss=2.5, accuracy=0.25)
    report(step=1, loss=1, accuracy=0.5)
    after = time.time()
    written = lines(output / "node_0" / "metrics.jsonl")  # trainer 0 outside a job
    assert [list(line) for line in written] == [["step", "time", "loss", "accuracy"]] * 2
    assert [(line["step"], line["loss"], line["accuracy"]) for line in written] == [
        (0, 2.5, 0.25), (1, 1, 0.5)]
    assert isinstance(written[1]["loss"], int)
    assert all(before <= line["time"] <= after for line in written)
    assert written[0]["time"] <= written[1]["time"]


def test_outside_a_job_it_writes_under_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report(step=5, loss=0.1)
    assert lines(tmp_path / "output" / "node_0" / "metrics.jsonl")[0]["step"] == 5


def test_thousands_of_reports_are_thousands_of_whole_lines(output):
    for step in range(3000):
        report(step=step, loss=1 / (step + 1))
    written = lines(metrics_file())
    assert [line["step"] for line in written] == list(range(3000))
    records, next_line, _ = metrics_read(file_at(metrics_file()))
    assert (len(records), next_line) == (3000, 3000)


@pytest.mark.parametrize(("role", "index", "relpath"), [
    ("trainer", 3, "node_3/metrics.jsonl"), ("pserver", 1, "node_1/server-metrics.jsonl")])
def test_a_replica_writes_beside_its_own_log(tmp_path, monkeypatch, role, index, relpath):
    """With the environment the portal gives replica ``index`` of ``role``, the file lands
    where the portal looks: paddlecloud_core.layout.metrics_relpath, beside the log."""
    set_env(monkeypatch, contract_env(role, index, trainers=4, pservers=2, tmp=tmp_path))
    output = tmp_path / "out"
    report(step=7, loss=0.5)
    expected = output / metrics_relpath(role, index)
    assert expected == output / relpath
    assert expected.parent == (output / log_relpath(role, index)).parent
    assert metrics_file() == expected
    assert [line["loss"] for line in lines(expected)] == [0.5]
    assert [p.relative_to(output).as_posix() for p in output.rglob("*") if p.is_file()] == \
        [relpath]


def test_trainer_0_and_pserver_0_share_node_0_but_not_the_file(tmp_path, monkeypatch):
    output = tmp_path / "out"
    for role in ("trainer", "pserver"):
        with monkeypatch.context() as patched:
            set_env(patched, contract_env(role, 0, trainers=2, pservers=2, tmp=tmp_path))
            report(step=1, **{f"{role}_value": 1.0})
    assert sorted(p.name for p in (output / "node_0").iterdir()) == \
        ["metrics.jsonl", "server-metrics.jsonl"]
    assert list(lines(output / "node_0" / "metrics.jsonl")[0])[-1] == "trainer_value"
    assert list(lines(output / "node_0" / "server-metrics.jsonl")[0])[-1] == "pserver_value"


def test_a_pserver_without_its_index_is_told_so(output, monkeypatch):
    monkeypatch.setenv("TRAINING_ROLE", "PSERVER")
    with pytest.raises(ValueError, match="PADDLE_PSERVER_ID is not set"):
        report(step=1, loss=0.5)


def test_nan_and_infinities_are_written_as_null(output):
    report(step=3, loss=math.nan, grad=math.inf, lr=-math.inf, ok=1.5)
    path = output / "node_0" / "metrics.jsonl"
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    line = lines(path)[0]
    assert (line["loss"], line["grad"], line["lr"], line["ok"]) == (None, None, None, 1.5)


def test_numpy_scalars_and_one_element_arrays_are_numbers(output):
    report(step=np.int64(4), loss=np.float32(0.5), count=np.int64(12),
           mean=np.array(0.25), single=np.array([3.5]), bad=np.float64("nan"))
    line = lines(output / "node_0" / "metrics.jsonl")[0]
    assert line["step"] == 4
    assert (line["loss"], line["count"], line["mean"], line["single"], line["bad"]) == \
        (0.5, 12, 0.25, 3.5, None)
    assert isinstance(line["count"], int)


def test_a_paddle_tensor_is_a_number(output):
    paddle = pytest.importorskip("paddle")
    report(step=paddle.to_tensor(2), loss=paddle.to_tensor(0.75))
    line = lines(output / "node_0" / "metrics.jsonl")[0]
    assert (line["step"], line["loss"]) == (2, 0.75)


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: report(step=-1, loss=1.0), ValueError, "step must be a whole number >= 0, got -1"),
    (lambda: report(step=1.5, loss=1.0), TypeError,
     "step must be a whole number >= 0, got 1.5 (float)"),
    (lambda: report(step=2.0, loss=1.0), TypeError,
     "step must be a whole number >= 0, got 2.0 (float)"),
    (lambda: report(step="3", loss=1.0), TypeError,
     "step must be a whole number >= 0, got '3' (str)"),
    (lambda: report(step=True, loss=1.0), TypeError,
     "step must be a whole number >= 0, got True (bool)"),
    (lambda: report(step=None, loss=1.0), TypeError,
     "step must be a whole number >= 0, got None (NoneType)"),
    (lambda: report(step=1), TypeError, "report() needs at least one metric"),
    (lambda: report(step=1, time=5.0), ValueError, "metric name 'time'"),
    (lambda: report(step=1, **{"val/loss": 1.0}), ValueError, "metric name 'val/loss'"),
    (lambda: report(step=1, **{"": 1.0}), ValueError, "metric name ''"),
    (lambda: report(step=1, loss="0.5"), TypeError,
     "metric 'loss' must be a number (int, float, numpy scalar or one-element tensor), "
     "got '0.5' (str)"),
    (lambda: report(step=1, loss=None), TypeError, "metric 'loss' must be a number"),
    (lambda: report(step=1, done=True), TypeError,
     "metric 'done' must be a number (int, float, numpy scalar or one-element tensor), "
     "got True (bool)"),
    (lambda: report(step=1, done=np.bool_(True)), TypeError, "metric 'done' must be a number"),
    (lambda: report(step=1, loss=[0.5]), TypeError, "metric 'loss' must be a number"),
    (lambda: report(step=1, loss=1 + 2j), TypeError, "metric 'loss' must be a number"),
    (lambda: report(step=1, loss=np.array([0.5, 0.25])), TypeError,
     "metric 'loss' must be a single number, got a ndarray of shape (2,)"),
])
def test_a_bad_call_names_the_argument_and_the_rule(output, call, error, message):
    with pytest.raises(error) as raised:
        call()
    assert message in str(raised.value)
    assert not output.exists()  # nothing written, not even the directory


def test_a_bad_call_writes_nothing_even_after_good_ones(output):
    report(step=1, loss=1.0)
    with pytest.raises(TypeError):
        report(step=2, loss=0.5, note="text")
    assert [line["step"] for line in lines(output / "node_0" / "metrics.jsonl")] == [1]


def test_a_trainer_process_reports_with_the_standard_library_alone(tmp_path):
    """As in a trainer's image: a fresh process with the contract's variables, importing
    nothing of the portal (neither Django nor paddlectl's dependencies)."""
    import os
    import subprocess
    import sys

    code = ("import sys; from paddlecloud_sdk import report; report(step=1, loss=0.5); "
            "bad = sorted(m for m in ('django', 'requests', 'yaml', 'paddlectl', 'jobs') "
            "if m in sys.modules); print(bad)")
    environ = {"PATH": os.environ["PATH"], "PADDLE_OUTPUT_DIR": str(tmp_path / "out"),
               "JOB_NAME": "fit-a-line", "TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "2"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=environ, cwd=tmp_path)
    assert out.stdout.strip() == "[]", out
    assert [line["loss"] for line in lines(tmp_path / "out" / "node_2" / "metrics.jsonl")] == [0.5]
