"""A job's checkpoints seen where users look (issue 37, point 4), on the local backend through
the running portal (a real Celery worker on Redis, real processes, real PostgreSQL): the API
and the job page list them and mark the step each run resumed from; the job's events say
"resumed from step N (lost M steps)" and name a corrupt checkpoint skipped; the usage ledger,
and so the budgets, count what a restart lost."""

from __future__ import annotations

import json
import os
import signal

import pytest

from accounts.models import Budget
from jobs.files import checkpoints_dir, output_dir
from jobs.models import Job, Usage
from jobs.resumes import resumes_note
from notifications.models import Subscription
from paddlecloud_core.layout import checkpoint_dirname
from tests.conftest import assert_error
from tests.factories import job_row
from tests.jobs.master_scenario import FINAL, state
from tests.polling import wait

transactional = pytest.mark.django_db(transaction=True)

# Trains STEPS steps, reporting a loss at each and saving every 10; the first run stops at
# step 35 (reported) and waits there to be killed. Each run notes the step it started from.
RESTARTED_TRAINER = """\
import json, os, time
from paddlecloud_sdk import checkpoint, report
out = os.environ["PADDLE_OUTPUT_DIR"]
resumed = checkpoint.load()
step = resumed.step if resumed else 0
with open(os.path.join(out, "starts.txt"), "a") as f:
    f.write(f"{step}\\n")
first = not resumed and step == 0 and not os.path.exists(os.path.join(out, "paused"))
while step < 60:
    step += 1
    report(step=step, loss=1.0 / step)
    if step % 10 == 0:
        checkpoint.save(json.dumps({"step": step}).encode(), step, pass_=step // 30)
    if step == 35 and not os.path.exists(os.path.join(out, "paused")):
        open(os.path.join(out, "paused"), "w").close()
        time.sleep(600)
    time.sleep(0.01)
"""


def events(job: Job) -> list[str]:
    return list(job.events.values_list("reason", flat=True))


@transactional
@pytest.mark.package(RESTARTED_TRAINER)
@pytest.mark.parametrize("damaged", [False, True], ids=["latest", "latest-corrupt"])
def test_a_restarted_jobs_checkpoints_events_and_loss_are_shown(
        celery_worker, submit, alice, client, damaged):
    """Killed at step 35 (checkpoints at 10, 20, 30), the trainer resumes from step 30 — or
    from 20 when 30 is damaged — and runs to step 60. The API lists every checkpoint, newest
    first, with its pass, time and size, and marks the one run 2 resumed from; the job's
    events say "run 2 resumed from step 30 (lost 5 steps)" (15 from step 20), and that the
    damaged one was skipped; run 1's usage row lost 5 (15) steps and the seconds since that
    checkpoint; the job page shows the list and the mark."""
    job = submit("again", restart_limit=1, keep_checkpoints=10)
    told = Subscription.objects.create(owner=alice, datacenter=job.datacenter,
                                       events=["job.resumed"], channel="dashboard")
    wait(lambda: (output_dir(job) / "paused").exists(), 60,
         lambda: f"the trainer to reach step 35: {events(job)}")
    trainer = job.replicas.get()
    if damaged:
        state_file = checkpoints_dir(job) / checkpoint_dirname(30) / "state.bin"
        state_file.write_bytes(state_file.read_bytes()[:-1])  # cut short
    os.killpg(int(trainer.backend_ref.removeprefix("pid:")), signal.SIGKILL)
    wait(lambda: state(job) in FINAL, 120, lambda: f"the job to end: {events(job)}")
    assert job.state == "succeeded", events(job)
    resumed_from, lost = (20, 15) if damaged else (30, 5)
    starts = (output_dir(job) / "starts.txt").read_text().split()
    assert starts == ["0", str(resumed_from)]

    # What the reconciler does every 15 s (also for a run that ended since: this one ran on).
    wait(lambda: resumes_note() >= 0 and Usage.objects.filter(
        job_key=job.pk, resumed_from__isnull=False).exists(), 30,
        lambda: f"the resume to be noted: {events(job)}")
    reasons = events(job)
    assert f"run 2 resumed from step {resumed_from} (lost {lost} steps)" in reasons, reasons
    # Who subscribed to job.resumed is told, once, in the words of the event.
    assert [(n.kind, n.payload["text"]) for n in told.notifications.all()] == [
        ("job.resumed", f"job alice/again: run 2 resumed from step {resumed_from} "
                        f"(lost {lost} steps)")]
    skipped = [r for r in reasons if "skipped the checkpoint of step 30" in r]
    assert len(skipped) == (1 if damaged else 0), reasons

    first, second = Usage.objects.filter(job_key=job.pk).order_by("attempt")
    assert (first.lost_steps, second.lost_steps) == (lost, None)
    assert 0 < first.lost_seconds <= (first.ended_at - first.started_at).total_seconds()
    assert (first.resumed_from, second.resumed_from) == (None, resumed_from)

    client.force_login(alice)
    if damaged:  # run 2 saved step 30 again; one more damaged now is listed as such
        state_file = checkpoints_dir(job) / checkpoint_dirname(50) / "state.bin"
        state_file.write_bytes(state_file.read_bytes()[:-1])
    answer = client.get(f"/api/v1/jobs/again/checkpoints?datacenter={job.datacenter.name}")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    listed = body["checkpoints"]
    assert [c["step"] for c in listed] == [60, 50, 40, 30, 20, 10]
    by_step = {c["step"]: c for c in listed}
    assert by_step[50]["complete"] is not damaged
    if damaged:
        size = len(json.dumps({"step": 50}))
        assert by_step[50]["problem"] == (f"its file 'state.bin' has {size - 1} bytes, its "
                                          f"manifest says {size}")
    assert by_step[resumed_from]["resumed_by"] == [2]
    assert [c["step"] for c in listed if c["resumed_by"]] == [resumed_from]
    assert by_step[60]["pass"] == 2 and by_step[60]["size"] == len(json.dumps({"step": 60}))
    assert by_step[60]["path"] == ("/pfs/datacenter1/home/alice/jobs/again/checkpoints/"
                                   + checkpoint_dirname(60))
    assert [r["resumed_from"] for r in body["runs"]] == [None, resumed_from]
    assert [r["lost_steps"] for r in body["runs"]] == [lost, None]

    page = client.get("/jobs/again/").content.decode()
    assert 'id="checkpoints"' in page
    assert f'<tr data-step="{resumed_from}"><td class="num">{resumed_from}</td>' in page
    assert f"Run 2 resumed from step {resumed_from}." in page
    assert page.count('<span class="tag resumed">run 2</span>') == 1


