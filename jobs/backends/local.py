"""The local backend: each replica is a child process on the portal's machine.

Per job, privately under ``var/jobs/<id>/``: a copy of the trainer package (``pkg/``), the
packages of its ``requirements.txt`` (``site-packages/``), and the runners' pid and exit files
(``run/``). In the owner's PFS home: ``jobs/<name>/output/``, with each replica's log in
``node_<index>/train.log`` (trainers) or ``node_<index>/server.log`` (pservers), as the seeds
show. Replicas run with the portal's Python first on PATH. CPU and memory requests are not
enforced on this backend.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import transaction

from ..contract import Paths, Topology
from .base import Backend, BackendError, Observation, Status
from .local_runner import write_json

OUTPUT_MARKER = ".paddlecloud-job"


def job_dir(job) -> Path:
    return settings.VAR_DIR / "jobs" / str(job.pk)


def home_dir(job) -> Path:
    return job.datacenter.pfs_root_path / "home" / job.owner.username


def output_dir(job) -> Path:
    return home_dir(job) / "jobs" / job.name / "output"


def package_dir(job) -> Path:
    """Where the trainer package is on disk (checked when the job was submitted)."""
    from pfs.paths import pfs_area_root, pfs_path_parse

    path = pfs_path_parse(job.package, field="package")
    return pfs_area_root(job.datacenter, path).joinpath(*path.parts)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    return b"local_runner.py" in cmdline  # not a process that took over a recycled pid


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class LocalBackend(Backend):
    name = "local"

    # --- files -----------------------------------------------------------------------------

    def prepare(self, job) -> None:
        private = job_dir(job)
        (private / "run").mkdir(parents=True, exist_ok=True)
        # Two starts of one job (a retried task beside a slow one) take turns.
        with (private / "prepare.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._prepare(job, private)

    def _prepare(self, job, private: Path) -> None:
        output = output_dir(job)
        marker = output / OUTPUT_MARKER
        if output.exists() and (not marker.exists() or marker.read_text() != str(job.pk)):
            # An earlier job of the same name left its output: keep it beside ours.
            earlier = marker.read_text() if marker.exists() else str(int(time.time()))
            output.rename(output.with_name(f"output-{earlier}"))
        output.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(job.pk))

        pkg = private / "pkg"
        if not pkg.exists():
            source = package_dir(job)
            if not source.is_dir():
                raise BackendError(f"the trainer package {job.package} is gone")
            tmp = private / "pkg.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(source, tmp, symlinks=True)
            tmp.rename(pkg)

        requirements = pkg / "requirements.txt"
        site = private / "site-packages"
        if requirements.exists() and not site.exists():
            log = output / "setup.log"
            tmp = private / "site-packages.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            with log.open("ab") as out:
                out.write(b"installing requirements.txt\n")
                out.flush()
                result = subprocess.run(  # noqa: S603 - pip on the user's own requirements
                    [sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                     "--no-input", "--target", str(tmp), "-r", str(requirements)],
                    stdout=out, stderr=subprocess.STDOUT, cwd=pkg, timeout=1800, check=False)
            if result.returncode != 0:
                raise BackendError("requirements.txt could not be installed "
                                   f"(pip exited {result.returncode}); see output/setup.log")
            tmp.rename(site)

    def paths(self, job) -> Paths:
        return Paths(output=str(output_dir(job)), pfs_home=str(home_dir(job)),
                     pfs_public=str(job.datacenter.public_path))

    def log_path(self, job, replica) -> Path:
        kind = "train" if replica.role == "trainer" else "server"
        return output_dir(job) / f"node_{replica.index}" / f"{kind}.log"

    def cleanup(self, job) -> None:
        shutil.rmtree(job_dir(job), ignore_errors=True)

    def orphans_stop(self, known_job_ids: set[int], grace: float) -> int:
        root = settings.VAR_DIR / "jobs"
        if not root.is_dir():
            return 0
        found = 0
        for private in root.iterdir():
            if not private.name.isdigit() or int(private.name) in known_job_ids:
                continue
            found += 1
            started = [_read_json(pid_file) for pid_file in (private / "run").glob("*.pid")]
            _stop_groups([s["pid"] for s in started if s], grace)
            shutil.rmtree(private, ignore_errors=True)
        return found

    # --- processes -------------------------------------------------------------------------

    def topology(self, job, replicas) -> Topology:
        with transaction.atomic():
            for replica in replicas:
                if not replica.endpoint:
                    replica.host = "127.0.0.1"
                    replica.endpoint = f"127.0.0.1:{_free_port()}"
                    replica.save(update_fields=["host", "endpoint"])
        pservers = tuple(r.endpoint for r in replicas if r.role == "pserver")
        trainers = tuple(r.endpoint for r in replicas if r.role == "trainer")
        master = None
        if not pservers:
            master_file = job_dir(job) / "master"
            if not master_file.exists():
                master_file.parent.mkdir(parents=True, exist_ok=True)
                master_file.write_text(f"127.0.0.1:{_free_port()}")
            master = master_file.read_text()
        return Topology(pservers=pservers, trainers=trainers, master=master)

    def _files(self, job, replica) -> tuple[Path, Path]:
        run = job_dir(job) / "run"
        return run / f"{replica.name}.pid", run / f"{replica.name}.exit"

    def start(self, job, replica, env: dict[str, str]) -> str:
        pid_file, exit_file = self._files(job, replica)
        started = _read_json(pid_file)
        if started and started.get("attempt") == replica.restarts:
            return f"pid:{started['pid']}"  # this attempt is running or has run: not twice
        if exit_file.exists():
            exit_file.unlink()
        pkg = job_dir(job) / "pkg"
        site = job_dir(job) / "site-packages"
        full_env = {
            "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(home_dir(job)),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(site) if site.exists() else "",
                                                      str(pkg)) if p),
            **env,
        }
        runner = Path(__file__).with_name("local_runner.py")
        # The runner's own complaints (not the job's output) go beside its pid file.
        with (pid_file.parent / f"{replica.name}.runner.log").open("ab") as runner_log:
            process = subprocess.Popen(  # noqa: S603 - running the user's entry is the point
                [sys.executable, str(runner), "--state", str(pid_file.parent),
                 "--name", replica.name, "--attempt", str(replica.restarts),
                 "--log", str(self.log_path(job, replica)), "--", "/bin/sh", "-c", job.entry],
                cwd=pkg, env=full_env, start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=runner_log, stderr=runner_log)
        # Recorded at once, so that a retried start finds this attempt already running.
        write_json(pid_file, {"pid": process.pid, "attempt": replica.restarts,
                              "started": time.time()})
        return f"pid:{process.pid}"

    def observe(self, job, replica) -> Observation:
        pid_file, exit_file = self._files(job, replica)
        ended = _read_json(exit_file)
        if ended and ended.get("attempt") == replica.restarts:
            return Observation(Status.EXITED, ended["code"])
        started = _read_json(pid_file)
        if not started or started.get("attempt") != replica.restarts:
            return Observation(Status.NOT_STARTED)
        if runner_alive(started["pid"]):
            return Observation(Status.RUNNING)
        ended = _read_json(exit_file)  # it may have ended since we looked
        if ended and ended.get("attempt") == replica.restarts:
            return Observation(Status.EXITED, ended["code"])
        return Observation(Status.LOST)

    def stop(self, job, replicas, grace: float) -> None:
        groups = []
        for replica in replicas:
            started = _read_json(self._files(job, replica)[0])
            if started:
                groups.append(started["pid"])
        _stop_groups(groups, grace)


def _live(pgid: int) -> bool:
    return runner_alive(pgid) or _group_exists(pgid)


def _wait_until_empty(groups: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while groups and time.monotonic() < deadline:
        groups = [pgid for pgid in groups if _live(pgid)]
        if groups:
            time.sleep(0.05)
    return groups


def _stop_groups(groups: list[int], grace: float) -> None:
    """SIGTERM to each process group, SIGKILL after ``grace`` seconds. Done when every group
    is empty: the runner and everything the command started."""
    groups = [pgid for pgid in groups if _live(pgid)]
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    for pgid in _wait_until_empty(groups, grace):
        _signal_group(pgid, signal.SIGKILL)
    _wait_until_empty(groups, 5.0)


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
