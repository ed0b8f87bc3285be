"""Building a runtime image on the portal's machine with buildah (issue 19): no daemon, buildah
run as the portal's user (root; the build steps are not: see Isolation), and pushing it to
the job's registry. Both backends build here: a local datacenter's ``paddlectl build``, and a
Kubernetes datacenter's builds when its cluster cannot run a builder (``kube_builder`` portal,
issue 36: GKE Autopilot), whose pods then pull what was pushed.

``buildah_build`` builds a Dockerfile's text with a directory as the context and pushes the
image; it returns the pushed manifest's digest, which jobs then run by (``image@digest``).
``package_build`` does so for a build (``jobs.builds``): its package copied from its owner's
PFS, its storage under PADDLECLOUD_BUILDAH_DIR, its steps reaching the datacenter's allowed
package indexes. ``buildah_problem`` says whether this machine can build at all.

- Storage: buildah's own under ``storage`` (``root``, ``runroot``, ``tmp``; the ``vfs`` driver,
  which needs no overlay support nor mounts). One build at a time uses a storage (a lock file
  in it, ``flock``): a build waits (within its ``timeout``) for the one before; builds that
  should run side by side get storages of their own. The base image a ``FROM`` names stays
  there after a build: its layers are the cache. Every build still pulls it
  (``--pull=always``: only what changed is downloaded): the storage is shared by every
  user's builds, and a base image in a private registry must be pulled with the credentials
  of the build that names it, never taken from the cache another user's build filled
  (``--pull=true`` falls back to the cached image when the registry refuses). The built image
  is removed once pushed, and so are the images no name points to any more (a base whose tag
  moved on).
- Isolation: a Dockerfile's ``RUN`` steps run the user's code (their commands, the setup of
  what pip installs), so they run in containers (``--isolation oci``: the OCI runtime, its
  namespaces and seccomp) in a user namespace of their own whose root is an unprivileged
  range of host ids (``BUILD_IDS``: uid/gid 1000000000 onwards, which no account uses), not
  the portal's root; in a network of their own (``egress.py``: only ``lo``, no DNS) whose one
  way out is a proxy (``HTTP_PROXY``/``HTTPS_PROXY``, given as build arguments, which buildah
  keeps out of the image) to the datacenter's allowed package indexes: ``pip install``
  reaches those, and nothing on the machine's loopback (PostgreSQL, Redis, the portal) nor
  elsewhere is in reach. buildah itself (pulling the base, pushing) uses the machine's
  network.
- Credentials go to buildah only in an ``--authfile`` (``docker_config_json``, mode 0600, in
  a private directory removed afterwards), never on a command line nor in the log. They are
  asked for the base image too (the same file). TLS is verified unless ``insecure``.
- Everything buildah prints goes to ``log``; what went wrong comes back as a one-line
  ``BackendError``: the registry that refused the credentials, or the failing step and its
  last lines.
- A build that runs past ``timeout``, or whose ``cancelled()`` gives a reason (asked every
  ``CANCEL_POLL`` seconds: its jobs were killed), is stopped (its process group: SIGTERM,
  after which buildah removes its working container, then SIGKILL). The working containers a
  stopped build left, or one whose portal died, are removed (after it, or before the next
  build).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from django.conf import settings

from registries.oci import RegistryError, docker_config_json, image_ref_parse, manifest_digest

from ..files import package_copy
from .base import BackendError
from .egress import EgressError, egress
from .environments import indexes_allowed
from .netns import SandboxError

INSTALL = ("buildah is not installed on the portal's machine: install it "
           "(apt-get install buildah on Debian/Ubuntu, dnf install buildah on Fedora/RHEL)")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What buildah takes from the portal's environment: proxies, certificates, the machine's
# containers configuration. Nothing else of the portal's (its secrets) reaches it.
PASSED = re.compile(r"^(?:(?:HTTPS?|NO|ALL)_PROXY|SSL_CERT_(?:FILE|DIR)|CONTAINERS_\w+"
                    r"|REGISTRIES_CONFIG_PATH|TZ)$", re.I)
STOP_GRACE = 10
# The host ids a build's root and users are (its user namespace): far above any account's.
BUILD_IDS = "0:1000000000:65536"
USERNS = ("--userns-uid-map", BUILD_IDS, "--userns-gid-map", BUILD_IDS)
SYS = "/sys:/sys:ro,nosuid,nodev,noexec"  # the steps' /sys: the machine's, as on its network
RUNTIME_TMP = "/var/tmp"  # noqa: S108 - buildah's own default; a private directory in it
LOCK_POLL = 1.0
CANCEL_POLL = 1.0
REFUSED_RE = re.compile(r"unauthorized|authentication required|denied|\b40[13]\b", re.I)
NOISE_RE = re.compile(r"^(?:subprocess exited |Getting image source signatures|Copying |"
                      r"Writing manifest|Storing signatures|Trying to pull )")
TAIL = 200
REASON_MAX = 600


def buildah_problem() -> str | None:
    """Why this machine cannot build (buildah is not installed), or None."""
    return None if shutil.which("buildah") else INSTALL


def package_build(build, dockerfile: str, log: int, auth: tuple[str, str] | None, *,
                  insecure: bool, cancelled: Callable[[], str] = lambda: "") -> str:
    """``build``'s image (``Backend.image_build``) built here: ``buildah_build`` on a copy of
    its package (read through its PFS storage), in its datacenter's storage under
    PADDLECLOUD_BUILDAH_DIR, its steps reaching the datacenter's allowed package indexes."""
    with tempfile.TemporaryDirectory(prefix="paddlecloud-build-") as tmp:
        context = Path(tmp) / "context"
        package_copy(build, context)
        return buildah_build(context, dockerfile, build.image, insecure=insecure, auth=auth,
                             log=log,
                             storage=settings.PADDLECLOUD_BUILDAH_DIR / build.datacenter.name,
                             indexes=indexes_allowed(build.datacenter), cancelled=cancelled)


