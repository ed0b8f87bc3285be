"""A job's pods as Kubernetes sees them: where the replicas listen and find their files, their
environment written once for every index, the PFS volume, and the pod template of a role.

A replica's environment is ``paddlecloud_core.contract.replica_env``, the same as on the local
backend; one pod template serves every index of a role, so a value that differs by index is written
with ``$(PADDLE_TRAINER_ID)`` or ``$(PADDLE_PSERVER_ID)``, which Kubernetes expands from the
first variable of the list: the index, from the downward API. Every other ``$`` is doubled, so
Kubernetes leaves the values (and the entry command) as they were written. The contract's secret
variables (``SECRET_ENV``: a job master's token) are never written in a pod template: the pods
read them from the job's Secret (``job_secret``, made by ``manifests``), so a dry run shows only
the reference.
"""

from __future__ import annotations

import copy
import os

from django.conf import settings

from paddlecloud_core import layout
from paddlecloud_core.contract import (
    SECRET_ENV,
    Paths,
    TaskMaster,
    Topology,
    master_token,
    master_url,
    pfs_paths,
    replica_env,
    session_access,
    trainers_least,
)

from .names import (
    FIRST_ATTEMPT_LABEL,
    KUEUE_GROUP_LABEL,
    KUEUE_GROUP_TOTAL_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    KUEUE_RETRIABLE_ANNOTATION,
    LOCAL_QUEUE,
    PFS_CLAIM,
    PSERVER,
    PSERVER_PORT,
    TRAINER,
    TRAINER_PORT,
    VOLCANO_GROUP_ANNOTATION,
    job_labels,
    master_endpoint,
    object_base,
    pserver_endpoint,
    pull_secret_name,
    trainer_endpoint,
    trainer_name,
    uid_short,
)
from .scripts import (
    ENV_DIGEST_ENV,
    INIT_SCRIPT_NAME,
    INSTALLED_ENV,
    LOG_ENV,
    PACKAGE_ENV,
    PEERS_ARGUMENT,
    PEERS_ENDED_ENV,
    PEERS_ENV,
    PEERS_LISTENING_ENV,
    REQUIREMENTS_LOG_ENV,
    RUN_SCRIPT_NAME,
    SCRIPTS_DIR,
    SITE_PACKAGES_ENV,
    WORKSPACE_ENV,
)
from .settings import (
    KUBE_VOLUME_SOURCES,
    ephemeral_storage,
    kube_settings,
    kube_volume_problem,
    termination_grace,
)


class ManifestError(Exception):
    """A job's objects cannot be built; the message says what an admin or the user must do."""


WORKSPACE = layout.WORKSPACE
# The containers' HOME (and XDG_CACHE_HOME under it), writable whatever the uid: a uid the
# image's /etc/passwd does not name gets HOME=/, where nothing can be written (pip's, Paddle's
# and the datasets' caches go to ~/.cache).
HOME = "/home/paddlecloud"
HOME_ENV = {"HOME": HOME, "XDG_CACHE_HOME": f"{HOME}/.cache"}
PFS_VOLUME = "pfs"
WORKSPACE_VOLUME = "workspace"
HOME_VOLUME = "home"
SCRIPTS_VOLUME = "paddlecloud"
SHM_VOLUME = "dshm"
# Every container: no way to gain privileges or capabilities (Pod Security "restricted").
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}

# Which replica a pod is: the first variable of its environment, from the downward API.
ID_VARIABLE = {TRAINER: "PADDLE_TRAINER_ID", PSERVER: "PADDLE_PSERVER_ID"}
ID_FIELD = {
    TRAINER: "metadata.annotations['batch.kubernetes.io/job-completion-index']",
    PSERVER: "metadata.labels['apps.kubernetes.io/pod-index']",  # Kubernetes >= 1.28
}
PORT = {TRAINER: TRAINER_PORT, PSERVER: PSERVER_PORT}


# --- where replicas listen and find their files --------------------------------------------------

def pfs_home(job) -> str:
    return layout.pfs_home(job.datacenter.name, job.owner.username)


def paths(job) -> Paths:
    """Under the mounts, at their PFS paths (as in a local sandbox): output and checkpoints
    in the owner's home."""
    return pfs_paths(job.datacenter.name, job.owner.username, job.name)


def site_packages_rel(job) -> layout.Rel:
    """Where the job's requirements.txt is installed, once for all its pods, in its owner's
    home; per uid, as an earlier job of the same name may still be running with its own."""
    return layout.site_packages_rel(job.name, uid_short(job))


