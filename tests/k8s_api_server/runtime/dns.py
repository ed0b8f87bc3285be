"""Cluster DNS for the process kubelet's pods: a small UDP server on the pod network's bridge
that answers, from the API server's objects, the names Kubernetes' DNS specification gives:

- ``<service>.<ns>.svc.cluster.local``: a headless Service's ready pod IPs (every pod with an
  IP when it has ``publishNotReadyAddresses``), and the ready addresses of the EndpointSlices
  written for it (``kubernetes.io/service-name: <service>``, as for a Service without a
  selector, whose endpoints are whatever its owner says: ``runtime/forward.py``); a ClusterIP
  Service's cluster IP (which nothing routes here: there is no kube-proxy);
- ``<hostname>.<subdomain>.<ns>.svc.cluster.local``: a pod whose ``subdomain`` names a headless
  Service of its namespace that selects it, once it has an IP (as an EndpointSlice lists it),
  and ``<hostname>.<service>.<ns>.svc.cluster.local`` for an endpoint written with a
  ``hostname``.

Pods' resolv.conf searches ``<ns>.svc.cluster.local svc.cluster.local cluster.local`` with
``ndots:5``, as the kubelet writes it, so ``<hostname>.<subdomain>.<ns>.svc`` resolves too. Names
outside ``cluster.local`` are NXDOMAIN: nothing is forwarded off the machine. A-records only;
an AAAA question for a known name is answered empty."""

from __future__ import annotations

import socket
import struct
import threading

from .. import resources
from ..selectors import labels_match, selector_from_spec
from .network import enter_netns

ZONE = "cluster.local"
TTL = 5
_A = 1
_NXDOMAIN, _FORMERR = 3, 1


def _endpoint_pods(pods: list[dict], service: dict) -> list[dict]:
    """Those of ``pods`` (the Service's namespace's) that its EndpointSlice lists: selected,
    with an IP, not finished; ready ones unless the Service publishes not-ready addresses."""
    selector = service["spec"].get("selector")
    if not selector:
        return []
    publish_all = service["spec"].get("publishNotReadyAddresses", False)
    found = []
    for pod in pods:
        status = pod.get("status") or {}
        if not status.get("podIP") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        if not labels_match(selector_from_spec({"matchLabels": selector}),
                            pod["metadata"].get("labels") or {}):
            continue
        ready = any(c["type"] == "Ready" and c["status"] == "True"
                    for c in status.get("conditions") or [])
        if publish_all or (ready and not pod["metadata"].get("deletionTimestamp")):
            found.append(pod)
    return found


SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _written_endpoints(slices: list[dict], service: dict) -> list[dict]:
    """The ready IPv4 endpoints of those of ``slices`` (the Service's namespace's) written
    for a Service (CoreDNS reads every slice labelled with its name; an endpoint without a
    ``ready`` condition is ready)."""
    name = service["metadata"]["name"]
    endpoints = []
    for found in slices:
        if (found["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) != name or \
                found.get("addressType") != "IPv4":
            continue
        endpoints += [endpoint for endpoint in found.get("endpoints") or []
                      if (endpoint.get("conditions") or {}).get("ready") is not False]
    return endpoints


def _by_namespace(objects: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for obj in objects:
        grouped.setdefault(obj["metadata"].get("namespace", ""), []).append(obj)
    return grouped


# What the cluster DNS reads: its records change only when one of these is written.
RECORD_SOURCES = (resources.SERVICES.key, resources.PODS.key, resources.ENDPOINTSLICES.key)


def cluster_records(store) -> dict[str, list[str]]:
    """Every name the cluster DNS answers (lower case, no trailing dot) and its addresses."""
    records: dict[str, list[str]] = {}
    with store.lock:
        pods = _by_namespace(store.list(resources.PODS.key, read_only=True))
        slices = _by_namespace(store.list(resources.ENDPOINTSLICES.key, read_only=True))
        for service in store.list(resources.SERVICES.key, read_only=True):
            name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
            fqdn = f"{name}.{namespace}.svc.{ZONE}"
            cluster_ip = service["spec"].get("clusterIP")
            selected = _endpoint_pods(pods.get(namespace, []), service)
            if cluster_ip and cluster_ip != "None":
                records[fqdn] = [cluster_ip]
                continue
            records[fqdn] = [pod["status"]["podIP"] for pod in selected]
            for pod in selected:
                spec = pod["spec"]
                if spec.get("subdomain") == name:
                    host = spec.get("hostname") or pod["metadata"]["name"]
                    records[f"{host}.{fqdn}"] = [pod["status"]["podIP"]]
            for endpoint in _written_endpoints(slices.get(namespace, []), service):
                records[fqdn] += [a for a in endpoint["addresses"] if a not in records[fqdn]]
                if endpoint.get("hostname"):
                    records[f"{endpoint['hostname'].lower()}.{fqdn}"] = \
                        list(endpoint["addresses"])
    return records


def _question(packet: bytes) -> tuple[str, int, int]:
    """(name, qtype, offset after the question) of a query's first question."""
    labels, offset = [], 12
    while True:
        length = packet[offset]
        offset += 1
        if length == 0:
            break
        if length & 0xC0:
            raise ValueError("compressed names in questions are not supported")
        labels.append(packet[offset:offset + length].decode("ascii", "replace"))
        offset += length
    qtype, _qclass = struct.unpack("!HH", packet[offset:offset + 4])
    return ".".join(labels).lower(), qtype, offset + 4


def answer(packet: bytes, records: dict[str, list[str]]) -> bytes:
    """The response to one query packet."""
    (query_id, flags) = struct.unpack("!HH", packet[:4])
    recursion = flags & 0x0100
    try:
        name, qtype, end = _question(packet)
    except (IndexError, ValueError, struct.error):
        return struct.pack("!HHHHHH", query_id, 0x8000 | recursion | _FORMERR, 0, 0, 0, 0)
    question = packet[12:end]
    addresses = records.get(name)
    in_zone = name == ZONE or name.endswith("." + ZONE)
    if not in_zone or addresses is None or (qtype == _A and not addresses):
        rcode, addresses = _NXDOMAIN, None
    else:
        rcode = 0
    answers = b""
    count = 0
    if addresses and qtype == _A:
        for address in addresses:
            answers += struct.pack("!HHHIH", 0xC00C, _A, 1, TTL, 4) + socket.inet_aton(address)
            count += 1
    header = struct.pack("!HHHHHH", query_id, 0x8400 | recursion | 0x0080 | rcode, 1, count,
                         0, 0)
    return header + question + answers


class DnsServer:
    """Answers on ``address``:53 inside the network namespace at ``netns_path``, from
    ``cluster_records(store)`` at the moment of each question."""

    def __init__(self, store, netns_path: str, address: str):
        self.store = store
        self.address = address
        self._netns_path = netns_path
        self._sock: socket.socket | None = None
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.errors: list[str] = []
        self._made: tuple[tuple[int, ...], dict[str, list[str]]] | None = None
        self._thread = threading.Thread(target=self._serve, name="fake-k8s-dns", daemon=True)

    def start(self) -> DnsServer:
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)

    def _records(self) -> dict[str, list[str]]:
        """``cluster_records``, made again only when what it reads was written since."""
        with self.store.lock:
            version = self.store.writes(*RECORD_SOURCES)
            if self._made is None or self._made[0] != version:
                self._made = (version, cluster_records(self.store))
            return self._made[1]

    def _serve(self) -> None:
        try:
            enter_netns(self._netns_path)  # this thread only: the rest of the process stays put
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((self.address, 53))
            sock.settimeout(0.2)
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        with sock:
            while not self._stopping.is_set():
                try:
                    packet, peer = sock.recvfrom(512)
                except TimeoutError:
                    continue
                try:
                    sock.sendto(answer(packet, self._records()), peer)
                except Exception as exc:  # a bug here: report it, keep answering
                    self.errors.append(f"dns: {exc!r}")
