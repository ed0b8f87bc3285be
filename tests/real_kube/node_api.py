"""The node agent's view of a real API server: JSON requests through the admin kubeconfig, and a
local mirror of the objects the process kubelet reads (its pods, and the ConfigMaps, Secrets,
claims, volumes, Services and EndpointSlices they need), fed by list+watch.

The mirror is the fake API server's own ``Store``: the process kubelet and its DNS server read
it as they read the fake's, so what runs a pod is the same code on both. Each watched resource
is listed, then watched from the list's resourceVersion (resumed from the last one seen when the
stream ends, relisted on 410 Gone). An event older than what the mirror holds (the answer to the
agent's own status write may arrive before the watch brings it) is ignored."""

from __future__ import annotations

import json
import logging
import threading

from kubernetes import config
from kubernetes.client.exceptions import ApiException

from tests.k8s_api_server import resources
from tests.k8s_api_server.store import Store

log = logging.getLogger(__name__)

# Longest a watch request stays open (the server ends it; the agent resumes it at once).
WATCH_SECONDS = 240


class Rest:
    """JSON over the kubeconfig's connection (its certificates or token)."""

    def __init__(self, kubeconfig: str):
        self.client = config.new_client_from_config(config_file=kubeconfig)
        self._streams: set = set()  # open streaming answers, cut by ``close``
        self._lock = threading.Lock()
        self._closed = False

    def call(self, method: str, path: str, *, query: dict | None = None, body=None,
             content_type: str = "application/json", timeout: float = 30):
        """The decoded answer; ``ApiException`` (``.status``) when the server refuses."""
        response = self._request(method, path, query, body, content_type, timeout)
        data = response.data
        return json.loads(data) if data else None

    def stream(self, path: str, query: dict):
        """The lines of a streaming answer (a watch), decoded."""
        response = self._request("GET", path, query, None, "application/json",
                                 (10, WATCH_SECONDS + 30))
        buffer = b""
        with self._lock:
            self._streams.add(response)
            if self._closed:  # opened as ``close`` ran: it ends at once
                response.shutdown()
        try:
            for chunk in response.stream(65536, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:
            with self._lock:
                self._streams.discard(response)
            response.release_conn()

    def _request(self, method, path, query, body, content_type, timeout):
        """The urllib3 response, unread; ``ApiException`` for a status that is not 2xx."""
        request = self.client.param_serialize(
            method, path, query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"])
        answer = self.client.call_api(*request, _request_timeout=timeout)
        if not 200 <= answer.status <= 299:
            answer.read()
            raise ApiException.from_response(http_resp=answer, body=None, data=None)
        return answer.response

    def close(self) -> None:
        """Cut the open streams (their readers see the end), close the connections."""
        with self._lock:
            self._closed = True
            for response in self._streams:
                response.shutdown()
        self.client.close()


def collection_path(rt: resources.ResourceType, namespace: str | None = None) -> str:
    base = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    return f"{base}/namespaces/{namespace}/{rt.plural}" if namespace else f"{base}/{rt.plural}"


def object_path(rt: resources.ResourceType, namespace: str | None, name: str) -> str:
    return f"{collection_path(rt, namespace)}/{name}"


def _rv(obj: dict) -> int:
    return int(obj["metadata"].get("resourceVersion") or 0)


class Mirror:
    """The watched objects, in ``store``; ``synced`` is set once every resource was listed."""

    def __init__(self, rest: Rest, node: str):
        self.rest = rest
        self.store = Store(history_size=1)
        self.watched = [
            (resources.PODS, {"fieldSelector": f"spec.nodeName={node}"}),
            (resources.CONFIGMAPS, {}), (resources.SECRETS, {}),
            (resources.PERSISTENTVOLUMECLAIMS, {}), (resources.PERSISTENTVOLUMES, {}),
            (resources.SERVICES, {}), (resources.ENDPOINTSLICES, {})]
        self._seen: dict[tuple[str, str, str], int] = {}  # the real resourceVersion held
        self.gone_uids: set[str] = set()  # pods the agent removed: no late event brings them back
        # The pods that changed since the agent last took them (uid -> namespace, name), and
        # ``woken``, set by any change the agent should look at now (``changed``).
        self.pods_changed: dict[str, tuple[str, str]] = {}
        self.woken = threading.Event()
        self._changed_lock = threading.Lock()
        self.stopping = threading.Event()
        self._listed: set[str] = set()
        self.synced = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(rt, query), daemon=True,
                                          name=f"node-watch-{rt.plural}")
                         for rt, query in self.watched]

    def start(self) -> Mirror:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """End the watches: their streams are cut (``Rest.close``), their threads joined."""
        self.stopping.set()
        self.rest.close()
        for thread in self._threads:
            thread.join(timeout=10)

    # --- writes into the mirror ---------------------------------------------------------

    def put(self, rt: resources.ResourceType, obj: dict) -> None:
        """An object as the server has it now (an event, a list's item, a write's answer)."""
        meta = obj["metadata"]
        key = (rt.key, meta.get("namespace", ""), meta["name"])
        with self.store.lock:
            if meta.get("uid") in self.gone_uids or _rv(obj) < self._seen.get(key, 0):
                return
            self._seen[key] = _rv(obj)
            self.store.write(rt.key, obj)
            if rt.key == resources.PODS.key:
                self.changed(meta["uid"], meta["namespace"], meta["name"])

    def drop(self, rt: resources.ResourceType, obj: dict) -> None:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        with self.store.lock:
            held = self.store.get(rt.key, namespace, name)
            if held is not None and held["metadata"].get("uid") == meta.get("uid"):
                self.store.remove(rt.key, namespace, name)
                self._seen.pop((rt.key, namespace, name), None)
                if rt.key == resources.PODS.key:
                    self.changed(meta["uid"], namespace, name)

    def changed(self, uid: str, namespace: str, name: str) -> None:
        """The pod ``uid`` needs a look: its object changed, or one of its processes ended."""
        with self._changed_lock:
            self.pods_changed[uid] = (namespace, name)
            self.woken.set()

    def take_changed(self) -> dict[str, tuple[str, str]]:
        """The pods changed since the last take."""
        with self._changed_lock:
            self.woken.clear()
            taken, self.pods_changed = self.pods_changed, {}
        return taken

    def _replace(self, rt: resources.ResourceType, items: list[dict]) -> None:
        with self.store.lock:
            listed = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items}
            for held in self.store.list(rt.key):
                meta = held["metadata"]
                if (meta.get("namespace", ""), meta["name"]) not in listed:
                    self.drop(rt, held)
            for item in items:
                item.setdefault("kind", rt.kind)
                item.setdefault("apiVersion", rt.api_version)
                self.put(rt, item)

    # --- list and watch ---------------------------------------------------------------------

    def _run(self, rt: resources.ResourceType, query: dict) -> None:
        rv = None
        while not self.stopping.is_set():
            try:
                if rv is None:
                    listing = self.rest.call("GET", collection_path(rt), query=query)
                    self._replace(rt, listing["items"])
                    rv = listing["metadata"]["resourceVersion"]
                    self._listed.add(rt.key)
                    if len(self._listed) == len(self.watched):
                        self.synced.set()
                rv = self._watch(rt, query, rv)
            except ApiException as exc:
                if exc.status == 410:  # the version is compacted away: list again
                    rv = None
                elif not self.stopping.is_set():
                    log.warning("watch of %s: %s %s", rt.plural, exc.status, exc.reason)
                    self.stopping.wait(1)
            except Exception as exc:  # the server restarting, a cut stream: resume shortly
                if not self.stopping.is_set():
                    log.warning("watch of %s: %r", rt.plural, exc)
                    self.stopping.wait(1)

    def _watch(self, rt: resources.ResourceType, query: dict, rv: str) -> str | None:
        """Follow changes from ``rv``; the last version seen, None to relist (410)."""
        for event in self.rest.stream(collection_path(rt), {
                **query, "watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                "timeoutSeconds": str(WATCH_SECONDS)}):
            if self.stopping.is_set():
                return rv
            kind, obj = event["type"], event["object"]
            if kind == "ERROR":
                if obj.get("code") == 410:
                    return None
                raise ApiException(status=obj.get("code"), reason=obj.get("message"))
            rv = obj["metadata"].get("resourceVersion") or rv
            if kind == "DELETED":
                self.drop(rt, obj)
            elif kind in ("ADDED", "MODIFIED"):
                self.put(rt, obj)
        return rv
