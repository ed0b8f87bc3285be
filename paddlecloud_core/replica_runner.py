"""Runs one replica attempt on the local backend and records how it ended.

    python replica_runner.py --state DIR --name trainer-0 --attempt 0 \
        --log-fd 3 [--stdin-fd 4] -- sh -c "python train.py"

The backend starts it in a new session, so the runner and the command share one process
group and a signal to the group reaches both; the backend records the runner's pid in
``NAME.pid``. The replica's log comes open (``--log-fd``, opened for appending by whoever
started the runner): the runner never resolves a path in a user's home. The command's stdin is
``/dev/null``, or what ``--stdin-fd`` is open on (a memfd: a sandbox's bwrap reads the
replica's environment there, which must not be on a command line), which the runner closes
as soon as the command has it. The runner writes ``NAME.exit`` (the command's exit code, or
minus the signal that ended it) when the command ends, so the portal can tell what happened
even if it was not running at that moment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


PR_SET_CHILD_SUBREAPER = 36
CLEANUP_GRACE = 5.0


def become_subreaper() -> None:
    """Orphaned descendants of the command are re-parented to us (not to pid 1, which in a
    container may never reap them), so we can reap them."""
    try:
        # Here, not at the top: the portal imports this module too (``processes``), and only
        # the runner's own process needs ctypes.
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go to init as usual
        pass


def clear_group() -> None:
    """End what the command left behind in our process group, and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgrp(), signal.SIGTERM)  # we ignore it ourselves
    deadline = time.monotonic() + CLEANUP_GRACE
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # nothing left
        if pid == 0:
            time.sleep(0.05)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # stubborn leftovers, and us with them


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="replica_runner")
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--attempt", required=True, type=int)
    parser.add_argument("--log-fd", required=True, type=int)
    parser.add_argument("--stdin-fd", type=int)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    # A signal to the group reaches the command directly; the runner stays to record the end.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    become_subreaper()
    with os.fdopen(args.log_fd, "ab") as log:
        if args.attempt:
            log.write(f"\n--- restart {args.attempt} ---\n".encode())
            log.flush()
        stdin = subprocess.DEVNULL if args.stdin_fd is None else args.stdin_fd
        try:
            child = subprocess.Popen(  # noqa: S603 - the job's own entry command
                command, stdout=log, stderr=subprocess.STDOUT, stdin=stdin)
        except OSError as exc:
            child = None
            log.write(f"cannot start {command[0] if command else ''!r}: {exc}\n".encode())
        finally:
            if args.stdin_fd is not None:
                os.close(args.stdin_fd)  # the command has its own copy: keep nothing of it
        code = child.wait() if child else 127
    write_json(args.state / f"{args.name}.exit",
               {"attempt": args.attempt, "code": code, "ended": time.time()})
    clear_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
