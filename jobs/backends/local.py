"""The local backend: each replica is a child process on the portal's machine.

Per job, privately under ``var/jobs/<uid>/`` (the job's uid, never its database id, which a
new database gives out again): a copy of the trainer package (``pkg/``), the packages of its
``requirements.txt`` (``site-packages/``), and the runners' pid and exit files (``run/``).
In the owner's PFS home: ``jobs/<name>/output/``, with each replica's log in
``node_<index>/train.log`` (trainers) or ``node_<index>/server.log`` (pservers), as the seeds
show; the portal opens each log (``files.output_open``) and hands the runner the descriptor.
Replicas run with the portal's Python first on PATH. CPU and memory requests are not
enforced on this backend. Starting, observing and stopping the processes is
``processes.py``, which ``paddlectl local train`` uses too.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.db import transaction

from ..contract import Paths, Topology
from .base import Backend, BackendError, Observation
from .files import home_dir, output_dir, output_open, output_prepare, package_copy
from .processes import (
    attempt_files,
    attempt_observe,
    attempt_start,
    entry_argv,
    free_endpoint,
    groups_stop,
    log_relpath,
    process_env,
    read_json,
)
from .processes import runner_alive as runner_alive  # the tests' and callers' name


def job_dir(job) -> Path:
    return jobs_root() / str(job.uid)


def jobs_root() -> Path:
    return settings.VAR_DIR / "jobs"


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
        output_prepare(job)

        pkg = private / "pkg"
        if not pkg.exists():
            tmp = private / "pkg.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            package_copy(job, tmp)
            tmp.rename(pkg)

        requirements = pkg / "requirements.txt"
        site = private / "site-packages"
        if requirements.is_file() and not site.exists():
            tmp = private / "site-packages.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            with os.fdopen(output_open(job, "setup.log"), "ab") as out:
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

    def cleanup(self, job) -> None:
        shutil.rmtree(job_dir(job), ignore_errors=True)

    def orphans_stop(self, known_uids: set[str], grace: float) -> int:
        root = jobs_root()
        if not root.is_dir():
            return 0
        found = 0
        for private in root.iterdir():
            if private.name in known_uids:
                continue
            found += 1
            started = [read_json(pid_file) for pid_file in (private / "run").glob("*.pid")]
            groups_stop([s["pid"] for s in started if s], grace)
            shutil.rmtree(private, ignore_errors=True)
        return found

    # --- processes -------------------------------------------------------------------------

    def topology(self, job, replicas) -> Topology:
        with transaction.atomic():
            for replica in replicas:
                if not replica.endpoint:
                    replica.host = "127.0.0.1"
                    replica.endpoint = free_endpoint()
                    replica.save(update_fields=["host", "endpoint"])
        pservers = tuple(r.endpoint for r in replicas if r.role == "pserver")
        trainers = tuple(r.endpoint for r in replicas if r.role == "trainer")
        master = None
        if not pservers:
            master_file = job_dir(job) / "master"
            if not master_file.exists():
                master_file.parent.mkdir(parents=True, exist_ok=True)
                master_file.write_text(free_endpoint())
            master = master_file.read_text()
        return Topology(pservers=pservers, trainers=trainers, master=master)

    def _files(self, job, replica) -> tuple[Path, Path]:
        return attempt_files(job_dir(job) / "run", replica.name)

    def start(self, job, replica, env: dict[str, str]) -> str:
        pid_file, _ = self._files(job, replica)
        started = read_json(pid_file)
        if started and started.get("attempt") == replica.restarts:
            return f"pid:{started['pid']}"  # this attempt is running or has run: not twice
        pkg = job_dir(job) / "pkg"
        site = job_dir(job) / "site-packages"
        path = f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        full_env = process_env(env, path=path, home=str(home_dir(job)),
                               pythonpath=(str(site) if site.exists() else "", str(pkg)))
        log = output_open(job, log_relpath(replica.role, replica.index))
        try:
            pid = attempt_start(pid_file.parent, replica.name, replica.restarts, log,
                                entry_argv(job.entry), cwd=pkg, env=full_env)
        finally:
            os.close(log)
        return f"pid:{pid}"

    def observe(self, job, replica) -> Observation:
        return attempt_observe(job_dir(job) / "run", replica.name, replica.restarts)

    def stop(self, job, replicas, grace: float) -> None:
        groups = []
        for replica in replicas:
            started = read_json(self._files(job, replica)[0])
            if started:
                groups.append(started["pid"])
        groups_stop(groups, grace)
