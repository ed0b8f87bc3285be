"""Checkpoints as a contract of the platform (issue 37), on the local backend through the
running portal (a real Celery worker on Redis, real processes, real PostgreSQL): where a job's
checkpoints live and what its replicas are told of them."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter

import pytest

from jobs.files import checkpoints_dir, home_dir, output_dir
from jobs.models import Job, JobEvent
from jobs.services import job_delete
from paddlecloud_core.layout import OUTPUT_MARKER, checkpoint_dirname, checkpoints_aside
from tests.conftest import assert_error
from tests.factories import PACKAGE, package_write, submit_job
from tests.jobs.master_scenario import FINAL, recordio_dataset_write, state
from tests.polling import wait

transactional = pytest.mark.django_db(transaction=True)

# Writes what it was told of checkpoints into its output, and what it found in the directory
# named; leaves a file there.
TELLING_TRAINER = """\
import json, os
ckpt = os.environ["PADDLE_CHECKPOINT_DIR"]
seen = sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else None
with open(os.path.join(ckpt, "left-by-" + os.environ["TRAINER_ID"]), "w") as f:
    f.write("x")
out = os.environ["PADDLE_OUTPUT_DIR"]
with open(os.path.join(out, "told-" + os.environ["TRAINER_ID"] + ".json"), "w") as f:
    json.dump({"dir": ckpt, "keep": os.environ["PADDLE_KEEP_CHECKPOINTS"], "seen": seen}, f)
"""


def ended(job: Job) -> Job:
    wait(lambda: state(job) in FINAL, 60, lambda: f"the job to end: {list(job.events.all())}")
    return job


def told(job: Job, trainer: int) -> dict:
    return json.loads((output_dir(job) / f"told-{trainer}.json").read_text())


@transactional
@pytest.mark.package(TELLING_TRAINER)
def test_every_replica_gets_its_jobs_checkpoint_directory_and_how_many_to_keep(
        celery_worker, submit, pfs_home):
    job = ended(submit("ckpt", trainers=2, keep_checkpoints=5))
    assert job.state == "succeeded", list(job.events.all())
    where = pfs_home / "jobs" / "ckpt" / "checkpoints"
    assert checkpoints_dir(job) == where
    for trainer in (0, 1):  # at its PFS path in the sandbox, as users write it
        assert told(job, trainer)["dir"] == "/pfs/datacenter1/home/alice/jobs/ckpt/checkpoints"
        assert told(job, trainer)["keep"] == "5"
        assert OUTPUT_MARKER in told(job, trainer)["seen"]  # made before any replica started
    assert sorted(p.name for p in where.iterdir()) == [OUTPUT_MARKER, "left-by-0", "left-by-1"]


@transactional
@pytest.mark.package(TELLING_TRAINER)
def test_a_new_job_of_a_name_starts_with_none_of_the_earlier_ones_checkpoints(
        celery_worker, submit, alice, datacenter):
    first = ended(submit("again"))
    assert first.state == "succeeded", list(first.events.all())
    assert told(first, 0)["keep"] == "3"  # the default
    job_delete(alice, datacenter, "again")

    second = ended(submit("again"))
    assert second.state == "succeeded", list(second.events.all())
    assert told(second, 0)["seen"] == [OUTPUT_MARKER]  # not the first one's
    kept = home_dir(second) / "jobs" / "again" / checkpoints_aside(str(first.uid))
    assert (kept / "left-by-0").is_file()  # set aside, not lost


def test_keep_checkpoints_out_of_range_is_refused_naming_the_field(token_client, package):
    for value in (0, -1, 1001, "many"):
        response = token_client.post("/api/v1/jobs/", {
            "name": "ckpt", "package": PACKAGE, "entry": "python train.py",
            "keep_checkpoints": value}, format="json")
        body = assert_error(response, 400, "invalid", "keep_checkpoints")
        assert "keep_checkpoints: " in body["message"]
        if value != "many":
            assert "between 1 and 1000" in body["message"], body
    assert not Job.objects.exists()


# --- a job killed mid-run resumes from its latest complete checkpoint --------------------------

# One trainer reading the job's dataset through its master, a record a step; its "model" is
# every record it has trained, by pass, saved every EVERY steps (a bytes state); at its end it
# writes the model. Each run notes the step it started from. While ``hold`` exists in the
# output a start waits (the test damages a checkpoint meanwhile).
RESUMING_TRAINER = """\
import json, os, time
from paddlecloud_sdk import checkpoint, master
out = os.environ["PADDLE_OUTPUT_DIR"]
every, slow = int(os.environ["EVERY"]), float(os.environ["SLOW"])
while os.path.exists(os.path.join(out, "hold")):
    time.sleep(0.05)
resumed = checkpoint.load()
model = json.loads(resumed.state) if resumed else {"0": [], "1": []}
step = resumed.step if resumed else 0
with open(os.path.join(out, "starts.txt"), "a") as f:
    f.write(f"{step}\\n")
for task in master.tasks():
    for record in task:
        model[str(task["pass"])].append(record.decode())
        step += 1
        if step % every == 0:
            checkpoint.save(json.dumps(model).encode(), step, pass_=task["pass"])
        time.sleep(slow)
with open(os.path.join(out, "model.json"), "w") as f:
    json.dump(model, f)
