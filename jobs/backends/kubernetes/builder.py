"""The builder of a runtime image (``jobs.builds``) on Kubernetes: a Job in the owner's
namespace running BuildKit rootless (``buildctl-daemonless.sh``), objects as data.

Why BuildKit: it is Docker's own builder, maintained by the Moby project, and runs as an
ordinary user (uid 1000) without privilege or added capability, with no daemon left behind.
Kaniko, the other builder long used for this, was archived by Google in 2025; buildah needs
root or user-namespace mappings in the pod. BuildKit's rootless mode creates a user namespace
for its steps (RootlessKit); ``--oci-worker-no-process-sandbox`` keeps it from also needing
its own PID namespace and /proc. The pod therefore sets no seccomp or AppArmor profile of its
own (the Pod Security Standards' ``baseline`` allows that; ``restricted`` does not, so the
namespaces of a datacenter with a build registry are ``baseline``): it runs where the nodes'
defaults let a user namespace be made — the kubelet's default ``Unconfined`` seccomp, and no
AppArmor profile forbidding it.

Where the nodes' defaults do not allow it, the datacenter's ``kube_builder`` says what to do
(docs/users/jobs.md has the matrix): ``rootless`` (the above, in the owner's namespace) works on
kubeadm, EKS, AKS and GKE on Ubuntu nodes whose kubelet keeps the default ``Unconfined``
seccomp; it fails where the kubelet runs ``--seccomp-default`` (RuntimeDefault refuses
``unshare``), on GKE's COS nodes (their containers' AppArmor profile refuses the mounts
RootlessKit makes) and on Ubuntu 23.10+ nodes (unprivileged user namespaces restricted by
AppArmor). ``unconfined`` runs the same builder, still uid 1000 and unprivileged, with seccomp
and AppArmor ``Unconfined``, which no ``baseline`` namespace admits: so in a namespace the
administrator makes for builds (``kube_builder_namespace``, Pod Security ``privileged``,
labelled as the portal's so that it may write there), with the push credentials copied there
as a Secret the builder Job owns. GKE Autopilot admits neither profile, nor a privileged pod,
so nothing in the cluster can build there: ``portal`` builds on the portal's machine instead
(buildah in its worker, ``jobs.backends.buildah``, as a local datacenter builds: the package
read from the owner's PFS, the steps reaching only the allowed package indexes, pushed with
the owner's credentials), and the pods pull the pushed digest as after a builder Job. buildah
there makes containers in user namespaces too, so the portal's worker must run where that is
allowed (a VM, a node pool of its own): not in a pod of the Autopilot cluster. ``off`` refuses
builds with a reason.

The build context is the trainer package, read-only from the PFS mount; the Dockerfile comes
in a ConfigMap the Job owns; the push credentials are the owner's pull secret for the
registry, as ``DOCKER_CONFIG``. buildctl writes what it pushed (``containerimage.digest``) to
the container's termination message, where the portal reads it from the pod's status.
"""

from __future__ import annotations

import json

from paddlecloud_core.layout import pfs_path_split

from .names import COMPONENT_LABEL, MANAGED_BY, MANAGED_BY_LABEL, OWNER_LABEL, pull_secret_name
from .pods import PFS_VOLUME, pfs_annotations, pfs_volume, resources

BUILD_LABEL = "paddlecloud.org/build"
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io"
CONTAINER = "buildkit"
BUILDER_UID = 1000  # the rootless BuildKit image's user
DOCKERFILE_DIR = "/paddlecloud-build"
DOCKER_CONFIG_DIR = "/paddlecloud-build-auth"
CONTEXT_DIR = "/paddlecloud-build-context"
STATE_DIR = "/home/user/.local/share/buildkit"
METADATA = "/dev/termination-log"
BUILD_SECONDS = 3600
KEEP_SECONDS = 600  # a finished builder Job is removed by Kubernetes after this
BUILDER_CPU, BUILDER_MEMORY = 1000, 2 * 2**30  # millicores, bytes


def builder_name(build) -> str:
    return f"build-{build.uid.hex[:20]}"


def push_secret_name(build) -> str:
    """The push credentials of an unconfined build, in the builders' namespace."""
    return f"{builder_name(build)}-push"


def _labels(build) -> dict:
    return {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: "build", BUILD_LABEL: str(build.uid),
            OWNER_LABEL: str(build.owner_id)}


def _package_subpath(build) -> str:
    """The package below the PFS root (the volume's subPath): home/<user>/…"""
    path = pfs_path_split(build.package)
    return "/".join((path.area, *((path.user,) if path.area == "home" else ()), *path.parts))


