"""A PFS area in an S3-compatible object store.

The area is every key below ``prefix`` in ``bucket``: ``/pfs/dc1/home/alice/data/a.txt`` is the
key ``<prefix>/data/a.txt``. The connection comes from django-storages' ``S3Storage`` (so the
``AWS_*`` settings apply to what is not given here); what it does not offer is done with its
boto3 client.

S3 has no directories, so they are emulated: ``mkdir`` writes a zero-byte marker ``<key>/``
and a directory exists when its marker does or any key lies below it. Removing or moving the
last entry out of a directory leaves its marker, so the directory stays, as on POSIX. There
are no links.

Uploads are S3 multipart uploads to a hidden temporary key beside the target,
``<parent>/<TEMP_PREFIX><upload_id>``. Received bytes are buffered and sent as parts of
``PART_SIZE`` (S3 wants at least 5 MiB for every part but the last), ``PARTS_IN_FLIGHT`` at a
time on threads of the upload's own while more bytes come; ``Upload.pause()``, between two
requests, waits until they are in S3. ``Upload.close()`` saves
the buffered tail as the hidden object ``<temporary key>.tail``, so a resumed upload continues
after every byte received before ``close()``. After a crash (no ``close()``) only the bytes in
uploaded parts survive: a resumed upload's ``offset`` says how many, and the client re-sends
from that offset. The bytes of a resumed upload were not all seen by this process, so their
sha256 is computed by reading the completed temporary object back: call ``Upload.finish()``,
check the digest, then ``commit()`` (or ``abort()``).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections import deque
from collections.abc import Iterator
from concurrent.futures import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    Future,
    ThreadPoolExecutor,
    wait,
)

from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError
from storages.backends.s3 import S3Storage as DjangoS3Storage

from kernel.errors import ConflictError, ValidationError

from .base import CHUNK, TEMP_PREFIX, Entry, Rel, Storage, Upload

MiB = 1 << 20
PART_SIZE = 8 * MiB  # bytes per multipart part (S3: at least 5 MiB except the last)
READ_RANGE = 8 * MiB  # a larger read is made of ranged GETs of this size ...
READ_AHEAD = 3  # ... this many in flight (at most READ_RANGE * (READ_AHEAD + 1) held)
PARTS_PER_SIZE = 1000  # parts n*1000+1 ... (n+1)*1000 are (n+1) * PART_SIZE: up to ~430 GiB
PARTS_IN_FLIGHT = 4  # parts of one upload being sent at once (each on a thread of its own)
DELETE_BATCH = 1000  # the most keys DeleteObjects takes
_MISSING = {"404", "NoSuchKey", "NotFound"}

logger = logging.getLogger(__name__)


def _missing(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") in _MISSING


class S3Storage(Storage):
    """One PFS area: the keys below ``prefix`` (no leading or trailing slash) in ``bucket``."""

    COPY_LIMIT = 5 << 30  # larger objects are copied part by part (boto3's managed copy)

    def __init__(self, label: str, *, bucket: str, prefix: str, endpoint_url: str | None = None,
                 region: str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, read_only: bool = False):
        super().__init__(label, read_only=read_only)
        prefix = prefix.strip("/")
        self.bucket = bucket
        self.prefix = prefix
        self._base = f"{prefix}/" if prefix else ""
        given = {"endpoint_url": endpoint_url, "region_name": region,
                 "access_key": access_key, "secret_key": secret_key}
        # Checksums only where S3 requires them: boto3's newer defaults (CRC32 on every
        # upload) are not understood by every S3-compatible store (Ceph RGW, older MinIO).
        config = Config(request_checksum_calculation="when_required",
                        response_checksum_validation="when_required")
        # No network here: django-storages connects on first use, once per thread.
        self._s3 = DjangoS3Storage(bucket_name=bucket, location=prefix, client_config=config,
                                   **{k: v for k, v in given.items() if v is not None})

    @property
    def client(self):
        """The boto3 S3 client of the calling thread."""
        return self._s3.connection.meta.client

    # -- keys -------------------------------------------------------------------------------

    def _key(self, rel: Rel) -> str:
        return self._base + "/".join(rel)

    def _dir_prefix(self, rel: Rel) -> str:
        """The prefix of the keys below the directory ``rel``; its marker's key too."""
        return f"{self._key(rel)}/" if rel else self._base

    def _objects(self, prefix: str) -> Iterator[dict]:
        """Every object whose key starts with ``prefix``."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        for page in pages:
            yield from page.get("Contents", [])

    def _head(self, key: str) -> dict | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _missing(exc):
                return None
            raise

    def _first_below(self, rel: Rel) -> dict | None:
        """The first object below the directory ``rel`` (its marker when it has one)."""
        prefix = self._dir_prefix(rel)
        found = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=1)
        contents = found.get("Contents", [])
        return contents[0] if contents else None

    def _dir_entry(self, rel: Rel, marker: dict | None) -> Entry:
        mtime = marker["LastModified"].timestamp() if marker else 0.0
        return Entry(rel, "dir", 0, mtime)

    def _marker(self, rel: Rel) -> dict | None:
        return self._head(self._dir_prefix(rel)) if self._dir_prefix(rel) else None

    def _lookup(self, rel: Rel) -> Entry | None:
        """The entry at ``rel``, or None. A key and a directory of one name: the file wins."""
        if not rel:
            return self._dir_entry((), self._marker(()))
        head = self._head(self._key(rel))
        if head is not None:
            return Entry(rel, "file", head["ContentLength"], head["LastModified"].timestamp())
        first = self._first_below(rel)
        if first is None:
            return None
        marker = first if first["Key"] == self._dir_prefix(rel) else None
        return self._dir_entry(rel, marker)

    def _is_dir(self, rel: Rel) -> bool:
        return not rel or self._first_below(rel) is not None

    def _require_dir(self, rel: Rel) -> None:
        """``rel`` must be an existing directory (the parent of a path being written)."""
        if self._is_dir(rel):
            return
        if self._head(self._key(rel)) is not None:
            raise self.not_a_dir(rel)
        raise self.not_found(rel)

    def _keep_dir(self, rel: Rel) -> None:
        """Give ``rel`` a marker if it has none, so it outlives its last entry."""
        if rel and self._marker(rel) is None:
            self.client.put_object(Bucket=self.bucket, Key=self._dir_prefix(rel), Body=b"")

    def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start:start + DELETE_BATCH]
            answer = self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True})
            if answer.get("Errors"):
                error = answer["Errors"][0]
                raise RuntimeError(f"S3 refused to delete {error['Key']!r} in {self.bucket}: "
                                   f"{error.get('Code')} {error.get('Message')}")

    def _copy(self, src_key: str, dst_key: str, size: int | None) -> None:
        source = {"Bucket": self.bucket, "Key": src_key}
        if size is not None and size <= self.COPY_LIMIT:
            self.client.copy_object(CopySource=source, Bucket=self.bucket, Key=dst_key)
        else:
            self.client.copy(source, self.bucket, dst_key,
                             Config=TransferConfig(multipart_threshold=self.COPY_LIMIT))

    def _uploads(self, prefix: str) -> Iterator[dict]:
        """The multipart uploads in progress whose key starts with ``prefix``."""
        pages = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=prefix)
        for page in pages:
            yield from page.get("Uploads", [])

    def _parts(self, key: str, upload_id: str) -> list[dict]:
        pages = self.client.get_paginator("list_parts").paginate(
            Bucket=self.bucket, Key=key, UploadId=upload_id)
        return [part for page in pages for part in page.get("Parts", [])]

    def _abort_uploads(self, uploads: list[dict]) -> None:
        for upload in uploads:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=upload["Key"],
                                                   UploadId=upload["UploadId"])
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchUpload":
                    raise

    def _sha256(self, key: str, new_hash=hashlib.sha256) -> tuple[str, int]:
        """The digest (``new_hash``'s, SHA-256 unless told) and size of the object ``key``,
        read back."""
        hasher, size = new_hash(), 0
        body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        try:
            for chunk in body.iter_chunks(CHUNK):
                hasher.update(chunk)
                size += len(chunk)
        finally:
            body.close()
        return hasher.hexdigest(), size

    # -- reading ----------------------------------------------------------------------------

    def stat(self, rel: Rel, *, follow: bool = False) -> Entry:  # no links on S3
        entry = self._lookup(rel)
        if entry is None:
            raise self.not_found(rel)
        return entry

    def listdir(self, rel: Rel) -> list[Entry]:
        prefix = self._dir_prefix(rel)
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, Delimiter="/")
        found = False
        dirs: list[str] = []
        files: list[Entry] = []
        for page in pages:
            for common in page.get("CommonPrefixes", []):
                found = True
                name = common["Prefix"][len(prefix):-1]
                if name and not name.startswith(TEMP_PREFIX):
                    dirs.append(name)
            for obj in page.get("Contents", []):
                found = True
                name = obj["Key"][len(prefix):]
                if name and not name.startswith(TEMP_PREFIX):  # "" is the marker
                    files.append(Entry((*rel, name), "file", obj["Size"],
                                       obj["LastModified"].timestamp()))
        if not found and rel:
            if self._head(self._key(rel)) is not None:
                raise self.not_a_dir(rel)
            raise self.not_found(rel)
        # A directory's mtime is its marker's: one HEAD each, a few at a time.
        client = self.client  # boto3 clients may be shared between threads

        def marker(name: str) -> dict | None:
            try:
                return client.head_object(Bucket=self.bucket, Key=f"{prefix}{name}/")
            except ClientError as exc:
                if _missing(exc):
                    return None
                raise

        markers: list[dict | None] = []
        if dirs:
            with ThreadPoolExecutor(max_workers=min(8, len(dirs))) as pool:
                markers = list(pool.map(marker, dirs))
        entries = files + [self._dir_entry((*rel, name), head)
                           for name, head in zip(dirs, markers, strict=True)]
        return sorted(entries, key=lambda entry: entry.name)

    def read(self, rel: Rel, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Checks at once (errors before the first byte), then streams."""
        head = self._head(self._key(rel)) if rel else None
        if head is None:
            if self._is_dir(rel):
                raise self.is_a_dir(rel)
            raise self.not_found(rel)
        size = head["ContentLength"]
        end = size if end is None else min(end, size)
        if start >= end:
            return iter(())
        return self._stream(self._key(rel), start, end, head["ETag"])

    def _stream(self, key: str, start: int, end: int, etag: str) -> Iterator[bytes]:
        if end - start <= READ_RANGE:
            body = self.client.get_object(Bucket=self.bucket, Key=key, IfMatch=etag,
                                          Range=f"bytes={start}-{end - 1}")["Body"]
            try:
                yield from body.iter_chunks(CHUNK)
            finally:
                body.close()
            return
        # Larger: ranged GETs of READ_RANGE, READ_AHEAD of them in flight on threads of
        # their own while the bytes of the first are sent, so the store's latency and each
        # connection's speed do not add up range after range. Each GET asks for the ETag seen
        # at the start: an object replaced meanwhile fails the download, never mixes versions.
        ranges = iter(range(start, end, READ_RANGE))
        with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="pfs-s3-read") as pool:
            def fetch(first: int):
                return pool.submit(self._range, key, first, min(first + READ_RANGE, end), etag)

            pending = deque(fetch(first) for first in itertools.islice(ranges, READ_AHEAD))
            try:
                while pending:
                    data = pending.popleft().result()
                    following = next(ranges, None)
                    if following is not None:
                        pending.append(fetch(following))
                    view = memoryview(data)
                    for offset in range(0, len(data), CHUNK):
                        yield bytes(view[offset:offset + CHUNK])
            finally:
                for future in pending:
                    future.cancel()

    def _range(self, key: str, start: int, end: int, etag: str) -> bytes:
        """The bytes ``[start, end)`` of ``key`` at ``etag``, whole."""
        body = self.client.get_object(Bucket=self.bucket, Key=key, IfMatch=etag,
                                      Range=f"bytes={start}-{end - 1}")["Body"]
        try:
            data = body.read()
        finally:
            body.close()
        if len(data) != end - start:
            raise RuntimeError(f"{key}: {len(data)} bytes in S3 at {start}, "
                               f"{end - start} asked for")
        return data

    def usage(self) -> int:
        """Bytes of every object of the area but markers and upload temporaries (uploads in
        progress, their parts included, are counted by the room they reserve)."""
        return sum(obj["Size"] for obj in self._objects(self._base)
                   if self._counted(obj["Key"][len(self._base):]))

    @staticmethod
    def _counted(name: str) -> bool:
        """Whether the object at ``name`` (below some prefix) is a file usage counts."""
        return not name.endswith("/") and not any(
            part.startswith(TEMP_PREFIX) for part in name.split("/"))

    # -- writing ----------------------------------------------------------------------------

    def mkdir(self, rel: Rel, *, parents: bool = False) -> Entry:
        self.check_creatable(rel)
        entry = self._lookup(rel)
        if entry is not None:
            if entry.type == "dir" and parents:
                return entry
            raise self.exists(rel)
        if parents:
            self._make_parents(rel[:-1])
        else:
            self._require_dir(rel[:-1])
        return self._put_marker(rel)

    def _make_parents(self, rel: Rel) -> None:
        if not rel or self._is_dir(rel):
            return
        if self._head(self._key(rel)) is not None:
            raise self.not_a_dir(rel)
        self._make_parents(rel[:-1])
        self._put_marker(rel)

    def _put_marker(self, rel: Rel) -> Entry:
        key = self._dir_prefix(rel)
        self.client.put_object(Bucket=self.bucket, Key=key, Body=b"")
        return self._dir_entry(rel, self._head(key))

    def remove(self, rel: Rel, *, recursive: bool = False) -> int:
        self.check_writable(rel)
        key = self._key(rel)
        head = self._head(key)
        if head is not None:
            self.client.delete_object(Bucket=self.bucket, Key=key)
            self._keep_dir(rel[:-1])
            return head["ContentLength"]
        prefix = self._dir_prefix(rel)
        objects = []
        for obj in self._objects(prefix):
            name = obj["Key"][len(prefix):]
            own = name == "" or ("/" not in name and name.startswith(TEMP_PREFIX))
            if not own and not recursive:
                raise ValidationError.for_field(
                    "path", f"{self.display(rel)} is not empty; remove it recursively",
                    code="not_empty")
            objects.append(obj)
        if not objects:
            raise self.not_found(rel)
        self._abort_uploads(list(self._uploads(prefix)))
        self._delete([obj["Key"] for obj in objects])
        self._keep_dir(rel[:-1])
        return sum(obj["Size"] for obj in objects if self._counted(obj["Key"][len(prefix):]))

    def upload(self, rel: Rel, upload_id: str) -> S3Upload:
        self.check_creatable(rel)
        if not upload_id or "/" in upload_id:
            raise ValidationError.for_field("upload_id", f"{upload_id!r} is not an upload id")
        self._require_dir(rel[:-1])
        if self._is_dir(rel):
            raise self.is_a_dir(rel)
        return S3Upload(self, rel, upload_id)

    def move(self, src: Rel, dst: Rel) -> None:
        self.check_writable(src)
        self.check_creatable(dst)
        if dst[:len(src)] == src and dst != src:
            raise ValidationError.for_field(
                "path", f"{self.display(src)} cannot be moved into itself ({self.display(dst)})")
        source = self._lookup(src)
        if source is None:
            raise self.not_found(src)
        self._require_dir(dst[:-1])
        if src == dst:
            return
        target = self._lookup(dst)
        if source.type == "file":
            if target is not None and target.type == "dir":
                raise self.is_a_dir(dst)
            self._copy(self._key(src), self._key(dst), source.size)
            self.client.delete_object(Bucket=self.bucket, Key=self._key(src))
        else:
            if target is not None and target.type != "dir":
                raise self.exists(dst)
            self._move_tree(src, dst, merge=target is not None)
        self._keep_dir(src[:-1])

    def _move_tree(self, src: Rel, dst: Rel, *, merge: bool) -> None:
        """Copy every key below ``src`` to ``dst``, then delete them (not atomic: a crash
        half way leaves entries in both places, none lost)."""
        src_prefix, dst_prefix = self._dir_prefix(src), self._dir_prefix(dst)
        objects = list(self._objects(src_prefix))
        if merge:
            self._check_merge(dst, [obj["Key"][len(src_prefix):] for obj in objects])
        if not any(obj["Key"] == src_prefix for obj in objects):
            self.client.put_object(Bucket=self.bucket, Key=dst_prefix, Body=b"")
        for obj in objects:
            self._copy(obj["Key"], dst_prefix + obj["Key"][len(src_prefix):], obj["Size"])
        self._delete([obj["Key"] for obj in objects])

    def _check_merge(self, dst: Rel, names: list[str]) -> None:
        """Merging must not put a file where ``dst`` has a directory, or the reverse."""
        dst_prefix = self._dir_prefix(dst)
        files, dirs = set(), set()
        for obj in self._objects(dst_prefix):
            parts = obj["Key"][len(dst_prefix):].split("/")
            dirs.update("/".join(parts[:n]) for n in range(1, len(parts)))
            if parts[-1]:
                files.add("/".join(parts))
        for name in names:
            parts = name.split("/")
            for n in range(1, len(parts)):
                if "/".join(parts[:n]) in files:
                    raise self.exists((*dst, *parts[:n]))
            if parts[-1] and name in dirs:
                raise self.exists((*dst, *parts))


