"""Every cause of a restart resumes a job from its latest complete checkpoint (issue 37), on
the local backend through the running portal (a real Celery worker on Redis, real processes,
the master over HTTP): what the user notices is the trainer going on from the step of its
newest checkpoint, not step 0, and every record of the dataset trained once a pass across the
restart. A trainer killed mid-run: tests/jobs/test_checkpoints.py; a collective job's trainers
restarting together (real Paddle): tests/jobs/test_fit_a_line_master.py; causes only a cluster
has (an eviction, a lost node, a start that times out): test_resume_on_kubernetes.py."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from accounts.models import Budget, Datacenter
from jobs.files import output_dir
from jobs.models import Job
from jobs.tasks import _budgets_enforce
from scheduling.tasks import jobs_admit
from tests.factories import HOME, package_write, submit_job
from tests.jobs.master_scenario import FINAL, recordio_dataset_write, state
from tests.jobs.test_checkpoints import RESUMING_TRAINER, saved_steps
from tests.polling import wait

transactional = pytest.mark.django_db(transaction=True)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def trained_once_a_pass(job: Job) -> None:
    """The final model (RESUMING_TRAINER's) holds every record of the dataset exactly once a
    pass: none lost with the stopped run, none trained twice by the resumed one."""
    model = json.loads((output_dir(job) / "model.json").read_text())
    every_record = Counter(f"r{n}" for n in range(1000))
    for pass_no in ("0", "1"):
        assert Counter(model[pass_no]) == every_record, pass_no


def budget_stop(job: Job, budget: Budget) -> None:
    """Spend ``budget`` (its datacenter's grace: none), and let the reconciler's check stop
    the job; it waits in its queue, held for the budget, its replicas stopped."""
    Budget.objects.filter(pk=budget.pk).update(cpu_hours=Decimal("0"))
    wait(lambda: _budgets_enforce(timezone.now()) and state(job) == "queued", 30,
         lambda: f"the job to be stopped: {list(job.events.all())}")
    wait(lambda: state(job) == "queued" and job.state_reason.startswith(
        "waiting for budget: "), 30, lambda: f"held for its budget: {job.state_reason}")
    assert set(job.replicas.values_list("state", flat=True)) == {"pending"}


def budget_raise(job: Job, budget: Budget) -> None:
    Budget.objects.filter(pk=budget.pk).update(cpu_hours=100)
    jobs_admit.delay(job.owner_id, job.datacenter_id)  # as the admin's raise asks for
    wait(lambda: state(job) in FINAL, 180, lambda: f"the job to end: {list(job.events.all())}")


@transactional
def test_a_job_stopped_for_its_budget_waits_in_its_queue_then_resumes_from_its_checkpoint(
        live_portal, celery_worker):
    """A running job whose owner's budget is spent is stopped after the grace period (here
    none). It is not failed, which would throw away what it trained: it goes back to its
    queue and waits for the budget as the owner's other jobs do; once the budget is raised
    it runs again and its trainer goes on from its newest checkpoint, not step 0, the master
    from where that checkpoint left the pass."""
    alice, datacenter = live_portal.user, live_portal.datacenter
    Datacenter.objects.filter(pk=datacenter.pk).update(budget_grace_seconds=0)
    budget = Budget.objects.create(datacenter=datacenter, user=alice, cpu_hours=100)
    package_write(live_portal.home, RESUMING_TRAINER)
    dataset = recordio_dataset_write(live_portal.home)
    job = submit_job(alice, datacenter, "budgeted", passes=2, keep_checkpoints=2,
                     dataset=dataset, task_records=20, env={"EVERY": "30", "SLOW": "0.02"})
    wait(lambda: saved_steps(job) and saved_steps(job)[-1] >= 300, 120,
         lambda: f"checkpoints past step 300: {saved_steps(job)}, {list(job.events.all())}")

    budget_stop(job, budget)
    stopped = job.events.filter(to_state="queued").get()
    assert stopped.reason.startswith("stopped: budget spent: ") and (
        "back in its queue" in stopped.reason), stopped.reason
    newest = saved_steps(job)[-1]  # its trainer is stopped: this is what it left

    budget_raise(job, budget)
    assert job.state == "succeeded", list(job.events.all())
    starts = (output_dir(job) / "starts.txt").read_text().split()
    assert starts == ["0", str(newest)]  # from its checkpoint, not from step 0
    trained_once_a_pass(job)


@transactional
def test_ps_numpy_started_again_gives_its_new_pservers_the_latest_checkpoint(
        celery_worker, alice, datacenter, pfs_home):
    """The parameter-server example (issue 37 point 6): its model lives in its pservers,
    which a whole-job restart (here a stop for the budget, then a start) makes anew, at zero.
    Trainer 0 saves the parameters every CHECKPOINT_EVERY steps; started again, it gives the
    new pservers the latest checkpoint and its step, the other trainer waits for that, and
    both go on at that step: the steps after it are trained again, none before, and the
    model ends as good as an uninterrupted run's."""
    Datacenter.objects.filter(pk=datacenter.pk).update(budget_grace_seconds=0)
    budget = Budget.objects.create(datacenter=datacenter, user=alice, cpu_hours=100)
    shutil.copytree(EXAMPLES / "ps_numpy", pfs_home / "ps_numpy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    spec = json.loads((EXAMPLES / "ps_numpy" / "job.json").read_text())
    job = submit_job(alice, datacenter, **{**spec, "package": f"{HOME}/ps_numpy",
                                           "env": {"CHECKPOINT_EVERY": "10",
                                                   "STEP_SECONDS": "0.05"}})
    wait(lambda: saved_steps(job) and saved_steps(job)[-1] >= 40, 120,
         lambda: f"checkpoints past step 40: {saved_steps(job)}, {list(job.events.all())}")
    budget_stop(job, budget)
    newest = saved_steps(job)[-1]
    assert newest % 10 == 0

    budget_raise(job, budget)
    logs = {name: (output_dir(job) / name).read_text() for name in (
        "node_0/train.log", "node_1/train.log", "node_0/server.log", "node_1/server.log")}
    assert job.state == "succeeded", (job.state_reason, logs)
    assert (f"trainer 0 resumed from the checkpoint of step {newest} "
            in logs["node_0/train.log"]), logs["node_0/train.log"]
    assert f"trainer 1 goes on from step {newest}," in logs["node_1/train.log"]
    for pserver in ("node_0/server.log", "node_1/server.log"):
        assert f"restored the parameters of round {newest} from a checkpoint" in logs[pserver]
    steps = [json.loads(line)["step"] for line in
             (output_dir(job) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    again = next(i for i in range(1, len(steps)) if steps[i] <= steps[i - 1])  # its 2nd run
    assert steps[:again] == list(range(1, again + 1)) and again >= newest
    assert steps[again:] == list(range(newest + 1, 10 * 16 + 1))  # 10 passes of 16 steps
    summary = json.loads((output_dir(job) / "model" / "summary.json").read_text())
    assert summary["test_loss"] < 0.1, summary  # as an uninterrupted run's (about 0.01)