def builder_job(build, namespace: str, image: str, *, insecure: bool, auth: bool,
                unconfined: bool = False) -> dict:
    """The Job that builds and pushes ``build.image``; ``auth``: push with the owner's pull
    secret of ``build.registry`` (``unconfined``: its copy ``push_secret_name``); and
    ``unconfined``: with seccomp and AppArmor unconfined."""
    name = builder_name(build)
    output = f"type=image,name={build.image},push=true"
    if insecure:
        output += ",registry.insecure=true"
    args = ["build", "--progress", "plain", "--frontend", "dockerfile.v0",
            "--local", f"context={CONTEXT_DIR}", "--local", f"dockerfile={DOCKERFILE_DIR}",
            "--output", output, "--metadata-file", METADATA]
    env = [{"name": "BUILDKITD_FLAGS", "value": "--oci-worker-no-process-sandbox"}]
    mounts = [{"name": PFS_VOLUME, "mountPath": CONTEXT_DIR, "subPath": _package_subpath(build),
               "readOnly": True},
              {"name": "dockerfile", "mountPath": DOCKERFILE_DIR, "readOnly": True},
              {"name": "buildkitd", "mountPath": STATE_DIR}]
    volumes = [pfs_volume(build.datacenter),
               {"name": "dockerfile", "configMap": {"name": name}},
               {"name": "buildkitd", "emptyDir": {}}]
    if auth:
        env.append({"name": "DOCKER_CONFIG", "value": DOCKER_CONFIG_DIR})
        mounts.append({"name": "docker-config", "mountPath": DOCKER_CONFIG_DIR,
                       "readOnly": True})
        volumes.append({"name": "docker-config", "secret": {
            "secretName": push_secret_name(build) if unconfined
            else pull_secret_name(build.registry.name),
            "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}})
    container = {
        "name": CONTAINER, "image": image, "command": ["buildctl-daemonless.sh"], "args": args,
        "env": env, "volumeMounts": mounts,
        "resources": resources(BUILDER_CPU, BUILDER_MEMORY),
        "terminationMessagePath": METADATA, "terminationMessagePolicy": "File",
        "securityContext": {"privileged": False, "runAsNonRoot": True,
                            "runAsUser": BUILDER_UID, "runAsGroup": BUILDER_UID},
    }
    template = {"labels": _labels(build)}
    annotations = pfs_annotations(build.datacenter)
    if unconfined:
        container["securityContext"]["seccompProfile"] = {"type": "Unconfined"}
        # The annotation, not securityContext.appArmorProfile: that field came with 1.30, and
        # the API server keeps the two in step.
        annotations[f"{APPARMOR_ANNOTATION}/{CONTAINER}"] = "unconfined"
    if annotations:
        template["annotations"] = annotations
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(build)},
        "spec": {
            "backoffLimit": 0, "activeDeadlineSeconds": BUILD_SECONDS,
            "ttlSecondsAfterFinished": KEEP_SECONDS,
            "template": {
                "metadata": template,
                "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                         "enableServiceLinks": False, "containers": [container],
                         "volumes": volumes},
            },
        },
    }


def builder_dockerfile(build, namespace: str, dockerfile: str, owner: dict) -> dict:
    """The ConfigMap holding the Dockerfile, owned by the builder Job (``owner``: the Job as
    the API server returned it), so that it goes with it."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": builder_name(build), "namespace": namespace,
                     "labels": _labels(build), "ownerReferences": _owned_by(owner)},
        "data": {"Dockerfile": dockerfile},
    }


def _owned_by(job: dict) -> list[dict]:
    """The ownerReferences to the builder Job ``job`` (as the API server returned it)."""
    meta = job["metadata"]
    return [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
             "controller": False, "blockOwnerDeletion": False}]


def builder_push_secret(build, secret: dict, owner: dict) -> dict:
    """The owner's pull secret ``secret`` (``manifests.pull_secret``, in the builders'
    namespace) as the unconfined builder's push credentials, owned by its Job ``owner`` so
    that they go with it."""
    return {**secret, "metadata": {
        "name": push_secret_name(build), "namespace": owner["metadata"]["namespace"],
        "labels": _labels(build), "ownerReferences": _owned_by(owner)}}


def pushed_digest(message: str) -> str | None:
    """The digest buildctl's metadata file (the termination message) says was pushed."""
    try:
        metadata = json.loads(message or "{}")
    except ValueError:
        return None
    digest = metadata.get("containerimage.digest") if isinstance(metadata, dict) else None
    return digest if isinstance(digest, str) and digest.startswith("sha256:") else None
