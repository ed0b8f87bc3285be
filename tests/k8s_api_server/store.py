"""Objects as JSON dicts, one global resourceVersion counter and a bounded history of changes:
what list, watch replay, "410 Expired" and consistent paginated lists are made of. One
re-entrant lock guards everything; ``changed`` wakes watchers, log followers and the
controller on every write."""

from __future__ import annotations

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


def json_copy(obj):
    """A deep copy of a JSON value (dicts, lists, scalars): what ``copy.deepcopy`` makes of
    one, several times faster (no memo: JSON has no shared or cyclic parts). Every object the
    store holds is one; a server of thousands of pods copies them on every pass."""
    if isinstance(obj, dict):
        return {key: json_copy(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [json_copy(value) for value in obj]
    return obj


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
        # Per resource: how often it was written, and what ``owned``/``uids`` read made at
        # that count (a controller's pass asks for every owner's pods: one index, not a scan
        # of every pod per owner).
        self._writes: dict[str, int] = defaultdict(int)
        self._indexes: dict[str, tuple[int, dict[str, list[dict]], set[str]]] = {}

    def get(self, resource: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            obj = self._objects[resource].get((namespace, name))
            return json_copy(obj) if obj else None

    def list(self, resource: str, namespace: str | None = None, *,
             read_only: bool = False) -> list[dict]:
        """Copies, ordered by namespace then name; every namespace when ``namespace`` is None.
        ``read_only``: the stored objects themselves, for a caller holding the lock that only
        reads them (the store never changes an object in place: a write replaces it)."""
        with self.lock:
            found = sorted((obj for (ns, _), obj in self._objects[resource].items()
                            if namespace is None or ns == namespace), key=_sort_key)
            return found if read_only else [json_copy(o) for o in found]

    def owned(self, resource: str, owner_uid: str) -> list[dict]:
        """Copies of the objects whose controller (ownerReference) is ``owner_uid``, ordered
        as ``list`` orders them."""
        with self.lock:
            found = self._index(resource)[1].get(owner_uid, [])
            return [json_copy(o) for o in sorted(found, key=_sort_key)]

    def uids(self, resource: str) -> set[str]:
        """The uids of every object of ``resource`` (a copy)."""
        with self.lock:
            return set(self._index(resource)[2])

    def writes(self, *resources: str) -> tuple[int, ...]:
        """How often each of ``resources`` was written: what a reader caching what it made
        of them compares (unchanged: nothing of theirs changed)."""
        with self.lock:
            return tuple(self._writes[resource] for resource in resources)

    def _index(self, resource: str) -> tuple[int, dict[str, list[dict]], set[str]]:
        index = self._indexes.get(resource)
        if index is None or index[0] != self._writes[resource]:
            owners: dict[str, list[dict]] = defaultdict(list)
            for obj in self._objects[resource].values():
                for ref in obj["metadata"].get("ownerReferences") or []:
                    if ref.get("controller"):
                        owners[ref["uid"]].append(obj)
                        break
            index = self._indexes[resource] = (
                self._writes[resource], owners,
                {obj["metadata"].get("uid") for obj in self._objects[resource].values()})
        return index

    def write(self, resource: str, obj: dict) -> dict:
        """Add or replace ``obj`` under a new resourceVersion; returns the stored copy."""
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            old = self._objects[resource].get(key)
            self.rv += 1
            self._writes[resource] += 1
            stored = json_copy(obj)
            stored["metadata"]["resourceVersion"] = str(self.rv)
            self._objects[resource][key] = stored
            self._record(Change(self.rv, resource, "MODIFIED" if old else "ADDED",
                                json_copy(stored), old))
            return json_copy(stored)

    def remove(self, resource: str, namespace: str, name: str) -> dict:
        """Delete for good; the DELETED event carries a new resourceVersion, as on a server."""
        with self.lock:
            old = self._objects[resource].pop((namespace, name))
            self.rv += 1
            self._writes[resource] += 1
            gone = json_copy(old)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._record(Change(self.rv, resource, "DELETED", gone, old))
            return json_copy(gone)

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
                    objects[key] = json_copy(change.old)
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
