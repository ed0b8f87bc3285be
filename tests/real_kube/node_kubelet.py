"""The suite's process kubelet (tests/k8s_api_server/runtime/kubelet.py) on a real API server.

The process kubelet reads the fake's ``Store`` and writes pods back into it; here it reads the
agent's mirror of the real objects (``node_api.Mirror``, the same ``Store``), and what it writes
goes to the real API server as a kubelet writes it:

- a pod's status: the kubelet keeps its own copy of each pod's status (as a kubelet's status
  manager does) and, after each pass, sends what differs from the server's as a merge patch
  of ``pods/NAME/status`` (with the pod's uid: a new pod of the same name is not touched);
  the answer goes into the mirror at once. Conditions the kubelet does not set (a
  controller's ``DisruptionTarget``) are kept. A refused write is sent again next pass;
- a finished deletion: ``DELETE`` with ``gracePeriodSeconds: 0`` and a uid precondition;
- Events: real core/v1 Events, posted in order by a thread of their own (a repeat bumps
  ``count``), source ``kubelet`` on this node.

Why a mirror rather than an interface the kubelet calls: the process kubelet, its DNS server
and the environment, volume and claim code read a ``Store`` under its lock everywhere; a mirror
keeps all of that unchanged (the fake's tests exercise the same lines) and keeps a pass from
waiting on the network. The agent never schedules: it watches only the pods bound to its node.

Host services (the fake's ``expose_host_port``): a Service without a selector annotated
``HOST_PORT_ANNOTATION: "<port>"`` makes the node forward its first port, on the node's address
of the pod network, to ``127.0.0.1:<port>`` of this machine, and write the Service's
EndpointSlice naming that address (``<service>-node``, owned by the Service). Give it
``clusterIP: None``: there is no kube-proxy, the cluster DNS answers the slice's address."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import queue
import threading
import time
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from tests.k8s_api_server import resources
from tests.k8s_api_server.config import Settings
from tests.k8s_api_server.kubelet import _terminated
from tests.k8s_api_server.logs import LogStore
from tests.k8s_api_server.runtime.container import CGROUP_PARENT, MEMORY_CGROUP
from tests.k8s_api_server.runtime.kubelet import ProcessKubelet
from tests.k8s_api_server.store import json_copy

from .node_api import Mirror, Rest, collection_path, object_path

log = logging.getLogger(__name__)

HOST_PORT_ANNOTATION = "node.paddlecloud.test/host-port"
MANAGED_BY = "node-agent.paddlecloud.test"
# The pod conditions a kubelet writes (PodScheduled too, once it runs the pod); the others (a
# controller's DisruptionTarget, say) are the server's.
_NOT_STARTED = ("ContainerCreating", "PodInitializing", "CreateContainerConfigError")
KUBELET_CONDITIONS = {"PodScheduled", "Initialized", "Ready", "ContainersReady",
                      "PodReadyToStartContainers"}


def merge_patch(old: dict, new: dict) -> dict:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``."""
    patch = {}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value) \
                if isinstance(value, dict) and isinstance(old[key], dict) else value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def now_micro() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventPoster:
    """``EventRecorder.record`` for the kubelet, onto the real API (in a thread of its own)."""

    def __init__(self, rest: Rest, node: str):
        self.rest = rest
        self.node = node
        self._sent: dict[tuple, tuple[str, int]] = {}  # what an event is -> (name, count)
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="node-events", daemon=True)
        self._thread.start()

    def record(self, rt, obj: dict, type_: str, reason: str, message: str, *,
               component: str, host: str | None = None, field_path: str | None = None) -> None:
        meta = obj["metadata"]
        involved = {"kind": rt.kind, "apiVersion": rt.api_version, "namespace":
                    meta.get("namespace"), "name": meta["name"], "uid": meta["uid"],
                    "fieldPath": field_path}
        self._queue.put(({k: v for k, v in involved.items() if v}, type_, reason, message,
                         component))

    def forget(self, uid: str) -> None:
        """A pod that is gone: its events are not repeated any more."""
        self._queue.put(uid)

    def close(self) -> None:
        """Post what is queued (a few seconds at most), then stop."""
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, str):
                self._sent = {k: v for k, v in self._sent.items() if k[0] != item}
                continue
            try:
                self._post(*item)
            except ApiException as exc:  # the namespace is going, say: dropped, as a kubelet
                log.info("event %s dropped: %s %s", item[2], exc.status, exc.reason)
            except Exception as exc:
                log.warning("event %s dropped: %r", item[2], exc)

    def _post(self, involved: dict, type_: str, reason: str, message: str,
              component: str) -> None:
        key = (involved["uid"], involved.get("fieldPath"), type_, reason, message)
        namespace, stamp = involved.get("namespace") or "default", now_micro()[:19] + "Z"
        events = collection_path(resources.EVENTS, namespace)
        if key in self._sent:
            name, count = self._sent[key]
            self._sent[key] = (name, count + 1)
            self.rest.call("PATCH", f"{events}/{name}", body={
                "count": count + 1, "lastTimestamp": stamp},
                content_type="application/merge-patch+json")
            return
        name = f"{involved['name']}.{time.time_ns():x}"
        self.rest.call("POST", events, body={
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved, "type": type_, "reason": reason, "message": message,
            "source": {"component": component, "host": self.node}, "count": 1,
            "firstTimestamp": stamp, "lastTimestamp": stamp,
            "reportingComponent": component, "reportingInstance": self.node})
        self._sent[key] = (name, 1)


