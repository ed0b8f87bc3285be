"""The relay from a job's network to the portal: how sandboxed replicas reach their job's
master (docs/master.md). Standard library only.

A sandboxed replica is in its job's network namespace (``netns.netns_start``), where
127.0.0.1 is the job's own loopback: nothing on the machine is in reach, the portal included.
The relay makes the portal, and only the portal, reachable from there: a small process of the
portal's user in the machine's network that holds one listening socket made inside the job's
network (``127.0.0.1:RELAY_PORT`` there; a socket keeps the namespace it was made in), and
forwards each connection it accepts there to the portal's address on the machine
(``PADDLECLOUD_PORTAL_URL``), byte for byte: it reads nothing of what passes (so the job reaches
the portal's whole HTTP interface, as its owner does, not only the master's calls).

- It connects to the portal from ``RELAY_SOURCE_ADDRESS`` (127.0.0.2, over IPv4), an address
  of its own: a proxy in front of the portal on the same machine connects from 127.0.0.1 too,
  and the portal believes a proxy's X-Forwarded-For, never what a job sends through its relay
  (``kernel.security.ForwardedHeaders``).

- Its port, 80, is below 1024: in the job's network only a process with capabilities in the
  job's user namespace (the relay as it binds, never a replica: they have none) may take it, so
  no replica can listen there before it or in its place, and it never meets a replica's own
  endpoint (those are above 1024).
- Its life is the job network's: it watches the network's holder (a pidfd) and exits as soon as
  the holder has, so ``netns_stop`` ends it too (``relay_stop`` then waits for it). Like the
  holder it runs in a session of its own and outlives a restart of the portal, which finds it
  again by its record (pid, start time, the network's inode) in the job's ``run/``.
- It is bounded: at most ``MAX_CONNECTIONS`` at once (128 more wait in the listen backlog, and
  the kernel drops the rest, which their clients retry), 256 KiB buffered per direction of
  each, a connection idle for ``IDLE_SECONDS`` closed. One thread, one ``selectors`` loop that
  sleeps until a socket, the holder's exit or a signal wakes it.
- SIGTERM or SIGINT end it cleanly (sockets closed, exit 0).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from paddlecloud_core.contract import RELAY_SOURCE_ADDRESS
from paddlecloud_core.processes import start_of

from ..netns import NETNS_SOCKET, Netns, dir_locked, netns_alive, recorded_stop

RELAY_PORT = 80
MAX_CONNECTIONS = 64
IDLE_SECONDS = 600
RELAY_MARKER = "paddlecloud-relay"
STOP_SECONDS = 5.0


class RelayError(Exception):
    """The relay cannot be started; the message says why."""


@dataclass(frozen=True)
class Relay:
    """A running relay: its pid and start time (clock ticks since boot, against a reused pid),
    the inode of the job network it listens in, its port there, where it forwards to and the
    address it connects from (None: a relay of a version that did not say)."""

    pid: int
    start: int
    netns: int
    port: int
    target: tuple[str, int]
    source: str | None = None


# Run as ``python -I -S -c RELAY paddlecloud-relay LABEL HOLDER_PID HOLDER_START NETNS_INODE
# PORT HOST TARGET_PORT SOURCE MAX IDLE``: forks (the first process exits, so init reaps the relay),
# makes its listening socket in a child that joins the holder's user and network namespaces
# (the parent stays in the machine's network, where it connects to the portal), prints
# "pid start" and relays until the holder exits or it is told to stop.
RELAY = NETNS_SOCKET + r"""
import errno, selectors, signal, sys, time
if os.fork():
    os._exit(0)
CHUNK, BUFFERED, BACKLOG = 65536, 262144, 128
_, _, _, holder_pid, holder_start, inode, port, host, target_port, source, most, idle = sys.argv
holder_pid, holder_start, inode, port, target_port, most = (
    int(v) for v in (holder_pid, holder_start, inode, port, target_port, most))
idle = float(idle)


def listen():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(BACKLOG)
    return listener


