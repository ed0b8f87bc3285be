"""A small base image made on this machine, for the tests that build or run real images.

Nothing can be pulled from Docker Hub here, so the base is a Debian bookworm ``minbase``
root filesystem made with ``debootstrap`` from the Debian mirror apt uses, with Python and pip,
and this machine's CA bundle (PyPI is reached through a proxy whose certificate it holds). It is
made once (about a minute) and kept as a tar under ``$PADDLECLOUD_TEST_CACHE`` (default
``~/.cache/paddlecloud-tests``), named by what it is made of; ``docker import`` or ``buildah``
turns the tar into an image.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.processes import processes_naming

SUITE = "bookworm"
# python3-venv: the portal's Dockerfile (tests/test_image.py) makes a virtualenv.
PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Bump when the way the root filesystem is made changes.
RECIPE = 1


def cache_dir() -> Path:
    path = Path(os.environ.get("PADDLECLOUD_TEST_CACHE")
                or Path.home() / ".cache" / "paddlecloud-tests")
    path.mkdir(parents=True, exist_ok=True)
    return path


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 ``URIs:`` or a one-line ``deb``)."""
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    sources += [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d")
                                                       .glob("*.list"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for uri in re.findall(r"^URIs:\s*(\S+)|^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M):
            found = uri[0] or uri[1]
            if "security" not in found:
                return found
    return "http://deb.debian.org/debian"


def base_rootfs() -> Path:
    """The tar of the base root filesystem, made now unless it is in the cache already.
    Safe to call from concurrent test runs: one makes it, the others wait for it."""
    mirror = apt_mirror()
    ca = CA_BUNDLE.read_bytes() if CA_BUNDLE.is_file() else b""
    key = hashlib.sha256(repr((RECIPE, SUITE, PACKAGES, mirror)).encode() + ca).hexdigest()[:16]
    tar = cache_dir() / f"{SUITE}-python-{key}.tar"
    with open(cache_dir() / f"{tar.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tar.is_file():
            return tar
        if shutil.which("debootstrap") is None:
            raise RuntimeError("debootstrap is not installed: ./dev test installs it "
                               "(apt-get install debootstrap)")
        with tempfile.TemporaryDirectory(dir=cache_dir()) as work:
            root = Path(work) / "root"
            made = subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
                 SUITE, str(root), mirror],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
            if made.returncode != 0:
                raise RuntimeError(f"debootstrap failed ({made.returncode}):\n"
                                   f"{(made.stdout + made.stderr)[-3000:]}")
            if ca:
                (root / CA_BUNDLE.relative_to("/")).write_bytes(ca)
            for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for entry in (root / cache).glob("*"):
                    if entry.is_file():
                        entry.unlink()
            partial = Path(work) / "rootfs.tar"
            subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial),
                            "."], check=True, stdin=subprocess.DEVNULL, timeout=600)
            os.replace(partial, tar)
        return tar


# --- the base as an image in a registry (buildah) ----------------------------------------------

