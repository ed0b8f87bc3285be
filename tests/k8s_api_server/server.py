"""The fake API server as one object: HTTP on 127.0.0.1, the REST semantics, the controller
thread, a kubeconfig file, and the handles tests use (fault injection, logs, events)."""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

from . import addons, resources
from .api import Api
from .config import Settings
from .controller import Controller
from .faults import Faults
from .handler import Handler
from .kubeconfig import write_kubeconfig
from .kubelet import Kubelet
from .logs import LogStore


def _process_kubelet():
    from .runtime.kubelet import ProcessKubelet  # Linux namespaces: only when asked for

    return ProcessKubelet


KUBELETS = {"scripted": lambda: Kubelet, "process": _process_kubelet}


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, app):
        self.app = app
        super().__init__(address, Handler)


class FakeKubernetes:
    """``start()`` it, point a client at ``kubeconfig_path`` (or ``url``), ``stop()`` it;
    ``portal_kubeconfig_path`` is an account held to ``settings.portal_rules``.

    ``kubelet`` is ``"scripted"`` (pods pretend to run, as tests script them) or ``"process"``
    (pods really run on this machine: ``runtime/``; needs root, ``ip`` and ``bwrap``)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 settings: Settings | None = None, kubeconfig_path: Path | str | None = None,
                 kubelet: str = "scripted"):
        if kubelet not in KUBELETS:
            raise ValueError(f"kubelet must be one of {', '.join(KUBELETS)}")
        self.settings = settings or Settings()
        self.api = Api(self.settings)
        self.store = self.api.store
        self.logs = LogStore(self.store)
        self.faults = Faults()
        self.controller = Controller(self.api, self.logs, KUBELETS[kubelet]())
        self.request_log: list[tuple[str, str]] = []  # (method, path with query), in order
        self.errors: list[str] = []  # tracebacks of requests the fake failed on (its bugs)
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._httpd = _HttpServer((host, port), self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name="fake-k8s-http", daemon=True)
        self._tmpdir = None
        if kubeconfig_path is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="fake-k8s-")
            kubeconfig_path = Path(self._tmpdir.name) / "kubeconfig"
        self.kubeconfig_path = Path(kubeconfig_path)
        # The portal's: its requests are held to ``settings.portal_rules`` (rbac.py).
        self.portal_kubeconfig_path = self.kubeconfig_path.with_name(
            f"{self.kubeconfig_path.name}-portal")
        self.addons: dict[str, object] = {}  # name -> its controllers (addons.py)
        for name in self.settings.addons:
            self.install(name)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKubernetes:
        write_kubeconfig(self.kubeconfig_path, self.url, self.settings.token)
        write_kubeconfig(self.portal_kubeconfig_path, self.url, self.settings.portal_token)
        self._thread.start()
        self.controller.start()
        return self

    def stop(self) -> None:
        """Stop serving; open watches and followed logs are cut, hung requests released."""
        self.stopping.set()
        self.store.notify()
        self.controller.stop()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._connections_lock:
            for conn in list(self._connections):
                _shutdown(conn)
        if self._tmpdir is not None:
            self._tmpdir.cleanup()

    # --- used by the handler -------------------------------------------------------------

    def connection_opened(self, conn: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(conn)

    def connection_closed(self, conn: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(conn)

    # --- add-ons -------------------------------------------------------------------------------

    def install(self, *names: str, controllers: bool = True):
        """Install Kueue and/or Volcano (``"kueue"``, ``"volcano"``) as an admin would: their
        CRDs served, webhooks and controllers running (only the CRDs with
        ``controllers=False``). Returns the last one's controller object."""
        installed = None
        for name in names:
            installed = addons.install(self, name, controllers=controllers)
        return installed

    # --- host services (process kubelet) ------------------------------------------------------

    def expose_host_port(self, host_port: int, *, namespace: str, service: str,
                         port: int = 80) -> str:
        """``127.0.0.1:host_port`` of this machine (the portal, say) as pods reach a service
        outside the cluster: the node forwards ``port`` of its address on the pod network to
        it (``ProcessKubelet.forward_host_port``), and a headless Service ``service`` without a
        selector, in ``namespace`` (made if missing), has an EndpointSlice naming that
        address and port, which the cluster DNS answers. The Service's base URL,
        ``http://<service>.<namespace>.svc[:port]``. The forward goes with the cluster."""
        from kubernetes import client

        kubelet = self.controller.kubelet
        if not hasattr(kubelet, "forward_host_port"):
            raise RuntimeError("only pods of the process kubelet reach this machine's ports")
        address, port = kubelet.forward_host_port(host_port, port=port)
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            if self.store.get(resources.NAMESPACES.key, "", namespace) is None:
                core.create_namespace({"metadata": {"name": namespace}})
            core.create_namespaced_service(namespace, {
                "metadata": {"name": service},
                "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": port}]}})
            client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(namespace, {
                "metadata": {"name": f"{service}-host",
                             "labels": {"kubernetes.io/service-name": service}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
                "ports": [{"name": "http", "port": port, "protocol": "TCP"}]})
        return f"http://{service}.{namespace}.svc" + ("" if port == 80 else f":{port}")

    # --- fault injection -------------------------------------------------------------------

    def fail_next(self, status: int = 503, *, count: int = 1, method: str | None = None,
                  path: str = "", retry_after: int | None = None):
        """The next ``count`` requests whose path matches the regex ``path`` (and
        ``method``, if given) answer ``status`` (500, 503, 504, 429…) with a Status body."""
        return self.faults.add(count=count, method=method, path=path, status=status,
                               retry_after=retry_after)

    def hang_next(self, seconds: float, *, count: int = 1, method: str | None = None,
                  path: str = ""):
        """The next matching requests sleep ``seconds`` before being served (then served
        normally: a client that timed out may still see its write applied, as in life)."""
        return self.faults.add(count=count, method=method, path=path, hang_seconds=seconds)

    def drop_watches(self) -> None:
        """Cut every open watch (and followed log) stream without the final chunk."""
        self.store.drop_watches()

    def compact(self) -> None:
        """Forget the change history: watches and exact lists from older versions get 410."""
        self.store.compact()

    # --- reading ------------------------------------------------------------------------------

    def events(self, namespace: str, *, involved_name: str | None = None,
               reason: str | None = None) -> list[dict]:
        """Events of a namespace, optionally about one object and/or with one reason."""
        return [e for e in self.store.list(resources.EVENTS.key, namespace)
                if involved_name in (None, e["involvedObject"]["name"])
                and reason in (None, e["reason"])]

    def get(self, rt_plural: str, namespace: str, name: str) -> dict | None:
        """An object as stored (``rt_plural`` like "pods" or "jobs.batch"), or None."""
        return self.store.get(rt_plural, namespace, name)

    def api_client(self):
        """A ``kubernetes.client.ApiClient`` configured from this server's kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig_path))

    def wait_for(self, predicate, *, timeout: float = 30.0, interval: float = 0.01,
                 message: str = "condition"):
        """Poll ``predicate`` until it returns something truthy (returned), or fail. What
        comes within a tick or two on a quiet machine can take seconds on a loaded one: the
        bound is for what never comes."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {message}")
            time.sleep(interval)


def _shutdown(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
