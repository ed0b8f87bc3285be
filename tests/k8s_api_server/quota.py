"""ResourceQuota: what objects use (compute resources of non-terminal pods, object counts),
the admission check with the server's exact refusal messages, and ``status.used``."""

from __future__ import annotations

from . import errors, resources
from .quantity import ZERO, Quantity
from .rules import parse_quantity

# Quota keys every container must set when a quota limits them (a historical server rule).
_MUST_SPECIFY = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu",
                 "limits.memory")
_LEGACY_COUNTS = {"pods": "pods", "services": "services", "secrets": "secrets",
                  "configmaps": "configmaps", "resourcequotas": "resourcequotas"}
_TERMINAL = ("Succeeded", "Failed")


def count_keys(rt) -> list[str]:
    keys = [f"count/{rt.qualified}"]
    if rt.qualified in _LEGACY_COUNTS:
        keys.append(_LEGACY_COUNTS[rt.qualified])
    return keys


def usage(rt, obj: dict) -> dict[str, Quantity]:
    """The quota keys one object uses; terminated pods use nothing."""
    if rt is resources.PODS and (obj.get("status") or {}).get("phase") in _TERMINAL:
        return {}
    used = {key: Quantity.parse(1) for key in count_keys(rt)}
    if rt is resources.PODS:
        used.update(pod_compute_usage(obj["spec"]))
    return used


def pod_compute_usage(spec: dict) -> dict[str, Quantity]:
    """Sum over containers, at least the largest init container (they run one at a time)."""
    used: dict[str, Quantity] = {}
    for kind in ("requests", "limits"):
        total = _sum_resources(spec.get("containers") or [], kind)
        for init in spec.get("initContainers") or []:
            for name, value in _sum_resources([init], kind).items():
                if value.value > total.get(name, ZERO).value:
                    total[name] = value
        for name, value in total.items():
            used[f"{kind}.{name}"] = value
            if kind == "requests" and name in ("cpu", "memory", "ephemeral-storage"):
                used[name] = value
    return used


def _sum_resources(containers: list[dict], kind: str) -> dict[str, Quantity]:
    total: dict[str, Quantity] = {}
    for container in containers:
        for name, value in ((container.get("resources") or {}).get(kind) or {}).items():
            quantity = parse_quantity(value)
            total[name] = total[name] + quantity if name in total else quantity
    return total


def namespace_usage(store, namespace: str, keys: set[str]) -> dict[str, Quantity]:
    used: dict[str, Quantity] = {}
    for rt in resources.ALL:
        if not rt.namespaced:
            continue
        for obj in store.list(rt.key, namespace, read_only=True):
            for key, value in usage(rt, obj).items():
                if key in keys:
                    used[key] = used[key] + value if key in used else value
    return used


def admit(store, rt, obj: dict) -> None:
    """Refuse (403) a create that some quota of the namespace does not allow."""
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    requested = usage(rt, obj)
    for quota in store.list(resources.RESOURCEQUOTAS.key, namespace):
        hard = {k: parse_quantity(v) for k, v in ((quota.get("spec") or {}).get("hard") or
                                                   {}).items()}
        quota_name = quota["metadata"]["name"]
        if rt is resources.PODS and requested:
            _check_specified(rt, obj, quota_name, set(hard) & set(_MUST_SPECIFY))
        relevant = set(hard) & set(requested)
        if not relevant:
            continue
        used = namespace_usage(store, namespace, relevant)
        exceeded = sorted(k for k in relevant
                          if (used.get(k, ZERO) + requested[k]).value > hard[k].value)
        if exceeded:
            raise errors.forbidden(rt, name, f"exceeded quota: {quota_name}, requested: "
                                             f"{_listing(requested, exceeded)}, used: "
                                             f"{_listing(used, exceeded)}, limited: "
                                             f"{_listing(hard, exceeded)}")


def _listing(values: dict, keys: list[str]) -> str:
    """``limits.cpu=2,limits.memory=1Gi``: the server's prettyPrint of a ResourceList."""
    return ",".join(f"{k}={values.get(k, ZERO)}" for k in keys)


def _check_specified(rt, pod: dict, quota_name: str, required: set[str]) -> None:
    missing: set[str] = set()
    spec = pod["spec"]
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        missing |= required - set(pod_compute_usage({"containers": [container]}))
    if missing:
        raise errors.forbidden(rt, pod["metadata"]["name"],
                               f"failed quota: {quota_name}: must specify "
                               f"{','.join(sorted(missing))}")


def status(store, quota: dict) -> dict:
    """``status`` as the quota controller keeps it: hard limits and current use of each."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    used = namespace_usage(store, quota["metadata"]["namespace"], set(hard))
    return {"hard": dict(hard), "used": {k: str(used.get(k, ZERO)) for k in hard}}


def sync_status(api) -> None:
    """The quota controller: keep every ResourceQuota's ``status`` current."""
    for quota in api.store.list(resources.RESOURCEQUOTAS.key):
        fresh = status(api.store, quota)
        if quota.get("status") != fresh:
            quota["status"] = fresh
            api.update(resources.RESOURCEQUOTAS, quota, subresource="status")
