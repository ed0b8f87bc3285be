"""Environments keyed by their contents (issue 19): the installed result of a trainer package's
``requirements.txt``, built once per datacenter and shared by every job that needs the same.

What is installed is read as data and named by its digest as on every backend
(``jobs/backends/environments.py``); here the digest also covers the Python it is for
(version, ABI, platform, its path: scripts' ``#!`` name it), the installer and its version and
flags, and the index settings (``PIP_*``/``UV_*`` variables, the machine's ``pip.conf``):
``env_inputs``. A requirement left unpinned is frozen at its first build: what a digest names
does not change while it is cached.

Where: ``var/envs/<datacenter>/<digest>/site-packages`` — under the portal's private ``var/``,
never in PFS, where users write: a job sees its environment only as a read-only bind, and no
job, nor its owner, can change what another user's job will import. (Kubernetes pods cannot see
``var/``: theirs are in their owner's PFS home, keyed by ``image_env_inputs``'s digest, built by
the pods' init step: ``kubernetes/scripts.py``.)

How it is built (``env_ensure``), with a lock file per digest (``flock``: across processes, and
let go by the kernel when a builder dies):

- found: the job uses it (its ``used`` stamp is touched: the LRU order);
- not found: the job builds it into ``<digest>.tmp-…`` and renames it into place only when the
  install succeeded, so a half-built environment is never used (a dead builder's leftovers are
  removed by the next);
- jobs that wait for the lock while another builds take its result: the environment, or its
  failure (``<digest>.failed``: the installer's output and the one-line reason), which fails
  them too. A failure is not cached: a job that comes later builds again.

The installer is ``uv`` (``uv pip install --no-build``: wheels only, no code of the user's runs
at install, none is built from source), with a download cache per datacenter
(``var/envs/<datacenter>/.cache``), in a sandbox (``sandbox.py``) that sees the package and the
cache and writes only the new environment, in a network of its own whose one way out is a
proxy to the allowed indexes' hosts (``egress.py``): nothing on the machine's loopback
(PostgreSQL, Redis, the portal) is in reach. uv is the only program that runs there. Measured
against pip (README, bench/envs.py): numpy, requests, six and idna in 0.67 s cold and 0.25 s
from the cache, where pip download + pip install took 4.4 s and 4.1 s.

The cache holds at most ``PADDLECLOUD_ENV_CACHE_SIZE`` bytes per datacenter (default 10Gi);
past it the least recently used environments go, never one a live job uses (``Job.environment``
names it, and the job is not final) nor one being built or looked up (its lock is held).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings

from ...files import tree_give
from ..base import BackendError, records
from ..egress import EgressError, egress
from ..environments import (
    env_digest,
    index_settings,
    indexes_allowed,
    machine_indexes,
    requirements_inputs,
    uv_index_env,
)
from ..netns import SandboxError
from .sandbox import (
    PRIVATE_TMP,
    SYSTEM_PATH,
    Bind,
    Sandbox,
    sandbox_command,
    sandbox_shows,
    world_readable,
)

# uv's host uid and gid when the portal is root (never root: the sandbox's rule): the owner of
# the environments and their cache, which every job reads and none writes. Below the homes'
# (local.HOME_IDS + a user's id), above local builds' (buildah.BUILD_IDS).
INSTALL_IDS = (1_099_999_999, 1_099_999_999)
UV_FLAGS = ("--no-config", "--no-build", "--link-mode", "copy", "--no-progress")
WHEELS_ONLY = ("on the local backend requirements come as wheels only (uv pip install "
               "--no-build)")


def uv_path() -> str:
    """The uv installed with the portal (the ``uv`` package)."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return str(beside)
    found = shutil.which("uv")
    if not found:
        raise BackendError("requirements.txt: uv, the installer, is not installed with the "
                           "portal (pip install uv)")
    return found


_uv_versions: dict[str, str] = {}


