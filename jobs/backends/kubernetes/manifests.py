"""A user's namespace and a job's Kubernetes objects, as the plain dicts that are POSTed.

Pure functions of their arguments: they never touch the database (a dry run builds the
objects of a job that is not saved) nor the API server.

A job's objects hang off a root ConfigMap (``job_root``: the job's spec as ``job.json``, and
the pods' scripts), which the backend creates first; every other object (``job_children``)
names the root in an ownerReference with the uid the API server gave it, so deleting the root
deletes the job. In creation order:

- the job's Secret (``job_secret``: its replicas' secret variables, a master's token, which the
  pods reference; jobs with a dataset only),
- Volcano's PodGroup of all the job's pods (datacenters that use Volcano),
- the pservers' headless Service and their StatefulSet (jobs with pservers only),
- the trainers' headless Service (the DNS names of ``PADDLE_TRAINER_ENDPOINTS``),
- the trainers' Indexed Job (``trainers_job``): an index per trainer; a pserver job's are
  retried ``restart_limit`` times each, a pod the cluster took away replaced without counting;
  a collective job's fails at the first failure and is made again (all its trainers restart).
  Suspended, in Kueue's queue, where the datacenter uses Kueue.

``job_objects`` is all of them, for dry runs and validation; without the root's uid (nothing
was created yet) the children carry no ownerReference, so its output stays safe to apply by
hand: an ownerReference to a made-up uid would have the garbage collector delete the object.
Nor does the Secret carry its values then: a dry run never shows a secret.

Pservers restart in place (their StatefulSet's pods are restarted by the kubelet without
limit); a deadline and the TTL after finishing are the trainers' Job's: the backend deletes the
root, and with it the pservers, when the job ends.

A user's namespace (``namespace_objects``) comes with its ResourceQuota and LimitRange, the
NetworkPolicies that keep other tenants out and its pods in (``network_policies``), its PFS
volume and claim (``pfs_claim_objects``) and Kueue's LocalQueue where the datacenter needs them;
before them, the RoleBinding that gives the portal its rights there (``portal_binding``).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import ipaddress
import json
from urllib.parse import urlsplit

from django.conf import settings

from paddlecloud_core.contract import (
    job_namespace,
    trainers_elastic,
    trainers_least,
    trainers_restart_together,
)
from paddlecloud_core.spec import JobSpec
from registries.oci import docker_config_json

from .names import (
    COMPONENT_LABEL,
    FIRST_ATTEMPT_LABEL,
    KUEUE_QUEUE_LABEL,
    LOCAL_QUEUE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OWNER_LABEL,
    OWNER_NAME_ANNOTATION,
    PFS_CLAIM,
    PORTAL_BINDING,
    PORTAL_NAMESPACE_ROLE,
    PSERVER,
    PSERVER_PORT,
    REGISTRY_LABEL,
    TRAINER,
    TRAINER_PORT,
    job_labels,
    object_base,
    pfs_volume_name,
    pserver_name,
    pull_secret_name,
    role_selector,
    trainer_name,
)
from .pods import ManifestError as ManifestError  # raised by the builders; callers catch it here
from .pods import job_secret_name, kueue_pod_group, pod_template, run_as, secret_env
from .scripts import INIT_SCRIPT, INIT_SCRIPT_NAME, RUN_SCRIPT, RUN_SCRIPT_NAME
from .settings import METADATA_ADDRESSES, kube_settings, volume_handle

QUOTA_NAME = "paddlecloud"
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
POD_SECURITY_VERSION = "pod-security.kubernetes.io/enforce-version"
# What a container that asks for nothing gets, at most the quota.
DEFAULT_CONTAINER_CPU = 1000
DEFAULT_CONTAINER_MEMORY = 2**30
JOB_SPEC_KEY = "job.json"
# The volume types the "restricted" Pod Security Standard allows (of those kube_volume offers).
RESTRICTED_VOLUMES = ("csi", "persistentVolume")
# Pods the cluster took away (evicted, preempted, their node lost) carry this condition.
DISRUPTED = {"type": "DisruptionTarget", "status": "True"}
KUEUE_API = "kueue.x-k8s.io/v1beta1"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
# What a dry run shows for each value of the job's Secret.
SECRET_HIDDEN = "(secret: made when the job starts)"  # noqa: S105 - a placeholder


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
    """The Pod Security Standard a user's namespace enforces: ``restricted`` where the job's
    pods can meet it (a CSI or PersistentVolume PFS, and a uid that is not root); else
    ``baseline`` (an inline nfs or cephfs volume, which restricted forbids, containers run
    as root, or builders of runtime images, which make user namespaces: ``builder``; still no
    host namespace, privilege or added capability); ``privileged`` where the
    PFS volume is a hostPath, which only that level allows (single-node trials and test
    clusters; deploy/admission-policy.yaml refuses such namespaces)."""
    volume = kube_settings(datacenter).kube_volume or {}
    if "hostPath" in volume:
        return "privileged"
    if any(kind in volume for kind in RESTRICTED_VOLUMES) and run_as(datacenter)[0] != 0 \
            and not datacenter.build_registry:
        return "restricted"
    return "baseline"


def pfs_claim_objects(datacenter, namespace: str, labels: dict) -> list[dict]:
    """For a ``persistentVolume`` kube_volume: a PersistentVolume of that source reserved for
    the namespace's claim, and the claim, bound to each other (a claim is seen only in its
    namespace, and a volume binds one claim). Retained when the claim goes: the files are the
    users'. A CSI volume's handle is the administrator's, ``{namespace}`` in it the
    namespace's name (``settings.NAMESPACE_FIELD``)."""
    source = copy.deepcopy(kube_settings(datacenter).kube_volume["persistentVolume"])
    if "csi" in source:
        source["csi"]["volumeHandle"] = volume_handle(source["csi"], namespace)
    size = {"storage": "1Ti"}  # a static volume's capacity binds the claim; it limits nothing
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume",
         "metadata": {"name": pfs_volume_name(namespace), "labels": labels},
         "spec": {"capacity": size, "accessModes": ["ReadWriteMany"],
                  "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                  "claimRef": {"namespace": namespace, "name": PFS_CLAIM}, **source}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": _metadata(PFS_CLAIM, namespace, labels),
         "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                  "volumeName": pfs_volume_name(namespace), "resources": {"requests": size}}},
    ]