def site_packages_dir(job) -> str:
    """Where the pods find the job's requirements, under the PFS mount: its environment in the
    owner's home when the portal knows its digest (``Job.environment``: ``env_digest``), else
    ``site_packages_rel``."""
    if job.environment:
        return "/".join((pfs_home(job), *layout.env_rel(job.environment), "site-packages"))
    return "/".join((pfs_home(job), *site_packages_rel(job)))


def topology(job, namespace: str, trainers: int | None = None) -> Topology:
    """Stable DNS names: trainers through their headless Service, pservers through their
    StatefulSet's; a collective job's rendezvous on trainer 0; a job with a dataset's master
    through the portal's Service. ``trainers``: how many to name, when an elastic job has
    more than its MAX (replacements of lost ones, with indexes of their own)."""
    return _topology(job, namespace, max(job.trainers, trainers or 0), job.pservers)


def _topology(job, namespace: str, trainers: int, pservers: int) -> Topology:
    return Topology(
        pservers=tuple(pserver_endpoint(job, namespace, i) for i in range(pservers)),
        trainers=tuple(trainer_endpoint(job, namespace, i) for i in range(trainers)),
        master=None if pservers else master_endpoint(job, namespace),
        task_master=master_access(job),
        # A session's code reaches the portal where a master's calls do.
        session=session_access(settings.SECRET_KEY, job, settings.PADDLECLOUD_MASTER_BASE_URL),
    )


def master_access(job) -> TaskMaster | None:
    """Where the job's pods reach its master: ``PADDLECLOUD_MASTER_BASE_URL`` (the portal as
    the cluster sees it); None for a job without a dataset."""
    if not job.dataset:
        return None
    return TaskMaster(url=master_url(settings.PADDLECLOUD_MASTER_BASE_URL, job.uid),
                      token=master_token(settings.SECRET_KEY, job.uid))


# --- the job's Secret ----------------------------------------------------------------------------

def job_secret_name(job) -> str:
    """The Secret that holds the job's secret variables (at most 49 + 4 characters)."""
    return f"{object_base(job)}-env"


def secret_env(job, namespace: str) -> dict[str, str]:
    """The contract's secret variables of the job's replicas (the same in every one), and
    their values: what the job's Secret holds; none for a job without a dataset."""
    env = replica_env(job, TRAINER, 0, topology(job, namespace), paths(job), namespace)
    return {name: value for name, value in sorted(env.items()) if name in SECRET_ENV}


def _secret_env_ref(job, name: str) -> dict:
    return {"name": name,
            "valueFrom": {"secretKeyRef": {"name": job_secret_name(job), "key": name}}}


# --- environment ---------------------------------------------------------------------------------

def literal(value: str) -> str:
    """``value`` as Kubernetes must be given it in env values and commands, where it expands
    ``$(NAME)``: ``$$`` stands for ``$``."""
    return value.replace("$", "$$")


def _common_prefix(a: str, b: str) -> str:
    end = 0
    while end < min(len(a), len(b)) and a[end] == b[end]:
        end += 1
    return a[:end]


def index_template(first: str, second: str, variable: str) -> str:
    """One value for every index, from the values for indexes 0 and 1: the index becomes
    ``$(variable)``."""
    prefix = _common_prefix(first, second)
    suffix = _common_prefix(first[len(prefix):][::-1], second[len(prefix):][::-1])[::-1]
    if first != f"{prefix}0{suffix}" or second != f"{prefix}1{suffix}":
        raise ManifestError(f"{first!r} and {second!r} do not differ by their index alone")
    return f"{literal(prefix)}$({variable}){literal(suffix)}"


