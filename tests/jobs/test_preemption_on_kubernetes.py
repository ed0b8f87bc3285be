"""Preemption on the real control plane (``real_kubernetes``): what the local backend's test
(tests/jobs/test_preemption.py) cannot show, that a preempted job's pods are warned as
Kubernetes stops pods — SIGTERM to the container, run.sh passing it on to the whole entry,
the pods' termination grace before SIGKILL — and a trainer that asked to save on preemption
writes its checkpoint into the PFS within it; the job is requeued and its new pod resumes
from that checkpoint."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import Datacenter
from accounts.services import quota_set
from jobs.files import checkpoints_dir, output_dir
from jobs.models import Job, JobEvent
from jobs.services import job_submit
from scheduling.preemption import checkpoint_saved, preemptions_due
from tests.factories import package_write
from tests.jobs.test_examples_on_kubernetes import cluster, logs_of, wait_for, wait_for_line
from tests.polling import wait

__all__ = ["cluster"]  # a fixture
GiB = 2**30
FINAL = ("succeeded", "failed", "killed")

# Saves step 1, then waits for ``finish`` in its output; saves step + 1000 when warned.
SAVES_WHEN_WARNED = """\
import os, time
from paddlecloud_sdk import checkpoint
out = os.environ["PADDLE_OUTPUT_DIR"]
found = checkpoint.load()
step = found.step if found else 0
print("from step", step, flush=True)
checkpoint.save_on_preempt(lambda: (print("warned at step", step, flush=True),
                                    checkpoint.save(b"warned", step + 1000)))
step += 1
checkpoint.save(b"first", step)
print("step", step, "saved", flush=True)
while not (os.environ.get("FINISH") or os.path.exists(os.path.join(out, "finish"))):
    time.sleep(0.1)
print("done", flush=True)
"""


@pytest.mark.timeout(600)  # the real control plane, two jobs, three pods
@pytest.mark.django_db(transaction=True)
def test_a_preempted_pod_saves_its_checkpoint_in_its_grace_and_its_job_resumes_from_it(
        cluster, celery_worker, alice, make_user, datacenter, pfs_home):
    bob = make_user("bob")
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=2000, preempt_after=60)
    for user in (alice, bob):
        quota_set(None, datacenter, user, cpu=4000, memory=8 * GiB, jobs=10, queued=10)
    package_write(pfs_home, SAVES_WHEN_WARNED, "saver")
    package_write(pfs_home.parent / "bob", SAVES_WHEN_WARNED, "saver")
    body = {"name": "saver", "entry": "python train.py", "cpu": "1", "memory": "512Mi"}
    # alice's two jobs hold both CPUs; "long" saved its checkpoint last: the cheaper to stop.
    other = job_submit(alice, datacenter, {
        **body, "name": "other", "package": "/pfs/datacenter1/home/alice/saver"}).job
    wait_for_line(other, "step 1 saved", timeout=240)
    long = job_submit(alice, datacenter, {
        **body, "package": "/pfs/datacenter1/home/alice/saver"}).job
    wait_for_line(long, "step 1 saved", timeout=240)
    wait(lambda: checkpoint_saved(long), 30, "its checkpoint's report")
    mine = job_submit(bob, datacenter, {
        **body, "cpu": "500m", "package": "/pfs/datacenter1/home/bob/saver",
        "env": {"FINISH": "1"}}).job
    waiting = Job.objects.get(pk=mine.pk)
    assert waiting.state == "queued" and "would start by preemption at" in waiting.state_reason, \
        waiting.state_reason
    then = timezone.now() - timedelta(seconds=120)  # as if bob's job had waited 2 minutes
    JobEvent.objects.filter(job=mine, to_state="queued").update(time=then)
    preemptions_due()  # what the reconciler does

    wait(lambda: Job.objects.get(pk=long.pk).state == "queued", 120,
         lambda: list(JobEvent.objects.filter(job=long).values_list("reason", flat=True)))
    wait_for(mine, FINAL)
    assert mine.state == "succeeded", (mine.state_reason, logs_of(mine))
    log = (output_dir(long) / "node_0" / "train.log").read_text()
    assert "warned at step 1\n" in log, log  # SIGTERM reached the trainer through run.sh
    wait_for_line(long, "from step 1001", timeout=240)  # its new pod: the warned checkpoint
    assert (checkpoints_dir(long) / "step-000000001001" / "manifest.json").is_file()
    events = list(JobEvent.objects.filter(job=long).values_list("reason", flat=True))
    assert any(e.startswith("preempted: ") for e in events), events
    assert Job.objects.get(pk=other.pk).state == "running"
    for job in (other, long):
        (output_dir(job) / "finish").write_text("")
        wait_for(job, FINAL)
        assert job.state == "succeeded", (job.state_reason, logs_of(job))
