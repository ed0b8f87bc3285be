"""Moving bytes to and from PFS: uploads (whole, chunked and resumable, directories as tar)
and downloads (files resumed with ``Range``, directories as a tar stream extracted safely).

Nothing is read whole into memory: request bodies are windows onto open files, responses
are written block by block. A download is written beside its destination and renamed into
place only when complete, so an error or Ctrl-C never leaves a partial file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import socket
import stat
import struct
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sized
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from paddlecloud_client.api import BLOCK, ApiClient
from paddlecloud_client.errors import ApiError, NetworkError, PaddlectlError
from paddlecloud_client.progress import Progress
from paddlecloud_core import digests

SINGLE_MAX = 8 << 20  # larger files and archives go up in chunks
TAIL = 4 << 20  # the last chunk of an upload hashed as it is sent: no longer than this
SPOOL_MAX = 64 << 20  # a directory's archive is kept in memory up to this size
RETRIES = 5
BACKOFF = 0.5  # seconds; doubled after each failure
CONTENT = "/api/v1/pfs/content"
UPLOADS = "/api/v1/pfs/uploads"
TAR = "application/x-tar"
# Answers to a PATCH after which the client asks for the upload's offset and goes on.
RESYNC = ("offset_mismatch", "upload_busy")

Warn = Callable[[str], None]


class RunningHash:
    """The digest (SHA-256 unless told) of a file's bytes from 0 on, fed as they are sent,
    each byte once even when a chunk is sent again after a broken connection."""

    def __init__(self, algorithm: str = "sha256"):
        self.algorithm = algorithm
        self.hash, self.position = digests.new(algorithm), 0

    def feed(self, start: int, data: bytes) -> None:
        if start <= self.position < start + len(data):
            self.hash.update(memoryview(data)[self.position - start:])
            self.position = start + len(data)

    def up_to(self, file: BinaryIO, end: int) -> str:
        """Hash what was not sent yet up to ``end`` (the last chunk, before it goes), read
        into one buffer used again and again (fresh memory for every block costs more than
        the hash on some machines)."""
        file.seek(self.position)
        buffer = memoryview(bytearray(BLOCK * 4))
        while self.position < end and (
                got := file.readinto(buffer[:min(len(buffer), end - self.position)])):
            self.feed(self.position, buffer[:got])
        return self.hash.hexdigest()


class Window:
    """A request body: ``length`` bytes of ``file`` from ``start``, counted by ``progress``
    (and hashed by ``running``, when given)."""

    def __init__(self, file: BinaryIO, start: int, length: int, progress: Progress,
                 running: RunningHash | None = None):
        file.seek(start)
        self.file, self.left, self.progress = file, length, progress
        self.position, self.running = start, running
        progress.rewind(start)

    def __len__(self) -> int:
        return self.left

    def read(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        data = self.file.read(size)
        if self.running is not None:
            self.running.feed(self.position, data)
        self.position += len(data)
        self.left -= len(data)
        self.progress.update(len(data))
        return data

    def __iter__(self) -> Iterator[bytes]:
        """The bytes in blocks of up to ``BLOCK``, read into one buffer used again and again.

        Each block is hashed on a helper thread while the caller sends it (SHA-256 lets go of
        the interpreter lock, as does sending), so hashing costs no time of its own on a
        machine with a second core. A block is valid until the next one is asked for.
        """
        buffer = memoryview(bytearray(min(BLOCK, self.left)))
        with _helper() as helper:
            while self.left:
                got = self.file.readinto(buffer[:min(len(buffer), self.left)])
                if not got:
                    raise PaddlectlError("the local file shrank while it was being sent")
                block = buffer[:got]
                hashing = None
                if self.running is not None:
                    hashing = helper.submit(self.running.feed, self.position, block)
                try:
                    yield block
                finally:
                    if hashing is not None:
                        hashing.result()
                self.position += got
                self.left -= got
                self.progress.update(got)

    def body(self) -> Sized:
        """This window as ``requests`` sends it best: an iterable of large blocks with a
        length (so ``Content-Length``, not chunks). With ``read``, urllib3 would read it
        16 KiB at a time."""
        return _Body(self)


class _Body:
    def __init__(self, window: Window):
        self.window = window

    def __len__(self) -> int:
        return len(self.window)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.window)


@contextlib.contextmanager
def _helper() -> Iterator[ThreadPoolExecutor]:
    """One helper thread, stopped when the block ends (whatever ended it)."""
    executor = ThreadPoolExecutor(1, thread_name_prefix="paddlectl-hash")
    try:
        yield executor
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


class HashingWriter(io.RawIOBase):
    """Writes through to ``out`` and keeps the SHA-256 and size of what went by."""

    def __init__(self, out: BinaryIO):
        self.out, self.hash, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.out.write(data)


class BlockReader(io.RawIOBase):
    """A readable file over an iterator of byte blocks (a streamed response)."""

    def __init__(self, blocks: Iterator[bytes], progress: Progress):
        self.blocks, self.progress = blocks, progress
        self.block, self.pos = memoryview(b""), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self.pos >= len(self.block):
            block = next(self.blocks, None)
            if block is None:
                return 0
            self.block, self.pos = memoryview(block), 0
        count = min(len(buffer), len(self.block) - self.pos)
        buffer[:count] = self.block[self.pos:self.pos + count]
        self.pos += count
        self.progress.update(count)
        return count


def _pause(failures: int, error: Exception) -> None:
    """Wait before another attempt; give up with ``error`` after ``RETRIES`` failures."""
    if failures > RETRIES:
        raise error
    time.sleep(BACKOFF * 2 ** (failures - 1))


# -- uploads ----------------------------------------------------------------------------------

def file_digest(file: BinaryIO) -> tuple[str, int]:
    digest = hashlib.file_digest(file, "sha256")
    size = file.tell()
    file.seek(0)
    return digest.hexdigest(), size


def upload_file(client: ApiClient, local: Path, remote: str, progress: Progress, *,
                parents: bool = False) -> dict:
    """Upload one regular file to the PFS path ``remote``; the server's entry."""
    with open(local, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        # A large file is hashed as it is sent (the checksum goes with the last chunk), so it
        # is read once, not twice.
        digest = file_digest(file)[0] if size <= SINGLE_MAX else None
        progress.total = size
        return _upload(client, file, size, digest, remote, progress, kind="file",
                       parents=parents)


def upload_dir(client: ApiClient, local: Path, remote: str, progress: Progress, warn: Warn, *,
               parents: bool = False) -> dict:
    """Upload the contents of directory ``local`` into PFS directory ``remote`` (merged)."""
    with tempfile.SpooledTemporaryFile(SPOOL_MAX) as spool:
        digest, size = build_tar(local, spool, warn)
        progress.total = size
        return _upload(client, spool, size, digest, remote, progress, kind="tar",
                       parents=parents)


def build_tar(root: Path, out: BinaryIO, warn: Warn) -> tuple[str, int]:
    """Archive the regular files and directories below ``root`` (names relative to it) into
    ``out``; the archive's SHA-256 and size. Links and special files are skipped, with a
    warning."""
    writer = HashingWriter(out)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for folder, dirs, files in os.walk(root):
            kept = []
            for name in sorted(dirs) + sorted(files):
                path = Path(folder, name)
                mode = path.lstat().st_mode
                if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                    kind = "link" if stat.S_ISLNK(mode) else "special file"
                    warn(f"skipping {path}: a {kind}, not a regular file or directory")
                    continue
                if stat.S_ISDIR(mode):
                    kept.append(name)
                tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False,
                        filter=_whole_seconds)
            dirs[:] = kept
    out.seek(0)
    return writer.hash.hexdigest(), writer.size


