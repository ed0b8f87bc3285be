"""A small base image made on this machine, for the tests that build or run real images.

Nothing can be pulled from Docker Hub here, so the base is a Debian bookworm ``minbase``
root filesystem made with ``debootstrap`` from the Debian mirror apt uses, with Python and pip,
and this machine's CA bundle (PyPI is reached through a proxy whose certificate it holds). It is
made once (about a minute) and kept as a tar under ``$PADDLECLOUD_TEST_CACHE`` (default
``~/.cache/paddlecloud-tests``), named by what it is made of; ``docker import`` or ``buildah``
turns the tar into an image.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

SUITE = "bookworm"
PACKAGES = ("python3", "python3-pip", "ca-certificates")
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


def mounts_under(path: Path) -> list[str]:
    """The mount points at or below ``path`` (what a build must not leave)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == str(path) or point.startswith(f"{path}/"):
            found.append(point)
    return found


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
