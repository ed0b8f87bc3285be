"""A trainer package's requirements read as data, and the digest that names its environment:
what every backend's environment cache shares (``local/envs.py`` builds environments on this
machine, ``kubernetes/envs.py`` in the owner's PFS home, by the pods), and what a submission and
a build are checked by (``jobs.spec``, ``jobs.builds.recipe``).

What is installed is first read as data (``requirements_read``, issue 33): at most
``PADDLECLOUD_REQUIREMENTS_SIZE`` bytes, never through a link, with the strict grammar of
``paddlecloud_core.requirements`` — requirements, hashes and markers; indexes only among the
datacenter's allowed ones (``indexes_allowed``); paths only inside the package (no ``-r``,
``-c``, ``-e``, nothing absolute). The submission is checked so too (``jobs/spec.py``), and the
copy the job runs is checked again where it is installed: the owner may change the file in
between.

An environment is named by the digest (sha256) of what decides its contents: the checked
requirements (comments, blank lines and continuations normalized away) and the contents of the
package's files and directories it names (``--find-links wheels``, a wheel of the package; read
without following a link) — ``requirements_inputs`` — with what each backend adds (the local
one: the Python it is for, the installer and its version and flags, the index settings; on
Kubernetes: the image and the installer's command, ``image_env_inputs``).
"""

from __future__ import annotations

import configparser
import contextlib
import errno
import hashlib
import json
import os
import re
import stat
from pathlib import Path

from django.conf import settings

from kernel.errors import NotFoundError, PaddleCloudError
from paddlecloud_core.requirements import (
    REQUIREMENTS_FILE,
    Requirements,
    RequirementsError,
    requirements_check,
    requirements_text,
)

from .base import BackendError

FORMAT = 1  # the layout of an environment: a change names every environment anew
PYPI = ("https://pypi.org/simple", "https://files.pythonhosted.org")  # its index, its files
PIP_CONFIG = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf")

def _tree_digest(pkg: Path, relpath: str) -> str | None:
    """The contents of the package's file ``relpath``, or of its directory's regular files
    with their names; None if it is not there. No link is followed, at any depth (the
    package is the portal's own copy, ``local.py``: nothing changes it meanwhile)."""
    path = pkg
    for part in relpath.split("/"):
        path = path / part
        if not path.exists() or path.is_symlink():
            return None
    hasher = hashlib.sha256()
    if path.is_dir():
        files = []
        for top, dirs, names in os.walk(path):  # followlinks=False
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
            files += [Path(top, name) for name in names]
        files = sorted(f for f in files if stat.S_ISREG(f.lstat().st_mode))
    else:
        files = [path] if stat.S_ISREG(path.lstat().st_mode) else []
    for file in files:
        hasher.update(str(file.relative_to(path) if file != path else "").encode() + b"\0")
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            for block in iter(lambda f=f: f.read(1 << 20), b""):
                hasher.update(block)
        hasher.update(b"\0")
    return hasher.hexdigest()



def index_settings(environ: dict[str, str]) -> dict[str, str]:
    """What of the machine's pip configuration and the portal's environment the installer
    reads: index, extra index, find-links, certificates."""
    found = {name: value for name, value in environ.items()
             if name.startswith(("PIP_", "UV_")) or name in ("SSL_CERT_FILE",)}
    for path in PIP_CONFIG:
        parser = configparser.ConfigParser(interpolation=None)
        with contextlib.suppress(configparser.Error, OSError, UnicodeDecodeError):
            parser.read(path)
            for section in parser.sections():
                for key, value in parser[section].items():
                    found.setdefault(f"{path}[{section}]{key}", value)
    return dict(sorted(found.items()))