try:
    try:
        family, kind, proto, _, target = socket.getaddrinfo(
            host, target_port, socket.AF_INET, socket.SOCK_STREAM)[0]
    except socket.gaierror:
        raise OSError(f"the portal's host {host} has no IPv4 address: the relay reaches it "
                      f"over IPv4 (from {source}; PADDLECLOUD_PORTAL_URL)") from None
    try:
        listener, holder = netns_socket(holder_pid, holder_start, inode, listen)
    except OSError as exc:
        raise OSError(f"cannot listen in the job's network: {exc}") from None
    listener.setblocking(False)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    print(os.getpid(), start_of(os.getpid()), flush=True)
except Exception as exc:
    print(exc, file=sys.stderr, flush=True)
    os._exit(1)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
os.chdir("/")

selector = selectors.DefaultSelector()


class Pair:
    # One connection from the job (inner) and its own to the portal (outer). ``to[s]`` is
    # what waits to be written to s; ``ended`` the sockets that sent their end.

    def __init__(self, inner, outer, connecting):
        self.inner, self.outer, self.connecting = inner, outer, connecting
        self.peer = {inner: outer, outer: inner}
        self.to = {inner: bytearray(), outer: bytearray()}
        self.ended, self.shut, self.closed = set(), set(), False
        self.seen = time.monotonic()
        self.masks = {}

    def update(self):
        for s, peer in self.peer.items():
            if s is self.outer and self.connecting:
                mask = selectors.EVENT_WRITE
            else:
                mask = 0
                if s not in self.ended and len(self.to[peer]) < BUFFERED:
                    mask |= selectors.EVENT_READ
                if self.to[s]:
                    mask |= selectors.EVENT_WRITE
            if (peer in self.ended and not self.to[s] and s not in self.shut
                    and not (s is self.outer and self.connecting)):
                s.shutdown(socket.SHUT_WR)  # its peer's end, passed on
                self.shut.add(s)
            if mask != self.masks.get(s, 0):
                if not mask:
                    selector.unregister(s)
                elif s in self.masks and self.masks[s]:
                    selector.modify(s, mask, self)
                else:
                    selector.register(s, mask, self)
                self.masks[s] = mask
        if len(self.shut) == 2:
            self.close()

    def handle(self, s, mask):
        if self.closed:  # its other socket's event, in the same round, closed it
            return
        self.seen = time.monotonic()
        try:
            if s is self.outer and self.connecting:
                error = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    raise OSError(error, os.strerror(error))
                self.connecting = False
            else:
                if mask & selectors.EVENT_WRITE and self.to[s]:
                    del self.to[s][:s.send(self.to[s])]
                if mask & selectors.EVENT_READ:
                    data = s.recv(CHUNK)
                    if data:
                        self.to[self.peer[s]] += data
                    else:
                        self.ended.add(s)
            self.update()
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.close()

    def close(self):
        if self.closed:
            return
        self.closed = True
        for s in (self.inner, self.outer):
            if self.masks.get(s):
                selector.unregister(s)
            s.close()


def accept():
    try:
        inner, _ = listener.accept()
    except OSError:  # gone before it was accepted, or interrupted
        return None
    outer = None
    try:
        inner.setblocking(False)
        outer = socket.socket(family, kind, proto)
        outer.bind((source, 0))  # the relay's own address: no proxy's
        outer.setblocking(False)
        code = outer.connect_ex(target)
        if code not in (0, errno.EINPROGRESS):
            raise OSError(code, os.strerror(code))
    except OSError:  # the portal refuses: so does the relay
        inner.close()
        if outer is not None:
            outer.close()
        return None
    pair = Pair(inner, outer, connecting=code != 0)
    pair.update()
    return pair


pairs = set()
STOP, ACCEPT = object(), object()
selector.register(holder, selectors.EVENT_READ, STOP)
selector.register(wake_read, selectors.EVENT_READ, STOP)
selector.register(listener, selectors.EVENT_READ, ACCEPT)
listening = True
running = True
while running:
    timeout = None
    if pairs:
        timeout = max(0.0, min(p.seen for p in pairs) + idle - time.monotonic())
    for key, mask in selector.select(timeout):
        if key.data is STOP:
            running = False
        elif key.data is ACCEPT:
            pair = accept()
            if pair is not None and not pair.closed:
                pairs.add(pair)
        else:
            key.data.handle(key.fileobj, mask)
    now = time.monotonic()
    for pair in list(pairs):
        if now - pair.seen > idle:
            pair.close()
        if pair.closed:
            pairs.discard(pair)
    if listening and len(pairs) >= most:
        selector.unregister(listener)  # the rest wait in the backlog
        listening = False
    elif not listening and len(pairs) < most:
        selector.register(listener, selectors.EVENT_READ, ACCEPT)
        listening = True
