"""The kubelet's streaming API on the node agent, over WebSocket (``v4.channel.k8s.io``): what
the API server's ``pods/exec`` and ``pods/portforward`` reach. The API server passes a v4
WebSocket upgrade to the kubelet unchanged (only v5 and the SPDY tunnel are translated:
``ExecREST.Connect``, ``PortForwardREST.Connect``), so the client's frames are these.

- ``GET /exec/<ns>/<pod>/<container>?command=…&input=1&output=1&error=1&tty=1`` (what the API
  server makes of ``stdin``, ``stdout``, ``stderr`` and ``tty``): the command
  runs in the container as the process kubelet runs the container (``nsenter`` into its PID 1's
  namespaces, root and working directory; ``setpriv`` to its uid and gid; its environment), with
  a pty when ``tty``. Channels: 0 stdin, 1 stdout, 2 stderr, 3 the ``Status`` at the end (a
  ``NonZeroExitCode`` failure naming the exit code), 4 the terminal's size
  (``{"Width", "Height"}``).
- ``GET /portForward/<ns>/<pod>?port=P[,Q]``: a connection to 127.0.0.1:P in the pod's network
  namespace per port; channels 2i (data) and 2i+1 (errors), each opened by the port's two
  bytes, little-endian, as the kubelet's ``handleWebSocketStreams`` writes them.

Frames are websockets' sans-I/O protocol over the handler's connection."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import termios
import threading

from websockets.frames import Opcode
from websockets.protocol import OPEN, Protocol, Side

from tests.k8s_api_server.runtime.forward import in_netns

PROTOCOL = "v4.channel.k8s.io"
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
STDIN, STDOUT, STDERR, ERROR, RESIZE = range(5)
CHUNK = 32768
TOOLS = {tool: shutil.which(tool) or tool for tool in ("nsenter", "setpriv")}


class StreamError(Exception):
    """Refused before the upgrade: an HTTP status and a message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def upgrade(handler) -> Channels:
    """Answer the handler's WebSocket upgrade (101, ``v4.channel.k8s.io``): its channels."""
    offered = [p.strip() for header in handler.headers.get_all("Sec-WebSocket-Protocol") or []
               for p in header.split(",")]
    key = handler.headers.get("Sec-WebSocket-Key", "")
    if handler.headers.get("Upgrade", "").lower() != "websocket" or not key:
        raise StreamError(400, "only WebSocket upgrades are served here (no SPDY)")
    if PROTOCOL not in offered:
        raise StreamError(400, f"subprotocol {PROTOCOL} is the one served (offered: "
                               f"{offered or 'none'})")
    accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()  # noqa: S324
    handler.send_response(101)
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept)
    handler.send_header("Sec-WebSocket-Protocol", PROTOCOL)
    handler.end_headers()
    handler.wfile.flush()
    handler.close_connection = True
    return Channels(handler.connection, handler.rfile)


class Channels:
    """A v4 channel WebSocket on a connection: ``send(channel, data)`` from any thread,
    ``frames()`` the client's (channel, data) until it closes. Read through the handler's
    buffered reader: the client's first frames may be in it already, read with the request."""

    def __init__(self, sock, reader):
        self.sock, self.reader = sock, reader
        self.protocol = Protocol(Side.SERVER, state=OPEN, max_size=None)
        self.lock = threading.Lock()

    def _flush(self) -> None:
        for data in self.protocol.data_to_send():
            if data:
                self.sock.sendall(data)

    def send(self, channel: int, data: bytes) -> None:
        with self.lock:
            if self.protocol.state is OPEN:
                self.protocol.send_binary(bytes([channel]) + data)
                self._flush()

    def frames(self):
        while True:
            try:
                data = self.reader.read1(65536)
            except OSError:
                return
            with self.lock:
                if data:
                    self.protocol.receive_data(data)
                else:
                    self.protocol.receive_eof()
                events = self.protocol.events_received()
                with contextlib.suppress(OSError):
                    self._flush()
            for frame in events:
                if frame.opcode is Opcode.BINARY and frame.data:
                    yield frame.data[0], bytes(frame.data[1:])
                elif frame.opcode is Opcode.CLOSE:
                    return
            if not data:
                return

    def close(self) -> None:
        with self.lock:
            if self.protocol.state is OPEN:
                self.protocol.send_close(1000)
                with contextlib.suppress(OSError):
                    self._flush()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


def _flag(query: dict, name: str) -> bool:
    return (query.get(name) or [""])[-1].lower() in ("1", "true")


