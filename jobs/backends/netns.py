"""Network namespaces of their own on the portal's machine, each held by a small process
(``netns_start``): a local job's network (its replicas reach each other on 127.0.0.1 and
nothing on the host's loopback: ``local/sandbox.py``, ``local/relay.py``), and the network of
an install or a build whose one way out is the proxy to the allowed package indexes
(``egress.py``: the local backend's installs, and the buildah builds of both backends).
Standard library only.

A holder runs in a session of its own (it outlives a restart of the portal), named in ``ps``
by ``NETNS_MARKER`` and its label (``holders``), so that what a killed portal left is found
and stopped (``local.backend.leftovers_stop``). Its pid, start time and namespace inode are
recorded in a file; starts and stops take turns with an flock on that file's directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from paddlecloud_core.processes import start_of

NETNS_MARKER = "paddlecloud-netns"


class SandboxError(Exception):
    """A sandbox, or the network it runs in, cannot be made as asked; the message says
    why."""


@dataclass(frozen=True)
class Netns:
    """A job's network namespace and the process holding it: its pid, its start time (clock
    ticks since boot, against a reused pid) and the namespace's inode."""

    pid: int
    start: int
    inode: int


# Run as ``python -I -S -c HOLDER paddlecloud-netns LABEL``: forks (the first process exits,
# so the holder is not the portal's child and init reaps it), makes a user namespace (which
# an unprivileged portal needs to make a network namespace) and a network namespace, brings
# ``lo`` up, prints "pid start inode" and sleeps until killed.
HOLDER = r"""
import ctypes, fcntl, os, signal, socket, struct, sys
if os.fork():
    os._exit(0)
try:
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000 | 0x40000000) != 0:  # CLONE_NEWUSER | CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "unshare: " + os.strerror(ctypes.get_errno()))
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                       ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))  # SIOCSIFFLAGS IFF_UP
    with open("/proc/self/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    print(os.getpid(), start, os.stat("/proc/self/ns/net").st_ino, flush=True)
except Exception as exc:
    print(exc, file=sys.stderr, flush=True)
    os._exit(1)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
os.chdir("/")
while True:
    signal.pause()
"""


# Source code that the relay (``local/relay.py``) and the port dialer (``local/ports.py``), each
# run as ``python -I -S -c``, begin with: ``netns_socket(HOLDER_PID, HOLDER_START, INODE, make)``
# is a socket that ``make()`` made in the user and network namespaces of a job network's holder
# (joined by a child, which sends the socket back with SCM_RIGHTS: the caller stays in the
# machine's network, and a process with threads could not join a user namespace), and a pidfd
# of the holder (readable once it has exited). OSError, with what ``make`` or the joining said,
# when it cannot be made.
NETNS_SOCKET = r"""
import ctypes, os, select, socket


def start_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def exited(pidfd):
    return bool(select.select([pidfd], [], [], 0)[0])


def netns_socket(holder_pid, holder_start, inode, make):
    holder = os.pidfd_open(holder_pid)
    try:
        if start_of(holder_pid) != holder_start:
            raise OSError("the job's network holder is not running")
        user = os.open(f"/proc/{holder_pid}/ns/user", os.O_RDONLY)
        net = os.open(f"/proc/{holder_pid}/ns/net", os.O_RDONLY)
        # Still the holder once they are open: they are its namespaces.
        if exited(holder) or os.fstat(net).st_ino != inode:
            raise OSError("the job's network holder is not running")
        ours, theirs = socket.socketpair()
        child = os.fork()
        if child == 0:
            try:
                ours.close()
                libc = ctypes.CDLL(None, use_errno=True)
                for fd, what in ((user, 0x10000000), (net, 0x40000000)):  # NEWUSER, NEWNET
                    if libc.setns(fd, what) != 0:
                        code = ctypes.get_errno()
                        raise OSError(code, "setns: " + os.strerror(code))
                made = make()
                socket.send_fds(theirs, [b"ok"], [made.fileno()])
                os._exit(0)
            except BaseException as exc:
                theirs.sendall((getattr(exc, "strerror", None) or str(exc)).encode()[:1000])
                os._exit(1)
        theirs.close()
        message, fds, _, _ = socket.recv_fds(ours, 1024, 1)
        os.waitpid(child, 0)
        ours.close()
        os.close(user)
        os.close(net)
        if not fds:
            raise OSError(message.decode(errors="replace") or "no message")
        return socket.socket(fileno=fds[0]), holder
    except BaseException:
        os.close(holder)
        raise
"""


