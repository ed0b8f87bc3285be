"""What the cluster says about our pods, kept current by list + watch, namespace by namespace
(an informer per namespace, as controller-runtime's multi-namespace cache keeps one).

One ``PodCache`` per API server and process. The portal may read pods only in the namespaces
it made, with the rights it binds there (deploy/rbac.yaml), so the cache reads them there:

- a thread lists the namespaces it manages (by the managed-by label: namespaces are
  cluster-scoped, their list and watch are the cluster-wide role's), then watches them;
- each such namespace gets a thread of its own that lists its pods (by the same label), then
  watches them from the list's resourceVersion. It starts when the namespace appears (one the
  portal makes a moment ago among them: its first list is the cache's news of its pods) and
  stops, its pods forgotten, when the namespace goes (deleted, or its label removed);
- every list + watch, the namespaces' and each namespace's pods', lists again on 410 Gone, and
  on any other error or a dropped stream after a little wait, so a change is never missed for
  long. A namespace whose pods the portal may not read (403: its RoleBinding there has not
  reached the authorizer yet, or it was not made by the portal) counts as read, with the pods
  it had, and is tried again, sooner while it is new.

Observing a replica reads the cache, not the API server; until every namespace known has been
listed (``synced``), callers list the job's pods themselves (``pods_listed``).

A cache that ``announce``s is the backend's change feed: each pod that changes (and, after a
list again, each that changed meanwhile; after the first list of a namespace that appeared
later, each pod there) announces its job (``signals.replicas_changed``), so the job is synced
then, and never polled meanwhile. Its lists and watches have connections of their own
(``Kube.for_watches``), so the open watches take none the other requests need; ``stop`` cuts
the watches and ends every thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

import urllib3

from ...signals import replicas_changed
from .client import Kube, KubeError, WatchExpired, new_namespace_answer
from .names import JOB_UID_LABEL, MANAGED_BY, MANAGED_BY_LABEL

logger = logging.getLogger(__name__)

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
WATCH_SECONDS = 300
RETRY_SECONDS = 1.0
# A namespace whose pods we may not read is read again after this, doubling from a short
# first wait (a new namespace's RoleBinding reaches the authorizer within moments).
REFUSED_SECONDS = (0.05, 30.0)
# How long ``stop`` waits for a thread to end: one in a list may be in its request's retries.
STOP_SECONDS = 30.0
ERRORS = (KubeError, ValueError, OSError, urllib3.exceptions.HTTPError)


class _ListWatch:
    """One list + watch on a thread of its own: ``kind`` with the managed-by label, in
    ``namespace`` or cluster-wide. ``listed(items)`` takes each list, ``seen(type, object)``
    each change after it."""

    def __init__(self, cache: PodCache, kind: str, namespace: str | None, *, listed, seen):
        self.cache, self.kind, self.namespace = cache, kind, namespace
        self.kube = cache.kube.for_watches()
        self.listed, self.seen = listed, seen
        self._stop = threading.Event()
        self._stream = None  # the open watch's response: ``stop`` shuts it
        self._lock = threading.Lock()
        self.thread = threading.Thread(
            target=self._run, daemon=True,
            name=f"{kind.lower()}s-{cache.kube.name}" + (f"-{namespace}" if namespace else ""))

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """End the thread soon: at once if it waits on a watch (its stream is shut)."""
        self._stop.set()
        with self._lock:
            self._shut()

    def _shut(self) -> None:
        if self._stream is not None:
            # (ended already, or its connection back in its pool: nothing to cut)
            with contextlib.suppress(ValueError, RuntimeError, OSError):
                self._stream.shutdown()

    def _opened(self, stream) -> None:
        with self._lock:
            self._stream = stream
            if self._stop.is_set():
                self._shut()

    def _run(self) -> None:
        where = self.namespace or "the cluster"
        refused = REFUSED_SECONDS[0]
        while not self._stop.is_set():
            try:
                items, version = self.kube.list(self.kind, self.namespace, selector=SELECTOR)
                self.listed(items)
                refused = REFUSED_SECONDS[0]
                while not self._stop.is_set():
                    version = self._watch(version)
            except WatchExpired:
                logger.info("%ss in %s of %s: resourceVersion expired, listing again",
                            self.kind, where, self.cache.kube.name)
            except ERRORS as exc:
                if self._stop.is_set():
                    break
                if self.namespace and isinstance(exc, KubeError) \
                        and new_namespace_answer(exc, self.namespace):
                    logger.info("%ss in %s of %s: %s; reading again in %.1f s", self.kind,
                                where, self.cache.kube.name, exc, refused)
                    self.listed(None)  # nothing more of it can be known for now
                    self._stop.wait(refused)
                    refused = min(2 * refused, REFUSED_SECONDS[1])
                else:
                    logger.warning("%ss in %s of %s: %s; listing again", self.kind, where,
                                   self.cache.kube.name, exc)
                    self._stop.wait(RETRY_SECONDS)
            self.cache._relisted()

    def _watch(self, version: str) -> str:
        """Apply changes until the stream ends; returns the last resourceVersion seen."""
        try:
            for event in self.kube.watch(
                    self.kind, self.namespace, selector=SELECTOR, resource_version=version,
                    timeout_seconds=WATCH_SECONDS, opened=self._opened):
                obj = event["object"]
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event["type"] != "BOOKMARK":
                    self.seen(event["type"], obj)
                if self._stop.is_set():
                    break
        finally:
            with self._lock:
                self._stream = None
        return version


class PodCache:
    def __init__(self, kube: Kube):
        self.kube = kube
        self._pods: dict[str, dict[str, dict]] = {}  # by namespace, then name
        self._watches: dict[str, _ListWatch] = {}  # by namespace
        self._stopping: list[_ListWatch] = []  # of namespaces gone, until their threads end
        self._listed: set[str] = set()  # the namespaces listed (or refused) at least once
        self._read: set[str] = set()  # those whose pods a list gave at least once
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._announcing = False
        self._first: set[str] | None = None  # the namespaces there were at the start
        self.relists = 0  # how often it had to list again (410s, errors): for tests
        self._namespaces = _ListWatch(self, "Namespace", None, listed=self._namespaces_listed,
                                      seen=self._namespace_seen)
        self._namespaces.start()

    # -- reading ----------------------------------------------------------------------------

    def synced(self, timeout: float = 0) -> bool:
        """Whether every namespace known has been listed (waiting up to ``timeout``)."""
        with self._lock:
            return self._lock.wait_for(
                lambda: self._first is not None and self._watches.keys() <= self._listed,
                timeout)

    def has_read(self, namespace: str) -> bool:
        """Whether the pods of ``namespace`` were read at least once: until then (a namespace
        made a moment ago, or whose pods the portal may not read yet) the cache knows
        nothing of them, and a pod missing from it may well be there."""
        with self._lock:
            return namespace in self._read

    def job_pods(self, job_uid: str) -> list[dict]:
        with self._lock:
            return [p for pods in self._pods.values() for p in pods.values()
                    if p["metadata"].get("labels", {}).get(JOB_UID_LABEL) == job_uid]

    def pods(self) -> list[dict]:
        """Every pod PaddleCloud manages on the cluster."""
        with self._lock:
            return [p for pods in self._pods.values() for p in pods.values()]

    def namespaces(self) -> list[str]:
        """The namespaces whose pods are watched."""
        with self._lock:
            return sorted(self._watches)

    def announce(self) -> None:
        """From now on, announce the job of each pod that changes."""
        self._announcing = True

    def stop(self) -> None:
        """Stop every watch, and wait for their threads to end."""
        self._stop.set()
        with self._lock:
            watches = [self._namespaces, *self._watches.values(), *self._stopping]
            self._watches.clear()
        for watch in watches:
            watch.stop()
        for watch in watches:
            if watch.thread is not threading.current_thread():
                watch.thread.join(STOP_SECONDS)
                if watch.thread.is_alive():
                    logger.warning("%s did not stop within %s s", watch.thread.name,
                                   STOP_SECONDS)

    # -- the namespaces ---------------------------------------------------------------------

    def _namespaces_listed(self, namespaces: list[dict]) -> None:
        names = {n["metadata"]["name"] for n in namespaces}
        with self._lock:
            if self._first is None:
                self._first = names
            for name in names - self._watches.keys():
                self._watch(name)
            gone = [self._forget(name) for name in self._watches.keys() - names]
            self._lock.notify_all()
        self._changed([pod for pods in gone for pod in pods])

    def _namespace_seen(self, type_: str, namespace: dict) -> None:
        name = namespace["metadata"]["name"]
        with self._lock:
            if type_ == "DELETED":
                gone = self._forget(name) if name in self._watches else []
            else:
                gone = []
                if name not in self._watches:
                    self._watch(name)
            self._lock.notify_all()
        self._changed(gone)

    def _watch(self, namespace: str) -> None:
        """Watch the pods of ``namespace`` from now (holding the lock)."""
        if self._stop.is_set():
            return
        watch = self._watches[namespace] = _ListWatch(
            self, "Pod", namespace, listed=lambda pods: self._pods_listed(watch, pods),
            seen=lambda type_, pod: self._pod_seen(watch, type_, pod))
        watch.start()

    def _forget(self, namespace: str) -> list[dict]:
        """Stop watching ``namespace`` (holding the lock); its pods, gone with it."""
        watch = self._watches.pop(namespace)
        watch.stop()  # (its thread may wait for the lock held here: ``stop`` joins it)
        self._stopping = [w for w in self._stopping if w.thread.is_alive()] + [watch]
        self._listed.discard(namespace)
        self._read.discard(namespace)
        return list(self._pods.pop(namespace, {}).values())

    # -- the pods of one namespace ----------------------------------------------------------

    def _pods_listed(self, watch: _ListWatch, pods: list[dict] | None) -> None:
        """A list of ``watch``'s namespace; None: it cannot be read now (what it had stays)."""
        namespace = watch.namespace
        with self._lock:
            if self._watches.get(namespace) is not watch:
                return  # stopped meanwhile
            before = self._pods.get(namespace, {})
            if pods is not None:
                self._pods[namespace] = {p["metadata"]["name"]: p for p in pods}
                self._read.add(namespace)
            fresh = self._pods.get(namespace, {})
            # A first list of a namespace there was at the start is no change: what changed
            # before this process watched, the reconciler finds, with one look at every job.
            news = namespace in self._listed or namespace not in (self._first or ())
            self._listed.add(namespace)
            self._lock.notify_all()
        if news:
            self._changed([fresh.get(name) or before[name]
                           for name in before.keys() | fresh.keys()
                           if _version(fresh.get(name)) != _version(before.get(name))])

    def _pod_seen(self, watch: _ListWatch, type_: str, pod: dict) -> None:
        with self._lock:
            if self._watches.get(watch.namespace) is not watch:
                return
            pods = self._pods.setdefault(watch.namespace, {})
            if type_ == "DELETED":
                pods.pop(pod["metadata"]["name"], None)
            else:
                pods[pod["metadata"]["name"]] = pod
        self._changed([pod])

    def _relisted(self) -> None:
        with self._lock:
            self.relists += 1

    def _changed(self, pods) -> None:
        if not self._announcing:
            return
        for job_uid in {(p["metadata"].get("labels") or {}).get(JOB_UID_LABEL) for p in pods}:
            if job_uid:
                try:
                    replicas_changed.send(PodCache, job_uid=job_uid)
                except Exception:  # a receiver that fails (the broker down) ends no watch
                    logger.exception("job %s: its change could not be announced", job_uid)


