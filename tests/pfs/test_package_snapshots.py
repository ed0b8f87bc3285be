"""A trainer package's snapshot and digest (issue 39), on a real POSIX home: the digest says
whether two trees hold the same paths, modes and bytes wherever they are, the snapshot is a
copy that no later change to the package reaches, its digest that of the bytes it holds, and
a local job's replicas get it only while it still has the digest recorded."""

from __future__ import annotations

import os

import pytest

from jobs.backends.base import BackendError
from jobs.files import package_copy, package_digest, package_snapshot
from kernel.errors import ForbiddenError
from paddlecloud_core.snapshots import DIGEST_RE
from pfs.storage.posix import PosixStorage
from tests.factories import HOME, job_row

ROOM = lambda size: None  # noqa: E731 - no quota in the way


@pytest.fixture
def home(tmp_path):
    root = tmp_path / "home"
    (root / "pkg" / "data").mkdir(parents=True)
    (root / "pkg" / "train.py").write_text("print('one')\n")
    (root / "pkg" / "run.sh").write_text("#!/bin/sh\n")
    (root / "pkg" / "run.sh").chmod(0o755)
    (root / "pkg" / "data" / "v").write_bytes(b"\0" * 10)
    (root / "pkg" / "latest").symlink_to("data/v")
    return PosixStorage("/pfs/dc/home/alice", root)


def digest(home, *rel):
    return package_digest(home, rel)[0]


def test_a_digest_is_of_paths_modes_and_bytes_not_of_where_or_when(home):
    first = digest(home, "pkg")
    assert DIGEST_RE.match(first)
    os.utime(home.root / "pkg" / "train.py", (1, 1))
    (home.root / "elsewhere").mkdir()
    os.rename(home.root / "pkg", home.root / "elsewhere" / "pkg")
    assert digest(home, "elsewhere", "pkg") == first  # moved, touched: the same tree
    pkg = home.root / "elsewhere" / "pkg"
    for change, undo in (
            (lambda: (pkg / "train.py").write_text("print('two')\n"),
             lambda: (pkg / "train.py").write_text("print('one')\n")),
            (lambda: (pkg / "run.sh").chmod(0o644), lambda: (pkg / "run.sh").chmod(0o755)),
            (lambda: os.rename(pkg / "train.py", pkg / "main.py"),
             lambda: os.rename(pkg / "main.py", pkg / "train.py")),
            (lambda: (pkg / "latest").unlink() or (pkg / "latest").symlink_to("train.py"),
             lambda: (pkg / "latest").unlink() or (pkg / "latest").symlink_to("data/v"))):
        change()
        assert digest(home, "elsewhere", "pkg") != first
        undo()
        assert digest(home, "elsewhere", "pkg") == first


def test_a_snapshot_is_a_copy_with_the_digest_of_its_bytes(home):
    before = digest(home, "pkg")
    taken = package_snapshot(home, "fit", home, ("pkg",), ROOM)
    assert taken.digest == before and taken.size == 10 + len("print('one')\n#!/bin/sh\n")
    assert not (home.root / "jobs" / "fit" / "package").exists()  # placed with the job only
    taken.place()
    snapshot = home.root / "jobs" / "fit" / "package"
    assert digest(home, "jobs", "fit", "package") == before
    assert os.stat(snapshot / "run.sh").st_mode & 0o777 == 0o755
    assert os.readlink(snapshot / "latest") == "data/v"
    assert sorted(os.listdir(home.root / "jobs" / "fit")) == ["package"]  # no temporaries

    (home.root / "pkg" / "train.py").write_text("print('two')\n")  # in place, same inode
    assert (snapshot / "train.py").read_text() == "print('one')\n"
    assert digest(home, "jobs", "fit", "package") == before != digest(home, "pkg")


def test_no_room_copies_nothing_and_a_discarded_snapshot_leaves_nothing(home):
    def full(size):
        raise ForbiddenError.for_field("package", f"{size} bytes: over your quota")

    with pytest.raises(ForbiddenError):
        package_snapshot(home, "fit", home, ("pkg",), full)
    assert not (home.root / "jobs").exists()  # asked before anything is made
    taken = package_snapshot(home, "fit", home, ("pkg",), ROOM)
    taken.place()
    taken.discard()
    assert os.listdir(home.root / "jobs" / "fit") == []


@pytest.mark.django_db
def test_a_local_job_whose_snapshot_changed_since_submission_is_not_run(alice, datacenter,
                                                                       pfs_home, tmp_path):
    (pfs_home / "jobs" / "fit" / "package").mkdir(parents=True)
    (pfs_home / "jobs" / "fit" / "package" / "train.py").write_text("print('one')\n")
    home = PosixStorage(HOME, pfs_home)
    recorded = digest(home, "jobs", "fit", "package")
    job = job_row(alice, datacenter, "fit", package=f"{HOME}/pkg",
                  package_snapshot=f"{HOME}/jobs/fit/package", package_digest=recorded)
    package_copy(job, tmp_path / "run-1")  # as recorded: copied for its replicas
    assert (tmp_path / "run-1" / "train.py").read_text() == "print('one')\n"

    (pfs_home / "jobs" / "fit" / "package" / "train.py").write_text("print('two')\n")
    with pytest.raises(BackendError) as refused:
        package_copy(job, tmp_path / "run-2")
    assert str(refused.value) == (
        f"its package snapshot {HOME}/jobs/fit/package has changed since the job was "
        f"submitted ({recorded} recorded, {digest(home, 'jobs', 'fit', 'package')} found): "
        "it is not run")
