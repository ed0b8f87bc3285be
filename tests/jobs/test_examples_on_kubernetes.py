"""The examples trained through the portal, its real Celery worker and the Kubernetes backend,
on the real control plane (``real_kubernetes``: the ``real_kube`` fixture's API server,
controllers and scheduler, as the portal's ServiceAccount, its pods run by the node agent,
which runs them as the fake's process kubelet does, on this machine, every pod a process tree
in its own network namespace with cluster DNS, the PFS an NFS volume it serves from here); the
fake API server with its process kubelet only where a test needs its controls.

The objects are the ones the backend makes for a real cluster; nothing here changes them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from kubernetes import client

from jobs.files import checkpoints_dir, output_dir
from jobs.models import Job, Usage
from jobs.resumes import resumes_note
from jobs.services import job_kill, job_submit
from paddlecloud_core.contract import job_namespace
from tests.factories import package_write
from tests.polling import wait
from tests.real_kube.node_kubelet import signal_container

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The examples train on the real control plane; the fake cluster (its process kubelet) only
# for what needs its controls (pods held on demand, its kubelet's own bookkeeping).
CLUSTERS = [pytest.param("real-kubernetes", marks=pytest.mark.real_kubernetes)]
FINAL = ("succeeded", "failed", "killed")


class Cluster:
    """Where the job's pods run, and how a test reaches them."""

    def __init__(self, kubeconfig: str, fake=None):
        self.kubeconfig = kubeconfig
        self.fake = fake  # the FakeKubernetes, when it is the fake

    def signal_container(self, pod: client.V1Pod, signum: int) -> None:
        """Send ``signum`` to the pod's running container's PID 1, as a node's OOM killer
        would: on the fake through its controls, on the real cluster from this machine, where
        the node agent runs it as a process."""
        if self.fake is not None:
            self.fake.controller.signal_container(pod.metadata.namespace, pod.metadata.name,
                                                  signum)
        else:
            signal_container(pod.metadata.uid, pod.spec.containers[0].name, signum)

    def core(self) -> client.CoreV1Api:
        from kubernetes import config

        return client.CoreV1Api(config.new_client_from_config(config_file=self.kubeconfig))


@pytest.fixture(params=CLUSTERS)
def cluster(request, datacenter, pfs_home, settings):
    """datacenter1 on the Kubernetes backend of a cluster whose pods run, with the test's PFS
    root mounted in them."""
    if request.param == "process-kubelet":
        request.getfixturevalue("kube_pods_datacenter")
        fake = request.getfixturevalue("k8s_cluster")
        yield Cluster(str(fake.kubeconfig_path), fake)
        return
    request.getfixturevalue("real_kube_datacenter")
    yield Cluster(str(request.getfixturevalue("real_kube").admin_kubeconfig))


def submit(cluster: Cluster, alice, datacenter, pfs_home, example: str, **fields) -> Job:
    shutil.copytree(EXAMPLES / example, pfs_home / example,
                    ignore=shutil.ignore_patterns("__pycache__"))
    spec = json.loads((EXAMPLES / example / "job.json").read_text())
    spec["package"] = f"/pfs/datacenter1/home/alice/{example}"
    spec.update(fields)
    return job_submit(alice, datacenter, spec).job


def wait_for(job: Job, states, timeout: float = 240) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.state in states:
            return job
        time.sleep(0.3)
    raise AssertionError(f"{job.name} still {job.state} after {timeout}s: {logs_of(job)}")


def logs_of(job: Job) -> dict[str, str]:
    """Every replica's archived log (run.sh tees the pod's output into PFS)."""
    found = {}
    for path in sorted(output_dir(job).glob("node_*/*.log")):
        found[str(path.relative_to(output_dir(job)))] = path.read_text()[-3000:]
    return found


def pod_logs(cluster: Cluster, job: Job) -> dict[str, str]:
    """What ``kubectl logs`` says of each of the job's pods that is still there."""
    core, namespace = cluster.core(), job_namespace(job.datacenter, job.owner.username)
    found = {}
    for pod in core.list_namespaced_pod(namespace, label_selector=f"paddlecloud.org/job-uid="
                                                                  f"{job.uid}").items:
        name = pod.metadata.name
        containers = [c.name for c in pod.spec.containers]
        found[name] = core.read_namespaced_pod_log(name, namespace, container=containers[0])
    return found


