"""PaddlePaddle's RecordIO file format, in pure Python: a writer and a reader.

The format is the one of github.com/PaddlePaddle/recordio (the Go library first written as
github.com/wangkuiyi/recordio, whose Python binding ``recordio.writer`` / ``recordio.reader``
``paddle.v2.dataset.common.convert`` and the seeds' readers use). This module follows its Go
source: ``header.go`` (the chunk header), ``chunk.go`` (records, compression, checksum),
``writer.go`` (when a chunk is cut) and ``reader.go`` (the index); it shares no code with it.

A file is a sequence of chunks, nothing before, between or after them (an empty file has no
chunk). Each chunk is::

    offset  size  field (unsigned 32-bit integers, little-endian)
    0       4     magic number 0x01020304            (bytes 04 03 02 01)
    4       4     CRC-32 (IEEE, as zlib.crc32) of the chunk's data as stored (compressed)
    8       4     compressor: 0 none, 1 snappy, 2 gzip
    12      4     size of the data as stored, in bytes
    16      4     number of records in the chunk
    20      ...   the data: the records, compressed as a whole

and the records, before compression, are each a 4-byte little-endian length followed by that
many bytes (an empty record is allowed). A writer collects records until the next one would
take the chunk's record bytes (lengths not counted) past ``max_chunk_size`` (32 MiB by
default), then writes the chunk; a chunk never holds zero records.

Compressors: *none* (0) and *gzip* (2, one gzip member, as Go's ``compress/gzip`` writes) are
written and read. *snappy* (1, the Go library's default) is read — the snappy framing format
of Go's ``snappy.NewWriter``: a ``sNaPpY`` stream identifier, then compressed (0x00) or
uncompressed (0x01) frames — but not written: a pure-Python snappy compressor would be slow,
and files written with *none* or *gzip* are read by the original library as well. The
frames' own CRC-32C is not checked: the chunk's CRC-32 already covers every stored byte.

    with recordio.Writer("data.recordio", compressor=recordio.GZIP) as w:
        w.write(b"hello")
    with recordio.Reader("data.recordio") as r:
        for record in r:
            ...

The Python binding's names work too: ``w = recordio.writer(path); w.write(b); w.close()`` and
``r = recordio.reader(pattern); r.read()`` (``None`` at the end; a glob pattern reads the
matching files in sorted order).
"""

from __future__ import annotations

import glob
import gzip
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

MAGIC = 0x01020304
NO_COMPRESSION = 0
SNAPPY = 1
GZIP = 2
COMPRESSORS = {NO_COMPRESSION: "none", SNAPPY: "snappy", GZIP: "gzip"}
DEFAULT_MAX_CHUNK_SIZE = 32 * 1024 * 1024
HEADER = struct.Struct("<5I")  # magic, checksum, compressor, stored size, number of records
LENGTH = struct.Struct("<I")
MAX_UINT32 = 0xFFFFFFFF


class RecordIOError(ValueError):
    """A file that is not RecordIO, or is damaged (bad magic number, checksum, truncation)."""


@dataclass(frozen=True)
class ChunkInfo:
    """Where a chunk is in its file and what its header says."""

    offset: int
    num_records: int
    compressor: int
    stored_size: int
    checksum: int


# -- writing ----------------------------------------------------------------------------------

def encode_chunk(records: list[bytes], compressor: int = NO_COMPRESSION) -> bytes:
    """One chunk (header and data) holding ``records``."""
    if not records:
        raise ValueError("a chunk holds at least one record")
    raw = b"".join(LENGTH.pack(len(r)) + bytes(r) for r in records)
    if compressor == NO_COMPRESSION:
        data = raw
    elif compressor == GZIP:
        data = gzip.compress(raw, mtime=0)
    elif compressor == SNAPPY:
        raise ValueError("writing snappy chunks is not supported (reading them is): use "
                         "recordio.GZIP or recordio.NO_COMPRESSION")
    else:
        raise ValueError(f"unknown compressor {compressor!r}: use one of "
                         f"{', '.join(f'{k} ({v})' for k, v in COMPRESSORS.items())}")
    if len(data) > MAX_UINT32:
        raise ValueError(f"a chunk of {len(data)} bytes is too large for the format (4 GiB)")
    return HEADER.pack(MAGIC, zlib.crc32(data), compressor, len(data), len(records)) + data