def _field_env(name: str, field_path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def role_env(job, role: str, namespace: str) -> list[dict]:
    """The contract's environment of every replica of ``role``, as one pod template's env:
    the index first, then POD_IP (the pod's IP), then ``replica_env``'s variables in order."""
    variable = ID_VARIABLE[role]
    job_paths = paths(job)
    actual = replica_env(job, role, 0, topology(job, namespace), job_paths, namespace)
    # Two indexes show what depends on the index, even in a job with only one replica.
    counts = {TRAINER: job.trainers, PSERVER: job.pservers}
    counts[role] = max(counts[role], 2)
    probe = _topology(job, namespace, counts[TRAINER], counts[PSERVER])
    first, second = (replica_env(job, role, i, probe, job_paths, namespace) for i in (0, 1))
    env = [_field_env(variable, ID_FIELD[role]), _field_env("POD_IP", "status.podIP")]
    for name, value in actual.items():
        if name in (variable, "POD_IP"):
            continue
        if name in SECRET_ENV:
            env.append(_secret_env_ref(job, name))
            continue
        if first[name] != second[name]:
            value = index_template(first[name], second[name], variable)
        else:
            value = literal(value)
        env.append({"name": name, "value": value})
    return env


def _with_defaults(env: list[dict], defaults: dict[str, str]) -> list[dict]:
    """``env`` and those of ``defaults`` it does not set: the job's own variables win, as on
    the local backend (defaults are already in Kubernetes' form)."""
    named = {item["name"] for item in env}
    return env + [{"name": name, "value": value} for name, value in defaults.items()
                  if name not in named]


def peers_template(job, role: str, namespace: str) -> str:
    """``PADDLECLOUD_PEERS``: the replicas ``run.sh`` waits for before the entry starts, this
    one first. Pservers and the trainers of a pserver job need the pservers; a collective job's
    trainers need each other. A trainer of a pserver job does not wait for the other trainers,
    which may have finished (and left DNS) by the time it is retried."""
    job_topology = topology(job, namespace)
    peers = job_topology.pservers if job.pservers else job_topology.trainers
    return ",".join(["$(PADDLE_CURRENT_ENDPOINT)", *(literal(p) for p in peers)])


def log_template(job, role: str) -> str:
    """The replica's archived log, as ``layout.log_relpath`` places it in the output."""
    first, second = (f"{paths(job).output}/{layout.log_relpath(role, i)}" for i in (0, 1))
    return index_template(first, second, ID_VARIABLE[role])


# --- volumes and resources -----------------------------------------------------------------------

def pfs_volume(datacenter) -> dict:
    """The datacenter's PFS root (holding ``home/`` and ``public/``), as its admin gave it, or
    the namespace's claim of it (a ``persistentVolume``: ``manifests.pfs_claim_objects``). The
    in-tree cephfs plugin is gone from Kubernetes 1.31: there, give the CephFS CSI driver's
    volume as a ``persistentVolume``."""
    source = kube_settings(datacenter).kube_volume
    hint = ("set its kube_volume: one Kubernetes volume source, "
            + ", ".join(KUBE_VOLUME_SOURCES) + ", e.g. {\"nfs\": {\"server\": …, \"path\": …}}")
    if not source:
        raise ManifestError(f"datacenter {datacenter.name} has no PFS volume for pods: {hint}")
    if (problem := kube_volume_problem(source)) is not None:
        raise ManifestError(f"datacenter {datacenter.name} has an unusable PFS volume: "
                            f"{problem}")
    if "persistentVolume" in source:
        return {"name": PFS_VOLUME, "persistentVolumeClaim": {"claimName": PFS_CLAIM}}
    return {"name": PFS_VOLUME, **copy.deepcopy(source)}


# GKE's Cloud Storage FUSE CSI driver mounts a bucket only in a pod that asks for its sidecar.
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"


def pfs_annotations(datacenter) -> dict[str, str]:
    """What a pod mounting the datacenter's PFS must say of it: GCS FUSE's sidecar wanted."""
    source = kube_settings(datacenter).kube_volume or {}
    csi = source.get("csi") or (source.get("persistentVolume") or {}).get("csi") or {}
    return {GCSFUSE_ANNOTATION: "true"} if csi.get("driver") == GCSFUSE_DRIVER else {}


def run_as(datacenter) -> tuple[int, int]:
    """The uid and gid of a job's containers: the datacenter's, else the portal's own, so
    that the portal can clear away what jobs write and users can delete their output."""
    settings_ = kube_settings(datacenter)
    uid, gid = settings_.kube_run_as_user, settings_.kube_run_as_group
    return (os.getuid() if uid is None else uid, os.getgid() if gid is None else gid)


def pod_security_context(datacenter) -> dict:
    """As the ``restricted`` Pod Security Standard asks (``runAsNonRoot`` only where the uid
    is not root: a datacenter that runs jobs as root gets ``baseline`` namespaces)."""
    uid, gid = run_as(datacenter)
    context = {"runAsUser": uid, "runAsGroup": gid}
    if uid != 0:
        context["runAsNonRoot"] = True
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context


def pfs_mounts(job) -> list[dict]:
    """The owner's home read-write and the public datasets read-only, at their /pfs paths."""
    job_paths = paths(job)
    return [
        {"name": PFS_VOLUME, "mountPath": job_paths.pfs_home,
         "subPath": f"home/{job.owner.username}"},
        {"name": PFS_VOLUME, "mountPath": job_paths.pfs_public, "subPath": "public",
         "readOnly": True},
    ]


def resources(cpu: int, memory: int, gpu: int = 0, storage: int = 0) -> dict:
    """Requests equal to limits (millicores, bytes; ``storage``: ephemeral-storage bytes, 0
    for none); GPUs as a limit, which Kubernetes also takes as the request."""
    amounts = {"cpu": f"{cpu}m", "memory": str(memory)}
    if storage:
        amounts["ephemeral-storage"] = str(storage)
    limits = {**amounts, "nvidia.com/gpu": str(gpu)} if gpu else dict(amounts)
    return {"requests": amounts, "limits": limits}


def _role_resources(job, role: str) -> dict:
    storage = ephemeral_storage(job.datacenter)
    if role == TRAINER:
        return resources(job.cpu, job.memory, job.gpu, storage)
    return resources(job.pscpu, job.psmemory, storage=storage)


def _mounts(job) -> list[dict]:
    return [*pfs_mounts(job), {"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE},
            {"name": HOME_VOLUME, "mountPath": HOME},
            {"name": SCRIPTS_VOLUME, "mountPath": SCRIPTS_DIR, "readOnly": True}]


def shm_volume(job) -> dict:
    """A trainer's /dev/shm (a container runtime's default is 64 MiB, too small for data
    loaders' shared memory): in memory, which counts against the container's memory limit,
    so at most half of the trainer's memory."""
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory",
                                             "sizeLimit": str(job.memory // 2)}}


# --- the pod template ----------------------------------------------------------------------------

def peers_listening(job, role: str, namespace: str) -> str:
    """``PADDLECLOUD_PEERS_LISTENING``: the peers that listen before this replica starts, so
    that it waits until they accept connections: a pserver job's trainers wait for the
    pservers. A collective job's trainers listen only once they all run (trainer 0's
    rendezvous is started by the launch itself), and pservers wait for no one."""
    if role != TRAINER or not job.pservers:
        return ""
    return ",".join(literal(p) for p in topology(job, namespace).pservers)


def kueue_pod_group(job) -> bool:
    """Whether Kueue admits the job's pods as one pod group rather than its trainers' Job.
    A pserver job's pods are made by two owners (the pservers' StatefulSet, the trainers'
    Job), which Kueue's integrations for those kinds would admit as two Workloads: the
    pservers would run, holding their share, while the trainers wait. So neither owner is
    queued; every pod of the job carries the group's labels, Kueue gates each pod as it is
    made and admits the group, both roles together, once all its pods exist. (An elastic
    job's group is its MIN trainers: Kueue removes pods past the group's count.)"""
    return kube_settings(job.datacenter).kube_scheduler == "kueue" and bool(job.pservers)


def peers_ended(job, first_attempt: int) -> str:
    """``PADDLECLOUD_PEERS_ENDED`` of a collective job's trainers: where those that succeeded
    say so, in the job's output, one directory per trainers' Job (``first_attempt`` tells
    them apart: a success of an earlier Job, whose trainers were all restarted since, is
    not this one's)."""
    return literal(f"{paths(job).output}/{layout.PEERS_ENDED_DIR}/{first_attempt}")


def pod_template(job, role: str, namespace: str, scripts_config_map: str, *,
                 first_attempt: int = 0) -> dict:
    """A pod of ``role``: two init containers, ``setup`` (``init.sh``: the package copied
    into the workspace, its requirements installed; from the image, when it was built from the
    package: ``jobs.builds``) and ``peers`` (``run.sh --peers``: until the
    replicas it talks to have addresses and accept connections); then the main container runs
    the entry under ``run.sh``. All run ``/bin/sh`` with the scripts of the job's root
    ConfigMap, as the datacenter's uid, without privileges."""
    site = site_packages_dir(job)
    datacenter = job.datacenter
    built = job.build_id is not None  # the runtime image holds the package, installed
    setup = {
        "name": "setup",
        "image": job.image,
        "command": ["/bin/sh", f"{SCRIPTS_DIR}/{INIT_SCRIPT_NAME}"],
        "env": [{"name": name, "value": literal(value)} for name, value in (
            (PACKAGE_ENV, layout.IMAGE_PACKAGE_DIR if built else job.package_run),
            (WORKSPACE_ENV, WORKSPACE), (SITE_PACKAGES_ENV, site),
            (REQUIREMENTS_LOG_ENV, f"{paths(job).output}/requirements.log"),
            *([(ENV_DIGEST_ENV, job.environment)] if job.environment else []),
            *([(INSTALLED_ENV, "1")] if built else []), *HOME_ENV.items())],
        "resources": _role_resources(job, role),
        "volumeMounts": _mounts(job),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": copy.deepcopy(CONTAINER_SECURITY),
    }
    defaults = {"PYTHONPATH": literal(f"{site}:{WORKSPACE}"), LOG_ENV: log_template(job, role),
                PEERS_ENV: peers_template(job, role, namespace)}
    if listening := peers_listening(job, role, namespace):
        defaults[PEERS_LISTENING_ENV] = listening
    if role == TRAINER and not job.pservers:
        defaults[PEERS_ENDED_ENV] = peers_ended(job, first_attempt)
    defaults.update(HOME_ENV)
    env = _with_defaults(role_env(job, role, namespace), defaults)
    peers = {
        "name": "peers",
        "image": job.image,
        "command": ["/bin/sh", f"{SCRIPTS_DIR}/{RUN_SCRIPT_NAME}", PEERS_ARGUMENT],
        "env": copy.deepcopy(env),
        "resources": resources(100, 64 * 2**20, storage=ephemeral_storage(datacenter)),
        "volumeMounts": _mounts(job),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": copy.deepcopy(CONTAINER_SECURITY),
    }
    mounts = _mounts(job)
    if role == TRAINER:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})  # noqa: S108 - a mount
    main = {
        "name": role,
        "image": job.image,
        "command": ["/bin/sh", f"{SCRIPTS_DIR}/{RUN_SCRIPT_NAME}", literal(job.entry)],
        "workingDir": WORKSPACE,
        "env": env,
        "ports": [{"name": "paddle", "containerPort": PORT[role]}],
        "resources": _role_resources(job, role),
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": copy.deepcopy(CONTAINER_SECURITY),
    }
    spec = {"restartPolicy": "Never" if role == TRAINER else "Always"}
    if role == TRAINER:
        spec["subdomain"] = trainer_name(job)
    spec.update({
        # What the datacenter means by stopping a replica politely (a kill, a failed job):
        # the garbage collector deletes the pods of a deleted root with their own grace.
        "terminationGracePeriodSeconds": termination_grace(datacenter),
        "enableServiceLinks": False,  # no variables for every Service of the namespace
        "automountServiceAccountToken": False,  # trainers have no business with the API
        "securityContext": pod_security_context(datacenter),
    })
    if job.registry is not None:
        spec["imagePullSecrets"] = [{"name": pull_secret_name(job.registry.name)}]
    settings_ = kube_settings(datacenter)
    if role == TRAINER and job.gpu:
        if settings_.kube_gpu_node_selector:
            spec["nodeSelector"] = dict(settings_.kube_gpu_node_selector)
        if settings_.kube_gpu_tolerations:
            spec["tolerations"] = copy.deepcopy(settings_.kube_gpu_tolerations)
    metadata = {"labels": job_labels(job, role)}
    if role == TRAINER:
        metadata["labels"][FIRST_ATTEMPT_LABEL] = str(first_attempt)
    annotations = pfs_annotations(datacenter)
    if settings_.kube_scheduler == "volcano":
        spec["schedulerName"] = "volcano"
        annotations[VOLCANO_GROUP_ANNOTATION] = object_base(job)
    if kueue_pod_group(job):
        metadata["labels"].update({KUEUE_QUEUE_LABEL: LOCAL_QUEUE,
                                   KUEUE_GROUP_LABEL: object_base(job)})
        annotations.update({
            KUEUE_GROUP_TOTAL_ANNOTATION: str(job.pservers + trainers_least(job)),
            KUEUE_RETRIABLE_ANNOTATION: "false"})
    if annotations:
        metadata["annotations"] = annotations
    volumes = [pfs_volume(datacenter), {"name": WORKSPACE_VOLUME, "emptyDir": {}},
               {"name": HOME_VOLUME, "emptyDir": {}},
               {"name": SCRIPTS_VOLUME, "configMap": {"name": scripts_config_map}}]
    if role == TRAINER:
        volumes.append(shm_volume(job))
    spec.update({"initContainers": [setup, peers], "containers": [main], "volumes": volumes})
    return {"metadata": metadata, "spec": spec}
