"""Every restart a cluster causes resumes the job from its latest complete checkpoint (issue
37), through the portal, its real Celery worker and the Kubernetes backend: a pod evicted
(the Eviction API, as a drain or a preemption does), a collective job's trainers restarted
together after one of them was killed, a start that timed out and went back to its queue
(its pods released) — on the real control plane (``real_kubernetes``: Kubernetes' own API
server, controllers and scheduler, the node agent running the pods, the PFS an NFS volume);
a node lost, on the fake API server with its process kubelet (a real control plane cannot
lose a node on demand). What is asserted is what the user sees in the trainer's own log: the
new run goes on from the step of the newest checkpoint, not step 0.

The trainer writes a checkpoint every step; a restart's start waits while ``hold`` is in the
job's output, so the test reads which checkpoint is the newest before the new run loads."""

from __future__ import annotations

import signal
import uuid

import pytest

from accounts.models import Datacenter
from accounts.services import quota_set
from jobs.files import checkpoints_dir, output_dir
from jobs.models import Job
from jobs.services import job_submit
from tests.factories import package_write
from tests.jobs.test_examples_on_kubernetes import (  # noqa: F401 - a fixture
    FINAL,
    cluster,
    job_pods,
    logs_of,
    trainer_pod,
    wait_for,
    wait_for_line,
)
from tests.polling import wait

# A trainer (framework-free: trainer 0 alone writes, so its barrier is nobody) saving a
# checkpoint every step; a pserver that listens until it is stopped.
RESUMING_STEPPER = """\
import os, socket, time
from paddlecloud_sdk import checkpoint
if os.environ.get("TRAINING_ROLE") == "PSERVER":
    server = socket.create_server(("", int(os.environ["PADDLE_PORT"])))
    print("listening", flush=True)
    while True:
        time.sleep(1)
out = os.environ["PADDLE_OUTPUT_DIR"]
while os.path.exists(os.path.join(out, "hold")):
    time.sleep(0.1)
nobody = lambda: None
found = checkpoint.load(barrier=nobody)
start = found.step if found else 0
print("from step", start, flush=True)
for step in range(start + 1, int(os.environ["STEPS"]) + 1):
    time.sleep(float(os.environ.get("STEP_SECONDS", "0.2")))
    checkpoint.save(str(step).encode(), step, barrier=nobody)
    print("step", step, "saved", flush=True)
print("done", flush=True)
"""


def resuming(pfs_home, alice, datacenter, name: str = "resumer", **fields) -> Job:
    package_write(pfs_home, RESUMING_STEPPER, name)
    spec = {"name": name, "package": f"/pfs/datacenter1/home/alice/{name}",
            "entry": "python train.py", "trainers": 1, "cpu": "500m", "pscpu": "500m",
            **fields}
    spec["env"] = {"STEPS": "40", **spec.get("env", {})}
    return job_submit(alice, datacenter, spec).job


def newest(job: Job) -> int:
    return max(int(p.name.removeprefix("step-")) for p in checkpoints_dir(job).glob("step-*"))


def held_restart(job: Job, workers: tuple[str, ...] = ("node_0/train.log",)) -> int:
    """Once each of ``workers`` has started again (and waits on ``hold``): the newest
    checkpoint, which the new run must go on from. Lets it go on."""
    for worker in workers:
        wait_for_line(job, "--- restart ---", worker, timeout=120)
    found = newest(job)
    (output_dir(job) / "hold").unlink()
    return found


def resumed_from(job: Job, worker: str = "node_0/train.log") -> list[int]:
    """The step each run of the worker started from, as its log says."""
    log = (output_dir(job) / worker).read_text()
    return [int(line.split()[2]) for line in log.splitlines() if line.startswith("from step ")]


def went_on(job: Job, step: int, worker: str = "node_0/train.log") -> None:
    """The worker's last run went on from ``step`` to the end."""
    log = (output_dir(job) / worker).read_text()
    after = log.split("--- restart ---")[-1]
    assert f"step {step + 1} saved" in after and f"step {step} saved" not in after, log
    assert after.rstrip().endswith("done"), log


