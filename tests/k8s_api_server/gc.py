"""The garbage collector: objects whose owners (``metadata.ownerReferences``, by uid) are all
gone are deleted, cascading level by level; dangling references next to a live owner are
dropped; foreground deletion waits for the dependents before removing the owner."""

from __future__ import annotations

from .api import DeleteOptions
from .errors import ApiError
from .store import json_copy

FOREGROUND = "foregroundDeletion"


class GarbageCollector:
    def __init__(self, api):
        self.api = api

    def sync(self) -> None:
        # The stored objects (the controller holds the lock): copied only where one changes.
        objects = [(rt, obj) for rt in self.api.types
                   for obj in self.api.store.list(rt.key, read_only=True)]
        by_uid = {obj["metadata"]["uid"]: obj for _, obj in objects}
        owned: set[str] = set()
        for rt, obj in objects:
            refs = obj["metadata"].get("ownerReferences") or []
            if refs:
                owned.update(r["uid"] for r in refs if r["uid"] in by_uid)
                self._collect(rt, obj, [by_uid.get(r["uid"]) for r in refs])
        for rt, obj in objects:
            meta = obj["metadata"]
            if FOREGROUND in (meta.get("finalizers") or []) and meta["uid"] not in owned:
                self._release(rt, obj)

    def _collect(self, rt, obj: dict, owners: list[dict | None]) -> None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        alive = [o for o in owners if o is not None]
        if not alive:
            return self._delete(rt, obj, "Background")
        if any(_deleting_in_foreground(o) for o in alive):
            return self._delete(rt, obj, "Foreground")
        if len(alive) < len(owners):
            uids = {o["metadata"]["uid"] for o in alive}
            obj = json_copy(obj)
            obj["metadata"]["ownerReferences"] = [r for r in meta["ownerReferences"]
                                                  if r["uid"] in uids]
            self.api.update(rt, obj)

    def _delete(self, rt, obj: dict, propagation: str) -> None:
        meta = obj["metadata"]
        try:
            self.api.delete(rt, meta.get("namespace", ""), meta["name"],
                            DeleteOptions(propagation=propagation, uid=meta["uid"]))
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    def _release(self, rt, obj: dict) -> None:
        """Every dependent is gone: drop the foregroundDeletion finalizer (the owner goes)."""
        obj = json_copy(obj)
        obj["metadata"]["finalizers"] = [f for f in obj["metadata"]["finalizers"]
                                         if f != FOREGROUND]
        self.api.update(rt, obj)


def _deleting_in_foreground(owner: dict) -> bool:
    meta = owner["metadata"]
    return bool(meta.get("deletionTimestamp")) and FOREGROUND in (meta.get("finalizers") or [])
