"""A command run in a running replica on the local backend (``paddlectl exec``, the job page's
terminal): it enters the replica's sandbox and runs as the replica runs.

The replica's runner (its pid in the job's ``run/``) starts, in a sandbox (``sandbox.py``),
bwrap, whose pid 1 in the sandbox starts the replica's command. ``ENTER``, a small program of
the portal's Python run outside the sandbox, joins the namespaces of that pid 1 (user where it
has one, cgroup, ipc, uts, network, pid and mount; its root and then the command's working
directory), forks into the sandbox's pid namespace, and the child becomes what the command is:
its uid and gid as the sandbox sees them, no supplementary groups, no capability (bounding,
ambient, permitted, effective), ``no_new_privs``, and exactly the environment the command was
started with (read from ``/proc``: never on a command line). So a command run there sees what
the replica sees, reaches what it reaches and can do nothing it could not. It dies with the
sandbox (it is in its pid namespace) and with ``ENTER`` (its parent-death signal). A replica
that runs without a sandbox has no namespaces of its own: the command runs as it does (the
portal's user), with its environment and working directory.

With a terminal, the child makes a pty in the sandbox (its ``/dev/pts``, so the command's
terminal has a name there, as ``tty`` prints), makes it its stdin, stdout, stderr and
controlling terminal (in a session of its own) and sends its master back to the portal on a
socket; without one, pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import socket
import struct
import sys
import termios
from pathlib import Path

from paddlecloud_core.processes import runner_alive, start_of

from ..base import BackendError, ExecProcess

EXEC_FAILED = 126  # the command could not be started (or the worker was gone): as a shell says
NOT_FOUND = 127
ENDED_GRACE = 1.0  # output a command's leftovers (a background process) still send once it ended
CHUNK = 65536

# python -I -S -c ENTER paddlecloud-exec NS_PID NS_START MAIN_PID MAIN_START TERM|"" COLSxROWS|""
#   TERMINAL_FD|"" -- ARGV…
ENTER = r"""
import ctypes, fcntl, os, signal, socket, struct, sys, termios
libc = ctypes.CDLL(None, use_errno=True)
NAMESPACES = (("user", 0x10000000), ("cgroup", 0x02000000), ("ipc", 0x08000000),
              ("uts", 0x04000000), ("net", 0x40000000), ("pid", 0x20000000), ("mnt", 0x00020000))
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL, TIOCSCTTY, CAP_VERSION_3 = 4, 0x540E, 0x20080522
_, _, ns_pid, ns_start, main_pid, main_start, term, size, terminal, _, *argv = sys.argv
ns_pid, main_pid = int(ns_pid), int(main_pid)
terminal = socket.socket(fileno=int(terminal)) if terminal else None


def fail(message, code=126):
    os.write(2, ("paddlecloud exec: " + message + "\n").encode(errors="replace"))
    os._exit(code)


def start_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def running():
    return start_of(ns_pid) == ns_start and start_of(main_pid) == main_start


def call(result, what):
    if result != 0:
        code = ctypes.get_errno()
        fail(f"{what}: {os.strerror(code)}")


try:
    joined = []
    for name, flag in NAMESPACES:
        if os.stat(f"/proc/{ns_pid}/ns/{name}").st_ino != os.stat(f"/proc/self/ns/{name}").st_ino:
            joined.append((os.open(f"/proc/{ns_pid}/ns/{name}", os.O_RDONLY), flag, name))
    root = os.open(f"/proc/{ns_pid}/root", os.O_RDONLY | os.O_DIRECTORY)
    cwd = os.open(f"/proc/{main_pid}/cwd", os.O_RDONLY | os.O_DIRECTORY)
    with open(f"/proc/{main_pid}/environ", "rb") as f:
        environ = f.read()
except OSError:
    fail("the worker is not running")
if not running():  # what was opened is theirs: not a process that took a pid since
    fail("the worker is not running")
env = dict(item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item)
if term:
    env[b"TERM"] = term.encode()


