"""The SDK against a live portal: real HTTP (uvicorn), the Celery worker, jobs run by the local
backend with the portal's Python — so the trainers import the SDK too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from jobs.models import Replica
from paddlecloud_sdk import PaddleJob
from paddlecloud_sdk.errors import ApiError, JobSpecError, JobTimeoutError
from tests.factories import HOME

pytestmark = pytest.mark.django_db(transaction=True)

TRAIN = """\
import json
import sys

from paddlecloud_sdk import env

out = env.output_dir()
out.mkdir(parents=True, exist_ok=True)
for step in range(3):
    print(f"step {step}")
print(f"sdk trainer {env.trainer_id()}/{env.trainer_count()} passes {env.num_passes()} "
      f"job {env.job_name()} dc {env.datacenter()}")
(out / f"trainer-{env.trainer_id()}.json").write_text(json.dumps(env.summary()))
sys.exit(0)
"""

SLEEP = """\
import time

print("sleeping", flush=True)
time.sleep(600)
"""

DIST_TRAIN = """\
import json

from paddlecloud_sdk import PaddleJob, dist_train, env


def trainer(reader, num_passes):
    out = env.output_dir()
    out.mkdir(parents=True, exist_ok=True)
    samples = list(reader())
    (out / f"trained-{env.trainer_id()}.json").write_text(
        json.dumps({"passes": num_passes, "samples": samples}))
    print(f"trainer {env.trainer_id()} trained {num_passes} passes on {samples}")


def reader():
    return iter(range(env.trainer_id(), 10, env.trainer_count()))


job = PaddleJob(job_name="sdk-dist", entry_point="python train.py", trainer_package=".",
                trainers=2)
result = dist_train(trainer, reader, num_passes=3, paddle_job=job)
if not env.in_job():
    print(f"submitted {result.name} ({result.state})")
