"""PFS paths as users write them, and where they live on disk.

    /pfs/{datacenter}/home/{user}/...   read-write, the owner only
    /pfs/{datacenter}/public/...        read-only, every member of the datacenter

A path is parsed and checked before any I/O (``paddlecloud_core.layout``: no empty, ``.`` or
``..`` components), then against the datacenter the request acts in and the caller's own home.
Its area is then mapped onto the datacenter's PFS root; what is below is walked by
``pfs.storage``, which never follows a symbolic link out of the area (a job can create links
in its owner's home).
"""

from __future__ import annotations

from pathlib import Path

from kernel.errors import ForbiddenError, NotFoundError, ValidationError
from paddlecloud_core.layout import (
    OUTPUT_MARKER,
    PEERS_ENDED_DIR,
    PfsPath,
    PfsPathError,
    pfs_home,
    pfs_path_split,
    pfs_public,
)

__all__ = ["PfsPath", "pfs_area_root", "pfs_check_access", "pfs_path_parse", "pfs_shown"]


def pfs_shown(rel: tuple[str, ...]) -> bool:
    """Whether a listing or a directory's download shows the entry at ``rel``: not the files
    PaddleCloud keeps for itself (the marker naming the job an output directory is for, and
    what its trainers on Kubernetes say of each other: ``PADDLECLOUD_PEERS_ENDED``)."""
    return not rel or (rel[-1] != OUTPUT_MARKER and PEERS_ENDED_DIR not in rel)


def pfs_path_parse(text: str, *, field: str = "path") -> PfsPath:
    """Parse ``/pfs/{dc}/home/{user}/…`` or ``/pfs/{dc}/public/…`` (the core's rule); errors
    name ``field``."""
    try:
        return pfs_path_split(text)
    except PfsPathError as exc:
        raise ValidationError.for_field(field, str(exc)) from None


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
            field, f"{path} does not exist (your home is "
                   f"{pfs_home(datacenter.name, user.username)})", code="not_found")
    if path.public and write:
        raise ForbiddenError.for_field(field, f"{path}: {pfs_public(datacenter.name)} is "
                                              "read-only", code="read_only")
