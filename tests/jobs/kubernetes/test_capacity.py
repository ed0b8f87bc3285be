"""A Kubernetes datacenter's capacity from its cluster: the allocatable of the nodes that can
take jobs, added up (``backends.kubernetes.nodes``), written by the reconciler, which has the
waiting jobs admitted again when it changed. The nodes are registered on the fake API server
(checked against the real schemas) and read through the portal's account (deploy/rbac.yaml)."""

from __future__ import annotations

import logging

import pytest
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from kubernetes import client

from accounts.models import Datacenter
from accounts.services import quota_set
from jobs.backends import backend_for
from jobs.backends.base import Capacity
from jobs.backends.kubernetes.nodes import nodes_capacity, tolerates
from jobs.models import Job
from jobs.tasks import jobs_reconcile
from kernel.queue import JOBS_ADMIT, task_claim_members
from tests.accounts.test_admin_and_pages import DATACENTER_FORM
from tests.kube import datacenter_set

Gi, Mi, Ki = 2**30, 2**20, 2**10
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture
def kube(k8s_api, kube_datacenter):
    return k8s_api


def node(name: str, *, cpu: str = "4", memory: str = "16Gi", gpu: str | None = None,
         ready: str = "True", unschedulable: bool = False, taints: tuple = (),
         labels: dict | None = None) -> dict:
    """A node as its kubelet registers it (its status with it)."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110",
                   **({"nvidia.com/gpu": gpu} if gpu else {})}
    spec = {**({"unschedulable": True} if unschedulable else {}),
            **({"taints": list(taints)} if taints else {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  **(labels or {})}},
            "spec": spec,
            "status": {"capacity": allocatable, "allocatable": allocatable, "conditions": [
                {"type": "Ready", "status": ready,
                 "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                 "message": "kubelet is posting ready status"}]}}


def register(kube, *nodes: dict) -> None:
    with kube.api_client() as api:
        core = client.CoreV1Api(api)
        for body in nodes:
            core.create_node(body)


def from_cluster(datacenter, **fields) -> Datacenter:
    return datacenter_set(datacenter, capacity_from_cluster=True, **fields)


def numbers(datacenter) -> tuple:
    datacenter.refresh_from_db()
    return datacenter.capacity_cpu, datacenter.capacity_memory, datacenter.capacity_gpu


# -- what counts -----------------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_ready_schedulable_untainted_nodes_allocatable_is_summed(kube, datacenter):
    from_cluster(datacenter, kube_gpu_tolerations=GPU_TOLERATIONS)
    register(
        kube,
        node("plain", cpu="3920m", memory="16318712Ki"),
        node("gpus", cpu="8", memory="32Gi", gpu="2"),
        node("soft", cpu="2", memory="512Mi",
             taints=({"key": "spot", "effect": "PreferNoSchedule"},)),
        # Left out: not ready, cordoned, tainted for something job pods do not tolerate.
        node("down", ready="False", gpu="8"),
        node("cordoned", unschedulable=True, gpu="8"),
        node("infra", gpu="8", taints=({"key": "dedicated", "value": "infra",
                                        "effect": "NoExecute"},)),
        # Tainted for GPU work, which the GPU tolerations tolerate: its GPUs only.
        node("gpu-only", cpu="64", memory="256Gi", gpu="4", taints=(GPU_TAINT,)),
    )
    assert backend_for(datacenter).capacity(datacenter) == Capacity(
        cpu=3920 + 8000 + 2000, memory=16318712 * Ki + 32 * Gi + 512 * Mi, gpu=2 + 4)


@pytest.mark.django_db
def test_without_the_gpu_tolerations_a_gpu_tainted_node_counts_for_nothing(kube, datacenter):
    register(kube, node("gpu-only", gpu="4", taints=(GPU_TAINT,)), node("plain", cpu="500m"))
    assert backend_for(datacenter).capacity(datacenter) == Capacity(cpu=500, memory=16 * Gi,
                                                                    gpu=0)


def test_gpus_count_only_on_nodes_the_gpu_node_selector_picks():
    nodes = [node("a100", gpu="8", labels={"gpu": "a100"}), node("t4", gpu="1")]
    assert nodes_capacity(nodes, [], {"gpu": "a100"}) == Capacity(cpu=8000, memory=32 * Gi,
                                                                  gpu=8)


def test_tolerations_match_as_kubernetes_matches_them():
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert tolerates({"operator": "Exists"}, taint)  # no key: every taint
    assert tolerates({"key": "nvidia.com/gpu", "value": "present"}, taint)  # Equal, any effect
    assert not tolerates({"key": "nvidia.com/gpu", "value": "absent"}, taint)
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Exists",
                          "effect": "NoExecute"}, taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, taint)


# -- the reconciler --------------------------------------------------------------------------------

def waiting_job(owner, datacenter) -> Job:
    """A job of ``owner`` that waits (queued) behind a running one holding its only job slot."""
    quota_set(None, datacenter, owner, jobs=1)
    fields = {"owner": owner, "datacenter": datacenter, "entry": "python train.py",
              "image": "paddle", "package": f"/pfs/datacenter1/home/{owner.username}/pkg"}
    Job.objects.create(name="holder", state="running", **fields)
    return Job.objects.create(name="waits", state="queued", **fields)


@pytest.mark.django_db
def test_the_reconciler_writes_the_capacity_and_wakes_admission_only_on_a_change(
        kube, datacenter, alice, held_tasks, django_capture_on_commit_callbacks):
    from_cluster(datacenter)
    waiting_job(alice, datacenter)
    register(kube, node("a", cpu="4", memory="16Gi"))

    def reconcile() -> dict:
        """A run, what it queues sent as its transactions commit; then the admissions it
        queued begin (else a request would find one still queued, and queue none)."""
        held_tasks.sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            counts = jobs_reconcile()
        for _, datacenter_id in held_tasks.of(JOBS_ADMIT):
            task_claim_members(JOBS_ADMIT, datacenter_id)
        return counts

    assert reconcile()["capacity"] == 1
    assert ("GET", "/api/v1/nodes") in kube.request_log  # through the portal's account
    assert numbers(datacenter) == (4000, 16 * Gi, 0)
    first = datacenter.capacity_updated_at
    assert first is not None
    assert held_tasks.of(JOBS_ADMIT) == [(alice.pk, datacenter.pk)]

    assert reconcile()["capacity"] == 1  # the same numbers: refreshed, nobody woken
    assert numbers(datacenter) == (4000, 16 * Gi, 0)
    assert datacenter.capacity_updated_at > first
    assert held_tasks.of(JOBS_ADMIT) == []

    register(kube, node("b", cpu="2", memory="8Gi", gpu="1"))
    reconcile()
    assert numbers(datacenter) == (6000, 24 * Gi, 1)
    assert held_tasks.of(JOBS_ADMIT) == [(alice.pk, datacenter.pk)]


@pytest.mark.django_db
def test_a_failing_api_server_keeps_the_last_numbers(kube, datacenter, held_tasks, caplog):
    from_cluster(datacenter)
    register(kube, node("a", cpu="4", memory="16Gi"))
    jobs_reconcile()
    updated = numbers(datacenter), datacenter.capacity_updated_at
    kube.fail_next(503, count=3, method="GET", path=r"/nodes$")  # every attempt

    with caplog.at_level(logging.WARNING, logger="scheduling.capacity"):
        counts = jobs_reconcile()
    assert counts["capacity"] == 0
    assert (numbers(datacenter), datacenter.capacity_updated_at) == updated
    assert "datacenter datacenter1: its capacity stays as it was" in caplog.text


@pytest.mark.django_db
def test_only_datacenters_taking_their_capacity_from_the_cluster_are_asked(
        kube, datacenter, held_tasks):
    register(kube, node("a"))
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=1000)
    assert jobs_reconcile()["capacity"] == 0
    assert numbers(datacenter) == (1000, None, None)
    assert ("GET", "/api/v1/nodes") not in kube.request_log


# -- the datacenter's settings ---------------------------------------------------------------------

@pytest.mark.django_db
def test_the_capacity_comes_from_a_cluster_only_on_kubernetes(datacenter):
    datacenter.backend, datacenter.capacity_from_cluster = "local", True
    with pytest.raises(DjangoValidationError) as refused:
        datacenter.full_clean()
    assert list(refused.value.message_dict) == ["capacity_from_cluster"]
    datacenter.backend = "kubernetes"
    datacenter.backend_settings = {"kube_volume": {"hostPath": {"path": "/pfs"}}}
    datacenter.full_clean()


@pytest.mark.django_db
def test_adddatacenter_sets_the_capacity():
    call_command("adddatacenter", "gpu-east", "--capacity-cpu", "64", "--capacity-memory",
                 "256Gi", "--capacity-gpu", "8")
    east = Datacenter.objects.get(name="gpu-east")
    assert numbers(east) == (64000, 256 * Gi, 8)
    with pytest.raises(CommandError, match="only with the Kubernetes backend"):
        call_command("adddatacenter", "gpu-east", "--capacity-from-cluster")
    call_command("adddatacenter", "gpu-east", "--backend", "kubernetes", "--kube-volume",
                 '{"hostPath": {"path": "/pfs"}}', "--capacity-from-cluster",
                 "--skip-cluster-check")
    east.refresh_from_db()
    assert east.capacity_from_cluster and numbers(east) == (64000, 256 * Gi, 8)
    with pytest.raises(CommandError, match="not a CPU amount"):
        call_command("adddatacenter", "gpu-east", "--capacity-cpu", "lots")


@pytest.mark.django_db
def test_the_admin_shows_the_capacity(admin_browser, datacenter):
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=64000,
                                                       capacity_memory=256 * Gi)
    page = admin_browser.get(f"/admin/accounts/datacenter/{datacenter.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<h2>Capacity</h2>" in html or ">Capacity<" in html
    assert 'name="capacity_cpu" value="64"' in html
    assert 'name="capacity_memory" value="256Gi"' in html
    assert 'name="capacity_from_cluster"' in html
    assert 'name="capacity_updated_at"' not in html  # shown, not edited


@pytest.mark.django_db
def test_the_admin_sets_the_capacity_as_quantities(admin_browser, datacenter):
    url = f"/admin/accounts/datacenter/{datacenter.pk}/change/"
    form = {**DATACENTER_FORM, "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0",
            "capacity_cpu": "47500m", "capacity_memory": "192Gi", "capacity_gpu": "4"}
    refused = admin_browser.post(url, {**form, "capacity_from_cluster": "on"})  # a local one
    assert refused.status_code == 200
    assert "only with the Kubernetes backend" in refused.content.decode()
    assert admin_browser.post(url, form).status_code == 302
    assert numbers(datacenter) == (47500, 192 * Gi, 4)
