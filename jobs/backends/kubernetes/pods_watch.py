"""What the cluster says about our pods, kept current by list + watch (an informer).

One ``PodCache`` per API server and process: a thread lists every pod PaddleCloud manages
(by the managed-by label, in all namespaces), then watches from the list's resourceVersion.
On 410 Gone it lists again; on any other error or a dropped stream it waits a little and
lists again, so a change is never missed for long. Observing a replica reads the cache, not
the API server; until the first list has arrived, callers list the job's pods themselves.

A cache that ``announce``s is the backend's change feed: each pod that changes (and, after a
list again, each that changed meanwhile) announces its job (``signals.replicas_changed``), so
the job is synced then, and never polled meanwhile.
"""

from __future__ import annotations

import logging
import os
import threading

import urllib3

from ...signals import replicas_changed
from .client import Kube, KubeError, WatchExpired
from .names import JOB_UID_LABEL, MANAGED_BY, MANAGED_BY_LABEL

logger = logging.getLogger(__name__)

SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
WATCH_SECONDS = 300
RETRY_SECONDS = 1.0


class PodCache:
    def __init__(self, kube: Kube):
        self.kube = kube
        self._pods: dict[str, dict] = {}  # by namespace/name
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._announcing = False
        self.relists = 0  # how often it had to list again (410s, errors): for tests
        self._thread = threading.Thread(target=self._run, name=f"pods-{kube.name}",
                                        daemon=True)
        self._thread.start()

    # -- reading ----------------------------------------------------------------------------

    def synced(self, timeout: float = 0) -> bool:
        return self._synced.wait(timeout)

    def job_pods(self, job_uid: str) -> list[dict]:
        with self._lock:
            return [p for p in self._pods.values()
                    if p["metadata"].get("labels", {}).get(JOB_UID_LABEL) == job_uid]

    def pods(self) -> list[dict]:
        """Every pod PaddleCloud manages on the cluster."""
        with self._lock:
            return list(self._pods.values())

    def announce(self) -> None:
        """From now on, announce the job of each pod that changes."""
        self._announcing = True

    def stop(self) -> None:
        self._stop.set()

    # -- keeping it current -----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                while not self._stop.is_set():
                    version = self._watch(version)
            except WatchExpired:
                logger.info("pods of %s: resourceVersion expired, listing again",
                            self.kube.name)
            except (KubeError, ValueError, OSError, urllib3.exceptions.HTTPError) as exc:
                logger.warning("pods of %s: %s; listing again", self.kube.name, exc)
                self._stop.wait(RETRY_SECONDS)
            self.relists += 1

    def _list(self) -> str:
        pods, version = self.kube.list("Pod", selector=SELECTOR)
        fresh = {_key(p): p for p in pods}
        with self._lock:
            before, self._pods = self._pods, fresh
        if self._synced.is_set():  # a list again: what changed while nothing was watched
            self._changed([fresh.get(key) or before[key] for key in before.keys() | fresh.keys()
                           if _version(fresh.get(key)) != _version(before.get(key))])
        # (A first list is no change: what changed before this process watched, the
        # reconciler finds, with one look at every job's replicas.)
        self._synced.set()
        return version

    def _watch(self, version: str) -> str:
        """Apply changes until the stream ends; returns the last resourceVersion seen."""
        for event in self.kube.watch("Pod", None, selector=SELECTOR, resource_version=version,
                                     timeout_seconds=WATCH_SECONDS):
            pod = event["object"]
            version = pod.get("metadata", {}).get("resourceVersion", version)
            if event["type"] == "BOOKMARK":
                continue
            with self._lock:
                if event["type"] == "DELETED":
                    self._pods.pop(_key(pod), None)
                else:
                    self._pods[_key(pod)] = pod
            self._changed([pod])
            if self._stop.is_set():
                break
        return version


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


def _key(pod: dict) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


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
    """Stop every cache's thread (tests; a worker shutting down)."""
    with _caches_lock:
        for cache in _caches.values():
            cache.stop()
        _caches.clear()