def ids():
    # The command's uid and gid as the namespace this process is in numbers them.
    with open(f"/proc/{main_pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    return int(status["Uid"].split()[1]), int(status["Gid"].split()[1])


uid, gid = ids()
for fd, flag, name in joined:
    call(libc.setns(fd, flag), "cannot enter the worker's " + name + " namespace")
    os.close(fd)
    if name == "user":
        uid, gid = ids()
os.fchdir(root)
os.chroot(".")
os.fchdir(cwd)
os.close(root)
os.close(cwd)
child = os.fork()
if child == 0:
    parent = os.getppid()  # 0: outside its pid namespace; another once this one has died
    try:
        os.setsid()
        cap = 0
        while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
            cap += 1
        try:
            os.setgroups([])
        except PermissionError:  # a user namespace that denies setgroups (set up so)
            pass
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
        data = (ctypes.c_uint32 * 6)()
        call(libc.capset(header, data), "cannot drop capabilities")
        call(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "ambient")
        call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        call(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent death signal")
        if os.getppid() != parent:
            os._exit(126)
        if terminal is not None:  # a pty of the sandbox's own, its master to the portal
            master, slave = os.openpty()
            if size:
                cols, rows = (int(n) for n in size.split("x"))
                fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            socket.send_fds(terminal, [b"t"], [master])
            os.close(master)
            terminal.close()
            call(libc.ioctl(slave, TIOCSCTTY, 0), "cannot take the terminal")
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            os.close(slave)
    except OSError as exc:
        fail(str(exc))
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        fail(argv[0] + ": command not found", 127)
    except OSError as exc:
        fail(argv[0] + ": " + (exc.strerror or str(exc)), 126)


if terminal is not None:
    terminal.close()  # the child's alone: closed, the portal knows it gave none


def end(*_):
    try:
        os.killpg(child, signal.SIGKILL)
    except OSError:
        pass
    os.kill(child, signal.SIGKILL)


signal.signal(signal.SIGTERM, end)
signal.signal(signal.SIGHUP, end)
signal.signal(signal.SIGINT, signal.SIG_IGN)
null = os.open("/dev/null", os.O_RDWR) if os.path.exists("/dev/null") else -1
for fd in (0, 1, 2):  # the command's alone: its end is theirs
    if null >= 0:
        os.dup2(null, fd)
    else:
        os.close(fd)
while True:
    try:
        _, status = os.waitpid(child, 0)
        break
    except InterruptedError:
        continue
    except ChildProcessError:
        status = 126 << 8
        break
os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status)
         else 128 + os.WTERMSIG(status))
"""


def _children() -> dict[int, list[int]]:
    """Every process's children, by pid (read from /proc once)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _pid_ns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def replica_processes(runner: int) -> tuple[int, int]:
    """Of a running replica's runner: the process whose namespaces the replica's are (the
    sandbox's pid 1; without a sandbox, the command itself) and the replica's command (the
    sandbox's pid 2). ``BackendError`` when they are not there (it has ended, or not begun)."""
    children = _children()
    ours = _pid_ns(os.getpid())
    first = sorted(children.get(runner, ()))
    if not first:
        raise BackendError("the worker is not running")
    # Down the chain (env, nsenter and bwrap are one process) to the sandbox's pid 1.
    seen, pid = 0, first[0]
    while True:
        if _pid_ns(pid) not in (ours, None):
            init = pid
            main = sorted(children.get(init, ()))
            if not main:
                raise BackendError("the worker is not running (its sandbox is starting "
                                   "or ending)")
            return init, main[0]
        below = sorted(children.get(pid, ()))
        seen += 1
        if not below or seen > 3:  # no sandbox: the runner's child is the command
            return first[0], first[0]
        pid = below[0]


def enter_argv(runner: int, argv: list[str], *, term: str | None = None,
               size: tuple[int, int] | None = None, terminal: int | None = None) -> list[str]:
    """The command line of ``ENTER`` that runs ``argv`` in the replica the runner runs; with
    ``terminal`` (a socket's descriptor), in a pty made in the sandbox (TERM ``term``, of
    ``size``), whose master comes back on that socket."""
    if not argv or not argv[0]:
        raise BackendError("command: give the program to run (e.g. bash)")
    if any("\0" in arg for arg in argv):
        raise BackendError("command: an argument has a NUL byte")
    init, main = replica_processes(runner)
    starts = start_of(init), start_of(main)
    if None in starts:
        raise BackendError("the worker is not running")
    return [sys.executable, "-I", "-S", "-c", ENTER, "paddlecloud-exec", str(init),
            str(starts[0]), str(main), str(starts[1]), term or "",
            f"{size[0]}x{size[1]}" if size else "", "" if terminal is None else str(terminal),
            "--", *argv]


