"""Directories as tar streams: unpacked safely on upload, generated on download.

Unpacking trusts nothing in the archive: every member name is checked like a PFS path (no
absolute names, no ``..``, no NUL, no over-long names), only files, directories and links that
stay inside the unpacked tree are accepted, and members are written through the storage, which
never follows a link out of the user's area. The tree is unpacked into a hidden directory and
moved into place only when all of it is in, so a bad member leaves nothing behind.

A tar may be compressed (gzip, bzip2, xz), so its size says little about what it unpacks: the
caller is told what each file will bring the total to *before* its bytes are written (and
refuses what is over the quota or the size limit), and the number of members and what the
stream expands to against its own size are capped here (the settings
``PADDLECLOUD_PFS_TAR_MAX_MEMBERS``, ``…_MAX_RATIO`` and ``…_RATIO_FLOOR``).
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Callable, Iterable, Iterator

from django.conf import settings

from kernel.errors import NotFoundError, PaddleCloudError, TooLargeError, ValidationError
from paddlecloud_core.layout import MAX_COMPONENT, MAX_PATH
from paddlecloud_core.quantity import format_bytes

from .paths import pfs_shown
from .storage import CHUNK, TEMP_PREFIX, Rel, Storage

BLOCK = tarfile.BLOCKSIZE
MAX_HEADER = 1 << 20  # the most a PAX or GNU long-name header may hold (names are 4096 at most)


class _Chunks(io.RawIOBase):
    """A readable file over an iterator of byte chunks (tarfile's stream mode reads it)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            self._pending = next(self._chunks, b"")
            if not self._pending:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def _unsafe(name: str, why: str) -> ValidationError:
    return ValidationError.for_field("tar", f"member {name!r}: {why}; nothing was stored",
                                     code="unsafe_tar")


def _too_large(why: str) -> TooLargeError:
    return TooLargeError.for_field("tar", f"{why}; nothing was stored")


class _Header(tarfile.TarInfo):
    """A member's header, refusing what tarfile would read into memory without bound before
    the member is even seen: a long PAX or GNU long-name header, or a sparse file's map."""

    def _proc_member(self, archive):
        if self.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                         tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK) \
                and self.size > MAX_HEADER:
            raise _unsafe(self.name, f"a header of {self.size} bytes, over the {MAX_HEADER} "
                                     "a header may hold")
        if self.type == tarfile.GNUTYPE_SPARSE:
            self._sparse()
        return super()._proc_member(archive)

    def _sparse(self, *args):
        raise _unsafe(self.name, "sparse files are not accepted")

    _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = _sparse


def _outside(name: str, target: str) -> ValidationError:
    return _unsafe(name, f"links to {target!r}, outside the unpacked directory")


def member_parts(name: str) -> Rel:
    """A member's name as path components below the unpacked directory, or an error."""
    if "\0" in name:
        raise _unsafe(name, "contains a NUL character")
    if name.startswith("/"):
        raise _unsafe(name, "is an absolute name")
    if len(name) > MAX_PATH:
        raise _unsafe(name, f"is longer than {MAX_PATH} characters")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    for part in parts:
        if part == "..":
            raise _unsafe(name, "contains '..'")
        if len(part.encode()) > MAX_COMPONENT:
            raise _unsafe(name, f"has a component longer than {MAX_COMPONENT} bytes")
        if part.startswith(TEMP_PREFIX):
            raise _unsafe(name, f"names starting with {TEMP_PREFIX} are reserved")
    return tuple(parts)


def _leads_out(links: dict[Rel, str], rel: Rel) -> bool:
    """Whether the link at ``rel`` leads out of the unpacked tree, following the tar's other
    links on the way (all of them: a link unpacked later can change where an earlier one
    leads)."""
    stack, todo, hops = list(rel[:-1]), links[rel].split("/"), 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return True
            stack.pop()
            continue
        stack.append(part)
        target = links.get(tuple(stack))
        if target is not None:
            hops += 1
            if hops > 40 or target.startswith("/"):
                return True
            stack.pop()
            todo = target.split("/") + todo
    return False


