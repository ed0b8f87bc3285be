"""What every PFS storage does, checked on each implementation (POSIX and S3) alike; then what
only S3 has (parts, directory markers, keys written by other tools)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import time

import pytest
from botocore.exceptions import ClientError

from kernel.errors import PaddleCloudError
from pfs.storage.base import CHUNK, TEMP_PREFIX
from pfs.storage.s3 import PART_SIZE, READ_RANGE

from .conftest import LABEL

MiB = 1 << 20


def content(storage, rel, start=0, end=None) -> bytes:
    return b"".join(storage.read(rel, start, end))


def names(storage, rel=()) -> list[str]:
    return [entry.name for entry in storage.listdir(rel)]


def random_bytes(size: int) -> bytes:
    return os.urandom(size)


@contextlib.contextmanager
def fails(code: str, status: int, path: str):
    """The block raises the error ``code``/``status`` naming the PFS path ``path``."""
    with pytest.raises(PaddleCloudError) as info:
        yield
    assert (info.value.code, info.value.status) == (code, status), info.value.message
    assert re.search(re.escape(path) + r"(?![\w/.-])", info.value.message), info.value.message


def at(*rel: str) -> str:
    return "/".join([LABEL, *rel])


# -- reading and writing whole files -------------------------------------------------------


def test_write_bytes_then_read_back_whole_and_ranges(storage):
    data = bytes(range(256)) * 10
    entry = storage.write_bytes(("f",), data, "u1")
    assert (entry.rel, entry.type, entry.size) == (("f",), "file", len(data))
    assert content(storage, ("f",)) == data
    assert content(storage, ("f",), 100) == data[100:]
    assert content(storage, ("f",), 0, 10) == data[:10]
    assert content(storage, ("f",), 100, 200) == data[100:200]
    assert content(storage, ("f",), 2500, 10_000) == data[2500:]
    assert content(storage, ("f",), 3000) == b""
    assert content(storage, ("f",), 5, 5) == b""


def test_an_empty_file(storage):
    assert storage.write_bytes(("empty",), b"", "u1").size == 0
    assert content(storage, ("empty",)) == b""
    assert storage.stat(("empty",)).size == 0
    assert names(storage) == ["empty"]


def test_a_large_file_is_read_in_chunks(storage):
    data = random_bytes(2 * CHUNK + 123)
    storage.write_bytes(("big",), [data[:MiB], data[MiB:]], "u1")
    chunks = list(storage.read(("big",)))
    assert all(0 < len(chunk) <= CHUNK for chunk in chunks)
    assert b"".join(chunks) == data
    assert b"".join(storage.read(("big",), CHUNK - 1, CHUNK + 2)) == data[CHUNK - 1:CHUNK + 2]


def test_stat_of_a_file_a_directory_and_the_area(storage):
    storage.mkdir(("d",))
    storage.write_bytes(("d", "f"), b"hello", "u1")
    file = storage.stat(("d", "f"))
    assert (file.rel, file.name, file.type, file.size) == (("d", "f"), "f", "file", 5)
    assert abs(file.mtime - time.time()) < 60
    folder = storage.stat(("d",))
    assert (folder.type, folder.size) == ("dir", 0)
    assert abs(folder.mtime - time.time()) < 60
    root = storage.stat(())
    assert (root.rel, root.type) == ((), "dir")


def test_stat_and_read_of_what_does_not_exist(storage):
    with fails("not_found", 404, at("nope")):
        storage.stat(("nope",))
    with fails("not_found", 404, at("nope")):
        content(storage, ("nope",))
    storage.mkdir(("d",))
    with fails("is_a_directory", 400, at("d")):
        content(storage, ("d",))
    with fails("is_a_directory", 400, LABEL):
        content(storage, ())


def test_stat_through_a_file(storage):
    storage.write_bytes(("f",), b"x", "u1")
    with pytest.raises(PaddleCloudError) as info:
        storage.stat(("f", "x"))
    # POSIX says the file is not a directory; S3 that f/x does not exist.
    assert (info.value.code, info.value.status) in {("not_found", 404),
                                                    ("not_a_directory", 400)}
    assert at("f") in info.value.message


# -- listing -------------------------------------------------------------------------------


def test_listdir_is_sorted_by_name_with_types_and_sizes(storage):
    storage.write_bytes(("c",), b"ccc", "u1")
    storage.mkdir(("b",))
    storage.write_bytes(("a.txt",), b"a", "u2")
    storage.write_bytes(("B",), b"BB", "u3")
    storage.write_bytes(("b", "inner"), b"i", "u4")
    listed = storage.listdir(())
    assert [(e.name, e.type, e.size) for e in listed] == [
        ("B", "file", 2), ("a.txt", "file", 1), ("b", "dir", 0), ("c", "file", 3)]
    assert [e.rel for e in storage.listdir(("b",))] == [("b", "inner")]
    assert storage.listdir(()) == listed


def test_listdir_of_a_file_or_nothing(storage):
    storage.write_bytes(("f",), b"x", "u1")
    with fails("not_a_directory", 400, at("f")):
        storage.listdir(("f",))
    with fails("not_found", 404, at("nope")):
        storage.listdir(("nope",))


def test_uploads_not_committed_are_not_listed_and_their_target_does_not_exist(storage):
    storage.mkdir(("d",))
    pending = storage.upload(("d", "new"), "u1")
    pending.write(b"x" * 100)
    aborted = storage.upload(("d", "gone"), "u2")
    aborted.write(b"y" * 100)
    aborted.abort()
    assert storage.listdir(("d",)) == []
    pending.close()
    assert storage.listdir(("d",)) == []
    resumed = storage.upload(("d", "new"), "u1")
    assert resumed.offset == 100
    resumed.write(b"x")
    assert resumed.finish() == hashlib.sha256(b"x" * 101).hexdigest()
    assert storage.listdir(("d",)) == []  # checked, not yet in place
    with fails("not_found", 404, at("d", "new")):
        storage.stat(("d", "new"))
    resumed.commit()
    assert names(storage, ("d",)) == ["new"]
    assert content(storage, ("d", "new")) == b"x" * 101
    with fails("not_found", 404, at("d", "gone")):
        storage.stat(("d", "gone"))
    assert not any(entry.name.startswith(TEMP_PREFIX) for entry in storage.walk(()))


def test_walk_is_depth_first_directories_before_their_contents(storage):
    storage.mkdir(("a", "b"), parents=True)
    storage.write_bytes(("a", "b", "y"), b"y", "u1")
    storage.write_bytes(("a", "x"), b"x", "u2")
    storage.write_bytes(("c",), b"c", "u3")
    assert [entry.rel for entry in storage.walk(())] == [
        ("a",), ("a", "b"), ("a", "b", "y"), ("a", "x"), ("c",)]
    assert [entry.rel for entry in storage.walk(("a",))] == [
        ("a", "b"), ("a", "b", "y"), ("a", "x")]


def test_nothing_deeper_than_the_limit_is_made_and_extents_hold_a_files_data(storage, settings):
    settings.PADDLECLOUD_PFS_MAX_DEPTH = 3
    storage.mkdir(("a", "b", "c"), parents=True)  # the limit itself
    for rel, make in ((("a", "b", "c", "d"), storage.mkdir),
                      (("x", "y", "z", "w"), lambda rel: storage.mkdir(rel, parents=True)),
                      (("a", "b", "c", "f"), lambda rel: storage.write_bytes(rel, b"f", "u1"))):
        with fails("too_deep", 400, at(*rel)):
            make(rel)
    assert [entry.rel for entry in storage.walk(())] == [("a",), ("a", "b"), ("a", "b", "c")]
    storage.write_bytes(("a", "f"), b"data", "u2")
    extents = storage.extents(("a", "f"))  # where its data is: all of it, here
    assert b"".join(content(storage, ("a", "f"), start, end) for start, end in extents) == b"data"


# -- directories ---------------------------------------------------------------------------


def test_mkdir_makes_an_empty_directory(storage):
    entry = storage.mkdir(("d",))
    assert (entry.rel, entry.type) == (("d",), "dir")
    assert storage.stat(("d",)).type == "dir"
    assert storage.listdir(("d",)) == []
    assert names(storage) == ["d"]


def test_mkdir_of_an_existing_directory_conflicts_unless_parents(storage):
    storage.mkdir(("d",))
    with fails("exists", 409, at("d")):
        storage.mkdir(("d",))
    assert storage.mkdir(("d",), parents=True).type == "dir"


def test_mkdir_with_parents_makes_every_missing_directory(storage):
    storage.mkdir(("a",))
    storage.mkdir(("a", "b", "c"), parents=True)
    assert [(e.rel, e.type) for e in storage.walk(())] == [
        (("a",), "dir"), (("a", "b"), "dir"), (("a", "b", "c"), "dir")]


def test_mkdir_errors(storage):
    with fails("not_found", 404, at("missing")):
        storage.mkdir(("missing", "x"))
    storage.write_bytes(("f",), b"x", "u1")
    with fails("exists", 409, at("f")):
        storage.mkdir(("f",))
    with fails("exists", 409, at("f")):
        storage.mkdir(("f",), parents=True)
    with fails("not_a_directory", 400, at("f")):
        storage.mkdir(("f", "x"))
    with fails("area_root", 403, LABEL):
        storage.mkdir(())
    assert names(storage) == ["f"]


# -- removing ------------------------------------------------------------------------------


def test_remove_a_file_returns_its_size_and_leaves_its_directory(storage):
    storage.mkdir(("d",))
    storage.write_bytes(("d", "f"), b"12345", "u1")
    assert storage.remove(("d", "f")) == 5
    assert storage.listdir(("d",)) == []
    assert storage.stat(("d",)).type == "dir"


def test_remove_an_empty_directory(storage):
    storage.mkdir(("d",))
    assert storage.remove(("d",)) == 0
    assert names(storage) == []


def test_a_directory_with_contents_is_removed_only_recursively(storage):
    storage.mkdir(("top", "d", "sub"), parents=True)
    storage.write_bytes(("top", "d", "a"), b"aaa", "u1")
    storage.write_bytes(("top", "d", "sub", "b"), b"bbbb", "u2")
    with fails("not_empty", 400, at("top", "d")):
        storage.remove(("top", "d"))
    assert names(storage, ("top", "d")) == ["a", "sub"]
    assert storage.remove(("top", "d"), recursive=True) == 7
    assert storage.listdir(("top",)) == []
    with fails("not_found", 404, at("top", "d")):
        storage.stat(("top", "d"))


def test_remove_errors(storage):
    with fails("not_found", 404, at("nope")):
        storage.remove(("nope",))
    storage.write_bytes(("f",), b"x", "u1")
    with fails("area_root", 403, LABEL):
        storage.remove((), recursive=True)
    assert names(storage) == ["f"]


# -- read-only areas -----------------------------------------------------------------------


def test_a_read_only_area_refuses_every_write_and_still_reads(read_only_storage):
    storage = read_only_storage
    writes = {
        ("d", "new"): lambda: storage.mkdir(("d", "new")),
        ("d", "f"): lambda: storage.remove(("d", "f")),
        ("d",): lambda: storage.remove(("d",), recursive=True),
        ("d", "up"): lambda: storage.upload(("d", "up"), "u1"),
        ("d", "g"): lambda: storage.write_bytes(("d", "g"), b"x", "u2"),
        ("d", "moved"): lambda: storage.move(("d", "moved"), ("d", "f")),
        ("e",): lambda: storage.move(("e",), ("d",)),
    }
    for rel, write in writes.items():
        with fails("read_only", 403, at(*rel)):
            write()
    assert [(e.rel, e.type) for e in storage.walk(())] == [(("d",), "dir"), (("d", "f"), "file")]
    assert content(storage, ("d", "f")) == b"data"


# -- uploads -------------------------------------------------------------------------------


def test_an_upload_in_several_writes(storage):
    data = random_bytes(3 * MiB + 17)
    upload = storage.upload(("f",), "u1")
    assert upload.offset == 0
    for start in range(0, len(data), MiB):
        upload.write(data[start:start + MiB])
        assert upload.offset == min(start + MiB, len(data))
    assert upload.finish() == hashlib.sha256(data).hexdigest()
    assert upload.sha256 == hashlib.sha256(data).hexdigest()
    entry = upload.commit()
    assert (entry.rel, entry.type, entry.size) == (("f",), "file", len(data))
    assert content(storage, ("f",)) == data


def test_a_resumed_upload_continues_after_the_bytes_received(storage):
    data = random_bytes(9 * MiB + 123)  # more than a part (8 MiB) on S3
    first = storage.upload(("f",), "u1")
    for start in range(0, 9 * MiB, MiB):
        first.write(data[start:start + MiB])
    first.close()  # the connection broke
    resumed = storage.upload(("f",), "u1")
    assert resumed.offset == 9 * MiB
    resumed.write(data[resumed.offset:])
    assert resumed.offset == len(data)
    assert resumed.finish() == hashlib.sha256(data).hexdigest()
    resumed.commit()
    assert content(storage, ("f",)) == data
    assert names(storage) == ["f"]


def test_an_upload_resumed_after_finish_can_be_committed(storage):
    first = storage.upload(("f",), "u1")
    first.write(b"abc")
    first.finish()
    first.close()
    resumed = storage.upload(("f",), "u1")
    assert resumed.offset == 3
    assert resumed.finish() == hashlib.sha256(b"abc").hexdigest()
    resumed.commit()
    assert content(storage, ("f",)) == b"abc"


def test_commit_replaces_an_existing_file(storage):
    storage.write_bytes(("f",), b"old contents", "u1")
    entry = storage.write_bytes(("f",), b"new", "u2")
    assert entry.size == 3
    assert content(storage, ("f",)) == b"new"
    assert names(storage) == ["f"]


def test_commit_without_overwrite_conflicts_with_an_existing_file(storage):
    storage.write_bytes(("f",), b"old", "u1")
    upload = storage.upload(("f",), "u2")
    upload.write(b"new")
    upload.finish()
    with fails("exists", 409, at("f")):
        upload.commit(overwrite=False)
    upload.abort()
    assert content(storage, ("f",)) == b"old"
    assert names(storage) == ["f"]
    assert storage.write_bytes(("g",), b"g", "u3").size == 1  # a new name is fine


def test_upload_errors(storage):
    storage.mkdir(("d",))
    storage.write_bytes(("f",), b"x", "u1")
    with fails("is_a_directory", 400, at("d")):
        storage.upload(("d",), "u2")
    with fails("not_found", 404, at("missing")):
        storage.upload(("missing", "f"), "u3")
    with fails("not_a_directory", 400, at("f")):
        storage.upload(("f", "g"), "u4")
    with fails("area_root", 403, LABEL):
        storage.upload((), "u5")


# -- moving --------------------------------------------------------------------------------


def test_move_a_file(storage):
    storage.mkdir(("d",))
    storage.write_bytes(("a",), b"aaa", "u1")
    storage.move(("a",), ("b",))
    assert content(storage, ("b",)) == b"aaa"
    storage.move(("b",), ("d", "b"))
    assert names(storage) == ["d"]
    assert content(storage, ("d", "b")) == b"aaa"
    with fails("not_found", 404, at("a")):
        storage.move(("a",), ("c",))


def test_move_a_file_replaces_a_file_but_not_a_directory(storage):
    storage.write_bytes(("a",), b"new", "u1")
    storage.write_bytes(("b",), b"old contents", "u2")
    storage.mkdir(("d",))
    storage.move(("a",), ("b",))
    assert content(storage, ("b",)) == b"new"
    with fails("is_a_directory", 400, at("d")):
        storage.move(("b",), ("d",))
    assert names(storage) == ["b", "d"]


def test_move_a_directory_tree(storage):
    storage.mkdir(("src", "sub", "empty"), parents=True)
    storage.write_bytes(("src", "x"), b"x", "u1")
    storage.write_bytes(("src", "sub", "y"), b"yy", "u2")
    storage.mkdir(("to",))
    storage.move(("src",), ("to", "dst"))
    assert [(e.rel, e.type) for e in storage.walk(())] == [
        (("to",), "dir"), (("to", "dst"), "dir"), (("to", "dst", "sub"), "dir"),
        (("to", "dst", "sub", "empty"), "dir"), (("to", "dst", "sub", "y"), "file"),
        (("to", "dst", "x"), "file")]
    assert content(storage, ("to", "dst", "sub", "y")) == b"yy"


def test_move_a_directory_onto_a_directory_merges_them(storage):
    storage.mkdir(("s", "sub"), parents=True)
    storage.write_bytes(("s", "x"), b"new x", "u1")
    storage.write_bytes(("s", "sub", "y"), b"y", "u2")
    storage.mkdir(("t", "sub"), parents=True)
    storage.write_bytes(("t", "x"), b"old x", "u3")
    storage.write_bytes(("t", "z"), b"z", "u4")
    storage.write_bytes(("t", "sub", "w"), b"w", "u5")
    storage.move(("s",), ("t",))
    assert [e.rel for e in storage.walk(())] == [
        ("t",), ("t", "sub"), ("t", "sub", "w"), ("t", "sub", "y"), ("t", "x"), ("t", "z")]
    assert content(storage, ("t", "x")) == b"new x"


def test_move_a_directory_onto_a_file_or_the_area_is_refused(storage):
    storage.mkdir(("d",))
    storage.write_bytes(("d", "x"), b"x", "u1")
    storage.write_bytes(("f",), b"f", "u2")
    with fails("exists", 409, at("f")):
        storage.move(("d",), ("f",))
    with fails("area_root", 403, LABEL):
        storage.move(("d",), ())
    assert [e.rel for e in storage.walk(())] == [("d",), ("d", "x"), ("f",)]


def test_move_a_directory_into_itself_is_refused(storage):
    storage.mkdir(("d",))
    storage.write_bytes(("d", "x"), b"x", "u1")
    with pytest.raises(PaddleCloudError) as info:
        storage.move(("d",), ("d", "inner"))
    assert info.value.status == 400
    assert at("d") in info.value.message
    assert [e.rel for e in storage.walk(())] == [("d",), ("d", "x")]


# -- usage ---------------------------------------------------------------------------------


def test_usage_counts_the_bytes_of_every_file(storage):
    assert storage.usage() == 0
    storage.mkdir(("d", "e"), parents=True)
    storage.mkdir(("empty",))
    storage.write_bytes(("a",), b"aaa", "u1")
    storage.write_bytes(("d", "b"), b"bbbbb", "u2")
    storage.write_bytes(("d", "e", "c"), b"c" * 7, "u3")
    assert storage.usage() == 15
    storage.remove(("d", "b"))
    assert storage.usage() == 10


def test_usage_and_removal_leave_upload_temporaries_out(storage):
    """Uploads in progress are counted by the room they reserve, not by their bytes so far:
    neither a walk nor a removal counts them, so the two always agree."""
    storage.mkdir(("d",))
    storage.write_bytes(("d", "kept"), b"k" * 10, "u1")
    incoming = storage.upload(("d", "incoming"), "u2")
    incoming.write(b"i" * 100)
    incoming.close()
    storage.mkdir(("d", f"{TEMP_PREFIX}u3.d"))  # a tar being unpacked
    storage.write_bytes(("d", f"{TEMP_PREFIX}u3.d", "f"), b"t" * 1000, "u4")
    assert storage.usage() == 10
    assert storage.remove(("d",), recursive=True) == 10
    assert storage.usage() == 0


# -- S3 only -------------------------------------------------------------------------------


def test_s3_after_a_crash_an_upload_resumes_after_its_last_part(s3_storage):
    data = random_bytes(9 * MiB + 5)
    first = s3_storage.upload(("f",), "u1")
    first.write(data[:9 * MiB])  # a part of 8 MiB is sent, 1 MiB is buffered
    first.pause()  # a request ended: the part is in S3
    del first  # the process died: no close()
    resumed = s3_storage.upload(("f",), "u1")
    assert resumed.offset == 8 * MiB  # what the server reports; the client re-sends the rest
    resumed.write(data[resumed.offset:])
    with pytest.raises(RuntimeError, match="finish"):
        resumed.sha256  # noqa: B018  (not all bytes were seen here)
    assert resumed.finish() == hashlib.sha256(data).hexdigest()
    assert resumed.sha256 == hashlib.sha256(data).hexdigest()
    resumed.commit()
    assert content(s3_storage, ("f",)) == data


def test_s3_a_large_read_comes_in_order_across_its_ranged_gets(s3_storage):
    data = random_bytes(3 * READ_RANGE + 5)  # four ranged GETs, three ahead of the first
    s3_storage.write_bytes(("f",), data, "u1")
    chunks = list(s3_storage.read(("f",)))
    assert all(0 < len(chunk) <= CHUNK for chunk in chunks)
    assert b"".join(chunks) == data
    start, end = READ_RANGE - 7, 2 * READ_RANGE + 9
    assert b"".join(s3_storage.read(("f",), start, end)) == data[start:end]
    # A reader that stops early leaves nothing running.
    reading = s3_storage.read(("f",))
    assert next(reading) == data[:CHUNK]
    reading.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("pfs-s3-read")]


def test_s3_an_object_replaced_during_a_large_read_fails_it(s3_storage):
    """A download never mixes two versions of a file: each ranged GET asks for the version
    the read started with."""
    s3_storage.write_bytes(("f",), random_bytes(6 * READ_RANGE), "u1")
    reading = s3_storage.read(("f",))
    first = next(reading)
    s3_storage.write_bytes(("f",), random_bytes(6 * READ_RANGE), "u2")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        for _chunk in reading:
            pass
    assert len(first) == CHUNK


def test_s3_parts_sent_side_by_side_make_the_file_across_requests_and_a_resume(s3_storage):
    """Parts go up several at a time while bytes come; at the end of each request they are
    all in S3, and a resumed upload goes on after them and the saved tail."""
    data = random_bytes(4 * PART_SIZE + 3 * MiB + 7)
    upload = s3_storage.upload(("f",), "u1")
    for start in range(0, 3 * PART_SIZE, MiB):  # one request: 24 MiB in pieces of 1 MiB
        upload.write(data[start:start + MiB])
    upload.pause()
    assert not part_threads()
    assert len(s3_storage._parts(upload.temp_key, upload._mpu)) == 3
    for start in range(3 * PART_SIZE, 3 * PART_SIZE + 5 * MiB, MiB):  # the next, cut off
        upload.write(data[start:start + MiB])
    upload.close()  # the server let go of it: its buffered tail is kept in S3
    assert not part_threads()
    resumed = s3_storage.upload(("f",), "u1")
    assert resumed.offset == 3 * PART_SIZE + 5 * MiB
    for start in range(resumed.offset, len(data), MiB):
        resumed.write(data[start:start + MiB])
    assert resumed.finish() == hashlib.sha256(data).hexdigest()
    resumed.commit()
    assert content(s3_storage, ("f",)) == data
    assert not part_threads()


def part_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("pfs-s3-part")]


def test_s3_a_finished_upload_takes_no_more_bytes(s3_storage):
    upload = s3_storage.upload(("f",), "u1")
    upload.write(b"abc")
    upload.finish()
    with fails("upload_finished", 409, at("f")):
        upload.write(b"d")
    upload.commit()
    assert content(s3_storage, ("f",)) == b"abc"


def test_s3_aborting_drops_the_parts(s3_storage):
    upload = s3_storage.upload(("f",), "u1")
    upload.write(random_bytes(9 * MiB))
    upload.close()
    # A part and the saved tail; usage leaves them out (the upload's reservation counts them).
    assert s3_storage.usage() == 0
    upload = s3_storage.upload(("f",), "u1")
    upload.abort()
    assert s3_storage.client.list_objects_v2(Bucket=s3_storage.bucket).get("Contents") is None
    assert s3_storage.client.list_multipart_uploads(Bucket=s3_storage.bucket).get(
        "Uploads", []) == []
    assert s3_storage.upload(("f",), "u1").offset == 0


def test_s3_large_objects_are_copied_part_by_part(s3_storage):
    s3_storage.COPY_LIMIT = 5 * MiB  # as if the file were larger than 5 GiB
    data = random_bytes(11 * MiB)
    s3_storage.mkdir(("d",))
    s3_storage.write_bytes(("d", "f"), data, "u1")
    s3_storage.move(("d",), ("e",))
    s3_storage.move(("e", "f"), ("g",))
    assert content(s3_storage, ("g",)) == data
    assert [e.rel for e in s3_storage.walk(())] == [("e",), ("g",)]


def test_s3_keys_written_by_other_tools_are_files_in_directories(s3_storage):
    client, bucket = s3_storage.client, s3_storage.bucket
    client.put_object(Bucket=bucket, Key="dc1/home/alice/x/y/z", Body=b"zz")
    client.put_object(Bucket=bucket, Key="dc1/home/bob/secret", Body=b"s")
    assert [(e.rel, e.type, e.mtime) for e in s3_storage.listdir(())] == [(("x",), "dir", 0.0)]
    assert s3_storage.stat(("x", "y")).type == "dir"
    assert s3_storage.remove(("x", "y", "z")) == 2
    assert [e.rel for e in s3_storage.walk(())] == [("x",), ("x", "y")]
    assert s3_storage.usage() == 0


def test_s3_nothing_is_contacted_before_use():
    from pfs.storage.s3 import S3Storage

    storage = S3Storage(LABEL, bucket="b", prefix="p", endpoint_url="http://127.0.0.1:9",
                        region="us-east-1", access_key="k", secret_key="s")
    assert storage.display(("a",)) == at("a")
