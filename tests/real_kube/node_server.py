"""The node's kubelet API, the part the API server calls: ``kubectl logs`` (and the client's
``read_namespaced_pod_log``) reach ``GET /containerLogs/<ns>/<pod>/<container>`` here, with
``follow``, ``previous``, ``tailLines``, ``sinceSeconds``/``sinceTime``, ``limitBytes`` and
``timestamps`` answered as the fake API server answers them (``logs.answer``: one copy of those
rules), from the logs the process kubelet keeps; ``/exec/…`` and ``/portForward/…`` over
WebSocket (``node_streams.py``). Also ``/healthz``.

HTTPS on 127.0.0.1 with a self-signed certificate made at start (the API server does not verify
a kubelet's certificate unless given ``--kubelet-certificate-authority``)."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.k8s_api_server import logs, resources
from tests.k8s_api_server.errors import ApiError

from .node_streams import StreamError, exec_serve, ports_serve

log = logging.getLogger(__name__)


def self_signed(directory: Path, node: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and ``node``, and its key, written in ``directory``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node}@kubelet")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName(node), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "kubelet.crt", directory / "kubelet.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "paddlecloud-node-agent"

    def log_message(self, format, *args):
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self):
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if parts == ["healthz"]:
            return self._send(200, b"ok")
        if parts[0] in ("exec", "portForward"):
            try:
                return self._stream(parts, parse_qs(url.query))
            except StreamError as exc:
                return self._send(exc.status, str(exc).encode())
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self._send(404, b"404 page not found")
        try:
            self._logs(*parts[1:], query)
        except ApiError as exc:
            self._send(exc.code, exc.message.encode())

    def _stream(self, parts: list[str], query: dict) -> None:
        """``/exec/<ns>/<pod>/[<uid>/]<container>`` and ``/portForward/<ns>/<pod>[/<uid>]``:
        node_streams.py."""
        kubelet = self.server.kubelet
        if kubelet is None or len(parts) < 3:
            raise StreamError(404, "404 page not found")
        namespace, name = parts[1], parts[2]
        with self.server.store.lock:
            pod = self.server.store.get(resources.PODS.key, namespace, name)
            uid = pod["metadata"]["uid"] if pod else None
            sandbox = kubelet.sandboxes.get(uid) if uid else None
            if sandbox is None:
                raise StreamError(404, f'pod "{name}" in namespace "{namespace}" is not running '
                                       "on this node")
            if parts[0] == "portForward":
                netns = kubelet.network.netns_path(uid)
            else:
                container = parts[-1] if len(parts) in (4, 5) else ""
                run = sandbox.runs.get(container)
                pid = run.container.pid if run is not None and run.container.poll() is None \
                    else None
                if pid is None:
                    raise StreamError(404, f'container "{container}" of pod "{name}" is not '
                                           "running")
        if parts[0] == "portForward":
            ports_serve(self, netns, query)
        else:
            exec_serve(self, pid, query)

    def _logs(self, namespace: str, name: str, container: str, query: dict) -> None:
        server = self.server
        pod = server.store.get(resources.PODS.key, namespace, name)
        if pod is None:
            raise ApiError(404, "NotFound", f'pod "{name}" in namespace "{namespace}" is not '
                                            f"on this node")
        if query.get("sinceTime") and not query.get("sinceSeconds"):
            since = datetime.datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00"))
            query["sinceSeconds"] = str(max(0.0, (datetime.datetime.now(datetime.UTC) - since)
                                            .total_seconds()))
        first, more = logs.answer(server.store, server.logs, pod, {**query,
                                                                   "container": container},
                                  server.stopping.is_set)
        if more is None:
            return self._send(200, first)
        # Followed: no length, the connection ends with the log (HTTP/1.0 style framing).
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(first)
            self.wfile.flush()
            for chunk in more:
                self.wfile.write(chunk)
                self.wfile.flush()
        except (logs.FollowDropped, OSError):
            pass

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class KubeletServer(ThreadingHTTPServer):
    """Serves on 127.0.0.1 and a free port (``port``) until ``close``."""

    daemon_threads = True

    def __init__(self, store, log_store, directory: Path, node: str, kubelet=None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.store = store
        self.kubelet = kubelet  # its pods' sandboxes: exec and port-forward
        self.logs = log_store
        self.stopping = threading.Event()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self_signed(directory, node))
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.port = self.server_address[1]
        self._thread = threading.Thread(target=self.serve_forever, name="node-kubelet-api",
                                        daemon=True)

    def start(self) -> KubeletServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.stopping.set()
        with self.store.lock:
            self.store.changed.notify_all()  # followers look up and end
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)