@pytest.mark.django_db
def test_a_users_checkpoints_are_not_anothers(alice, make_user, datacenter, client, submit):
    """Another user asking for a job's checkpoints gets a 404, as for the rest of the job."""
    submit("mine")
    url = f"/api/v1/jobs/mine/checkpoints?datacenter={datacenter.name}"
    client.force_login(alice)
    assert client.get(url).json() == {
        "job": "mine", "directory": "/pfs/datacenter1/home/alice/jobs/mine/checkpoints",
        "resume_from": "", "checkpoints": [], "runs": []}
    client.force_login(make_user("bob"))
    answer = client.get(url)
    assert answer.status_code == 404
    assert answer.json()["message"] == "you have no job named 'mine' in datacenter " \
                                       "'datacenter1'"


@pytest.mark.django_db
def test_budgets_show_the_hours_lost_to_restarts(alice, datacenter, client):
    """The budgets' report counts, among the hours used, those lost to restarts (a run's
    last ``lost_seconds``, within the window)."""
    from django.utils import timezone

    Budget.objects.create(datacenter=datacenter, user=alice, cpu_hours=10, window="day")
    now = timezone.now()
    Usage.objects.create(owner=alice, datacenter=datacenter, job_key=1, job_name="fit",
                         replica_key=1, role="trainer", index=0, cpu=2000,
                         started_at=now - timezone.timedelta(hours=2),
                         ended_at=now - timezone.timedelta(hours=1), lost_seconds=1800,
                         lost_steps=70)
    client.force_login(alice)
    answer = client.get(f"/api/v1/quota/budgets?datacenter={datacenter.name}")
    assert answer.status_code == 200, answer.content
    (budget,) = answer.json()
    assert budget["cpu_hours"]["used"] == pytest.approx(2.0, abs=0.02)
    assert budget["cpu_hours"]["lost"] == pytest.approx(1.0, abs=0.02)
    page = client.get("/quota/").content.decode()
    assert "1.0 lost to restarts since a checkpoint" in page, json.dumps(budget)


# --- submit -resume-from JOB[:STEP]: a new job starts from another job's checkpoint ------------

def sdk_saves(job: Job, monkeypatch, steps, *, state=lambda step: json.dumps(
        {"step": step}).encode()) -> None:
    """Checkpoints of ``job`` written by the SDK's own ``save``, as its trainer 0 would."""
    from paddlecloud_sdk import checkpoint

    with monkeypatch.context() as env:
        env.setenv("PADDLE_CHECKPOINT_DIR", str(checkpoints_dir(job)))
        env.setenv("PADDLE_JOB_UID", str(job.uid))
        env.setenv("PADDLE_OUTPUT_DIR", str(output_dir(job)))
        env.setenv("PADDLE_KEEP_CHECKPOINTS", "10")
        for step in steps:
            checkpoint.save(state(step), step)