"""


def saved_steps(job: Job) -> list[int]:
    return sorted(int(p.name.removeprefix("step-")) for p in checkpoints_dir(job).glob("step-*"))


@transactional
@pytest.mark.parametrize("damaged", [False, True], ids=["latest", "latest-corrupt"])
def test_a_trainer_killed_mid_run_resumes_from_the_latest_complete_checkpoint(
        live_portal, settings, celery_worker, damaged):
    """Killed (SIGKILL, its whole process group) once it has saved a few checkpoints, the
    trainer is restarted by the portal and goes on from the newest complete checkpoint (the
    one before when the newest is corrupt, which is skipped and said so in its log), not
    step 0; the master goes back to where that checkpoint left the pass, so every record is
    in the final model exactly once a pass — none lost, none twice — though the checkpoints
    fall mid-task (every 30 records, tasks of 20)."""
    settings.PADDLECLOUD_PORTAL_URL = live_portal.url
    package_write(live_portal.home, RESUMING_TRAINER)
    dataset = recordio_dataset_write(live_portal.home)
    job = submit_job(live_portal.user, live_portal.datacenter, "resumer", passes=2,
                     restart_limit=1, keep_checkpoints=2, dataset=dataset, task_records=20,
                     env={"EVERY": "30", "SLOW": "0.01"})
    wait(lambda: saved_steps(job) and saved_steps(job)[-1] >= 300, 120,
         lambda: f"checkpoints past step 300: {saved_steps(job)}, {list(job.events.all())}")
    (output_dir(job) / "hold").touch()
    trainer = job.replicas.get()
    os.killpg(int(trainer.backend_ref.removeprefix("pid:")), signal.SIGKILL)
    wait(lambda: (output_dir(job) / "node_0" / "train.log").read_text().count(
        "--- restart 1 ---"), 60, "the trainer to be restarted")
    kept = saved_steps(job)
    # keep_checkpoints, and one more when the kill fell between a save and its pruning (the
    # next save prunes it)
    assert len(kept) in (2, 3), kept
    expected = kept[-1]
    if damaged:
        newest = checkpoints_dir(job) / checkpoint_dirname(kept[-1]) / "state.bin"
        newest.write_bytes(newest.read_bytes()[:-1] + b"!")
        expected = kept[-2]
    (output_dir(job) / "hold").unlink()

    wait(lambda: state(job) in FINAL, 180, lambda: f"the job to end: {list(job.events.all())}")
    assert job.state == "succeeded", list(job.events.all())
    starts = (output_dir(job) / "starts.txt").read_text().split()
    assert starts == ["0", str(expected)]  # from the checkpoint, not from step 0
    log = (output_dir(job) / "node_0" / "train.log").read_text()
    assert (f"skipped the checkpoint of step {kept[-1]}" in log) == damaged
    model = json.loads((output_dir(job) / "model.json").read_text())
    every_record = Counter(f"r{n}" for n in range(1000))
    for pass_no in ("0", "1"):
        assert Counter(model[pass_no]) == every_record, pass_no  # once each, none lost
    resumed = JobEvent.objects.filter(job=job, to_state="resumed").values_list("reason",
                                                                               flat=True)
    assert [r for r in resumed if f"checkpoint of step {expected} left it" in r], list(resumed)


@pytest.mark.django_db
def test_the_masters_position_and_resume_over_http(alice, datacenter, package, pfs_home):
    """What ``paddlecloud_sdk.checkpoint`` asks the master (docs/master.md): the position,
    after the holder said how far it read; a resume there hands the partly read task out
    with ``skip``; a position the master cannot take is a 400 naming the field and the
    rule."""
    from rest_framework.test import APIClient

    from jobs.master import dispatch

    dataset = recordio_dataset_write(pfs_home)
    job = submit_job(alice, datacenter, "pos", dataset=dataset, task_records=20)
    client = APIClient()
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {dispatch.master_token(job)}"}

    def call(action: str, body: dict):
        return client.post(f"/api/v1/master/{job.uid}/{action}", body, format="json", **bearer)

    assert call("position", {"trainer": 0}).json() == {"pass": None, "done": [], "read": {}}
    first = call("next", {"trainer": 0}).json()["task"]
    base = f"/api/v1/master/{job.uid}/tasks/{first['id']}"
    client.post(f"{base}/done", {"trainer": 0, "lease": first["lease"]}, format="json",
                **bearer)
    second = call("next", {"trainer": 0}).json()["task"]
    held = [{"task": second["id"], "lease": second["lease"], "read": 7}]
    position = call("position", {"trainer": 0, "held": held}).json()
    assert position == {"pass": 0, "done": [0], "read": {"1": 7}}

    assert call("resume", {"trainer": 0, "position": position, "step": 27}).json() == {
        "resumed": True, "pass": 0}
    again = call("next", {"trainer": 0}).json()["task"]
    assert (again["index"], again["skip"]) == (1, 7)  # the 7 records in the model: skipped

    for bad in ({"pass": -1, "done": [], "read": {}}, {"pass": 0, "done": "all", "read": {}},
                {"pass": 0, "done": [], "read": {"one": 3}}, "step 3"):
        response = call("resume", {"trainer": 0, "position": bad})
        body = assert_error(response, 400, "invalid", "position")
        assert "as /position answered" in body["message"] or "from 0" in body["message"]
    assert_error(call("position", {"trainer": 0, "held": "all"}), 400, "invalid", "held")
