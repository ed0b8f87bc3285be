"""Runtime images built on Kubernetes (issue 19): a datacenter with a build registry builds the
image of a job whose package has a requirements.txt, in a BuildKit Job in the owner's
namespace, before the job is admitted; the job then runs that image, pinned to what was pushed.

The build registry is a real Distribution registry on 127.0.0.1 (asked whether the image is
there, with the owner's credentials); the cluster is the fake API server, which validates the
builder's objects against the Kubernetes schemas, and whose scripted kubelet plays the builder
pod (its log lines, its exit, the termination message buildctl writes). The build itself with
a real builder is tests/jobs/test_buildah.py and tests/jobs/test_builds_local.py."""

from __future__ import annotations

import hashlib
import json

import pytest
import requests

from jobs.backends.kubernetes.builder import CONTAINER
from jobs.models import Build, Job
from registries.services import registry_create
from tests.conftest import streamed
from tests.factories import package_write, submit_job
from tests.jobs.test_examples_on_kubernetes import wait_for
from tests.kube import datacenter_set
from tests.registry_server import registry_server

RESOURCES = {"Job": "jobs.batch", "ConfigMap": "configmaps"}
PUSHED = "sha256:" + "ab" * 32
FINAL = ("succeeded", "failed", "killed")


@pytest.fixture
def registry(tmp_path):
    with registry_server(tmp_path, users={"alice": "s3cret"}) as server:
        yield server


def with_build_registry(datacenter, registry, alice):
    """``datacenter`` building into ``registry``, where alice pushes as ``builds``."""
    datacenter.build_registry = f"{registry.host}/paddlecloud"
    datacenter.build_registry_insecure = True
    datacenter.save()
    registry_create(alice, datacenter, {"name": "builds", "server": registry.host,
                                        "username": "alice", "password": "s3cret"})
    return datacenter


@pytest.fixture
def build_datacenter(kube_datacenter, registry, alice, pfs_home):
    return with_build_registry(kube_datacenter, registry, alice)


def package(pfs_home, name: str = "pkg", requirements: str | None = "six==1.16.0\n") -> str:
    """A package of a trainer that imports six, with ``requirements`` (none: no file)."""
    return package_write(pfs_home, "import six\nprint('trained with six', six.__version__)\n",
                         name, None if requirements is None else {"requirements.txt": requirements})


def submit(alice, datacenter, pkg: str, name: str) -> Job:
    return submit_job(alice, datacenter, name, package=pkg, entry="python3 train.py",
                      image="registry.example.com/paddle:2.6")


def builder_objects(k8s_api, kind: str) -> list[dict]:
    return [o for o in k8s_api.store.list(RESOURCES[kind], "paddle-alice")
            if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "build"]


def push_manifest(registry, image: str) -> str:
    """Put a minimal image at ``image`` (host/repo:tag) through the registry's HTTP API."""
    repo, tag = image.split("/", 1)[1].rsplit(":", 1)
    auth = ("alice", "s3cret")
    blob = b"{}"
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    upload = requests.post(f"{registry.url}/v2/{repo}/blobs/uploads/", auth=auth, timeout=10)
    upload.raise_for_status()
    location = upload.headers["Location"]
    location = location if location.startswith("http") else registry.url + location
    requests.put(location, params={"digest": digest}, data=blob, auth=auth,
                 timeout=10).raise_for_status()
    manifest = json.dumps({"schemaVersion": 2,
                           "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": digest, "size": len(blob)},
                           "layers": []}).encode()
    answer = requests.put(f"{registry.url}/v2/{repo}/manifests/{tag}", data=manifest, auth=auth,
                          headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                          timeout=10)
    answer.raise_for_status()
    return answer.headers["Docker-Content-Digest"]