def uv_version(uv: str) -> str:
    if uv not in _uv_versions:
        _uv_versions[uv] = subprocess.run(  # noqa: S603 - the portal's own uv
            [uv, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    return _uv_versions[uv]


def envs_root(datacenter) -> Path:
    return settings.VAR_DIR / "envs" / datacenter.name


def env_path(datacenter, digest: str) -> Path:
    """Where an environment's packages are (what a job puts on its PYTHONPATH)."""
    return envs_root(datacenter) / digest / "site-packages"


# --- the digest --------------------------------------------------------------------------------

def env_inputs(pkg: Path, uv: str, environ: dict[str, str], indexes: list[str]) -> dict:
    """What decides an environment's contents (its digest is of these)."""
    return {
        **requirements_inputs(pkg, indexes),
        "python": {"executable": sys.executable, "version": sys.version,
                   "cache_tag": sys.implementation.cache_tag,
                   "abiflags": getattr(sys, "abiflags", ""),
                   "platform": sysconfig.get_platform(),
                   "libc": os.confstr("CS_GNU_LIBC_VERSION") or ""},
        "installer": [uv_version(uv), *UV_FLAGS],
        "index": index_settings(environ),
    }


# --- finding, building, waiting ----------------------------------------------------------------

@contextlib.contextmanager
def _locked(path: Path, *, block: bool = True) -> Iterator[bool]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


def _event(job, reason: str) -> None:
    records().event(job, reason)


def _say(out, line: str) -> None:
    out.write(line.encode() + b"\n")
    out.flush()


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class EnvBuildError(BackendError):
    """The installer failed; ``log`` is what it said."""

    def __init__(self, message: str, *, log: str):
        super().__init__(message)
        self.log = log


def _uv_env(environ: dict[str, str]) -> dict[str, str]:
    """uv's environment: the machine's index settings in uv's words."""
    return {"PATH": f"{os.path.dirname(sys.executable)}:{SYSTEM_PATH}", "HOME": PRIVATE_TMP,
            "LANG": environ.get("LANG", "C.UTF-8"), "NO_COLOR": "1", **uv_index_env(environ)}


def _config_binds(env: dict[str, str]) -> list[Bind]:
    """The files and directories the installer's settings name (a find-links directory,
    certificates): read-only, those the world may read and the sandbox does not show."""
    named = {os.path.normpath(item) for value in env.values()
             for item in re.split(r"[\s,]+", value) if item.startswith("/")}
    return [Bind(path) for path in sorted(named)
            if os.path.exists(path) and not sandbox_shows(path) and world_readable(path)
            and path != PRIVATE_TMP and not path.startswith(os.path.dirname(sys.executable))]


def _build(pkg: Path, target: Path, cache: Path, out, sandboxed: bool,
           indexes: list[str]) -> None:
    uv = uv_path()
    env = _uv_env(dict(os.environ))
    argv = [uv, "pip", "install", *UV_FLAGS, "--python", sys.executable, "--target",
            str(target), "--cache-dir", str(cache), "-r", "requirements.txt"]
    target.mkdir(parents=True)
    cache.mkdir(parents=True, exist_ok=True)
    if sandboxed and os.geteuid() == 0:
        for path in (target, cache):
            if path.stat().st_uid != INSTALL_IDS[0]:
                tree_give(path, INSTALL_IDS)
    run = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=pkg, timeout=1800,
               check=False)
    refused: list[str] = []
    if sandboxed:
        # Its network reaches the allowed indexes and the machine's own, nothing else.
        try:
            with egress([*indexes, *machine_indexes(dict(os.environ))], label="uv") as way:
                box = Sandbox(binds=[Bind(str(pkg)), Bind(str(target), writable=True),
                                     Bind(str(cache), writable=True), *_config_binds(env)],
                              env={**env, **way.env()}, cwd=str(pkg), network=way.netns,
                              hostname="uv", ids=INSTALL_IDS)
                result = sandbox_command(box, argv).run(
                    env={"PATH": SYSTEM_PATH, "LANG": env["LANG"]}, **run)
                refused = list(way.refused)
        except (EgressError, SandboxError) as exc:
            raise BackendError(f"requirements.txt: uv's sandbox could not be made: {exc}") \
                from None
    else:
        result = subprocess.run(  # noqa: S603 - uv on the user's own requirements
            argv, stdin=subprocess.DEVNULL, env={**os.environ, **env}, **run)
    if refused:
        result.stdout += (f"paddlecloud: the install's network refused {', '.join(refused)}: "
                          f"not an allowed package index of this datacenter\n").encode()
    out.write(result.stdout)
    out.flush()
    if result.returncode != 0:
        text = result.stdout.decode(errors="replace")
        lines = [line.strip(" \u00d7\u2570\u2500\u25b6\u2502").strip()
                 for line in text.splitlines()]
        lines = [line for line in lines if line]
        said = next((line for line in lines if line.startswith("error:")),
                    lines[-1] if lines else "").removeprefix("error: ")
        cause = next((line for line in lines if line.startswith(("cause:", "Because"))), "")
        if cause:
            said = f"{said}: {cause.removeprefix('cause: ')}"
        hint = f"; {WHEELS_ONLY}" if re.search(r"build|source distribution", text, re.I) else ""
        if refused:
            hint += (f"; its network reaches only the allowed package indexes, not "
                     f"{', '.join(refused)}")
        raise EnvBuildError(f"requirements.txt could not be installed (uv exited "
                            f"{result.returncode}: {said[:300]}{hint}); see output/setup.log",
                            log=text)


def env_ensure(job, pkg: Path, out, *, sandboxed: bool) -> str:
    """The environment of the job's ``requirements.txt`` (in ``pkg``), found or built; its
    digest, recorded on the job (``Job.environment``) before anything else, so that no eviction
    takes it from under the job. Raises ``BackendError`` with the installer's message."""
    uv = uv_path()
    indexes = indexes_allowed(job.datacenter)
    digest = env_digest(env_inputs(pkg, uv, dict(os.environ), indexes))
    short = digest[:12]
    records().environment_use(job, digest)
    root = envs_root(job.datacenter)
    home = root / digest
    failed = root / f"{digest}.failed"
    asked = time.time()
    with _locked(root / f"{digest}.lock", block=False) as free:
        if not free:
            _say(out, f"environment {short} is being built for another job: waiting")
    with _locked(root / f"{digest}.lock"):
        if (home / "site-packages").is_dir():
            return _found(job, home, short, out)
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(failed.read_text())
            if record["time"] >= asked:  # the build this job waited for failed
                out.write(record["log"].encode())
                _say(out, f"environment {short} could not be built for another job")
                _event(job, f"environment {short} could not be built")
                raise BackendError(record["reason"])
        for stale in root.glob(f"{digest}.tmp-*"):  # a dead builder's
            shutil.rmtree(stale, ignore_errors=True)
        tmp = root / f"{digest}.tmp-{os.getpid()}"
        _say(out, f"environment {short} not found: installing requirements.txt with "
                  f"{uv_version(uv)}")
        _event(job, f"environment {short} building")
        started = time.monotonic()
        try:
            _build(pkg, tmp / "site-packages", root / ".cache", out, sandboxed, indexes)
        except EnvBuildError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            _write(failed, json.dumps({"time": time.time(), "reason": str(exc),
                                       "log": exc.log}))
            _event(job, f"environment {short} could not be built")
            raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()
                   and not p.is_symlink())
        _write(tmp / "built.json", json.dumps({"time": time.time(), "size": size,
                                               "installer": uv_version(uv)}))
        (tmp / "used").touch()
        tmp.rename(home)
        failed.unlink(missing_ok=True)
        took = time.monotonic() - started
        _say(out, f"environment {short} built in {took:.1f} s")
        _event(job, f"environment {short} built in {took:.1f} s")
    env_evict(job.datacenter, keep=digest)
    return digest


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def _found(job, home: Path, short: str, out) -> str:
    (home / "used").touch()
    with contextlib.suppress(OSError, ValueError, KeyError):
        built = _when(json.loads((home / "built.json").read_text())["time"])
    built = locals().get("built", "at an unknown time")
    _say(out, f"environment {short} found (built {built})")
    _event(job, f"environment {short} found (built {built})")
    return home.name


