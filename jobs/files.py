"""A job's files in its owner's PFS home, as the portal reads and writes them (every backend):
the output directory, each replica's log and metrics in it, and the trainer package.

Replicas write ``jobs/<name>/output/`` in the owner's home: on the local backend as
processes, on Kubernetes through the PFS volume mounted in their pods. Logs there outlive
the replicas, so the portal reads them after the pods are gone.

A job can plant anything in its owner's home — a link where its log was, a FIFO, a link
in place of ``jobs/<name>`` — and the portal acts with its own privileges. So the portal never
hands the kernel a path into a home: every byte it reads or writes there goes through
``job_home``, a PFS storage that follows **no** symbolic link (not even one inside the home)
and opens only regular files, one directory descriptor at a time (``pfs.storage.posix``).
The trainer package, a directory the user chose, is read like any PFS path: links that stay
inside its area are followed, none that leave it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernel.errors import NotFoundError, PaddleCloudError
from paddlecloud_core.layout import (
    OUTPUT_MARKER,
    PfsPath,
    build_log_rel,
    checkpoints_aside,
    checkpoints_rel,
    log_relpath,
    metrics_relpath,
    output_aside,
    output_rel,
    package_snapshot_rel,
    pfs_home,
)
from paddlecloud_core.snapshots import MODE_BITS, TreeDigest
from pfs.paths import pfs_area_root, pfs_path_parse
from pfs.storage import TEMP_PREFIX, Rel, Storage, storage_for
from pfs.storage.posix import PosixStorage

from .backends.base import BackendError


def _home(job) -> PfsPath:
    return PfsPath(job.datacenter.name, "home", job.owner.username, ())


def home_dir(job) -> Path:
    """The owner's home on disk (for the replicas' environment; the portal uses ``job_home``)."""
    return pfs_area_root(job.datacenter, _home(job))


def job_home(job) -> PosixStorage:
    """The owner's home, as the portal may touch it for a job: no link followed."""
    label = pfs_home(job.datacenter.name, job.owner.username)
    return PosixStorage(label, home_dir(job), links=False)


def output_dir(job) -> Path:
    """The output directory on disk, as replicas see it (``PADDLE_OUTPUT_DIR``)."""
    return home_dir(job).joinpath(*output_rel(job.name))


def checkpoints_dir(job) -> Path:
    """The checkpoint directory on disk, as replicas see it (``PADDLE_CHECKPOINT_DIR``)."""
    return home_dir(job).joinpath(*checkpoints_rel(job.name))


def _in_output(job, relpath: str) -> Rel:
    return (*output_rel(job.name), *relpath.split("/"))


@dataclass(frozen=True)
class JobFile:
    """A regular file in a job's output, opened the safe way each time it is read."""

    home: PosixStorage
    rel: Rel

    def __str__(self) -> str:
        return self.home.display(self.rel)

    def open(self) -> io.BufferedReader | None:
        """The file open for reading, or None if it does not exist (yet). A link, a FIFO or a
        directory in its place is refused (``PaddleCloudError``)."""
        try:
            fd = self.home.open(self.rel)
        except NotFoundError:
            return None
        return os.fdopen(fd, "rb")

    def size(self) -> int:
        """Its size now; 0 while it does not exist. Refused like ``open``."""
        try:
            entry = self.home.stat(self.rel)
        except NotFoundError:
            return 0
        if entry.type == "link":
            raise self.home.through_link(self.rel)
        if entry.type != "file":
            raise self.home.not_a_file(self.rel)
        return entry.size


def log_file(job, replica) -> JobFile:
    """The replica's log (``output/node_<i>/train.log`` or ``server.log``); the job's build's
    when ``replica`` is its ``Build`` (``paddlectl logs JOB -w build``)."""
    if replica.role == "build":
        return build_log_file(replica)
    return JobFile(job_home(job), _in_output(job, log_relpath(replica.role, replica.index)))