@pytest.mark.django_db(transaction=True)
def test_a_job_is_built_first_then_runs_its_image_and_its_build_log_is_a_worker(
        build_datacenter, celery_worker, alice, pfs_home, k8s_api, token_client):
    k8s_api.controller.script_pods("build-*", container=CONTAINER, line_interval=0.1,
                                   lines=["#1 [internal] load build definition from Dockerfile",
                                          "#6 RUN python3 -m pip install -r requirements.txt",
                                          "#6 Successfully installed six-1.16.0",
                                          "#8 pushing manifest done"],
                                   message=json.dumps({"containerimage.digest": PUSHED}))
    job = submit(alice, build_datacenter, package(pfs_home), "built")
    assert job.state == "building"
    job = wait_for(job, ("running", *FINAL))  # its trainers' Job made, its pods running
    assert job.state == "running", job.state_reason
    build = Build.objects.get()
    assert build.state == "succeeded" and build.image_digest == PUSHED
    assert build.image.startswith(f"{build_datacenter.build_registry}/paddle-alice/runtime:pc-")
    assert job.image == f"{build.image}@{PUSHED}" and job.build_id == build.pk
    assert job.registry.name == "builds"  # pulled with the credentials it was pushed with
    states = list(job.events.filter(replica=None).values_list("to_state", flat=True))
    assert states[:3] == ["building", "pending", "starting"], states

    # The builder: a Job the schemas accept, unprivileged, as a user, its Dockerfile beside it.
    [builder] = builder_objects(k8s_api, "Job")
    pod = builder["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["buildctl-daemonless.sh"]
    assert f"type=image,name={build.image},push=true,registry.insecure=true" in container["args"]
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["privileged"] is False
    assert {"name": "DOCKER_CONFIG", "value": "/paddlecloud-build-auth"} in container["env"]
    [dockerfile] = builder_objects(k8s_api, "ConfigMap")
    assert dockerfile["metadata"]["ownerReferences"][0]["uid"] == builder["metadata"]["uid"]
    text = dockerfile["data"]["Dockerfile"]
    assert "FROM registry.example.com/paddle:2.6\n" in text
    assert "COPY . /train/package\n" in text and "pip install -r" in text

    # The trainers run the built image, their package and requirements already in it.
    [trainers] = [o for o in k8s_api.store.list("jobs.batch", "paddle-alice")
                  if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "build"]
    spec = trainers["spec"]["template"]["spec"]
    assert {c["image"] for c in spec["containers"] + spec["initContainers"]} == {job.image}
    setup = {e["name"]: e.get("value") for e in spec["initContainers"][0]["env"]}
    assert setup["PADDLECLOUD_PACKAGE"] == "/train/package"
    assert setup["PADDLECLOUD_INSTALLED"] == "1"

    # Its log, followed like any worker's.
    answer = token_client.get("/api/v1/jobs/built/logs", {"worker": "build"})
    assert answer.status_code == 200
    text = streamed(answer).decode()
    assert "#6 Successfully installed six-1.16.0" in text
    assert f"paddlecloud: pushed {build.image}@{PUSHED}" in text


@pytest.mark.django_db(transaction=True)
def test_a_failed_build_fails_the_job_with_the_builders_last_lines_and_is_not_kept(
        build_datacenter, celery_worker, alice, pfs_home, k8s_api):
    k8s_api.controller.script_pods("build-*", container=CONTAINER, exit_code=1, lines=[
        "#6 RUN python3 -m pip install -r requirements.txt",
        "#6 ERROR: No matching distribution found for no-such-package-paddlecloud==0.0.1",
        "error: failed to solve: process did not complete successfully: exit code: 1"])
    pkg = package(pfs_home, requirements="no-such-package-paddlecloud==0.0.1\n")
    job = wait_for(submit(alice, build_datacenter, pkg, "broken"), FINAL)
    assert job.state == "failed"
    assert job.state_reason.startswith("building its runtime image failed: the builder failed "
                                       "(exit 1)")
    assert "No matching distribution found for no-such-package-paddlecloud" in job.state_reason
    assert "\n" not in job.state_reason  # one line: the lines saying what went wrong
    assert Build.objects.get().state == "failed"
    # A failure is not kept: the next job builds again.
    k8s_api.controller.script_pods("build-*", container=CONTAINER,
                                   message=json.dumps({"containerimage.digest": PUSHED}))
    again = wait_for(submit(alice, build_datacenter, pkg, "again"),
                     ("starting", "running", *FINAL))
    assert again.state in ("starting", "running"), again.state_reason
    assert Build.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_an_image_in_the_registry_is_not_built_again_and_concurrent_jobs_share_one_build(
        build_datacenter, celery_worker, alice, pfs_home, k8s_api, registry):
    k8s_api.controller.script_pods("build-*", container=CONTAINER, run_seconds=3,
                                   message=json.dumps({"containerimage.digest": PUSHED}))
    pkg = package(pfs_home)
    first, second = (submit(alice, build_datacenter, pkg, name) for name in ("one", "two"))
    first, second = (wait_for(j, ("starting", "running", *FINAL)) for j in (first, second))
    build = Build.objects.get()  # one build for both
    assert first.build_id == second.build_id == build.pk
    assert first.image == second.image == f"{build.image}@{PUSHED}"
    assert len(builder_objects(k8s_api, "Job")) == 1

    # Once the image is in the registry, a job with the same package builds nothing.
    found = push_manifest(registry, build.image)
    third = wait_for(submit(alice, build_datacenter, pkg, "three"),
                     ("pending", "queued", "starting", "running", *FINAL))
    assert third.state not in FINAL, third.state_reason
    assert third.image == f"{build.image}@{found}" and third.build_id is None
    assert Build.objects.count() == 1
    assert third.events.filter(reason__contains="was built before: nothing to build").exists()

    # A package with no requirements.txt builds nothing: it runs the image it named.
    plain = submit(alice, build_datacenter, package(pfs_home, "plain", requirements=None),
                   "plain")
    assert plain.state != "building" and plain.image == "registry.example.com/paddle:2.6"


@pytest.mark.django_db(transaction=True)
def test_credentials_the_registry_refuses_are_named(
        build_datacenter, celery_worker, alice, pfs_home):
    from registries.services import registry_update

    registry_update(alice, build_datacenter, "builds", {"password": "wrong"})
    job = wait_for(submit(alice, build_datacenter, package(pfs_home), "refused"), FINAL)
    assert job.state == "failed"
    assert "refused" in job.state_reason and "'builds'" in job.state_reason, job.state_reason
    assert not Build.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_packages_own_dockerfile_is_built_as_given_and_a_runtime_image_is_not_rebuilt(
        build_datacenter, celery_worker, alice, pfs_home, k8s_api):
    k8s_api.controller.script_pods("build-*", container=CONTAINER,
                                   message=json.dumps({"containerimage.digest": PUSHED}))
    pkg = package(pfs_home, requirements=None)
    own = "FROM python:3.11-slim\nCOPY . /app\nRUN pip install six\nWORKDIR /app\n"
    (pfs_home / "pkg" / "Dockerfile").write_text(own)
    job = wait_for(submit(alice, build_datacenter, pkg, "own"), ("starting", "running", *FINAL))
    assert job.state in ("starting", "running"), job.state_reason
    [dockerfile] = builder_objects(k8s_api, "ConfigMap")
    assert dockerfile["data"]["Dockerfile"] == own
    assert Build.objects.get().dockerfile is True

    # Submitting the built image itself (paddlectl build, then submit -image): run as it is.
    again = submit_job(alice, build_datacenter, "as-built", package=pkg,
                       entry="python3 train.py", image=job.image)
    assert again.state != "building" and again.image == job.image
    assert Build.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_killing_the_only_job_waiting_for_a_build_cancels_it(
        build_datacenter, celery_worker, alice, pfs_home, k8s_api):
    from jobs.services import job_kill
    from tests.polling import wait

    k8s_api.controller.script_pods("build-*", container=CONTAINER, lines=["#1 working"],
                                   run_seconds=120)
    job = submit(alice, build_datacenter, package(pfs_home), "doomed")
    wait(lambda: builder_objects(k8s_api, "Job"), message="the builder Job")
    job_kill(alice, build_datacenter, "doomed")
    wait(lambda: not builder_objects(k8s_api, "Job"), message="the builder Job to be deleted")
    job.refresh_from_db()
    assert job.state == "killed"
    build = Build.objects.get()
    assert (build.state, build.reason) == ("failed", Build.CANCELLED)


@pytest.mark.real_kubernetes
@pytest.mark.django_db(transaction=True)
def test_the_real_api_server_takes_the_builders_objects_and_its_node_runs_the_builder(
        real_kube_datacenter, registry, celery_worker, alice, pfs_home, real_kube):
    """On the real control plane, as the portal's ServiceAccount with the admission policy
    and Pod Security enforced: the builder's Job and its Dockerfile's ConfigMap are created in
    the namespace the backend made, the real Job controller and scheduler start its pod and the
    node agent runs it. The node runs this machine's programs, which have no BuildKit: the
    build fails, and the job with the builder's last lines (what a user sees of a broken
    builder image)."""
    from kubernetes import client

    from tests.real_kube.control_plane import api_client

    datacenter = with_build_registry(real_kube_datacenter, registry, alice)
    job = wait_for(submit(alice, datacenter, package(pfs_home), "built"), FINAL, timeout=120)
    assert job.state == "failed"
    assert job.state_reason.startswith("building its runtime image failed: the builder failed"), \
        job.state_reason
    assert "buildctl-daemonless.sh" in job.state_reason, job.state_reason
    build = Build.objects.get()
    with api_client(real_kube.admin_kubeconfig) as admin:
        selector = f"paddlecloud.org/build={build.uid}"
        [builder] = client.BatchV1Api(admin).list_namespaced_job(
            "paddle-alice", label_selector=selector).items
        [pod] = client.CoreV1Api(admin).list_namespaced_pod(
            "paddle-alice", label_selector=selector).items
        [dockerfile] = client.CoreV1Api(admin).list_namespaced_config_map(
            "paddle-alice", label_selector=selector).items
    assert pod.spec.node_name == "node-1" and pod.status.phase == "Failed"
    assert pod.spec.containers[0].command == ["buildctl-daemonless.sh"]
    assert dockerfile.metadata.owner_references[0].uid == builder.metadata.uid


@pytest.mark.real_kubernetes
@pytest.mark.django_db(transaction=True)
def test_the_real_api_server_takes_the_unconfined_builder_in_the_administrators_namespace(
        real_kube_datacenter, registry, celery_worker, alice, pfs_home, real_kube):
    """The unconfined builder on the real control plane, as the portal's ServiceAccount: in
    the namespace the administrator made (Pod Security privileged, labelled as the
    portal's), the portal binds its rights, makes the PFS claim, the builder Job with seccomp
    and AppArmor unconfined and the push credentials, and Pod Security admits the pod, which
    the node agent runs (and which fails: no BuildKit on this machine). That pod is what
    ``baseline`` refuses in the user's namespace. (The node agent ignores the profiles: that
    the builder then works on COS is BuildKit's documented rootless setup, not shown here.)"""
    from kubernetes import client

    from tests.real_kube.control_plane import api_client

    with api_client(real_kube.admin_kubeconfig) as admin:
        client.CoreV1Api(admin).create_namespace({"metadata": {
            "name": BUILDS_NAMESPACE, "labels": {
                "app.kubernetes.io/managed-by": "paddlecloud",
                "pod-security.kubernetes.io/enforce": "privileged"}}})
    datacenter = with_build_registry(real_kube_datacenter, registry, alice)
    datacenter_set(datacenter, kube_builder="unconfined",
                   kube_builder_namespace=BUILDS_NAMESPACE)
    job = wait_for(submit(alice, datacenter, package(pfs_home), "built"), FINAL, timeout=120)
    assert job.state == "failed"
    assert "buildctl-daemonless.sh" in job.state_reason, job.state_reason
    build = Build.objects.get()
    with api_client(real_kube.admin_kubeconfig) as admin:
        selector = f"paddlecloud.org/build={build.uid}"
        core = client.CoreV1Api(admin)
        [builder] = client.BatchV1Api(admin).list_namespaced_job(
            BUILDS_NAMESPACE, label_selector=selector).items
        [pod] = core.list_namespaced_pod(BUILDS_NAMESPACE, label_selector=selector).items
        [secret] = core.list_namespaced_secret(BUILDS_NAMESPACE, label_selector=selector).items
        refused = None
        try:  # the same pod in the user's (baseline) namespace, as the admin, a dry run
            core.create_namespaced_pod("paddle-alice", {
                "metadata": {"name": "unconfined-builder",
                             "annotations": pod.metadata.annotations},
                "spec": {"containers": [{
                    "name": CONTAINER, "image": pod.spec.containers[0].image,
                    "securityContext": admin.sanitize_for_serialization(
                        pod.spec.containers[0].security_context)}],
                    "restartPolicy": "Never"}}, dry_run="All")
        except client.ApiException as exc:
            refused = exc
    assert pod.spec.containers[0].security_context.seccomp_profile.type == "Unconfined"
    assert pod.spec.node_name == "node-1" and pod.status.phase == "Failed"
    assert secret.metadata.owner_references[0].uid == builder.metadata.uid
    assert refused is not None and refused.status == 403, refused
    assert "violates PodSecurity" in refused.body and "seccompProfile" in refused.body


BUILDS_NAMESPACE = "paddlecloud-builds"


def unconfined_builds(k8s_api, datacenter) -> None:
    """The datacenter builds unconfined in ``BUILDS_NAMESPACE``, which its administrator made
    (Pod Security privileged, labelled as the portal's); its builders push ``PUSHED``."""
    from kubernetes import client

    with k8s_api.api_client() as api:  # as the administrator
        client.CoreV1Api(api).create_namespace({"metadata": {
            "name": BUILDS_NAMESPACE, "labels": {
                "app.kubernetes.io/managed-by": "paddlecloud",
                "pod-security.kubernetes.io/enforce": "privileged"}}})
    datacenter_set(datacenter, kube_builder="unconfined",
                   kube_builder_namespace=BUILDS_NAMESPACE)
    k8s_api.controller.script_pods("build-*", container=CONTAINER,
                                   message=json.dumps({"containerimage.digest": PUSHED}))


@pytest.mark.django_db(transaction=True)
def test_the_unconfined_builder_runs_in_the_administrators_namespace(
        build_datacenter, celery_worker, alice, pfs_home, k8s_api):
    """Where the nodes' defaults refuse a rootless builder (GKE on COS, --seccomp-default):
    the same builder, unprivileged, with seccomp and AppArmor unconfined, in the namespace the
    administrator made for it (Pod Security privileged, labelled as the portal's), with the
    portal's rights there and the push credentials copied there, owned by the builder."""
    unconfined_builds(k8s_api, build_datacenter)
    job = wait_for(submit(alice, build_datacenter, package(pfs_home), "built"),
                   ("starting", "running", *FINAL))
    assert job.state in ("starting", "running"), job.state_reason
    [builder] = k8s_api.store.list("jobs.batch", BUILDS_NAMESPACE)
    [container] = builder["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"] == {
        "privileged": False, "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
        "seccompProfile": {"type": "Unconfined"}}
    assert builder["spec"]["template"]["metadata"]["annotations"] == {
        f"container.apparmor.security.beta.kubernetes.io/{CONTAINER}": "unconfined"}
    [auth] = [v for v in builder["spec"]["template"]["spec"]["volumes"]
              if v["name"] == "docker-config"]
    secret = k8s_api.get("secrets", BUILDS_NAMESPACE, auth["secret"]["secretName"])
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == builder["metadata"]["uid"]
    binding = k8s_api.get("rolebindings.rbac.authorization.k8s.io", BUILDS_NAMESPACE,
                          "paddlecloud-portal")
    assert binding["roleRef"]["name"] == "paddlecloud-portal-namespace"
    assert not builder_objects(k8s_api, "Job")  # none in the user's namespace


@pytest.mark.django_db(transaction=True)
def test_the_unconfined_builder_waits_for_the_portals_rights_in_its_namespace(
        build_datacenter, celery_worker, alice, pfs_home, k8s_api):
    """The portal binds its role in the administrator's namespace and makes the builder there
    at once; the API server's RBAC authorizer, which learns of RoleBindings from a watch,
    refuses it 403 until it has seen the binding. The builder is made once it has, not
    refused. (The fake API server, whose authorizer ignores bindings younger than a lag the
    test chooses: the real one's lag is milliseconds, longer under load, and cannot be.)"""
    k8s_api.settings.rbac_binding_lag_seconds = 0.6
    unconfined_builds(k8s_api, build_datacenter)
    job = wait_for(submit(alice, build_datacenter, package(pfs_home), "built"),
                   ("starting", "running", *FINAL))
    assert job.state in ("starting", "running"), job.state_reason
    assert [b["metadata"]["name"] for b in k8s_api.store.list("jobs.batch", BUILDS_NAMESPACE)]


@pytest.mark.django_db(transaction=True)
def test_a_datacenter_whose_builder_is_off_fails_builds_saying_why(
        build_datacenter, celery_worker, alice, pfs_home, k8s_api):
    """GKE Autopilot: nothing in the cluster can build; a job that needs a build fails with
    the reason, and no builder is made."""
    datacenter_set(build_datacenter, kube_builder="off")
    job = wait_for(submit(alice, build_datacenter, package(pfs_home), "built"), FINAL)
    assert job.state == "failed"
    assert "builds no images" in job.state_reason, job.state_reason
    assert not builder_objects(k8s_api, "Job")
