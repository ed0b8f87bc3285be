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
from paddlecloud_core.layout import checkpoint_dirname
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
    client.force_login(make_user("bob"))
    answer = client.get(f"/api/v1/jobs/mine/checkpoints?datacenter={datacenter.name}")
    assert answer.status_code == 404


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