class NodeApi:
    """What the process kubelet asks of "the API server": the mirror's store, the settings,
    an event recorder, and the final delete of a pod."""

    def __init__(self, rest: Rest, mirror: Mirror, node: str, settings: Settings):
        self.rest = rest
        self.mirror = mirror
        self.store = mirror.store
        self.settings = settings
        self.recorder = EventPoster(rest, node)
        self.pod_removal_due: dict[str, float] = {}  # unused: the kubelet ends deletions
        self.kubelet_stops_pods = True

    def remove_terminated_pod(self, pod: dict) -> None:
        """The kubelet's last word on a deleted pod whose containers have all stopped: its
        final status (a Job's controller takes its tracking finalizer off a finished pod only,
        and the agent forgets the pod once it is deleted), then the delete."""
        meta = pod["metadata"]
        path = object_path(resources.PODS, meta["namespace"], meta["name"])
        try:
            self.rest.call("PATCH", path + "/status",
                           body={"metadata": {"uid": meta["uid"]}, "status": pod["status"]},
                           content_type="application/merge-patch+json")
            self.rest.call("DELETE", path, body={"gracePeriodSeconds": 0,
                                                 "preconditions": {"uid": meta["uid"]}})
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone already, or another pod by that name
                log.warning("delete of pod %s/%s: %s %s", meta["namespace"], meta["name"],
                            exc.status, exc.reason)
                return  # the next pass tries again
        self.mirror.gone_uids.add(meta["uid"])
        self.mirror.drop(resources.PODS, pod)