@contextlib.contextmanager
def dir_locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on ``directory`` for the block: starts and stops of what a job's
    ``run/`` records (its network, its relay) take turns."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _netns_recorded(pid_file: Path) -> Netns | None:
    try:
        data = json.loads(Path(pid_file).read_text())
        return Netns(pid=int(data["pid"]), start=int(data["start"]), inode=int(data["inode"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def netns_alive(netns: Netns) -> bool:
    """Whether the holder still runs: the same process (start time), not a zombie, in the
    same namespace."""
    try:
        inode = os.stat(f"/proc/{netns.pid}/ns/net").st_ino
    except OSError:
        return False
    return start_of(netns.pid) == netns.start and inode == netns.inode


def process_argvs() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of every process on this machine that can still be read."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                yield int(entry.name), Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue


def holders() -> list[tuple[int, int, str]]:
    """Every job network holder running on this machine, whoever started it: (pid, start,
    label), its label as ``netns_start`` was given it."""
    found = []
    marker = NETNS_MARKER.encode()
    for pid, argv in process_argvs():
        if len(argv) >= 7 and argv[1:4] == [b"-I", b"-S", b"-c"] and argv[5] == marker:
            start = start_of(pid)
            if start is not None:
                found.append((pid, start, os.fsdecode(argv[6])))
    return found


def holder_kill(pid: int, start: int, timeout: float = 5.0) -> None:
    """Kill the holder ``pid`` (if it is still the process that started at ``start``) and wait
    until it has exited."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if start_of(pid) == start:  # checked after opening the pidfd: this very process
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)


def netns_read(pid_file: Path) -> Netns | None:
    """The job's network recorded in ``pid_file``, if its holder still runs."""
    netns = _netns_recorded(pid_file)
    return netns if netns and netns_alive(netns) else None


def netns_start(pid_file: Path, label: str = "") -> Netns:
    """The job's network: the one recorded in ``pid_file`` (in an existing directory) if its
    holder runs, else a new one, recorded there. The holder runs in a session of its own, so
    it outlives a restart of the portal; ``label`` names it in ``ps``. Starts and stops take
    turns with an flock on the pid file's directory."""
    pid_file = Path(pid_file)
    with dir_locked(pid_file.parent):
        running = netns_read(pid_file)
        if running:
            return running
        result = subprocess.run(  # noqa: S603 - our own holder
            [sys.executable, "-I", "-S", "-c", HOLDER, NETNS_MARKER, label],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, cwd="/",
            start_new_session=True, check=False)
        try:
            pid, start, inode = (int(word) for word in result.stdout.split())
        except ValueError:
            why = result.stderr.strip() or result.stdout.strip() or "no message"
            raise SandboxError(f"the job's network could not be made: {why}") from None
        netns = Netns(pid=pid, start=start, inode=inode)
        if inode == os.stat("/proc/self/ns/net").st_ino:  # never the portal's own network
            _netns_kill(netns)
            raise SandboxError("the job's network could not be made: it is the host's")
        tmp = pid_file.with_name(pid_file.name + ".tmp")
        tmp.write_text(json.dumps({"pid": pid, "start": start, "inode": inode}))
        os.replace(tmp, pid_file)
        return netns


def _netns_kill(netns: Netns, timeout: float = 5.0) -> None:
    if netns_alive(netns):  # in its namespace still: holder_kill checks it is this process
        holder_kill(netns.pid, netns.start, timeout)


def netns_stop(pid_file: Path) -> None:
    """Stop the job's network holder recorded in ``pid_file`` (it has nothing to save: killed
    at once), wait until it has exited, and remove ``pid_file``. Replicas still in the network
    keep it until they end."""
    recorded_stop(pid_file, _netns_recorded, _netns_kill)


def recorded_stop(record: Path, read, kill) -> None:
    """Under the lock of its directory: ``kill`` what ``read`` finds recorded in ``record``
    (a job's network holder, its relay), then remove ``record``."""
    record = Path(record)
    if not record.parent.is_dir():
        return
    with dir_locked(record.parent):
        found = read(record)
        if found:
            kill(found)
        record.unlink(missing_ok=True)