def _whole_seconds(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """A member's time in whole seconds, as the server's archives have it: a fractional one
    (``st_mtime`` is a float) costs every member a PAX header of its own (a second 512-byte
    block and its record, to build and to parse), and the server does not keep it."""
    member.mtime = int(member.mtime)
    return member


def _upload(client: ApiClient, file: BinaryIO, size: int, digest: str | None, remote: str,
            progress: Progress, *, kind: str, parents: bool) -> dict:
    if size > SINGLE_MAX:
        return _upload_chunked(client, file, size, digest, remote, progress, kind=kind,
                               parents=parents)
    params = {"path": remote, **({"parents": 1} if parents else {})}
    headers = {"X-Checksum-Sha256": digest,
               "Content-Type": TAR if kind == "tar" else "application/octet-stream"}
    return client.call("PUT", CONTENT, params=params, headers=headers, transfer=True,
                       body=lambda: Window(file, 0, size, progress).body())


def _upload_chunked(client: ApiClient, file: BinaryIO, size: int, digest: str | None,
                    remote: str, progress: Progress, *, kind: str, parents: bool) -> dict:
    """The resumable protocol: create the upload, PATCH chunks; after a lost connection
    ask the server how far it got and go on from there. Without ``digest`` the file is hashed
    as it is sent and the checksum goes with the last chunk."""
    upload = client.call("POST", UPLOADS, json={
        "path": remote, "size": size, "overwrite": True, "parents": parents, "kind": kind,
        **({"sha256": digest} if digest else {"algorithm": digests.PREFERRED})})
    running = None
    if digest is None:  # what the server checks: the algorithm asked for, or (old) SHA-256
        running = RunningHash(upload.get("algorithm", "sha256"))
    url = f"{UPLOADS}/{upload['id']}"
    offset, chunk = upload["offset"], upload["chunk_size"]
    failures, resync = 0, False
    try:
        while True:
            try:
                if resync:
                    status = client.call("GET", url)
                    if status.get("complete"):  # the final answer was lost on the way
                        return status["result"].get("entry", status["result"])
                    offset, resync = status["offset"], False
                length = min(chunk, size - offset)
                if running is not None and offset + length == size and length > 2 * TAIL:
                    # The checksum goes with the last chunk, so its bytes are hashed before
                    # it is sent: a short one, after one hashed as it goes.
                    length -= TAIL
                headers = {"Upload-Offset": str(offset),
                           "Content-Type": "application/offset+octet-stream"}
                if running is not None and offset + length == size:
                    headers[digests.HEADERS[running.algorithm]] = running.up_to(file, size)
                result = client.call(
                    "PATCH", url, headers=headers, transfer=True,
                    body=lambda start=offset, length=length: Window(
                        file, start, length, progress, running).body())
            except (NetworkError, ApiError) as exc:
                if isinstance(exc, ApiError) and exc.code not in RESYNC:
                    raise
                failures += 1
                _pause(failures, exc)
                resync = True
                continue
            failures = 0
            if result.get("complete"):
                return result.get("entry", result)
            offset = result["offset"]
    except BaseException as exc:
        if not isinstance(exc, NetworkError):
            _abandon(client, url)
        raise


def _abandon(client: ApiClient, url: str) -> None:
    with contextlib.suppress(PaddlectlError):  # gone already, or will be when it expires
        client.request("DELETE", url)


# -- downloads --------------------------------------------------------------------------------

def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def download_file(client: ApiClient, remote: str, dest: Path, progress: Progress) -> None:
    """Download the PFS file ``remote`` to ``dest`` (replaced only once complete)."""
    fd, temp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            _fetch(client, remote, out, progress)
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, dest)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _fetch(client: ApiClient, remote: str, out: BinaryIO, progress: Progress) -> None:
    """Write the file's bytes to ``out``, resuming with ``Range`` after a lost connection."""
    failures = 0
    while True:
        done = out.tell()
        headers = {"Range": f"bytes={done}-"} if done else None
        try:
            with client.request("GET", CONTENT, params={"path": remote}, headers=headers,
                                stream=True, transfer=True) as response:
                if done and response.status_code != 206:  # the whole file again
                    out.seek(0)
                    out.truncate()
                progress.rewind(out.tell())
                if not _splice_body(response, out, progress):
                    for block in client.iter_content(response):
                        out.write(block)
                        progress.update(len(block))
            return
        except NetworkError as exc:
            failures += 1
            _pause(failures, exc)


