"""paddlecloud_sdk.checkpoint in this process, on a real directory: what a save writes, what
``latest()`` takes and what it skips, pruning, and who writes in a collective job. (A job
killed and restarted through the portal resumes from them: tests/jobs/test_checkpoints.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest

from paddlecloud_core.layout import checkpoint_dirname
from paddlecloud_sdk import checkpoint
from tests.polling import wait


@pytest.fixture
def ckpt(tmp_path, monkeypatch):
    where = tmp_path / "checkpoints"
    monkeypatch.setenv("PADDLE_CHECKPOINT_DIR", str(where))
    monkeypatch.setenv("PADDLE_OUTPUT_DIR", str(tmp_path / "out"))
    return where


def steps(where) -> list[str]:
    return sorted(os.listdir(where))


def test_a_save_is_a_step_directory_with_its_manifest_and_loads_back(ckpt):
    assert checkpoint.load() is None  # a first start
    written = checkpoint.save(b"weights-1", 10, pass_=0)
    assert written == ckpt / "step-000000000010"
    assert steps(ckpt) == ["step-000000000010"]  # nothing half written left beside it
    manifest = json.loads((written / "manifest.json").read_text())
    assert set(manifest) == {"format", "step", "pass", "time", "job", "job_uid", "trainers",
                             "kind", "files", "master"}
    assert (manifest["step"], manifest["pass"], manifest["kind"], manifest["master"]) == (
        10, 0, "bytes", None)
    assert manifest["files"] == {"state.bin": {
        "size": 9, "sha256": hashlib.sha256(b"weights-1").hexdigest()}}

    checkpoint.save(b"weights-2", 20)
    found = checkpoint.load()
    assert (found.step, found.pass_, found.state) == (20, None, b"weights-2")


def test_files_of_any_framework_and_paddle_state_dicts(ckpt, tmp_path):
    (tmp_path / "opt.npz").write_bytes(b"npz bytes")
    checkpoint.save({"model.bin": b"m", "opt.npz": tmp_path / "opt.npz"}, 1)
    assert checkpoint.load().state == {"model.bin": b"m", "opt.npz": b"npz bytes"}

    paddle = pytest.importorskip("paddle")
    layer = paddle.nn.Linear(3, 1)
    checkpoint.save({"model": layer.state_dict()}, 2)
    found = checkpoint.load()
    assert found.kind == "paddle" and list(found.files) == ["state.pdparams"]
    other = paddle.nn.Linear(3, 1)
    other.set_state_dict(found.state["model"])
    assert (other.weight.numpy() == layer.weight.numpy()).all()


@pytest.mark.parametrize("damage", ["a byte changed", "truncated", "no manifest",
                                    "manifest not json", "another step's manifest"])
def test_a_corrupt_or_partial_latest_is_skipped_for_the_one_before(ckpt, capsys, damage):
    checkpoint.save(b"good", 5)
    newest = checkpoint.save(b"newer", 6)
    state = newest / "state.bin"
    if damage == "a byte changed":
        state.write_bytes(b"nEwer")
    elif damage == "truncated":
        state.write_bytes(b"new")
    elif damage == "no manifest":
        (newest / "manifest.json").unlink()
    elif damage == "manifest not json":
        (newest / "manifest.json").write_text('{"step": 6, ')
    else:
        manifest = json.loads((newest / "manifest.json").read_text())
        (newest / "manifest.json").write_text(json.dumps({**manifest, "step": 7}))

    found = checkpoint.load()
    assert (found.step, found.state) == (5, b"good")  # never the damaged one
    err = capsys.readouterr().err
    assert "skipped the checkpoint of step 6" in err and "it is not loaded" in err
    metrics = (ckpt.parent / "out" / "node_0" / "metrics.jsonl").read_text().splitlines()
    # On the job's page, and the portal's events: saved 5 and 6, skipped 6, resumed from 5.
    assert [{k: v for k, v in json.loads(line).items() if k != "time"}
            for line in metrics] == [{"step": 5, "checkpoint": 5}, {"step": 6, "checkpoint": 6},
                                     {"step": 6, "checkpoint_skipped": 1},
                                     {"step": 5, "checkpoint_resumed": 1}]


def test_one_being_written_is_never_taken(ckpt):
    checkpoint.save(b"done", 3)
    # What a trainer killed while saving step 4 leaves.
    half = ckpt / ".step-000000000004.tmp-dead"
    half.mkdir()
    (half / "state.bin").write_bytes(b"half")
    assert checkpoint.latest().step == 3
    checkpoint.save(b"next", 4)  # the next save clears it away
    assert steps(ckpt) == ["step-000000000003", "step-000000000004"]


def test_the_oldest_are_removed_to_keep_the_jobs_number(ckpt, monkeypatch):
    monkeypatch.setenv("PADDLE_KEEP_CHECKPOINTS", "2")
    for step in (1, 2, 3, 4):
        checkpoint.save(str(step).encode(), step)
    assert steps(ckpt) == [checkpoint_dirname(3), checkpoint_dirname(4)]
    checkpoint.save(b"again", 4)  # the same step saved again (after a resume) replaces it
    assert checkpoint.load().state == b"again"
    assert steps(ckpt) == [checkpoint_dirname(3), checkpoint_dirname(4)]


def test_bad_arguments_say_the_rule(ckpt, monkeypatch):
    with pytest.raises(ValueError, match="step must be a whole number from 0"):
        checkpoint.save(b"x", -1)
    with pytest.raises(ValueError, match="not hidden"):
        checkpoint.save({"../x": b"x"}, 1)
    monkeypatch.setenv("PADDLE_KEEP_CHECKPOINTS", "0")
    with pytest.raises(ValueError, match="PADDLE_KEEP_CHECKPOINTS='0'"):
        checkpoint.save(b"x", 1)
    assert not ckpt.exists() or steps(ckpt) == []


def test_in_a_collective_job_trainer_0_writes_and_all_wait_for_each_other(ckpt, monkeypatch):
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    calls = []
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    assert checkpoint.save(b"s", 7, barrier=lambda: calls.append(1)) is None
    assert calls == [1, 1] and not ckpt.exists()  # before and after; nothing written
    monkeypatch.setenv("PADDLE_TRAINER_ID", "0")
    assert checkpoint.save(b"s", 7, barrier=lambda: calls.append(0)) == ckpt / \
        checkpoint_dirname(7)
    assert calls == [1, 1, 0, 0]
    # Without paddle.distributed's group (nor a barrier given) the trainers could not agree.
    with pytest.raises(RuntimeError, match="init_parallel_env"):
        checkpoint.save(b"s", 8)


def test_a_new_run_of_a_name_takes_and_prunes_none_of_an_earlier_runs_left_beside_it(
        ckpt, monkeypatch, capsys):
    """Where the portal could not set an earlier job's checkpoints aside (a cluster whose
    portal does not mount the PFS), a job submitted again under the name starts from none of
    them, never prunes them, and keeps the one a save of the same step would replace."""
    monkeypatch.setenv("PADDLE_JOB_UID", "run-a")
    checkpoint.save(b"a-10", 10, keep_last=3)
    checkpoint.save(b"a-20", 20, keep_last=3)
    monkeypatch.setenv("PADDLE_JOB_UID", "run-b")
    assert checkpoint.load() is None  # not run a's, however new
    assert "it is another run's of the name (job uid run-a)" in capsys.readouterr().err
    checkpoint.save(b"b-5", 5, keep_last=1)
    assert steps(ckpt) == ["step-000000000005", "step-000000000010", "step-000000000020"]
    checkpoint.save(b"b-20", 20, keep_last=1)  # run a's step 20 is kept aside, not replaced
    assert steps(ckpt) == ["step-000000000010", "step-000000000020"]
    aside = ckpt.parent / "checkpoints-run-a" / "step-000000000020"
    assert (aside / "state.bin").read_bytes() == b"a-20"
    assert checkpoint.load().state == b"b-20"
    monkeypatch.setenv("PADDLE_JOB_UID", "run-a")  # run a, restarted: its own again
    assert checkpoint.load().state == b"a-10"


def test_a_job_resumed_from_another_takes_its_checkpoint_until_it_has_its_own(
        ckpt, tmp_path, monkeypatch, capsys):
    """``PADDLE_RESUME_FROM`` (``-resume-from``): ``load()`` takes that checkpoint of another
    job — its job uid is the other's, which is expected here — while the job has none of its
    own that verifies; once it has, its own; a damaged one given is skipped and said so."""
    other = tmp_path / "other" / "checkpoints"
    monkeypatch.setenv("PADDLE_JOB_UID", "base-run")
    given = checkpoint.save(b"base", 40, path=other)
    monkeypatch.setenv("PADDLE_JOB_UID", "tuned-run")
    monkeypatch.setenv("PADDLE_RESUME_FROM", str(given))
    found = checkpoint.load()
    assert (found.path, found.step, found.state) == (given, 40, b"base")
    assert "skipped" not in capsys.readouterr().err

    mine = checkpoint.save(b"mine", 50)
    assert [c.path for c in checkpoint.checkpoints()] == [mine]  # the given one: not its own
    assert checkpoint.load().state == b"mine"
    assert sorted(os.listdir(other)) == [given.name]  # never written nor pruned

    (mine / "state.bin").write_bytes(b"mIne")  # its own damaged: the given one again
    assert checkpoint.load().state == b"base"
    (given / "state.bin").write_bytes(b"bAse")
    assert checkpoint.load() is None
    err = capsys.readouterr().err
    assert f"skipped the checkpoint of step 40 ({given})" in err


# --- what preemption needs (issue 37 point 5) --------------------------------------------------

def test_each_save_is_reported_as_a_metric_the_portal_reads_its_time_from(ckpt, tmp_path):
    checkpoint.save(b"w", 7)
    checkpoint.save(b"w", 9)
    metrics = tmp_path / "out" / "node_0" / "metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [(line["step"], line["checkpoint"]) for line in lines] == [(7, 7), (9, 9)]
    assert all(isinstance(line["time"], float) for line in lines)


SAVES_ON_PREEMPT = """\
import os, sys, time
from paddlecloud_sdk import checkpoint
step = 3
checkpoint.save_on_preempt(lambda: checkpoint.save(b"at the warning", step))
step = 5  # the callback sees the step of when it is called
open(sys.argv[1], "w").close()
time.sleep(60)
"""


def test_save_on_preempt_saves_when_warned_then_exits_as_sigterm_would(ckpt, tmp_path):
    ready = tmp_path / "ready"
    trainer = subprocess.Popen([sys.executable, "-c", SAVES_ON_PREEMPT, str(ready)])
    try:
        wait(ready.exists, 30, "the trainer to install its handler")
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(30) == 143
    finally:
        trainer.kill()
        trainer.wait()
    found = checkpoint.load()
    assert (found.step, found.state) == (5, b"at the warning")