BASE_REPOSITORY = "base/bookworm-python"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def buildah(storage: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """buildah with its own storage under ``storage`` (vfs), checked."""
    return subprocess.run(["buildah", "--root", str(storage / "root"), "--runroot",
                           str(storage / "runroot"), "--storage-driver", "vfs", *args],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
                          check=True, **kwargs)


def base_image_push(host: str, auth: tuple[str, str] | None, storage: Path) -> str:
    """Push the base root filesystem to the registry at ``host`` (plain HTTP) as
    ``<host>/base/bookworm-python:1``: ``buildah from scratch``, the tar added, PATH set,
    committed and pushed, in ``storage``, which is removed afterwards. Returns the image."""
    from registries.oci import docker_config_json

    image = f"{host}/{BASE_REPOSITORY}:1"
    storage.mkdir(parents=True, exist_ok=True)
    authfile = storage / "auth.json"
    authfile.write_text(docker_config_json(host, *auth) if auth else '{"auths": {}}')
    try:
        container = buildah(storage, "from", "scratch").stdout.strip()
        buildah(storage, "add", container, str(base_rootfs()), "/")
        buildah(storage, "config", "--env", f"PATH={SYSTEM_PATH}", "--cmd", "python3",
                container)
        buildah(storage, "commit", "--rm", "-q", container, "localhost/base")
        buildah(storage, "push", "--authfile", str(authfile), "--tls-verify=false",
                "localhost/base", f"docker://{image}")
        buildah(storage, "rmi", "--all")
    finally:
        left = mounts_under(storage)
        shutil.rmtree(storage, ignore_errors=True)
        assert left == [], left
    return image


# --- a private Docker engine --------------------------------------------------------------------

DOCKERD_START_SECONDS = 60
DOCKERD_STOP_GRACE = 20  # SIGTERM, then SIGKILL this many seconds later
BASE_IMAGE = "paddlecloud-test/bookworm-python:1"


def mounts_under(under: Path) -> list[str]:
    """The mount points at or under ``under`` in this mount namespace, deepest first."""
    prefix = str(under).rstrip("/")
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        # field 5 is the mount point, with space, tab, newline and backslash octal-escaped
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


class DockerEngine:
    """A dockerd of its own (``docker_engine``): ``env`` points a docker client at it,
    ``run`` runs one."""

    def __init__(self, root: Path, dockerd: str, client: str, storage_driver: str = "vfs"):
        self.root = root
        self.storage_driver = storage_driver
        self.client = client
        self.socket = root / "docker.sock"
        self.env = {"DOCKER_HOST": f"unix://{self.socket}",
                    "DOCKER_CONFIG": str(root / "client")}
        self.images: dict[str, str] = {}  # what docker_base_image made in this engine
        namespace = f"paddlecloud-test-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}"
        (root / "daemon.json").write_text("{}")  # not the machine's /etc/docker/daemon.json
        (root / "client").mkdir()
        with (root / "dockerd.log").open("wb") as log:
            self.process = subprocess.Popen(
                [dockerd, "--config-file", str(root / "daemon.json"),
                 "--storage-driver", storage_driver, "--iptables=false", "--ip-masq=false",
                 "--bridge=none", "--userland-proxy=false",
                 "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
                 "--pidfile", str(root / "dockerd.pid"), "-H", self.env["DOCKER_HOST"],
                 # Its own names in a containerd it may share with another engine.
                 "--containerd-namespace", namespace,
                 "--containerd-plugins-namespace", f"{namespace}-plugins"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def log_tail(self, size: int = 3000) -> str:
        try:
            return (self.root / "dockerd.log").read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def environ(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(self, *args: str, check: bool = True, timeout: float = 300,
            env: dict[str, str] | None = None,
            input: str | None = None) -> subprocess.CompletedProcess:
        """``docker ARGS`` against this engine (with ``env`` added to the client's
        environment, ``input`` on its stdin); with ``check``, a failure raises with its
        output."""
        result = subprocess.run([self.client, *args], capture_output=True, text=True,
                                env={**self.environ(), **(env or {})}, timeout=timeout,
                                **({"input": input} if input is not None
                                   else {"stdin": subprocess.DEVNULL}))
        if check and result.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} exited {result.returncode}:\n"
                               f"{result.stdout}{result.stderr}")
        return result

    def wait_ready(self, seconds: float = DOCKERD_START_SECONDS) -> None:
        deadline = time.monotonic() + seconds
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"dockerd exited {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            if self.socket.exists() and self.run("version", "--format", "{{.Server.Version}}",
                                                 check=False, timeout=30).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not answer in {seconds:.0f} s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.1)

    def close(self) -> list[str]:
        """Remove every container, stop dockerd (SIGTERM, SIGKILL after a grace) and what it
        started, unmount what is still mounted under its directory and remove it. Returns what
        could not be cleared away (nothing, normally)."""
        left: list[str] = []
        if self.process.poll() is None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                ids = self.run("ps", "--all", "--quiet", check=False, timeout=60).stdout.split()
                if ids:
                    self.run("rm", "--force", *ids, check=False, timeout=120)
            self.process.terminate()
            try:
                self.process.wait(DOCKERD_STOP_GRACE)
            except subprocess.TimeoutExpired:
                print(f"dockerd ignored SIGTERM for {DOCKERD_STOP_GRACE} s: killed it; its log:"
                      f"\n{self.log_tail()}", file=sys.stderr)
                self.process.kill()
                self.process.wait()
        # Its containerd and shims, should dockerd have left them (killed, or crashed).
        marker = f"{self.root}/"
        for attempt in range(50):
            pids = processes_naming(marker)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM if attempt < 20 else signal.SIGKILL)
            time.sleep(0.1)
        else:
            left.append(f"processes still running: {processes_naming(marker)}")
        for point in mounts_under(self.root):
            done = subprocess.run(["umount", point], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "--lazy", point], capture_output=True,
                               check=False)
        left += [f"still mounted: {point}" for point in mounts_under(self.root)]
        if not left:
            shutil.rmtree(self.root, ignore_errors=True)
            if self.root.exists():
                left.append(f"could not remove {self.root}")
        return left