def build_log_file(build) -> JobFile:
    """A runtime image build's log (``.paddlecloud/builds/<uid>.log`` in its owner's home)."""
    return JobFile(job_home(build), build_log_rel(build.uid))


def build_log_open(build) -> int:
    """The build's log opened for appending (created with its directory). The caller closes
    it."""
    home, rel = job_home(build), build_log_rel(build.uid)
    try:
        home.mkdir(rel[:-1], parents=True)
        return home.open(rel, append=True)
    except PaddleCloudError as exc:
        raise BackendError(f"cannot write the build's log: {exc.message}") from None


def metrics_file(job, replica) -> JobFile:
    """What the replica reported (``output/node_<i>/metrics.jsonl``; see ``jobs.metrics``)."""
    return JobFile(job_home(job), _in_output(job, metrics_relpath(replica.role, replica.index)))


def output_open(job, relpath: str) -> int:
    """A file of the output opened for appending (created with its directory if missing),
    e.g. a replica's log for its runner, or ``setup.log``. The caller closes it."""
    home, rel = job_home(job), _in_output(job, relpath)
    try:
        home.mkdir(rel[:-1], parents=True)
        return home.open(rel, append=True)
    except PaddleCloudError as exc:
        raise BackendError(f"cannot write {relpath} in its output: {exc.message}") from None


def output_prepare(job) -> None:
    """Make the job's output and checkpoint directories, keeping whatever had their place —
    an earlier job's of the same name, or anything else — beside them (``output-<its uid>``,
    ``checkpoints-<its uid>``, else ``-<time>``): a new job of a name never writes into an
    earlier one's output, nor resumes from its checkpoints. Idempotent for the same job."""
    _dir_prepare(job, output_rel(job.name), output_aside, "output directory")
    _dir_prepare(job, checkpoints_rel(job.name), checkpoints_aside, "checkpoint directory")


def _dir_prepare(job, rel: Rel, aside, what: str) -> None:
    home = job_home(job)
    marker = (*rel, OUTPUT_MARKER)
    try:
        try:
            found = home.stat(rel)
        except NotFoundError:
            found = None
        if found is not None and _marker(home, marker) != str(job.uid):
            earlier = found.type == "dir" and _marker(home, marker)
            home.move(rel, _aside(home, rel, aside(earlier or str(int(time.time())))))
        home.mkdir(rel, parents=True)
        home.write_bytes(marker, str(job.uid).encode(), f"marker-{job.uid}")
    except PaddleCloudError as exc:
        raise BackendError(f"cannot prepare its {what}: {exc.message}") from None


def _marker(home: PosixStorage, rel: Rel) -> str | None:
    """The uid in an output's marker; None if there is none (or not a plain small file)."""
    try:
        data = b"".join(home.read(rel, 0, 64))
    except PaddleCloudError:
        return None
    return data.decode("ascii", "replace").strip()


def _aside(home: PosixStorage, kept: Rel, name: str) -> Rel:
    """A free name beside ``kept`` (the output or checkpoint directory) for what is in its
    place."""
    name = name[:200]
    for attempt in range(100):
        rel = (*kept[:-1], name if not attempt else f"{name}-{attempt}")
        try:
            home.stat(rel)
        except NotFoundError:
            return rel
    raise BackendError(f"too many earlier ones beside {home.display(kept)}")


