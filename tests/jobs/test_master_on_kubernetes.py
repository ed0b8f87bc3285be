"""The master on the Kubernetes backend, with pods that really run: the scenario of
test_master_e2e.py (master_scenario.py) with the trainers in pods, on the fake API server's
process kubelet and on the real control plane (``real_kubernetes``: the ``real_kube``
fixture, as the portal's ServiceAccount, its pods run by the node agent). They reach the portal
as in a cluster, through its Service: the portal listens on 127.0.0.1 of this machine, the node
forwards a port of its address to it, and the Service ``paddlecloud`` (namespace
``paddlecloud``, no selector) names that address in its EndpointSlice, which the cluster DNS
answers. ``PADDLECLOUD_MASTER_BASE_URL`` is that Service's URL, as deploy/ sets it, and
nothing of the backend changes for the test."""

from __future__ import annotations

import signal
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from jobs.backends.kubernetes.names import JOB_UID_LABEL
from jobs.files import output_dir
from paddlecloud_core.contract import job_namespace
from tests.kube import on_kubernetes, on_real_kubernetes, pfs_volume, portal_kubeconfig

from .master_scenario import dataset_job, trainer_killed_mid_task, worker_restarted_mid_pass

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
SERVICE_URL = "http://paddlecloud.paddlecloud.svc"


class FakeCluster:
    """The fake API server's cluster: its store, logs and controls."""

    def __init__(self, fake):
        self.fake = fake

    def pods(self, job) -> list[dict]:
        namespace = job_namespace(job.datacenter, job.owner.username)
        return [p for p in self.fake.store.list("pods", namespace)
                if (p["metadata"].get("labels") or {}).get(JOB_UID_LABEL) == str(job.uid)]

    def log(self, pod: dict) -> list[str]:
        return self.fake.logs.lines(pod["metadata"]["uid"], pod["spec"]["containers"][0]["name"])

    def kill(self, pod: dict) -> None:
        self.fake.controller.signal_container(pod["metadata"]["namespace"],
                                              pod["metadata"]["name"], signal.SIGKILL)

    def through_the_service(self) -> None:
        """The trainers' calls came through the Service's endpoint: the node's forward to the
        portal (there is no other way out of the pod network)."""
        assert self.fake.controller.kubelet.forwards[80].connections > 0


class RealCluster:
    """The real control plane, read as its admin; its node runs the pods on this machine."""

    def __init__(self, api_client):
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)

    def pods(self, job) -> list[dict]:
        namespace = job_namespace(job.datacenter, job.owner.username)
        found = self.core.list_namespaced_pod(namespace,
                                              label_selector=f"{JOB_UID_LABEL}={job.uid}")
        return [self.api_client.sanitize_for_serialization(p) for p in found.items]

    def log(self, pod: dict) -> list[str]:
        try:
            return self.core.read_namespaced_pod_log(
                pod["metadata"]["name"], pod["metadata"]["namespace"],
                container=pod["spec"]["containers"][0]["name"]).splitlines()
        except client.ApiException as exc:  # not started, or gone meanwhile
            return [f"({exc.status} {exc.reason})"]

    def kill(self, pod: dict) -> None:
        from tests.real_kube.node_kubelet import signal_container

        signal_container(pod["metadata"]["uid"], pod["spec"]["containers"][0]["name"],
                         signal.SIGKILL)

    def through_the_service(self) -> None:
        """Nothing to read: the node's forward is in the agent's process. The pods have no
        other way out of the pod network than the Service's endpoint, so the scenario's
        master calls came through it."""


@pytest.fixture(params=["process-kubelet",
                        pytest.param("real-kubernetes", marks=pytest.mark.real_kubernetes)])
def cluster(request, live_portal, settings):
    """datacenter1 on the Kubernetes backend of a cluster whose pods run, the PFS root mounted
    in them, the portal reached through its Service."""
    port = urlsplit(live_portal.url).port
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "paddlecloud.paddlecloud.svc"]  # deploy/
    if request.param == "process-kubelet":
        fake = request.getfixturevalue("k8s_cluster")
        settings.PADDLECLOUD_MASTER_BASE_URL = fake.expose_host_port(
            port, namespace="paddlecloud", service="paddlecloud")
        assert settings.PADDLECLOUD_MASTER_BASE_URL == SERVICE_URL
        with on_kubernetes(live_portal.datacenter, settings, portal_kubeconfig(fake),
                           pfs_volume(live_portal.home.parents[1]), timeout=5):
            yield FakeCluster(fake)
        return
    from tests.real_kube.control_plane import api_client
    from tests.real_kube.node_kubelet import expose_host_port

    real_kube = request.getfixturevalue("real_kube")
    with api_client(real_kube.admin_kubeconfig) as admin:
        settings.PADDLECLOUD_MASTER_BASE_URL = expose_host_port(
            admin, port, namespace="paddlecloud", service="paddlecloud")
        assert settings.PADDLECLOUD_MASTER_BASE_URL == SERVICE_URL
        try:
            with on_real_kubernetes(live_portal.datacenter, settings, real_kube,
                                    live_portal.home.parents[1]):
                yield RealCluster(admin)
        finally:  # the portal's namespace stays (deploy/namespace.yaml); the Service goes
            client.CoreV1Api(admin).delete_namespaced_service("paddlecloud", "paddlecloud")


@pytest.fixture
def job_with_dataset(cluster, live_portal):
    """The scenario's job on the cluster."""
    return dataset_job(live_portal)


def describe(cluster, job):
    """What the job's pods are doing, and its events: for a job that does not end."""
    def text() -> str:
        found = [(p["metadata"]["name"], p["status"].get("phase"), cluster.log(p)[-20:])
                 for p in cluster.pods(job)]
        logs = {str(path.relative_to(output_dir(job))): path.read_text()[-1500:]
                for path in sorted(output_dir(job).glob("**/*.log"))}
        job.refresh_from_db()
        return (f"{job.state}: pods {found}; events "
                f"{list(job.events.values_list('reason', flat=True))}; logs {logs}")
    return text


@pytest.mark.django_db(transaction=True)
def test_a_trainer_killed_mid_task_loses_no_record(cluster, job_with_dataset, celery_worker):
    job = job_with_dataset(SLOW_TRAINER="1", SLOW="0.05")  # trainer 1: 1 s a task

    def kill():
        """Trainer 1's container dies (SIGKILL to its PID 1: everything in it goes), as when
        its process crashes or is OOM-killed: exit code 137, its pod Failed."""
        running = [p for p in cluster.pods(job)
                   if (p["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION) == "1"
                   and p["status"].get("phase") == "Running"]
        assert len(running) == 1, running
        cluster.kill(running[0])

    trainer_killed_mid_task(job, kill, describe=describe(cluster, job))
    cluster.through_the_service()
    # A collective job's trainers restart together (paddlecloud_core.contract): the three
    # of them once, the restart limit.
    assert sorted(job.replicas.filter(role="trainer").values_list("index", "restarts")) == \
        [(0, 1), (1, 1), (2, 1)]


@pytest.mark.django_db(transaction=True)
def test_the_portals_worker_restarted_mid_pass_loses_no_record(cluster, job_with_dataset):
    worker_restarted_mid_pass(job_with_dataset)
    cluster.through_the_service()