@pytest.mark.django_db(transaction=True)
def test_fit_a_line_trains_through_paddle_distributed_launch(cluster, celery_worker, alice,
                                                             datacenter, pfs_home):
    """Two trainers started the way users start Paddle today; the loss goes down."""
    job = submit(cluster, alice, datacenter, pfs_home, "fit_a_line",
                 entry="python -m paddle.distributed.launch train.py", passes=3)
    wait_for(job, FINAL)
    logs = logs_of(job)
    assert job.state == "succeeded", (job.state_reason, logs)
    assert [(r.role, r.state) for r in job.replicas.order_by("index")] == \
        [("trainer", "succeeded")] * 2
    records = [json.loads(line) for line in (output_dir(job) / "node_0" / "metrics.jsonl")
               .read_text().splitlines() if line.strip()]
    losses = [r["loss"] for r in records if "loss" in r]  # not the SDK's checkpoint reports
    assert len(losses) >= 4 and losses[-1] < losses[0] / 10, losses
    summary = json.loads((output_dir(job) / "model" / "summary.json").read_text())
    assert summary["test_loss"] < 0.1, summary
    # Its checkpoints (every 20 steps of 48), in the PFS home through the pods' mount.
    assert sorted(p.name for p in checkpoints_dir(job).glob("step-*")) == [
        "step-000000000020", "step-000000000040"]