def namespace_objects(datacenter, user, quota) -> list[dict]:
    """The user's Namespace (labelled with its Pod Security level), a ResourceQuota mirroring
    their quota, and a LimitRange that gives a container asking for nothing a default (so
    that the quota admits it) and caps a container at the quota; the PFS claim where the
    datacenter's volume is a ``persistentVolume``, and Kueue's LocalQueue where it uses Kueue."""
    name = job_namespace(datacenter, user.username)
    labels = {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: "namespace",
              OWNER_LABEL: str(user.pk)}
    pod_security = {POD_SECURITY_ENFORCE: pod_security_level(datacenter),
                    POD_SECURITY_VERSION: "latest"}
    cpu, memory = f"{quota.cpu}m", str(quota.memory)
    default = {"cpu": f"{min(DEFAULT_CONTAINER_CPU, quota.cpu)}m",
               "memory": str(min(DEFAULT_CONTAINER_MEMORY, quota.memory))}
    objects = [
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
    objects += network_policies(datacenter, name, labels)
    if "persistentVolume" in (kube_settings(datacenter).kube_volume or {}):
        objects += pfs_claim_objects(datacenter, name, labels)
    if (settings_ := kube_settings(datacenter)).kube_scheduler == "kueue":
        objects.append({"apiVersion": KUEUE_API, "kind": "LocalQueue",
                        "metadata": _metadata(LOCAL_QUEUE, name, labels),
                        "spec": {"clusterQueue": settings_.kube_queue}})
    return objects


# The cluster's DNS (CoreDNS and kube-dns carry this label on EKS, GKE, AKS and kubeadm).
DNS_PODS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}
# The portal's web pods (deploy/web.yaml), which serve the jobs' masters on their port "http".
PORTAL_WEB_LABELS = {"app.kubernetes.io/name": "paddlecloud", "app.kubernetes.io/component": "web"}


