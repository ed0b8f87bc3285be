"""Objects as JSON dicts, one global resourceVersion counter and a bounded history of changes:
what list, watch replay, "410 Expired" and consistent paginated lists are made of. One
re-entrant lock guards everything; ``changed`` wakes watchers, log followers and the
controller on every write."""

from __future__ import annotations

import copy
import threading
from collections import defaultdict, deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Change:
    rv: int
    resource: str  # ResourceType.key, e.g. "pods", "jobs.batch"
    type: str  # ADDED, MODIFIED or DELETED
    obj: dict
    old: dict | None  # the object before this change (None for ADDED)


class Expired(Exception):
    def __init__(self, requested: int, oldest: int):
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Store:
    def __init__(self, history_size: int):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 1
        self.floor = 1  # changes at or below this version are forgotten
        self.history_size = history_size
        self.watch_generation = 0  # bumped to drop every open watch
        self._objects: dict[str, dict[tuple[str, str], dict]] = defaultdict(dict)
        self._history: deque[Change] = deque()

    def get(self, resource: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            obj = self._objects[resource].get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def list(self, resource: str, namespace: str | None = None) -> list[dict]:
        """Copies, ordered by namespace then name; every namespace when ``namespace`` is None."""
        with self.lock:
            found = [obj for (ns, _), obj in self._objects[resource].items()
                     if namespace is None or ns == namespace]
            return [copy.deepcopy(o) for o in sorted(found, key=_sort_key)]

    def write(self, resource: str, obj: dict) -> dict:
        """Add or replace ``obj`` under a new resourceVersion; returns the stored copy."""
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            old = self._objects[resource].get(key)
            self.rv += 1
            stored = copy.deepcopy(obj)
            stored["metadata"]["resourceVersion"] = str(self.rv)
            self._objects[resource][key] = stored
            self._record(Change(self.rv, resource, "MODIFIED" if old else "ADDED",
                                copy.deepcopy(stored), old))
            return copy.deepcopy(stored)

    def remove(self, resource: str, namespace: str, name: str) -> dict:
        """Delete for good; the DELETED event carries a new resourceVersion, as on a server."""
        with self.lock:
            old = self._objects[resource].pop((namespace, name))
            self.rv += 1
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._record(Change(self.rv, resource, "DELETED", gone, old))
            return copy.deepcopy(gone)

    def _record(self, change: Change) -> None:
        self._history.append(change)
        while len(self._history) > self.history_size:
            self.floor = self._history.popleft().rv
        self.changed.notify_all()

    def changes_after(self, rv: int) -> list[Change]:
        """Every change newer than ``rv``; Expired when some of them were forgotten."""
        with self.lock:
            if rv < self.floor:
                raise Expired(rv, self.floor + 1)
            return [c for c in self._history if c.rv > rv]

    def state_at(self, resource: str, rv: int) -> list[dict]:
        """The objects of ``resource`` as they were at ``rv``, by undoing newer changes."""
        with self.lock:
            objects = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
                       for o in self.list(resource)}
            for change in reversed(self.changes_after(rv)):
                if change.resource != resource:
                    continue
                key = (change.obj["metadata"].get("namespace", ""), change.obj["metadata"]["name"])
                if change.old is None:
                    objects.pop(key, None)
                else:
                    objects[key] = copy.deepcopy(change.old)
            return sorted(objects.values(), key=_sort_key)

    def compact(self) -> None:
        """Forget all history: a watch or list from any older version now gets 410."""
        with self.lock:
            self._history.clear()
            self.floor = self.rv

    def drop_watches(self) -> None:
        with self.lock:
            self.watch_generation += 1
            self.changed.notify_all()

    def notify(self) -> None:
        with self.lock:
            self.changed.notify_all()


def _sort_key(obj: dict) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