class Writer:
    """Writes records to a RecordIO file (a path, or a binary file object left open).

    ``write(record)`` takes ``bytes``; ``close()`` writes the last chunk. A record larger than
    ``max_chunk_size`` gets a chunk of its own (the Go writer refuses those; its reader reads
    them).
    """

    def __init__(self, file: str | os.PathLike | BinaryIO, *,
                 max_chunk_size: int = DEFAULT_MAX_CHUNK_SIZE,
                 compressor: int = NO_COMPRESSION):
        if compressor not in (NO_COMPRESSION, GZIP):
            encode_chunk([b""], compressor)  # raises the reason
        if not isinstance(max_chunk_size, int) or max_chunk_size <= 0:
            raise ValueError(f"max_chunk_size must be a positive number of bytes, "
                             f"not {max_chunk_size!r}")
        if isinstance(file, str | os.PathLike):
            self._file: BinaryIO | None = open(file, "wb")  # noqa: SIM115 - closed by close()
            self._owned = True
        else:
            self._file, self._owned = file, False
        self.max_chunk_size = max_chunk_size
        self.compressor = compressor
        self._records: list[bytes] = []
        self._size = 0
        self.records_written = 0
        self.chunks_written = 0

    def write(self, record: bytes) -> int:
        if self._file is None:
            raise ValueError("write to a closed RecordIO writer")
        if not isinstance(record, bytes | bytearray | memoryview):
            raise TypeError(f"a record is bytes, not {type(record).__name__} "
                            "(serialize it first, e.g. with pickle.dumps)")
        record = bytes(record)
        if len(record) > MAX_UINT32:
            raise ValueError(f"a record of {len(record)} bytes is too large for the format")
        if self._records and self._size + len(record) > self.max_chunk_size:
            self._flush()
        self._records.append(record)
        self._size += len(record)
        return len(record)

    def flush(self) -> None:
        """Write the records collected so far as a chunk."""
        if self._file is None:
            raise ValueError("flush of a closed RecordIO writer")
        self._flush()
        self._file.flush()

    def _flush(self) -> None:
        if not self._records:
            return
        self._file.write(encode_chunk(self._records, self.compressor))
        self.records_written += len(self._records)
        self.chunks_written += 1
        self._records, self._size = [], 0

    def close(self) -> None:
        if self._file is None:
            return
        try:
            self._flush()
            self._file.flush()
        finally:
            if self._owned:
                self._file.close()
            self._file = None

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def writer(path: str | os.PathLike, *, max_chunk_size: int = DEFAULT_MAX_CHUNK_SIZE,
           compressor: int = NO_COMPRESSION) -> Writer:
    """``recordio.writer(path)`` of the original Python binding."""
    return Writer(path, max_chunk_size=max_chunk_size, compressor=compressor)


# -- reading ----------------------------------------------------------------------------------

def _read_header(file: BinaryIO, where: str) -> ChunkInfo | None:
    offset = file.tell()
    head = file.read(HEADER.size)
    if not head:
        return None
    if len(head) < HEADER.size:
        raise RecordIOError(f"{where}: truncated chunk header at byte {offset}")
    magic, checksum, compressor, size, count = HEADER.unpack(head)
    if magic != MAGIC:
        raise RecordIOError(f"{where}: no RecordIO chunk at byte {offset} (magic number "
                            f"{magic:#010x}, expected {MAGIC:#010x})")
    return ChunkInfo(offset, count, compressor, size, checksum)


def _decompress(data: bytes, compressor: int, where: str) -> bytes:
    if compressor == NO_COMPRESSION:
        return data
    if compressor == GZIP:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise RecordIOError(f"{where}: bad gzip data: {exc}") from None
    if compressor == SNAPPY:
        return snappy_unframe(data, where)
    raise RecordIOError(f"{where}: unknown compressor {compressor}")