def uv_index_env(environ: dict[str, str]) -> dict[str, str]:
    """The machine's index settings (``environ``'s ``UV_*`` variables, pip's ``PIP_*`` ones and
    pip.conf) in uv's words."""
    env = {k: v for k, v in environ.items() if k.startswith("UV_")}
    settings_ = index_settings(environ)

    def pip(name: str) -> str | None:
        value = environ.get(f"PIP_{name.upper().replace('-', '_')}")
        for path in PIP_CONFIG:
            for section in ("install", "global"):
                value = value or settings_.get(f"{path}[{section}]{name}")
        return value

    for name, uv_name in (("index-url", "UV_INDEX_URL"),
                          ("extra-index-url", "UV_EXTRA_INDEX_URL"),
                          ("find-links", "UV_FIND_LINKS"), ("constraint", "UV_CONSTRAINT"),
                          ("cert", "SSL_CERT_FILE")):
        value = pip(name)
        if value and uv_name not in env:
            env[uv_name] = " ".join(value.split()) if name != "find-links" else ",".join(
                value.split())
    return env


def machine_indexes(environ: dict[str, str]) -> list[str]:
    """The index URLs the machine's configuration gives the installer (``UV_*``/``PIP_*``
    variables, pip.conf), PyPI's (and its file host's) when it names no index."""
    env = uv_index_env(environ)
    urls = [item for name in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL",
                              "UV_INDEX", "UV_FIND_LINKS")
            for item in re.split(r"[\s,]+", env.get(name, "")) if "://" in item]
    if not (env.get("UV_INDEX_URL") or env.get("UV_DEFAULT_INDEX")):
        urls = [*PYPI, *urls]
    return urls


def indexes_allowed(datacenter, environ: dict[str, str] | None = None) -> list[str]:
    """The package indexes a requirements.txt of the datacenter may name (its administrator's
    ``package_indexes``; the machine's own when that is empty)."""
    return datacenter.package_indexes.split() or machine_indexes(
        dict(os.environ) if environ is None else environ)


def requirements_read(pkg: Path, indexes: list[str]) -> Requirements:
    """The package's requirements.txt checked (``paddlecloud_core.requirements``): read no
    further than the bound, never through a link. Raises ``BackendError`` saying what is
    wrong."""
    try:
        fd = os.open(pkg / REQUIREMENTS_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise RequirementsError(["it is not a regular file"])
            text = requirements_text(iter(lambda: f.read(1 << 16), b""),
                                     settings.PADDLECLOUD_REQUIREMENTS_BYTES)
        return requirements_check(text, indexes)
    except OSError as exc:
        why = "it is a link" if exc.errno == errno.ELOOP else exc.strerror
        raise BackendError(f"{REQUIREMENTS_FILE}: cannot be read ({why})") from None
    except RequirementsError as exc:
        raise BackendError(f"{REQUIREMENTS_FILE}: {exc}") from None


def requirements_stored(storage, rel, indexes: list[str]) -> tuple[str, Requirements] | None:
    """The text of the requirements.txt at ``rel`` of a PFS storage (a package's, as its owner
    may read it), read no further than the bound, and its checked form; None if there is
    none. Raises ``BackendError`` saying what is wrong."""
    limit = settings.PADDLECLOUD_REQUIREMENTS_BYTES
    try:
        text = requirements_text(storage.read(rel, 0, limit + 1), limit)
        return text, requirements_check(text, indexes)
    except NotFoundError:
        return None
    except PaddleCloudError as exc:
        raise BackendError(f"{REQUIREMENTS_FILE}: {exc.message}") from None
    except RequirementsError as exc:
        raise BackendError(f"{REQUIREMENTS_FILE}: {exc}") from None



def requirements_inputs(pkg: Path, indexes: list[str]) -> dict:
    """What of a package decides its environment, on every backend: its checked requirements
    and the contents of the package's paths they name."""
    checked = requirements_read(pkg, indexes)
    files = {rel: digest for rel in checked.paths
             if (digest := _tree_digest(pkg, rel)) is not None}
    return {"format": FORMAT, "requirements": list(checked.lines), "files": files}



def env_digest(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def image_env_inputs(pkg: Path, image: str, installer: list[str], indexes: list[str]) -> dict:
    """What decides the environment of a package's requirements on Kubernetes, where the pods
    install them with the image's own Python and pip (``kubernetes/scripts.py``): the same
    requirements part as here, the image reference instead of the portal's Python, and the
    installer's command (its index settings are the image's: the reference stands for them)."""
    return {**requirements_inputs(pkg, indexes), "image": image, "installer": installer}
