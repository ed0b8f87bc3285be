"""What the control plane does for storage and identity: the PersistentVolume binder (a claim
binds to the smallest Available volume that satisfies it, or to the one it names) and the
ServiceAccount controller (a namespace's ``default`` account appears a moment after the
namespace, and pods cannot be created before it, as on a real cluster)."""

from __future__ import annotations

import time

from . import errors, resources
from .quantity import Quantity

_BINDER = "persistentvolume-controller"


def claim_source(store, namespace: str, claim_name: str) -> dict | None:
    """The volume source (``{"hostPath": …}``, ``{"nfs": …}``, ``{"local": …}``) of the
    PersistentVolume the claim is bound to; None while it is missing or unbound."""
    claim = store.get(resources.PERSISTENTVOLUMECLAIMS.key, namespace, claim_name)
    if claim is None or (claim.get("status") or {}).get("phase") != "Bound":
        return None
    volume = store.get(resources.PERSISTENTVOLUMES.key, "", claim["spec"].get("volumeName", ""))
    if volume is None:
        return None
    return {k: v for k, v in volume["spec"].items() if k in ("hostPath", "local", "nfs")}


def claim_problem(store, pod: dict) -> str | None:
    """Why the scheduler cannot place a pod for its claims (the part of its message before the
    node count), or None."""
    namespace = pod["metadata"]["namespace"]
    for volume in pod["spec"].get("volumes") or []:
        if "persistentVolumeClaim" not in volume:
            continue
        name = volume["persistentVolumeClaim"]["claimName"]
        claim = store.get(resources.PERSISTENTVOLUMECLAIMS.key, namespace, name)
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if (claim.get("status") or {}).get("phase") != "Bound":
            return "pod has unbound immediate PersistentVolumeClaims"
    return None


class VolumeBinder:
    def __init__(self, api):
        self.api = api
        self._reported: set[str] = set()  # claims told there is no volume for them

    def sync(self) -> None:
        for claim in self.api.store.list(resources.PERSISTENTVOLUMECLAIMS.key):
            if claim["status"].get("phase") == "Pending" and \
                    not claim["metadata"].get("deletionTimestamp"):
                self._bind(claim)

    def _bind(self, claim: dict) -> None:
        volumes = [v for v in self.api.store.list(resources.PERSISTENTVOLUMES.key)
                   if v["status"].get("phase") == "Available" and _fits(claim, v)]
        wanted = claim["spec"].get("volumeName")
        if wanted:
            volumes = [v for v in volumes if v["metadata"]["name"] == wanted]
        if not volumes:
            return self._no_volume(claim)
        volume = min(volumes, key=lambda v: Quantity.parse(v["spec"]["capacity"]["storage"]).value)
        meta = claim["metadata"]
        volume["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                      "namespace": meta["namespace"], "name": meta["name"],
                                      "uid": meta["uid"],
                                      "resourceVersion": meta["resourceVersion"]}
        volume = self.api.store.write(resources.PERSISTENTVOLUMES.key, volume)
        volume["status"]["phase"] = "Bound"
        self.api.store.write(resources.PERSISTENTVOLUMES.key, volume)
        claim["spec"]["volumeName"] = volume["metadata"]["name"]
        claim["status"] = {"phase": "Bound", "accessModes": volume["spec"]["accessModes"],
                           "capacity": dict(volume["spec"]["capacity"])}
        self.api.store.write(resources.PERSISTENTVOLUMECLAIMS.key, claim)

    def _no_volume(self, claim: dict) -> None:
        uid = claim["metadata"]["uid"]
        if uid in self._reported:
            return
        self._reported.add(uid)
        message = ("no persistent volumes available for this claim and no storage class is set"
                   if not claim["spec"].get("storageClassName") else
                   f'storageclass.storage.k8s.io "{claim["spec"]["storageClassName"]}" not found')
        self.api.recorder.record(resources.PERSISTENTVOLUMECLAIMS, claim, "Warning" if
                                 claim["spec"].get("storageClassName") else "Normal",
                                 "ProvisioningFailed" if claim["spec"].get("storageClassName")
                                 else "FailedBinding", message, component=_BINDER)


def _fits(claim: dict, volume: dict) -> bool:
    spec, offer = claim["spec"], volume["spec"]
    if (spec.get("storageClassName") or "") != (offer.get("storageClassName") or ""):
        return False
    if not set(spec.get("accessModes") or []) <= set(offer.get("accessModes") or []):
        return False
    asked = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
    return Quantity.parse(offer["capacity"]["storage"]).value >= Quantity.parse(asked).value


class ServiceAccountController:
    """Every live namespace gets its ``default`` ServiceAccount, a moment
    (``Settings.service_account_delay_seconds``) after the controller first saw it."""

    def __init__(self, api):
        self.api = api
        self._seen: dict[str, float] = {}  # namespace uid -> when first seen (monotonic)

    def sync(self) -> None:
        delay = self.api.settings.service_account_delay_seconds
        now = time.monotonic()
        for namespace in self.api.store.list(resources.NAMESPACES.key):
            meta = namespace["metadata"]
            if meta.get("deletionTimestamp") or \
                    self.api.store.get(resources.SERVICEACCOUNTS.key, meta["name"], "default"):
                continue
            if now - self._seen.setdefault(meta["uid"], now) >= delay:
                self.api.create(resources.SERVICEACCOUNTS, meta["name"],
                                {"metadata": {"name": "default"}}, trusted=True)


def admit_pod(store, pod: dict) -> None:
    """The ServiceAccount admission plugin: a pod's account must exist."""
    meta = pod["metadata"]
    account = pod["spec"].get("serviceAccountName") or "default"
    if store.get(resources.SERVICEACCOUNTS.key, meta["namespace"], account) is None:
        raise errors.forbidden(resources.PODS, meta["name"], (
            f"error looking up service account {meta['namespace']}/{account}: "
            f'serviceaccount "{account}" not found'))
