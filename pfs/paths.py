"""PFS paths as users write them, and where they live on disk.

    /pfs/{datacenter}/home/{user}/...   read-write, the owner only
    /pfs/{datacenter}/public/...        read-only, every member of the datacenter

A path is parsed and checked before any I/O: no empty, ``.`` or ``..`` components, the
datacenter the request acts in, the caller's own home. Its area is then mapped onto the
datacenter's PFS root; what is below is walked by ``pfs.storage``, which never follows a
symbolic link out of the area (a job can create links in its owner's home).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paddlecloud.errors import ForbiddenError, NotFoundError, ValidationError

MAX_PATH = 4096
MAX_COMPONENT = 255
# Names the file service uses for uploads in progress: hidden, and not for users to make.
RESERVED_PREFIX = ".pfs-upload-"


@dataclass(frozen=True)
class PfsPath:
    datacenter: str
    area: str  # "home" or "public"
    user: str | None  # the home's owner; None for public
    parts: tuple[str, ...]  # below the home or public directory

    def __str__(self) -> str:
        return "/".join([self.area_label, *self.parts])

    @property
    def area_label(self) -> str:
        """The PFS path of the area: ``/pfs/{dc}/home/{user}`` or ``/pfs/{dc}/public``."""
        base = f"/pfs/{self.datacenter}/{self.area}"
        return base if self.user is None else f"{base}/{self.user}"

    @property
    def public(self) -> bool:
        return self.area == "public"


def _invalid(field: str, message: str) -> ValidationError:
    return ValidationError.for_field(field, message)


def pfs_path_parse(text: str, *, field: str = "path") -> PfsPath:
    """Parse ``/pfs/{dc}/home/{user}/…`` or ``/pfs/{dc}/public/…``; errors name ``field``."""
    if not isinstance(text, str) or not text:
        raise _invalid(field, "a PFS path is required, e.g. /pfs/datacenter1/home/alice/pkg")
    if len(text) > MAX_PATH:
        raise _invalid(field, f"longer than {MAX_PATH} characters")
    if "\0" in text:
        raise _invalid(field, "contains a NUL character")
    if not text.startswith("/pfs/"):
        raise _invalid(field, f"{text!r} is not a PFS path: it must start with "
                              "/pfs/{datacenter}/home/{user}/ or /pfs/{datacenter}/public/")
    parts = text[len("/pfs/"):].rstrip("/").split("/")
    for part in parts:
        if part in ("", "."):
            raise _invalid(field, f"{text!r} has an empty or '.' component")
        if part == "..":
            raise _invalid(field, f"{text!r}: '..' is not allowed in PFS paths")
        if part.startswith(RESERVED_PREFIX):
            raise _invalid(field, f"{text!r}: names starting with {RESERVED_PREFIX} are "
                                  "reserved for uploads in progress")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT:
            raise _invalid(field, f"a component of {text!r} is longer than the file system's "
                                  f"limit of {MAX_COMPONENT} bytes")
    if len(parts) < 2 or parts[1] not in ("home", "public"):
        raise _invalid(field, f"{text!r} is not a PFS path: it must start with "
                              "/pfs/{datacenter}/home/{user}/ or /pfs/{datacenter}/public/")
    datacenter, area = parts[0], parts[1]
    if area == "home":
        if len(parts) < 3:
            raise _invalid(field, f"{text!r} names no user: use /pfs/{datacenter}/home/{{user}}/…")
        return PfsPath(datacenter, "home", parts[2], tuple(parts[3:]))
    return PfsPath(datacenter, "public", None, tuple(parts[2:]))


def pfs_area_root(datacenter, path: PfsPath) -> Path:
    """The directory on disk that holds the path's home or public area."""
    if path.public:
        return datacenter.public_path
    return datacenter.pfs_root_path / "home" / path.user


def pfs_check_access(user, datacenter, path: PfsPath, *, write: bool = False,
                     field: str = "path") -> None:
    """Refuse ``path`` unless ``user`` may read it (or write it) in ``datacenter``.

    Another user's home is answered as if it did not exist: its name gives nothing away.
    """
    if path.datacenter != datacenter.name:
        raise ForbiddenError.for_field(
            field, f"{path} is in datacenter {path.datacenter!r}, but you are working in "
                   f"{datacenter.name!r}", code="wrong_datacenter")
    if not path.public and path.user != user.username:
        raise NotFoundError.for_field(
            field, f"{path} does not exist (your home is /pfs/{datacenter.name}/home/"
                   f"{user.username})", code="not_found")
    if path.public and write:
        raise ForbiddenError.for_field(field, f"{path}: /pfs/{datacenter.name}/public is "
                                              "read-only", code="read_only")