def network_policies(datacenter, namespace: str, labels: dict) -> list[dict]:
    """A user namespace's NetworkPolicies (enforced by the cluster's network plugin, where it
    implements them). Policies add up: a pod they select takes only what one of them allows.

    - ``paddlecloud-isolate``: nothing in or out, but what the policies below allow;
    - ``paddlecloud-namespace``: to and from the namespace's own pods (a job's replicas talk
      to each other; a user's jobs are one tenant). Other tenants' pods are let in by none:
      even a range of the egress below that holds their addresses ends at their ingress;
    - ``paddlecloud-dns``: the cluster's DNS (the replicas find each other by name);
    - ``paddlecloud-master``: the portal's web pods on their port "http", where the jobs'
      masters answer: in the namespace of ``PADDLECLOUD_MASTER_BASE_URL``'s Service
      (``<service>.<namespace>.svc``); a portal outside the cluster is reached through the
      egress below instead;
    - ``paddlecloud-egress``: the datacenter's ``kube_egress`` ranges, less the clouds'
      instance metadata (``METADATA_ADDRESSES``) unless a range names it alone."""
    def policy(name: str, *, ingress=None, egress=None) -> dict:
        spec = {"podSelector": {}, "policyTypes": [
            kind for kind, rules in (("Ingress", ingress), ("Egress", egress))
            if rules is not None]}
        spec.update({k: v for k, v in (("ingress", ingress), ("egress", egress)) if v})
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": _metadata(name, namespace, labels), "spec": spec}

    dns_ports = [{"protocol": protocol, "port": 53} for protocol in ("UDP", "TCP")]
    policies = [
        policy("paddlecloud-isolate", ingress=[], egress=[]),
        policy("paddlecloud-namespace", ingress=[{"from": [{"podSelector": {}}]}],
               egress=[{"to": [{"podSelector": {}}]}]),
        policy("paddlecloud-dns", egress=[{"to": [DNS_PODS], "ports": dns_ports}]),
    ]
    host = (urlsplit(settings.PADDLECLOUD_MASTER_BASE_URL).hostname or "").split(".")
    in_cluster = len(host) >= 3 and host[2] == "svc"
    # Always made, allowing nothing where there is nothing to allow: a policy left out would
    # stay as it was when the setting allowed more.
    policies.append(policy("paddlecloud-master", egress=[{"to": [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": host[1]}},
        "podSelector": {"matchLabels": PORTAL_WEB_LABELS}}],
        "ports": [{"protocol": "TCP", "port": "http"}]}] if in_cluster else []))
    blocks = []
    for cidr in kube_settings(datacenter).kube_egress:
        network = ipaddress.ip_network(cidr)
        hidden = [str(m) for m in map(ipaddress.ip_network, METADATA_ADDRESSES)
                  if m.version == network.version and m != network and m.subnet_of(network)]
        blocks.append({"ipBlock": {"cidr": cidr, **({"except": hidden} if hidden else {})}})
    policies.append(policy("paddlecloud-egress", egress=[{"to": blocks}] if blocks else []))
    return policies


def portal_binding(namespace: str, username: str) -> dict:
    """The RoleBinding that gives ``username`` (the portal, as the API server knows it) the
    rights of deploy/rbac.yaml's ``PORTAL_NAMESPACE_ROLE`` in ``namespace``, and nowhere
    else: a ServiceAccount as such, any other account as a User."""
    account = username.split(":")
    if len(account) == 4 and account[:2] == ["system", "serviceaccount"]:
        subject = {"kind": "ServiceAccount", "name": account[3], "namespace": account[2]}
    else:
        subject = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": username}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _metadata(PORTAL_BINDING, namespace, {
                MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: "namespace"}),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": PORTAL_NAMESPACE_ROLE},
            "subjects": [subject]}


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


def owner_reference(job, root_uid: str) -> dict:
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


def _queued(job, labels: dict) -> dict:
    """An object's labels, with Kueue's queue where the datacenter uses Kueue (on the pods
    instead, for a job Kueue admits as a pod group)."""
    if kube_settings(job.datacenter).kube_scheduler == "kueue" and not kueue_pod_group(job):
        return {**labels, KUEUE_QUEUE_LABEL: LOCAL_QUEUE}
    return labels


def _pserver_objects(job, namespace: str, root: dict | None) -> list[dict]:
    name = pserver_name(job)
    statefulset = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": _metadata(name, namespace, _queued(job, job_labels(job, PSERVER)),
                              root=root),
        "spec": {
            "serviceName": name,
            "replicas": job.pservers,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": role_selector(job, PSERVER)},
            "template": pod_template(job, PSERVER, namespace, object_base(job)),
        },
    }
    return [_headless_service(job, namespace, PSERVER, name, PSERVER_PORT, root), statefulset]