class S3Upload(Upload):
    """A multipart upload to ``<parent>/<TEMP_PREFIX><upload_id>``, copied into place on commit.

    ``finish()`` completes the received bytes into the temporary object and returns their
    sha256 (read back from S3 when the upload was resumed); ``commit()`` calls it when it was
    not called. After ``finish()`` no more bytes are accepted.
    """

    def __init__(self, storage: S3Storage, rel: Rel, upload_id: str):
        super().__init__(rel)
        self.storage = storage
        self.upload_id = upload_id
        self.key = storage._key(rel)
        self.temp_key = storage._dir_prefix(rel[:-1]) + TEMP_PREFIX + upload_id
        self.tail_key = f"{self.temp_key}.tail"
        self._mpu: str | None = None  # S3's id of the multipart upload
        self._parts: list[dict] = []  # {"PartNumber", "ETag", "Size"}, numbered from 1
        self._buffer = bytearray()
        self._finished = False  # the bytes are complete in the temporary object
        self._done = False  # committed or aborted
        self._digest: str | None = None
        self._tail_saved = False
        self._sending: dict[int, Future] = {}  # part uploads in flight, by part number
        self._pool: ThreadPoolExecutor | None = None
        self._resume()
        self._numbered = len(self._parts)  # part numbers given out (sent or being sent)
        # hashlib's state cannot be restored: bytes received before a resume are hashed by
        # reading the temporary object back in finish().
        self._hash_complete = self.offset == 0

    @property
    def _client(self):
        return self.storage.client

    @property
    def _bucket(self) -> str:
        return self.storage.bucket

    def _resume(self) -> None:
        mine = [upload for upload in self.storage._uploads(self.temp_key)
                if upload["Key"] == self.temp_key]
        if mine:
            mine.sort(key=lambda upload: upload["Initiated"])  # stable: S3 lists oldest first
            *stale, latest = mine
            self.storage._abort_uploads(stale)
            self._mpu = latest["UploadId"]
            for part in sorted(self.storage._parts(self.temp_key, self._mpu),
                               key=lambda part: part["PartNumber"]):
                if part["PartNumber"] != len(self._parts) + 1:
                    break  # only a gapless run of parts counts
                self._parts.append({key: part[key] for key in ("PartNumber", "ETag", "Size")})
            self.offset = sum(part["Size"] for part in self._parts)
        else:
            head = self.storage._head(self.temp_key)
            if head is not None:  # finished before, not yet committed
                self._finished = True
                self.offset = head["ContentLength"]
        tail = self.storage._head(self.tail_key)
        if tail is None:
            return
        meta = tail.get("Metadata", {})
        if (not self._finished and meta.get("next-part") == str(len(self._parts) + 1)
                and meta.get("start") == str(self.offset)):
            self._buffer += self._client.get_object(Bucket=self._bucket,
                                                    Key=self.tail_key)["Body"].read()
            self.offset += len(self._buffer)
            self._tail_saved = True
        else:  # left over from before a part upload or finish(): those bytes are in S3
            self._client.delete_object(Bucket=self._bucket, Key=self.tail_key)

    def _part_size(self) -> int:
        return PART_SIZE * (1 + self._numbered // PARTS_PER_SIZE)

    def _write(self, data: bytes) -> None:
        if self._finished or self._done:
            raise ConflictError.for_field(
                "path", f"the upload {self.upload_id} to {self.storage.display(self.rel)} is "
                        "finished: commit or abort it", code="upload_finished")
        self._buffer += data
        while len(self._buffer) >= self._part_size():
            self._send_part(self._part_size())

    def _send_part(self, size: int) -> None:
        """Send the next ``size`` buffered bytes as the next part, on a thread of the upload's
        own, while more bytes come; with PARTS_IN_FLIGHT parts in flight, wait for one."""
        if self._mpu is None:
            self._mpu = self._client.create_multipart_upload(
                Bucket=self._bucket, Key=self.temp_key)["UploadId"]
        self._numbered += 1
        body = bytes(self._buffer[:size])
        del self._buffer[:size]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(PARTS_IN_FLIGHT, thread_name_prefix="pfs-s3-part")
        self._sending[self._numbered] = self._pool.submit(
            self._upload_part, self._mpu, self._numbered, body)
        if len(self._sending) >= PARTS_IN_FLIGHT:
            self._settle(everything=False)

    def _upload_part(self, mpu: str, number: int, body: bytes) -> dict:
        answer = self.storage.client.upload_part(Bucket=self._bucket, Key=self.temp_key,
                                                 UploadId=mpu, PartNumber=number, Body=body)
        return {"PartNumber": number, "ETag": answer["ETag"], "Size": len(body)}

    def _settle(self, *, everything: bool = True) -> None:
        """Take in the parts sent (waiting for one, or with ``everything`` for all). A part
        that failed rewinds the upload to its parts in S3 without a gap (``offset`` says
        where the client goes on from) and is raised."""
        if not self._sending:
            return
        wait(self._sending.values(), return_when=ALL_COMPLETED if everything
             else FIRST_COMPLETED)
        failure = None
        for number, future in list(self._sending.items()):
            if future.done():
                del self._sending[number]
                try:
                    self._parts.append(future.result())
                except Exception as exc:  # raised below, after the rewind
                    failure = failure or exc
        self._parts.sort(key=lambda part: part["PartNumber"])
        if failure is not None:
            self._rewind()
            raise failure
        if self._tail_saved and self._parts:  # stale now (its next-part no longer matches)
            self._client.delete_object(Bucket=self._bucket, Key=self.tail_key)
            self._tail_saved = False

    def _rewind(self) -> None:
        """After a part failed: back to the parts in S3 from the first without a gap. The
        later ones are sent again (S3 replaces a part sent again under its number)."""
        wait(self._sending.values())
        for future in self._sending.values():
            if future.exception() is None:
                self._parts.append(future.result())
        self._sending.clear()
        kept = []
        for part in sorted(self._parts, key=lambda part: part["PartNumber"]):
            if part["PartNumber"] != len(kept) + 1:
                break
            kept.append(part)
        self._parts, self._numbered = kept, len(kept)
        self.offset = sum(part["Size"] for part in kept)
        self._buffer = bytearray()
        self._hash_complete = False  # the bytes after the gap went into the hash
        if self._tail_saved:
            self._client.delete_object(Bucket=self._bucket, Key=self.tail_key)
            self._tail_saved = False

    def pause(self) -> None:
        """Between two requests: every part sent is in S3, and no thread is left waiting."""
        try:
            self._settle()
        finally:
            self._stop_pool()

    def _stop_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    @property
    def sha256(self) -> str:
        if self._digest is not None:
            return self._digest
        if self._hash_complete:
            return self.hasher.hexdigest()
        raise RuntimeError("the sha256 of a resumed S3 upload is known after finish()")

    def finish(self) -> str:
        """Complete the received bytes into the temporary object; return their sha256."""
        if self._digest is not None:
            return self._digest
        if not self._finished:
            self._settle()
            if self._parts:
                if self._buffer:
                    self._send_part(len(self._buffer))
                self.pause()
                self._client.complete_multipart_upload(
                    Bucket=self._bucket, Key=self.temp_key, UploadId=self._mpu,
                    MultipartUpload={"Parts": [{"PartNumber": part["PartNumber"],
                                                "ETag": part["ETag"]} for part in self._parts]})
            else:  # small or empty: one PUT (a multipart upload needs at least one part)
                self._client.put_object(Bucket=self._bucket, Key=self.temp_key,
                                        Body=bytes(self._buffer))
                if self._mpu is not None:
                    self.storage._abort_uploads([{"Key": self.temp_key, "UploadId": self._mpu}])
            self._mpu, self._buffer, self._finished = None, bytearray(), True
            if self._tail_saved:
                self._client.delete_object(Bucket=self._bucket, Key=self.tail_key)
                self._tail_saved = False
        if self._hash_complete:
            self._digest = self.hasher.hexdigest()
        else:
            self._digest, size = self.storage._sha256(self.temp_key, self.new_hash)
            if size != self.offset:
                raise RuntimeError(f"{self.temp_key}: {size} bytes in S3, {self.offset} received")
        return self._digest

    def commit(self, *, overwrite: bool = True) -> Entry:
        storage = self.storage
        storage.check_writable(self.rel)
        self.finish()
        if not overwrite:
            if storage._lookup(self.rel) is not None:
                raise storage.exists(self.rel)
        elif storage._is_dir(self.rel):
            raise storage.is_a_dir(self.rel)
        storage._copy(self.temp_key, self.key, self.offset)
        self._client.delete_object(Bucket=self._bucket, Key=self.temp_key)
        self._done = True
        return storage.stat(self.rel)

    def abort(self) -> None:
        if self._done:
            return
        wait(self._sending.values())  # their parts are dropped with the upload
        self._sending.clear()
        self._stop_pool()
        mine = [upload for upload in self.storage._uploads(self.temp_key)
                if upload["Key"] == self.temp_key]
        self.storage._abort_uploads(mine)
        self.storage._delete([self.temp_key, self.tail_key])
        self._mpu, self._buffer, self._done, self._tail_saved = None, bytearray(), True, False

    def close(self) -> None:
        """Keep the buffered bytes (less than a part) in S3 for a later resume."""
        try:
            self.pause()  # the parts in flight first: the tail names the part after them
        except Exception:  # rewound: the client is told the offset S3 has when it resumes
            logger.warning("a part of the upload %s failed", self.upload_id, exc_info=True)
        if self._finished or self._done or not self._buffer:
            return
        self._client.put_object(
            Bucket=self._bucket, Key=self.tail_key, Body=bytes(self._buffer),
            Metadata={"next-part": str(len(self._parts) + 1),
                      "start": str(sum(part["Size"] for part in self._parts))})
        self._tail_saved = True