def package_copy(job, dest: Path) -> None:
    """Copy the package the job runs (``Job.package_run``: its snapshot) into the new
    directory ``dest``: files (with their permission bits), directories and links (as
    links). Read through the PFS storage, so nothing outside the package's area is read
    whatever the job did to it since it was submitted. A sparse file stays sparse: only its
    data is copied, its holes stay holes (a file of 1 TiB of holes in a home must not become
    1 TiB of disk under the portal's ``var/``). The copy's digest must be the one recorded at
    submission (``package_digest``): a snapshot changed since then is refused, not run."""
    package = job.package_run
    path = pfs_path_parse(package, field="package")
    storage = storage_for(job.datacenter, path)
    digest = TreeDigest()
    try:
        if not storage.is_dir(path.parts):
            raise BackendError(f"the trainer package {package} is not a directory")
        dest.mkdir()
        for entry in storage.walk(path.parts):
            rel = entry.rel[len(path.parts):]
            target = dest.joinpath(*rel)
            if entry.type == "dir":
                target.mkdir()
                digest.dir(rel, entry.mode)
            elif entry.type == "link":
                target.symlink_to(entry.target)
                digest.link(rel, entry.target)
            elif entry.type == "file":
                with target.open("xb") as out:
                    for start, end in storage.extents(entry.rel):
                        out.seek(start)
                        for chunk in storage.read(entry.rel, start, end):
                            out.write(chunk)
                    out.truncate(entry.size)
                with target.open("rb") as copied:
                    digest.file(rel, iter(lambda: copied.read(1 << 20), b""), entry.mode)
                if entry.mode is not None:
                    target.chmod(entry.mode & 0o755)
    except NotFoundError:
        raise BackendError(f"the trainer package {package} is gone") from None
    except PaddleCloudError as exc:
        raise BackendError(f"cannot copy the trainer package: {exc.message}") from None
    if job.package_digest and digest.hexdigest() != job.package_digest:
        raise BackendError(f"its package snapshot {package} has changed since the job was "
                           f"submitted ({job.package_digest} recorded, {digest.hexdigest()} "
                           "found): it is not run")


# --- a package's snapshot (issue 39) -----------------------------------------------------------

def package_digest(storage: Storage, rel: Rel) -> tuple[str, int]:
    """The content digest of the package directory ``rel`` as it is now
    (``paddlecloud_core.snapshots``) and the bytes its files hold."""
    digest, size = TreeDigest(), 0
    for entry in storage.walk(rel):
        below = entry.rel[len(rel):]
        if entry.type == "dir":
            digest.dir(below, entry.mode)
        elif entry.type == "link":
            digest.link(below, entry.target or "")
        elif entry.type == "file":
            digest.file(below, storage.read(entry.rel), entry.mode)
            size += entry.size
    return digest.hexdigest(), size


@dataclass
class Snapshot:
    """A package copied for a job, under a hidden name until ``place`` moves it into the job's
    directory (in the transaction that records the job: a submission that fails, or loses
    the name to another, leaves nothing)."""

    home: Storage
    name: str
    tmp: Rel
    digest: str
    size: int
    placed: bool = False

    @property
    def rel(self) -> Rel:
        return package_snapshot_rel(self.name)

    def place(self) -> int:
        """Move it into place, replacing what an earlier job of the name left there; the
        bytes it adds to the home."""
        freed = 0
        with contextlib.suppress(NotFoundError):
            freed = self.home.remove(self.rel, recursive=True)
        self.home.move(self.tmp, self.rel)
        self.placed = True
        return self.size - freed

    def discard(self) -> None:
        """Remove it, wherever it is (the job was not recorded). Not placed, the job's place
        is left alone: another submission of the name may hold it."""
        with contextlib.suppress(NotFoundError):
            self.home.remove(self.rel if self.placed else self.tmp, recursive=True)


