"""What makes a job reproducible: its trainer package's content digest and its image pinned to
a digest (issue 39). The portal records both on a job (``package_digest``, ``image_digest``);
``paddlectl submit -from JOB`` re-runs them and shows what differs.

A package's digest is of its tree as the job sees it, in one stable order (depth first, each
directory before what it holds, names sorted as the PFS lists them): each entry's path below
the package, its kind, and for a directory or file its permission bits where the storage
keeps them (``None``: it keeps none), for a file the SHA-256 of its bytes, for a link where it
leads. Times, owners and the package's own place are not in it: the same tree copied anywhere
has the same digest. Written ``sha256:<64 hex digits>``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

DIGEST_PREFIX = "sha256:"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
MODE_BITS = 0o777  # what of a mode a digest covers and a snapshot keeps: no set-uid bits


class TreeDigest:
    """A package's digest, fed its entries in walk order (``dir``, ``file``, ``link``)."""

    def __init__(self):
        self._hash = hashlib.sha256(b"paddlecloud-package-v1\0")

    def _entry(self, kind: str, path: tuple[str, ...], *fields: str) -> None:
        record = "\0".join((kind, "/".join(path), *fields))
        data = record.encode("utf-8", "surrogateescape")
        self._hash.update(len(data).to_bytes(8, "big") + data)

    @staticmethod
    def _mode(mode: int | None) -> str:
        return "-" if mode is None else format(mode & MODE_BITS, "03o")

    def dir(self, path: tuple[str, ...], mode: int | None = None) -> None:
        self._entry("d", path, self._mode(mode))

    def file(self, path: tuple[str, ...], chunks: Iterable[bytes], mode: int | None = None
             ) -> None:
        content = hashlib.sha256()
        size = 0
        for chunk in chunks:
            content.update(chunk)
            size += len(chunk)
        self.file_hashed(path, content.hexdigest(), size, mode)

    def file_hashed(self, path: tuple[str, ...], sha256: str, size: int,
                    mode: int | None = None) -> None:
        """A file whose bytes were hashed already (while being copied)."""
        self._entry("f", path, self._mode(mode), str(size), sha256)

    def link(self, path: tuple[str, ...], target: str) -> None:
        self._entry("l", path, target)

    def hexdigest(self) -> str:
        return DIGEST_PREFIX + self._hash.hexdigest()


def digest_short(digest: str) -> str:
    """A digest as a table shows it: ``sha256:`` and its first 12 hex digits."""
    return digest[:len(DIGEST_PREFIX) + 12] if DIGEST_RE.match(digest or "") else digest


# --- images ---------------------------------------------------------------------------------------

IMAGE_DIGEST_RE = re.compile(r"@(sha256:[0-9a-f]{64})$")


def image_id_digest(image_id: str | None) -> str:
    """The manifest digest in what a container runtime says a container runs (a pod's
    ``imageID``: ``docker.io/library/python@sha256:…``, ``docker-pullable://repo@sha256:…``);
    "" when it names none a registry could serve (a bare local image id ``sha256:…`` is the
    image's configuration, not its manifest, and pins nothing)."""
    found = IMAGE_DIGEST_RE.search(image_id or "")
    return found.group(1) if found else ""


def image_digest_of(image: str) -> str:
    """The digest an image reference is pinned to (``repo:tag@sha256:…``), else ""."""
    return image_id_digest(image)


def image_pinned(image: str, digest: str) -> str:
    """``image`` pinned to ``digest``: ``repo:tag@sha256:…`` (any digest it had replaced);
    ``image`` itself without a digest."""
    if not digest:
        return image
    return IMAGE_DIGEST_RE.sub("", image) + "@" + digest
