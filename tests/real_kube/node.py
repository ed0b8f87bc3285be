"""The node of the real control plane: the suite's process kubelet as a node agent.

    python -m tests.real_kube.node --kubeconfig ADMIN.kubeconfig --name NODE --dir STATE

registers the Node ``NODE`` (capacity from the flags; Ready; InternalIP 127.0.0.1, where the API
server reaches its kubelet API), renews its Lease in ``kube-node-lease`` and its Ready condition
every ``HEARTBEAT_SECONDS``, and runs the pods the scheduler binds to it as the process kubelet
runs the fake cluster's (``node_kubelet.py``), serving their logs, exec and port-forward
(``node_server.py``).

``--nfs-server NAME`` makes this machine that NFS server: a volume ``nfs: {server: NAME, path:
P}`` is this machine's directory ``P`` (the PFS of the tests: a PersistentVolume that the
admission policy allows, where a hostPath is refused).

On SIGTERM (or SIGINT) it reports the node NotReady (as a kubelet whose node shuts down does),
stops every pod, removes their network namespaces, cgroups and files, and exits 0. The Node
object stays, as a real kubelet leaves it. Prints ``ready <port>`` on stdout once the node is
registered and every watch has listed."""

from __future__ import annotations

import argparse
import logging
import os
import platform
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

import urllib3
from kubernetes.client.exceptions import ApiException

from tests.k8s_api_server import resources
from tests.k8s_api_server.config import Settings

from .node_api import Mirror, Rest, collection_path, object_path
from .node_kubelet import NodeApi, NodeKubelet, now_micro
from .node_server import KubeletServer

log = logging.getLogger("node-agent")

HEARTBEAT_SECONDS = 10.0
LEASE_SECONDS = 40
# The pods' processes looked at this often, as a kubelet's PLEG relists its containers
# (generic PLEG: every second), for an end no event told the agent of; and every pod synced
# this often, as a kubelet's periodic sync (--sync-frequency, 1 min) does, here sooner.
RELIST_SECONDS = 1.0
FULL_PASS_SECONDS = 10.0
# In between, the pods with news at most this often (a burst of changes, one pass), and
# those that wait on time (a deletion's grace, a restart's back-off) as often.
PASS_SECONDS = 0.05
KUBELET_VERSION = "v1.35.4"
HOST_IP = "127.0.0.1"
LEASES = resources.ResourceType("leases", "lease", "Lease", "coordination.k8s.io", "v1")


class HereExports(dict):
    """The exports of NFS servers that are this machine: ``server:/path`` is ``/path``."""

    def __init__(self, servers: list[str]):
        super().__init__()
        self.servers = set(servers)

    def get(self, export: str, default=None):
        server, _, path = export.partition(":")
        return path if server in self.servers and os.path.isabs(path) else default


