"""A connection from the portal to a port of a local replica (``Backend.port_open``): the
proxy's and port-forward's way in. Standard library only.

A sandboxed replica listens in its job's network namespace, where the machine's loopback is
not: the dialer, a short-lived process of the portal's user (``python -I -S -c DIALER``), makes
a TCP socket there (a child joins the job network holder's namespaces:
``netns.NETNS_SOCKET``, as the relay makes its listener), connects it to ``127.0.0.1:PORT``
and hands it to the portal over the UNIX socket it was given as its stdin (SCM_RIGHTS). The
socket keeps the namespace it was made in, so the portal reads and writes it like any other;
the dialer has exited by then. Without a sandbox a replica is on the machine's network: the
portal connects to the port itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys

from ..netns import NETNS_SOCKET, Netns

CONNECT_SECONDS = 10.0
DIALER_MARKER = "paddlecloud-dial"

# Run as ``python -I -S -c DIALER paddlecloud-dial HOLDER_PID HOLDER_START NETNS_INODE PORT
# TIMEOUT``, its stdin a UNIX stream socket: sends the connected socket over it ("ok"), or why not.
DIALER = NETNS_SOCKET + r"""
import sys
_, _, holder_pid, holder_start, inode, port, timeout = sys.argv
holder_pid, holder_start, inode, port = (int(v) for v in (holder_pid, holder_start, inode, port))
back = socket.socket(fileno=0)


def dial():
    made = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    made.settimeout(float(timeout))
    try:
        made.connect(("127.0.0.1", port))
    except ConnectionRefusedError:
        raise OSError(f"nothing listens on port {port}") from None
    except TimeoutError:
        raise OSError(f"port {port} does not accept connections (timed out)") from None
    made.settimeout(None)
    return made


try:
    made, holder = netns_socket(holder_pid, holder_start, inode, dial)
    os.close(holder)
    socket.send_fds(back, [b"ok"], [made.fileno()])
except OSError as exc:
    back.sendall((getattr(exc, "strerror", None) or str(exc)).encode()[:1000])
    sys.exit(1)
"""


class PortError(Exception):
    """The port cannot be reached; the message says why, for the user."""


def port_dial(network: Netns | None, port: int) -> socket.socket:
    """A blocking TCP socket connected to ``127.0.0.1:port`` in ``network`` (None: the
    machine's own). ``PortError`` when nothing listens there or the network is gone."""
    if network is None:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=CONNECT_SECONDS)
        except ConnectionRefusedError:
            raise PortError(f"nothing listens on port {port}") from None
        except OSError as exc:
            raise PortError(f"port {port} cannot be reached: {exc.strerror or exc}") from None
    ours, theirs = socket.socketpair()
    with ours:
        with theirs:
            process = subprocess.Popen(  # noqa: S603 - our own dialer
                [sys.executable, "-I", "-S", "-c", DIALER, DIALER_MARKER, str(network.pid),
                 str(network.start), str(network.inode), str(port), str(CONNECT_SECONDS)],
                stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                cwd="/", close_fds=True)
        try:
            ours.settimeout(CONNECT_SECONDS * 3)
            message, fds, _, _ = socket.recv_fds(ours, 1024, 1)
        except OSError as exc:
            process.kill()
            raise PortError(f"port {port} cannot be reached: {exc}") from None
        finally:
            _, err = process.communicate()
    if not fds:
        why = (message.decode(errors="replace") or err.decode(errors="replace").strip()
               or "the dialer said nothing")
        raise PortError(why)
    made = socket.socket(fileno=fds[0])
    made.setblocking(True)
    return made


class SocketStream:
    """A connected socket as a ``jobs.backends.base.PortStream``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer, self.closed = reader, writer, False

    async def read(self, n: int = 65536) -> bytes:
        try:
            return await self.reader.read(n)
        except ConnectionError:
            return b""

    def at_eof(self) -> bool:
        """Whether the other side has closed and everything it sent was read (a kept
        connection's check before it is used again)."""
        return self.reader.at_eof()

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def socket_stream(made: socket.socket) -> SocketStream:
    """The connected socket ``made``, read and written on the running event loop."""
    made.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=made, limit=2 ** 20)
    return SocketStream(reader, writer)
