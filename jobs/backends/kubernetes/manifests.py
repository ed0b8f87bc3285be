"""A user's namespace and a job's Kubernetes objects, as the plain dicts that are POSTed.

Pure functions of their arguments: they never touch the database (a dry run builds the
objects of a job that is not saved) nor the API server.

A job's objects hang off a root ConfigMap (``job_root``: the job's spec as ``job.json``, and
the pods' scripts), which the backend creates first; every other object (``job_children``)
names the root in an ownerReference with the uid the API server gave it, so deleting the root
deletes the job. In creation order:

- the pservers' headless Service and their StatefulSet (jobs with pservers only),
- the trainers' headless Service (the DNS names of ``PADDLE_TRAINER_ENDPOINTS``),
- the trainers' Indexed Job: an index per trainer, ``restart_limit`` retries per index, and
  the job fails as soon as one index has no retries left.

``job_objects`` is all of them, for dry runs and validation; without the root's uid (nothing
was created yet) the children carry no ownerReference, so its output stays safe to apply by
hand: an ownerReference to a made-up uid would have the garbage collector delete the object.

Pservers restart in place (their StatefulSet's pods are restarted by the kubelet without
limit); a deadline and the TTL after finishing are the trainers' Job's: the backend deletes the
root, and with it the pservers, when the job ends.
"""

from __future__ import annotations

import base64
import dataclasses
import json

from paddlecloud_core.contract import job_namespace
from paddlecloud_core.spec import JobSpec

from .names import (
    COMPONENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OWNER_LABEL,
    OWNER_NAME_ANNOTATION,
    PSERVER,
    PSERVER_PORT,
    REGISTRY_LABEL,
    TRAINER,
    TRAINER_PORT,
    job_labels,
    object_base,
    pserver_name,
    pull_secret_name,
    role_selector,
    trainer_name,
)
from .pods import ManifestError as ManifestError  # raised by the builders; callers catch it here
from .pods import pod_template
from .scripts import INIT_SCRIPT, INIT_SCRIPT_NAME, RUN_SCRIPT, RUN_SCRIPT_NAME

QUOTA_NAME = "paddlecloud"
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
POD_SECURITY_VERSION = "pod-security.kubernetes.io/enforce-version"
# What a container that asks for nothing gets, at most the quota.
DEFAULT_CONTAINER_CPU = 1000
DEFAULT_CONTAINER_MEMORY = 2**30
JOB_SPEC_KEY = "job.json"


def _metadata(name: str, namespace: str, labels: dict, *, annotations: dict | None = None,
              root: dict | None = None) -> dict:
    metadata = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    if root is not None:
        metadata["ownerReferences"] = [root]
    return metadata


# --- the user's namespace ------------------------------------------------------------------------

def pod_security_level(datacenter) -> str:
    """The Pod Security Standard a user's namespace enforces: ``baseline`` (the job's pods ask
    for no host namespace, privilege or added capability), but ``privileged`` where the PFS
    volume is a hostPath, which only that level allows (single-node trials and test clusters;
    deploy/admission-policy.yaml refuses such namespaces)."""
    return "privileged" if "hostPath" in (datacenter.kube_volume or {}) else "baseline"


def namespace_objects(datacenter, user, quota) -> list[dict]:
    """The user's Namespace (labelled with its Pod Security level), a ResourceQuota mirroring
    their quota, and a LimitRange that gives a container asking for nothing a default (so
    that the quota admits it) and caps a container at the quota."""
    name = job_namespace(datacenter, user.username)
    labels = {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: "namespace",
              OWNER_LABEL: str(user.pk)}
    pod_security = {POD_SECURITY_ENFORCE: pod_security_level(datacenter),
                    POD_SECURITY_VERSION: "latest"}
    cpu, memory = f"{quota.cpu}m", str(quota.memory)
    default = {"cpu": f"{min(DEFAULT_CONTAINER_CPU, quota.cpu)}m",
               "memory": str(min(DEFAULT_CONTAINER_MEMORY, quota.memory))}
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": name, "labels": {**labels, **pod_security},
                      "annotations": {OWNER_NAME_ANNOTATION: user.username}}},
        {"apiVersion": "v1", "kind": "ResourceQuota",
         "metadata": _metadata(QUOTA_NAME, name, labels),
         "spec": {"hard": {"requests.cpu": cpu, "limits.cpu": cpu, "requests.memory": memory,
                           "limits.memory": memory, "requests.nvidia.com/gpu": str(quota.gpu)}}},
        {"apiVersion": "v1", "kind": "LimitRange",
         "metadata": _metadata(QUOTA_NAME, name, labels),
         "spec": {"limits": [{"type": "Container", "default": default,
                              "defaultRequest": default,
                              "max": {"cpu": cpu, "memory": memory}}]}},
    ]


