"""Admission the real server runs on create: NamespaceLifecycle (no content in missing or
terminating namespaces), ServiceAccount (a pod's account must exist), LimitRanger (container
defaults, min/max), PodSecurity (pod_security.py: a pod must meet the Pod Security Standard
its namespace enforces; a namespace's pod-security labels must be valid) and ResourceQuota."""

from __future__ import annotations

from . import errors, pod_security, quota, resources, storage
from .quantity import Quantity
from .rules import parse_quantity

IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")


def mutate_create(store, rt, obj: dict) -> None:
    """Mutating admission, before validation: LimitRanger's container defaults."""
    if rt is resources.PODS:
        for item in _limit_items(store, obj, "Container"):
            for container in _containers(obj):
                _default_container(container, item)


def validate_create(store, rt, obj: dict) -> None:
    """Validating admission, after validation: the refusals a real cluster gives (403/404,
    422 for a namespace's pod-security labels), in the order of the server's plugins."""
    if rt is resources.NAMESPACES:
        pod_security.admit_namespace(obj)
    if not rt.namespaced:
        return
    _namespace_lifecycle(store, rt, obj)
    if rt is resources.PODS:
        storage.admit_pod(store, obj)
        _limit_bounds(store, obj)
        pod_security.admit_pod(
            store.get(resources.NAMESPACES.key, "", obj["metadata"]["namespace"]), obj)
    quota.admit(store, rt, obj)


def _namespace_lifecycle(store, rt, obj: dict) -> None:
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    found = store.get(resources.NAMESPACES.key, "", namespace)
    if found is None:
        raise errors.not_found(resources.NAMESPACES, namespace)
    if found["metadata"].get("deletionTimestamp"):
        raise errors.forbidden(
            rt, name, f"unable to create new content in namespace {namespace} because it is "
                      f"being terminated",
            causes=[errors.cause("metadata.namespace", "NamespaceTerminating",
                                 f"namespace {namespace} is being terminated")])


def _limit_items(store, pod: dict, type_: str) -> list[dict]:
    return [item for limit_range in store.list(resources.LIMITRANGES.key,
                                               pod["metadata"]["namespace"])
            for item in (limit_range.get("spec") or {}).get("limits") or []
            if item.get("type") == type_]


def _limit_bounds(store, pod: dict) -> None:
    problems = []
    for item in _limit_items(store, pod, "Container"):
        for container in _containers(pod):
            problems += _bounds(item, "Container", container.get("resources") or {})
    for item in _limit_items(store, pod, "Pod"):
        usage = quota.pod_compute_usage(pod["spec"])
        totals = {kind: {k.split(".", 1)[1]: str(v) for k, v in usage.items()
                         if k.startswith(kind + ".")} for kind in ("requests", "limits")}
        problems += _bounds(item, "Pod", totals)
    if problems:
        why = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        raise errors.forbidden(resources.PODS, pod["metadata"]["name"], why)


def _containers(pod: dict) -> list[dict]:
    return (pod["spec"].get("initContainers") or []) + (pod["spec"].get("containers") or [])


def _default_container(container: dict, item: dict) -> None:
    res = container.setdefault("resources", {})
    for source, target in (("default", "limits"), ("defaultRequest", "requests")):
        for name, value in (item.get(source) or {}).items():
            res.setdefault(target, {}).setdefault(name, value)


def _bounds(item: dict, scope: str, res: dict) -> list[str]:
    problems = []
    for name, bound in (item.get("max") or {}).items():
        limit = (res.get("limits") or {}).get(name)
        if limit is None:
            problems.append(f"maximum {name} usage per {scope} is {bound}.  No limit is "
                            f"specified")
        elif _more(limit, bound):
            problems.append(f"maximum {name} usage per {scope} is {bound}, but limit is "
                            f"{Quantity.parse(limit)}")
    for name, bound in (item.get("min") or {}).items():
        request = (res.get("requests") or {}).get(name)
        if request is None:
            problems.append(f"minimum {name} usage per {scope} is {bound}.  No request is "
                            f"specified")
        elif _more(bound, request):
            problems.append(f"minimum {name} usage per {scope} is {bound}, but request is "
                            f"{Quantity.parse(request)}")
    return problems


def _more(a, b) -> bool:
    return parse_quantity(a).value > parse_quantity(b).value