@pytest.mark.django_db
def test_resume_from_is_checked_at_submission_naming_the_field(
        token_client, package, submit, make_user, datacenter, monkeypatch):
    """Another job that is not the user's, a step it has no checkpoint of, a damaged one, a
    job without any: 400, each naming ``resume_from`` and the rule; nothing is made. Without
    a step, the latest complete one is taken, and the job shows it."""
    base = submit("base")
    sdk_saves(base, monkeypatch, [10, 20, 30])
    cut = checkpoints_dir(base) / checkpoint_dirname(30) / "state.bin"
    cut.write_bytes(b"{" + cut.read_bytes()[1:].replace(b"3", b"4"))  # same size, changed
    submit("empty")
    theirs = job_row(make_user("bob"), datacenter, "bobs")

    def refused(value, *words):
        response = token_client.post("/api/v1/jobs/", {
            "name": "next", "package": package, "entry": "python train.py",
            "resume_from": value}, format="json")
        body = assert_error(response, 400, "invalid", "resume_from")
        for word in words:
            assert word in body["fields"]["resume_from"][0], body
        assert not Job.objects.filter(name="next").exists()

    refused("nosuch", "you have no job named 'nosuch' in datacenter 'datacenter1'",
            "one of your own jobs")
    refused(theirs.name, "you have no job named 'bobs'")
    refused("base:15", "job base has no checkpoint of step 15 (its complete ones: 30, 20, "
                       "10)")
    refused("base:30", "the checkpoint of step 30 of job base is corrupt or partial: its file "
                       "'state.bin' does not have the digest its manifest says")
    refused("base", "corrupt or partial")  # its latest, 30, listed complete, is not whole
    refused("empty", "job empty has no complete checkpoint")
    refused("base:x1", "JOB or JOB:STEP", "the step is a whole number, not 'x1'")
    refused(":20", "JOB or JOB:STEP", "the job's name is missing")
    refused("Base", "JOB or JOB:STEP", "use lower-case letters")

    response = token_client.post("/api/v1/jobs/", {
        "name": "next", "package": package, "entry": "python train.py",
        "resume_from": "base:20"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["resume_from"] == "base:20"


# Started from another job's checkpoint: says what it was given and where it started, trains
# to step 30 saving every 10 (its own checkpoints).
STARTED_TRAINER = """\
import json, os
from paddlecloud_sdk import checkpoint, report
out = os.environ["PADDLE_OUTPUT_DIR"]
resumed = checkpoint.load()
with open(os.path.join(out, "started.json"), "w") as f:
    json.dump({"given": os.environ.get("PADDLE_RESUME_FROM"), "step": resumed.step,
               "state": json.loads(resumed.state)}, f)
step = resumed.step
while step < 30:
    step += 1
    report(step=step, loss=1.0 / step)
    if step % 10 == 0:
        checkpoint.save(json.dumps({"step": step, "from": resumed.step}).encode(), step)
"""


@transactional
@pytest.mark.package(STARTED_TRAINER)
def test_a_job_submitted_to_resume_from_another_starts_from_its_checkpoint(
        celery_worker, submit, alice, client, monkeypatch):
    """``resume_from: base`` takes base's latest complete checkpoint (12); the new job's
    trainer is given its path (read-only to it: the SDK never writes there) as it sees the
    home, ``load()`` takes it although its manifest's job uid is base's, and the job goes on
    with checkpoints of its own (20, 30) — base's are untouched. Its events say where it
    started, and its page."""
    base = submit("base")  # it fails (nothing to start from): the job a user re-runs
    wait(lambda: state(base) in FINAL, 60, lambda: f"base to end: {events(base)}")
    sdk_saves(base, monkeypatch, [4, 8, 12])  # as if it had saved them
    before = sorted(p.name for p in checkpoints_dir(base).iterdir())

    job = submit("tuned", resume_from="base")
    assert job.resume_from == "base:12"
    wait(lambda: state(job) in FINAL, 60, lambda: f"the job to end: {events(job)}")
    assert job.state == "succeeded", (output_dir(job) / "node_0" / "train.log").read_text()
    started = json.loads((output_dir(job) / "started.json").read_text())
    assert started == {"given": "/pfs/datacenter1/home/alice/jobs/base/checkpoints/"
                                + checkpoint_dirname(12),
                       "step": 12, "state": {"step": 12}}
    own = sorted(p.name for p in checkpoints_dir(job).glob("step-*"))
    assert own == [checkpoint_dirname(20), checkpoint_dirname(30)]
    assert sorted(p.name for p in checkpoints_dir(base).iterdir()) == before

    wait(lambda: resumes_note() >= 0 and Usage.objects.filter(
        job_key=job.pk, resumed_from=12).exists(), 30,
        lambda: f"the start to be noted: {events(job)}")
    assert "run 1 started from step 12 of job base (resume_from)" in events(job)
    client.force_login(alice)
    page = client.get("/jobs/tuned/").content.decode()
    assert "Started from the checkpoint <code>base:12</code>" in page