def decode_chunk(info: ChunkInfo, data: bytes, where: str = "chunk") -> list[bytes]:
    """The records of a chunk from its stored data, checksum checked."""
    if len(data) != info.stored_size:
        raise RecordIOError(f"{where}: truncated chunk at byte {info.offset} "
                            f"({len(data)} of {info.stored_size} bytes)")
    if zlib.crc32(data) != info.checksum:
        raise RecordIOError(f"{where}: checksum mismatch in the chunk at byte {info.offset}")
    raw = _decompress(data, info.compressor, where)
    records, pos = [], 0
    for _ in range(info.num_records):
        if pos + LENGTH.size > len(raw):
            raise RecordIOError(f"{where}: the chunk at byte {info.offset} ends inside a "
                                "record length")
        (length,) = LENGTH.unpack_from(raw, pos)
        pos += LENGTH.size
        if pos + length > len(raw):
            raise RecordIOError(f"{where}: the chunk at byte {info.offset} ends inside a "
                                "record")
        records.append(raw[pos:pos + length])
        pos += length
    return records


def load_index(path: str | os.PathLike) -> list[ChunkInfo]:
    """Every chunk of a file, reading only the headers (Go's ``LoadIndex``)."""
    chunks = []
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        while (info := _read_header(file, str(path))) is not None:
            if file.tell() + info.stored_size > size:
                raise RecordIOError(f"{path}: truncated chunk at byte {info.offset}")
            chunks.append(info)
            file.seek(info.stored_size, os.SEEK_CUR)
    return chunks


def num_records(path: str | os.PathLike) -> int:
    return sum(chunk.num_records for chunk in load_index(path))


MAGIC_BYTES = MAGIC.to_bytes(4, "little")


def is_recordio(path: str | os.PathLike) -> bool:
    """Whether the file starts with a RecordIO chunk's magic number (an empty file does not)."""
    with open(path, "rb") as file:
        return file.read(len(MAGIC_BYTES)) == MAGIC_BYTES


def read_chunk(path: str | os.PathLike, offset: int) -> list[bytes]:
    """The records of the chunk at byte ``offset`` of a file (as ``load_index`` finds it),
    checksum checked; a ``RecordIOError`` when no chunk starts there."""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"a chunk's offset is a byte position, not {offset!r}")
    with open(path, "rb") as file:
        file.seek(offset)
        info = _read_header(file, str(path))
        if info is None:
            raise RecordIOError(f"{path}: no chunk at byte {offset}: the file ends there")
        return decode_chunk(info, file.read(info.stored_size), str(path))


