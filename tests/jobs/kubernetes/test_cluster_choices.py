"""What a datacenter's administrator chooses for its cluster, driven through the engine: Kueue
or Volcano starting a job's pods together, the PFS as a volume and claim in each user
namespace, pods that a ``restricted`` namespace admits, and the quota the portal puts there.
Those marked so run twice (``cluster``): on the fake API server (its model of Kueue, its pods
scripted) and on the real control plane (``real_kube``) with the real Kueue (``real_kueue``),
as the portal's ServiceAccount under deploy/admission-policy.yaml, the pods running the
package's train.py on the node agent."""

from __future__ import annotations

import shutil
import time
import uuid

import pytest
from django.utils import timezone
from kubernetes import client
from kubernetes.utils import parse_quantity

from jobs import engine
from jobs.backends.kubernetes.names import object_base
from jobs.services import job_kill
from tests.factories import submit_job
from tests.jobs.files import TRAINER
from tests.k8s_api_server import crds
from tests.kube import datacenter_set
from tests.polling import wait
from tests.real_kube import kueue as real_kueue

from .test_backend import NS, job_objects, reason, state

KUEUE = ("kueue.x-k8s.io", "v1beta1")
# What the real cluster's pods run (the package's train.py): a pserver listens on its port
# until it is stopped (its trainers wait for it to accept connections); a trainer plays the
# program of its environment (tests/jobs/files.py).
PROGRAM = """\
import os, socket
if os.environ.get("TRAINING_ROLE") == "PSERVER":
    server = socket.create_server(("", int(os.environ["PADDLE_PORT"])))
    while True:
        server.accept()[0].close()
""" + TRAINER
FOREVER = 3600.0


@pytest.fixture
def kube(k8s_api, kube_datacenter):
    return k8s_api


