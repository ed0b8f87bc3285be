"""Deep trees do not break PFS or its quota (issue 33, item 6).

A job can make a directory thousands of levels deep in its owner's home. Every walk PFS does
(a recursive listing, a directory's download, a recursive remove, the usage measure) is
iterative; those that list stop at PADDLECLOUD_PFS_MAX_DEPTH levels with an error naming
the tree, a recursive remove goes to any depth, nothing deeper can be made through PFS, and
a home whose measure fails takes no uploads and no submissions, with the reason, until a
measure succeeds (fail closed: its usage is not known, not the last figure).
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from pfs.tasks import usage_measure_all

from .test_api import Pfs, check_error

DEEP = 2000  # levels: past Python's recursion limit, as in the issue


@pytest.fixture
def pfs(live_portal) -> Pfs:
    pfs = Pfs(live_portal)
    yield pfs
    pfs.http.close()


def plant_deep(root: Path, levels: int, name: str = "d") -> None:
    """``root/deep/d/d/…`` ``levels`` directories deep, a file at the bottom, made as a job
    would (one directory at a time: the whole path is longer than the kernel takes)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for index in range(levels):
            part = "deep" if index == 0 else name
            os.mkdir(part, dir_fd=fd)
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        bottom = os.open("bottom.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(bottom, b"x" * 1000)
        os.close(bottom)
    finally:
        os.close(fd)


def test_a_tree_deeper_than_pfs_goes_is_refused_by_name_and_removable(pfs, live_portal,
                                                                       settings):
    home = live_portal.home
    (home / "small.txt").write_bytes(b"y" * 10)
    assert pfs.usage()["used"] == 10  # measured once, before the job's tree
    plant_deep(home, DEEP)

    # Listing, downloading: a clear 400 naming the tree and the limit (was a 500).
    for response in (pfs.ls("", recursive=True), pfs.ls("deep", recursive=True),
                     pfs.get("deep")):
        body = check_error(response, 400, "too_deep", "path")
        assert "/pfs/datacenter1/home/alice/deep/d/d/d/…" in body["message"], body
        assert "deeper than the 256 levels PFS allows" in body["message"], body
    assert pfs.names() == ["deep", "small.txt"]  # one level is fine

    # The periodic measure cannot count the home: its usage is not known, and new work is
    # refused with the reason until it is (not accepted against the figure from before).
    usage_measure_all()
    usage = pfs.usage()
    assert "levels below /pfs/datacenter1/home/alice" in usage["unknown"], usage
    for response in (pfs.put("more.txt", b"z"), pfs.start("more.txt", b"z")):
        body = check_error(response, 403, "usage_unknown", "size")
        assert "the usage of your home is not known" in body["message"], body
        assert "deeper than the 256 levels" in body["message"], body
    response = live_portal.session().post(f"{live_portal.url}/api/v1/jobs/", json={
        "name": "fit", "package": "/pfs/datacenter1/home/alice", "entry": "python t.py"})
    check_error(response, 403, "usage_unknown", "storage")

    # rm -r goes to any depth, frees what the tree held, and its owner may work again.
    response = pfs.rm("deep", recursive=True)
    assert response.status_code == 200, response.text
    assert response.json()["freed"] == 1000
    assert not (home / "deep").exists()
    assert os.listdir(home) == ["small.txt"]  # nothing left behind, hidden or not
    assert pfs.usage()["unknown"] == "" and pfs.usage()["used"] == 10
    assert pfs.put("more.txt", b"z").status_code == 201


def test_nothing_deeper_than_pfs_goes_can_be_made(pfs, live_portal, settings):
    settings.PADDLECLOUD_PFS_MAX_DEPTH = 8
    home = live_portal.home
    deep = "/".join(["d"] * 9)

    body = check_error(pfs.mkdir(deep, parents=True), 400, "too_deep", "path")
    assert "is 9 levels below /pfs/datacenter1/home/alice, deeper than the 8" in body["message"]
    check_error(pfs.put(deep, b"x", parents=True), 400, "too_deep", "path")
    member = tarfile.TarInfo("/".join(["t"] * 8) + "/f")
    member.size = 1
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.addfile(member, io.BytesIO(b"x"))
    body = check_error(pfs.put("up", buffer.getvalue(), tar=True), 400, "unsafe_tar", "tar")
    assert "would be 10 levels below /pfs/datacenter1/home/alice" in body["message"], body
    assert os.listdir(home) == []  # nothing half made

    assert pfs.mkdir("/".join(["d"] * 8), parents=True).status_code == 201  # the limit itself
    assert pfs.put("/".join(["d"] * 7) + "/f", b"x").status_code == 201