def _winsize(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class LocalExec(ExecProcess):
    """``ENTER`` as a child of the portal, its outputs read as they come."""

    def __init__(self, process: asyncio.subprocess.Process, master: int | None):
        self.process, self.master = process, master
        self.queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue(16)
        self.readers = []
        loop = asyncio.get_running_loop()
        if master is not None:
            self.readers.append(loop.create_task(self._pty()))
        if process.stdout is not None:
            self.readers.append(loop.create_task(self._pipe(process.stdout, self.STDOUT)))
        # ENTER's own complaints (the worker gone); with a terminal, the command's are on it.
        self.readers.append(loop.create_task(self._pipe(process.stderr, self.STDERR)))
        self.done = loop.create_task(self._end())

    @classmethod
    async def start(cls, runner: int, argv: list[str], *, tty: bool,
                    size: tuple[int, int] | None, term: str) -> LocalExec:
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        if not tty:
            process = await asyncio.create_subprocess_exec(
                *enter_argv(runner, argv), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
                cwd="/", start_new_session=True)
            return cls(process, None)
        # The pty is made in the sandbox (its /dev/pts: the command's terminal is one it can
        # name), and its master sent back on this socket.
        ours, theirs = socket.socketpair()
        with ours:
            try:
                process = await asyncio.create_subprocess_exec(
                    *enter_argv(runner, argv, term=term, size=size, terminal=theirs.fileno()),
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE, env=env, cwd="/", start_new_session=True,
                    pass_fds=(theirs.fileno(),))
            finally:
                theirs.close()
            _, fds, _, _ = await asyncio.to_thread(socket.recv_fds, ours, 16, 1)
        master = fds[0] if fds else None  # none: it failed before, and says why on stderr
        if master is not None:
            os.set_blocking(master, False)
        return cls(process, master)

    async def _pipe(self, stream: asyncio.StreamReader, channel: int) -> None:
        while data := await stream.read(CHUNK):
            await self.queue.put((channel, data))

    async def _pty(self) -> None:
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(self.master, readable.set)
        try:
            while True:
                await readable.wait()
                readable.clear()
                try:
                    data = os.read(self.master, CHUNK)
                except BlockingIOError:
                    continue
                except OSError:  # EIO: every side of the terminal is closed
                    return
                if not data:
                    return
                await self.queue.put((self.STDOUT, data))
        finally:
            loop.remove_reader(self.master)

    async def _end(self) -> None:
        """The end of the output: when the readers have read it all, or ENDED_GRACE after the
        command has ended (what it left running may hold its outputs open)."""
        readers = asyncio.gather(*self.readers, return_exceptions=True)
        waiting = asyncio.ensure_future(self.process.wait())
        await asyncio.wait([readers, waiting], return_when=asyncio.FIRST_COMPLETED)
        if not readers.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(readers), ENDED_GRACE)
        for reader in self.readers:
            reader.cancel()
        await self.queue.put((0, b""))

    async def read(self) -> tuple[int, bytes]:
        item = await self.queue.get()
        if item[0] == 0:
            await self.queue.put(item)  # every later read says the same
        return item

    async def write(self, data: bytes) -> None:
        if self.master is not None:
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self.master, view):]
                except BlockingIOError:
                    await asyncio.sleep(0.01)
                except OSError:
                    return
            return
        if self.process.stdin is None:  # a terminal that could not be made
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            self.process.stdin.write(data)
            await self.process.stdin.drain()

    async def write_end(self) -> None:
        if self.master is not None:
            with contextlib.suppress(OSError):
                os.write(self.master, b"\x04")  # Ctrl-D: the end, for a program reading lines
            return
        if self.process.stdin is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                self.process.stdin.close()

    async def resize(self, cols: int, rows: int) -> None:
        if self.master is not None:
            with contextlib.suppress(OSError):
                _winsize(self.master, cols, rows)

    async def wait(self) -> int:
        await asyncio.shield(self.done)
        return await self.process.wait()

    async def close(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)  # it kills the command and ends
            try:
                await asyncio.wait_for(self.process.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()  # the command's parent-death signal kills it
                await self.process.wait()
        for reader in self.readers:
            reader.cancel()
        self.done.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.done
        if self.master is not None:
            master, self.master = self.master, None
            os.close(master)
        if self.process.stdin is not None:
            self.process.stdin.close()


async def exec_start(runner: int, argv: list[str], *, tty: bool,
                     size: tuple[int, int] | None, term: str) -> LocalExec:
    """Run ``argv`` in the replica the (live) runner ``runner`` runs (see above)."""
    if not runner_alive(runner):
        raise BackendError("the worker is not running")
    return await LocalExec.start(runner, argv, tty=tty, size=size, term=term)