@pytest.mark.django_db(transaction=True)
def test_the_parameter_server_example_trains_with_two_pservers_and_three_trainers(
        cluster, celery_worker, alice, datacenter, pfs_home):
    job = submit(cluster, alice, datacenter, pfs_home, "ps_numpy", pservers=2, trainers=3,
                 passes=3, cpu="500m", pscpu="500m")
    wait_for(job, FINAL)
    assert job.state == "succeeded", (job.state_reason, logs_of(job))
    states = sorted(job.replicas.values_list("role", "index", "state"))
    assert states == [("pserver", 0, "succeeded"), ("pserver", 1, "succeeded"),
                      ("trainer", 0, "succeeded"), ("trainer", 1, "succeeded"),
                      ("trainer", 2, "succeeded")], states
    losses = [json.loads(line)["loss"] for line in
              (output_dir(job) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert losses[-1] < losses[0] / 10, losses


# Fake only: holding a pod in ContainerCreating on demand is a control of the fake's (a real
# node cannot be told to); on the real cluster the trainers' wait is shown by the next test.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cluster", ["process-kubelet"], indirect=True)
def test_trainers_wait_for_pservers_that_start_late(cluster, celery_worker, alice, datacenter,
                                                    pfs_home):
    """A pserver's DNS name exists only once its pod has an IP: the trainers wait for it (their
    logs say so) instead of failing on a name that does not resolve yet."""
    cluster.fake.controller.hold_pods("ps-numpy-*-ps-*", reason="ContainerCreating")
    job = submit(cluster, alice, datacenter, pfs_home, "ps_numpy", pservers=1, trainers=2,
                 passes=2, cpu="500m", pscpu="500m")
    wait_for_line(job, "to have an address")
    time.sleep(2)  # the trainers keep waiting while the pserver has no IP
    assert Job.objects.get(pk=job.pk).state in ("starting", "running")
    cluster.fake.controller.release_pods("ps-numpy-*-ps-*")
    wait_for(job, FINAL)
    assert job.state == "succeeded", (job.state_reason, logs_of(job))
    log = (output_dir(job) / "node_0" / "train.log").read_text()
    assert log.startswith(f"paddlecloud: waiting for ps-numpy-{str(job.uid)[:5]}-ps-0.")


# Prints "step <i> on <ip>" every STEP_SECONDS for STEPS steps, then exits 0. As a pserver it
# listens on its port, as PaddlePaddle's does, after LISTEN_AFTER seconds.
STEPPER = """\
import os, socket, sys, time
steps, pause = int(os.environ.get("STEPS", "40")), float(os.environ.get("STEP_SECONDS", "0.2"))
if os.environ.get("TRAINING_ROLE") == "PSERVER":
    time.sleep(float(os.environ.get("LISTEN_AFTER", "0")))
    server = socket.create_server(("", int(os.environ["PADDLE_PORT"])))
    print("listening", flush=True)
marker = os.path.join(os.environ["PADDLE_OUTPUT_DIR"], "attempts")
os.makedirs(os.environ["PADDLE_OUTPUT_DIR"], exist_ok=True)
with open(marker, "a") as f:
    f.write(os.environ["HOSTNAME"] + "\\n")
for i in range(steps):
    print("step", i, "on", os.environ["POD_IP"], flush=True)
    time.sleep(pause)
print("done", flush=True)
"""


def stepper(cluster: Cluster, alice, datacenter, pfs_home, **fields) -> Job:
    package_write(pfs_home, STEPPER, "stepper")
    spec = {"name": "stepper", "package": "/pfs/datacenter1/home/alice/stepper",
            "entry": "python train.py", "trainers": 1, "cpu": "500m", "pscpu": "500m",
            **fields}
    return job_submit(alice, datacenter, spec).job


def wait_for_line(job: Job, text: str, worker: str = "node_0/train.log",
                  timeout: float = 60) -> None:
    path = output_dir(job) / worker
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"no {text!r} in {path}: {logs_of(job)}"
        time.sleep(0.1)


def job_pods(cluster: Cluster, job: Job) -> list[client.V1Pod]:
    core, namespace = cluster.core(), job_namespace(job.datacenter, job.owner.username)
    return core.list_namespaced_pod(namespace, label_selector=f"paddlecloud.org/job-uid="
                                                              f"{job.uid}").items


def trainer_pod(cluster: Cluster, job: Job, index: int = 0) -> client.V1Pod:
    return next(p for p in job_pods(cluster, job) if p.metadata.annotations.get(
        "batch.kubernetes.io/job-completion-index") == str(index)
        and p.status.phase == "Running")


@pytest.mark.django_db(transaction=True)
def test_trainers_wait_until_their_pservers_accept_connections(cluster, celery_worker, alice,
                                                               datacenter, pfs_home):
    """A pserver with an address may not listen yet (loading its model): the trainers' pods
    wait in their init phase, saying so, and start once it accepts connections."""
    job = stepper(cluster, alice, datacenter, pfs_home, trainers=1, pservers=1,
                  env={"STEPS": "5", "LISTEN_AFTER": "4"})
    wait_for_line(job, "to accept connections")
    trainer = job.replicas.get(role="trainer")
    deadline = time.monotonic() + 30
    while not trainer.reason.startswith("waiting for its peers to have addresses and accept"):
        assert time.monotonic() < deadline, trainer.reason  # shown as why it is not running
        time.sleep(0.1)
        trainer.refresh_from_db()
    assert trainer.state == "starting"
    wait_for(job, FINAL, timeout=120)
    assert job.state == "succeeded", (job.state_reason, logs_of(job))
    log = (output_dir(job) / "node_0" / "train.log").read_text()
    assert log.startswith(f"paddlecloud: waiting for stepper-{str(job.uid)[:5]}-ps-0.")
    assert ":6174 to accept connections\n" in log and "step 4 " in log


@pytest.mark.django_db(transaction=True)
def test_a_trainer_killed_mid_run_is_restarted_within_its_limit(cluster, celery_worker, alice,
                                                                 datacenter, pfs_home):
    job = stepper(cluster, alice, datacenter, pfs_home, restart_limit=1, env={"STEPS": "25"})
    wait_for_line(job, "step 3 ")
    # The trainer's processes are killed, as by the OOM killer.
    cluster.signal_container(trainer_pod(cluster, job), signal.SIGKILL)
    wait_for(job, FINAL, timeout=120)
    trainer = job.replicas.get()
    assert (job.state, trainer.state, trainer.restarts) == ("succeeded", "succeeded", 1), \
        (job.state_reason, logs_of(job))
    attempts = (output_dir(job) / "attempts").read_text().split()
    assert len(attempts) == 2  # the same hostname: stepper-…-tr-0, a new pod
    assert attempts[0] == attempts[1]
    log = (output_dir(job) / "node_0" / "train.log").read_text()
    assert "--- restart ---" in log and log.rstrip().endswith("done")


CHECKPOINTING_STEPPER = """\
import os, time
from paddlecloud_sdk import checkpoint
found = checkpoint.load()
start = found.step if found else 0
print("from step", start, "in", os.environ["PADDLE_CHECKPOINT_DIR"], flush=True)
for step in range(start + 1, int(os.environ["STEPS"]) + 1):
    time.sleep(0.2)
    checkpoint.save(str(step).encode(), step)
    print("step", step, "saved", flush=True)
print("done", flush=True)
"""


@pytest.mark.django_db(transaction=True)
def test_a_pod_killed_mid_run_resumes_from_its_latest_checkpoint(cluster, celery_worker,
                                                                alice, datacenter, pfs_home):
    """A trainer saving a checkpoint every step (``PADDLE_CHECKPOINT_DIR``: in the owner's
    home under the pods' PFS mount) has its container killed: the new pod goes on from the
    newest checkpoint, not step 0."""
    package_write(pfs_home, CHECKPOINTING_STEPPER, "stepper")
    job = job_submit(alice, datacenter, {
        "name": "stepper", "package": "/pfs/datacenter1/home/alice/stepper",
        "entry": "python train.py", "cpu": "500m", "restart_limit": 1,
        "env": {"STEPS": "30"}}).job
    wait_for_line(job, "step 5 saved")
    cluster.signal_container(trainer_pod(cluster, job), signal.SIGKILL)
    wait_for(job, FINAL, timeout=120)
    assert job.state == "succeeded", (job.state_reason, logs_of(job))
    log = (output_dir(job) / "node_0" / "train.log").read_text()
    assert "from step 0 in /pfs/datacenter1/home/alice/jobs/stepper/checkpoints\n" in log
    resumed = [int(line.split()[2]) for line in log.splitlines()
               if line.startswith("from step ")]
    assert len(resumed) == 2 and resumed[1] >= 5, log  # the second pod: not from step 0
    assert f"step {resumed[1] + 1} saved" in log.split("--- restart ---")[1]
    assert sorted(p.name for p in checkpoints_dir(job).glob("step-*")) == [
        "step-000000000028", "step-000000000029", "step-000000000030"]  # 3 kept
    # What users see of it (jobs.resumes): the event of the step the new pod resumed from
    # (its only reported steps are its saves': "lost" counts from the last), and the time its
    # first run lost.
    wait(lambda: resumes_note() >= 0 and Usage.objects.filter(
        job_key=job.pk, resumed_from=resumed[1]).exists(), 30, "the resume to be noted")
    assert job.events.filter(
        reason__startswith=f"run 2 resumed from step {resumed[1]} (lost ").exists(), [
            e.reason for e in job.events.all()]
    first = Usage.objects.filter(job_key=job.pk).order_by("attempt").first()
    assert 0 < first.lost_seconds < (first.ended_at - first.started_at).total_seconds()


@pytest.mark.django_db(transaction=True)
def test_a_job_submitted_to_resume_from_another_starts_from_its_checkpoint(
        cluster, celery_worker, alice, datacenter, pfs_home):
    """``resume_from: base``: the new job's pod finds base's latest checkpoint at its PFS path
    under the pod's mount (``PADDLE_RESUME_FROM``), starts from it, and saves its own."""
    package_write(pfs_home, CHECKPOINTING_STEPPER, "stepper")
    fields = {"package": "/pfs/datacenter1/home/alice/stepper", "entry": "python train.py",
              "cpu": "500m"}
    base = job_submit(alice, datacenter, {"name": "base", **fields, "env": {"STEPS": "4"}}).job
    wait_for(base, FINAL, timeout=120)
    assert base.state == "succeeded", (base.state_reason, logs_of(base))
    job = job_submit(alice, datacenter, {"name": "tuned", **fields, "resume_from": "base",
                                         "env": {"STEPS": "6"}}).job
    assert job.resume_from == "base:4"
    wait_for(job, FINAL, timeout=120)
    assert job.state == "succeeded", (job.state_reason, logs_of(job))
    log = (output_dir(job) / "node_0" / "train.log").read_text()
    assert "from step 4 in /pfs/datacenter1/home/alice/jobs/tuned/checkpoints\n" in log, log
    assert sorted(p.name for p in checkpoints_dir(job).glob("step-*")) == [
        "step-000000000005", "step-000000000006"]


def _descendants(pid: int) -> set[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo.extend(children.get(current, []))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# Fake only: it reads the process kubelet's sandboxes and network namespaces in this process;
# the node agent's own test shows a deleted pod's processes gone on the real cluster
# (tests/real_kube_node/test_node.py::test_a_deleted_pods_processes_are_gone).
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cluster", ["process-kubelet"], indirect=True)
def test_a_killed_job_leaves_no_process_behind(cluster, celery_worker, alice, datacenter,
                                               pfs_home):
    job = stepper(cluster, alice, datacenter, pfs_home, trainers=2, pservers=1,
                  entry="python train.py", env={"STEPS": "600"})
    wait_for_line(job, "step 2 ")
    wait_for_line(job, "step 2 ", "node_1/train.log")
    kubelet = cluster.fake.controller.kubelet
    with cluster.fake.store.lock:
        roots = [run.container.process.pid for sandbox in kubelet.sandboxes.values()
                 for run in sandbox.runs.values()]
    processes = set().union(*(_descendants(pid) for pid in roots))
    assert len(roots) == 3 and len(processes) >= 3 * 3  # bwrap, run.sh, tee, python…
    job_kill(alice, datacenter, "stepper")
    wait_for(job, {"killed"}, timeout=60)
    deadline = time.monotonic() + 60
    while cluster.core().list_namespaced_pod(job_namespace(datacenter, "alice")).items:
        assert time.monotonic() < deadline, "the job's pods are still there"
        time.sleep(0.2)
    assert [pid for pid in processes if _alive(pid)] == []
    assert kubelet.sandboxes == {}
    assert kubelet.network.namespaces() == [kubelet.network.node_ns]
