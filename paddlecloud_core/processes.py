"""Replicas as local processes: what the portal's local backend and ``paddlectl local train``
share.

Each attempt of a replica runs under ``replica_runner.py`` in a new session, so the runner and
everything the command starts share one process group; the runner writes the command's output
to the replica's log (a descriptor it is given: it never opens a path in a user's home) and
its exit code to ``NAME.exit`` in a run directory, beside the
``NAME.pid`` written here. What the command reads on its stdin (a sandbox's bwrap: the
replica's environment, secrets included) is handed over in memory (``memory_fd``), never on a
command line — any user of the host can read those in ``/proc`` — nor in a file. Stopping is
per process group: SIGTERM, then SIGKILL after a grace period. Endpoints are free ports on
127.0.0.1.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .replica_runner import write_json
from .status import Observation, Status

LOCAL_HOST = "127.0.0.1"
RUNNER = Path(__file__).with_name("replica_runner.py")


# --- endpoints, logs, commands, environment ----------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCAL_HOST, 0))
        return sock.getsockname()[1]


def free_endpoints(count: int, *, taken: Iterable[str] = ()) -> list[str]:
    """``count`` endpoints on 127.0.0.1 free now, all different and none of ``taken``: each
    port is held bound until all are found (one closed at once could come back next)."""
    taken = set(taken)
    held: list[socket.socket] = []
    found: list[str] = []
    try:
        while len(found) < count:
            sock = socket.socket()
            held.append(sock)
            sock.bind((LOCAL_HOST, 0))
            endpoint = f"{LOCAL_HOST}:{sock.getsockname()[1]}"
            if endpoint not in taken:
                found.append(endpoint)
        return found
    finally:
        for sock in held:
            sock.close()


def entry_argv(entry: str) -> list[str]:
    """The job's entry is a shell command."""
    return ["/bin/sh", "-c", entry]


