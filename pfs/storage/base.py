"""What a PFS storage does: one area (a user's home or a datacenter's public directory).

A storage is given paths as tuples of components *below its area*, already parsed and checked
by ``pfs.paths`` (no empty, ``.`` or ``..`` components, no NUL). It never reads, writes or
deletes anything outside its area, whatever links users' jobs plant in it.

Errors are ``PaddleCloudError``s naming the field ``path`` and the PFS path as the user wrote
it (``self.display(rel)``), so the API and the CLI show them as they are.

Writes are atomic: a file appears under its name only complete and checked. ``Upload``
receives the bytes into a hidden temporary object beside the target and moves it into place on
``commit``; the temporary names start with ``TEMP_PREFIX`` and are never listed.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import asdict, dataclass

from django.conf import settings

from kernel.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    UnprocessableError,
    ValidationError,
)
from paddlecloud_core.layout import UPLOAD_PREFIX

Rel = tuple[str, ...]

TEMP_PREFIX = UPLOAD_PREFIX
CHUNK = 1 << 20  # bytes read or written at a time


class ChecksumError(UnprocessableError):
    code = "checksum_mismatch"


@dataclass(frozen=True)
class Entry:
    """A file, directory or symbolic link in an area."""

    rel: Rel
    type: str  # "file" | "dir" | "link" | "other" (a device, socket or FIFO a job made)
    size: int  # bytes of a file; 0 for directories and links
    mtime: float  # seconds since the epoch
    target: str | None = None  # what a link points to
    mode: int | None = None  # a file's or directory's permission bits; None: not kept here

    @property
    def name(self) -> str:
        return self.rel[-1] if self.rel else ""

    def as_dict(self) -> dict:
        return asdict(self)


class Upload(ABC):
    """Bytes on their way to ``rel``: written in order, then committed or aborted.

    ``offset`` is how many bytes were received so far (an upload resumed after a broken
    connection continues from there). ``sha256`` covers exactly those bytes.
    """

    def __init__(self, rel: Rel, offset: int = 0, hasher=None):
        self.rel = rel
        self.offset = offset
        self.new_hash = hashlib.sha256  # the digest checked: ``digest_with`` chooses another
        self.hasher = hasher or self.new_hash()

    def digest_with(self, new_hash) -> None:
        """Hash with ``new_hash()`` (hashlib-like) instead of SHA-256; before any byte is
        written (``sha256`` and ``finish`` then give that digest)."""
        self.new_hash, self.hasher = new_hash, new_hash()

    def write(self, data: bytes, hashing: Executor | None = None) -> None:
        """Store ``data`` after the bytes received so far. With ``hashing`` (an executor of
        one thread), its SHA-256 is computed there while the bytes are stored: both let go
        of the interpreter lock, so on two cores they take the time of the longer one."""
        if hashing is None:
            self._write(data)
            self.hasher.update(data)
        else:
            hashed = hashing.submit(self.hasher.update, data)
            try:
                self._write(data)
            finally:
                hashed.result()
        self.offset += len(data)

    def hole(self, size: int) -> None:
        """``size`` zero bytes after those received so far: a sparse file's hole, which a
        storage that keeps holes keeps one (the others store the zeros)."""
        zeros = bytes(min(size, CHUNK))
        while size > 0:
            self.write(zeros[:min(size, CHUNK)])
            size -= min(size, CHUNK)

    @property
    def sha256(self) -> str:
        return self.hasher.hexdigest()

    @abstractmethod
    def _write(self, data: bytes) -> None: ...

    def finish(self) -> str:
        """All bytes are in: the SHA-256 of the whole file, to check before ``commit``.

        (A storage that cannot keep a hash across a resume recomputes it here.)
        """
        return self.sha256

    @abstractmethod
    def commit(self, *, overwrite: bool = True) -> Entry:
        """Move the received bytes into place under ``rel`` (atomically) and return the file."""

    @abstractmethod
    def abort(self) -> None:
        """Throw the received bytes away; the target is left as it was."""

    def pause(self) -> None:  # noqa: B027 - optional: most uploads have nothing in flight
        """Between two requests of a resumable upload: wait for what is still being stored
        (an S3 upload's parts in flight) and let go of the threads doing it. A failure is
        raised here, with ``offset`` moved back to what is stored. More bytes may follow."""

    def close(self) -> None:  # noqa: B027 - optional: most uploads hold nothing open
        """Release what the upload holds open; the received bytes stay for a later resume."""


class Storage(ABC):
    """One area of PFS. ``label`` is the area's PFS path, e.g. ``/pfs/dc1/home/alice``."""

    def __init__(self, label: str, *, read_only: bool = False):
        self.label = label
        self.read_only = read_only

    # -- messages ---------------------------------------------------------------------------

    def display(self, rel: Iterable[str]) -> str:
        return "/".join([self.label, *rel])

    def not_found(self, rel: Rel) -> NotFoundError:
        return NotFoundError.for_field("path", f"{self.display(rel)} does not exist",
                                       code="not_found")

    def not_a_dir(self, rel: Rel) -> ValidationError:
        return ValidationError.for_field("path", f"{self.display(rel)} is not a directory",
                                         code="not_a_directory")

    def is_a_dir(self, rel: Rel) -> ValidationError:
        return ValidationError.for_field("path", f"{self.display(rel)} is a directory",
                                         code="is_a_directory")

    def exists(self, rel: Rel) -> ConflictError:
        return ConflictError.for_field("path", f"{self.display(rel)} already exists",
                                       code="exists")

    def through_link(self, rel: Rel) -> ForbiddenError:
        return ForbiddenError.for_field(
            "path", f"{self.display(rel)} is a symbolic link leading outside "
                    f"{self.label}; PFS does not follow it", code="outside_area")

    def too_deep(self, rel: Rel) -> ValidationError:
        """``rel`` is deeper below the area than PFS goes (PADDLECLOUD_PFS_MAX_DEPTH). Named by
        its first components and its depth: its whole name may be thousands of characters."""
        shown = self.display(rel if len(rel) <= 4 else (*rel[:4], "…"))
        return ValidationError.for_field(
            "path", f"{shown} is {len(rel)} levels below {self.label}, deeper than the "
                    f"{self.max_depth} levels PFS allows; remove it (rm -r) or keep your "
                    "trees shallower", code="too_deep")

    @property
    def max_depth(self) -> int:
        return settings.PADDLECLOUD_PFS_MAX_DEPTH

    def check_writable(self, rel: Rel) -> None:
        if self.read_only:
            raise ForbiddenError.for_field("path", f"{self.display(rel)}: {self.label} is "
                                                   "read-only", code="read_only")
        if not rel:
            raise ForbiddenError.for_field("path", f"{self.label} itself cannot be replaced "
                                                   "or removed", code="area_root")

    def check_creatable(self, rel: Rel) -> None:
        """Writable, and no deeper than a walk goes (what a walk could not list, count, send or
        remove must not be made)."""
        self.check_writable(rel)
        if len(rel) > self.max_depth:
            raise self.too_deep(rel)

    # -- reading ----------------------------------------------------------------------------

    @abstractmethod
    def stat(self, rel: Rel, *, follow: bool = False) -> Entry:
        """The entry at ``rel``: a link as a link, or with ``follow`` what it leads to (inside
        the area). Storages without links ignore ``follow``."""

    def is_dir(self, rel: Rel) -> bool:
        """Whether ``rel`` is a directory, following a link at the end (not_found if missing)."""
        return self.stat(rel, follow=True).type == "dir"

    @abstractmethod
    def listdir(self, rel: Rel) -> list[Entry]:
        """The children of the directory ``rel``, sorted by name, temporaries left out."""

    def walk(self, rel: Rel) -> Iterator[Entry]:
        """Everything below the directory ``rel``, depth first, each directory before its
        contents, children sorted by name. Links are listed, not followed.

        Iterative, and bounded: a directory that holds anything deeper than ``max_depth``
        below the area (a job can make one; PFS makes none) ends the walk with ``too_deep``,
        so a listing, a download, a copy or a measure never goes on without end or
        silently short."""
        todo = [iter(self.listdir(rel))]
        while todo:
            entry = next(todo[-1], None)
            if entry is None:
                todo.pop()
                continue
            yield entry
            if entry.type == "dir":
                children = self.listdir(entry.rel)
                if children and len(entry.rel) >= self.max_depth:
                    raise self.too_deep(children[0].rel)
                todo.append(iter(children))

    @abstractmethod
    def read(self, rel: Rel, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The bytes ``[start, end)`` of the file ``rel``, in chunks of at most ``CHUNK``."""

    def extents(self, rel: Rel) -> list[tuple[int, int]]:
        """The ``[start, end)`` ranges of the file ``rel`` that hold data; the rest reads as
        zeros (a sparse file's holes). Storages without holes: the whole file."""
        return [(0, self.stat(rel).size)]

    def usage(self) -> int:
        """Bytes held by the files of the whole area (a full walk: for the reconciler): their
        apparent sizes, upload temporaries left out (uploads reserve their room instead)."""
        return sum(entry.size for entry in self.walk(()) if entry.type == "file")

    # -- writing ----------------------------------------------------------------------------

    @abstractmethod
    def mkdir(self, rel: Rel, *, parents: bool = False) -> Entry:
        """Create the directory ``rel`` (and its missing parents when asked).

        An existing directory is fine with ``parents`` (like ``mkdir -p``), a conflict without.
        """

    @abstractmethod
    def remove(self, rel: Rel, *, recursive: bool = False) -> int:
        """Remove the file, link or directory ``rel`` and return the bytes freed, counted as
        ``usage`` counts them.

        A non-empty directory needs ``recursive``. A link is removed, never its target.
        """

    @abstractmethod
    def upload(self, rel: Rel, upload_id: str) -> Upload:
        """Start receiving a file for ``rel``, or resume the upload ``upload_id``.

        The parent directory must exist and ``rel`` must not be a directory. Resuming
        continues after the bytes already received (their hash is recomputed when this process
        did not see them).
        """

    @abstractmethod
    def move(self, src: Rel, dst: Rel) -> None:
        """Move ``src`` (a file or a directory tree) to ``dst`` within the area.

        A file replaces an existing file atomically. A directory onto an existing directory
        is merged into it, entry by entry; onto anything else it is a conflict.
        """

    def chmod(self, rel: Rel, mode: int) -> None:  # noqa: B027 - optional, as modes are
        """Set the permission bits of the file or directory ``rel`` (a link is refused, never
        followed); storages that keep no modes ignore it."""

    def symlink(self, rel: Rel, target: str) -> None:
        """Create a symbolic link (only storages that have them; a relative ``target``)."""
        raise ValidationError.for_field(
            "path", f"{self.display(rel)}: this storage has no symbolic links", code="no_links")

    def write_bytes(self, rel: Rel, data: bytes | Iterable[bytes], upload_id: str) -> Entry:
        """Write a whole file atomically (a convenience over ``upload``)."""
        upload = self.upload(rel, upload_id)
        try:
            for chunk in [data] if isinstance(data, bytes) else data:
                upload.write(chunk)
            return upload.commit()
        except BaseException:
            upload.abort()
            raise
