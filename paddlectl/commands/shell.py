"""``paddlectl exec JOB [-w WORKER] [-i] [-t] -- COMMAND...``: a command in a running job's
worker, over the portal's WebSocket (``/ws/jobs/<name>/exec/``; docs/users/api.md). With
``-t`` the local terminal is put in raw mode and its size followed; ``paddlectl`` exits with
the command's status."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from urllib.parse import quote

from paddlecloud_client.errors import UsageError
from paddlecloud_client.ports import websocket_open
from paddlectl.args import flag

CHUNK = 32768
STDOUT, STDERR = 1, 2


def setup_exec(parser) -> None:
    parser.description = ("Run a command in a running job's worker, as the worker runs "
                          "(its user, its environment, its working directory), and exit "
                          "with its status. Put the command after --: "
                          "paddlectl exec JOB -it -- bash")
    parser.add_argument("job", metavar="JOB")
    parser.add_argument("command", metavar="COMMAND", nargs="*",
                        help="the program and its arguments, after --")
    flag(parser, "w", "worker", metavar="WORKER",
         help="the worker: trainer-0, pserver-1, ... (default: the first trainer)")
    flag(parser, "i", "stdin", action="store_true",
         help="pass this terminal's input (or what is piped in) to the command")
    flag(parser, "t", "tty", action="store_true",
         help="give the command a terminal (for a shell: -it)")


def run_exec(ctx, args) -> int:
    if not args.command:
        raise UsageError("give the command after --, e.g. paddlectl exec JOB -it -- bash")
    tty = args.tty
    if tty and not (sys.stdin.isatty() and sys.stdout.isatty()):
        ctx.warn("-t: this is not a terminal; running the command without one")
        tty = False
    socket = websocket_open(ctx.client, f"/ws/jobs/{quote(args.job, safe='')}/exec/",
                            {"worker": args.worker} if args.worker else None)
    with contextlib.closing(socket):
        start = {"type": "start", "command": args.command, "tty": tty}
        if tty:
            start |= {"term": os.environ.get("TERM") or "xterm", **_size()}
        socket.send(json.dumps(start))
        _started(socket)
        with _raw(tty):
            if tty:
                _follow_size(socket)
            if args.stdin:
                threading.Thread(target=_input, args=(socket,), daemon=True).start()
            else:
                _send(socket, json.dumps({"type": "eof"}))  # it may have ended already
            return _output(socket)


def _message(socket):
    """The next message, None once the socket has closed (with its close code kept)."""
    from websockets.exceptions import ConnectionClosed

    try:
        return socket.recv()
    except ConnectionClosed:
        return None


def _refused(socket, message: dict):
    """The error the portal sent, with the status of the close that follows it."""
    _message(socket)
    return _error(message, socket.close_code)


def _error(message: dict, close: int | None):
    from paddlecloud_client.api import ApiClient

    return ApiClient.websocket_error(message, close)


def _started(socket) -> None:
    message = _message(socket)
    if isinstance(message, str):
        data = json.loads(message)
        if data.get("type") == "started":
            return
        if data.get("type") == "error":
            raise _refused(socket, data)
    raise _error({"message": "the portal closed the connection before the command started"},
                 socket.close_code)


def _output(socket) -> int:
    """Write what comes until the exit status does; returns it."""
    out, err = sys.stdout.buffer, sys.stderr.buffer
    while True:
        message = _message(socket)
        if message is None:
            raise _error({"message": "the connection was lost before the command ended"},
                         socket.close_code)
        if isinstance(message, bytes):
            stream = err if message[:1] == bytes([STDERR]) else out
            stream.write(message[1:])
            stream.flush()
            continue
        data = json.loads(message)
        if data.get("type") == "exit":
            return int(data.get("code", 1))
        if data.get("type") == "error":
            raise _refused(socket, data)


def _send(socket, message) -> None:
    """Send, unless the portal has closed the socket (the command ended): what it sent before
    is still read."""
    from websockets.exceptions import ConnectionClosed

    with contextlib.suppress(ConnectionClosed):
        socket.send(message)


def _input(socket) -> None:
    """This side's input to the command, then its end."""
    from websockets.exceptions import ConnectionClosed

    with contextlib.suppress(ConnectionClosed, OSError):
        while data := os.read(sys.stdin.fileno(), CHUNK):
            socket.send(data)
        socket.send(json.dumps({"type": "eof"}))


def _size() -> dict:
    """This terminal's size, {} where it does not say (0 columns)."""
    size = os.get_terminal_size(sys.stdout.fileno())
    return {"cols": size.columns, "rows": size.lines} if size.columns and size.lines else {}


def _follow_size(socket) -> None:
    """Send the terminal's new size whenever it changes (SIGWINCH)."""
    from websockets.exceptions import ConnectionClosed

    def resized(*_):
        with contextlib.suppress(ConnectionClosed, OSError):
            if size := _size():
                socket.send(json.dumps({"type": "resize", **size}))

    signal.signal(signal.SIGWINCH, resized)


@contextlib.contextmanager
def _raw(tty: bool):
    """This terminal in raw mode while the command runs (its keys are the command's, Ctrl-C
    included), as it was afterwards."""
    if not tty:
        yield
        return
    import termios
    import tty as ttys

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    ttys.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
