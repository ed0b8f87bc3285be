"""paddlecloud_sdk.master without a portal: the spans read from real RecordIO files (written
with paddlecloud_sdk.recordio) and text files, and what the reader says before and without a
master (its settings, an endpoint that does not answer, one that is briefly unavailable)."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import pytest

from paddlecloud_sdk import master, recordio
from paddlecloud_sdk.master import (
    MasterError,
    MasterUnavailable,
    NoMasterError,
    SpanError,
    read_span,
    read_spans,
)
from tests.factories import HOME
from tests.json_answer import json_answer


def records(count: int, prefix: str = "record") -> list[bytes]:
    return [f"{prefix}-{i:04d}".encode() for i in range(count)]


@pytest.fixture
def rio(tmp_path):
    """100 records in chunks of 8 (the last of 4), uncompressed."""
    path = tmp_path / "part-0.recordio"
    with recordio.Writer(path, max_chunk_size=8 * 11) as w:
        for record in records(100):
            w.write(record)
    return path


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"line 0\nline 1\r\n\nline 3\nlast, without a newline")
    return path


LINES = [b"line 0", b"line 1", b"", b"line 3", b"last, without a newline"]


def read(span: dict) -> list[bytes]:
    return list(read_span(span))


# --- file --------------------------------------------------------------------------------------

def test_a_recordio_file_is_every_record(rio, tmp_path):
    assert len(recordio.load_index(rio)) == 13
    assert read({"path": str(rio), "kind": "file"}) == records(100)
    gz = tmp_path / "gz.recordio"
    with recordio.Writer(gz, compressor=recordio.GZIP, max_chunk_size=30) as w:
        for record in records(10):
            w.write(record)
    assert read({"path": str(gz), "kind": "file"}) == records(10)


def test_another_file_is_every_line_without_its_newline(text, tmp_path):
    assert read({"path": str(text), "kind": "file"}) == LINES
    ending = tmp_path / "ending.txt"
    ending.write_bytes(b"a\nb\n")
    assert read({"path": str(ending), "kind": "file"}) == [b"a", b"b"]
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert read({"path": str(empty), "kind": "file"}) == []
    assert not recordio.is_recordio(empty)


def test_the_magic_number_decides_not_the_name(rio, tmp_path):
    disguised = tmp_path / "data.txt"
    disguised.write_bytes(rio.read_bytes())
    assert read({"path": str(disguised), "kind": "file"}) == records(100)
    plain = tmp_path / "data.recordio"
    plain.write_bytes(b"not\nrecordio\n")
    assert read({"path": str(plain), "kind": "file"}) == [b"not", b"recordio"]


def test_a_damaged_recordio_file_is_an_error(rio, tmp_path):
    damaged = tmp_path / "damaged.recordio"
    damaged.write_bytes(rio.read_bytes()[:-3])
    with pytest.raises(recordio.RecordIOError, match="truncated"):
        read({"path": str(damaged), "kind": "file"})


# --- chunk -------------------------------------------------------------------------------------

def test_a_chunk_is_its_records(rio):
    offsets = [chunk.offset for chunk in recordio.load_index(rio)]
    got = [read({"path": str(rio), "kind": "chunk", "offset": offset}) for offset in offsets]
    assert [len(chunk) for chunk in got] == [8] * 12 + [4]
    assert [record for chunk in got for record in chunk] == records(100)
    assert recordio.read_chunk(rio, offsets[3]) == records(100)[24:32]


def test_a_chunk_where_there_is_none_is_an_error(rio, text):
    with pytest.raises(recordio.RecordIOError, match="no RecordIO chunk at byte 5"):
        read({"path": str(rio), "kind": "chunk", "offset": 5})
    with pytest.raises(recordio.RecordIOError, match="the file ends there"):
        read({"path": str(rio), "kind": "chunk", "offset": rio.stat().st_size})
    with pytest.raises(SpanError, match="not a RecordIO file"):
        read({"path": str(text), "kind": "chunk", "offset": 0})
    with pytest.raises(SpanError, match="offset must be a whole number"):
        read({"path": str(rio), "kind": "chunk"})


# --- records -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("start", "count"), [(0, 20), (5, 3), (8, 8), (90, 10), (99, 1),
                                              (0, 100), (40, 0)])
def test_records_of_a_recordio_file(rio, start, count):
    span = {"path": str(rio), "kind": "records", "start": start, "count": count}
    assert read(span) == records(100)[start:start + count]


@pytest.mark.parametrize(("start", "count"), [(0, 2), (1, 3), (4, 1), (0, 5), (2, 0)])
def test_records_of_a_text_file_are_lines(text, start, count):
    span = {"path": str(text), "kind": "records", "start": start, "count": count}
    assert read(span) == LINES[start:start + count]


def test_records_past_the_end_are_an_error(rio, text):
    with pytest.raises(SpanError, match="has 100 records: records 95 to 104"):
        read({"path": str(rio), "kind": "records", "start": 95, "count": 10})
    with pytest.raises(SpanError, match="has 5 lines: lines 3 to 5"):
        read({"path": str(text), "kind": "records", "start": 3, "count": 3})
    with pytest.raises(SpanError, match="has 5 lines: no line 7"):
        read({"path": str(text), "kind": "records", "start": 7, "count": 1})
    with pytest.raises(SpanError, match="start must be"):
        read({"path": str(text), "kind": "records", "start": -1, "count": 1})


def test_lines_far_down_a_file_are_found_again_and_the_file_changing_is_noticed(tmp_path):
    path = tmp_path / "big.txt"
    step = master._LineIndex.STEP
    total = 3 * step + 10
    path.write_bytes(b"".join(f"{i}\n".encode() for i in range(total)))

    def lines(start, count):
        return read({"path": str(path), "kind": "records", "start": start, "count": count})

    assert lines(2 * step + 5, 3) == [str(i).encode() for i in range(2 * step + 5,
                                                                      2 * step + 8)]
    assert master._LINES.nearest(str(path), _version(path), 3 * step) == (
        2 * step, sum(len(f"{i}\n") for i in range(2 * step)))
    assert lines(step - 1, 2) == [str(step - 1).encode(), str(step).encode()]
    assert lines(total - 1, 1) == [str(total - 1).encode()]
    # Rewritten (another size): what was learnt of it is not used.
    path.write_bytes(b"".join(f"x{i}\n".encode() for i in range(total)))
    assert lines(2 * step + 5, 1) == [f"x{2 * step + 5}".encode()]


def _version(path):
    stat = path.stat()
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)


# --- spans -------------------------------------------------------------------------------------

def test_spans_in_turn_decoded(rio, text):
    spans = [{"path": str(text), "kind": "records", "start": 3, "count": 1},
             {"path": str(rio), "kind": "records", "start": 10, "count": 2}]
    assert list(read_spans(spans)) == [b"line 3", b"record-0010", b"record-0011"]
    assert list(read_spans(spans, decode=len)) == [6, 11, 11]


def test_pfs_paths_are_found_where_the_replica_sees_pfs(rio, monkeypatch, tmp_path):
    home = tmp_path / "alice"
    (home / "data").mkdir(parents=True)
    rio.rename(home / "data" / "part-0.recordio")
    monkeypatch.setenv("PADDLE_PFS_HOME", str(home))
    span = {"path": f"{HOME}/data/part-0.recordio", "kind": "records",
            "start": 0, "count": 2}
    assert read(span) == records(2)


def test_a_span_of_an_unknown_kind_or_a_missing_file(rio, tmp_path):
    with pytest.raises(SpanError, match="unknown kind 'pages'"):
        read({"path": str(rio), "kind": "pages"})
    with pytest.raises(SpanError, match="names a path and a kind"):
        read({"kind": "file"})
    with pytest.raises(FileNotFoundError):
        read({"path": str(tmp_path / "gone"), "kind": "file"})


# --- the settings ------------------------------------------------------------------------------

def test_without_a_master_the_error_names_the_variable(monkeypatch):
    monkeypatch.delenv("PADDLECLOUD_MASTER_URL", raising=False)
    monkeypatch.delenv("PADDLECLOUD_MASTER_TOKEN", raising=False)
    with pytest.raises(NoMasterError, match="PADDLECLOUD_MASTER_URL is not set: this job has "
                                            "no master"):
        master.reader()
    monkeypatch.setenv("PADDLECLOUD_MASTER_URL", "http://127.0.0.1:1/api/v1/master/x")
    with pytest.raises(NoMasterError, match="PADDLECLOUD_MASTER_TOKEN is not set"):
        master.tasks()
    monkeypatch.setenv("PADDLECLOUD_MASTER_URL", "ftp://somewhere")
    with pytest.raises(NoMasterError, match="not an http:// or https:// URL"):
        master.reader(token="t")
    with pytest.raises(ValueError, match="on_error must be one of raise, skip"):
        master.reader("http://x", "t", on_error="ignore")


def test_the_trainer_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("PADDLECLOUD_MASTER_URL", "http://127.0.0.1:1/api/v1/master/x/")
    monkeypatch.setenv("PADDLECLOUD_MASTER_TOKEN", "pcm_x")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "3")
    reading = master.reader()
    assert (reading.master.url, reading.master.trainer) == (
        "http://127.0.0.1:1/api/v1/master/x", 3)
    assert master.reader(trainer=0).master.trainer == 0
    with pytest.raises(ValueError, match="trainer must be a whole number"):
        master.reader(trainer=-1)


def refused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/api/v1/master/x"


def test_a_master_that_does_not_answer_is_tried_again_then_raised():
    started = time.monotonic()
    with pytest.raises(MasterUnavailable, match=r"did not answer for 1 s: connection refused"):
        next(master.reader(refused_url(), "t", 0, retry_seconds=1))
    assert 0.9 < time.monotonic() - started < 5


class Flaky(http.server.BaseHTTPRequestHandler):
    """A gateway before the master: ``answers`` in turn, as (status, body)."""

    answers: list = []
    seen: list = []

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self.seen.append((self.path, self.headers.get("Authorization"),
                          json.loads(self.rfile.read(length))))
        json_answer(self, *self.answers.pop(0))

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    Flaky.answers, Flaky.seen = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/v1/master/x"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_503_and_502_are_tried_again_other_answers_are_errors(flaky):
    Flaky.answers = [(503, {}), (502, {}), (200, {"done": True})]
    assert list(master.reader(flaky, "pcm_t", 2)) == []
    assert Flaky.seen == [("/api/v1/master/x/next", "Bearer pcm_t", {"trainer": 2})] * 3
    Flaky.answers = [(404, {"code": "not_found", "message": "no such job master",
                            "fields": {}})]
    with pytest.raises(MasterError, match="404: no master for this job") as refused:
        next(master.reader(flaky, "pcm_t", 2))
    assert refused.value.status == 404
    Flaky.answers = [(200, {"something": "else"})]
    with pytest.raises(MasterError, match="neither a task, a wait nor done"):
        next(master.reader(flaky, "pcm_t", 2))
