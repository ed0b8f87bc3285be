"""A network that reaches the allowed package indexes and nothing else (issue 33, items 5 and
10): where the portal's machine installs or builds what users ask for — uv installing a
package's ``requirements.txt`` (``envs.py``), the ``RUN`` steps of a local build
(``buildah.py``). Standard library only.

On the machine's own network those would reach what listens on its loopback: PostgreSQL and
Redis (trust authentication there), the portal, any service of the host. Instead each install
or build gets a network namespace of its own (``netns.netns_start``: only ``lo``, no route
out, no DNS) whose one way out is a forwarding proxy on ``127.0.0.1:PROXY_PORT`` there, given to
the programs as ``HTTP_PROXY``/``HTTPS_PROXY``. The proxy is a thread of the portal's process,
in the machine's network, that holds a listening socket made inside the namespace (as the
job's relay does, ``relay.py``), and per connection:

- ``CONNECT host:port`` (HTTPS): tunnels, byte for byte, when ``(host, port)`` is one of the
  allowed indexes' hosts;
- ``GET http://host:port/path`` (plain HTTP, absolute form): sends the request on to that
  host, with ``Host`` set to it and ``Connection: close`` (the next request opens a new
  connection, and is checked again);
- anything else, or another host: ``403`` naming the host and saying it is not an allowed
  package index (uv and pip print it in their error).

The check is on the host and port the client names, before anything is resolved or connected:
a name the machine resolves to its loopback is reached only if the administrator allowed that
very name. At most ``MAX_CONNECTIONS`` at once, a connection idle for ``IDLE_SECONDS`` closed.
The namespace, its holder and the proxy end when the install or build does (``egress``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .netns import Netns, netns_start, netns_stop

PROXY_PORT = 3128
MAX_CONNECTIONS = 64
IDLE_SECONDS = 300
HEAD_MAX = 16 * 1024
CHUNK = 65536
# The variables that send HTTP clients (uv, pip, curl) to the proxy; NO_PROXY is never set.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
# Hop-by-hop headers of a plain HTTP request, replaced by the proxy's own.
HOP_HEADERS = (b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization",
               b"host", b"te", b"upgrade")


class EgressError(Exception):
    """The network cannot be made; the message says why."""


def egress_hosts(urls: Iterable[str]) -> frozenset[tuple[str, int]]:
    """The (host, port) pairs that ``urls`` name: what the proxy lets through."""
    hosts = set()
    for url in urls:
        try:
            parts = urlsplit(url)
            port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
        except ValueError:
            continue
        if parts.hostname and port:
            hosts.add((parts.hostname.lower(), port))
    return frozenset(hosts)


@dataclass(frozen=True)
class Egress:
    """A network of its own (``netns``, for ``Sandbox.network``), its proxy's URL there, and
    the ``host:port`` the proxy refused so far (for the caller to say why a fetch failed)."""

    netns: Netns
    proxy: str
    refused: list[str]

    @property
    def netns_path(self) -> str:
        """The network namespace, for a program that joins one by its path (buildah)."""
        return f"/proc/{self.netns.pid}/ns/net"

    def env(self) -> dict[str, str]:
        """The variables that send a program's HTTP to the proxy."""
        return dict.fromkeys(PROXY_VARIABLES, self.proxy)


# Run as ``python -I -S -c LISTEN HOLDER_PID NETNS_INODE PORT FD``, FD a socket: joins the
# holder's user and network namespaces, checks it is the holder's network, listens on
# 127.0.0.1:PORT there and sends the listening socket back on FD.
LISTEN = r"""
import ctypes, os, socket, sys
reply = socket.socket(fileno=int(sys.argv[4]))
try:
    pid, inode, port = (int(v) for v in sys.argv[1:4])
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, flag in (("user", 0x10000000), ("net", 0x40000000)):
        fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY)
        if libc.setns(fd, flag) != 0:
            raise OSError(ctypes.get_errno(), f"setns {kind}: " + os.strerror(ctypes.get_errno()))
    if os.stat("/proc/self/ns/net").st_ino != inode:
        raise OSError("not the holder's network")
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    socket.send_fds(reply, [b"ok"], [listener.fileno()])
except Exception as exc:
    reply.sendall(str(exc).encode()[:1000])
    sys.exit(1)
"""


