"""The resource types this fake serves, with the per-type facts the real registry encodes:
scope, name rule, status subresource, what DELETE returns, default deletion propagation."""

from __future__ import annotations

from dataclasses import dataclass, field

_META_FIELDS = {"metadata.name": "metadata.name", "metadata.namespace": "metadata.namespace"}


@dataclass(frozen=True)
class ResourceType:
    plural: str
    singular: str
    kind: str
    group: str  # "" for the core group
    version: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    has_status: bool = False  # a /status subresource: the main resource ignores status writes
    has_generation: bool = False  # metadata.generation counts spec changes
    name_rule: str = "subdomain"  # "label", "subdomain" or "dns1035"
    return_deleted_object: bool = False  # DELETE answers the object, not a Status
    orphan_by_default: bool = False  # batch/v1 Jobs keep their pods unless told otherwise
    field_selectors: dict = field(default_factory=lambda: dict(_META_FIELDS))
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How messages name the resource: ``pods``, ``jobs.batch``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def key(self) -> str:
        return self.qualified


def _fields(**extra: str) -> dict:
    return {**_META_FIELDS, **extra}


NAMESPACES = ResourceType(
    "namespaces", "namespace", "Namespace", "", "v1", namespaced=False, short_names=("ns",),
    has_status=True, name_rule="label", return_deleted_object=True,
    field_selectors=_fields(**{"status.phase": "status.phase"}),
    subresources=("status", "finalize"))
PODS = ResourceType(
    "pods", "pod", "Pod", "", "v1", short_names=("po",), categories=("all",), has_status=True,
    return_deleted_object=True, subresources=("status", "log", "eviction"),
    field_selectors=_fields(**{f: f for f in (
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")}))
SERVICES = ResourceType(
    "services", "service", "Service", "", "v1", short_names=("svc",), categories=("all",),
    has_status=True, name_rule="dns1035", return_deleted_object=True, subresources=("status",))
CONFIGMAPS = ResourceType("configmaps", "configmap", "ConfigMap", "", "v1", short_names=("cm",))
SECRETS = ResourceType("secrets", "secret", "Secret", "", "v1",
                       field_selectors=_fields(type="type"))
RESOURCEQUOTAS = ResourceType("resourcequotas", "resourcequota", "ResourceQuota", "", "v1",
                              short_names=("quota",), has_status=True,
                              return_deleted_object=True, subresources=("status",))
LIMITRANGES = ResourceType("limitranges", "limitrange", "LimitRange", "", "v1",
                           short_names=("limits",))
EVENTS = ResourceType(
    "events", "event", "Event", "", "v1", short_names=("ev",),
    field_selectors=_fields(**{f"involvedObject.{f}": f"involvedObject.{f}" for f in (
        "kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
        reason="reason", reportingComponent="reportingComponent", source="source.component",
        type="type"))
SERVICEACCOUNTS = ResourceType("serviceaccounts", "serviceaccount", "ServiceAccount", "", "v1",
                               short_names=("sa",))
PERSISTENTVOLUMECLAIMS = ResourceType(
    "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", "", "v1",
    short_names=("pvc",), has_status=True, return_deleted_object=True, subresources=("status",))
PERSISTENTVOLUMES = ResourceType(
    "persistentvolumes", "persistentvolume", "PersistentVolume", "", "v1", namespaced=False,
    short_names=("pv",), has_status=True, return_deleted_object=True, subresources=("status",))
STATEFULSETS = ResourceType("statefulsets", "statefulset", "StatefulSet", "apps", "v1",
                            short_names=("sts",), categories=("all",), has_status=True,
                            has_generation=True, subresources=("status",))
JOBS = ResourceType("jobs", "job", "Job", "batch", "v1", categories=("all",), has_status=True,
                    has_generation=True, orphan_by_default=True, subresources=("status",),
                    field_selectors=_fields(**{"status.successful": "status.succeeded"}))
# Written by whoever owns a Service without a selector (the endpoints of something outside the
# cluster); there is no EndpointSlice controller: the cluster DNS reads a selector's pods.
ENDPOINTSLICES = ResourceType("endpointslices", "endpointslice", "EndpointSlice",
                              "discovery.k8s.io", "v1")
# Registered by a test as a kubelet registers its node (its status in the create); the fake's
# scheduler does not read them: it places pods on its ``node_count`` nodes of its own.
NODES = ResourceType(
    "nodes", "node", "Node", "", "v1", namespaced=False, short_names=("no",), has_status=True,
    subresources=("status",), field_selectors=_fields(**{"spec.unschedulable":
                                                         "spec.unschedulable"}))

# What the portal binds in each namespace it makes (rbac.py reads them: there is no role
# controller to run).
ROLEBINDINGS = ResourceType("rolebindings", "rolebinding", "RoleBinding",
                            "rbac.authorization.k8s.io", "v1")
# Stored and served, not enforced: the process kubelet's pods share one bridge, as pods do on
# a network plugin that does not implement NetworkPolicy.
NETWORKPOLICIES = ResourceType("networkpolicies", "networkpolicy", "NetworkPolicy",
                               "networking.k8s.io", "v1", short_names=("netpol",))

ALL = (NAMESPACES, PODS, SERVICES, CONFIGMAPS, SECRETS, RESOURCEQUOTAS, LIMITRANGES, EVENTS,
       SERVICEACCOUNTS, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, STATEFULSETS, JOBS,
       ENDPOINTSLICES, NODES, ROLEBINDINGS, NETWORKPOLICIES)
_BY_PATH = {(rt.group, rt.version, rt.plural): rt for rt in ALL}


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PATH.get((group, version, plural))


def groups(types: tuple = ALL) -> dict[str, list[str]]:
    """Named API groups and their versions (the core group is served under /api) of
    ``types`` (a server's: ``Api.types``)."""
    found: dict[str, list[str]] = {}
    for rt in types:
        if rt.group and rt.version not in found.setdefault(rt.group, []):
            found[rt.group].append(rt.version)
    return found