# --- the bound ---------------------------------------------------------------------------------

def env_evict(datacenter, *, keep: str = "", limit: int | None = None) -> list[str]:
    """Remove the least recently used environments of the datacenter until what is left fits
    the bound (``PADDLECLOUD_ENV_CACHE_SIZE``), never ``keep``, one a live job uses, or one
    whose lock is held. Returns the digests removed."""
    limit = settings.PADDLECLOUD_ENV_CACHE_BYTES if limit is None else limit
    root = envs_root(datacenter)
    if not root.is_dir():
        return []
    removed = []
    with _locked(root / ".evict.lock"):
        envs = []
        for home in root.iterdir():
            if not (home / "built.json").is_file() or ".tmp-" in home.name:
                continue
            with contextlib.suppress(OSError, ValueError, KeyError):
                size = json.loads((home / "built.json").read_text())["size"]
                envs.append(((home / "used").stat().st_mtime, home, size))
        total = sum(size for _, _, size in envs)
        for _, home, size in sorted(envs, key=lambda item: item[0]):
            if total <= limit:
                break
            if home.name == keep or records().environment_in_use(home.name):
                continue
            with _locked(root / f"{home.name}.lock", block=False) as free:
                # Under its lock a job records its use before it looks: asked again here.
                if not free or records().environment_in_use(home.name):
                    continue
                gone = root / f"{home.name}.tmp-evicted"
                home.rename(gone)
            shutil.rmtree(gone, ignore_errors=True)
            total -= size
            removed.append(home.name)
    return removed