def package_snapshot(home: Storage, name: str, source: Storage, rel: Rel,
                     room: Callable[[int], None]) -> Snapshot:
    """Copy the package ``rel`` of ``source`` for job ``name`` (``Snapshot``; its place
    ``jobs/{name}/package`` in ``home``), once, so that no later change to the package
    reaches the job: a copy, never a link, file by file with its permission bits (no set-uid
    ones), a sparse file's holes kept holes. ``room(bytes)`` is asked before a byte is
    written (the owner's storage quota: it raises). Its digest is of the bytes written."""
    size = sum(entry.size for entry in source.walk(rel) if entry.type == "file")
    room(size)
    final = package_snapshot_rel(name)
    tmp = (*final[:-1], f"{TEMP_PREFIX}snapshot-{os.urandom(6).hex()}")
    digest = TreeDigest()
    home.mkdir(final[:-1], parents=True)
    home.mkdir(tmp)
    try:
        for entry in source.walk(rel):
            below = entry.rel[len(rel):]
            into = (*tmp, *below)
            if entry.type == "dir":
                home.mkdir(into)
                if entry.mode is not None:
                    home.chmod(into, entry.mode & MODE_BITS | 0o700)
                digest.dir(below, _kept(home, into))
            elif entry.type == "link":
                home.symlink(into, entry.target or "")
                digest.link(below, entry.target or "")
            elif entry.type == "file":
                upload = home.upload(into, f"snapshot-{os.urandom(6).hex()}")
                try:
                    for start, end in source.extents(entry.rel):  # holes stay holes
                        if start > upload.offset:
                            upload.hole(start - upload.offset)
                        for chunk in source.read(entry.rel, start, end):
                            upload.write(chunk)
                    if entry.size > upload.offset:
                        upload.hole(entry.size - upload.offset)
                    written = upload.offset
                    sha256 = upload.finish()
                    upload.commit()
                except BaseException:
                    upload.abort()
                    raise
                if entry.mode is not None:
                    home.chmod(into, entry.mode & MODE_BITS | 0o600)
                digest.file_hashed(below, sha256, written, _kept(home, into))
    except BaseException:
        with contextlib.suppress(PaddleCloudError, OSError):
            home.remove(tmp, recursive=True)
        raise
    return Snapshot(home, name, tmp, digest.hexdigest(), size)


def _kept(home: Storage, rel: Rel) -> int | None:
    """The permission bits ``home`` keeps for ``rel`` (None where it keeps none)."""
    return home.stat(rel).mode


def home_remove(job, relpath: str) -> None:
    """Remove a file or directory tree the portal made in the owner's home (nothing if
    missing); a link in its place is removed, never followed."""
    with contextlib.suppress(NotFoundError):
        job_home(job).remove(tuple(relpath.split("/")), recursive=True)


O_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def tree_give(root: Path, ids: tuple[int, int]) -> None:
    """Give ``root`` and everything below it to ``ids`` (uid, gid), following no link: each
    directory is opened one component at a time from ``root`` (``O_NOFOLLOW``), and a link is
    changed itself, never what it names. Iterative, holding one path of descriptors at a
    time: a tree of any depth or width. What vanishes or turns into a link meanwhile (a job
    still running) is left."""
    uid, gid = ids
    pending: list[tuple[str, ...]] = [()]
    top = os.open(root, O_DIR_NOFOLLOW)
    try:
        while pending:
            rel = pending.pop()
            fds = [top]
            try:
                for name in rel:
                    fds.append(os.open(name, O_DIR_NOFOLLOW, dir_fd=fds[-1]))
                os.fchown(fds[-1], uid, gid)
                with os.scandir(fds[-1]) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((*rel, entry.name))
                        else:
                            with contextlib.suppress(FileNotFoundError):
                                os.chown(entry.name, uid, gid, dir_fd=fds[-1],
                                         follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                pass  # gone, or a link now
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
            finally:
                for fd in fds[1:]:
                    os.close(fd)
    finally:
        os.close(top)


def home_give(job, ids: tuple[int, int]) -> None:
    """Make the owner's home ``ids``'s (their replicas' host uid when the portal is root:
    ``jobs.backends.local``), once: a home made before, or by the portal, is given whole;
    from then on what the portal creates there follows its root's owner
    (``PosixStorage.owner``). Only its owner (and root) may enter it."""
    root = home_dir(job)
    root.mkdir(parents=True, exist_ok=True)
    st = os.lstat(root)
    if (st.st_uid, st.st_gid) != ids:
        tree_give(root, ids)
    if st.st_mode & 0o077:
        os.chmod(root, 0o700)
