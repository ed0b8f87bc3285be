"""What the cluster says about our pods, kept current by list + watch (an informer).

One ``PodCache`` per API server and process: a thread lists every pod PaddleCloud manages
(by the managed-by label, in all namespaces), then watches from the list's resourceVersion.
On 410 Gone it lists again; on any other error or a dropped stream it waits a little and
lists again, so a change is never missed for long. Observing a replica reads the cache, not
the API server; until the first list has arrived, callers list the job's pods themselves.
"""

from __future__ import annotations

import logging
import threading

import urllib3

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
        with self._lock:
            self._pods = {_key(p): p for p in pods}
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
            if self._stop.is_set():
                break
        return version


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


def pod_caches_stop() -> None:
    """Stop every cache's thread (tests; a worker shutting down)."""
    with _caches_lock:
        for cache in _caches.values():
            cache.stop()
        _caches.clear()
