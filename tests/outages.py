"""Real outages for tests: a Redis server of the test's own, a TCP proxy in front of a server
(PostgreSQL, the portal) that the test closes and opens again, and the portal served by
``runportal`` in a process of its own, stopped (even killed) and started again. Nothing here
patches Django: the portal meets a refused connection as it would in production."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import requests

from tests.polling import wait
from tests.processes import ROOT, clean_env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """``redis-server`` on a port of its own, without persistence; ``stop()`` closes the port
    (connections are refused), ``start()`` serves it again (empty)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(self._answers, timeout=10, message="redis-server did not start")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


class TcpProxy:
    """Forwards connections from a port of its own to ``upstream``. ``stop()`` closes the port
    and cuts every connection (a server gone: new connections are refused); ``start()`` opens
    it again. With ``drop_answer`` (bytes a request holds), the first answer to a request
    holding them is never delivered: the connection is cut when it comes back (the server did
    the work; the client lost the answer). While ``silent``, connections are taken and never
    answered (a host that drops packets, as its clients see it)."""

    def __init__(self, upstream_port: int, drop_answer: bytes | None = None):
        self.upstream = ("127.0.0.1", upstream_port)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.drop_answer = drop_answer
        self.dropped = 0
        self.silent = False
        self.lock = threading.Lock()
        self.listener: socket.socket | None = None
        self.sockets: list[socket.socket] = []
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        thread = threading.Thread(target=self._accept, args=(self.listener,), daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self.silent:
                with self.lock:
                    self.sockets.append(client)  # held, unanswered, until stop()
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            pair, doomed = (client, server), []
            with self.lock:
                self.sockets += pair
            for src, dst, up in ((client, server, True), (server, client, False)):
                pump = threading.Thread(target=self._pump, args=(src, dst, up, pair, doomed),
                                        daemon=True)
                self.threads.append(pump)
                pump.start()

    def _pump(self, src, dst, up: bool, pair, doomed: list) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                with self.lock:
                    if up and self.drop_answer and self.drop_answer in data and not self.dropped:
                        doomed.append(True)
                        self.dropped += 1
                    if not up and doomed:
                        break
                dst.sendall(data)
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            self.listener = None
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self.threads:
            thread.join(10)
        self.threads = []
        for sock in sockets:
            sock.close()


class PortalProcess:
    """``manage.py runportal --no-worker`` in a process of its own on a fixed port, on the
    database and Redis given (the test's own data; no worker: what is queued stays queued)."""

    def __init__(self, var_dir: Path, **env: str):
        self.var_dir = var_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env
        self.log = var_dir / "portal.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "runportal", "--port", str(self.port),
                 "--no-worker", "--quiet"],
                cwd=ROOT, env=clean_env(self.var_dir, **self.env), stdout=out,
                stderr=subprocess.STDOUT)
        wait(self._serving, timeout=60,
                 message=lambda: f"the portal did not come up:\n{self.log.read_text()}")

    def _serving(self) -> bool:
        assert self.process.poll() is None, f"the portal exited:\n{self.log.read_text()}"
        try:
            return requests.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self, *, kill: bool = False) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None

    def output(self) -> str:
        return self.log.read_text()
