"""What pservers and trainers share: where each parameter lives, and the wire format. (The
environment contract they read through ``paddlecloud_sdk.env``.)

A message is a 4-byte big-endian length, that many bytes of a JSON object (the header), then
``header["nbytes"]`` bytes of little-endian float64 values (the parameters or gradients of one
shard; none for most messages). No pickle: a peer can only send numbers and plain JSON.

Requests and their replies (every reply has ``"ok"``; ``"error"`` when it is false):

``{"op": "pull"}``
    -> ``{"ok": true, "round": N}`` + this pserver's parameters
``{"op": "push", "trainer": ID, "round": R}`` + the gradient of this pserver's parameters
    -> ``{"ok": true, "round": N}`` once every trainer still training pushed for this round
    and the pserver applied ``params -= learning_rate * mean(gradients)`` (synchronous SGD).
    ``R`` (optional): the rounds the trainer pushed before; a round already applied is
    answered at once, a gradient already pending for it replaced (a trainer restarted between
    its pushes to two pservers)
``{"op": "finish", "trainer": ID}``
    -> ``{"ok": true}``; the trainer pushes no more, rounds go on without it
``{"op": "done", "trainer": ID}``
    -> ``{"ok": true}``; finish, and the trainer needs the pserver no more: the pserver exits
    when every trainer said so
``{"op": "restore", "trainer": 0, "round": N}`` + this pserver's parameters
    -> ``{"ok": true, "round": N}``; a new pserver (no round applied, no gradient pushed)
    takes the parameters of trainer 0's checkpoint of step N, and goes on from round N
``{"op": "status"}``
    -> ``{"ok": true, "round": N, "trainers": N, "finished": [IDS], "done": [IDS]}``
"""

from __future__ import annotations

import itertools
import json
import socket
import struct

import numpy as np

FEATURES = 13  # the linear model: 13 weights, then the bias
DIM = FEATURES + 1

_LENGTH = struct.Struct("!I")
MAX_HEADER = 64 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024
DTYPE = np.dtype("<f8")


class ProtocolError(Exception):
    pass


def log(message: str) -> None:
    print(message, flush=True)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not a host:port endpoint: {endpoint!r}")
    return host, int(port)


def blocks(dim: int, pservers: int) -> list[slice]:
    """Which parameters each pserver holds: contiguous blocks, as even as possible."""
    if pservers < 1 or pservers > dim:
        raise ValueError(f"{pservers} pservers cannot share {dim} parameters")
    bounds = np.linspace(0, dim, pservers + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def send(sock: socket.socket, header: dict, values: np.ndarray | None = None) -> None:
    payload = b"" if values is None else np.ascontiguousarray(values, dtype=DTYPE).tobytes()
    head = json.dumps({**header, "nbytes": len(payload)}).encode()
    sock.sendall(_LENGTH.pack(len(head)) + head + payload)


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            if chunks:
                raise ProtocolError("the connection closed in the middle of a message")
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket) -> tuple[dict, np.ndarray | None] | None:
    """The next message, or None when the peer closed the connection between messages."""
    raw = _recv_exactly(sock, _LENGTH.size)
    if raw is None:
        return None
    (length,) = _LENGTH.unpack(raw)
    if length > MAX_HEADER:
        raise ProtocolError(f"a {length}-byte header is too long")
    head = _recv_exactly(sock, length)
    if head is None:
        raise ProtocolError("the connection closed in the middle of a message")
    header = json.loads(head)
    if not isinstance(header, dict):
        raise ProtocolError("the header is not a JSON object")
    nbytes = header.get("nbytes", 0)
    if not isinstance(nbytes, int) or not 0 <= nbytes <= MAX_PAYLOAD or nbytes % DTYPE.itemsize:
        raise ProtocolError(f"bad payload size {nbytes!r}")
    if not nbytes:
        return header, None
    payload = _recv_exactly(sock, nbytes)
    if payload is None:
        raise ProtocolError("the connection closed in the middle of a message")
    return header, np.frombuffer(payload, dtype=DTYPE).copy()
