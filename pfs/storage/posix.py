"""PFS on a POSIX file system: a CephFS/NFS/HDFS mount in production, ``var/pfs`` locally.

Users' jobs write into the same tree and can plant symbolic links at any moment, so a path is
never handed to the kernel whole. It is walked one component at a time from the area's
directory descriptor with ``O_NOFOLLOW``; a link met on the way is read and resolved by hand,
and only while it stays inside the area (like ``openat2(RESOLVE_BENEATH)``). Every operation
then acts on ``(directory fd, name)`` without following the last component, so a link swapped
in between two steps is seen as a link, never followed out of the area.

A storage made with ``links=False`` follows no link at all (like ``RESOLVE_NO_SYMLINKS``): the
portal's own way into a job's files (``jobs.files``), where every path is one the
portal made and a link can only be something a job planted.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import mmap
import os
import stat as stat_mod
import uuid
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path

from kernel.errors import ForbiddenError, ValidationError, storage_full

from .base import CHUNK, TEMP_PREFIX, Entry, Rel, Storage, Upload

O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO a job left where a file is expected must not hang the open (it is then
# refused as not a regular file); regular files ignore the flag.
O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
O_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
MAX_LINKS = 40  # as the kernel's limit on links followed in one lookup
OPEN_DEPTH = 64  # directories a recursive remove holds open at once
ADOPT_WINDOW = 32 << 20  # bytes of an adopted body mapped at a time to hash it (a page multiple)
RELISTS = 100  # times a recursive remove lists a directory that is still not empty again


def _entry(rel: Rel, st: os.stat_result, target: str | None = None) -> Entry:
    if stat_mod.S_ISREG(st.st_mode):
        kind, size = "file", st.st_size
    elif stat_mod.S_ISDIR(st.st_mode):
        kind, size = "dir", 0
    elif stat_mod.S_ISLNK(st.st_mode):
        kind, size = "link", 0
    else:
        kind, size = "other", 0
    mode = stat_mod.S_IMODE(st.st_mode) if kind in ("file", "dir") else None
    return Entry(rel=rel, type=kind, size=size, mtime=st.st_mtime, target=target, mode=mode)


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would, for every thread)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _readlink(dir_fd: int, name: str) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


def _os_errors(method):
    """What the kernel says when a job changes the tree under an operation, as PFS errors."""

    @functools.wraps(method)
    def wrapper(self, rel, *args, **kwargs):
        try:
            return method(self, rel, *args, **kwargs)
        except FileNotFoundError:
            raise self.not_found(rel) from None
        except NotADirectoryError:
            raise self.not_a_dir(rel) from None
        except IsADirectoryError:
            raise self.is_a_dir(rel) from None
        except FileExistsError:
            raise self.exists(rel) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self.through_link(rel) from None
            if (full := storage_full(exc)) is not None:
                raise full from None
            raise

    return wrapper


def _chunks(fd: int, start: int, end: int) -> Iterator[bytes]:
    try:
        position = start
        while position < end:
            data = os.pread(fd, min(CHUNK, end - position), position)
            if not data:
                break
            position += len(data)
            yield data
    finally:
        os.close(fd)


class _Dir:
    """A directory being emptied: open, the names left to remove, its name in its parent,
    and whether its files count in usage (not inside an upload's temporary)."""

    def __init__(self, fd: int, name: str, counted: bool):
        self.fd, self.name, self.counted = fd, name, counted
        self.todo = os.listdir(fd)
        self.relisted = 0


def _tree_remove(parent_fd: int, name: str) -> int:
    """Remove the directory ``name`` of ``parent_fd`` and all it holds, however deep, never
    following a link; the bytes of the files removed, counted as usage counts them (apparent
    sizes, upload temporaries left out).

    Iterative, with at most OPEN_DEPTH directories open: a directory met deeper is moved up
    into the tree's top directory under a hidden name and removed from there, so a tree of
    thousands of levels neither exhausts the stack nor the descriptors. A directory a job
    keeps filling while it is emptied is given up after RELISTS tries."""
    top = _Dir(os.open(name, O_DIR, dir_fd=parent_fd), name, counted=True)
    stack, moved, freed = [top], set(), 0
    try:
        while stack:
            here = stack[-1]
            if not here.todo:
                parent = stack[-2].fd if len(stack) > 1 else parent_fd
                try:
                    os.rmdir(here.name, dir_fd=parent)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    here.relisted += 1
                    if here.relisted > RELISTS:
                        raise
                    here.todo = os.listdir(here.fd)  # what came in meanwhile, or was moved up
                    continue
                os.close(stack.pop().fd)
                continue
            child = here.todo.pop()
            counted = here.counted and (not child.startswith(TEMP_PREFIX) or child in moved)
            try:
                st = os.stat(child, dir_fd=here.fd, follow_symlinks=False)
                if not stat_mod.S_ISDIR(st.st_mode):
                    os.unlink(child, dir_fd=here.fd)
                    if counted and stat_mod.S_ISREG(st.st_mode):
                        freed += st.st_size
                elif len(stack) < OPEN_DEPTH:
                    stack.append(_Dir(os.open(child, O_DIR, dir_fd=here.fd), child, counted))
                else:
                    hidden = f"{TEMP_PREFIX}rm-{uuid.uuid4().hex}"
                    os.rename(child, hidden, src_dir_fd=here.fd, dst_dir_fd=top.fd)
                    top.todo.append(hidden)
                    if counted:
                        moved.add(hidden)
            except FileNotFoundError:  # removed meanwhile
                continue
            except (IsADirectoryError, NotADirectoryError):  # swapped meanwhile: look again
                here.todo.append(child)
            except OSError as exc:
                if exc.errno != errno.ELOOP:  # a directory swapped for a link: look again
                    raise
                here.todo.append(child)
    finally:
        for opened in stack:
            os.close(opened.fd)
    return freed


class _Location:
    """An open directory and a name in it: where one path's last component is."""

    def __init__(self, fd: int, name: str | None, rel: Rel):
        self.fd = fd
        self.name = name  # None: the area root itself (fd is the root)
        self.rel = rel  # the path with links resolved, below the area


class PosixStorage(Storage):
    def __init__(self, label: str, root: Path, *, read_only: bool = False, links: bool = True):
        super().__init__(label, read_only=read_only)
        self.root = Path(root)
        self.links = links  # False: no link is followed, even one that stays inside
        self._owner: tuple[int, int] | bool | None = False  # False: not looked up yet

    def owner(self) -> tuple[int, int] | None:
        """Whom what the portal creates here is given to: the owner (uid, gid) of the area's
        root when the portal runs as root and the root is someone else's — a home whose jobs
        run as its user's own host uid (``jobs.backends.local``: the Security model) — so that
        its jobs can write whatever the portal made there. None: new entries stay the
        portal's."""
        if self._owner is False:
            self._owner = None
            if os.geteuid() == 0:
                with contextlib.suppress(OSError):
                    st = os.stat(self.root)
                    if st.st_uid != 0:
                        self._owner = (st.st_uid, st.st_gid)
        return self._owner

    def _give(self, fd: int) -> None:
        """Give the entry open on ``fd``, just created, to the area's owner (see ``owner``)."""
        owner = self.owner()
        if owner and os.fstat(fd).st_uid != owner[0]:
            os.fchown(fd, *owner)

    def through_link(self, rel: Rel):
        if self.links:
            return super().through_link(rel)
        return ForbiddenError.for_field(
            "path", f"{self.display(rel)} is, or lies under, a symbolic link; the portal "
                    "follows no links in a job's files (remove the link)", code="link_refused")

    def not_a_file(self, rel: Rel) -> ValidationError:
        return ValidationError.for_field("path", f"{self.display(rel)} is not a regular file",
                                         code="not_a_file")

    # -- walking ----------------------------------------------------------------------------

    def _open_root(self) -> int:
        try:
            return os.open(self.root, O_DIR)
        except FileNotFoundError:
            raise self.not_found(()) from None

    def _link_parts(self, target: str, rel: Rel) -> tuple[list[str], bool]:
        """A link's target as components, and whether it restarts from the area root."""
        if not target.startswith("/"):
            return target.split("/"), False
        # Absolute links are followed only when they name a place inside this area, as a job
        # sees it (/pfs/dc/home/user/…) or as the file system holds it.
        for base in (self.label, str(self.root)):
            if target == base or target.startswith(base.rstrip("/") + "/"):
                return target[len(base):].split("/"), True
        raise self.through_link(rel)

    @contextlib.contextmanager
    def _locate(self, rel: Rel, *, follow_last: bool = False) -> Iterator[_Location]:
        """Where ``rel`` is: its directory open, links inside the area followed.

        Every directory on the way is opened with ``O_NOFOLLOW`` relative to the one before; a
        link is read and its target walked in turn, never above the area root.
        """
        fds = [self._open_root()]
        names: list[str] = []
        todo = list(rel)
        links = 0
        final: str | None = None
        try:
            while todo:
                name = todo.pop(0)
                if name in ("", "."):
                    continue
                if name == "..":
                    if not names:
                        raise self.through_link(rel)
                    os.close(fds.pop())
                    names.pop()
                    continue
                target = _readlink(fds[-1], name) if todo or follow_last else None
                if target is not None:
                    if not self.links:
                        raise self.through_link(rel)
                    links += 1
                    if links > MAX_LINKS:
                        raise ValidationError.for_field(
                            "path", f"{self.display(rel)}: too many levels of symbolic links",
                            code="link_loop")
                    parts, absolute = self._link_parts(target, rel)
                    if absolute:
                        while len(fds) > 1:
                            os.close(fds.pop())
                        names.clear()
                    todo = parts + todo
                    continue
                if not todo:
                    final = name
                    break
                try:
                    fd = os.open(name, O_DIR, dir_fd=fds[-1])
                except FileNotFoundError:
                    raise self.not_found((*names, name)) from None
                except OSError as exc:
                    if exc.errno == errno.ENOTDIR:
                        raise self.not_a_dir((*names, name)) from None
                    if exc.errno == errno.ELOOP:  # became a link since readlink: refuse
                        raise self.through_link(rel) from None
                    raise
                fds.append(fd)
                names.append(name)
            if final is None and names:  # the path ended at a directory reached through '..'
                final = names.pop()
                os.close(fds.pop())
            location = _Location(fds[-1], final, (*names, final) if final else ())
            while len(fds) > 1:
                os.close(fds.pop(0))
            yield location
        finally:
            for fd in fds:
                os.close(fd)

    def _lstat(self, loc: _Location) -> os.stat_result:
        if loc.name is None:
            return os.fstat(loc.fd)
        try:
            return os.stat(loc.name, dir_fd=loc.fd, follow_symlinks=False)
        except FileNotFoundError:
            raise self.not_found(loc.rel) from None

    @contextlib.contextmanager
    def _open(self, loc: _Location, flags: int, mode: int = 0o777) -> Iterator[int]:
        if loc.name is None:
            fd = os.dup(loc.fd)
        else:
            try:
                fd = os.open(loc.name, flags, mode, dir_fd=loc.fd)
                if flags & os.O_CREAT:
                    self._give(fd)
            except FileNotFoundError:
                raise self.not_found(loc.rel) from None
            except OSError as exc:
                if exc.errno == errno.ENOTDIR:
                    raise self.not_a_dir(loc.rel) from None
                if exc.errno == errno.ELOOP:
                    raise self.through_link(loc.rel) from None
                if exc.errno == errno.ENXIO:  # a FIFO nobody reads, opened to write
                    raise self.not_a_file(loc.rel) from None
                raise
        try:
            yield fd
        finally:
            os.close(fd)

    # -- reading ----------------------------------------------------------------------------

    @_os_errors
    def stat(self, rel: Rel, *, follow: bool = False) -> Entry:
        with self._locate(rel, follow_last=follow) as loc:
            st = self._lstat(loc)
            target = _readlink(loc.fd, loc.name) if stat_mod.S_ISLNK(st.st_mode) else None
            return _entry(tuple(rel), st, target)

    @_os_errors
    def listdir(self, rel: Rel) -> list[Entry]:
        with self._locate(rel, follow_last=True) as loc, self._open(loc, O_DIR) as fd:
            entries = []
            with os.scandir(fd) as it:
                for item in it:
                    if item.name.startswith(TEMP_PREFIX):
                        continue
                    try:
                        st = item.stat(follow_symlinks=False)
                    except FileNotFoundError:  # removed while listing
                        continue
                    target = _readlink(fd, item.name) if item.is_symlink() else None
                    entries.append(_entry((*rel, item.name), st, target))
        return sorted(entries, key=lambda e: e.name)

    @_os_errors
    def read(self, rel: Rel, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        # Opened now, so a missing file or a directory is an error before any byte is sent.
        with self._locate(rel, follow_last=True) as loc, self._open(loc, O_FILE) as fd:
            st = self._regular(fd, rel)
            end = st.st_size if end is None else min(end, st.st_size)
            return _chunks(os.dup(fd), start, end)

    @_os_errors
    def resolved(self, rel: Rel) -> Path:
        """Where the regular file ``rel`` is on disk, links inside the area followed as
        ``read`` follows them: the root joined with components none of which was a link when
        looked at (a server that opens it must still refuse links: one may be planted since)."""
        with self._locate(rel, follow_last=True) as loc, self._open(loc, O_FILE) as fd:
            self._regular(fd, rel)
            return self.root.joinpath(*loc.rel)

    @_os_errors
    def extents(self, rel: Rel) -> list[tuple[int, int]]:
        with self._locate(rel, follow_last=True) as loc, self._open(loc, O_FILE) as fd:
            size, ranges, position = self._regular(fd, rel).st_size, [], 0
            while position < size:
                try:
                    start = os.lseek(fd, position, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:  # only a hole is left
                        break
                    if exc.errno == errno.EINVAL:  # a file system that cannot say: all data
                        return [(0, size)]
                    raise
                end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
                ranges.append((start, end))
                position = end
            return ranges

    def _regular(self, fd: int, rel: Rel) -> os.stat_result:
        st = os.fstat(fd)
        if stat_mod.S_ISDIR(st.st_mode):
            raise self.is_a_dir(rel)
        if not stat_mod.S_ISREG(st.st_mode):
            raise self.not_a_file(rel)
        return st

    @_os_errors
    def open(self, rel: Rel, *, append: bool = False) -> int:
        """A descriptor of the regular file ``rel``: for reading, or (``append``) for appending,
        created if missing. The caller closes it. Anything but a regular file is refused."""
        if append:
            self.check_creatable(rel)
        with self._locate(rel, follow_last=not append) as loc, \
                self._open(loc, O_APPEND if append else O_FILE, 0o664) as fd:
            self._regular(fd, rel)
            os.set_blocking(fd, True)
            return os.dup(fd)

    # -- writing ----------------------------------------------------------------------------

    @_os_errors
    def mkdir(self, rel: Rel, *, parents: bool = False) -> Entry:
        self.check_creatable(rel)
        if parents:
            for depth in range(1, len(rel)):
                self._mkdir_one(rel[:depth], exist_ok=True)
        return self._mkdir_one(rel, exist_ok=parents)

    def _mkdir_one(self, rel: Rel, *, exist_ok: bool) -> Entry:
        with self._locate(rel) as loc:
            try:
                os.mkdir(loc.name, 0o775, dir_fd=loc.fd)
                if self.owner():
                    os.chown(loc.name, *self.owner(), dir_fd=loc.fd, follow_symlinks=False)
            except FileExistsError:
                # With parents, an existing directory (or a link to one inside) will do.
                if not (exist_ok and self.is_dir(rel)):
                    raise self.exists(rel) from None
            return _entry(tuple(rel), os.stat(loc.name, dir_fd=loc.fd, follow_symlinks=False))

    @_os_errors
    def remove(self, rel: Rel, *, recursive: bool = False) -> int:
        self.check_writable(rel)
        with self._locate(rel) as loc:
            st = self._lstat(loc)
            if not stat_mod.S_ISDIR(st.st_mode):
                os.unlink(loc.name, dir_fd=loc.fd)
                return st.st_size if stat_mod.S_ISREG(st.st_mode) else 0
            if not recursive:
                try:
                    os.rmdir(loc.name, dir_fd=loc.fd)
                except OSError as exc:
                    if exc.errno == errno.ENOTEMPTY:
                        raise ValidationError.for_field(
                            "path", f"{self.display(rel)} is not empty; remove it recursively",
                            code="not_empty") from None
                    raise
                return 0
            return _tree_remove(loc.fd, loc.name)

    @_os_errors
    def symlink(self, rel: Rel, target: str) -> None:
        self.check_creatable(rel)
        with self._locate(rel) as loc:
            try:
                os.symlink(target, loc.name, dir_fd=loc.fd)
                if self.owner():
                    os.chown(loc.name, *self.owner(), dir_fd=loc.fd, follow_symlinks=False)
            except FileExistsError:
                raise self.exists(rel) from None

    @_os_errors
    def chmod(self, rel: Rel, mode: int) -> None:
        self.check_writable(rel)
        with self._locate(rel) as loc, self._open(loc, O_FILE) as fd:
            st = os.fstat(fd)
            if not (stat_mod.S_ISREG(st.st_mode) or stat_mod.S_ISDIR(st.st_mode)):
                raise self.not_a_file(rel)
            os.fchmod(fd, mode)

    @_os_errors
    def upload(self, rel: Rel, upload_id: str) -> Upload:
        self.check_creatable(rel)
        if not upload_id or "/" in upload_id or upload_id.startswith("."):
            raise ValueError(f"bad upload id {upload_id!r}")
        with self._locate(rel) as loc:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(loc.name, dir_fd=loc.fd, follow_symlinks=False)
                if stat_mod.S_ISDIR(st.st_mode):
                    raise self.is_a_dir(rel)
            return _PosixUpload(self, loc, TEMP_PREFIX + upload_id)

    @_os_errors
    def move(self, src: Rel, dst: Rel) -> None:
        self.check_writable(src)
        self.check_creatable(dst)
        with self._locate(src) as s, self._locate(dst) as d:
            if d.rel[:len(s.rel)] == s.rel:
                raise ValidationError.for_field(
                    "path", f"cannot move {self.display(src)} into itself "
                            f"({self.display(dst)})", code="invalid")
            kind = self._lstat(s).st_mode
            try:
                target = os.stat(d.name, dir_fd=d.fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                target = None
            if not stat_mod.S_ISDIR(kind) or target is None:
                if target is not None and stat_mod.S_ISDIR(target):
                    raise self.is_a_dir(dst)
                os.rename(s.name, d.name, src_dir_fd=s.fd, dst_dir_fd=d.fd)
                return
            if not stat_mod.S_ISDIR(target):
                raise self.exists(dst)
        for child in self.listdir(src):  # merge a directory into an existing one
            self.move(child.rel, (*dst, child.name))
        self.remove(src, recursive=True)  # only temporaries can be left in it


class _PosixUpload(Upload):
    """Bytes written to a hidden file beside the target, renamed into place on commit."""

    def __init__(self, storage: PosixStorage, loc: _Location, temp: str):
        self.storage = storage
        self.dir_fd = os.dup(loc.fd)
        self.name = loc.name
        self.temp = temp
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self.fd = os.open(temp, flags, 0o664, dir_fd=self.dir_fd)
        except BaseException:
            os.close(self.dir_fd)
            raise
        try:
            storage._give(self.fd)
        except BaseException:
            self.close()
            raise
        # A resumed upload continues after what is there; the hash of those bytes is computed
        # again only when needed (not to abort or to report the offset).
        super().__init__(loc.rel, os.fstat(self.fd).st_size)
        self._hashed = self.offset == 0

    def _rehash(self) -> None:
        if not self._hashed:
            position = 0
            while position < self.offset:
                data = os.pread(self.fd, min(CHUNK, self.offset - position), position)
                if not data:
                    break
                self.hasher.update(data)
                position += len(data)
            self._hashed = True

    def write(self, data: bytes, hashing: Executor | None = None) -> None:
        self._rehash()
        try:
            super().write(data, hashing)
        except BaseException:
            # The hash may have taken bytes that were not stored: taken again from those that
            # are, should the upload go on.
            self.hasher, self._hashed = self.new_hash(), False
            raise

    def adopt(self, src_dir_fd: int, name: str, fd: int) -> bool:
        """Take the file ``name`` of ``src_dir_fd`` (open on ``fd``: a body a web server in
        front received, in a directory only it and the portal can enter) as this upload's
        first bytes, by a rename: no byte copied. False when it cannot be (bytes are here
        already, another file system): copy it then."""
        if self.offset != 0:
            return False
        # Hashed before it moves into the home (where a job could truncate it under a map):
        # where it lies in the page cache, mapped, not copied.
        # A window at a time, so that the portal's resident memory does not grow with the file.
        size, hasher = os.fstat(fd).st_size, self.new_hash()
        for start in range(0, size, ADOPT_WINDOW):
            with mmap.mmap(fd, min(ADOPT_WINDOW, size - start), prot=mmap.PROT_READ,
                           offset=start) as mapped:
                view = memoryview(mapped)
                try:
                    hasher.update(view)
                finally:
                    view.release()
        try:
            os.rename(name, self.temp, src_dir_fd=src_dir_fd, dst_dir_fd=self.dir_fd)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                return False
            raise
        os.close(self.fd)
        self.fd = os.dup(fd)
        os.fchmod(self.fd, 0o664 & ~_umask())  # as the uploads written here are made
        self.storage._give(self.fd)
        self.hasher, self.offset, self._hashed = hasher, size, True
        return True

    def hole(self, size: int) -> None:
        """Kept a hole: the file is made longer, nothing is written."""
        self._rehash()
        os.ftruncate(self.fd, self.offset + size)
        zeros = memoryview(bytes(min(size, CHUNK)))
        left = size
        while left > 0:
            self.hasher.update(zeros[:min(left, CHUNK)])
            left -= min(left, CHUNK)
        self.offset += size

    def finish(self) -> str:
        self._rehash()
        return super().finish()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                written = os.pwrite(self.fd, view, self.offset + len(data) - len(view))
                view = view[written:]
        except OSError as exc:
            # (A full file system, say.) What was written of ``data`` goes: the upload holds
            # what it received whole, and the space a part took is given back.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.offset)
            if (full := storage_full(exc)) is not None:
                raise full from None
            raise

    def commit(self, *, overwrite: bool = True) -> Entry:
        # No fsync, as cp does not: an interrupted upload is never visible, a power loss is the
        # file system's business (CephFS and NFS have their own guarantees).
        try:
            if overwrite:
                os.rename(self.temp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            else:  # link() fails if the name exists: no window where a file could be clobbered
                os.link(self.temp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd,
                        follow_symlinks=False)
                os.unlink(self.temp, dir_fd=self.dir_fd)
        except FileExistsError:
            raise self.storage.exists(self.rel) from None
        except FileNotFoundError:  # the directory was removed meanwhile
            raise self.storage.not_found(self.rel[:-1]) from None
        except IsADirectoryError:
            raise self.storage.is_a_dir(self.rel) from None
        except OSError as exc:
            if exc.errno == errno.ENOTEMPTY:
                raise self.storage.is_a_dir(self.rel) from None
            raise
        st = os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        self.close()
        return _entry(self.rel, st)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.temp, dir_fd=self.dir_fd)
        self.close()

    def close(self) -> None:
        for attr in ("fd", "dir_fd"):
            fd = getattr(self, attr, None)
            if fd is not None:
                os.close(fd)
                setattr(self, attr, None)