class FakeCluster:
    """The fake API server: the fake's Kueue (``kube.install("kueue")``), scripted pods."""

    real = False
    shows_position = True  # the fake models Kueue's visibility API
    start_timeout = 8  # seconds: a scripted pod starts at once (a loaded machine: not in 3)

    def __init__(self, fake):
        self.fake = fake
        self.api = real_kueue.Api(fake.kubeconfig_path)

    def cluster_queue(self, cpu: str) -> str:
        kueue_cluster_queue(self.fake, cpu)
        return "team"

    def resize(self, name: str, cpu: str) -> None:
        with self.fake.api_client() as api:
            client.CustomObjectsApi(api).patch_cluster_custom_object(
                *KUEUE, "clusterqueues", name, {"spec": {"resourceGroups": [{
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": "default", "resources": [
                        {"name": "cpu", "nominalQuota": cpu},
                        {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})

    def pfs_volume(self, root) -> dict:
        return {"persistentVolume": {"hostPath": {"path": str(root)}}}

    def slow_starts(self, seconds: float) -> None:
        """Scheduled pods take ``seconds`` to run (a scripted pod starts at once)."""
        self.fake.settings.pod_start_seconds = seconds

    def submit(self, alice, datacenter, package, *, lines=(), seconds=FOREVER, exit_code=0,
               **fields):
        """A job whose trainers print ``lines``, run ``seconds`` and exit ``exit_code``."""
        job = submit_job(alice, datacenter, **fields)
        if seconds != FOREVER:
            self.fake.controller.script_pods(f"{object_base(job)}-tr-*", lines=list(lines),
                                             run_seconds=seconds, exit_code=exit_code)
        return job

    def close(self) -> None:
        self.api.close()

    def get(self, plural: str, namespace: str, name: str = "") -> dict | None:
        return self.api.get(resource_path(plural, namespace, name))

    def list(self, plural: str, namespace: str) -> list[dict]:
        return self.api.call("GET", resource_path(plural, namespace))["items"]

    def pods_of(self, job) -> list[dict]:
        return [p for p in self.list("pods", NS)
                if p["metadata"]["name"].startswith(object_base(job))]


class RealCluster(FakeCluster):
    """The real control plane with the real Kueue: a ClusterQueue of the test's own, pods
    that run PROGRAM (the package's train.py) with the job's environment."""

    real = True
    shows_position = False  # no visibility API here (tests/real_kube/kueue.py)
    start_timeout = 15  # seconds: pods start their init containers, then their entry

    def __init__(self, kueue, admin_kubeconfig, pfs_home):
        self.kueue, self.queues = kueue, []
        self.api = real_kueue.Api(admin_kubeconfig)
        (pfs_home / "pkg" / "train.py").write_text(PROGRAM)

    def cluster_queue(self, cpu: str) -> str:
        name = f"team-{uuid.uuid4().hex[:8]}"
        real_kueue.cluster_queue(self.api, name, cpu=cpu)
        self.queues.append(name)
        return name

    def resize(self, name: str, cpu: str) -> None:
        real_kueue.cluster_queue(self.api, name, cpu=cpu)

    def pfs_volume(self, root) -> dict:
        from tests.kube import nfs_pfs_volume

        return nfs_pfs_volume(root)

    def slow_starts(self, seconds: float) -> None:
        """Its pods take their own time: their init containers, then their entry."""

    def submit(self, alice, datacenter, package, *, lines=(), seconds=FOREVER, exit_code=0,
               **fields):
        return submit_job(alice, datacenter, env={
            "LINES": "|".join(lines), "SECONDS": str(seconds), "CODE": str(exit_code)},
            **fields)

    def close(self) -> None:
        for name in self.queues:  # goes once the namespace's Workloads have gone
            self.api.delete(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{name}")
        self.api.close()


PATHS = {"localqueues.kueue.x-k8s.io": "/apis/kueue.x-k8s.io/v1beta1",
         "workloads.kueue.x-k8s.io": "/apis/kueue.x-k8s.io/v1beta1"}


def resource_path(plural: str, namespace: str, name: str = "") -> str:
    base = PATHS.get(plural, "/api/v1")
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{where}/{plural.split('.')[0]}" + (f"/{name}" if name else "")


@pytest.fixture(params=["fake", pytest.param("real", marks=[
    pytest.mark.real_kubernetes, pytest.mark.timeout(300)])])  # the session's cluster starts
def cluster(request, datacenter, package, pfs_home):
    """The fake cluster or the real one, the datacenter on it (``FakeCluster``,
    ``RealCluster``)."""
    if request.param == "fake":
        request.getfixturevalue("kube_datacenter")
        made = FakeCluster(request.getfixturevalue("k8s_api"))
    else:
        kueue = request.getfixturevalue("real_kueue")
        request.getfixturevalue("real_kube_datacenter")
        made = RealCluster(kueue, request.getfixturevalue("real_kube").admin_kubeconfig,
                           pfs_home)
    yield made
    made.close()


def choose(datacenter, **fields) -> None:
    datacenter_set(datacenter, **fields)


def sync_until(job, predicate, message: str, timeout: float = 90):
    return wait(lambda: (engine.job_sync(job.pk) or True) and predicate(), timeout=timeout,
                message=f"{message} (the job: {state(job)}, {job.state_reason}; its replicas: "
                        f"{list(job.replicas.values_list('role', 'index', 'state', 'reason'))})")


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
        cluster, alice, datacenter, package, held_starts):
    queue = cluster.cluster_queue(cpu="2")
    choose(datacenter, kube_scheduler="kueue", kube_queue=queue)
    first = cluster.submit(alice, datacenter, package, name="first", cpu="1500m",
                           lines=["training"], seconds=2)
    engine.job_launch(first.pk)
    local_queue = cluster.get("localqueues.kueue.x-k8s.io", NS, "paddlecloud")
    assert local_queue["spec"]["clusterQueue"] == queue  # made with the namespace
    sync_until(first, lambda: state(first) == "running", "Kueue to admit the first job")

    second = cluster.submit(alice, datacenter, package, name="second", cpu="1500m")
    engine.job_launch(second.pk)
    trainer = second.replicas.get()
    sync_until(second, lambda: "insufficient" in reason(trainer), "the second job to wait")
    # Where it stands comes from Kueue's visibility API, which the real one here lacks.
    where = ", position 1 in its ClusterQueue" if cluster.shows_position else ""
    assert reason(trainer).startswith(f"waiting for Kueue to admit it{where}: ")
    assert "insufficient unused quota for cpu" in reason(trainer)
    assert not cluster.pods_of(second)  # nothing held

    sync_until(first, lambda: state(first) == "succeeded", "the first job to end")
    sync_until(second, lambda: state(second) == "running", "Kueue to admit the second job")


@pytest.mark.django_db
def test_kueue_admits_a_pserver_job_whole_or_none_of_it(cluster, alice, datacenter, package,
                                                          held_starts):
    """Room in the ClusterQueue for the pservers but not for the trainers too: nothing of the
    job runs (Kueue's integrations for the StatefulSet and the Job alone would admit the
    pservers, which would hold their share while the trainers wait); with room for all of
    it, all of it runs."""
    queue = cluster.cluster_queue(cpu="2")
    choose(datacenter, kube_scheduler="kueue", kube_queue=queue)
    job = cluster.submit(alice, datacenter, package, name="ps", trainers=2, pservers=1, cpu="1",
                         pscpu="1", lines=["training"], seconds=1)
    engine.job_launch(job.pk)

    def tried() -> list[dict]:
        """The job's Workloads once Kueue has looked at each (admitted, or short of quota)."""
        engine.job_sync(job.pk)
        found = cluster.list("workloads.kueue.x-k8s.io", NS)
        return found if found and all(
            c["type"] in ("Admitted", "QuotaReserved") and (
                c["status"] == "True" or "quota" in c.get("message", ""))
            for w in found for c in w.get("status", {}).get("conditions", [])
            if c["type"] in ("Admitted", "QuotaReserved")) and all(
            w.get("status", {}).get("conditions") for w in found) else []

    workloads = wait(tried, timeout=90, message="Kueue to try the job's Workloads")
    assert [w["metadata"]["name"] for w in workloads] == [object_base(job)]  # one, whole
    trainer = job.replicas.filter(role="trainer").first()
    sync_until(job, lambda: "insufficient" in reason(trainer), "the job to wait for quota")
    assert reason(trainer).startswith("waiting for Kueue to admit it")
    assert sorted(s["count"] for s in workloads[0]["spec"]["podSets"]) == [1, 2]
    pods = cluster.pods_of(job)
    assert len(pods) == 3 and all(p["spec"].get("schedulingGates") and not
                                  p["spec"].get("nodeName") for p in pods)  # none runs

    cluster.resize(queue, cpu="3")
    sync_until(job, lambda: state(job) == "succeeded", "the whole job to run and succeed")
    # Its pods go (the pserver's ends Failed, stopped with the job): Kueue lets them go only
    # once it counts the group finished, and its quota free.
    wait(lambda: not cluster.pods_of(job), timeout=60, message="the job's pods to go")


@pytest.mark.django_db
def test_a_job_kueue_holds_is_not_timed_out_its_start_runs_from_kueues_admission(
        cluster, alice, datacenter, package, held_starts):
    """Kueue holds the second job for longer than the datacenter's start timeout: it waits
    (nothing of it runs, nothing to release), and its start timeout runs once Kueue lets it
    go, as the first job's did."""
    queue = cluster.cluster_queue(cpu="2")
    timeout = cluster.start_timeout
    choose(datacenter, kube_scheduler="kueue", kube_queue=queue, start_timeout=timeout,
           start_tries=1)
    first = cluster.submit(alice, datacenter, package, name="first", cpu="1500m",
                           lines=["training"], seconds=timeout + 5)
    engine.job_launch(first.pk)
    sync_until(first, lambda: state(first) == "running", "Kueue to admit the first job")

    second = cluster.submit(alice, datacenter, package, name="second", cpu="1500m",
                            lines=["training"], seconds=1)
    engine.job_launch(second.pk)
    trainer = second.replicas.get()
    sync_until(second, lambda: "insufficient" in reason(trainer), "the second job to wait")
    held = time.monotonic()
    while time.monotonic() - held < timeout + 2:  # past its start timeout, held all along
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


def room_after_the_last_look(second, timeout, alice, datacenter, on_commit) -> None:
    """Once the held job ``second``'s start timeout has passed by the portal's last look at
    it, the job ``first`` that fills the queue is killed: room for ``second``."""
    second.refresh_from_db()
    looked_again = engine.job_due(second)
    wait(lambda: timezone.now() > looked_again, timeout=timeout + 10,
         message="the second job's start timeout to pass by the portal's last look")
    with on_commit(execute=True):
        job_kill(alice, datacenter, "first")


@pytest.mark.django_db
def test_a_job_kueue_admits_after_the_portals_last_look_gets_its_whole_start_timeout(
        cluster, alice, datacenter, package, held_starts, django_capture_on_commit_callbacks):
    """The portal last saw the second job held more than a start timeout before Kueue
    admitted it (its next look came late: a busy worker; or Kueue admitted it just before
    that look): its start timeout runs from Kueue's admission (its Workload's Admitted
    condition), not from the portal's last sight of it held, and it runs, never requeued."""
    queue = cluster.cluster_queue(cpu="2")
    timeout = cluster.start_timeout
    cluster.slow_starts(2)
    choose(datacenter, kube_scheduler="kueue", kube_queue=queue, start_timeout=timeout,
           start_tries=1)
    first = cluster.submit(alice, datacenter, package, name="first", cpu="1500m")
    engine.job_launch(first.pk)
    sync_until(first, lambda: state(first) == "running", "Kueue to admit the first job",
               timeout=120)

    second = cluster.submit(alice, datacenter, package, name="second", cpu="1500m",
                            lines=["training"], seconds=1)
    engine.job_launch(second.pk)
    trainer = second.replicas.get()
    sync_until(second, lambda: "insufficient" in reason(trainer), "the second job to wait")
    room_after_the_last_look(second, timeout, alice, datacenter,
                             django_capture_on_commit_callbacks)
    wait(lambda: cluster.pods_of(second), timeout=90, message="Kueue to admit the second job")

    engine.job_sync(second.pk)
    assert state(second) == "starting", second.state_reason
    sync_until(second, lambda: state(second) in ("running", "succeeded", "failed"),
               "the second job to run")
    assert state(second) != "failed", second.state_reason
    second.refresh_from_db()
    assert second.requeues == 0


# --- Volcano -------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_volcano_starts_all_of_a_jobs_pods_or_none(kube, alice, datacenter, package,
                                                    held_starts):
    """One trainer cannot be placed: none of the job's pods is, so none holds a node's
    resources while it waits; the portal says why."""
    kube.install("volcano")
    choose(datacenter, kube_scheduler="volcano")
    job = submit_job(alice, datacenter, trainers=2, pservers=1, cpu="500m")
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


@pytest.mark.django_db
def test_a_job_volcano_schedules_after_the_portals_last_look_gets_its_whole_start_timeout(
        kube, alice, datacenter, package, held_starts, django_capture_on_commit_callbacks):
    """As with Kueue: the portal last saw the second job's PodGroup Pending (its Queue full)
    more than a start timeout before Volcano scheduled it; its start timeout runs from the
    group's Scheduled condition, not from the portal's last sight of it held. On the fake:
    Volcano is not among the components this machine builds (tests/real_kube); the fake's
    Volcano writes the gang plugin's conditions as Volcano does (tests/k8s_api_server/
    volcano.py)."""
    timeout = FakeCluster.start_timeout
    kube.install("volcano")
    with kube.api_client() as api:
        client.CustomObjectsApi(api).create_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues", {
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                "metadata": {"name": "team"}, "spec": {"capability": {"cpu": "2"}}})
    kube.settings.pod_start_seconds = 2  # scheduled pods take a while to run
    choose(datacenter, kube_scheduler="volcano", kube_queue="team", start_timeout=timeout,
           start_tries=1)
    first = submit_job(alice, datacenter, name="first", cpu="1500m")
    engine.job_launch(first.pk)
    sync_until(first, lambda: state(first) == "running", "Volcano to schedule the first job")

    second = submit_job(alice, datacenter, name="second", cpu="1500m")
    engine.job_launch(second.pk)
    trainer = second.replicas.get()
    sync_until(second, lambda: "(Pending)" in reason(trainer), "the second job to wait")
    room_after_the_last_look(second, timeout, alice, datacenter,
                             django_capture_on_commit_callbacks)
    wait(lambda: [p for p in kube.store.list("pods", NS) if p["metadata"]["name"].startswith(
        object_base(second)) and p["spec"].get("nodeName")], timeout=30,
         message="Volcano to schedule the second job")

    engine.job_sync(second.pk)
    assert state(second) == "starting", second.state_reason
    sync_until(second, lambda: state(second) == "running", "the second job to run")
    second.refresh_from_db()
    assert second.requeues == 0


# --- storage and Pod Security --------------------------------------------------------------------

@pytest.mark.django_db
def test_each_user_namespace_gets_its_pfs_volume_and_restricted_pods_run(
        cluster, alice, datacenter, package, held_starts, pfs_home, request):
    """A PersistentVolume source for the PFS: the portal binds a volume and a claim in the
    user's namespace; jobs run as a non-root uid, admitted by the namespace's restricted Pod
    Security level, which the API server enforces (the real one's Pod Security admission)."""
    # The datacenter's uid owns its PFS, as its administrator sets it up.
    shutil.chown(pfs_home, 1000, 1000)
    choose(datacenter, kube_run_as_user=1000, kube_run_as_group=1000,
           kube_volume=cluster.pfs_volume(pfs_home.parents[1]))
    job = cluster.submit(alice, datacenter, package, trainers=2, pservers=1, cpu="500m")
    engine.job_launch(job.pk)
    namespace = cluster.get("namespaces", "", NS)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    claim = wait(lambda: (c := cluster.get("persistentvolumeclaims", NS, "paddlecloud-pfs"))
                 and c.get("status", {}).get("phase") == "Bound" and c,
                 message="the claim to bind")
    assert claim["spec"]["volumeName"] == f"paddlecloud-pfs-{NS}"
    sync_until(job, lambda: state(job) == "running", "the job to run")
    pods = cluster.pods_of(job)
    assert len(pods) == 3
    for pod in pods:
        assert pod["spec"]["securityContext"]["runAsUser"] == 1000
        assert pod["spec"]["volumes"][0] == {"name": "pfs", "persistentVolumeClaim": {
            "claimName": "paddlecloud-pfs"}}


@pytest.mark.django_db
def test_the_namespace_quota_and_limits_are_the_users_and_the_cluster_holds_pods_to_them(
        cluster, alice, datacenter, package, held_starts):
    """The ResourceQuota and LimitRange the backend makes mirror the user's quota, and the
    API server enforces them: a container asking for nothing gets the LimitRange's defaults,
    one asking for more than the quota has left is refused."""
    from accounts.selectors import quota_get

    job = cluster.submit(alice, datacenter, package, cpu="1")
    engine.job_launch(job.pk)
    sync_until(job, lambda: state(job) == "running", "the job to run")
    quota = quota_get(alice, datacenter)
    cpu = quota.cpu / 1000  # (the real server writes quantities its own way: 4000m is 4)
    hard = cluster.get("resourcequotas", NS, "paddlecloud")["spec"]["hard"]
    assert parse_quantity(hard["requests.cpu"]) == parse_quantity(hard["limits.cpu"]) == cpu
    limits = cluster.get("limitranges", NS, "paddlecloud")["spec"]["limits"][0]
    assert parse_quantity(limits["max"]["cpu"]) == cpu

    def pod(resources: dict) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "extra"},
                "spec": {"containers": [{"name": "c", "image": "img", "command": ["true"],
                                         "resources": resources}]}}

    pods = resource_path("pods", NS)
    defaulted = cluster.api.call("POST", pods, pod({}), query=[("dryRun", "All")])
    assert defaulted["spec"]["containers"][0]["resources"] == {
        "limits": limits["default"], "requests": limits["defaultRequest"]}
    over = f"{quota.cpu}m"  # the whole quota (the LimitRange's max), of which 1 CPU is taken
    with pytest.raises(real_kueue.ApiError) as refused:
        cluster.api.call("POST", pods, pod({"requests": {"cpu": over}, "limits": {"cpu": over}}),
                         query=[("dryRun", "All")])
    assert refused.value.status == 403
    assert "exceeded quota: paddlecloud" in str(refused.value)


@pytest.mark.django_db
def test_a_namespace_made_before_gets_the_level_its_pods_need(
        kube, alice, datacenter, package, held_starts, tmp_path):
    """The datacenter's volume became a hostPath (a trial cluster): the namespace the portal
    made earlier, at baseline, would refuse its pods; it is relabelled."""
    choose(datacenter, kube_volume={"nfs": {"server": "nfs", "path": "/pfs"}})
    first = submit_job(alice, datacenter, name="first")
    engine.job_launch(first.pk)
    labels = kube.get("namespaces", "", NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    choose(datacenter, kube_volume={"hostPath": {"path": str(tmp_path)}})
    second = submit_job(alice, datacenter, name="second")
    engine.job_launch(second.pk)
    labels = kube.get("namespaces", "", NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["app.kubernetes.io/managed-by"] == "paddlecloud"
    sync_until(second, lambda: state(second) == "running", "the job to run")
    assert job_objects(kube, second)["pods"]
