"""The tar archives directories travel in: built from regular files and directories only,
extracted with nothing escaping the destination."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

import pytest

from paddlecloud_client.progress import Progress
from paddlecloud_client.transfer import BlockReader, Window, _safe_member, build_tar


def no_progress() -> Progress:
    return Progress(io.StringIO(), "x", None, enabled=False)


def test_a_tar_of_a_directory_names_members_relative_to_it(tmp_path):
    root = tmp_path / "package"
    (root / "data" / "empty").mkdir(parents=True)
    (root / "train.py").write_text("print(1)\n")
    (root / "data" / "part-0").write_bytes(b"x" * 5000)
    os.symlink("/etc/passwd", root / "passwd")
    os.mkfifo(root / "pipe")
    warnings: list[str] = []
    out = io.BytesIO()
    digest, size = build_tar(root, out, warnings.append)
    data = out.getvalue()
    assert (digest, size) == (hashlib.sha256(data).hexdigest(), len(data))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"data", "data/empty", "data/part-0", "train.py"}
        assert tar.extractfile("data/part-0").read() == b"x" * 5000
    assert sorted(warnings) == [
        f"skipping {root / 'passwd'}: a link, not a regular file or directory",
        f"skipping {root / 'pipe'}: a special file, not a regular file or directory",
    ]


def hostile(*members: tarfile.TarInfo) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"evil") if member.isfile() else None)
    out.seek(0)
    return out


def file_member(name: str) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.size = 4
    return member


def link_member(name: str, target: str, kind=tarfile.SYMTYPE) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, target
    return member


def test_small_files_cost_one_header_each(tmp_path):
    """A member's time goes in whole seconds (the server keeps none of it): a fractional one
    would give every member a PAX header of its own, twice the headers to build, send and
    parse for a tree of small files."""
    root = tmp_path / "tree"
    root.mkdir()
    for n in range(3):
        path = root / f"f{n}"
        path.write_bytes(b"y" * 100)
        os.utime(path, (1_700_000_000.25, 1_700_000_000.75))
    out = io.BytesIO()
    build_tar(root, out, print)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        members = tar.getmembers()
        assert [tar.extractfile(m).read() for m in members] == [b"y" * 100] * 3
    assert [(m.name, m.mtime, m.pax_headers) for m in members] == [
        (f"f{n}", 1_700_000_000, {}) for n in range(3)]
    assert [m.offset for m in members] == [0, 1024, 2048]  # a header and a block each


@pytest.mark.parametrize("member", [file_member("../evil"), file_member("/tmp/evil"),
                                    file_member("a/../../evil")])
def test_names_outside_the_destination_are_refused(tmp_path, member):
    dest = tmp_path / "dest"
    dest.mkdir()
    with tarfile.open(fileobj=hostile(member), mode="r|") as tar, \
            pytest.raises(tarfile.FilterError):
        tar.extractall(dest, filter=_safe_member(print))  # noqa: S202
    assert not (tmp_path / "evil").exists()


def test_links_and_devices_are_not_extracted(tmp_path):
    device = tarfile.TarInfo("dev")
    device.type = tarfile.CHRTYPE
    warnings: list[str] = []
    archive = hostile(file_member("ok.txt"), link_member("passwd", "/etc/passwd"),
                      link_member("inside", "ok.txt"), link_member("hard", "ok.txt",
                                                                   tarfile.LNKTYPE))
    with tarfile.open(fileobj=archive, mode="r|") as tar:
        tar.extractall(tmp_path, filter=_safe_member(warnings.append))  # noqa: S202
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.txt"]
    assert warnings == ["skipping passwd: a link", "skipping inside: a link",
                        "skipping hard: a link"]
    with tarfile.open(fileobj=hostile(device), mode="r|") as tar, \
            pytest.raises(tarfile.FilterError):
        tar.extractall(tmp_path, filter=_safe_member(print))  # noqa: S202


def test_a_window_is_one_chunk_of_a_file():
    data = bytes(range(256)) * 100
    window = Window(io.BytesIO(data), 1000, 3000, no_progress())
    assert len(window) == 3000
    assert b"".join(window) == data[1000:4000]
    assert window.read() == b""


def test_a_block_reader_reads_across_blocks():
    reader = io.BufferedReader(BlockReader(iter([b"abc", b"", b"defgh", b"i"]), no_progress()))
    assert reader.read(2) == b"ab"
    assert reader.read() == b"cdefghi"