def buildah_build(context: Path, dockerfile: str, image: str, *, insecure: bool,
                  auth: tuple[str, str] | None, storage: Path, log: int,
                  indexes: Sequence[str] = (), timeout: float = 3600,
                  cancelled: Callable[[], str] = lambda: "") -> str:
    """Build ``dockerfile`` (its text) with ``context`` as the build context, its ``RUN`` steps
    in a network that reaches the hosts of ``indexes`` (the allowed package indexes) and
    nothing else, push the result to ``image`` (host[:port]/repo:tag) and return the pushed
    manifest's digest (sha256:…).
    Everything buildah prints goes to the file descriptor ``log``. Raises
    jobs.backends.base.BackendError with a one-line reason (the registry's refusal naming the
    registry, the failing step and the builder's last lines, or what ``cancelled()`` said)
    on failure."""
    buildah = shutil.which("buildah")
    if buildah is None:
        raise BackendError(INSTALL)
    try:
        target = image_ref_parse(image)
    except ValueError as exc:
        raise BackendError(f"the image to build: {exc}") from None
    if target.digest or not target.tag:
        raise BackendError(f"the image to build: {image!r} must name a tag to push to, "
                           "not a digest")
    context = Path(context).resolve()
    if not context.is_dir():
        raise BackendError(f"the build context {context} is not a directory")
    deadline = time.monotonic() + timeout
    # Credentials a registry refuses are told now, not after a build of many minutes.
    try:
        manifest_digest(target, auth=auth, insecure=insecure, timeout=min(30.0, timeout))
    except RegistryError as exc:
        raise BackendError(str(exc)) from None

    storage = Path(storage).resolve()
    dirs = {name: storage / name for name in ("root", "runroot", "tmp")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if dirs["tmp"].is_relative_to(context):
        raise BackendError(f"buildah's storage {storage} may not be inside the build context "
                           f"{context}")
    lock = os.open(storage / "build.lock", os.O_RDWR | os.O_CREAT, 0o600)
    work = mounts = None
    try:
        # Where buildah mounts the build steps' root filesystems: the runtime reaches them as
        # the user namespace's root, so every directory above must let others through (the
        # storage may be under a private one): /var/tmp, in one of its own (searchable only).
        mounts = Path(tempfile.mkdtemp(prefix="paddlecloud-buildah-", dir=RUNTIME_TMP))
        mounts.chmod(0o711)
        builder = _Buildah(buildah, dirs, log, timeout, cancelled)
        builder.env["TMPDIR"] = str(mounts)
        builder.lock(lock, deadline, target)
        builder.cleanup()  # what a build that died (with its portal) left
        work = Path(tempfile.mkdtemp(prefix="build-", dir=dirs["tmp"]))  # mode 0700
        builder.env["HOME"] = str(work)
        authfile = work / "auth.json"
        fd = os.open(authfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(docker_config_json(target.host, *auth) if auth else '{"auths": {}}')
        (work / "Dockerfile").write_text(dockerfile)
        local = f"localhost/paddlecloud-build-{secrets.token_hex(8)}:latest"
        tls = f"--tls-verify={'false' if insecure else 'true'}"
        try:
            builder.say(f"building {target} with buildah")
            try:
                with egress(indexes, label="build") as way:
                    # The steps join the network; buildah itself (pulling the base, pushing)
                    # stays on the machine's. The proxy's variables are build arguments, which
                    # buildah gives the steps and keeps out of the image. In a network their user
                    # namespace does not own the steps may not mount a /sys of their own: the
                    # machine's is bound read-only, as buildah does on the host's network.
                    proxy = [arg for name, value in way.env().items()
                             for arg in ("--build-arg", f"{name}={value}")]
                    ran = builder.run(["build", "--isolation", "oci", *USERNS, "--network",
                                       f"ns:{way.netns_path}", "--volume", SYS, *proxy,
                                       "--pull=always", "--layers=false", "--authfile",
                                       str(authfile), tls, "-f", str(work / "Dockerfile"), "-t",
                                       local, str(context)], deadline)
                    refused = list(way.refused)
            except (EgressError, SandboxError) as exc:
                raise BackendError(f"the build's network could not be made: {exc}") from None
            if ran.returncode != 0 and refused:
                ran.lines.append(f"--- paddlecloud: the build's network refused "
                                 f"{', '.join(refused)}: not an allowed package index")
                builder.say(ran.lines[-1].removeprefix("--- paddlecloud: "))
            if ran.returncode != 0:
                raise BackendError(_build_failure(ran, target, dockerfile, auth))
            builder.say(f"pushing {target}")
            digestfile = work / "digest"
            ran = builder.run(["push", "--authfile", str(authfile), tls, "--digestfile",
                               str(digestfile), local, f"docker://{target}"], deadline)
            if ran.returncode != 0:
                raise BackendError(_push_failure(ran, target, auth))
            digest = digestfile.read_text().strip() if digestfile.is_file() else ""
            if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                raise BackendError(f"buildah pushed {target} but wrote no digest "
                                   f"({digest[:80]!r})")
            builder.say(f"pushed {target}@{digest}")
            return digest
        except BackendError as exc:
            builder.say(f"failed: {exc}")
            raise
        finally:
            builder.cleanup(local)
    finally:
        for made in (work, mounts):
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
        os.close(lock)  # lets the next build in


class _Ran:
    def __init__(self, returncode: int | None, lines: list[str], timed_out: bool,
                 allowed: float, cancelled: str = ""):
        self.returncode = returncode
        self.lines = lines
        self.timed_out = timed_out
        self.allowed = allowed
        self.cancelled = cancelled


class _Buildah:
    """buildah on its storage, its output copied to ``log``."""

    def __init__(self, path: str, dirs: dict[str, Path], log: int, timeout: float,
                 cancelled: Callable[[], str]):
        self.argv = [path, "--root", str(dirs["root"]), "--runroot", str(dirs["runroot"]),
                     "--storage-driver", "vfs"]
        self.env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "HOME": str(dirs["tmp"]),
                    "TMPDIR": str(dirs["tmp"]), "BUILDAH_ISOLATION": "oci",
                    **{k: v for k, v in os.environ.items() if PASSED.match(k)}}
        self.log = log
        self.timeout = timeout
        self.cancelled = cancelled

    def lock(self, fd: int, deadline: float, target) -> None:
        """One build at a time in a storage (``flock``, let go by the kernel when a builder
        dies): what one build leaves or prunes is then its own."""
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if why := self.cancelled():
                    raise BackendError(why) from None
                if time.monotonic() >= deadline:
                    raise BackendError(
                        f"building {target} did not start: another build used the builder "
                        f"for the {self.timeout:g} s allowed") from None
                if not waiting:
                    self.say("waiting for the build before this one to end")
                    waiting = True
                time.sleep(LOCK_POLL)

    def write(self, data: bytes) -> None:
        while data:
            data = data[os.write(self.log, data):]

    def say(self, line: str) -> None:
        self.write(f"--- paddlecloud: {line}\n".encode())

    def run(self, args: list[str], deadline: float) -> _Ran:
        """``buildah ARGS`` in a process group of its own, stopped (the whole group) at
        ``deadline`` or once ``cancelled()`` says why."""
        tail: collections.deque[str] = collections.deque(maxlen=TAIL)
        try:
            process = subprocess.Popen(  # noqa: S603 - buildah, with arguments of ours
                [*self.argv, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        except OSError as exc:
            raise BackendError(f"buildah could not be started: {exc}") from None

        def pump():
            for line in process.stdout:
                self.write(line)
                tail.append(line.decode(errors="replace").rstrip())

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        timed_out, cancelled = False, ""
        try:
            while True:
                try:
                    process.wait(min(CANCEL_POLL, max(0.0, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    timed_out = time.monotonic() >= deadline
                    cancelled = "" if timed_out else self.cancelled()
                    if timed_out or cancelled:
                        _stop_group(process)
                        break
        finally:
            if process.poll() is None:  # interrupted: nothing of buildah outlives us
                _stop_group(process, grace=0)
            thread.join(30)
            process.stdout.close()
        return _Ran(process.returncode, list(tail), timed_out, self.timeout, cancelled)

    def quiet(self, *args: str) -> subprocess.CompletedProcess:
        """``buildah ARGS`` for its answer (listing, removing); a failure is its return code."""
        try:
            return subprocess.run(  # noqa: S603 - buildah, with arguments of ours
                [*self.argv, *args], stdin=subprocess.DEVNULL, capture_output=True,
                text=True, env=self.env, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return subprocess.CompletedProcess(args, -1, "", str(exc))

    def cleanup(self, local: str | None = None) -> None:
        """The built image goes (it is in the registry now, or it failed), and so do the
        working containers a stopped build left (buildah removes its own when it can) and
        the images no name points to any more (a base whose tag moved on). The base images
        stay: their layers are the cache."""
        if local:
            self.quiet("rmi", "--force", local)
        self.quiet("rm", "--all")
        self.quiet("rmi", "--prune")


def _stop_group(process: subprocess.Popen, grace: float = STOP_GRACE) -> None:
    """SIGTERM to buildah's process group (buildah then removes its working container), then,
    after ``grace`` seconds or once buildah is gone, SIGKILL to what is left of the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


# --- what went wrong, in a line ------------------------------------------------------------

def _error_line(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.startswith(("Error: ", "error ")):
            return line.removeprefix("Error: ")
    return next((line for line in reversed(lines) if line.strip()), "")


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _refusal(error: str, hosts: list[str], target, auth, doing: str) -> str:
    host = next((h for h in hosts if h in error), hosts[0])
    # the authfile holds credentials for the registry pushed to only
    who = (f"refused the credentials of {auth[0]!r}" if auth and host == target.host
           else "refused access without credentials")
    return _short(f"the registry {host} {who} ({doing}): {error}", REASON_MAX)


def _from_hosts(dockerfile: str) -> list[tuple[str, str]]:
    """(host, reference) of each ``FROM`` of the Dockerfile that names a registry's image."""
    found = []
    for match in re.finditer(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", dockerfile, re.M | re.I):
        try:
            ref = image_ref_parse(match.group(1))
        except ValueError:
            continue  # scratch, a stage's name, an ARG
        found.append((ref.host, str(ref)))
    return found


def _timed_out(ran: _Ran, doing: str) -> str:
    return (f"{doing} took longer than the {ran.allowed:g} s allowed and was stopped "
            f"(at: {_short(_last_step(ran.lines) or 'the start', 200)})")


def _last_step(lines: list[str]) -> str:
    return next((line for line in reversed(lines) if line.startswith("STEP ")), "")


def _build_failure(ran: _Ran, target, dockerfile: str, auth) -> str:
    if ran.cancelled:
        return ran.cancelled
    if ran.timed_out:
        return _timed_out(ran, f"building {target}")
    error = _error_line(ran.lines)
    step = _last_step(ran.lines)
    bases = _from_hosts(dockerfile)
    if REFUSED_RE.search(error) and ("creating build container" in error or not step
                                     or step.startswith("STEP 1/")):
        hosts = [host for host, _ in bases] or [target.host]
        names = ", ".join(name for _, name in bases) or "the base image"
        return _refusal(error, hosts, target, auth, f"pulling {names}")
    said = []
    if step:
        index = len(ran.lines) - 1 - ran.lines[::-1].index(step)
        said = [line.strip() for line in ran.lines[index + 1:]
                if line.strip() and not NOISE_RE.match(line.strip())
                and not line.startswith(("Error: ", "error "))][-3:]
    error = re.sub(r'^building at STEP ".*": ', "", error)
    where = f" at {_short(step, 160)}" if step else ""
    last = f"; it said: {' / '.join(said)}" if said else ""
    return _short(f"building {target} failed{where}: {error}{last}", REASON_MAX)


def _push_failure(ran: _Ran, target, auth) -> str:
    if ran.cancelled:
        return ran.cancelled
    if ran.timed_out:
        return _timed_out(ran, f"pushing {target}")
    error = _error_line(ran.lines)
    if REFUSED_RE.search(error):
        return _refusal(error, [target.host], target, auth, f"pushing {target}")
    return _short(f"pushing {target} failed: {error}", REASON_MAX)
