"""The portal builder (``kube_builder`` portal, issue 36 point 11): a Kubernetes datacenter whose
cluster cannot run a builder (GKE Autopilot admits neither an unconfined profile nor a
privileged pod) builds its jobs' runtime images on the portal's machine, with buildah in the
portal's Celery worker (``jobs.backends.buildah``, as a local datacenter builds), pushes them
to the build registry with the owner's credentials, and its pods run the pushed digest.

With real parts: the running portal's worker, buildah on this machine, a Distribution registry
with a user (``tests/registry_server.py``) holding the base image (``tests.images``), and the
cluster — the real control plane where a job is run (its API server, controllers, scheduler
and node agent, the portal as its ServiceAccount), the fake API server for the rest (the same
backend code; its scripted kubelet answers at once, where the real node takes a minute to
start). The package brings its own Dockerfile (a ``RUN`` step, so the steps' containers and
their network are made) rather than a requirements.txt, so that nothing is fetched from the
internet. After each build nothing is left: no buildah process, working container, built image,
temporary file or mount in the datacenter's buildah storage."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from jobs.models import Build, Job
from registries.oci import manifest_digest
from tests.conftest import assert_error, streamed
from tests.factories import package_write, submit_job
from tests.images import base_image_push, mounts_under
from tests.jobs.kubernetes.test_builds import builder_objects, with_build_registry
from tests.jobs.test_buildah import no_build_left
from tests.jobs.test_examples_on_kubernetes import wait_for
from tests.kube import datacenter_set
from tests.polling import wait
from tests.processes import processes_naming
from tests.registry_server import registry_server

pytestmark = pytest.mark.timeout(900)

AUTH = ("alice", "s3cret")  # with_build_registry's credential 'builds'
FINAL = ("succeeded", "failed", "killed")
SAID = "built on the portal's machine"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with registry_server(tmp_path_factory.mktemp("registry"), users=dict([AUTH])) as server:
        yield server


@pytest.fixture(scope="module")
def base(registry, tmp_path_factory) -> str:
    return base_image_push(registry.host, AUTH, tmp_path_factory.mktemp("base"))


@pytest.fixture
def storage(settings, tmp_path):
    """The portal's buildah storages (one per datacenter), checked empty of builds after the
    test and taken away."""
    settings.PADDLECLOUD_BUILDAH_DIR = tmp_path / "buildah"
    yield settings.PADDLECLOUD_BUILDAH_DIR
    mine = settings.PADDLECLOUD_BUILDAH_DIR / "datacenter1"
    left = mounts_under(settings.PADDLECLOUD_BUILDAH_DIR)
    try:
        assert left == []
        if mine.is_dir():
            no_build_left(mine)
    finally:
        for point in sorted(left, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False)
        shutil.rmtree(settings.PADDLECLOUD_BUILDAH_DIR, ignore_errors=True)


def portal_built(datacenter, registry, alice):
    return datacenter_set(with_build_registry(datacenter, registry, alice),
                          kube_builder="portal")


def package(pfs_home, base: str, program: str = "print('trained')\n") -> str:
    """A package with its own Dockerfile on ``base``: one RUN step, its files copied. A runtime
    image is built once for a package's content (its tag), and the module's tests share one
    registry: a test that needs a build of its own gives its own ``program``."""
    pkg = package_write(pfs_home, program, "pkg")
    (pfs_home / "pkg" / "Dockerfile").write_text(
        f"FROM {base}\nCOPY . /train/package\nRUN echo \"{SAID}\" > /train/built\n"
        "WORKDIR /train/package\n")
    return pkg


def submit(alice, datacenter, pkg: str, name: str = "built") -> Job:
    return submit_job(alice, datacenter, name, package=pkg, entry="python3 train.py",
                      image="registry.example.com/paddle:2.6")


def pushed(build: Build) -> None:
    """The build pushed its image to the registry, and the job runs it by that digest."""
    assert build.state == "succeeded", build.reason
    assert manifest_digest(build.image, auth=AUTH, insecure=True) == build.image_digest


@pytest.mark.django_db(transaction=True)
def test_the_portal_builds_with_buildah_and_the_pods_run_the_pushed_digest(
        kube_datacenter, registry, base, storage, celery_worker, alice, pfs_home, k8s_api,
        token_client):
    datacenter = portal_built(kube_datacenter, registry, alice)
    job = submit(alice, datacenter, package(pfs_home, base))
    assert job.state == "building"
    job = wait_for(job, ("running", *FINAL), timeout=600)
    assert job.state == "running", job.state_reason
    build = Build.objects.get()
    pushed(build)
    assert build.image.startswith(f"{datacenter.build_registry}/paddle-alice/runtime:pc-")
    assert job.image == f"{build.image}@{build.image_digest}" and job.build_id == build.pk
    assert job.registry.name == "builds"  # pulled with the credentials it was pushed with
    states = list(job.events.filter(replica=None).values_list("to_state", flat=True))
    assert states[:3] == ["building", "pending", "starting"], states

    # Nothing of the build in the cluster; the trainers run the pushed digest.
    assert not builder_objects(k8s_api, "Job") and not builder_objects(k8s_api, "ConfigMap")
    [trainers] = k8s_api.store.list("jobs.batch", "paddle-alice")
    spec = trainers["spec"]["template"]["spec"]
    assert {c["image"] for c in spec["containers"] + spec["initContainers"]} == {job.image}
    assert spec["imagePullSecrets"] == [{"name": "paddlecloud-registry-builds"}]

    # Its log, followed like any worker's: buildah's own lines, its RUN step's output.
    answer = token_client.get("/api/v1/jobs/built/logs", {"worker": "build"})
    assert answer.status_code == 200
    text = streamed(answer).decode()
    assert f"--- paddlecloud: building {build.image} with buildah" in text
    assert 'RUN echo "built on the portal' in text
    assert f"paddlecloud: pushed {build.image}@{build.image_digest}" in text
    assert "s3cret" not in text


@pytest.mark.django_db(transaction=True)
def test_killing_the_only_job_waiting_for_a_portal_build_stops_buildah(
        kube_datacenter, registry, base, storage, celery_worker, alice, pfs_home):
    """As a cluster builder is deleted when no job waits for its image any more, the portal's
    buildah is stopped (its process group) within seconds, pushing nothing; the storage
    fixture then finds nothing of it left (no process, working container, image or mount)."""
    from jobs.services import job_kill

    datacenter = portal_built(kube_datacenter, registry, alice)
    pkg = package_write(pfs_home, "print('trained')\n", "slow")
    (pfs_home / "slow" / "Dockerfile").write_text(f"FROM {base}\nRUN echo started && sleep 617\n")
    job = submit(alice, datacenter, pkg, "doomed")
    build = wait(lambda: Build.objects.filter(state="building").first(), message="the build")
    log = pfs_home / ".paddlecloud" / "builds" / f"{build.uid}.log"
    wait(lambda: log.is_file() and "\nstarted\n" in log.read_text(), timeout=300,
         message=lambda: f"its RUN step to start: {log.read_text() if log.is_file() else ''}")
    job_kill(alice, datacenter, "doomed")
    wait(lambda: not processes_naming(str(storage)) and not processes_naming("sleep 617"),
         timeout=60, message="buildah and its RUN step to be stopped")
    job.refresh_from_db()
    build.refresh_from_db()
    assert job.state == "killed"
    assert (build.state, build.reason) == ("failed", Build.CANCELLED)
    assert manifest_digest(build.image, auth=AUTH, insecure=True) is None
    wait(lambda: f"failed: {Build.CANCELLED}" in log.read_text(), message="the log's end")


@pytest.mark.django_db(transaction=True)
def test_a_portal_without_buildah_fails_the_build_naming_kube_builder(
        kube_datacenter, registry, storage, celery_worker, alice, pfs_home, k8s_api,
        monkeypatch, tmp_path, token_client):
    """The worker's machine has no buildah: the job fails saying which setting builds there
    and how to install it (the local backend's words), and nothing is made in the cluster."""
    datacenter = portal_built(kube_datacenter, registry, alice)
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine where buildah is not installed
    pkg = package(pfs_home, "registry.example.com/b:1")
    job = wait_for(submit(alice, datacenter, pkg), FINAL)
    assert job.state == "failed"
    assert job.state_reason.startswith(
        "building its runtime image failed: datacenter 'datacenter1' builds images on the "
        "portal's machine (kube_builder portal), which cannot build: buildah is not installed "
        "on the portal's machine: install it (apt-get install buildah"), job.state_reason
    assert not builder_objects(k8s_api, "Job")
    # paddlectl build is refused before anything is recorded, with the same reason.
    error = assert_error(token_client.post("/api/v1/builds/", {"package": pkg},
                                           format="json"), 409, "builds_unavailable")
    assert "(kube_builder portal), which cannot build: buildah is not installed" in \
        error["message"]
    assert Build.objects.count() == 1  # the job's, failed


@pytest.mark.real_kubernetes
@pytest.mark.django_db(transaction=True)
def test_the_real_api_server_runs_the_image_the_portal_built(
        real_kube_datacenter, registry, base, storage, celery_worker, alice, pfs_home,
        real_kube):
    """On the real control plane, as the portal's ServiceAccount with the admission policy and
    Pod Security enforced: the portal builds and pushes, the namespace gets no builder, and
    the pods the real Job controller makes (and the scheduler binds to the node) name the
    pushed image by its digest, pulled with the owner's pull secret."""
    from kubernetes import client

    from tests.real_kube.control_plane import api_client

    datacenter = portal_built(real_kube_datacenter, registry, alice)
    pkg = package(pfs_home, base, "print('trained on the real control plane')\n")
    job = wait_for(submit(alice, datacenter, pkg), ("starting", "running", *FINAL), timeout=600)
    build = Build.objects.get()
    pushed(build)
    assert job.image == f"{build.image}@{build.image_digest}", job.state_reason
    selector = f"paddlecloud.org/job-uid={job.uid}"
    with api_client(real_kube.admin_kubeconfig) as admin:
        core = client.CoreV1Api(admin)

        def pods():
            return core.list_namespaced_pod("paddle-alice", label_selector=selector).items

        found = wait(pods, timeout=120, message="the job's pods")
        builders = client.BatchV1Api(admin).list_namespaced_job(
            "paddle-alice", label_selector="app.kubernetes.io/component=build").items
    assert builders == []
    for pod in found:
        assert {c.image for c in pod.spec.containers + (pod.spec.init_containers or [])} == {
            job.image}
        assert [s.name for s in pod.spec.image_pull_secrets] == ["paddlecloud-registry-builds"]
