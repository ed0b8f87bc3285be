"""A host service on the node: TCP on an address of the pod network, inside the node's network
namespace, forwarded to a port of this machine's loopback (the portal, say, which listens on
127.0.0.1). Pods reach it at that address, as in a cluster they reach something outside it
through a Service without a selector whose EndpointSlice names its address; the host's own
network is never touched (the listening socket is the node namespace's, the connections it
opens are on 127.0.0.1 of the host).

Each connection is two threads, one a direction; ``stop`` cuts every connection and joins every
thread it started."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from .network import enter_netns


def in_netns(netns_path: str, make):
    """``make()`` run in a thread of its own inside the network namespace at
    ``netns_path`` (sockets it makes belong to that namespace, wherever they are used later);
    its result. The calling thread stays where it is."""
    result: list = []
    failure: list[BaseException] = []

    def run():
        try:
            enter_netns(netns_path)
            result.append(make())
        except BaseException as exc:  # raised in the caller
            failure.append(exc)

    thread = threading.Thread(target=run, name="fake-k8s-netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def _listener(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(128)
        sock.settimeout(0.2)
    except BaseException:
        sock.close()
        raise
    return sock


def _reset(sock: socket.socket) -> None:
    """Close with a RST, as a port nobody listens on answers (connection refused)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class HostForward:
    """Listens on ``address``:``port`` in the network namespace at ``netns_path``; every
    connection is forwarded to ``target_port`` on 127.0.0.1 of this machine (refused at once,
    with a reset, when nothing listens there)."""

    def __init__(self, netns_path: str, address: str, port: int, target_port: int,
                 target_host: str = "127.0.0.1"):
        self.address, self.port = address, port
        self.target = (target_host, target_port)
        self._netns_path = netns_path
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()  # of open connections, both ends
        self._threads: set[threading.Thread] = set()
        self._accepting = threading.Thread(target=self._accept, daemon=True,
                                           name=f"fake-k8s-forward-{address}:{port}")
        self.connections = 0  # paired so far, both pumps started (for tests of the harness)
        self.errors: list[str] = []

    def start(self) -> HostForward:
        self._listener = in_netns(self._netns_path, lambda: _listener(self.address, self.port))
        self._accepting.start()
        return self

    def stop(self) -> None:
        """Stop listening, cut every open connection, and wait for every thread."""
        self._stopping.set()
        if self._accepting.is_alive():
            self._accepting.join(timeout=5)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if not self._stopping.is_set():
                    self.errors.append(f"forward {self.address}:{self.port}: {exc!r}")
                return
            client.settimeout(None)
            try:
                # This thread is in the host's namespace: the connection goes to its loopback.
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            self._pair(client, upstream)

    def _pair(self, client: socket.socket, upstream: socket.socket) -> None:
        ended = []  # directions done; the second one closes both sockets
        with self._lock:
            if self._stopping.is_set():
                client.close()
                upstream.close()
                return
            self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._pump, args=(source, sink, ended),
                                          daemon=True, name="fake-k8s-forward-pump")
                self._threads.add(thread)
                thread.start()
            self.connections += 1

    def _pump(self, source: socket.socket, sink: socket.socket, ended: list) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:  # a reset on either side: the other gets none of the rest
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_RDWR)
        else:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)  # the other side sees the end, may still answer
        with self._lock:
            ended.append(source)
            if len(ended) == 2:
                for sock in (source, sink):
                    self._sockets.discard(sock)
                    sock.close()
            self._threads.discard(threading.current_thread())