def _status(code: int | None, message: str = "") -> bytes:
    if code == 0:
        return json.dumps({"metadata": {}, "status": "Success"}).encode()
    if code is None:
        return json.dumps({"metadata": {}, "status": "Failure", "message": message,
                           "reason": "InternalError"}).encode()
    return json.dumps({
        "metadata": {}, "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}).encode()


def _ids(pid: int) -> tuple[str, str, str]:
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    groups = ",".join(status.get("Groups", "").split())
    return status["Uid"].split()[1], status["Gid"].split()[1], groups


def exec_serve(handler, pid: int, query: dict) -> None:
    """Run the query's command in the container whose PID 1 is ``pid`` (see above)."""
    command = query.get("command") or []
    if not command:
        raise StreamError(400, "you must specify at least 1 command")
    tty, stdin = _flag(query, "tty"), _flag(query, "input")  # the API server's names
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        uid, gid, groups = _ids(pid)
    except OSError:
        raise StreamError(404, "container not running") from None
    if tty:
        env[b"TERM"] = b"xterm"
    argv = [TOOLS["nsenter"], f"--target={pid}", "--mount", "--uts", "--ipc", "--net",
            "--pid", "--root", "--wd", "--", TOOLS["setpriv"], f"--reuid={uid}",
            f"--regid={gid}", f"--groups={groups}" if groups else "--clear-groups", "--",
            *command]
    channels = upgrade(handler)
    master = None
    try:
        if tty:
            master, slave = os.openpty()

            def take_terminal():
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)

            process = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave,
                                       start_new_session=True, preexec_fn=take_terminal)
            os.close(slave)
            outputs = [(os.fdopen(master, "rb", buffering=0, closefd=False), STDOUT)]
        else:
            process = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       start_new_session=True)
            outputs = [(process.stdout, STDOUT), (process.stderr, STDERR)]
            if not stdin:
                process.stdin.close()
    except OSError as exc:
        channels.send(ERROR, _status(None, f"cannot run the command: {exc}"))
        channels.close()
        return

    def pump(stream, channel):
        with contextlib.suppress(OSError):
            while data := stream.read(CHUNK):
                channels.send(channel, data)

    pumps = [threading.Thread(target=pump, args=output, daemon=True) for output in outputs]
    for thread in pumps:
        thread.start()

    def take_input():
        for channel, data in channels.frames():
            with contextlib.suppress(OSError, ValueError):
                if channel == STDIN and stdin:
                    if master is not None:
                        os.write(master, data)
                    else:
                        process.stdin.write(data)
                        process.stdin.flush()
                elif channel == RESIZE and master is not None:
                    size = json.loads(data)
                    fcntl.ioctl(master, termios.TIOCSWINSZ,
                                struct.pack("HHHH", size["Height"], size["Width"], 0, 0))
        # The client went: so does the command.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    reader = threading.Thread(target=take_input, daemon=True)
    reader.start()
    code = process.wait()
    for thread in pumps:
        thread.join(timeout=5)
    if master is not None:
        os.close(master)
    channels.send(ERROR, _status(code if code >= 0 else 128 - code))
    channels.close()
    reader.join(timeout=5)


def ports_serve(handler, netns_path: str, query: dict) -> None:
    """Forward each of the query's ports to 127.0.0.1 in the pod's network (see above)."""
    try:
        ports = [int(p) for value in query.get("port") or query.get("ports") or []
                 for p in value.split(",")]
    except ValueError:
        raise StreamError(400, "port: a number") from None
    if not ports or not all(0 < p < 65536 for p in ports):
        raise StreamError(400, 'query parameter "port" is required')
    channels = upgrade(handler)
    conns: dict[int, socket.socket] = {}
    threads = []
    for i, port in enumerate(ports):
        head = struct.pack("<H", port)
        channels.send(2 * i, head)
        channels.send(2 * i + 1, head)
        try:
            conn = in_netns(netns_path, lambda port=port: socket.create_connection(
                ("127.0.0.1", port), timeout=10))
            conn.settimeout(None)
        except OSError as exc:
            channels.send(2 * i + 1, f"error forwarding port {port} to pod: {exc}".encode())
            continue
        conns[2 * i] = conn

        def pump(conn=conn, channel=2 * i):
            with contextlib.suppress(OSError):
                while data := conn.recv(CHUNK):
                    channels.send(channel, data)
            channels.close()  # the pod's side ended: so does the stream

        threads.append(threading.Thread(target=pump, daemon=True))
        threads[-1].start()
    if not conns:
        channels.close()
        return
    for channel, data in channels.frames():
        conn = conns.get(channel)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(data)
    for conn in conns.values():
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        conn.close()
    for thread in threads:
        thread.join(timeout=5)
    channels.close()