SPLICE = 1 << 20  # bytes moved by one splice(2): the pipe between socket and file is this big
F_SETPIPE_SZ = 1031


def _splice_body(response, out: BinaryIO, progress: Progress) -> bool:
    """Move a plain-HTTP response's body from its socket to ``out`` in the kernel (splice(2),
    through a pipe): no copy into Python and back, no interpreter work per block. False when
    this response cannot be (TLS, a coded or chunked body, no splice here): read it then.
    A connection lost midway is a ``NetworkError`` (resumed with a Range)."""
    length = response.headers.get("Content-Length")
    if (not hasattr(os, "splice") or not length or not length.isdigit()
            or response.headers.get("Content-Encoding", "identity") != "identity"):
        return False
    reader = getattr(getattr(response.raw, "_fp", None), "fp", None)
    sock = getattr(getattr(reader, "raw", None), "_sock", None)
    if type(sock) is not socket.socket or not isinstance(reader, io.BufferedReader):
        return False
    left = int(length)
    out.flush()
    fd = out.fileno()
    buffered = reader.read1(min(left, len(reader.peek(0)))) if left else b""  # read already
    os.write(fd, buffered)
    left -= len(buffered)
    progress.update(len(buffered))
    pipe_out, pipe_in = os.pipe()
    try:
        with contextlib.suppress(OSError):  # a smaller pipe only means more calls
            fcntl.fcntl(pipe_in, F_SETPIPE_SZ, SPLICE)
        timeout = sock.gettimeout()
        sock.settimeout(None)  # splice blocks; the read timeout is the socket's own below
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                        struct.pack("ll", int(timeout or 0), 0))
        try:
            while left:
                moved = os.splice(sock.fileno(), pipe_in, min(SPLICE, left))
                if not moved:
                    raise NetworkError("the connection closed before the whole file came")
                written = 0
                while written < moved:
                    written += os.splice(pipe_out, fd, moved - written)
                left -= moved
                progress.update(moved)
        except OSError as exc:
            raise NetworkError(f"the download broke off: {exc}") from None
        finally:
            sock.settimeout(timeout)
    finally:
        os.close(pipe_out)
        os.close(pipe_in)
        out.seek(0, os.SEEK_END)  # the file object learns where the kernel wrote to
    # The body is read: as http.client ends a response read to its end, so that the
    # connection can serve the next request.
    body = response.raw._fp
    body.length = 0
    body._close_conn()
    return True