class NodeKubelet(ProcessKubelet):
    """The process kubelet of one node of a real cluster. The caller runs ``sync`` holding the
    store's lock, then ``flush`` without it (the writes to the API server)."""

    def __init__(self, api: NodeApi, node: str, host_ip: str):
        super().__init__(api, LogStore(api.store))
        self.node = node
        self.host_ip = host_ip
        self._statuses: dict[str, dict] = {}  # pod uid -> the status this kubelet reports
        # pod uid -> the status last sent and taken: compared with it, not with the server's
        # copy (which the server normalizes: condition order, nulls), a pod is written once
        # per change.
        self._sent: dict[str, dict] = {}
        self._host_services: dict[int, tuple[str, int]] = {}  # node port -> (service uid, port)
        self._slices: list[dict] = []  # EndpointSlices to write after the pass
        self._restarting: set[str] = set()  # Running pods whose sandbox is being made again
        # The pods every pass looks at (``_waits``), and where each pod known is (uid ->
        # namespace, name).
        self.busy: dict[str, tuple[str, str]] = {}
        self._where: dict[str, tuple[str, str]] = {}

    def close(self) -> None:
        super().close()
        self.api.recorder.close()

    # --- the pass ----------------------------------------------------------------------

    def sync(self, targets: dict[str, tuple[str, str]] | None = None) -> None:
        """A pass over every pod (a relist), or over ``targets`` only (uid -> namespace,
        name: those that changed, and those ``busy``): what a kubelet's pod workers do for
        the pods that have news."""
        store = self.api.store
        if targets is None:
            found = store.list(resources.PODS.key, read_only=True)
        else:
            found = [p for p in (store.get(resources.PODS.key, *where)
                                 for where in targets.values()) if p is not None]
        self.busy = {} if targets is None else {
            uid: where for uid, where in self.busy.items() if uid not in targets}
        for original in found:
            meta = original["metadata"]
            uid = meta["uid"]
            if targets is not None and uid not in targets:
                continue  # another pod by that name
            pod = json_copy(original)
            pod.setdefault("status", {})
            if uid in self._statuses:
                pod["status"] = self._merged(pod["status"], self._statuses[uid])
            if self._sync_pod(pod):
                self._statuses[uid] = pod["status"]
                self._where[uid] = (meta["namespace"], meta["name"])
                if self._waits(pod):
                    self.busy[uid] = (meta["namespace"], meta["name"])
        if targets is None:
            alive = store.uids(resources.PODS.key)
            gone = [u for u in self._runtimes.keys() | self.sandboxes.keys()
                    | self._statuses.keys() if u not in alive]
        else:
            alive = {p["metadata"]["uid"] for p in found}
            gone = [u for u in targets if u not in alive]
        for uid in gone:
            self._forget(uid)
        self._sync_host_services()

    def relist(self) -> dict[str, tuple[str, str]]:
        """The pods a process of which has ended (a kubelet's PLEG relist: its containers'
        states, not its pods)."""
        return {uid: self._where[uid] for uid, sandbox in list(self.sandboxes.items())
                if uid in self._where and any(run.container.poll() is not None
                                              for run in list(sandbox.runs.values()))}

    def _forget(self, uid: str) -> None:
        """A pod that is gone (removed, or force-deleted): whatever still runs is killed."""
        if self._runtimes.pop(uid, None) is not None:
            self.logs.forget(uid)
            self.api.recorder.forget(uid)
        if uid in self.sandboxes:
            self._teardown(uid)
        self._statuses.pop(uid, None)
        self._sent.pop(uid, None)
        self._restarting.discard(uid)
        self.busy.pop(uid, None)
        self._where.pop(uid, None)

    def _waits(self, pod: dict) -> bool:
        """Whether the pod waits on time or on something no event tells the agent of (a
        start, a deletion's grace, a restart's back-off, an ended process whose output is
        not all read): looked at in every pass until it does not."""
        uid = pod["metadata"]["uid"]
        if pod["metadata"].get("deletionTimestamp") or \
                pod["status"].get("phase") == "Pending" or uid in self._restarting:
            return True
        runtime, sandbox = self._runtimes.get(uid), self.sandboxes.get(uid)
        return bool(runtime is not None and runtime.restart_at) or (
            sandbox is not None and any(run.exited_at or not run.reader.is_alive()
                                        for run in sandbox.runs.values()))

    def _read(self, uid: str, name: str, run) -> None:
        """The container's output until it ends, which is when its process has ended (its
        pid namespace's last process gone): the pod is looked at then, as a kubelet's
        container runtime tells it (evented PLEG), not at the next relist."""
        try:
            super()._read(uid, name, run)
        finally:
            where = self._where.get(uid)
            if where is not None:
                self.api.mirror.changed(uid, *where)

    @staticmethod
    def _merged(server: dict, mine: dict) -> dict:
        """This kubelet's status, with the conditions others own as the server has them."""
        merged = json_copy(mine)
        merged["conditions"] = [c for c in merged.get("conditions") or []
                                if c["type"] in KUBELET_CONDITIONS] + \
            [json_copy(c) for c in server.get("conditions") or []
             if c["type"] not in KUBELET_CONDITIONS]
        return merged

    def _accept(self, pod: dict) -> None:
        super()._accept(pod)
        pod["status"].update(hostIP=self.host_ip, hostIPs=[{"ip": self.host_ip}])

    def _run(self, pod: dict, runtime) -> None:
        uid = pod["metadata"]["uid"]
        if pod["status"].get("phase") == "Running" and uid not in self.sandboxes and \
                uid not in self._restarting:
            # Running, by an agent before this one (killed: its containers died with it). A
            # kubelet that finds a pod's containers gone starts them again (init containers
            # first), unless its restartPolicy is Never: then they failed, status unknown.
            if pod["spec"].get("restartPolicy", "Always") == "Never":
                return self._lost(pod)
            self._restarting.add(uid)
        if uid in self._restarting:
            self._start(pod, runtime)
            sandbox = self.sandboxes.get(uid)
            waiting = [e for e in pod["status"].get("containerStatuses") or []
                       if (e["state"].get("waiting") or {}).get("reason") in _NOT_STARTED]
            if sandbox is not None and not waiting and \
                    sandbox.init_done >= len(pod["spec"].get("initContainers") or []):
                self._restarting.discard(uid)  # started: from now on, as any running pod
        super()._run(pod, runtime)

    def _lost(self, pod: dict) -> None:
        for entry in pod["status"].get("containerStatuses") or []:
            entry.update(ready=False, started=False, state={"terminated": {
                **_terminated(137, "ContainerStatusUnknown", ""),
                "message": "The container could not be located when the pod was terminated"}})
        self._settle(pod)

    def flush(self, targets: dict[str, tuple[str, str]] | None = None) -> None:
        """Send the statuses the server does not have yet (of ``targets`` only, when given:
        the pods the pass looked at), and the host services' slices."""
        store = self.api.store
        with store.lock:
            patches = []
            found = store.list(resources.PODS.key, read_only=True) if targets is None else [
                p for p in (store.get(resources.PODS.key, *where) for where in targets.values())
                if p is not None]
            for pod in found:
                uid = pod["metadata"]["uid"]
                mine = self._statuses.get(uid)
                if mine is not None and mine != self._sent.get(uid):
                    patches.append((pod["metadata"], mine, merge_patch(
                        pod.get("status") or {}, mine)))
            slices, self._slices = self._slices, []
        for meta, mine, patch in patches:
            path = object_path(resources.PODS, meta["namespace"], meta["name"]) + "/status"
            try:
                answer = self.api.rest.call(
                    "PATCH", path, body={"metadata": {"uid": meta["uid"]}, "status": patch},
                    content_type="application/merge-patch+json")
            except ApiException as exc:  # gone (the watch will say), or refused: next pass
                if exc.status != 404:
                    log.warning("status of pod %s/%s: %s %s", meta["namespace"], meta["name"],
                                exc.status, exc.body)
                    self.api.mirror.changed(meta["uid"], meta["namespace"], meta["name"])
                continue
            self._sent[meta["uid"]] = mine
            self.api.mirror.put(resources.PODS, answer)
        for body in slices:
            self._write_slice(body)

    # --- host services -------------------------------------------------------------------

    def _sync_host_services(self) -> None:
        wanted: dict[int, tuple[dict, int]] = {}
        for service in self.api.store.list(resources.SERVICES.key, read_only=True):
            value = (service["metadata"].get("annotations") or {}).get(HOST_PORT_ANNOTATION)
            ports = service["spec"].get("ports") or []
            if value and value.isdigit() and ports and not service["spec"].get("selector"):
                wanted.setdefault(int(ports[0]["port"]), (service, int(value)))
        for port, (uid, host_port) in list(self._host_services.items()):
            service, wanted_host_port = wanted.get(port, (None, None))
            if service is None or service["metadata"]["uid"] != uid or \
                    wanted_host_port != host_port:
                self.stop_forward(port)
                del self._host_services[port]
        for port, (service, host_port) in wanted.items():
            if port in self._host_services:
                continue
            address, _ = self.forward_host_port(host_port, port=port)
            self._host_services[port] = (service["metadata"]["uid"], host_port)
            self._slices.append(self._slice(service, address, port))

    def _slice(self, service: dict, address: str, port: int) -> dict:
        meta = service["metadata"]
        first = service["spec"]["ports"][0]
        return {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": f"{meta['name']}-node", "namespace": meta["namespace"],
                "labels": {"kubernetes.io/service-name": meta["name"],
                           "endpointslice.kubernetes.io/managed-by": MANAGED_BY},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True,
                                     "blockOwnerDeletion": True}]},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True},
                           "nodeName": self.node}],
            "ports": [{"name": first.get("name", ""), "port": port,
                       "protocol": first.get("protocol", "TCP")}]}

    def _write_slice(self, body: dict) -> None:
        """Made, or brought back to ``body``; into the mirror at once (the cluster DNS
        answers from it)."""
        meta = body["metadata"]
        try:
            try:
                answer = self.api.rest.call(
                    "POST", collection_path(resources.ENDPOINTSLICES, meta["namespace"]),
                    body=body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                answer = self.api.rest.call(
                    "PATCH", object_path(resources.ENDPOINTSLICES, meta["namespace"],
                                         meta["name"]),
                    body=body, content_type="application/merge-patch+json")
        except ApiException as exc:
            log.warning("EndpointSlice %s/%s: %s %s", meta["namespace"], meta["name"],
                        exc.status, exc.body)
            return
        self.api.mirror.put(resources.ENDPOINTSLICES, answer)


def host_service(name: str, host_port: int, *, port: int = 80) -> dict:
    """The Service a test makes for ``127.0.0.1:host_port`` of this machine to be reached from
    pods at ``http://<name>.<namespace>.svc[:port]``: headless, no selector, annotated for the
    node agent (which forwards it and writes its EndpointSlice)."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "annotations": {HOST_PORT_ANNOTATION: str(host_port)}},
            "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": port,
                                                     "protocol": "TCP"}]}}


def expose_host_port(api_client, host_port: int, *, namespace: str, service: str,
                     port: int = 80, timeout: float = 30) -> str:
    """``FakeKubernetes.expose_host_port`` on a real cluster whose node is this agent: the
    Service ``host_service`` makes, in ``namespace`` (made if missing), once the agent wrote its
    EndpointSlice (pods resolve the name from then on). Its base URL,
    ``http://<service>.<namespace>.svc[:port]``; deleting the Service stops the forward."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    core.create_namespaced_service(namespace, host_service(service, host_port, port=port))
    slices = client.DiscoveryV1Api(api_client)
    deadline = time.monotonic() + timeout
    while not slices.list_namespaced_endpoint_slice(
            namespace, label_selector=f"kubernetes.io/service-name={service},"
                                      f"endpointslice.kubernetes.io/managed-by={MANAGED_BY}").items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no node agent wrote the EndpointSlice of {namespace}/{service}")
        time.sleep(0.1)
    return f"http://{service}.{namespace}.svc" + ("" if port == 80 else f":{port}")


def signal_container(pod_uid: str, container: str, signum: int, *,
                     command: str | None = None) -> None:
    """``FakeKubernetes.controller.signal_container`` on the agent's node: send ``signum`` to
    the PID 1 of the pod's latest run of ``container`` (as a node's OOM killer would), which is
    a process of this machine; with ``command``, to its processes of that name instead (an
    entry's child, say). Found through its memory cgroup, which the kubelet names by the
    pod's uid, the container and its restart count; its PID 1 is the process whose pid in its
    own namespace is 1."""
    runs = sorted(MEMORY_CGROUP.glob(f"{CGROUP_PARENT}/*-{pod_uid}-{container}-*"),
                  key=lambda path: int(path.name.rsplit("-", 1)[1]))
    if not runs:
        raise ValueError(f"no run of container {container} of pod {pod_uid} on this machine")
    signalled = False
    for pid in (runs[-1] / "cgroup.procs").read_text().split():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if command is not None:
            if status.partition("\n")[0].split(None, 1)[-1] == command:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signum)
                    signalled = True
            continue
        nspids = next(line.split()[1:] for line in status.splitlines()
                      if line.startswith("NSpid:"))
        if len(nspids) > 1 and nspids[-1] == "1":
            os.kill(int(pid), signum)
            return
    if not signalled:
        what = f"no process {command} runs in" if command else "not running:"
        raise ValueError(f"{what} container {container} of pod {pod_uid}")
