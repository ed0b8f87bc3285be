"""Every name, label and DNS endpoint of a job's Kubernetes objects, in one place.

A job's objects are named after ``object_base(job)``: the job's name and 5 hex digits of its
uid, so a job submitted again under the same name never meets the objects (or the terminating
pods) of the earlier one. From a 40-character job name every derived name still fits
Kubernetes' limits: the base is at most 49 characters, the trainers' Job and the pservers'
StatefulSet ``<base>-tr`` / ``<base>-ps`` at most 52 (a StatefulSet's name must leave room for
its controller-revision-hash label), pods ``<base>-tr-<index>-xxxxx`` / ``<base>-ps-<index>``
and hostnames at most 62.
"""

from __future__ import annotations

# Label keys: on every object of a job and on its pods (``job_labels``).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
COMPONENT_LABEL = "app.kubernetes.io/component"
INSTANCE_LABEL = "app.kubernetes.io/instance"
JOB_LABEL = "paddlecloud.org/job"
JOB_UID_LABEL = "paddlecloud.org/job-uid"
ROLE_LABEL = "paddlecloud.org/role"
OWNER_LABEL = "paddlecloud.org/owner"
REGISTRY_LABEL = "paddlecloud.org/registry"
# The first attempt of each replica that the trainers' Job makes (a collective job's Job is made
# again for every restart of all its trainers; a job requeued after a start timeout gets new
# objects): a pod's attempt is this plus the failures its Job counted or ignored before it.
FIRST_ATTEMPT_LABEL = "paddlecloud.org/first-attempt"
# The claim of the PFS volume in a user namespace (a ``persistentVolume`` kube_volume), and its
# PersistentVolume, one per namespace.
PFS_CLAIM = "paddlecloud-pfs"
# The portal's rights inside a user namespace: deploy/rbac.yaml's ClusterRole of that name,
# bound there, to the portal only, by the RoleBinding PORTAL_BINDING it makes in the namespace.
PORTAL_NAMESPACE_ROLE = "paddlecloud-portal-namespace"
PORTAL_BINDING = "paddlecloud-portal"
# Kueue and Volcano.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
LOCAL_QUEUE = "paddlecloud"
# A pserver job's pods are one Kueue pod group (one Workload, a pod set per role): its name
# (the Workload's), how many pods it has, and the gate Kueue holds them with until admitted.
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_GATE = "kueue.x-k8s.io/admission"
# Kueue keeps a pod group's quota (and a finalizer on each of its pods) while a failed pod may
# be replaced; "false" ends the group once none of its pods runs (a pserver stopped with its
# job ends Failed), and its pods can go.
KUEUE_RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
# Usernames may be e-mail addresses, which are no label values: labels carry the user's id.
OWNER_NAME_ANNOTATION = "paddlecloud.org/owner-name"
MANAGED_BY = "paddlecloud"

TRAINER = "trainer"
PSERVER = "pserver"

# Fixed ports: every replica has a pod (an IP) of its own.
TRAINER_PORT = 6170
MASTER_PORT = 6171  # a collective job's rendezvous, on trainer 0 beside its own endpoint
PSERVER_PORT = 6174

UID_DIGITS = 5


def uid_short(job) -> str:
    return str(job.uid).replace("-", "")[:UID_DIGITS]


def object_base(job) -> str:
    """``<name>-<5 hex of uid>``: the root ConfigMap's name and the stem of every other name.
    Service names must start with a letter (DNS-1035), so a job whose name starts with a digit
    gets ``pc-`` in front."""
    base = f"{job.name}-{uid_short(job)}"
    return base if base[0].isalpha() else f"pc-{base}"


def trainer_name(job) -> str:
    """The trainers' Indexed Job and their headless Service (the pods' DNS subdomain)."""
    return f"{object_base(job)}-tr"


def pserver_name(job) -> str:
    """The pservers' StatefulSet and their headless Service."""
    return f"{object_base(job)}-ps"


def trainer_host(job, index: int) -> str:
    """Trainer ``index``'s hostname, which an Indexed Job sets to ``<job>-<index>``; its pods
    are named ``<job>-<index>-xxxxx``."""
    return f"{trainer_name(job)}-{index}"


def pserver_host(job, index: int) -> str:
    """Pserver ``index``'s pod name and hostname, as its StatefulSet names it."""
    return f"{pserver_name(job)}-{index}"


def trainer_endpoint(job, namespace: str, index: int) -> str:
    return f"{trainer_host(job, index)}.{trainer_name(job)}.{namespace}.svc:{TRAINER_PORT}"


def pserver_endpoint(job, namespace: str, index: int) -> str:
    return f"{pserver_host(job, index)}.{pserver_name(job)}.{namespace}.svc:{PSERVER_PORT}"


def master_endpoint(job, namespace: str) -> str:
    return f"{trainer_host(job, 0)}.{trainer_name(job)}.{namespace}.svc:{MASTER_PORT}"


def pfs_volume_name(namespace: str) -> str:
    """The PersistentVolume of a user namespace's PFS claim (cluster-wide, so named after the
    namespace: at most 63 + 16 characters, within a volume name's 253)."""
    return f"paddlecloud-pfs-{namespace}"


def pull_secret_name(name: str) -> str:
    """The pull secret of the registry credential ``name`` in its owner's namespace (registry
    names are DNS labels of at most 40 characters, unique per owner and datacenter)."""
    return f"paddlecloud-registry-{name}"


def job_labels(job, component: str) -> dict[str, str]:
    """The labels of a job's object; ``component`` is ``job`` (the root), ``trainer`` or
    ``pserver``, and the latter two are also the object's role."""
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY,
        COMPONENT_LABEL: component,
        INSTANCE_LABEL: object_base(job),
        JOB_LABEL: job.name,
        JOB_UID_LABEL: str(job.uid),
    }
    if component in (TRAINER, PSERVER):
        labels[ROLE_LABEL] = component
    labels[OWNER_LABEL] = str(job.owner_id)
    return labels


def role_selector(job, role: str) -> dict[str, str]:
    """The labels that pick one role's pods of this job (by uid: never an earlier job's)."""
    return {JOB_UID_LABEL: str(job.uid), ROLE_LABEL: role}


def job_selector(job) -> str:
    """A label selector for everything of this job, for the backend's lists and watches."""
    return f"{JOB_UID_LABEL}={job.uid}"
