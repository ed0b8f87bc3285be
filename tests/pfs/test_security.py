"""Nothing outside a user's area is ever read, written or deleted through the POSIX storage:
not through links a job plants, not while it swaps them in and out, not through a tar."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time

import pytest

from kernel.errors import PaddleCloudError
from pfs.paths import pfs_path_parse
from pfs.storage.posix import PosixStorage
from pfs.tar import member_parts, tar_extract

LABEL = "/pfs/dc1/home/alice"

RACER = """
import os, select, sys, time
alice, bob = sys.argv[1], sys.argv[2]
d, real = os.path.join(alice, "d"), os.path.join(alice, "d.real")
swaps = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    try:
        os.rename(d, real)
        os.symlink(bob, d)
        os.unlink(d)
        os.rename(real, d)
        swaps += 1
    except OSError:  # the file service made a new d in the gap: set it aside, start over
        while os.path.lexists(real):
            try:
                if os.path.lexists(d):
                    os.rename(d, os.path.join(alice, "aside.%d" % time.monotonic_ns()))
                os.rename(real, d)
            except OSError:
                pass
print(swaps)
"""


@pytest.fixture
def homes(tmp_path):
    """alice's home (the area under test) and bob's beside it, holding a secret."""
    alice, bob = tmp_path / "home" / "alice", tmp_path / "home" / "bob"
    (alice / "d").mkdir(parents=True)
    (alice / "d" / "f").write_bytes(b"mine")
    (bob / "keep").mkdir(parents=True)
    (bob / "f").write_bytes(b"secret")
    (bob / "keep" / "g").write_bytes(b"also secret")
    return alice, bob


def _tree(root) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


def test_links_out_of_the_home_are_never_followed(homes):
    alice, bob = homes
    storage = PosixStorage(LABEL, alice)
    os.symlink(bob, alice / "abs")
    os.symlink("../bob", alice / "rel")
    os.symlink("d/../../bob/f", alice / "sneaky")
    os.symlink("loop", alice / "loop")
    before = _tree(bob)
    for rel in [("abs", "f"), ("rel", "f"), ("sneaky",), ("abs", "keep", "g")]:
        with pytest.raises(PaddleCloudError) as info:
            b"".join(storage.read(rel))
        assert info.value.code == "outside_area", rel
        assert LABEL in info.value.message
        if len(rel) == 1:
            continue  # a link as the last component is written over, below
        for write in (lambda r: storage.write_bytes(r, b"x", "u1"),
                      lambda r: storage.mkdir(r, parents=True),
                      lambda r: storage.remove(r, recursive=True),
                      lambda r: storage.listdir(r)):
            with pytest.raises(PaddleCloudError) as info:
                write(rel)
            assert info.value.code == "outside_area", rel
    with pytest.raises(PaddleCloudError) as info:
        storage.listdir(("loop",))
    assert info.value.code == "link_loop"
    # Writing onto a link's name replaces the link; removing it removes the link, never what
    # it points at.
    storage.write_bytes(("sneaky",), b"replaced", "u2")
    assert not os.path.islink(alice / "sneaky")
    assert (alice / "sneaky").read_bytes() == b"replaced"
    storage.remove(("abs",), recursive=True)
    storage.remove(("rel",))
    assert not (alice / "abs").exists() and not os.path.lexists(alice / "rel")
    assert _tree(bob) == before


def test_links_that_stay_inside_are_followed(homes):
    alice, _ = homes
    storage = PosixStorage(LABEL, alice)
    os.symlink("d", alice / "latest")
    os.symlink(f"{LABEL}/d/f", alice / "as-a-job-sees-it")
    os.symlink("../d/f", alice / "d" / "self")
    assert b"".join(storage.read(("latest", "f"))) == b"mine"
    assert b"".join(storage.read(("as-a-job-sees-it",))) == b"mine"
    assert b"".join(storage.read(("d", "self"))) == b"mine"
    assert storage.stat(("latest",)).type == "link"
    assert storage.stat(("latest",), follow=True).type == "dir"
    assert [e.name for e in storage.listdir(("latest",))] == ["f", "self"]


def test_a_link_swapped_in_while_working_never_leads_out(homes):
    """A job swaps alice/d for a link to bob's home as fast as it can, while the file service
    reads, writes, lists and removes under alice/d: bob's files are never touched or read."""
    alice, bob = homes
    storage = PosixStorage(LABEL, alice)
    before = _tree(bob)
    # The job: another process, swapping as fast as it can until told to stop.
    racer = subprocess.Popen([sys.executable, "-c", RACER, str(alice), str(bob)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    seen = set()
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            for operation in (
                lambda: b"".join(storage.read(("d", "f"))),
                lambda: storage.write_bytes(("d", "new"), b"written", "race"),
                lambda: storage.listdir(("d",)),
                lambda: storage.mkdir(("d", "keep"), parents=True),
                lambda: storage.remove(("d", "keep"), recursive=True),
                lambda: storage.remove(("d", "f")) and storage.write_bytes(
                    ("d", "f"), b"mine", "race2"),
            ):
                try:
                    result = operation()
                except PaddleCloudError as exc:
                    seen.add(exc.code)
                    continue
                if isinstance(result, bytes):
                    assert result != b"secret"
                if isinstance(result, list):  # bob's listing would hold 'f' and 'keep/g'
                    assert all(e.name != "g" for e in result)
    finally:
        swaps, _ = racer.communicate("stop\n", timeout=10)
    assert int(swaps) > 100  # the race really ran
    assert "outside_area" in seen  # the link was met, and refused
    assert _tree(bob) == before  # nothing outside was created, changed or deleted
    assert not list(bob.glob(".pfs-upload-*"))


def test_paths_are_checked_before_any_io():
    for text, rule in [("/pfs/dc1/home/alice/../bob", "'..'"),
                       ("/pfs/dc1/home/alice/a\0b", "NUL"),
                       ("/pfs/dc1/home/alice/" + "é" * 128, "255 bytes"),
                       ("/etc/passwd", "not a PFS path"),
                       ("/pfs/dc1/home/alice//x", "empty")]:
        with pytest.raises(PaddleCloudError) as info:
            pfs_path_parse(text)
        assert rule in info.value.message, (text, info.value.message)


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _member(name: str, kind=tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def _pax(name: str, value: str, *, key: str = "comment") -> tarfile.TarInfo:
    info = _member(name)
    info.pax_headers = {key: value}
    return info


def _unlimited(total: int) -> None:
    """Accounts for nothing: these tests are about what a tar may hold, not its size."""


@pytest.mark.parametrize("members, rule", [
    ([(_member("../escape"), b"x")], "'..'"),
    ([(_member("/etc/passwd"), b"x")], "absolute"),
    ([(_member("ok/../../x"), b"x")], "'..'"),
    ([(_member("evil", tarfile.SYMTYPE, "/etc"), None)], "outside"),
    ([(_member("evil", tarfile.SYMTYPE, "../../bob"), None)], "outside"),
    ([(_member("sub/evil", tarfile.SYMTYPE, "../.."), None)], "outside"),
    # A link that only leads out through a link unpacked after it.
    ([(_member("b", tarfile.SYMTYPE, "x/.."), None),
      (_member("x", tarfile.SYMTYPE, ".."), None)], "outside"),
    ([(_member("a", tarfile.SYMTYPE, "sub"), None), (_member("a/f"), b"x")],
     "inside a link"),
    ([(_member("a"), b"x"), (_member("hard", tarfile.LNKTYPE, "a"), None)], "hard links"),
    ([(_member("fifo", tarfile.FIFOTYPE), None)], "special files"),
    ([(_member("dev", tarfile.CHRTYPE), None)], "special files"),
    ([(_member(".pfs-upload-x"), b"x")], "reserved"),
    # What tarfile would read into memory before the member is seen: a header of any length.
    ([(_pax("big-header", "x" * (2 << 20)), b"x")], "a header of 2097169 bytes"),
    ([(_member("sparse", tarfile.GNUTYPE_SPARSE), b"x")], "sparse"),
    ([(_pax("pax-sparse", "1", key="GNU.sparse.size"), b"x")], "sparse"),
])
def test_a_hostile_tar_is_refused_and_leaves_nothing(homes, members, rule):
    alice, bob = homes
    storage = PosixStorage(LABEL, alice)
    before_alice, before_bob = _tree(alice), _tree(bob)
    # A good member first: it must not survive the refusal either.
    storage.write_bytes(("up.tar",), _tar((_member("good.txt"), b"fine"), *members), "t1")
    before_alice = _tree(alice)
    with pytest.raises(PaddleCloudError) as info:
        tar_extract(storage, ("up.tar",), ("dest",), "t1", account=_unlimited)
    assert info.value.code == "unsafe_tar"
    assert rule in info.value.message
    del before_alice["up.tar"]  # the uploaded tar is consumed either way
    assert _tree(alice) == before_alice
    assert _tree(bob) == before_bob


def test_a_tar_unpacks_into_place_with_inside_links(homes):
    alice, _ = homes
    storage = PosixStorage(LABEL, alice)
    data = _tar((_member("pkg", tarfile.DIRTYPE), None), (_member("pkg/train.py"), b"print(1)"),
                (_member("pkg/data/part-0"), b"0" * 10),
                (_member("pkg/latest", tarfile.SYMTYPE, "data/part-0"), None))
    storage.write_bytes(("up.tar",), data, "t2")
    assert tar_extract(storage, ("up.tar",), ("d", "unpacked"), "t2",
                       account=_unlimited) == (2, 18, 0)
    root = alice / "d" / "unpacked" / "pkg"
    assert (root / "train.py").read_bytes() == b"print(1)"
    assert os.readlink(root / "latest") == "data/part-0"
    assert not (alice / "up.tar").exists()
    assert sorted(p.name for p in (alice / "d").iterdir()) == ["f", "unpacked"]


def test_member_names_are_parsed_like_pfs_paths():
    assert member_parts("./a/./b/") == ("a", "b")
    for bad in ["/x", "a/../b", "a\0b", "x" * 256]:
        with pytest.raises(PaddleCloudError):
            member_parts(bad)