class NodeAgent:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.name = args.name
        self.rest = Rest(args.kubeconfig)
        self.mirror = Mirror(self.rest, self.name)
        settings = Settings(node_count=1, pod_start_seconds=0.0,
                            crash_backoff_seconds=args.crash_backoff_seconds,
                            nfs_exports=HereExports(args.nfs_server))
        self.api = NodeApi(self.rest, self.mirror, self.name, settings)
        self.stopping = threading.Event()
        self._since: dict[tuple[str, str], str] = {}  # (condition, status) -> first reported
        self.kubelet: NodeKubelet | None = None
        self.server: KubeletServer | None = None

    # --- the Node and its Lease -----------------------------------------------------------

    def _conditions(self, ready: bool) -> list[dict]:
        """The node's conditions, heartbeat now; a condition's transition time is when it took
        its status (the Ready condition's changes when the agent stops)."""
        now = now_micro()[:19] + "Z"
        conditions = [(kind, "False", f"KubeletHas{reason}", f"kubelet has {message}")
                      for kind, reason, message in (
                          ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
                          ("DiskPressure", "NoDiskPressure", "no disk pressure"),
                          ("PIDPressure", "SufficientPID", "sufficient PID available"))]
        conditions.append(("Ready", "True", "KubeletReady", "kubelet is posting ready status")
                          if ready else
                          ("Ready", "False", "KubeletNotReady", "node is shutting down"))
        found = []
        for kind, status, reason, message in conditions:
            since = self._since.setdefault((kind, status), now)
            found.append({"type": kind, "status": status, "reason": reason, "message": message,
                          "lastHeartbeatTime": now, "lastTransitionTime": since})
        return found

    def _status(self, ready: bool) -> dict:
        args = self.args
        capacity = {"cpu": args.cpu, "memory": args.memory, "pods": str(args.pods),
                    "ephemeral-storage": args.ephemeral_storage}
        return {
            "capacity": capacity, "allocatable": capacity,
            "conditions": self._conditions(ready),
            "addresses": [{"type": "InternalIP", "address": HOST_IP},
                          {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.server.port}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "",
                         "kernelVersion": platform.release(), "osImage": "paddlecloud node agent",
                         "containerRuntimeVersion": "process://bwrap",
                         "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"}}

    def register(self) -> None:
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64"}
        try:
            self.rest.call("POST", collection_path(resources.NODES), body={
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": labels}, "spec": {},
                # Ready from the start: no not-ready taint for the controller to add and remove
                "status": self._status(ready=True)})
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.rest.call("PATCH", object_path(resources.NODES, None, self.name),
                           body={"metadata": {"labels": labels}},
                           content_type="application/merge-patch+json")
        self.report(ready=True)

    def report(self, *, ready: bool) -> None:
        """The node's status (a merge patch: conditions, addresses, capacity, endpoint)."""
        self.rest.call("PATCH", object_path(resources.NODES, None, self.name) + "/status",
                       body={"status": self._status(ready)},
                       content_type="application/merge-patch+json")

    def renew_lease(self) -> None:
        path = object_path(LEASES, "kube-node-lease", self.name)
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": now_micro()}
        try:
            self.rest.call("PATCH", path, body={"spec": spec},
                           content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status != 404:
                raise
            node = self.rest.call("GET", object_path(resources.NODES, None, self.name))
            self.rest.call("POST", collection_path(LEASES, "kube-node-lease"), body={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                  "name": self.name,
                                                  "uid": node["metadata"]["uid"]}]},
                "spec": spec})

    def _heartbeat(self) -> None:
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            try:
                self.report(ready=True)
                self.renew_lease()
            except Exception as exc:  # the API server restarting: next beat
                log.warning("heartbeat: %r", exc)

    # --- running -------------------------------------------------------------------------

    def run(self) -> None:
        directory = Path(self.args.dir)
        directory.mkdir(parents=True, exist_ok=True)
        self.mirror.start()
        if not self.mirror.synced.wait(60):
            raise RuntimeError("the API server's objects could not be listed in 60 s")
        self.kubelet = NodeKubelet(self.api, self.name, HOST_IP)
        try:
            self.server = KubeletServer(self.api.store, self.kubelet.logs, directory,
                                        self.name, self.kubelet).start()
            self.register()
            self.renew_lease()
            beat = threading.Thread(target=self._heartbeat, name="node-heartbeat", daemon=True)
            beat.start()
            print(f"ready {self.server.port}", flush=True)
            self._loop()
            beat.join(timeout=HEARTBEAT_SECONDS)
        finally:
            self.shutdown()

    def _loop(self) -> None:
        """Passes until stopped: over the pods that have news (their object changed, a
        process of theirs ended: ``Mirror.changed``) and those that wait on time
        (``NodeKubelet.busy``) as soon as there are any, at most every ``PASS_SECONDS``;
        with those whose processes a relist finds ended each ``RELIST_SECONDS`` (a kubelet's
        PLEG), and over every pod each ``FULL_PASS_SECONDS`` (its periodic sync). So a pass
        costs what changed, not every pod the node runs."""
        store, mirror, kubelet = self.api.store, self.api.mirror, self.kubelet
        relist = full = 0.0
        while not self.stopping.is_set():
            started = time.monotonic()
            with store.lock:
                if started >= full:
                    targets = None
                    mirror.take_changed()  # all of them are looked at
                    relist, full = started + RELIST_SECONDS, started + FULL_PASS_SECONDS
                else:
                    targets = {**kubelet.busy, **mirror.take_changed()}
                    if started >= relist:
                        targets.update(kubelet.relist())
                        relist = started + RELIST_SECONDS
                try:
                    kubelet.sync(targets)
                except Exception:
                    log.exception("kubelet pass")
            kubelet.flush(targets)
            if kubelet.busy:  # looked at again shortly, whatever happens
                self.stopping.wait(max(0.0, started + PASS_SECONDS - time.monotonic()))
            else:
                mirror.woken.wait(max(0.0, min(relist, full) - time.monotonic()))
                # (a change: its pass a moment later, as one pass takes a burst of them)
                self.stopping.wait(max(0.0, started + PASS_SECONDS - time.monotonic()))

    def shutdown(self) -> None:
        self.stopping.set()
        try:
            self.report(ready=False)
        except Exception as exc:
            log.warning("NotReady not reported: %r", exc)
        if self.server is not None:
            self.server.close()
        if self.kubelet is not None:
            self.kubelet.close()  # its last events are posted before the watches go
        self.mirror.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.real_kube.node", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True, help="an admin's kubeconfig")
    parser.add_argument("--name", required=True, help="the Node's name")
    parser.add_argument("--dir", required=True, help="the agent's state (its certificate)")
    parser.add_argument("--cpu", default="64")
    parser.add_argument("--memory", default="64Gi")
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--ephemeral-storage", default="100Gi")
    parser.add_argument("--nfs-server", action="append", default=[], metavar="NAME",
                        help="an NFS server whose exports are this machine's directories")
    parser.add_argument("--crash-backoff-seconds", type=float, default=1.0,
                        help="a failed container's restart delay (a kubelet's first is 10 s)")
    args = parser.parse_args(argv)
    # A kubeconfig for a test cluster skips verifying its self-signed server: once is enough.
    warnings.filterwarnings("once", category=urllib3.exceptions.InsecureRequestWarning)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    agent = NodeAgent(args)

    def stop(signum, frame):
        agent.stopping.set()
        agent.api.mirror.woken.set()  # the loop's wait ends

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.run()
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
