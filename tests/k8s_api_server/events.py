"""core/v1 Events as controllers, the scheduler and the kubelet record them: one Event per
(object, reason, message), its ``count`` and ``lastTimestamp`` bumped on repeats, the way
client-go's event correlator aggregates."""

from __future__ import annotations

import itertools
import time

from . import resources
from .objects import new_uid, now_iso
from .store import json_copy

_sequence = itertools.count()


class EventRecorder:
    def __init__(self, api):
        self.api = api

    def record(self, rt, obj: dict, type_: str, reason: str, message: str, *,
               component: str, host: str | None = None, field_path: str | None = None
               ) -> dict | None:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        home = self.api.store.get(resources.NAMESPACES.key, "", namespace)
        if home is None or home["metadata"].get("deletionTimestamp"):
            return None  # refused by NamespaceLifecycle; recorders drop such events
        involved = {"kind": rt.kind, "namespace": meta.get("namespace"), "name": meta["name"],
                    "uid": meta["uid"], "apiVersion": rt.api_version,
                    "resourceVersion": meta.get("resourceVersion"), "fieldPath": field_path}
        involved = {k: v for k, v in involved.items() if v}
        existing = self._find(namespace, involved, type_, reason, message, component)
        if existing:
            existing["count"] = existing.get("count", 1) + 1
            existing["lastTimestamp"] = now_iso()
            return self.api.store.write(resources.EVENTS.key, existing)
        source = {"component": component, **({"host": host} if host else {})}
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{time.time_ns() + next(_sequence):x}",
                         "namespace": namespace, "uid": new_uid(),
                         "creationTimestamp": now_iso()},
            "involvedObject": involved, "reason": reason, "message": message, "type": type_,
            "source": source, "count": 1, "firstTimestamp": now_iso(), "lastTimestamp": now_iso(),
            "reportingComponent": component, "reportingInstance": host or ""}
        return self.api.store.write(resources.EVENTS.key, event)

    def _find(self, namespace: str, involved: dict, type_: str, reason: str, message: str,
              component: str) -> dict | None:
        for event in self.api.store.list(resources.EVENTS.key, namespace, read_only=True):
            if (event["involvedObject"].get("uid") == involved["uid"] and event["reason"] == reason
                    and event["message"] == message and event["type"] == type_
                    and event["source"]["component"] == component):
                return json_copy(event)
        return None