"""


def package(tmp_path, name: str, files: dict[str, str]):
    root = tmp_path / name
    root.mkdir()
    for file, text in files.items():
        (root / file).write_text(text)
    return root


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition, timeout: float = 30, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.2)


def test_submit_follow_wait(live_portal, sdk_config, celery_worker, tmp_path):
    pkg = package(tmp_path, "pkg", {"train.py": TRAIN, "README": "x"})
    job = PaddleJob(job_name="sdk-job", entry_point="python train.py", trainer_package=pkg,
                    trainers=2, passes=3, env={"GREETING": "hi"}, memory="512Mi")
    assert job.submit() is job
    assert job.info["name"] == "sdk-job"
    assert job.info["package"] == "/pfs/datacenter1/home/alice/jobs/sdk-job/pkg"
    assert job.info["state"] in ("pending", "starting", "running")
    assert job.info["env"] == {"GREETING": "hi"}
    assert job.info["memory"] == "512Mi"
    uploaded = live_portal.home / "jobs" / "sdk-job" / "pkg"
    assert sorted(p.name for p in uploaded.iterdir()) == ["README", "train.py"]

    followed = list(job.logs(follow=True))  # until trainer-0 ends
    assert followed[:3] == ["step 0", "step 1", "step 2"]
    assert "sdk trainer 0/2 passes 3 job sdk-job dc datacenter1" in followed

    assert job.wait(timeout=60, poll=0.2) == "succeeded"
    assert job.status() == "succeeded" and job.state == "succeeded"
    workers = job.workers()
    assert [(w["name"], w["state"], w["exit_code"]) for w in workers] == [
        ("trainer-0", "succeeded", 0), ("trainer-1", "succeeded", 0)]
    assert "sdk trainer 1/2 passes 3 job sdk-job dc datacenter1" in \
        list(job.logs(worker="trainer-1"))
    assert list(job.logs(tail=1)) == ["sdk trainer 0/2 passes 3 job sdk-job dc datacenter1"]
    assert [e["to_state"] for e in job.events() if e["worker"] is None][-1] == "succeeded"

    output = live_portal.home / "jobs" / "sdk-job" / "output"
    summary = json.loads((output / "trainer-1.json").read_text())
    assert summary["in_job"] is True
    assert (summary["trainer_id"], summary["trainer_count"], summary["num_passes"]) == (1, 2, 3)
    # what the trainer sees: its output at its PFS path (the sandbox binds the home there)
    assert summary["output_dir"] == "/pfs/datacenter1/home/alice/jobs/sdk-job/output"

    attached = PaddleJob.attach("sdk-job")
    assert attached.state == "succeeded" and attached.trainers == 2
    assert attached.env == {"GREETING": "hi"}
    assert attached.kill() == "succeeded"  # it ended already: nothing to kill
    attached.delete()
    with pytest.raises(ApiError) as caught:
        job.status()
    assert (caught.value.status, caught.value.code) == (404, "not_found")


def test_kill_a_long_job(live_portal, sdk_config, celery_worker, tmp_path):
    pkg = package(tmp_path, "sleeper", {"sleep.py": SLEEP})
    job = PaddleJob(job_name="sleeper", entry_point="python sleep.py", trainer_package=pkg)
    job.submit()
    with pytest.raises(JobTimeoutError) as caught:
        job.wait(timeout=0.5, poll=0.1)
    assert isinstance(caught.value, TimeoutError)
    wait_for(lambda: "sleeping" in list(job.logs()), what="log line")
    wait_for(lambda: job.status() == "running", what="running job")
    assert job.kill() == "killed"
    assert job.wait(timeout=30) == "killed"
    wait_for(lambda: job.workers()[0]["state"] == "killed", what="killed worker")
    assert job.kill() == "killed"  # again: nothing to do
    # The replica's process group on this machine (its runner's pid): empty once it is killed.
    group = int(Replica.objects.get(job__name="sleeper").backend_ref.removeprefix("pid:"))
    wait_for(lambda: not group_alive(group), what="end of the trainer's processes")


def test_mistakes_cost_no_upload(live_portal, sdk_config, celery_worker, tmp_path):
    first = package(tmp_path, "first", {"train.py": TRAIN})
    PaddleJob(job_name="taken", entry_point="python train.py", trainer_package=first).submit()
    uploaded = live_portal.home / "jobs" / "taken" / "first"
    assert (uploaded / "train.py").exists()

    second = package(tmp_path, "second", {"other.py": "print(1)"})
    with pytest.raises(ApiError) as caught:
        PaddleJob(job_name="taken", entry_point="python other.py",
                  trainer_package=second).submit()
    assert caught.value.code == "invalid" and set(caught.value.fields) == {"name"}
    assert "already have a job named 'taken'" in str(caught.value)
    assert not (uploaded.parent / "second").exists()
    assert sorted(p.name for p in uploaded.iterdir()) == ["train.py"]  # untouched

    # The portal's rules are applied before anything is sent (paddlecloud_core.spec).
    with pytest.raises(JobSpecError) as caught:
        PaddleJob(job_name="reserved", entry_point="python train.py", trainer_package=first,
                  env={"TRAINER_ID": "3"}).submit()
    assert set(caught.value.fields) == {"env.TRAINER_ID"}
    assert "reserved" in str(caught.value)
    assert not (live_portal.home / "jobs" / "reserved").exists()


def test_a_package_already_in_pfs(live_portal, sdk_config, celery_worker):
    pkg = live_portal.home / "packages" / "quick"
    pkg.mkdir(parents=True)
    (pkg / "train.py").write_text(TRAIN)
    job = PaddleJob(job_name="in-pfs", entry_point="python train.py",
                    trainer_package=f"{HOME}/packages/quick").submit()
    assert job.info["package"] == "/pfs/datacenter1/home/alice/packages/quick"
    assert job.wait(timeout=60, poll=0.2) == "succeeded"
    # Not uploaded: copied into the job's directory as it was submitted, its snapshot.
    assert sorted(p.name for p in (live_portal.home / "jobs" / "in-pfs").iterdir()) == [
        "checkpoints", "output", "package"]
    assert job.info["package_snapshot"] == f"{HOME}/jobs/in-pfs/package"
    assert (live_portal.home / "jobs" / "in-pfs" / "package" / "train.py").read_text() == TRAIN


def test_dist_train_submits_from_a_laptop_and_trains_in_the_job(live_portal, sdk_config,
                                                                celery_worker, tmp_path):
    pkg = package(tmp_path, "dist", {"train.py": DIST_TRAIN})
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "train.py"], cwd=pkg, env=environ,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("submitted sdk-dist ("), run.stdout
    assert run.stderr == ""  # the SDK never prints

    job = PaddleJob.attach("sdk-dist")
    assert job.info["package"] == "/pfs/datacenter1/home/alice/jobs/sdk-dist/dist"
    assert job.info["package_snapshot"] == job.info["package"]  # the upload: nothing copied
    assert job.info["passes"] == 3  # dist_train's num_passes
    assert job.wait(timeout=60, poll=0.2) == "succeeded", \
        textwrap.indent("\n".join(job.logs()), "  ")
    output = live_portal.home / "jobs" / "sdk-dist" / "output"
    trained = {i: json.loads((output / f"trained-{i}.json").read_text()) for i in (0, 1)}
    assert trained == {0: {"passes": 3, "samples": [0, 2, 4, 6, 8]},
                       1: {"passes": 3, "samples": [1, 3, 5, 7, 9]}}
    assert "trainer 1 trained 3 passes on [1, 3, 5, 7, 9]" in list(job.logs(worker="trainer-1"))