def _listen_in(netns: Netns, port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` in ``netns`` (made by a child that joins it;
    a socket keeps the namespace it was made in)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        os.set_inheritable(theirs.fileno(), True)
        try:
            child = subprocess.Popen(  # noqa: S603 - our own script
                [sys.executable, "-I", "-S", "-c", LISTEN, str(netns.pid), str(netns.inode),
                 str(port), str(theirs.fileno())], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                pass_fds=(theirs.fileno(),), env={})
        except OSError as exc:
            raise EgressError(f"the proxy could not listen in its network: {exc}") from None
        theirs.close()
        ours.settimeout(30)
        try:
            message, fds, _, _ = socket.recv_fds(ours, 1024, 1)
        except OSError as exc:
            message, fds = str(exc).encode(), []
        child.wait(30)
    if not fds:
        raise EgressError("the proxy could not listen in its network: "
                          + (message.decode(errors="replace") or "no message"))
    return socket.socket(fileno=fds[0])


class _Proxy:
    """The proxy's threads: one accepting, one per connection (two while it relays)."""

    def __init__(self, listener: socket.socket, allowed: frozenset[tuple[str, int]]):
        self.listener = listener
        self.allowed = allowed
        self.refused: list[str] = []
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.stopped = threading.Event()
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.accepting = threading.Thread(target=self._accept, name="egress-proxy",
                                          daemon=True)
        self.accepting.start()

    def _track(self, sock: socket.socket) -> None:
        with self.lock:
            self.open.add(sock)

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stopped.is_set():
            if not self.slots.acquire(timeout=0.2):
                continue
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                self.slots.release()
                continue
            self._track(client)
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            with self.lock:
                self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            thread.start()

    def stop(self) -> None:
        """Stop accepting, close every connection, wait for the threads."""
        self.stopped.set()
        self.accepting.join(5)
        self.listener.close()
        with self.lock:
            for sock in self.open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            threads = list(self.threads)
        for thread in threads:
            thread.join(5)

    def _serve(self, client: socket.socket) -> None:
        upstream = None
        try:
            client.settimeout(IDLE_SECONDS)
            head, rest = _read_head(client)
            request = _Request.parse(head)
            if request is None:
                _refuse(client, 400, "not a proxy request (CONNECT host:port, or an absolute "
                                     "http:// URL)")
                return
            if (request.host, request.port) not in self.allowed:
                with self.lock:
                    if f"{request.host}:{request.port}" not in self.refused:
                        self.refused.append(f"{request.host}:{request.port}")
                _refuse(client, 403, f"{request.host}:{request.port} is not an allowed "
                                     f"package index of this datacenter")
                return
            try:
                upstream = socket.create_connection((request.host, request.port), timeout=30)
            except OSError as exc:
                _refuse(client, 502, f"{request.host}:{request.port} cannot be reached: {exc}")
                return
            self._track(upstream)
            upstream.settimeout(IDLE_SECONDS)
            if request.method == b"CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
            else:
                upstream.sendall(request.forwarded() + rest)
            back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
            back.start()
            _pump(client, upstream)
            back.join(IDLE_SECONDS)
        except (OSError, ValueError):
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    with self.lock:
                        self.open.discard(sock)
                    sock.close()
            self.slots.release()


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > HEAD_MAX:
            raise ValueError("request head too large")
        chunk = sock.recv(CHUNK)
        if not chunk:
            raise ValueError("closed before its request")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


@dataclass(frozen=True)
class _Request:
    method: bytes
    host: str
    port: int
    path: bytes
    version: bytes
    headers: tuple[bytes, ...]

    @classmethod
    def parse(cls, head: bytes) -> _Request | None:
        first, *headers = head.split(b"\r\n")
        try:
            method, target, version = first.split(b" ")
            if method == b"CONNECT":
                url = urlsplit("//" + target.decode("ascii"))
                host, port, path = url.hostname, url.port, b""
                if url.path or not port:
                    return None
            else:
                url = urlsplit(target.decode("ascii"))
                if url.scheme != "http" or url.username or url.password:
                    return None
                host, port = url.hostname, url.port or 80
                path = (url.path or "/").encode() + (b"?" + url.query.encode()
                                                     if url.query else b"")
        except (ValueError, UnicodeDecodeError):
            return None
        if not host or not version.startswith(b"HTTP/1."):
            return None
        return cls(method, host.lower(), port, path, version, tuple(headers))

    def forwarded(self) -> bytes:
        """The request as the host is sent it: origin form, its own Host, one request."""
        kept = [h for h in self.headers
                if h.split(b":", 1)[0].strip().lower() not in HOP_HEADERS]
        authority = self.host if self.port == 80 else f"{self.host}:{self.port}"
        if ":" in self.host:
            authority = f"[{self.host}]:{self.port}"
        lines = [b" ".join((self.method, self.path, self.version)), *kept,
                 b"Host: " + authority.encode(), b"Connection: close"]
        return b"\r\n".join(lines) + b"\r\n\r\n"


def _refuse(sock: socket.socket, status: int, why: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = f"paddlecloud: {why}\n".encode()
    with contextlib.suppress(OSError):
        sock.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                     + body)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Bytes from ``source`` to ``sink`` until ``source`` ends; then ``sink`` is told."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def egress(urls: Iterable[str], label: str = "") -> Iterator[Egress]:
    """A network of its own whose one way out is the proxy to the hosts of ``urls``, for the
    block; the namespace's holder and the proxy are gone after it. ``label`` names the holder
    in ``ps``."""
    allowed = egress_hosts(urls)
    with tempfile.TemporaryDirectory(prefix="paddlecloud-egress-") as tmp:
        pid_file = Path(tmp) / "netns.pid"
        try:
            netns = netns_start(pid_file, label)
            proxy = _Proxy(_listen_in(netns, PROXY_PORT), allowed)
        except Exception:
            netns_stop(pid_file)
            raise
        try:
            yield Egress(netns=netns, proxy=f"http://127.0.0.1:{PROXY_PORT}",
                         refused=proxy.refused)
        finally:
            proxy.stop()
            netns_stop(pid_file)
