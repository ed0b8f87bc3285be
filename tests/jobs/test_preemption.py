"""Preemption that knows what it costs (issue 37, point 5): in a datacenter that sets
``preempt_after``, a job of a user below their fair share that waited that long for the
capacity starts by stopping the running job of a user over theirs that loses the least work
since its last checkpoint; the victim is warned (SIGTERM: it saves a checkpoint if it asked
to), requeued at the head of its queue and resumes; both jobs' events say why and what it
cost; waiting reasons and dry runs say when preemption would start a job. Off by default."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from accounts.models import Datacenter
from accounts.services import quota_set
from jobs.files import output_dir
from jobs.models import Job, JobEvent
from jobs.services import job_submit
from jobs.transitions import job_transition
from scheduling.preemption import checkpoint_saved, preemptions_due
from tests.factories import job_fields, package_write, submit_job
from tests.jobs.master_scenario import FINAL, state
from tests.polling import wait

GiB = 2**30
transactional = pytest.mark.django_db(transaction=True)


@pytest.fixture
def bob(make_user, datacenter):
    return make_user("bob")


@pytest.fixture
def full_dc(datacenter, alice, bob):
    """datacenter1 with 3 CPUs for all jobs together; alice's and bob's quotas larger."""
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=3000)
    for user in (alice, bob):
        quota_set(None, datacenter, user, cpu=64000, memory=64 * GiB, jobs=100, queued=100)
    datacenter.refresh_from_db()
    return datacenter


def preempt_after(datacenter, seconds: int | None) -> None:
    Datacenter.objects.filter(pk=datacenter.pk).update(preempt_after=seconds)
    datacenter.refresh_from_db()


def clock(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def reason(job: Job) -> str:
    job.refresh_from_db()
    return job.state_reason


def waited(job: Job, seconds: float) -> None:
    """As if ``job`` had been waiting ``seconds`` already (its submission and its event)."""
    then = timezone.now() - timedelta(seconds=seconds)
    Job.objects.filter(pk=job.pk).update(created_at=then)
    JobEvent.objects.filter(job=job, to_state="queued").update(time=then)


@pytest.fixture
def alice_holds_all(alice, full_dc, pfs_home, held_tasks):
    """alice's three jobs of one CPU each run (as the engine would have them), holding the
    whole capacity; bob's package is in his home."""
    (pfs_home / "pkg").mkdir()
    (pfs_home.parent / "bob" / "pkg").mkdir(parents=True)
    jobs = [submit_job(alice, full_dc, f"a{i}", cpu="1") for i in range(3)]
    for job in jobs:
        job_transition(job, "running", "every replica is running")
    return jobs


@pytest.mark.django_db
def test_the_waiting_reason_and_the_dry_run_say_when_preemption_would_start_a_job(
        alice, bob, full_dc, alice_holds_all):
    preempt_after(full_dc, 1800)
    before = timezone.now()
    preview = job_submit(bob, full_dc, job_fields(bob, full_dc, "mine", cpu="1",
                                                  dry_run=True)).admission
    after = timezone.now()
    assert preview["starts"] == "queued"
    words = re.fullmatch(r"waiting for the datacenter's capacity: cpu 1 asked, 0 of 3 free; "
                         r"would start by preemption at (.+), after preempt_after \(30 min\) "
                         r"of waiting", preview["reason"])
    assert words, preview["reason"]
    assert words[1] in {clock(before + timedelta(minutes=30)),
                        clock(after + timedelta(minutes=30))}

    mine = submit_job(bob, full_dc, "mine", cpu="1")
    assert reason(mine) == (
        "waiting for the datacenter's capacity: cpu 1 asked, 0 of 3 free; would start by "
        f"preemption at {clock(mine.created_at + timedelta(minutes=30))}, after "
        "preempt_after (30 min) of waiting")
    # alice is over her share: no job of hers is started by preempting others.
    more = submit_job(alice, full_dc, "a3", cpu="1")
    assert reason(more) == "waiting for the datacenter's capacity: cpu 1 asked, 0 of 3 free"
    assert preemptions_due() == 0, "not before it has waited 30 min"
    assert not Job.objects.exclude(preempting="").exists()


@pytest.mark.django_db
def test_nothing_is_preempted_without_the_setting(alice, bob, full_dc, alice_holds_all):
    assert full_dc.preempt_after is None  # the default
    mine = submit_job(bob, full_dc, "mine", cpu="1")
    waited(mine, 24 * 3600)
    assert preemptions_due() == 0
    assert not Job.objects.exclude(preempting="").exists()
    assert [state(job) for job in alice_holds_all] == ["running"] * 3
    assert reason(mine) == "waiting for the datacenter's capacity: cpu 1 asked, 0 of 3 free"


# --- through the running portal -----------------------------------------------------------------

