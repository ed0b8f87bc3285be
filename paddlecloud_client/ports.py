"""Port-forward: connections to a local port carried to a port of a running job's replica, each
over its own WebSocket to the portal (``/ws/jobs/<name>/ports/<port>/?worker=…``, binary frames
both ways; the portal reaches the replica). It never prints: what goes wrong with a connection
is given to ``on_error``.

The portal refuses a socket it cannot open with a JSON ``error`` message (``code``,
``message``) and a close code of 4000 + the HTTP status; a job the user cannot see is one that
does not exist (4404), a job that does not run or a port nothing listens on 4409.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection, connect

from paddlecloud_client.api import CONNECT_TIMEOUT, ApiClient
from paddlecloud_client.errors import ApiError, NetworkError

CHUNK = 65536
FATAL = ("not_found", "job_not_running", "not_authenticated", "permission_denied")


def websocket_open(client: ApiClient, path: str, params: dict | None = None) -> ClientConnection:
    """A WebSocket to the portal at ``path``, with the client's token (one the portal refuses
    at the handshake is replaced by a fresh login, once)."""
    url = client.endpoint.replace("http", "ws", 1) + path
    if params:
        url += "?" + urlencode(params)
    for attempt in (0, 1):
        token = client.token(fresh=attempt == 1)
        try:
            return connect(url, open_timeout=CONNECT_TIMEOUT, max_size=None,
                           additional_headers={"Authorization": f"Bearer {token}",
                                               "User-Agent": client.session.headers[
                                                   "User-Agent"]})
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403) and attempt == 0 and not client.fixed_token:
                continue
            raise ApiError(status, "http_error", f"{url}: the portal refused the WebSocket "
                                                 f"({status})") from None
        except (OSError, WebSocketException) as exc:
            raise NetworkError(f"cannot reach {client.endpoint}: {exc}; {client.hint}") from None
    raise AssertionError("unreachable")


@dataclass
class Refusal:
    """Why the portal refused or ended a forwarded connection."""

    code: str
    message: str

    @property
    def fatal(self) -> bool:
        """Nothing more can be forwarded (the job is gone or ended, the token refused)."""
        return self.code in FATAL


class PortForward:
    """Listens on ``host:local_port`` (0: a free port, then ``self.local_port``) and carries
    each connection to ``port`` of the job's ``worker`` (its first trainer when None)."""

    def __init__(self, client: ApiClient, job: str, port: int, *, local_port: int,
                 worker: str | None = None, host: str = "127.0.0.1",
                 on_error: Callable[[Refusal], None] = lambda refusal: None):
        self.client, self.job, self.port, self.worker = client, job, port, worker
        self.on_error = on_error
        self.stopped = threading.Event()
        self.refusal: Refusal | None = None  # the fatal one that stopped it
        self.listener = socket.create_server((host, local_port), reuse_port=False)
        self.local_port = self.listener.getsockname()[1]

    def serve(self) -> Refusal | None:
        """Accept and forward until ``stop`` or a fatal refusal (returned)."""
        self.listener.settimeout(0.2)
        try:
            while not self.stopped.is_set():
                try:
                    conn, _ = self.listener.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=self._forward, args=(conn,), daemon=True).start()
        finally:
            self.listener.close()
        return self.refusal

    def stop(self) -> None:
        self.stopped.set()

    def _refused(self, refusal: Refusal) -> None:
        self.on_error(refusal)
        if refusal.fatal:
            self.refusal = refusal
            self.stop()

    def _forward(self, conn: socket.socket) -> None:
        params = {"worker": self.worker} if self.worker else {}
        path = f"/ws/jobs/{quote(self.job, safe='')}/ports/{self.port}/"
        with conn:
            try:
                ws = websocket_open(self.client, path, params)
            except (ApiError, NetworkError) as exc:
                self._refused(Refusal(getattr(exc, "code", "network"), exc.message))
                return
            with ws:
                up = threading.Thread(target=self._up, args=(conn, ws), daemon=True)
                up.start()
                self._down(conn, ws)
                up.join(5)

    def _up(self, conn: socket.socket, ws: ClientConnection) -> None:
        """The local connection's bytes to the portal; its end ends the WebSocket."""
        with contextlib.suppress(OSError, ConnectionClosed):
            while data := conn.recv(CHUNK):
                ws.send(data)
        with contextlib.suppress(OSError, ConnectionClosed):
            ws.close()

    def _down(self, conn: socket.socket, ws: ClientConnection) -> None:
        """The port's bytes to the local connection, until the portal closes; its refusal, if
        it sends one, to ``on_error``."""
        try:
            for message in ws:
                if isinstance(message, str):
                    said = json.loads(message)
                    if said.get("type") == "error":
                        self._refused(Refusal(str(said.get("code")), str(said.get("message"))))
                    continue
                conn.sendall(message)
        except (OSError, ConnectionClosed, ValueError):
            pass
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