for pair in pairs:
    pair.close()
listener.close()
sys.exit(0)
"""


def _recorded(record: Path) -> Relay | None:
    try:
        data = json.loads(Path(record).read_text())
        host, port = data["target"]
        return Relay(pid=int(data["pid"]), start=int(data["start"]),
                     netns=int(data["netns"]), port=int(data["port"]),
                     target=(str(host), int(port)), source=data.get("source"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def relay_alive(relay: Relay) -> bool:
    """Whether the relay still runs: the same process (start time), not a zombie."""
    return start_of(relay.pid) == relay.start


def relay_read(record: Path) -> Relay | None:
    """The relay recorded in ``record``, if it still runs."""
    relay = _recorded(record)
    return relay if relay and relay_alive(relay) else None


def relay_start(record: Path, netns: Netns, target: tuple[str, int], label: str = "") -> Relay:
    """The relay into the job's network ``netns`` (to ``target``, the portal's host and port
    on the machine): the one recorded in ``record`` (in an existing directory) if it runs,
    listens in that network and forwards there, else a new one, recorded there. Starts and
    stops take turns with an flock on the record's directory; ``label`` names it in ``ps``."""
    record = Path(record)
    target = (target[0], int(target[1]))
    with dir_locked(record.parent):
        running = relay_read(record)
        if (running and running.netns == netns.inode and running.target == target
                and running.source == RELAY_SOURCE_ADDRESS):
            return running
        if running:  # the portal moved, an earlier network's (which ends with its holder), or
            # one of a version that connected from the proxies' 127.0.0.1
            _relay_kill(running)
        if not netns_alive(netns):
            raise RelayError(f"the job's network is gone (its holder, pid {netns.pid}, is "
                             "not running)")
        host, port = target
        result = subprocess.run(  # noqa: S603 - our own relay
            [sys.executable, "-I", "-S", "-c", RELAY, RELAY_MARKER, label, str(netns.pid),
             str(netns.start), str(netns.inode), str(RELAY_PORT), host, str(port),
             RELAY_SOURCE_ADDRESS, str(MAX_CONNECTIONS), str(IDLE_SECONDS)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, cwd="/",
            start_new_session=True, check=False)
        try:
            pid, start = (int(word) for word in result.stdout.split())
        except ValueError:
            why = result.stderr.strip() or result.stdout.strip() or "no message"
            raise RelayError(f"the relay to the job's master could not start: {why}") from None
        relay = Relay(pid=pid, start=start, netns=netns.inode, port=RELAY_PORT, target=target,
                      source=RELAY_SOURCE_ADDRESS)
        tmp = record.with_name(record.name + ".tmp")
        tmp.write_text(json.dumps({"pid": pid, "start": start, "netns": netns.inode,
                                   "port": RELAY_PORT, "target": list(target),
                                   "source": RELAY_SOURCE_ADDRESS}))
        os.replace(tmp, record)
        return relay


def _relay_kill(relay: Relay, timeout: float = STOP_SECONDS) -> None:
    """SIGTERM (it closes its sockets and exits), SIGKILL if it has not after ``timeout``;
    returns once it has exited."""
    try:
        pidfd = os.pidfd_open(relay.pid)
    except ProcessLookupError:
        return
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not relay_alive(relay):  # checked after opening the pidfd: this very process
                return
            signal.pidfd_send_signal(pidfd, sig)
            if select.select([pidfd], [], [], timeout)[0]:  # readable once it has exited
                return
    finally:
        os.close(pidfd)


def relay_stop(record: Path) -> None:
    """Stop the relay recorded in ``record`` (it ends by itself once its job's network holder
    has: this waits for that, or makes it so) and remove ``record``."""
    recorded_stop(record, _recorded, _relay_kill)