# Saves a checkpoint (a step more) each time ``save`` appears in its output, and, with
# SAVE_ON_PREEMPT, when it is stopped (step + 1000); ends when ``finish`` appears there (or at
# once with FINISH). Each run notes the step it started from.
TRAINER = """\
import os, time
from paddlecloud_sdk import checkpoint
out = os.environ["PADDLE_OUTPUT_DIR"]
resumed = checkpoint.load()
step = resumed.step if resumed else 0
with open(os.path.join(out, "starts.txt"), "a") as f:
    f.write(f"{step}\\n")
if os.environ.get("SAVE_ON_PREEMPT"):
    checkpoint.save_on_preempt(lambda: checkpoint.save(b"on preempt", step + 1000))
while not (os.environ.get("FINISH") or os.path.exists(os.path.join(out, "finish"))):
    if os.path.exists(os.path.join(out, "save")):
        step += 1
        checkpoint.save(b"state", step)
        os.remove(os.path.join(out, "save"))
    time.sleep(0.05)
"""


def saved_after(job: Job, moment: float | None) -> float:
    """Have the job's trainer save a checkpoint; when it says it did (its metric)."""
    (output_dir(job) / "save").write_text("")
    return wait(lambda: (t := checkpoint_saved(job)) is not None and t != moment and t,
                30, f"{job.name} to report a checkpoint")


def starts(job: Job) -> list[int]:
    path = output_dir(job) / "starts.txt"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def train_log(job: Job) -> str:
    path = output_dir(job) / "node_0" / "train.log"
    return path.read_text()[-3000:] if path.exists() else ""


def events(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("id").values_list("reason", flat=True))


@transactional
def test_preemption_stops_the_job_that_loses_least_since_its_checkpoint_and_requeues_it(
        celery_worker, alice, bob, full_dc, pfs_home):
    """alice's three running jobs hold the whole capacity: ``old`` saved a checkpoint a while
    ago, ``fresh`` just now, ``none`` never (it would lose everything since it started).
    bob's job, below his share, waits past preempt_after: ``fresh`` is stopped — neither the
    newest nor the oldest run — after saving on SIGTERM as it asked; it goes back to the head
    of alice's queue, bob's job starts, and once it is done ``fresh`` starts again from the
    checkpoint it saved when warned. The events say why and what it cost."""
    package = package_write(pfs_home, TRAINER)
    bobs = package_write(pfs_home.parent / "bob", TRAINER)
    preempt_after(full_dc, 60)
    jobs = {name: submit_job(alice, full_dc, name, cpu="1", package=package, env=env)
            for name, env in (("old", {}), ("fresh", {"SAVE_ON_PREEMPT": "1"}), ("none", {}))}
    behind = submit_job(alice, full_dc, "behind", cpu="1", package=package)
    for job in jobs.values():
        wait(lambda job=job: state(job) == "running", 60, lambda job=job: events(job))
        wait(lambda job=job: starts(job) == [0], 30, f"{job.name} to begin")
    saved_after(jobs["old"], None)
    saved_after(jobs["fresh"], None)
    # Each run began a while ago: what a run without a checkpoint would lose is known.
    Job.objects.filter(pk__in=[job.pk for job in jobs.values()]).update(
        admitted_at=timezone.now() - timedelta(minutes=30))

    mine = submit_job(bob, full_dc, "mine", cpu="1", package=bobs, env={"FINISH": "1"})
    assert state(mine) == "queued"
    assert "would start by preemption at" in reason(mine)
    waited(mine, 120)
    preemptions_due()  # what the reconciler does (it may have done it already)

    fresh = jobs["fresh"]
    wait(lambda: state(mine) in FINAL, 60, lambda: f"bob's job to run: {events(mine)}")
    assert state(mine) == "succeeded", events(mine)
    assert [state(jobs[name]) for name in ("old", "none")] == ["running", "running"]
    preempted = next(e for e in events(fresh) if e.startswith("preempted"))
    lost = re.search(r"it lost (\d+\.\d) CPU-minutes of work since its last checkpoint",
                     preempted)
    assert lost and float(lost[1]) < 1, preempted  # saved moments ago (not 30 minutes)
    assert "requeued at the head of its queue" in preempted
    assert "another user's job" in preempted and "mine" not in preempted  # not named
    gave = [e for e in events(mine) if e.startswith("preempting")]
    assert len(gave) == 1 and gave[0].startswith(
        "preempting 1 running job of users over their fair share to make room for it (it "
        "waited past preempt_after, 60 s, below its owner's share); they lose "), gave

    # fresh saved as it was warned (step 1 + 1000), went back ahead of "behind", and resumes.
    wait(lambda: starts(fresh) == [0, 1001], 60,
         lambda: f"fresh to resume: {starts(fresh)} {events(fresh)} {train_log(fresh)}")
    assert state(behind) == "queued"
    assert state(fresh) in ("starting", "running")
    fresh.refresh_from_db()
    assert fresh.preempting == "" and fresh.requeues == 0  # not a start that timed out
    wait(lambda: state(fresh) == "running", 60, lambda: events(fresh))
    for job in [*jobs.values(), behind]:
        wait(lambda job=job: starts(job), 60, lambda job=job: f"{job.name}: {events(job)}")
        (output_dir(job) / "finish").write_text("")
        wait(lambda job=job: state(job) in FINAL, 60, lambda job=job: events(job))
        assert state(job) == "succeeded", events(job)
