"""The master on the Kubernetes backend, with pods that really run (the fake API server's
process kubelet): the scenario of test_master_e2e.py (master_scenario.py) with the trainers in
pods. They reach the portal as in a cluster, through its Service: the portal listens on
127.0.0.1 of this machine, the node forwards a port of its address to it, and the Service
``paddlecloud`` (namespace ``paddlecloud``, no selector) names that address in its
EndpointSlice, which the cluster DNS answers. ``PADDLECLOUD_MASTER_BASE_URL`` is that
Service's URL, as deploy/ sets it, and nothing of the backend changes for the test."""

from __future__ import annotations

import signal
from urllib.parse import urlsplit

import pytest

from jobs.backends.kubernetes.names import JOB_UID_LABEL
from jobs.files import output_dir
from paddlecloud_core.contract import job_namespace
from tests.kube import on_kubernetes, pfs_volume, portal_kubeconfig

from .master_scenario import dataset_job, trainer_killed_mid_task, worker_restarted_mid_pass

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def job_with_dataset(k8s_cluster, live_portal, settings):
    """The scenario's job on datacenter1, on the Kubernetes backend of a fake cluster whose
    pods run, the PFS root mounted in them, the portal reached through its Service."""
    port = urlsplit(live_portal.url).port
    settings.PADDLECLOUD_MASTER_BASE_URL = k8s_cluster.expose_host_port(
        port, namespace="paddlecloud", service="paddlecloud")
    assert settings.PADDLECLOUD_MASTER_BASE_URL == "http://paddlecloud.paddlecloud.svc"
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "paddlecloud.paddlecloud.svc"]  # deploy/
    with on_kubernetes(live_portal.datacenter, settings, portal_kubeconfig(k8s_cluster),
                       pfs_volume(live_portal.home.parents[1]), timeout=5):
        yield dataset_job(live_portal)


def through_the_service(cluster) -> None:
    """The trainers' calls came through the Service's endpoint: the node's forward to the
    portal (there is no other way out of the pod network)."""
    assert cluster.controller.kubelet.forwards[80].connections > 0


def pods(cluster, job) -> list[dict]:
    namespace = job_namespace(job.datacenter, job.owner.username)
    return [p for p in cluster.store.list("pods", namespace)
            if (p["metadata"].get("labels") or {}).get(JOB_UID_LABEL) == str(job.uid)]


def describe(cluster, job):
    """What the job's pods are doing, and its events: for a job that does not end."""
    def text() -> str:
        found = [(p["metadata"]["name"], p["status"].get("phase"),
                  cluster.logs.lines(p["metadata"]["uid"], p["spec"]["containers"][0]["name"])
                  [-20:]) for p in pods(cluster, job)]
        logs = {str(path.relative_to(output_dir(job))): path.read_text()[-1500:]
                for path in sorted(output_dir(job).glob("**/*.log"))}
        job.refresh_from_db()
        return (f"{job.state}: pods {found}; events "
                f"{list(job.events.values_list('reason', flat=True))}; logs {logs}")
    return text


@pytest.mark.django_db(transaction=True)
def test_a_trainer_killed_mid_task_loses_no_record(k8s_cluster, job_with_dataset,
                                                   celery_worker):
    job = job_with_dataset(SLOW_TRAINER="1", SLOW="0.05")  # trainer 1: 1 s a task

    def kill():
        """Trainer 1's container dies (SIGKILL to its PID 1: everything in it goes), as when
        its process crashes or is OOM-killed: exit code 137, its pod Failed."""
        running = [p for p in pods(k8s_cluster, job)
                   if p["metadata"].get("annotations", {}).get(INDEX_ANNOTATION) == "1"
                   and p["status"].get("phase") == "Running"]
        assert len(running) == 1, running
        pod = running[0]["metadata"]
        k8s_cluster.controller.signal_container(pod["namespace"], pod["name"], signal.SIGKILL)

    trainer_killed_mid_task(job, kill, describe=describe(k8s_cluster, job))
    through_the_service(k8s_cluster)
    # A collective job's trainers restart together (paddlecloud_core.contract): the three
    # of them once, the restart limit.
    assert sorted(job.replicas.filter(role="trainer").values_list("index", "restarts")) == \
        [(0, 1), (1, 1), (2, 1)]


@pytest.mark.django_db(transaction=True)
def test_the_portals_worker_restarted_mid_pass_loses_no_record(k8s_cluster, job_with_dataset):
    worker_restarted_mid_pass(job_with_dataset)
    through_the_service(k8s_cluster)