# --- a job ---------------------------------------------------------------------------------------

def job_spec(job) -> dict:
    """What was asked for, as submitted (``JobSpec``'s fields), and whose it is."""
    spec = {"uid": str(job.uid), "owner": job.owner.username, "datacenter": job.datacenter.name}
    for field in dataclasses.fields(JobSpec):
        spec[field.name] = getattr(job, field.name)
    spec["registry"] = job.registry.name if job.registry is not None else ""
    return spec


def job_root(job, namespace: str) -> dict:
    """The ConfigMap every other object of the job belongs to. Immutable: nothing in it ever
    changes, and the kubelet need not watch it."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": _metadata(object_base(job), namespace, job_labels(job, "job"),
                              annotations={OWNER_NAME_ANNOTATION: job.owner.username}),
        "immutable": True,
        "data": {JOB_SPEC_KEY: json.dumps(job_spec(job), indent=2, sort_keys=True) + "\n",
                 INIT_SCRIPT_NAME: INIT_SCRIPT, RUN_SCRIPT_NAME: RUN_SCRIPT},
    }


def _owner_reference(job, root_uid: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": object_base(job), "uid": root_uid,
            "blockOwnerDeletion": True}


def _headless_service(job, namespace: str, role: str, name: str, port: int,
                      root: dict | None) -> dict:
    """Gives each pod of ``role`` a DNS name, from when it exists (not only once ready)."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _metadata(name, namespace, job_labels(job, role), root=root),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": role_selector(job, role),
                 "ports": [{"name": "paddle", "port": port}]},
    }


def _pserver_objects(job, namespace: str, root: dict | None) -> list[dict]:
    name = pserver_name(job)
    statefulset = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": _metadata(name, namespace, job_labels(job, PSERVER), root=root),
        "spec": {
            "serviceName": name,
            "replicas": job.pservers,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": role_selector(job, PSERVER)},
            "template": pod_template(job, PSERVER, namespace, object_base(job)),
        },
    }
    return [_headless_service(job, namespace, PSERVER, name, PSERVER_PORT, root), statefulset]


def _trainer_objects(job, namespace: str, root: dict | None) -> list[dict]:
    name = trainer_name(job)
    spec = {
        "completionMode": "Indexed",
        "completions": job.trainers,
        "parallelism": job.trainers,
        "backoffLimitPerIndex": job.restart_limit,
        "maxFailedIndexes": 0,
        # A retry starts once the failed pod is gone: never two pods of an index at once,
        # writing one log under one hostname.
        "podReplacementPolicy": "Failed",
    }
    if job.deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = job.deadline_seconds
    if job.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = job.ttl_seconds_after_finished
    spec["template"] = pod_template(job, TRAINER, namespace, object_base(job))
    indexed_job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": _metadata(name, namespace, job_labels(job, TRAINER), root=root),
        "spec": spec,
    }
    return [_headless_service(job, namespace, TRAINER, name, TRAINER_PORT, root), indexed_job]


def job_children(job, namespace: str, root_uid: str | None) -> list[dict]:
    """Everything of the job but its root, in creation order, owned by the root with uid
    ``root_uid`` (None: no ownerReferences, for dry runs)."""
    root = None if root_uid is None else _owner_reference(job, root_uid)
    pservers = _pserver_objects(job, namespace, root) if job.pservers else []
    return [*pservers, *_trainer_objects(job, namespace, root)]


def job_objects(job, *, namespace: str, root_uid: str | None = None) -> list[dict]:
    """The root and its children, in creation order."""
    return [job_root(job, namespace), *job_children(job, namespace, root_uid)]


# --- registry credentials ------------------------------------------------------------------------

def pull_secret(namespace: str, registry, password: str) -> dict:
    """The credential as a pull secret in its owner's namespace. It belongs to the credential,
    not to a job: jobs only name it in their imagePullSecrets."""
    auth = base64.b64encode(f"{registry.username}:{password}".encode()).decode()
    config = {"auths": {registry.server: {"username": registry.username, "password": password,
                                          "auth": auth}}}
    labels = {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: "registry",
              REGISTRY_LABEL: registry.name, OWNER_LABEL: str(registry.owner_id)}
    return {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": _metadata(pull_secret_name(registry), namespace, labels),
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }
