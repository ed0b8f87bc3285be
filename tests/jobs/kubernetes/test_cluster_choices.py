"""What a datacenter's administrator chooses for its cluster, driven through the engine against
the fake API server: Kueue or Volcano starting a job's pods together, the PFS as a volume and
claim in each user namespace, and pods that a ``restricted`` namespace admits."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone
from kubernetes import client

from accounts.models import Datacenter
from jobs import engine
from jobs.backends.kubernetes.names import object_base
from tests.k8s_api_server import crds

from .test_backend import NS, job_objects, reason, state, submit, wait

KUEUE = ("kueue.x-k8s.io", "v1beta1")


@pytest.fixture
def kube(k8s_api, kube_datacenter):
    return k8s_api


@pytest.fixture
def no_starts(held_tasks):
    held_tasks.run("jobs.tasks.job_stop", engine.job_halt)
    return held_tasks


def choose(datacenter, **fields) -> None:
    Datacenter.objects.filter(pk=datacenter.pk).update(**fields)
    datacenter.refresh_from_db()


def sync_until(job, predicate, message: str):
    return wait(lambda: (engine.job_sync(job.pk) or True) and predicate(), message=message)


# --- Kueue ---------------------------------------------------------------------------------------

def kueue_cluster_queue(kube, cpu: str) -> None:
    """What the cluster's admin sets up: a flavor and a ClusterQueue (users' LocalQueues are
    the portal's)."""
    kube.install("kueue")
    with kube.api_client() as api:
        custom = client.CustomObjectsApi(api)
        custom.create_cluster_custom_object(*KUEUE, "resourceflavors", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
            "metadata": {"name": "default"}})
        custom.create_cluster_custom_object(*KUEUE, "clusterqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
            "metadata": {"name": "team"},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu", "memory"],
                "flavors": [{"name": "default", "resources": [
                    {"name": "cpu", "nominalQuota": cpu},
                    {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})


@pytest.mark.django_db
def test_kueue_admits_jobs_whole_and_the_portal_shows_where_one_waits(
        kube, alice, datacenter, package, no_starts):
    kueue_cluster_queue(kube, cpu="2")
    choose(datacenter, kube_scheduler="kueue", kube_queue="team")
    first = submit(alice, datacenter, package, name="first", cpu="1500m")
    kube.controller.script_pods(f"{object_base(first)}-tr-*", lines=["training"],
                                run_seconds=2, exit_code=0)
    engine.job_launch(first.pk)
    local_queue = kube.get("localqueues.kueue.x-k8s.io", NS, "paddlecloud")
    assert local_queue["spec"]["clusterQueue"] == "team"  # made with the namespace
    sync_until(first, lambda: state(first) == "running", "Kueue to admit the first job")

    second = submit(alice, datacenter, package, name="second", cpu="1500m")
    engine.job_launch(second.pk)
    trainer = second.replicas.get()
    sync_until(second, lambda: "insufficient" in reason(trainer), "the second job to wait")
    assert reason(trainer).startswith(
        "waiting for Kueue to admit it, position 1 in its ClusterQueue: ")
    assert "insufficient unused quota for cpu" in reason(trainer)
    assert not [p for p in kube.store.list("pods", NS)
                if p["metadata"]["name"].startswith(object_base(second))]  # nothing held

    sync_until(first, lambda: state(first) == "succeeded", "the first job to end")
    sync_until(second, lambda: state(second) == "running", "Kueue to admit the second job")


@pytest.mark.django_db
def test_kueue_admits_a_pserver_job_whole_or_none_of_it(kube, alice, datacenter, package,
                                                          no_starts):
    """Room in the ClusterQueue for the pservers but not for the trainers too: nothing of the
    job runs (Kueue's integrations for the StatefulSet and the Job alone would admit the
    pservers, which would hold their share while the trainers wait); with room for all of
    it, all of it runs."""
    kueue_cluster_queue(kube, cpu="2")
    choose(datacenter, kube_scheduler="kueue", kube_queue="team")
    job = submit(alice, datacenter, package, name="ps", trainers=2, pservers=1, cpu="1",
                 pscpu="1")
    kube.controller.script_pods(f"{object_base(job)}-tr-*", lines=["training"],
                                run_seconds=1, exit_code=0)
    engine.job_launch(job.pk)
    trainer = job.replicas.filter(role="trainer").first()
    sync_until(job, lambda: "insufficient" in reason(trainer), "the job to wait for quota")
    assert reason(trainer).startswith("waiting for Kueue to admit it")
    workloads = kube.store.list("workloads.kueue.x-k8s.io", NS)
    assert [w["metadata"]["name"] for w in workloads] == [object_base(job)]  # one, whole
    assert sorted(s["count"] for s in workloads[0]["spec"]["podSets"]) == [1, 2]
    pods = [p for p in kube.store.list("pods", NS)
            if p["metadata"]["name"].startswith(object_base(job))]
    assert len(pods) == 3 and all(p["spec"].get("schedulingGates") and not
                                  p["spec"].get("nodeName") for p in pods)  # none runs

    with kube.api_client() as api:
        client.CustomObjectsApi(api).patch_cluster_custom_object(
            *KUEUE, "clusterqueues", "team", {"spec": {"resourceGroups": [{
                "coveredResources": ["cpu", "memory"],
                "flavors": [{"name": "default", "resources": [
                    {"name": "cpu", "nominalQuota": "3"},
                    {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})
    sync_until(job, lambda: state(job) == "succeeded", "the whole job to run and succeed")


@pytest.mark.django_db
def test_a_job_kueue_holds_is_not_timed_out_its_start_runs_from_kueues_admission(
        kube, alice, datacenter, package, no_starts):
    """Kueue holds the second job for longer than the datacenter's start timeout: it waits
    (nothing of it runs, nothing to release), and its start timeout runs once Kueue lets it
    go, as the first job's did."""
    kueue_cluster_queue(kube, cpu="2")
    choose(datacenter, kube_scheduler="kueue", kube_queue="team", start_timeout=3,
           start_tries=1)
    first = submit(alice, datacenter, package, name="first", cpu="1500m")
    kube.controller.script_pods(f"{object_base(first)}-tr-*", lines=["training"],
                                run_seconds=8, exit_code=0)
    engine.job_launch(first.pk)
    sync_until(first, lambda: state(first) == "running", "Kueue to admit the first job")

    second = submit(alice, datacenter, package, name="second", cpu="1500m")
    kube.controller.script_pods(f"{object_base(second)}-tr-*", lines=["training"],
                                run_seconds=1, exit_code=0)
    engine.job_launch(second.pk)
    trainer = second.replicas.get()
    sync_until(second, lambda: "insufficient" in reason(trainer), "the second job to wait")
    held = time.monotonic()
    while time.monotonic() - held < 5:  # past its start timeout, held all along
        engine.job_sync(second.pk)
        assert state(second) == "starting", second.state_reason
        time.sleep(0.2)
    assert engine.job_due(second) > timezone.now()  # looked at again, not timed out

    sync_until(first, lambda: state(first) == "succeeded", "the first job to end")
    sync_until(second, lambda: state(second) in ("running", "succeeded", "failed"),
               "Kueue to admit the second job")
    assert state(second) != "failed", second.state_reason
    second.refresh_from_db()
    assert second.requeues == 0


# --- Volcano -------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_volcano_starts_all_of_a_jobs_pods_or_none(kube, alice, datacenter, package,
                                                    no_starts):
    """One trainer cannot be placed: none of the job's pods is, so none holds a node's
    resources while it waits; the portal says why."""
    kube.install("volcano")
    choose(datacenter, kube_scheduler="volcano")
    job = submit(alice, datacenter, package, trainers=2, pservers=1, cpu="500m")
    kube.controller.hold_pods(f"{object_base(job)}-tr-1-*", namespace=NS)
    engine.job_launch(job.pk)
    group = kube.get("podgroups.scheduling.volcano.sh", NS, object_base(job))
    assert group["spec"]["minMember"] == 3 and group["spec"]["queue"] == "default"
    assert crds.problems(group) == []
    pserver = job.replicas.get(role="pserver")
    sync_until(job, lambda: "Volcano" in reason(pserver), "the gang to wait")
    assert reason(pserver).startswith("waiting for Volcano to schedule all the job's pods at "
                                      "once")
    assert not [p for p in kube.store.list("pods", NS) if p["spec"].get("nodeName")]
    kube.controller.release_pods(f"{object_base(job)}-tr-1-*", namespace=NS)
    sync_until(job, lambda: state(job) == "running", "the gang to run")


# --- storage and Pod Security --------------------------------------------------------------------

@pytest.mark.django_db
def test_each_user_namespace_gets_its_pfs_volume_and_restricted_pods_run(
        kube, alice, datacenter, package, no_starts, tmp_path):
    """A PersistentVolume source for the PFS: the portal binds a volume and a claim in the
    user's namespace; jobs run as a non-root uid, admitted by the namespace's restricted Pod
    Security level, which the fake API server enforces."""
    choose(datacenter, kube_run_as_user=1000, kube_run_as_group=1000,
           kube_volume={"persistentVolume": {"hostPath": {"path": str(tmp_path)}}})
    job = submit(alice, datacenter, package, trainers=2, pservers=1, cpu="500m")
    engine.job_launch(job.pk)
    namespace = kube.get("namespaces", "", NS)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    claim = wait(lambda: (c := kube.get("persistentvolumeclaims", NS, "paddlecloud-pfs"))
                 and c.get("status", {}).get("phase") == "Bound" and c,
                 message="the claim to bind")
    assert claim["spec"]["volumeName"] == f"paddlecloud-pfs-{NS}"
    sync_until(job, lambda: state(job) == "running", "the job to run")
    for pod in kube.store.list("pods", NS):
        assert pod["spec"]["securityContext"]["runAsUser"] == 1000
        assert pod["spec"]["volumes"][0] == {"name": "pfs", "persistentVolumeClaim": {
            "claimName": "paddlecloud-pfs"}}


@pytest.mark.django_db
def test_a_namespace_made_before_gets_the_level_its_pods_need(
        kube, alice, datacenter, package, no_starts, tmp_path):
    """The datacenter's volume became a hostPath (a trial cluster): the namespace the portal
    made earlier, at baseline, would refuse its pods; it is relabelled."""
    choose(datacenter, kube_volume={"nfs": {"server": "nfs", "path": "/pfs"}})
    first = submit(alice, datacenter, package, name="first")
    engine.job_launch(first.pk)
    labels = kube.get("namespaces", "", NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    choose(datacenter, kube_volume={"hostPath": {"path": str(tmp_path)}})
    second = submit(alice, datacenter, package, name="second")
    engine.job_launch(second.pk)
    labels = kube.get("namespaces", "", NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["app.kubernetes.io/managed-by"] == "paddlecloud"
    sync_until(second, lambda: state(second) == "running", "the job to run")
    assert job_objects(kube, second)["pods"]