def tar_extract(storage: Storage, tar_rel: Rel, dest: Rel, upload_id: str, *,
                account: Callable[[int], None]) -> tuple[int, int, int]:
    """Unpack the tar at ``tar_rel`` into the directory ``dest`` (created, or merged into);
    the tar is removed afterwards. Returns (files, bytes) written and the bytes of the files
    it replaced.

    ``account(total)`` is called before each file's bytes are written, with the bytes the
    files will come to with it; it raises to refuse them (quota, size limit), and the refusal
    leaves nothing behind, like any other.
    """
    staging = (*dest[:-1], f"{TEMP_PREFIX}{upload_id}.d")
    files = written = 0
    max_members = settings.PADDLECLOUD_PFS_TAR_MAX_MEMBERS
    ratio, floor = settings.PADDLECLOUD_PFS_TAR_MAX_RATIO, settings.PADDLECLOUD_PFS_TAR_RATIO_FLOOR
    try:
        compressed = storage.stat(tar_rel).size
        storage.mkdir(staging)
        made: set[Rel] = {()}
        links: dict[Rel, str] = {}
        with tarfile.open(fileobj=_Chunks(storage.read(tar_rel)), mode="r|*",
                          tarinfo=_Header) as archive:
            for count, member in enumerate(archive, 1):
                if count > max_members:
                    raise _too_large(f"holds more than {max_members} members, the most a tar "
                                     "upload may hold")
                # The stream as unpacked so far, this member's bytes included.
                expanded = archive.fileobj.tell() + (member.size if member.isreg() else 0)
                if expanded > floor and expanded > ratio * compressed:
                    raise _too_large(
                        f"unpacks to more than {ratio} times its own {format_bytes(compressed)}"
                        f" (past {format_bytes(floor)}), the most a tar upload may expand")
                parts = member_parts(member.name)
                if not parts:
                    continue
                if len(dest) + len(parts) > storage.max_depth:
                    raise _unsafe(member.name, f"would be {len(dest) + len(parts)} levels below "
                                               f"{storage.label}, deeper than the "
                                               f"{storage.max_depth} PFS allows")
                if any(parts[:depth] in links for depth in range(1, len(parts))):
                    raise _unsafe(member.name, "is inside a link the archive made")
                _make_dirs(storage, staging, parts[:-1], made)
                rel = (*staging, *parts)
                if member.isdir():
                    _make_dirs(storage, staging, parts, made)
                elif member.isreg():
                    account(written + member.size)
                    source = archive.extractfile(member)
                    storage.write_bytes(rel, iter(lambda s=source: s.read(CHUNK), b""),
                                        f"{upload_id}-{count}")
                    files += 1
                    written += member.size
                elif member.issym():
                    links[parts] = member.linkname
                    if member.linkname.startswith("/") or _leads_out(links, parts):
                        raise _outside(member.name, member.linkname)
                    storage.symlink(rel, member.linkname)
                elif member.islnk():
                    raise _unsafe(member.name, "hard links are not accepted")
                else:
                    raise _unsafe(member.name, "devices, FIFOs and other special files are not "
                                               "accepted")
        for rel, target in links.items():  # again, now that every link is known
            if _leads_out(links, rel):
                raise _outside("/".join(rel), target)
        replaced = _check_merge(storage, staging, dest)
        storage.move(staging, dest)
    except tarfile.TarError as exc:
        _cleanup(storage, staging)
        raise ValidationError.for_field("tar", f"not a valid tar stream ({exc}); nothing was "
                                               "stored", code="bad_tar") from None
    except BaseException:
        _cleanup(storage, staging)
        raise
    finally:
        with contextlib.suppress(PaddleCloudError, OSError):
            storage.remove(tar_rel)
    return files, written, replaced


def _check_merge(storage: Storage, staging: Rel, dest: Rel) -> int:
    """Before anything moves: refuse a merge that would put a file where a directory is (or
    the other way round), and count the bytes of the files it will replace."""
    replaced = 0
    for entry in storage.walk(staging):
        rel = (*dest, *entry.rel[len(staging):])
        try:
            there = storage.stat(rel)
        except NotFoundError:
            continue
        if entry.type == "dir" and there.type != "dir":
            raise storage.exists(rel)
        if entry.type != "dir" and there.type == "dir":
            raise storage.is_a_dir(rel)
        replaced += there.size
    return replaced


def _make_dirs(storage: Storage, staging: Rel, parts: Rel, made: set[Rel]) -> None:
    for depth in range(1, len(parts) + 1):
        prefix = parts[:depth]
        if prefix not in made:
            storage.mkdir((*staging, *prefix), parents=True)
            made.add(prefix)


def _cleanup(storage: Storage, staging: Rel) -> None:
    with contextlib.suppress(PaddleCloudError, OSError):
        storage.remove(staging, recursive=True)


def tar_stream(storage: Storage, rel: Rel) -> Iterator[bytes]:
    """The directory ``rel`` as a tar stream (PAX format), members named relative to it.

    The tree is walked first, so a tree the walk refuses (deeper than PFS goes) is an error
    answered before the first byte, not a stream cut short. Files are read as they are sent,
    so memory holds the entries but no file's bytes. A file that shrinks while it is sent is
    padded with zeros, so the stream stays a valid tar.
    """
    return _tar_members(storage, rel, [e for e in storage.walk(rel) if pfs_shown(e.rel)])


def _tar_members(storage: Storage, rel: Rel, entries: list) -> Iterator[bytes]:
    for entry in entries:
        info = tarfile.TarInfo("/".join(entry.rel[len(rel):]))
        info.mtime = int(entry.mtime)
        info.mode = 0o755 if entry.type == "dir" else 0o644
        if entry.type == "dir":
            info.type = tarfile.DIRTYPE
        elif entry.type == "link":
            info.type, info.linkname = tarfile.SYMTYPE, entry.target or ""
        elif entry.type == "file":
            info.size = entry.size
        else:
            continue
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        if entry.type != "file":
            continue
        sent = 0
        try:
            for chunk in storage.read(entry.rel, 0, entry.size):
                sent += len(chunk)
                yield chunk
        except PaddleCloudError:  # removed since it was listed
            pass
        if sent < entry.size:
            yield bytes(entry.size - sent)
        if entry.size % BLOCK:
            yield bytes(BLOCK - entry.size % BLOCK)
    yield bytes(2 * BLOCK)
