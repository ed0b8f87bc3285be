"""A service of this machine as the process kubelet's pods reach it: as in a cluster, where
something outside it (the portal, a database) gets a Service without a selector whose
EndpointSlice names its address, the node forwards a port of its address on the pod network
to 127.0.0.1:<port> of this machine, and the cluster DNS answers the Service's name with the
slice's addresses. Plus the EndpointSlice API itself."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s_api_server import fixtures
from tests.k8s_api_server.runtime.dns import cluster_records
from tests.k8s_api_server.runtime.network import NETNS_DIR

from .test_process_kubelet import finished, log, pod, running

k8s_cluster = fixtures.k8s_cluster


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers a GET with its path and Host header, a POST with its body reversed."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self._answer(f"{self.path} {self.headers['Host']}".encode())

    def do_POST(self):
        self._answer(self.rfile.read(int(self.headers["Content-Length"]))[::-1])

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def host_server():
    """An HTTP server on 127.0.0.1 of this machine, on a free port (its ``.port``)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    server.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def kube(k8s_cluster):
    with k8s_cluster.api_client() as api:
        yield client.CoreV1Api(api), client.DiscoveryV1Api(api)


@pytest.fixture
def ns(k8s_cluster, kube):
    kube[0].create_namespace({"metadata": {"name": "work"}})
    k8s_cluster.wait_for(lambda: k8s_cluster.store.get("serviceaccounts", "work", "default"),
                         message="the namespace's default ServiceAccount")
    return "work"


def selectorless(core, discovery, ns: str, name: str, address: str, port: int, **endpoint):
    """A headless Service without a selector, and the EndpointSlice its owner writes."""
    core.create_namespaced_service(ns, {"metadata": {"name": name}, "spec": {
        "clusterIP": "None", "ports": [{"name": "http", "port": port}]}})
    discovery.create_namespaced_endpoint_slice(ns, {
        "metadata": {"name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], **endpoint}],
        "ports": [{"name": "http", "port": port}]})


FORWARD_THREADS = ("fake-k8s-forward", "fake-k8s-netns")


def forward_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(FORWARD_THREADS)]


def test_a_pod_reaches_a_host_server_through_a_selectorless_service(k8s_cluster, kube, ns,
                                                                   host_server):
    core, discovery = kube
    kubelet = k8s_cluster.controller.kubelet
    address, port = kubelet.forward_host_port(host_server.port, port=80)
    assert address == kubelet.network.gateway  # the node's address on the pod network
    selectorless(core, discovery, ns, "portal", address, port, hostname="portal-0")
    script = (
        "import socket, urllib.request as u\n"
        "print(socket.gethostbyname_ex('portal.work.svc.cluster.local')[2])\n"
        "print(socket.gethostbyname('portal-0.portal.work.svc'))\n"
        "print(u.urlopen('http://portal.work.svc/hello?x=1').read().decode())\n"
        "print(u.urlopen('http://portal/again').read().decode())\n"  # the search list
        "body = bytes(range(256)) * 4096\n"  # 1 MiB each way
        "answer = u.urlopen(u.Request('http://portal.work.svc/', data=body)).read()\n"
        "print(answer == body[::-1])\n")
    core.create_namespaced_pod(ns, pod("caller", f"exec python -c \"{script}\""))
    found = finished(k8s_cluster, kube[0], ns, "caller")
    assert found.status.phase == "Succeeded", log(core, ns, "caller")
    assert log(core, ns, "caller").splitlines() == [
        f"['{address}']", address, "/hello?x=1 portal.work.svc", "/again portal", "True"]
    assert kubelet.forwards[80].connections == 3


def test_the_dns_answers_a_slices_ready_endpoints_only(k8s_cluster, kube, ns):
    core, discovery = kube
    selectorless(core, discovery, ns, "db", "10.244.0.1", 5432)
    records = cluster_records(k8s_cluster.store)
    assert records["db.work.svc.cluster.local"] == ["10.244.0.1"]
    discovery.patch_namespaced_endpoint_slice("db-1", ns, {"endpoints": [
        {"addresses": ["10.244.0.1"], "conditions": {"ready": False}},
        {"addresses": ["10.244.0.7"], "conditions": {"ready": True}}]})
    assert cluster_records(k8s_cluster.store)["db.work.svc.cluster.local"] == ["10.244.0.7"]
    discovery.delete_namespaced_endpoint_slice("db-1", ns)
    # No endpoint: the name exists, with no address (NXDOMAIN for an A question).
    assert cluster_records(k8s_cluster.store)["db.work.svc.cluster.local"] == []


def test_nothing_listening_on_the_host_port_is_a_refused_connection(k8s_cluster, kube, ns):
    core, discovery = kube
    with socket.socket() as probe:  # a free port, then nothing listens on it
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    address, port = k8s_cluster.controller.kubelet.forward_host_port(free, port=8080)
    selectorless(core, discovery, ns, "gone", address, port)
    script = ("import urllib.request as u\n"
              "try:\n"
              "    u.urlopen('http://gone.work.svc:8080/', timeout=5)\n"
              "except OSError as e:\n"
              "    print(type(getattr(e, 'reason', e)).__name__)\n")
    core.create_namespaced_pod(ns, pod("caller", f"exec python -c \"{script}\""))
    assert finished(k8s_cluster, core, ns, "caller").status.phase == "Succeeded"
    assert log(core, ns, "caller").strip() in ("ConnectionRefusedError", "ConnectionResetError")


