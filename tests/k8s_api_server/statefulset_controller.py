"""The StatefulSet controller (apps/v1): pods ``<name>-<ordinal>`` created in order
(OrderedReady waits for each to be Running and Ready; Parallel does not), failed or finished
pods deleted and recreated, scale-down from the highest ordinal, rolling updates by
template revision, and the replica counts in ``status``."""

from __future__ import annotations

import copy
import hashlib
import json
import time

from . import resources
from .api import DeleteOptions
from .errors import ApiError
from .objects import condition_true, controller_uid, owner_reference

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REVISION_LABEL = "controller-revision-hash"
_COMPONENT = "statefulset-controller"


class StatefulSetController:
    def __init__(self, api):
        self.api = api
        self._retry_at: dict[str, float] = {}  # StatefulSet uid -> next creation attempt

    def sync(self) -> None:
        for sts in self.api.store.list(resources.STATEFULSETS.key):
            if not sts["metadata"].get("deletionTimestamp"):
                self._sync_one(sts)

    def _sync_one(self, sts: dict) -> None:
        revision = template_revision(sts)
        self._replace_finished(sts)
        pods = self._pods(sts)
        parallel = sts["spec"].get("podManagementPolicy") == "Parallel"
        replicas = sts["spec"].get("replicas", 1)
        self._create_missing(sts, pods, replicas, revision, parallel)
        self._scale_down(sts, pods, replicas, parallel)
        self._roll(sts, pods, replicas, revision)
        self._write_status(sts, revision)

    def _pods(self, sts: dict) -> dict[int, dict]:
        uid, found = sts["metadata"]["uid"], {}
        for pod in self.api.store.list(resources.PODS.key, sts["metadata"]["namespace"]):
            ordinal = (pod["metadata"].get("labels") or {}).get(POD_INDEX_LABEL)
            if controller_uid(pod) == uid and ordinal is not None:
                found[int(ordinal)] = pod
        return found

    def _replace_finished(self, sts: dict) -> None:
        """Pods of a StatefulSet never finish for good: a failed or completed one is deleted
        and comes back under the same name."""
        for pod in self._pods(sts).values():
            phase = pod["status"].get("phase")
            if phase in ("Failed", "Succeeded") and not pod["metadata"].get("deletionTimestamp"):
                name = pod["metadata"]["name"]
                word = "failed" if phase == "Failed" else "terminated"
                self._event(sts, "Warning", f"Recreating{word.capitalize()}Pod",
                            f"StatefulSet {sts['metadata']['namespace']}/"
                            f"{sts['metadata']['name']} is recreating {word} Pod {name}")
                self._delete(sts, pod)

    def _create_missing(self, sts: dict, pods: dict[int, dict], replicas: int, revision: str,
                        parallel: bool) -> None:
        uid = sts["metadata"]["uid"]
        for ordinal in range(replicas):
            if ordinal in pods:
                if not parallel and not _healthy(pods[ordinal]):
                    return
                continue
            if time.monotonic() < self._retry_at.get(uid, 0.0):
                return
            pod = self._pod_for(sts, ordinal, revision)
            name, sts_name = pod["metadata"]["name"], sts["metadata"]["name"]
            try:
                self.api.create(resources.PODS, sts["metadata"]["namespace"], pod, trusted=True)
            except ApiError as exc:
                self._event(sts, "Warning", "FailedCreate", f"create Pod {name} in StatefulSet "
                            f"{sts_name} failed error: {exc.message}")
                self._retry_at[uid] = time.monotonic() + self.api.settings.create_retry_seconds
                return
            self._event(sts, "Normal", "SuccessfulCreate",
                        f"create Pod {name} in StatefulSet {sts_name} successful")
            if not parallel:
                return

    def _scale_down(self, sts: dict, pods: dict[int, dict], replicas: int,
                    parallel: bool) -> None:
        """Highest ordinal first; OrderedReady one at a time, while the rest are healthy."""
        extra = [pods[o] for o in sorted(pods, reverse=True) if o >= replicas]
        leaving = [p for p in extra if not p["metadata"].get("deletionTimestamp")]
        if parallel:
            for pod in leaving:
                self._delete(sts, pod)
        elif leaving and len(leaving) == len(extra) and \
                all(_healthy(pods[o]) for o in pods if o < replicas):
            self._delete(sts, leaving[0])

    def _roll(self, sts: dict, pods: dict[int, dict], replicas: int, revision: str) -> None:
        """RollingUpdate: replace the highest outdated pod once every pod is healthy."""
        strategy = sts["spec"].get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return
        if len(pods) < replicas or not all(_healthy(p) for p in pods.values()):
            return
        partition = (strategy.get("rollingUpdate") or {}).get("partition", 0)
        outdated = [o for o in sorted(pods, reverse=True) if o >= partition and o < replicas
                    and pods[o]["metadata"]["labels"].get(REVISION_LABEL) != revision]
        if outdated:
            self._delete(sts, pods[outdated[0]])

    def _pod_for(self, sts: dict, ordinal: int, revision: str) -> dict:
        template = copy.deepcopy(sts["spec"]["template"])
        name = f"{sts['metadata']['name']}-{ordinal}"
        meta, spec = template.setdefault("metadata", {}), template["spec"]
        meta["name"] = name
        meta.setdefault("labels", {}).update({POD_NAME_LABEL: name, POD_INDEX_LABEL: str(ordinal),
                                              REVISION_LABEL: revision})
        meta["ownerReferences"] = [owner_reference(resources.STATEFULSETS, sts)]
        spec["hostname"] = name
        if sts["spec"].get("serviceName"):
            spec["subdomain"] = sts["spec"]["serviceName"]
        for claim in sts["spec"].get("volumeClaimTemplates") or []:
            claim_name = claim["metadata"]["name"]
            spec.setdefault("volumes", []).append({
                "name": claim_name,
                "persistentVolumeClaim": {"claimName": f"{claim_name}-{name}"}})
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def _delete(self, sts: dict, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            self.api.delete(resources.PODS, meta["namespace"], meta["name"], DeleteOptions())
        except ApiError as exc:
            if exc.code != 404:
                raise
            return
        self._event(sts, "Normal", "SuccessfulDelete", f"delete Pod {meta['name']} in "
                    f"StatefulSet {sts['metadata']['name']} successful")

    def _write_status(self, sts: dict, revision: str) -> None:
        pods = list(self._pods(sts).values())
        ready = [p for p in pods if _healthy(p)]
        updated = [p for p in pods if p["metadata"]["labels"].get(REVISION_LABEL) == revision]
        old = sts.get("status") or {}
        current = revision if len(updated) == len(pods) else old.get("currentRevision", revision)
        on_current = [p for p in pods if p["metadata"]["labels"].get(REVISION_LABEL) == current]
        status = {"observedGeneration": sts["metadata"].get("generation", 1),
                  "replicas": len(pods), "readyReplicas": len(ready),
                  "availableReplicas": len(ready), "currentReplicas": len(on_current),
                  "updatedReplicas": len(updated),
                  "currentRevision": current, "updateRevision": revision, "collisionCount": 0}
        if status != old:
            sts["status"] = status
            self.api.update(resources.STATEFULSETS, sts, subresource="status")

    def _event(self, sts: dict, type_: str, reason: str, message: str) -> None:
        self.api.recorder.record(resources.STATEFULSETS, sts, type_, reason, message,
                                 component=_COMPONENT)


def template_revision(sts: dict) -> str:
    """``<name>-<hash of the pod template>``, the controller-revision-hash label value."""
    digest = hashlib.sha256(json.dumps(sts["spec"]["template"], sort_keys=True).encode())
    return f"{sts['metadata']['name']}-{digest.hexdigest()[:10]}"


def _healthy(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and condition_true(pod, "Ready") \
        and not pod["metadata"].get("deletionTimestamp")
