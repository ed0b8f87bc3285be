"""What a runtime image is made of and where it goes: the Dockerfile of a package (its own, or
the recipe's over a base image), the digest of everything that decides the image, and the tag
and repository named after it."""


from __future__ import annotations

import hashlib
from dataclasses import dataclass

from kernel.errors import NotFoundError, PaddleCloudError
from paddlecloud_core.contract import job_namespace
from paddlecloud_core.layout import IMAGE_PACKAGE_DIR
from pfs.paths import pfs_path_parse
from pfs.storage import storage_for

from ..backends.base import BackendError
from ..backends.environments import indexes_allowed, requirements_stored

RECIPE = 1  # the Dockerfile below and what the digest covers: a change names every image anew
PACKAGE_DIR = IMAGE_PACKAGE_DIR
REQUIREMENTS = "/train/requirements.txt"
TAG_PREFIX = "pc-"


def runtime_dockerfile(base: str, *, requirements: bool = True) -> str:
    """The Dockerfile of a package: its ``requirements.txt`` first (that layer is kept while
    only the code changes), installed with the base's own ``python3 -m pip``; then the
    package."""
    pip_env = ("PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore "
               "PIP_DISABLE_PIP_VERSION_CHECK=1")
    install = (f"COPY requirements.txt {REQUIREMENTS}\n"
               f"RUN {pip_env} python3 -m pip install -r {REQUIREMENTS}\n") if requirements else ""
    return (f"# Made by PaddleCloud (jobs.builds, recipe {RECIPE}) for a trainer package\n"
            f"FROM {base}\n{install}"
            f"COPY . {PACKAGE_DIR}\n"
            f"WORKDIR {PACKAGE_DIR}\n")


@dataclass(frozen=True)
class BuildInputs:
    dockerfile: str  # its text
    own: bool  # the package's own Dockerfile
    digest: str


def build_inputs(datacenter, package: str, base: str, *,
                 always: bool = False) -> BuildInputs | None:
    """What the runtime image of ``package`` on ``base`` is made of; None when the package has
    neither a Dockerfile nor a requirements.txt (a job's: nothing to build), unless ``always``
    (``paddlectl build``: the package on the base). Reads the package through its PFS storage
    (links leaving it are not followed); ``BackendError`` if it cannot."""
    path = pfs_path_parse(package, field="package")
    storage = storage_for(datacenter, path)
    hasher = hashlib.sha256(f"paddlecloud-build {RECIPE}\0".encode())
    names = set()
    try:
        if not storage.is_dir(path.parts):
            raise BackendError(f"the trainer package {package} is not a directory")
        entries = sorted(storage.walk(path.parts), key=lambda e: e.rel)
        for entry in entries:
            rel = "/".join(entry.rel[len(path.parts):])
            names.add(rel)
            hasher.update(f"{entry.type}\0{rel}\0{entry.target or ''}\0".encode())
            if entry.type == "file":
                for chunk in storage.read(entry.rel):
                    hasher.update(chunk)
                hasher.update(b"\0")
        if "Dockerfile" in names:
            own, text = True, b"".join(storage.read((*path.parts, "Dockerfile"))).decode(
                errors="replace")
        elif "requirements.txt" in names or always:
            if "requirements.txt" in names:  # installed by pip in the build: read as data
                requirements_stored(storage, (*path.parts, "requirements.txt"),
                                    indexes_allowed(datacenter))
            own, text = False, runtime_dockerfile(base,
                                                  requirements="requirements.txt" in names)
        else:
            return None
    except NotFoundError:
        raise BackendError(f"the trainer package {package} is gone") from None
    except PaddleCloudError as exc:
        raise BackendError(f"cannot read the trainer package: {exc.message}") from None
    hasher.update(f"\0{base}\0{text}".encode())
    return BuildInputs(dockerfile=text, own=own, digest=hasher.hexdigest())


def runtime_tag(digest: str) -> str:
    """The tag of the runtime image of that digest."""
    return f"{TAG_PREFIX}{digest[:40]}"


def runtime_image(datacenter, owner, digest: str) -> str:
    """Where the runtime image of that digest goes: one repository per owner."""
    return (f"{datacenter.build_registry}/{job_namespace(datacenter, owner.username)}/runtime:"
            f"{runtime_tag(digest)}")