def process_env(env: Mapping[str, str], *, path: str, home: str, pythonpath: Sequence[str],
                base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a replica's process: ``base`` (nothing on the portal, the
    user's own environment for ``paddlectl local train``), then PATH, HOME, LANG and
    PYTHONPATH, then the contract's ``env``, which always wins."""
    base = dict(base or {})
    return {
        **base,
        "PATH": path,
        "HOME": home,
        "LANG": base.get("LANG") or os.environ.get("LANG", "C.UTF-8"),
        "PYTHONPATH": os.pathsep.join(p for p in pythonpath if p),
        **env,
    }


# --- starting and observing attempts -------------------------------------------------------------

def memory_fd(data: bytes) -> int:
    """A new descriptor (close-on-exec) open on a copy of ``data`` held in memory only (a
    sealed memfd, read from its start): how a child is given bytes that must be in no file
    and on no command line. Readers see the end of ``data`` as an end of file: nothing waits
    on a writer. The caller closes it."""
    fd = os.memfd_create("paddlecloud-stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK
                    | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def attempt_files(run_dir: Path, name: str) -> tuple[Path, Path]:
    """The pid file (written when the attempt starts) and exit file (written by the runner)."""
    return run_dir / f"{name}.pid", run_dir / f"{name}.exit"


def attempt_start(run_dir: Path, name: str, attempt: int, log: int, command: Sequence[str],
                  *, cwd: Path | str, env: Mapping[str, str], stdin: bytes | None = None) -> int:
    """Start ``command`` under the runner in a new session, its output appended to the open
    file ``log`` (a descriptor the caller opened, and still owns); returns the runner's pid,
    which is also the process group's id. The command reads ``stdin`` on its stdin (a
    sandbox's bwrap, its arguments that must not be on a command line: the environment), else
    ``/dev/null``; the runner gets it on a descriptor (``memory_fd``) and passes it on. The
    runner's own complaints (not the replica's output) go to ``run_dir/NAME.runner.log``."""
    pid_file, exit_file = attempt_files(run_dir, name)
    if exit_file.exists():
        exit_file.unlink()
    given = memory_fd(stdin) if stdin is not None else None
    try:
        with (run_dir / f"{name}.runner.log").open("ab") as runner_log:
            process = subprocess.Popen(  # noqa: S603 - running the user's entry is the point
                [sys.executable, str(RUNNER), "--state", str(run_dir), "--name", name,
                 "--attempt", str(attempt), "--log-fd", str(log),
                 *(["--stdin-fd", str(given)] if given is not None else []), "--", *command],
                cwd=cwd, env=dict(env), start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=runner_log, stderr=runner_log,
                pass_fds=(log,) if given is None else (log, given))
    finally:
        if given is not None:
            os.close(given)  # the runner has its own
    # Recorded at once, so that a retried start finds this attempt already running.
    write_json(pid_file, {"pid": process.pid, "attempt": attempt, "started": time.time()})
    return process.pid


def attempt_observe(run_dir: Path, name: str, attempt: int) -> Observation:
    """What has become of the attempt: not started, running, exited (with its code), lost."""
    pid_file, exit_file = attempt_files(run_dir, name)
    ended = read_json(exit_file)
    if ended and ended.get("attempt") == attempt:
        return Observation(Status.EXITED, ended["code"])
    started = read_json(pid_file)
    if not started or started.get("attempt") != attempt:
        return Observation(Status.NOT_STARTED)
    if runner_alive(started["pid"]):
        return Observation(Status.RUNNING, ref=f"pid:{started['pid']}")
    ended = read_json(exit_file)  # it may have ended since we looked
    if ended and ended.get("attempt") == attempt:
        return Observation(Status.EXITED, ended["code"])
    return Observation(Status.LOST)


def exit_reason(code: int | None) -> str:
    """An exit status as a user understands it."""
    if code is None:
        return "ended without an exit status"
    if code == 0:
        return "exited 0"
    sig = -code if code < 0 else code - 128 if 128 < code < 160 else None
    if code == 127:
        return "command not found (exit 127): check the job's entry command"
    if code == 126:
        return "command cannot be executed (exit 126): check its permissions"
    if sig == signal.SIGKILL:
        return (f"killed (SIGKILL, exit {code}): often the out-of-memory killer; "
                "ask for more memory")
    if sig == signal.SIGSEGV:
        return f"segmentation fault (exit {code})"
    if sig == signal.SIGTERM:
        return f"terminated (SIGTERM, exit {code})"
    if sig == signal.SIGABRT:
        return f"aborted (SIGABRT, exit {code})"
    if sig is not None and 0 < sig < signal.NSIG:
        return f"ended by signal {signal.Signals(sig).name} (exit {code})"
    return f"exited with code {code}"


# --- processes ---------------------------------------------------------------------------------

def start_of(pid: int) -> int | None:
    """A process's start time (clock ticks since boot), None when it is gone (or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[19])


def _machine() -> str:
    """This boot of this machine and this process's pid namespace: where a pid means one
    process."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def process_identity() -> str:
    """This process, as another can later tell whether it still runs (``process_gone``)."""
    return f"{_machine()}:{os.getpid()}:{start_of(os.getpid())}"


def process_gone(identity: str) -> bool:
    """Whether the process ``process_identity`` named has ended, for sure: False when it runs,
    or when it is of another machine or pid namespace (this one cannot tell)."""
    machine, pid, start = ([*identity.rsplit(":", 2), "", ""])[:3]
    if not machine or machine != _machine() or not pid.isdigit():
        return False
    return str(start_of(int(pid))) != start


# --- process groups -------------------------------------------------------------------------------

def runner_alive(pid: int) -> bool:
    """Whether the runner with this pid still runs (reaping it if it is our zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's process took the pid
        return False
    try:  # a zombie has exited: reap it if it is ours
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        reaped = 0
    if reaped:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    if not cmdline:
        # Empty for a moment while the runner is still being exec'd, and for a zombie that is
        # not ours: the state tells them apart.
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        return state != "Z"
    return RUNNER.name.encode() in cmdline  # not a process that took over a recycled pid


def group_live(pgid: int) -> bool:
    return runner_alive(pgid) or group_exists(pgid)


def groups_wait(groups: list[int], seconds: float) -> list[int]:
    """Wait until the groups are empty, at most ``seconds``; returns those that are not."""
    deadline = time.monotonic() + seconds
    while groups and time.monotonic() < deadline:
        groups = [pgid for pgid in groups if group_live(pgid)]
        if groups:
            time.sleep(0.05)
    return groups


def groups_stop(groups: list[int], grace: float) -> None:
    """SIGTERM to each process group, SIGKILL after ``grace`` seconds. Done when every group
    is empty: the runner and everything the command started."""
    groups = [pgid for pgid in groups if group_live(pgid)]
    for pgid in groups:
        group_signal(pgid, signal.SIGTERM)
    for pgid in groups_wait(groups, grace):
        group_signal(pgid, signal.SIGKILL)
    groups_wait(groups, 5.0)


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def group_signal(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