def _version(pod: dict | None) -> str | None:
    return pod["metadata"].get("resourceVersion") if pod else None


def pods_listed(kube: Kube) -> list[dict]:
    """Every pod PaddleCloud manages on the cluster, listed now, namespace by namespace (what
    a cache not synced yet would hold); a namespace we may not read has none."""
    namespaces, _ = kube.list("Namespace", selector=SELECTOR)
    found = []
    for namespace in namespaces:
        try:
            found += kube.list("Pod", namespace["metadata"]["name"], selector=SELECTOR)[0]
        except KubeError as exc:
            if exc.status != 403:
                raise
    return found


_caches: dict[int, PodCache] = {}
_caches_lock = threading.Lock()


def pod_cache(kube: Kube) -> PodCache:
    with _caches_lock:
        cache = _caches.get(id(kube))
        if cache is None or cache.kube is not kube:
            cache = _caches[id(kube)] = PodCache(kube)
        return cache


def pod_caches_watching() -> list[str]:
    """The clusters whose pods are watched (caches not stopped), by name."""
    with _caches_lock:
        return [cache.kube.name for cache in _caches.values()]


def _forget_in_child() -> None:
    """A forked process (a prefork worker's child) has no thread of its parent's: a cache it
    inherited would never change. It makes its own."""
    global _caches_lock
    _caches.clear()
    _caches_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def pod_caches_stop() -> None:
    """Stop every cache's threads, and wait for them to end (tests; a worker shutting down)."""
    with _caches_lock:
        caches = list(_caches.values())
        _caches.clear()
    for cache in caches:
        cache.stop()
