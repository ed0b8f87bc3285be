"""paddlecloud_sdk.recordio: PaddlePaddle's RecordIO format (github.com/PaddlePaddle/recordio,
Go source) — byte layout, chunking, compressors, damage detection and round trips."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
import zlib

import pytest

from paddlecloud_sdk import recordio

# [b"hello", b""] in one uncompressed chunk, laid out by hand from header.go and chunk.go:
GOLDEN = bytes.fromhex(
    "04030201"  # magic number 0x01020304, little-endian
    "de71a945"  # CRC-32 (IEEE) of the 13 data bytes: 0x45a971de
    "00000000"  # compressor: none
    "0d000000"  # 13 bytes of data
    "02000000"  # 2 records
    "05000000" "68656c6c6f"  # len 5, "hello"
    "00000000"  # len 0, the empty record
)


def written(records, **kwargs) -> bytes:
    buffer = io.BytesIO()
    with recordio.Writer(buffer, **kwargs) as w:
        for record in records:
            w.write(record)
    return buffer.getvalue()


def test_golden_bytes_of_one_chunk():
    assert written([b"hello", b""]) == GOLDEN
    assert recordio.encode_chunk([b"hello", b""]) == GOLDEN


def test_golden_bytes_are_read(tmp_path):
    path = tmp_path / "golden.recordio"
    path.write_bytes(GOLDEN)
    assert recordio.read_records(path) == [b"hello", b""]
    [chunk] = recordio.load_index(path)
    assert chunk == recordio.ChunkInfo(offset=0, num_records=2, compressor=0, stored_size=13,
                                       checksum=0x45A971DE)


def test_chunks_are_cut_as_the_go_writer_cuts_them(tmp_path):
    """Go's TestWriteAndRead: max chunk size 10, records of 5, 4 and 2 bytes -> chunks of 2
    and 1 records, the second at 4 + 16 + 5 + 4 + 2 * 4 = 37."""
    path = tmp_path / "f"
    with recordio.writer(path, max_chunk_size=10) as w:
        assert [w.write(r) for r in (b"12345", b"1234", b"12")] == [5, 4, 2]
    index = recordio.load_index(path)
    assert [(c.offset, c.num_records) for c in index] == [(0, 2), (37, 1)]
    assert recordio.read_records(path) == [b"12345", b"1234", b"12"]


def test_an_empty_file_has_no_chunk(tmp_path):
    path = tmp_path / "empty"
    recordio.writer(path).close()
    assert path.read_bytes() == b""
    assert recordio.load_index(path) == [] and recordio.num_records(path) == 0
    assert recordio.reader(path).read() is None


def test_a_record_larger_than_a_chunk_gets_its_own(tmp_path):
    big = os.urandom(100)
    data = written([b"a", big, b"b"], max_chunk_size=50)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert [c.num_records for c in recordio.load_index(path)] == [1, 1, 1]
    assert recordio.read_records(path) == [b"a", big, b"b"]


def test_round_trip_of_many_records_over_many_chunks(tmp_path):
    records = [pickle.dumps({"i": i, "x": os.urandom(i % 97)}) for i in range(2000)]
    path = tmp_path / "f"
    with recordio.Writer(path, max_chunk_size=4096) as w:
        for record in records:
            w.write(record)
    assert w.records_written == 2000 and w.chunks_written > 10
    assert recordio.read_records(path) == records
    assert recordio.num_records(path) == 2000


def test_gzip_chunks(tmp_path):
    records = [b"x" * 1000, b"y" * 1000, b""]
    data = written(records, compressor=recordio.GZIP)
    magic, checksum, compressor, size, count = struct.unpack_from("<5I", data)
    assert (magic, compressor, count) == (0x01020304, 2, 3)
    stored = data[20:]
    assert size == len(stored) < 200 and checksum == zlib.crc32(stored)
    assert gzip.decompress(stored)[:8] == struct.pack("<I", 1000) + b"xxxx"  # a gzip member
    path = tmp_path / "g"
    path.write_bytes(data)
    assert recordio.read_records(path) == records


# -- snappy, the Go library's default: read ------------------------------------------------

def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def frame(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "little") + body


def test_crc32c_helper():
    assert crc32c(b"123456789") == 0xE3069283


def test_snappy_chunks_as_go_writes_them(tmp_path):
    raw = struct.pack("<I", 12) + b"abcabcabcabc" + struct.pack("<I", 3) + b"xyz"
    # A compressed block of the first 16 bytes: varint 16; literal of 7 ("\x0c\0\0\0abc");
    # copy of 9 from 3 back (overlapping: the pattern repeats).
    block1 = bytes([16, (7 - 1) << 2]) + raw[:7] + bytes([((9 - 4) << 2) | 1, 3])
    assert recordio.snappy_decompress(block1) == raw[:16]
    # The rest: a 2-byte-offset copy after a literal, in a second, uncompressed-data frame.
    stream = (recordio.SNAPPY_STREAM_ID
              + frame(0x00, masked(raw[:16]) + block1)
              + frame(0xFE, b"\0\0")  # padding
              + frame(0x01, masked(raw[16:]) + raw[16:]))
    assert recordio.snappy_unframe(stream) == raw
    chunk = struct.pack("<5I", 0x01020304, zlib.crc32(stream), 1, len(stream), 2) + stream
    path = tmp_path / "s"
    path.write_bytes(chunk)
    assert recordio.read_records(path) == [b"abcabcabcabc", b"xyz"]


def test_snappy_long_literals_and_far_copies():
    short = bytes(range(200))  # literal length in one extra byte (tag 60)
    long = bytes(range(256)) + bytes(44)  # 300 bytes: in two extra bytes (tag 61)
    size = 200 + 300 + 20 + 20
    block = (bytes([0x80 | (size & 0x7F), size >> 7])  # varint
             + bytes([60 << 2, 200 - 1]) + short
             + bytes([61 << 2]) + (300 - 1).to_bytes(2, "little") + long
             + bytes([((20 - 1) << 2) | 2]) + (450).to_bytes(2, "little")  # 2-byte offset
             + bytes([((20 - 1) << 2) | 3]) + (520).to_bytes(4, "little"))  # 4-byte offset
    out = recordio.snappy_decompress(block)
    assert out == short + long + short[50:70] + short[0:20]


def test_snappy_length_mismatch_is_an_error():
    with pytest.raises(recordio.RecordIOError, match="expected 5"):
        recordio.snappy_decompress(bytes([5, 0]) + b"a")


@pytest.mark.parametrize("stream", [
    b"\x00\x05\x00\x00abcde",  # no stream identifier
    recordio.SNAPPY_STREAM_ID + frame(0x02, b"x"),  # reserved, unskippable
    recordio.SNAPPY_STREAM_ID + b"\x00\x09",  # truncated
])
def test_bad_snappy_streams(stream):
    with pytest.raises(recordio.RecordIOError):
        recordio.snappy_unframe(stream)


def test_writing_snappy_is_refused_with_the_alternatives():
    with pytest.raises(ValueError, match="GZIP"):
        recordio.Writer(io.BytesIO(), compressor=recordio.SNAPPY)
    with pytest.raises(ValueError, match="unknown compressor"):
        recordio.Writer(io.BytesIO(), compressor=7)


# -- damage -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("damage", "match"), [
    (lambda b: b"XXXX" + b[4:], "magic number"),
    (lambda b: b[:-1], "truncated"),
    (lambda b: b[:10], "truncated chunk header"),
    (lambda b: b[:-2] + b"zz", "checksum"),
    (lambda b: b[:12] + struct.pack("<I", 12) + b[16:-1], "checksum|ends inside"),
])
def test_damage_is_found(tmp_path, damage, match):
    path = tmp_path / "bad"
    path.write_bytes(damage(GOLDEN))
    with pytest.raises(recordio.RecordIOError, match=match):
        recordio.read_records(path)


def test_a_chunk_claiming_more_records_than_it_holds(tmp_path):
    data = GOLDEN[:16] + struct.pack("<I", 3) + GOLDEN[20:]
    path = tmp_path / "bad"
    path.write_bytes(data)
    with pytest.raises(recordio.RecordIOError, match="ends inside"):
        recordio.read_records(path)


def test_records_must_be_bytes():
    with pytest.raises(TypeError, match=r"pickle\.dumps"):
        recordio.Writer(io.BytesIO()).write("text")


def test_a_closed_writer_refuses_records(tmp_path):
    w = recordio.writer(tmp_path / "f")
    w.close()
    w.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        w.write(b"x")


# -- reading several files and ranges ---------------------------------------------------------

@pytest.fixture
def two_files(tmp_path):
    for name, records in (("record_0", [b"1", b"2", b""]), ("record_1", [b"3", b"4", b""])):
        with recordio.writer(tmp_path / name, max_chunk_size=2) as w:
            for record in records:
                w.write(record)
    return tmp_path


def test_the_original_bindings_reader_api(two_files):
    """PaddlePaddle/recordio's python test: reader(pattern).read() over the matching files,
    None at the end (and after)."""
    r = recordio.reader(str(two_files / "record_*"))
    assert [r.read() for _ in range(8)] == [b"1", b"2", b"", b"3", b"4", b"", None, None]
    r.close()


@pytest.mark.parametrize(("start", "count", "expected"), [
    (1, 1, [b"2"]),
    (0, None, [b"1", b"2", b"", b"3", b"4", b""]),
    (2, 3, [b"", b"3", b"4"]),
    (5, 10, [b""]),
    (6, None, []),
    (0, 0, []),
])
def test_a_range_of_records(two_files, start, count, expected):
    files = [two_files / "record_0", two_files / "record_1"]
    assert list(recordio.Reader(files, start=start, count=count)) == expected


def test_missing_files_are_reported_at_once(tmp_path):
    with pytest.raises(FileNotFoundError):
        recordio.reader(str(tmp_path / "none-*"))
    with pytest.raises(FileNotFoundError):
        recordio.reader(tmp_path / "none")