def test_expose_host_port_makes_the_service_and_the_forward(k8s_cluster, kube, ns,
                                                            host_server):
    core, _ = kube
    url = k8s_cluster.expose_host_port(host_server.port, namespace="paddlecloud",
                                       service="paddlecloud")
    assert url == "http://paddlecloud.paddlecloud.svc"
    service = core.read_namespaced_service("paddlecloud", "paddlecloud")
    assert service.spec.selector is None and service.spec.cluster_ip == "None"
    script = f"import urllib.request as u; print(u.urlopen('{url}/api').read().decode())"
    core.create_namespaced_pod(ns, pod("caller", f"exec python -c \"{script}\""))
    assert finished(k8s_cluster, core, ns, "caller").status.phase == "Succeeded"
    assert log(core, ns, "caller").strip() == "/api paddlecloud.paddlecloud.svc"
    with pytest.raises(ValueError, match="forwarded already"):
        k8s_cluster.controller.kubelet.forward_host_port(host_server.port, port=80)


def test_a_stopped_cluster_cuts_open_connections_and_leaves_no_forward(host_server):
    from tests.k8s_api_server.server import FakeKubernetes

    before = forward_threads()
    cluster = FakeKubernetes(kubelet="process").start()
    try:
        url = cluster.expose_host_port(host_server.port, namespace="paddlecloud",
                                       service="portal", port=8000)
        with cluster.api_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": "w"}})
            cluster.wait_for(lambda: cluster.store.get("serviceaccounts", "w", "default"))
            # A connection left open: a request sent in part.
            holder = ("import socket, time\n"
                      "s = socket.create_connection(('portal.paddlecloud.svc', 8000))\n"
                      "s.sendall(b'GET / HTTP/1.1\\r\\n')\n"
                      "print('open', flush=True)\n"
                      "time.sleep(600)\n")
            core.create_namespaced_pod("w", pod("holder", f"exec python -c \"{holder}\""))
            running(cluster, core, "w", "holder", "open")
        assert url == "http://portal.paddlecloud.svc:8000"
        kubelet = cluster.controller.kubelet
        # The client's connect returns once the kernel queued it: the forward pairs it later.
        cluster.wait_for(lambda: kubelet.forwards[8000].connections == 1)
        assert len(forward_threads()) == len(before) + 3  # accepting, a pump each way
        started = time.monotonic()
        kubelet.stop_forward(8000)  # the connection still open
        assert time.monotonic() - started < 2 and forward_threads() == before
        kubelet.forward_host_port(host_server.port, port=8000)  # again, left to the cluster
        tag = kubelet.network.tag
    finally:
        cluster.stop()
    assert forward_threads() == before
    assert not [n for n in os.listdir(NETNS_DIR) if n.startswith(tag)]


def test_the_nodes_address_keeps_its_mac_as_pods_come_and_go():
    """Pods cache the node's MAC: a bridge that took its ports' lowest would change it when
    that pod goes, and the others' DNS questions would go unanswered for 30 s or more. And a
    pod's IP is not given again at once (a real IPAM avoids that too)."""
    from tests.k8s_api_server.runtime.network import BRIDGE_MAC, ClusterNetwork

    network = ClusterNetwork().open()
    try:
        def mac() -> str:
            shown = subprocess.run(["ip", "-n", network.node_ns, "-o", "link", "show", "br0"],
                                   capture_output=True, text=True, check=True).stdout
            return shown.split("link/ether ")[1].split()[0]

        ips = [network.add_pod(f"uid-{n}") for n in range(4)]
        assert mac() == BRIDGE_MAC
        for n in range(3):
            network.remove_pod(f"uid-{n}")
            assert mac() == BRIDGE_MAC
        assert network.add_pod("uid-4") not in ips
    finally:
        network.close()
    assert network.namespaces() == []


# --- the EndpointSlice API ---------------------------------------------------------------------

def test_endpoint_slices_are_served_validated_and_defaulted(k8s_api):
    with k8s_api.api_client() as api:
        core, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
        core.create_namespace({"metadata": {"name": "eps"}})
        made = discovery.create_namespaced_endpoint_slice("eps", {
            "metadata": {"name": "a", "labels": {"kubernetes.io/service-name": "a"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["192.0.2.1"]}],
            "ports": [{"port": 80}]})
        assert (made.ports[0].protocol, made.ports[0].name) == ("TCP", "")
        listed = discovery.list_namespaced_endpoint_slice(
            "eps", label_selector="kubernetes.io/service-name=a")
        assert [s.metadata.name for s in listed.items] == ["a"]
        with pytest.raises(ApiException) as bad:
            discovery.create_namespaced_endpoint_slice("eps", {
                "metadata": {"name": "b"}, "addressType": "IPv4",
                "endpoints": [{"addresses": ["not-an-ip"]}]})
        assert bad.value.status == 422
        assert json.loads(bad.value.body)["message"].endswith(
            ' "b" is invalid: endpoints[0].addresses[0]: Invalid value: "not-an-ip": must be a '
            'valid IPv4 address')
        with pytest.raises(ApiException) as changed:
            discovery.patch_namespaced_endpoint_slice("a", "eps", {"addressType": "IPv6"})
        assert changed.value.status == 422 and "field is immutable" in changed.value.body
