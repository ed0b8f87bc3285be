"""The PFS byte streams, served straight from ASGI so that no body is spooled on the way.

Django's ASGI handler reads a whole request body into a temporary file before a view sees it,
and serves synchronous streaming responses by collecting them first. Neither will do for
gigabytes, so the three byte-carrying endpoints are answered here, before Django:

    PUT   /api/v1/pfs/content?path=P        a whole file (or a directory as a tar) in one request
    PATCH /api/v1/pfs/uploads/{id}          the next bytes of a resumable upload
    GET   /api/v1/pfs/content?path=P        a file (with Range) or a directory as a tar

Bodies are written to the storage as they arrive, in 1 MiB pieces on a worker thread; the
authentication, the checks and the error answers are the API's own (same functions, same
``{"code", "message", "fields"}``). Everything else goes on to Django.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mimetypes
import os
import re
import stat
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request

from accounts.authentication import ApiTokenAuthentication
from accounts.selectors import request_datacenter
from kernel import metrics
from kernel.api import query_flag
from kernel.before_django import (
    BUFFER,
    BeforeDjango,
    ClientGone,
    DatabaseThreads,
    Exchange,
    is_number,
)
from kernel.errors import (
    AuthenticationError,
    ConflictError,
    LengthRequiredError,
    RangeNotSatisfiableError,
    ValidationError,
)
from kernel.security import asgi_request, no_view

from . import digests, services, tar
from .front import BODY_FILE_HEADER, BODY_LENGTH_HEADER, CHECK_HEADER, FRONT_SCOPE, FrontFiles
from .storage.posix import PosixStorage

logger = logging.getLogger(__name__)

CONTENT_RE = re.compile(r"^/api/v1/pfs/content/?$")
UPLOAD_RE = re.compile(r"^/api/v1/pfs/uploads/(?P<id>[0-9a-fA-F-]{32,36})/?$")

DATABASE_THREADS = 2  # threads for the transfers' database steps, each keeping its connection


def _authenticate(scope):
    """The API's own authentication (token, or session + CSRF) and datacenter, for a scope."""
    request = asgi_request(scope)
    SessionMiddleware(no_view).process_request(request)
    AuthenticationMiddleware(no_view).process_request(request)
    api_request = Request(request, authenticators=[ApiTokenAuthentication(),
                                                   SessionAuthentication()])
    if not api_request.user.is_authenticated:
        raise AuthenticationError(
            "authentication required: send Authorization: Bearer <token> "
            "(paddlectl login gets one)")
    return request, api_request.user, request_datacenter(api_request)


class _Exchange(Exchange):
    """An exchange that can write its body to an upload as it arrives."""

    async def json(self, status: int, body: dict, headers: dict[str, str] | None = None):
        if status >= 400 and self.scope.get(FRONT_SCOPE) is not None and \
                self.header(CHECK_HEADER) is not None:
            # nginx answers a refused check itself, with this body (paddlecloud.front).
            headers = {**(headers or {}), "X-PaddleCloud-Refusal": json.dumps(body)}
        await super().json(status, body, headers)

    async def body_into(self, upload, limit: int) -> None:
        """Write the request body to ``upload`` as it arrives; no more than ``limit`` bytes.

        Receiving and writing overlap: ~1 MiB pieces go to a writer on a worker thread through
        a short queue, while the next ones are received. What arrived before a disconnect or
        an error is written before this returns, so the upload's offset stays truthful.
        """
        writer = _Writer(upload)
        try:
            parts: list[bytes] = []
            size = received = 0
            more = True
            while more:
                message = await self.receive()
                if message["type"] == "http.disconnect":
                    await writer.put(b"".join(parts))
                    raise ClientGone
                data = message.get("body", b"")
                more = message.get("more_body", False)
                received += len(data)
                if received > limit:
                    raise ValidationError.for_field(
                        "body", f"longer than the {limit} bytes declared", code="too_long")
                if data:
                    parts.append(data)
                    size += len(data)
                if size >= BUFFER or not more:
                    await writer.put(b"".join(parts))
                    parts.clear()
                    size = 0
        finally:
            await writer.close()