def overlay_works() -> bool:
    """Whether this kernel mounts overlayfs on /tmp (where engines keep their data): then an
    engine may use the overlay2 storage driver, where vfs copies the whole image at each step
    of a build (a build of the portal's image: 18 minutes on vfs, under 3 on overlay2)."""
    if os.geteuid() != 0:
        return False
    with tempfile.TemporaryDirectory(prefix="pc-overlay-probe-", dir="/tmp") as tmp:
        dirs = {name: Path(tmp) / name for name in ("lower", "upper", "work", "merged")}
        for path in dirs.values():
            path.mkdir()
        mounted = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}",
             str(dirs["merged"])], capture_output=True, check=False)
        if mounted.returncode != 0:
            return False
        subprocess.run(["umount", str(dirs["merged"])], capture_output=True, check=False)
        return True


@contextlib.contextmanager
def docker_engine(storage_driver: str = "vfs") -> Iterator[DockerEngine]:
    """A private Docker engine for a test: a dockerd (as root) on the vfs storage driver (or
    ``storage_driver``: overlay2 where ``overlay_works``),
    without iptables or a bridge network (containers use ``--network host``), with its data,
    its runtime state and its socket in a temporary directory, so that it never meets another
    engine. Nothing can be pulled: ``docker_base_image`` gives it a base image. On exit,
    whatever happened, every container is removed, dockerd is stopped, its mounts are undone
    and its directory removed; if anything stays behind (and the body did not fail), that is
    an error."""
    dockerd, client = shutil.which("dockerd"), shutil.which("docker")
    if dockerd is None or client is None:
        raise RuntimeError("dockerd or docker is not installed: ./dev test installs them "
                           "(apt-get install docker.io)")
    if os.geteuid() != 0:
        raise RuntimeError("a private dockerd needs root")
    # A short path: a unix socket's path has at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="pc-dockerd-", dir="/tmp"))
    engine = None
    failed = True
    try:
        engine = DockerEngine(root, dockerd, client, storage_driver)
        engine.wait_ready()
        yield engine
        failed = False
    finally:
        left = engine.close() if engine else []
        if engine is None:
            shutil.rmtree(root, ignore_errors=True)
        if left:
            message = "the private Docker engine left things behind: " + "; ".join(left)
            if not failed:
                raise RuntimeError(message)
            print(message, file=sys.stderr)  # beside the error that ended the body


def docker_base_image(engine: DockerEngine) -> str:
    """The base root filesystem (``base_rootfs``) as an image of ``engine``, made once per
    engine: Debian bookworm with Python 3 (also as ``python``, as in PaddlePaddle's images),
    pip and CA certificates; its command is bash."""
    if BASE_IMAGE in engine.images:
        return BASE_IMAGE
    rootfs = f"{BASE_IMAGE}-rootfs"
    engine.run("import", "--change", 'CMD ["/bin/bash"]', str(base_rootfs()), rootfs,
               timeout=600)
    maker = f"paddlecloud-test-base-{os.getpid()}"
    try:
        engine.run("run", "--network", "host", "--pull", "never", "--name", maker, rootfs,
                   "ln", "-s", "python3", "/usr/bin/python", timeout=300)
        engine.run("commit", "--change", 'CMD ["/bin/bash"]', maker, BASE_IMAGE, timeout=600)
    finally:
        engine.run("rm", "--force", maker, check=False)
    engine.run("rmi", rootfs)
    engine.images[BASE_IMAGE] = engine.run("image", "inspect", "--format", "{{.Id}}",
                                           BASE_IMAGE).stdout.strip()
    return BASE_IMAGE
