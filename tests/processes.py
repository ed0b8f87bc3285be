"""Running the portal's own commands in fresh interpreters, as a user would, with a clean
configuration: none of the test run's DATABASE_URL / REDIS_URL / … unless a test gives them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from jobs.backends.netns import holders

ROOT = Path(__file__).resolve().parent.parent
CONFIG_VARS = ("DATABASE_URL", "REDIS_URL", "PADDLECLOUD_BACKEND", "SECRET_KEY", "DEBUG",
               "ALLOWED_HOSTS", "PADDLECLOUD_PFS_ROOT", "PADDLECLOUD_VAR_DIR")


def clean_env(var_dir: Path, **env: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS}
    clean.update({"DJANGO_SETTINGS_MODULE": "paddlecloud.settings",
                  "PADDLECLOUD_VAR_DIR": str(var_dir), **env})
    return clean


def run_python(args: list[str], var_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """``python ARGS`` in the checkout (``["manage.py", …]`` or ``["-c", code]``)."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=clean_env(var_dir, **env),
                          capture_output=True, text=True, timeout=120)


def processes_naming(*texts: str) -> list[int]:
    """The processes, but this one, whose command line holds every one of ``texts`` (a path of
    the test's: what a test must not leave running). A zombie's command line is empty."""
    wanted = [text.encode() for text in texts]
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if all(text in cmdline for text in wanted):
            found.append(int(proc.name))
    return found


def probe_holders(prober: int) -> list[int]:
    """The network holders of the sandbox probe that process ``prober`` runs, once they hold
    a network (in a namespace of their own: not the holder's first process, which forks and
    exits, nor the holder before it unshares)."""
    ours = network_of(os.getpid())
    return [pid for pid, _, label in holders()
            if label.startswith(f"probe:{prober}:") and network_of(pid) not in (None, ours)]


def network_of(pid: int) -> int | None:
    """The network namespace (inode) of process ``pid``; None once it is gone."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def process_stop(process: subprocess.Popen, sig: int = signal.SIGTERM,
                 timeout: float = 10) -> None:
    """Stop a process the test started: ``sig``, then SIGKILL if it has not exited after
    ``timeout`` seconds; returns once it has."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