def _expand(paths) -> list[str]:
    """A path, a glob pattern or a list of them, as the files to read in order."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    files: list[str] = []
    for path in paths:
        path = os.fspath(path)
        if glob.has_magic(path) and not os.path.exists(path):
            matched = sorted(glob.glob(path))
            if not matched:
                raise FileNotFoundError(f"no file matches {path!r}")
            files += matched
        elif not os.path.isfile(path):
            raise FileNotFoundError(f"no RecordIO file {path!r}")
        else:
            files.append(path)
    return files


class Reader:
    """Reads the records of one or more RecordIO files, in order.

    ``paths`` is a path, a glob pattern (its files in sorted order) or a list of them.
    ``start`` and ``count`` pick a range of records (counted over all the files); chunks
    before the range are skipped by their headers, not read. Iterate over it, or call
    ``read()``, which answers ``None`` at the end.
    """

    def __init__(self, paths, *, start: int = 0, count: int | None = None):
        if start < 0 or (count is not None and count < 0):
            raise ValueError("start and count are 0 or more")
        self.files = _expand(paths)
        self._records = self._iterate(start, count)

    def _iterate(self, start: int, count: int | None) -> Iterator[bytes]:
        skip, left = start, count
        for path in self.files:
            with open(path, "rb") as file:
                while left != 0 and (info := _read_header(file, path)) is not None:
                    if skip >= info.num_records:  # wholly before the range
                        skip -= info.num_records
                        file.seek(info.stored_size, os.SEEK_CUR)
                        continue
                    records = decode_chunk(info, file.read(info.stored_size), path)
                    for record in records[skip:]:
                        if left == 0:
                            return
                        yield record
                        if left is not None:
                            left -= 1
                    skip = 0
            if left == 0:
                return

    def __iter__(self) -> Iterator[bytes]:
        return self._records

    def __next__(self) -> bytes:
        return next(self._records)

    def read(self) -> bytes | None:
        """The next record, or ``None`` after the last (the original binding's API)."""
        return next(self._records, None)

    def close(self) -> None:
        self._records.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reader(paths, *, start: int = 0, count: int | None = None) -> Reader:
    """``recordio.reader(path_or_pattern)`` of the original Python binding."""
    return Reader(paths, start=start, count=count)


def read_records(paths) -> list[bytes]:
    """Every record of the file(s)."""
    with Reader(paths) as r:
        return list(r)


# -- snappy (reading) -------------------------------------------------------------------------

SNAPPY_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"


def snappy_unframe(data: bytes, where: str = "snappy") -> bytes:
    """The bytes of a snappy framing-format stream."""
    out, pos, seen_id = bytearray(), 0, False
    while pos < len(data):
        if pos + 4 > len(data):
            raise RecordIOError(f"{where}: truncated snappy frame header")
        kind = data[pos]
        length = int.from_bytes(data[pos + 1:pos + 4], "little")
        body = data[pos + 4:pos + 4 + length]
        if len(body) < length:
            raise RecordIOError(f"{where}: truncated snappy frame")
        pos += 4 + length
        if kind == 0xFF:
            if body != b"sNaPpY":
                raise RecordIOError(f"{where}: bad snappy stream identifier")
            seen_id = True
            continue
        if not seen_id:
            raise RecordIOError(f"{where}: snappy stream without its identifier")
        if kind == 0x00:  # compressed; the first 4 bytes are the masked CRC-32C
            out += snappy_decompress(body[4:], where)
        elif kind == 0x01:  # uncompressed
            out += body[4:]
        elif 0x02 <= kind <= 0x7F:
            raise RecordIOError(f"{where}: reserved snappy frame type {kind:#04x}")
        # 0x80-0xfe: skippable frames and padding
    return bytes(out)


def snappy_decompress(block: bytes, where: str = "snappy") -> bytes:
    """One snappy-compressed block (the raw format: a varint length, then literals and
    back-references)."""
    length, shift, pos = 0, 0, 0
    while True:
        if pos >= len(block) or shift > 28:
            raise RecordIOError(f"{where}: bad snappy length")
        byte = block[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    out = bytearray()
    try:
        while pos < len(block):
            tag = block[pos]
            pos += 1
            kind = tag & 3
            if kind == 0:  # literal
                size = tag >> 2
                if size >= 60:
                    extra = size - 59
                    size = int.from_bytes(block[pos:pos + extra], "little")
                    pos += extra
                size += 1
                if pos + size > len(block):
                    raise RecordIOError(f"{where}: snappy literal runs past the block")
                out += block[pos:pos + size]
                pos += size
                continue
            if kind == 1:
                size = ((tag >> 2) & 7) + 4
                offset = ((tag >> 5) << 8) | block[pos]
                pos += 1
            elif kind == 2:
                size = (tag >> 2) + 1
                offset = int.from_bytes(block[pos:pos + 2], "little")
                pos += 2
            else:
                size = (tag >> 2) + 1
                offset = int.from_bytes(block[pos:pos + 4], "little")
                pos += 4
            if offset == 0 or offset > len(out):
                raise RecordIOError(f"{where}: bad snappy back-reference")
            start = len(out) - offset
            if offset >= size:
                out += out[start:start + size]
            else:  # overlapping: the pattern repeats
                for i in range(size):
                    out.append(out[start + i])
    except IndexError:
        raise RecordIOError(f"{where}: truncated snappy block") from None
    if len(out) != length:
        raise RecordIOError(f"{where}: snappy block of {len(out)} bytes, expected {length}")
    return bytes(out)
