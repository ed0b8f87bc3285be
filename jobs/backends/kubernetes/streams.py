"""A pod's ``exec`` and ``portforward`` subresources as the portal uses them: the frames of
``v4.channel.k8s.io`` (each binary frame led by its channel's byte) on a WebSocket that
``client.Kube.channels`` opened through the API server, as the portal's ServiceAccount (no
NetworkPolicy involved: the kubelet reaches the pod).

- exec: channel 0 is the command's stdin, 1 its stdout, 2 its stderr, 3 the ``Status`` it
  ended with (``Success``, or ``NonZeroExitCode`` with its ``ExitCode`` cause), 4 its
  terminal's size (``{"Width", "Height"}``). v4 cannot end the command's input on its own
  (v5's close frame is translated to SPDY for the kubelet, which the real control plane's
  node agent does not speak): with a terminal, the end of input is a Ctrl-D, as it is typed.
- port-forward: for the one port asked, channel 0 carries the data and 1 the errors, each
  opened by the port's two bytes (little-endian), which are not data.
"""

from __future__ import annotations

import contextlib
import json

from websockets.exceptions import ConnectionClosed

from ..base import BackendError, ExecProcess, PortStream

STDIN, STDOUT, STDERR, ERROR, RESIZE = range(5)
EXEC_FAILED = 126  # a Status that is no exit code: the command could not run


def exit_code(status: dict) -> tuple[int, str]:
    """What an exec's ``Status`` says: its exit code, and the message to show when it is not
    one of the command's own."""
    if status.get("status") == "Success":
        return 0, ""
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                with contextlib.suppress(TypeError, ValueError):
                    return int(cause.get("message")), ""
    return EXEC_FAILED, str(status.get("message") or "the command could not be run")


class KubeExec(ExecProcess):
    """A command running in a pod's container, through the API server."""

    def __init__(self, socket, *, tty: bool):
        self.socket, self.tty = socket, tty
        self.code: int | None = None
        self.ended = False

    async def read(self) -> tuple[int, bytes]:
        while not self.ended:
            try:
                frame = await self.socket.recv()
            except ConnectionClosed:
                break
            if isinstance(frame, str) or not frame:
                continue
            channel, data = frame[0], frame[1:]
            if channel in (STDOUT, STDERR) and data:
                return channel, data
            if channel == ERROR and data:
                try:
                    self.code, message = exit_code(json.loads(data))
                except ValueError:
                    self.code, message = EXEC_FAILED, data.decode(errors="replace")
                if message:
                    return STDERR, message.encode() + b"\n"
        self.ended = True
        return 0, b""

    async def write(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self.socket.send(bytes([STDIN]) + data)

    async def write_end(self) -> None:
        if self.tty:  # what typing Ctrl-D does (v4 cannot close stdin: see above)
            await self.write(b"\x04")

    async def resize(self, cols: int, rows: int) -> None:
        if self.tty:
            with contextlib.suppress(ConnectionClosed):
                await self.socket.send(bytes([RESIZE]) + json.dumps(
                    {"Width": cols, "Height": rows}).encode())

    async def wait(self) -> int:
        while not self.ended:
            await self.read()
        # A connection lost before the Status came: the command's end is not known.
        return EXEC_FAILED if self.code is None else self.code

    async def close(self) -> None:
        self.ended = True
        await self.socket.close()


class KubePortStream(PortStream):
    """One connection to a port of a pod, through the API server."""

    def __init__(self, socket, port: int):
        self.socket, self.port = socket, port
        self.heads = {0: b"", 1: b""}  # each channel's first two bytes: the port, not data
        self.pending = b""
        self.ended = False

    def _data(self, channel: int, data: bytes) -> bytes:
        missing = 2 - len(self.heads[channel])
        if missing > 0:
            self.heads[channel] += data[:missing]
            data = data[missing:]
        return data

    async def read(self, n: int = 65536) -> bytes:
        while not self.pending and not self.ended:
            try:
                frame = await self.socket.recv()
            except ConnectionClosed:
                self.ended = True
                break
            if isinstance(frame, str) or not frame or frame[0] not in (0, 1):
                continue
            data = self._data(frame[0], frame[1:])
            if frame[0] == 1 and data:
                self.ended = True
                await self.socket.close()
                raise BackendError(f"port {self.port}: {data.decode(errors='replace')}")
            self.pending += data
        data, self.pending = self.pending[:n], self.pending[n:]
        return data

    def at_eof(self) -> bool:
        """The pod's side has closed and everything it sent was read."""
        return self.ended and not self.pending

    async def write(self, data: bytes) -> None:
        try:
            await self.socket.send(bytes([0]) + data)
        except ConnectionClosed:
            raise BackendError(f"port {self.port}: the connection was closed") from None

    async def close(self) -> None:
        self.ended = True
        await self.socket.close()
