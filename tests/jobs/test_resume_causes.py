"""Every cause of a restart resumes a job from its latest complete checkpoint (issue 37), on
the local backend through the running portal (a real Celery worker on Redis, real processes,
the master over HTTP): what the user notices is the trainer going on from the step of its
newest checkpoint, not step 0, and every record of the dataset trained once a pass across the
restart. A trainer killed mid-run: tests/jobs/test_checkpoints.py; a collective job's trainers
restarting together (real Paddle): tests/jobs/test_fit_a_line_master.py; causes only a cluster
has (an eviction, a lost node, a start that times out): test_resume_on_kubernetes.py."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal

import pytest
from django.utils import timezone

from accounts.models import Budget, Datacenter
from jobs.files import output_dir
from jobs.models import Job
from jobs.tasks import _budgets_enforce
from scheduling.tasks import jobs_admit
from tests.factories import package_write, submit_job
from tests.jobs.master_scenario import FINAL, recordio_dataset_write, state
from tests.jobs.test_checkpoints import RESUMING_TRAINER, saved_steps
from tests.polling import wait

transactional = pytest.mark.django_db(transaction=True)


def trained_once_a_pass(job: Job) -> None:
    """The final model (RESUMING_TRAINER's) holds every record of the dataset exactly once a
    pass: none lost with the stopped run, none trained twice by the resumed one."""
    model = json.loads((output_dir(job) / "model.json").read_text())
    every_record = Counter(f"r{n}" for n in range(1000))
    for pass_no in ("0", "1"):
        assert Counter(model[pass_no]) == every_record, pass_no


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

    Budget.objects.filter(pk=budget.pk).update(cpu_hours=Decimal("0"))  # spent
    wait(lambda: _budgets_enforce(timezone.now()) and state(job) == "queued", 30,
         lambda: f"the job to be stopped: {list(job.events.all())}")
    stopped = job.events.filter(to_state="queued").get()
    assert stopped.reason.startswith("stopped: budget spent: ") and (
        "back in its queue" in stopped.reason), stopped.reason
    wait(lambda: state(job) == "queued" and job.state_reason.startswith(
        "waiting for budget: "), 30, lambda: f"held for its budget: {job.state_reason}")
    assert set(job.replicas.values_list("state", flat=True)) == {"pending"}
    newest = saved_steps(job)[-1]  # its trainer is stopped: this is what it left

    Budget.objects.filter(pk=budget.pk).update(cpu_hours=100)
    jobs_admit.delay(alice.pk, datacenter.pk)  # as the admin's raise asks for
    wait(lambda: state(job) in FINAL, 180, lambda: f"the job to end: {list(job.events.all())}")
    assert job.state == "succeeded", list(job.events.all())
    starts = (output_dir(job) / "starts.txt").read_text().split()
    assert starts == ["0", str(newest)]  # from its checkpoint, not from step 0
    trained_once_a_pass(job)
