"""What a job writes cannot make the portal read without bound (issue 14, finding 6): lines
end at "\\n", "\\r\\n" or a lone "\\r" and are split at 16 KiB, every reader numbers them the
same way, batches and messages are bounded, tails are read by seeking, and a whole log is
served block by block."""

from __future__ import annotations

import json
import os
import random
import time
import tracemalloc

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from jobs.logs import lines
from jobs.logs.lines import MAX_LINE, Cursor, lines_end, lines_read, lines_skip, lines_tail
from tests.jobs.files import file_at, log_path
from tests.jobs.test_consumers import connect, make_job, receive


def read_all(file) -> list[str]:
    cursor, got = Cursor(), []
    while batch := lines_read(file, cursor, ended=True):
        got += batch
    return got


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "train.log"
    path.write_bytes(b"")
    return path


def test_a_progress_bar_that_writes_carriage_returns_is_one_line_per_redraw(log):
    log.write_bytes(b"epoch 1\n 10%\r 50%\r100%\r\nepoch 2\r\n 10%\r")
    file = file_at(log)
    cursor = Cursor()
    # The last "\r" may be the start of "\r\n": not a whole line until more comes.
    assert lines_read(file, cursor) == ["epoch 1", " 10%", " 50%", "100%", "epoch 2"]
    assert lines_end(file).line == 5
    with log.open("ab") as f:
        f.write(b" 20%\n")
    assert lines_read(file, cursor) == [" 10%", " 20%"]
    assert read_all(file) == ["epoch 1", " 10%", " 50%", "100%", "epoch 2", " 10%", " 20%"]


def test_over_long_lines_are_split_at_16_kib(log):
    assert MAX_LINE == 16 * 1024
    log.write_bytes(b"a" * MAX_LINE + b"\n" + b"b" * (2 * MAX_LINE + 5) + b"\nc")
    file = file_at(log)
    got = read_all(file)
    assert [len(line) for line in got] == [MAX_LINE, MAX_LINE, MAX_LINE, 5, 1]
    assert got[0] == "a" * MAX_LINE and got[-1] == "c"
    assert lines_end(file).line == 4  # "c" is still being written
    assert lines_tail(file, 2) == (3, ["b" * 5, "c"])


def test_every_reader_numbers_lines_the_same_way(log):
    """Reading in batches, skipping to a line, the end, the tail and the API's tail offset
    agree, whatever mix of line ends and long lines the file holds."""
    rng = random.Random(14)  # noqa: S311 - test data, not secrets
    pieces = []
    for _ in range(3000):
        kind = rng.random()
        text = b"x" * rng.choice([0, 1, 10, 200, MAX_LINE - 1, MAX_LINE, MAX_LINE + 1,
                                  3 * MAX_LINE + 7]) if kind < 0.3 else b"line %d" % len(pieces)
        pieces.append(text + rng.choice([b"\n", b"\r\n", b"\r", b"\n\n", b"\r\r\n"]))
    log.write_bytes(b"".join(pieces) + b"unfinished")
    file = file_at(log)
    every = read_all(file)
    assert every[-1] == "unfinished" and all(len(line.encode()) <= MAX_LINE for line in every)
    assert lines_end(file).line == len(every) - 1
    for start in (0, 1, 17, 1000, len(every) - 3, len(every) - 1):
        cursor = Cursor()
        lines_skip(file, cursor, start)
        assert cursor.line == start
        assert lines_read(file, cursor, ended=True, limit=3) == every[start:start + 3]
    for count in (1, 5, 300):
        first, tail = lines_tail(file, count)
        assert (first, tail) == (len(every) - count, every[-count:])
        # The API's tail reads back only what ``count`` lines can span: where it starts inside
        # a line longer than that may differ from the numbering (documented), never the count.
        got = read_all(file_at_offset(log, lines.tail_offset(file, count)))
        assert len(got) == count and got[-1] == every[-1]


def test_the_tail_of_ordinary_lines_is_exact(log):
    log.write_bytes(b"".join(b"line %d\r\n" % i if i % 3 else b"line %d\n" % i
                             for i in range(5000)))
    file = file_at(log)
    for count in (0, 1, 10, 4999, 5000, 9000):
        got = read_all(file_at_offset(log, lines.tail_offset(file, count)))
        assert got == [f"line {i}" for i in range(max(0, 5000 - count), 5000)]


def file_at_offset(path, offset):
    """The part of ``path`` from ``offset`` on, as a file of its own."""
    part = path.with_name(path.name + f".from-{offset}")
    with path.open("rb") as f:
        f.seek(offset)
        part.write_bytes(f.read())
    return file_at(part)


def test_a_batch_reads_a_bounded_part_of_a_file_with_no_line_end(log):
    with log.open("wb") as f:
        f.truncate(128 * 2**20)  # 128 MiB of zeros, no newline: what took 72 s and 805 MB
    file = file_at(log)
    started = time.monotonic()
    cursor = Cursor()
    batch = lines_read(file, cursor)
    # Whole 16 KiB pieces; the last one read may go on: it waits for the next batch.
    assert len(batch) == lines.BATCH_BYTES // MAX_LINE - 1
    assert cursor.offset == len(batch) * MAX_LINE
    assert time.monotonic() - started < 5
    # The tail of the API reads the end, not the file.
    offset = lines.tail_offset(file, 2)
    assert 0 < 128 * 2**20 - offset <= 2 * (MAX_LINE + 2)
    assert time.monotonic() - started < 5


@pytest.mark.django_db(transaction=True)
def test_the_whole_log_is_served_in_bounded_memory(token_client, alice, datacenter, pfs_home):
    """GET /logs without tail read the whole file into memory (1 GiB sparse log: +1 GiB)."""
    job = make_job(alice, datacenter, name="big")
    path = log_path(job, job.replicas.get())
    path.parent.mkdir(parents=True)
    size = 256 * 2**20
    with path.open("wb") as f:
        f.truncate(size)
    response = token_client.get("/api/v1/jobs/big/logs")
    assert response.status_code == 200

    async def consume() -> tuple[int, int]:
        tracemalloc.start()
        try:
            total = 0
            async for chunk in response.streaming_content:
                total += len(chunk)
            return total, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    total, peak = async_to_sync(consume)()
    assert total == size
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB held while serving a 256 MiB log"


@pytest.mark.django_db(transaction=True)
async def test_socket_messages_stay_small_for_a_log_with_no_line_end(app, alice, datacenter):
    job = await sync_to_async(make_job)(alice, datacenter)
    replica = await sync_to_async(job.replicas.get)()
    path = log_path(job, replica)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(64 * 2**20)
    socket = await connect(app, "/ws/jobs/train/logs/", alice)
    first = 0
    for _ in range(3):
        message = await receive(socket)
        assert message["type"] == "lines" and message["first"] == first
        # At most a batch of the file, each byte at most 6 characters of JSON ("\u0000").
        assert len(json.dumps(message)) < 6 * lines.BATCH_BYTES + 1024
        assert all(len(line.encode()) <= MAX_LINE for line in message["lines"])
        first = message["next"]
    await socket.disconnect()


def test_reading_a_growing_file_never_takes_half_a_line_end(log):
    """A "\\r" at the end of what is written may be half of "\\r\\n"."""
    file = file_at(log)
    cursor = Cursor()
    with log.open("ab") as f:
        f.write(b"one\r")
    assert lines_read(file, cursor) == []
    with log.open("ab") as f:
        f.write(b"\ntwo\r")
    assert lines_read(file, cursor) == ["one"]
    assert lines_read(file, cursor, ended=True) == ["two"]
    assert cursor.offset == os.path.getsize(log)