@pytest.mark.real_kubernetes
@pytest.mark.django_db(transaction=True)
def test_an_evicted_trainer_resumes_from_its_latest_checkpoint(
        cluster, celery_worker, alice, datacenter, pfs_home):  # noqa: F811 - the fixture
    """A drain or a preemption evicts the trainer's pod (the Eviction API: DisruptionTarget,
    then deleted with its grace): the Job controller makes it a new pod, which goes on from
    the newest checkpoint. Not counted against its restarts (none allowed here)."""
    job = resuming(pfs_home, alice, datacenter, restart_limit=0)
    wait_for_line(job, "step 5 saved")
    (output_dir(job) / "hold").touch()
    pod = trainer_pod(cluster, job)
    cluster.core().create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, {
        "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace}})
    step = held_restart(job)
    wait_for(job, FINAL, timeout=180)
    assert job.state == "succeeded", (job.state_reason, logs_of(job))
    assert resumed_from(job) == [0, step] and step >= 5  # not from step 0
    went_on(job, step)
    trainer = job.replicas.get()
    assert (trainer.restarts, trainer.disruptions) == (0, 1)


@pytest.mark.real_kubernetes
@pytest.mark.django_db(transaction=True)
def test_a_collective_jobs_trainers_restart_together_from_the_latest_checkpoint(
        cluster, celery_worker, alice, datacenter, pfs_home):  # noqa: F811 - the fixture
    """Trainer 1 of a collective job is killed (as by the OOM killer): every trainer restarts
    in a new attempt (a communicator cannot take one rank back), and both go on from the
    newest checkpoint trainer 0 wrote."""
    job = resuming(pfs_home, alice, datacenter, trainers=2, restart_limit=1)
    wait_for_line(job, "step 5 saved")
    (output_dir(job) / "hold").touch()
    cluster.signal_container(trainer_pod(cluster, job, 1), signal.SIGKILL)
    step = held_restart(job, ("node_0/train.log", "node_1/train.log"))
    wait_for(job, FINAL, timeout=180)
    assert job.state == "succeeded", (job.state_reason, logs_of(job))
    for worker in ("node_0/train.log", "node_1/train.log"):
        assert resumed_from(job, worker) == [0, step] and step >= 5, worker
        went_on(job, step, worker)
    assert job.events.filter(reason__contains="all trainers restart").exists()


@pytest.mark.real_kubernetes
@pytest.mark.django_db(transaction=True)
def test_a_start_that_timed_out_and_was_requeued_resumes_from_the_latest_checkpoint(
        cluster, celery_worker, alice, datacenter, pfs_home):  # noqa: F811 - the fixture
    """Trainer 0 runs (and saves checkpoints) while trainer 1 cannot be scheduled: another
    pod holds the CPU it needs. After the start timeout every pod is released and the job
    goes back to its queue; started again once there is room, trainer 0 goes on from its
    newest checkpoint, not step 0."""
    Datacenter.objects.filter(pk=datacenter.pk).update(start_timeout=20, start_tries=3)
    quota_set(None, datacenter, alice, cpu=8000)
    core = cluster.core()
    node_cpu = int(core.list_node().items[0].status.allocatable["cpu"])
    # Beside the blocker the node has room for the pserver and one trainer: the scheduler
    # leaves trainer 1 out.
    blockers = f"c37-blocker-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": blockers}})
    try:
        wait(lambda: core.list_namespaced_service_account(blockers).items, 60,
             "the blockers' namespace's default ServiceAccount")
        core.create_namespaced_pod(blockers, {"metadata": {"name": "blocker"}, "spec": {
            "restartPolicy": "Always", "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0, "containers": [{
                "name": "main", "image": "debian:12", "command": ["sleep", "600"],
                "resources": {"requests": {"cpu": str(node_cpu - 3)}}}]}})
        wait(lambda: core.read_namespaced_pod("blocker", blockers).spec.node_name, 60,
             "the blocker to be scheduled")
        job = resuming(pfs_home, alice, datacenter, trainers=2, pservers=1,
                       cpu="2", restart_limit=0,
                       env={"STEPS": "400", "STEP_SECONDS": "0.1"})  # past its timeout
        wait_for_line(job, "step 3 saved")
        # Its requeue, read from its events: started again at once (its queue has room), it
        # may be queued for less than a poll.
        requeued = job.events.filter(to_state="queued", reason__startswith="requeued")
        wait(lambda: requeued.exists() or Job.objects.get(pk=job.pk).state in FINAL, 120,
             "the job to be requeued")
        job.refresh_from_db()
        assert requeued.exists(), (job.state_reason, logs_of(job), where(core, blockers))
        assert ": cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu" in \
            requeued.get().reason, requeued.get().reason
        (output_dir(job) / "hold").touch()
        core.delete_namespaced_pod("blocker", blockers, grace_period_seconds=0)
        # The first start's pods save a checkpoint in their grace as they go: the newest is
        # known once they are gone.
        first = {p.metadata.name for p in job_pods(cluster, job)
                 if p.metadata.creation_timestamp < requeued.get().time}
        wait(lambda: not first & {p.metadata.name for p in job_pods(cluster, job)}, 120,
             "the first start's pods to be gone")
        step = held_restart(job)
        wait_for(job, FINAL, timeout=180)
        assert job.state == "succeeded", (job.state_reason, logs_of(job))
        assert resumed_from(job) == [0, step] and step >= 3  # not from step 0
        went_on(job, step)
        assert job.requeues == 1
    finally:
        core.delete_namespace(blockers, grace_period_seconds=0)
        wait(lambda: blockers not in {n.metadata.name for n in core.list_namespace().items},
             120, "the blockers' namespace to go")