def download_dir(client: ApiClient, remote: str, dest: Path, progress: Progress,
                 warn: Warn) -> None:
    """Download PFS directory ``remote`` into ``dest`` (created, or merged into)."""
    temp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part"))
    try:
        with client.request("GET", CONTENT, params={"path": remote}, stream=True,
                            transfer=True) as response:
            reader = BlockReader(client.iter_content(response), progress)
            try:
                with tarfile.open(fileobj=reader, mode="r|") as tar:
                    tar.extractall(temp, filter=_safe_member(warn))  # noqa: S202 (filtered)
            except tarfile.TarError as exc:
                raise PaddlectlError(f"the archive of {remote} cannot be extracted safely: "
                                     f"{exc}") from None
        os.chmod(temp, 0o777 & ~_umask())
        _merge(temp, dest)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _safe_member(warn: Warn):
    """tarfile's ``data`` filter (nothing outside the destination, no devices), and neither
    absolute names nor links."""

    def check(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        if os.path.isabs(member.name):  # the data filter would strip the "/"; refuse instead
            raise tarfile.AbsolutePathError(member)
        if member.issym() or member.islnk():
            warn(f"skipping {member.name}: a link")
            return None
        return tarfile.data_filter(member, dest)

    return check


def _merge(source: Path, dest: Path) -> None:
    """Move the tree ``source`` to ``dest``; into it, entry by entry, if it exists."""
    if not dest.exists():
        os.replace(source, dest)
        return
    for entry in source.iterdir():
        target = dest / entry.name
        if entry.is_dir() and target.is_dir():
            _merge(entry, target)
        else:
            os.replace(entry, target)