class _Writer:
    """Writes pieces to an upload on a worker thread, a few pieces behind the receiver; each
    piece's SHA-256 is computed on a second thread while it is written."""

    DEPTH = 4

    def __init__(self, upload):
        self.upload = upload
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=self.DEPTH)
        self.hashing = ThreadPoolExecutor(1, thread_name_prefix="pfs-hash")
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while (piece := await self.queue.get()) is not None:
            await asyncio.to_thread(self.upload.write, piece, self.hashing)

    async def put(self, piece: bytes | None) -> None:
        """Queue a piece, waiting for room; a failed write is raised here."""
        if piece == b"":
            return
        putting = asyncio.ensure_future(self.queue.put(piece))
        await asyncio.wait({putting, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if not putting.done():
            putting.cancel()
            self.task.result()  # the writer stopped: raise what stopped it

    async def close(self) -> None:
        """Wait until everything queued is written."""
        try:
            if not self.task.done():
                await self.put(None)
            await self.task
        finally:
            await asyncio.to_thread(self.hashing.shutdown)


class PfsTransferApp(BeforeDjango):
    """ASGI middleware: the PFS byte streams here, everything else to ``app``."""

    exchange_class = _Exchange
    # The database steps run on threads of this app's own, each keeping its connection from
    # request to request (one PUT per file pays for its statements, not for a connection).
    request_signals = False

    def __init__(self, app):
        super().__init__(app)
        self._busy: set[str] = set()
        self.threads = DatabaseThreads(DATABASE_THREADS, "pfs-db")

    def database(self, function, *args, **kwargs):
        """``function(*args, **kwargs)`` on a database thread (awaitable)."""
        return self.threads.run(function, *args, **kwargs)

    def _on_database(self):
        """For work done on a worker thread: run one database step on a database thread (and
        wait for it), so that only those steps, never the long file work, hold that thread."""
        loop = asyncio.get_running_loop()

        def run(function, *args, **kwargs):
            return asyncio.run_coroutine_threadsafe(
                self.threads.run(function, *args, **kwargs), loop).result()

        return run

    def error_body(self, exc: Exception, body: dict) -> dict:
        if isinstance(exc, ConflictError) and hasattr(exc, "offset"):
            body["offset"] = exc.offset  # where a resumable upload goes on from
        return body

    def route(self, scope):
        path, method = scope["path"], scope["method"]
        if CONTENT_RE.match(path):
            return {"GET": self.download, "HEAD": self.download, "PUT": self.put}.get(
                method, self.not_allowed)
        if UPLOAD_RE.match(path) and (method == "PATCH" or (
                scope.get(FRONT_SCOPE) is not None and _has_header(scope, CHECK_HEADER))):
            return self.patch  # (nginx asks its check as a GET)
        return None

    async def not_allowed(self, exchange: _Exchange):
        await exchange.json(405, {"code": "method_not_allowed", "fields": {},
                                  "message": f"method {exchange.scope['method']} is not "
                                             "allowed here: GET, HEAD or PUT"},
                            {"Allow": "GET, HEAD, PUT"})

    # -- uploads ----------------------------------------------------------------------------

    async def put(self, exchange: _Exchange):
        request, user, datacenter = await self.database(_authenticate, exchange.scope)
        query = request.GET
        size = exchange.length()
        kind = "tar" if (exchange.header("content-type") or "").startswith(
            "application/x-tar") else "file"
        algorithm, checksum = digests.from_headers(exchange.header)
        session = await self.database(
            services.upload_prepare, user, datacenter, path=query.get("path", ""), size=size,
            kind=kind, algorithm=algorithm,
            checksum=checksum or (query.get("sha256", "") if algorithm == digests.SHA256
                                  else ""),
            overwrite=query_flag(request, "overwrite", default=True),
            parents=query_flag(request, "parents"))
        upload = None
        try:
            upload = await asyncio.to_thread(services.upload_open, session)
            await exchange.body_into(upload, size)
            metrics.pfs_transferred("upload", upload.offset)
            if upload.offset != size:
                raise ValidationError.for_field(
                    "body", f"{upload.offset} bytes received of the {size} declared",
                    code="incomplete")
        except BaseException:
            await asyncio.to_thread(services.upload_discard, session, upload,
                                    database=self._on_database())
            raise
        result = await asyncio.to_thread(services.upload_complete, session, upload,
                                         database=self._on_database())
        metrics.pfs_operation("upload_tar" if kind == "tar" else "upload")
        await exchange.json(201, result.get("entry") or result)

    async def patch(self, exchange: _Exchange):
        upload_id = UPLOAD_RE.match(exchange.scope["path"])["id"]
        _request, user, datacenter = await self.database(_authenticate, exchange.scope)
        session = await self.database(services.upload_get, user, datacenter, upload_id)
        offset_text = exchange.header("upload-offset")
        if not is_number(offset_text):
            raise ValidationError.for_field(
                "Upload-Offset", "required: the offset these bytes start at (GET the upload "
                                 "for the offset the server has)")
        front = exchange.scope.get(FRONT_SCOPE)
        checking = front is not None and exchange.header(CHECK_HEADER) is not None
        body_file = exchange.header(BODY_FILE_HEADER) if front is not None else None
        if checking or body_file:  # nginx takes the body: it says the length the client sent
            declared = exchange.header(BODY_LENGTH_HEADER)
            if not is_number(declared):
                raise LengthRequiredError.for_field("Content-Length",
                                                    "required: the size of the body")
            length = int(declared)
        else:
            length = exchange.length()
        offset = int(offset_text)
        if session.completed_at is not None:  # the client missed the final answer
            if checking:
                await exchange.json(200, {})
                return
            if offset != session.size:
                error = ConflictError.for_field(
                    "Upload-Offset", f"this upload is complete ({session.size} bytes)",
                    code="offset_mismatch")
                error.offset = session.size
                raise error
            await exchange.json(201, {"id": str(session.pk), "offset": session.size,
                                      "complete": True, **session.result})
            return
        if offset + length > session.size:
            raise ValidationError.for_field(
                "body", f"bytes {offset}..{offset + length} go past the upload's size "
                        f"({session.size})", code="too_long")
        if offset + length == session.size:  # the last chunk: the checksum must be known
            services.upload_checksum(session, exchange.header)
        key = str(session.pk)
        if key in self._busy:
            raise ConflictError.for_field("upload", "another request is sending to this "
                                                    "upload right now", code="upload_busy")
        self._busy.add(key)
        try:
            upload = await asyncio.to_thread(services.upload_open, session)
            try:
                if upload.offset != offset:
                    error = ConflictError.for_field(
                        "Upload-Offset", f"the server has {upload.offset} bytes of this "
                                         f"upload, not {offset}; continue from there",
                        code="offset_mismatch")
                    error.offset = upload.offset
                    raise error
                if checking:  # nginx may read the body now: it comes back with its file
                    services.upload_park(session, upload)
                    await exchange.json(200, {})
                    return
                try:
                    if body_file:
                        await asyncio.to_thread(_take_body_file, upload, front, body_file,
                                                length)
                    else:
                        await exchange.body_into(upload, session.size - offset)
                finally:
                    metrics.pfs_transferred("upload", upload.offset - offset)
                await asyncio.to_thread(upload.pause)  # offset: only bytes stored or held
            except BaseException:
                with contextlib.suppress(Exception):  # raised already, if it failed
                    await asyncio.to_thread(upload.pause)
                await self.database(services.upload_progress, session, upload.offset)
                services.upload_park(session, upload)
                raise
            await self.database(services.upload_progress, session, upload.offset)
            if upload.offset < session.size:
                services.upload_park(session, upload)
                await exchange.json(200, {"id": key, "offset": upload.offset})
                return
            result = await asyncio.to_thread(services.upload_complete, session, upload,
                                             database=self._on_database())
            metrics.pfs_operation("upload")
            await exchange.json(201, {"id": key, "offset": upload.offset, "complete": True,
                                      **result})
        finally:
            self._busy.discard(key)

    # -- downloads --------------------------------------------------------------------------

    async def download(self, exchange: _Exchange):
        request, user, datacenter = await self.database(_authenticate, exchange.scope)
        head = exchange.scope["method"] == "HEAD"
        target, entry = await self.database(
            services.pfs_stat, user, datacenter, request.GET.get("path", ""), follow=True)
        storage, rel = target.storage, target.rel
        name = rel[-1] if rel else target.path.area_label.rsplit("/", 1)[-1]
        if entry.type == "dir":
            headers = {"Content-Type": "application/x-tar",
                       "Content-Disposition": _attachment(f"{name}.tar"),
                       "Content-Security-Policy": settings.PADDLECLOUD_CSP_USER_FILES}
            if not head:
                metrics.pfs_operation("download_tar")
            members = await asyncio.to_thread(tar.tar_stream, storage, rel)  # walked first
            await exchange.stream(200, headers, _counted(members), head=head)
            return
        if entry.type != "file":
            raise ValidationError.for_field(
                "path", f"{target.path} is not a regular file", code="not_a_file")
        asked = exchange.header("range")
        if asked and not asked.strip().lower().startswith("bytes"):
            asked = None  # a unit we do not know is ignored (RFC 9110 14.2)
        start, end = _range(asked, entry.size)
        headers = {
            "Content-Type": _content_type(name),
            "Content-Length": str(end - start),
            "Content-Disposition": _attachment(name),
            "Content-Security-Policy": settings.PADDLECLOUD_CSP_USER_FILES,
            "Accept-Ranges": "bytes",
            "ETag": f'"{entry.size:x}-{int(entry.mtime * 1e6):x}"',
        }
        front = exchange.scope.get(FRONT_SCOPE)
        if front is not None and isinstance(storage, PosixStorage):
            # nginx sends the bytes (with sendfile), ranges and HEAD included; it opens the
            # path refusing any link on it (paddlecloud.front).
            path = await asyncio.to_thread(storage.resolved, rel)
            if (redirect := front.redirect(path)) is not None:
                if not head:
                    metrics.pfs_operation("download")
                    metrics.pfs_transferred("download", end - start)
                del headers["ETag"], headers["Accept-Ranges"]  # nginx's own
                await exchange.start(200, {**headers, "Content-Length": "0",
                                           "X-Accel-Redirect": redirect})
                await exchange.send({"type": "http.response.body", "body": b""})
                return
        status = 200
        if asked:
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{entry.size}"
        # Opening may be I/O (an S3 request): on a worker thread, like the reads that follow;
        # a HEAD reads nothing.
        chunks = iter(()) if head else await asyncio.to_thread(storage.read, rel, start, end)
        if not head:
            metrics.pfs_operation("download")
        await exchange.stream(status, headers, _counted(chunks), head=head)


def _has_header(scope, name: str) -> bool:
    key = name.encode("latin-1")
    return any(header == key for header, _value in scope.get("headers") or [])


def _take_body_file(upload, front: FrontFiles, body_file: str, length: int) -> None:
    """Append the chunk nginx took into ``body_file`` to ``upload``: moved into place by a
    rename when it is the upload's first bytes and the storage can (``adopt``), else copied.
    nginx removes the file (if still there) once the request is answered."""
    path = Path(body_file)
    if (front.body_dir is None or path.parent != front.body_dir or not path.name.isdigit()):
        raise ValidationError.for_field("body", "not a body the front took", code="invalid")
    dir_fd = os.open(front.body_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        # Read-write: adopted, it is the upload's file, which later chunks are written to.
        fd = os.open(path.name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != length:
                raise ValidationError.for_field(
                    "body", f"{st.st_size} bytes received of the {length} declared",
                    code="incomplete")
            if upload.offset == 0 and getattr(upload, "adopt", None) is not None and \
                    upload.adopt(dir_fd, path.name, fd):
                return
            position, buffer = 0, memoryview(bytearray(BUFFER * 4))  # one buffer, reused
            with ThreadPoolExecutor(1, thread_name_prefix="pfs-hash") as hashing:
                while position < length:
                    got = os.preadv(fd, [buffer[:min(len(buffer), length - position)]],
                                    position)
                    if not got:
                        break
                    upload.write(buffer[:got], hashing)
                    position += got
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def _counted(chunks):
    """``chunks``, their bytes counted as downloaded as they are sent."""
    for chunk in chunks:
        metrics.pfs_transferred("download", len(chunk))
        yield chunk


def _attachment(name: str) -> str:
    return f"attachment; filename*=UTF-8''{urllib.parse.quote(name)}"


# Types a browser would run or render as a document (HTML, SVG, XML and its kin, scripts):
# a user's file of such a type goes out as plain bytes.
ACTIVE_TYPE = re.compile(r"html|xml|javascript|ecmascript|xsl", re.IGNORECASE)


def _content_type(name: str) -> str:
    """The type a user's file is downloaded as: guessed from its name, but never active."""
    guessed = mimetypes.guess_type(name)[0]
    if guessed is None or ACTIVE_TYPE.search(guessed):
        return "application/octet-stream"
    return guessed


def _range(header: str | None, size: int) -> tuple[int, int]:
    """``[start, end)`` asked by a ``Range: bytes=…`` header (one range), or the whole file."""
    if not header:
        return 0, size
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not match or match.groups() == ("", ""):
        raise _unsatisfiable(header, size)
    first, last = match.groups()
    if first == "":  # the last N bytes
        start, end = max(0, size - int(last)), size
    else:
        start = int(first)
        end = size if last == "" else min(int(last) + 1, size)
    if start >= size or start >= end:
        raise _unsatisfiable(header, size)
    return start, end


def _unsatisfiable(header: str, size: int) -> RangeNotSatisfiableError:
    return RangeNotSatisfiableError.for_field(
        "Range", f"{header!r} is not a satisfiable single byte range of a {size}-byte file",
        size=size)