def where(core, blockers: str) -> list[tuple]:
    """Every pod of the cluster: its namespace, name, node, phase and CPU asked (what the
    scheduler counted), for a test whose arithmetic of the node's room went wrong."""
    return [(p.metadata.namespace, p.metadata.name, p.spec.node_name, p.status.phase,
             [(c.resources.requests or {}).get("cpu") for c in p.spec.containers],
             bool(p.metadata.deletion_timestamp))
            for p in core.list_pod_for_all_namespaces().items] + [
        (n.metadata.name, n.status.allocatable.get("cpu"), n.spec.taints)
        for n in core.list_node().items]


# Fake only: a real control plane cannot be made to lose a node on demand. The fake's lost
# node is the node lifecycle controller's: its pods get DisruptionTarget
# (DeletionByTaintManager) and stay Terminating, as no kubelet is left to confirm they stopped.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cluster", ["process-kubelet"], indirect=True)
def test_a_trainer_on_a_lost_node_resumes_from_its_latest_checkpoint(
        cluster, celery_worker, alice, datacenter, pfs_home):  # noqa: F811 - the fixture
    """The node of a trainer stops answering: the trainer runs again on another node and
    goes on from the newest checkpoint, not step 0; not counted against its restarts."""
    job = resuming(pfs_home, alice, datacenter, restart_limit=0)
    wait_for_line(job, "step 5 saved")
    (output_dir(job) / "hold").touch()
    pod = trainer_pod(cluster, job)
    cluster.fake.controller.lose_node(pod.spec.node_name)
    # Its processes end with the node (nothing left to say so): the checkpoints are final.
    cluster.signal_container(pod, signal.SIGKILL)
    step = held_restart(job)
    wait_for(job, FINAL, timeout=180)
    assert job.state == "succeeded", (job.state_reason, logs_of(job))
    assert resumed_from(job) == [0, step] and step >= 5
    went_on(job, step)
    trainer = job.replicas.get()
    assert (trainer.restarts, trainer.disruptions) == (0, 1)
    assert [p.spec.node_name for p in job_pods(cluster, job) if p.spec.node_name
            == pod.spec.node_name and not p.metadata.deletion_timestamp] == []