def trainers_job(job, namespace: str, root: dict | None, first_attempt: int = 0) -> dict:
    """The trainers' Indexed Job. A pserver job's trainers are retried one by one, each index
    ``restart_limit`` times, and a pod the cluster took away (``DisruptionTarget``: evicted,
    preempted, its node lost) is replaced without counting. A collective job's trainers
    restart together: its Job fails at the first failure (its other pods are stopped) and the
    portal makes it again, ``first_attempt`` on its pods telling the attempts apart; a
    disruption fails it too, saying so, and that restart is not counted."""
    name = trainer_name(job)
    together = trainers_restart_together(job)
    elastic = trainers_elastic(job)
    spec = {
        "completionMode": "Indexed",
        # An elastic job's starts with its MIN and grows (completions and parallelism
        # together, an elastic Indexed Job) as the backend adds trainers.
        "completions": trainers_least(job),
        "parallelism": trainers_least(job),
        "backoffLimitPerIndex": 0 if together else job.restart_limit,
        # A retry starts once the failed pod is gone: never two pods of an index at once,
        # writing one log under one hostname.
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": [{"action": "FailJob" if together else "Ignore",
                                        "onPodConditions": [dict(DISRUPTED)]}]},
    }
    if not elastic:
        # A failed index fails the Job. An elastic job's lost trainer is a failed index that
        # stays failed while the others go on (no maxFailedIndexes).
        spec["maxFailedIndexes"] = 0
    if kube_settings(job.datacenter).kube_scheduler == "kueue" and not kueue_pod_group(job):
        spec["suspend"] = True  # until Kueue admits it
    if job.deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = job.deadline_seconds
    if job.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = job.ttl_seconds_after_finished
    spec["template"] = pod_template(job, TRAINER, namespace, object_base(job),
                                    first_attempt=first_attempt)
    labels = _queued(job, job_labels(job, TRAINER))
    labels[FIRST_ATTEMPT_LABEL] = str(first_attempt)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _metadata(name, namespace, labels, root=root), "spec": spec}


def job_secret(job, namespace: str, root: dict | None) -> dict | None:
    """The job's secret variables, which its pods read by reference (``pods.role_env``): None
    for a job that has none. Without a root (a dry run) its values are not written."""
    values = secret_env(job, namespace)
    if not values:
        return None
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": _metadata(job_secret_name(job), namespace, job_labels(job, "secret"),
                                    root=root),
              "type": "Opaque", "immutable": True}
    if root is None:
        secret["stringData"] = dict.fromkeys(values, SECRET_HIDDEN)
    else:
        secret["data"] = {name: base64.b64encode(value.encode()).decode()
                          for name, value in values.items()}
    return secret


def _pod_group(job, namespace: str, root: dict | None) -> dict:
    """Volcano's gang: all of the job's pods are scheduled at once, or none."""
    trainers = trainers_least(job)  # an elastic job's MIN: more are scheduled as they fit
    cpu = trainers * job.cpu + job.pservers * job.pscpu
    memory = trainers * job.memory + job.pservers * job.psmemory
    minimum = {"cpu": f"{cpu}m", "memory": str(memory)}
    if job.gpu:
        minimum["nvidia.com/gpu"] = str(trainers * job.gpu)
    return {"apiVersion": VOLCANO_API, "kind": "PodGroup",
            "metadata": _metadata(object_base(job), namespace, job_labels(job, "job"),
                                  root=root),
            "spec": {"minMember": trainers + job.pservers,
                     "queue": kube_settings(job.datacenter).kube_queue or "default",
                     "minResources": minimum}}


def job_children(job, namespace: str, root_uid: str | None, first_attempt: int = 0
                 ) -> list[dict]:
    """Everything of the job but its root, in creation order, owned by the root with uid
    ``root_uid`` (None: no ownerReferences, for dry runs)."""
    root = None if root_uid is None else owner_reference(job, root_uid)
    secret = job_secret(job, namespace, root)
    volcano = kube_settings(job.datacenter).kube_scheduler == "volcano"
    group = [_pod_group(job, namespace, root)] if volcano else []
    pservers = _pserver_objects(job, namespace, root) if job.pservers else []
    return [*([secret] if secret else []), *group, *pservers,
            _headless_service(job, namespace, TRAINER, trainer_name(job), TRAINER_PORT, root),
            trainers_job(job, namespace, root, first_attempt)]


def job_objects(job, *, namespace: str, root_uid: str | None = None) -> list[dict]:
    """The root and its children, in creation order."""
    return [job_root(job, namespace), *job_children(job, namespace, root_uid)]


# --- registry credentials ------------------------------------------------------------------------

def pull_secret(namespace: str, registry, password: str) -> dict:
    """The credential as a pull secret in its owner's namespace. It belongs to the credential,
    not to a job: jobs only name it in their imagePullSecrets."""
    config = docker_config_json(registry.server, registry.username, password)
    labels = {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: "registry",
              REGISTRY_LABEL: registry.name, OWNER_LABEL: str(registry.owner_id)}
    return {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": _metadata(pull_secret_name(registry.name), namespace, labels),
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config.encode()).decode()},
    }
