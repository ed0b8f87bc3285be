"""The PFS commands end to end against the live portal: what lands on disk in the user's
home, what comes back, and what each mistake says."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.factories import HOME

pytestmark = pytest.mark.django_db(transaction=True)

MiB = 1 << 20


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and directory (None) below root, by relative path."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def make_tree(root: Path) -> Path:
    (root / "data" / "empty").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "data" / "part-0").write_bytes(os.urandom(3000))
    return root


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def fails(result, code: int, message: str):
    assert (result.returncode, result.stdout) == (code, ""), result.stderr
    assert message in result.stderr
    assert result.stderr.startswith("paddlectl: ") and result.stderr.count("\n") == 1
    return result


@pytest.fixture
def here(live_cli) -> Path:
    """The directory commands run in, with a.txt and package/ in it."""
    (live_cli.cwd / "a.txt").write_text("alpha\n")
    make_tree(live_cli.cwd / "package")
    return live_cli.cwd


# -- cp up ------------------------------------------------------------------------------------

def test_cp_uploads_like_cp(live_cli, here):
    home = live_cli.portal.home
    (home / "data").mkdir()
    result = ok(live_cli("cp", "a.txt", f"{HOME}/data"))
    assert (result.stdout, result.stderr) == ("", "")  # no progress bar when not a terminal
    assert (home / "data" / "a.txt").read_text() == "alpha\n"
    ok(live_cli("cp", "a.txt", f"{HOME}/b.txt"))
    assert (home / "b.txt").read_text() == "alpha\n"
    ok(live_cli("cp", "a.txt", f"{HOME}/new/deeper/"))
    assert (home / "new" / "deeper" / "a.txt").read_text() == "alpha\n"
    (here / "c.txt").write_text("gamma\n")
    ok(live_cli("cp", "a.txt", "c.txt", f"{HOME}/data/"))
    assert sorted(p.name for p in (home / "data").iterdir()) == ["a.txt", "c.txt"]
    (here / "a.txt").write_text("changed\n")
    ok(live_cli("cp", "a.txt", f"{HOME}/b.txt"))
    assert (home / "b.txt").read_text() == "changed\n"


def test_cp_uploads_directories_with_r(live_cli, here):
    home = live_cli.portal.home
    fails(live_cli("cp", "package", f"{HOME}/"), 1, "cp: package is a directory (use -r")
    ok(live_cli("cp", "-r", "package", f"{HOME}/jobs/"))
    assert tree(home / "jobs" / "package") == tree(here / "package")
    ok(live_cli("cp", "--recursive", "package", f"{HOME}/copy"))  # a new name: a copy of it
    ok(live_cli("cp", "-recursive", "package", f"{HOME}/seeds"))
    assert tree(home / "copy") == tree(here / "package") == tree(home / "seeds")
    (here / "package" / "more.txt").write_text("more")
    ok(live_cli("cp", "-R", "package", f"{HOME}/jobs"))  # into the existing directory: merged
    assert tree(home / "jobs" / "package") == tree(here / "package")


def test_cp_refuses_several_sources_into_a_missing_directory(live_cli, here):
    fails(live_cli("cp", "a.txt", "package", "-r", f"{HOME}/missing"), 1,
          f"cp: {HOME}/missing does not exist (end it with / to create a directory)")
    (live_cli.portal.home / "file").write_text("x")
    fails(live_cli("cp", "a.txt", f"{HOME}/file/"), 1, f"cp: {HOME}/file/ is not a directory")


def test_links_and_special_files_are_skipped_with_a_warning(live_cli, here):
    os.symlink("/etc/passwd", here / "package" / "passwd")
    result = ok(live_cli("cp", "-r", "package", f"{HOME}/"))
    assert result.stderr == ("paddlectl: warning: skipping package/passwd: a link, not a regular "
                             "file or directory\n")
    assert not (live_cli.portal.home / "package" / "passwd").exists()


def test_uploads_to_public_are_refused_by_the_server(live_cli, here):
    result = live_cli("cp", "a.txt", "/pfs/datacenter1/public/a.txt")
    assert result.returncode == 1
    assert "public" in result.stderr


# -- cp down ----------------------------------------------------------------------------------

def test_cp_downloads_like_cp(live_cli, here):
    home = live_cli.portal.home
    (home / "out.txt").write_text("result\n")
    ok(live_cli("cp", f"{HOME}/out.txt", "."))
    assert (here / "out.txt").read_text() == "result\n"
    ok(live_cli("cp", f"{HOME}/out.txt", "renamed.txt"))
    assert (here / "renamed.txt").read_text() == "result\n"
    ok(live_cli("cp", f"{HOME}/out.txt", "fresh/"))
    assert (here / "fresh" / "out.txt").read_text() == "result\n"
    (here / "renamed.txt").write_text("old")
    ok(live_cli("cp", f"{HOME}/out.txt", "renamed.txt"))
    assert (here / "renamed.txt").read_text() == "result\n"
    assert not [p for p in here.rglob(".*") if p.name.endswith(".part")]
    fails(live_cli("cp", f"{HOME}/nope.txt", "."), 3, "does not exist")


def test_cp_downloads_directories_with_r(live_cli, here):
    home = live_cli.portal.home
    make_tree(home / "results")
    fails(live_cli("cp", f"{HOME}/results", "."), 1, f"cp: {HOME}/results is a directory (use -r")
    ok(live_cli("cp", "-r", f"{HOME}/results", "."))
    assert tree(here / "results") == tree(home / "results")
    ok(live_cli("cp", "-r", f"{HOME}/results/", "again"))
    assert tree(here / "again") == tree(home / "results")
    (home / "results" / "new.txt").write_text("new")
    ok(live_cli("cp", "-r", f"{HOME}/results", "."))  # merged into the existing directory
    assert tree(here / "results") == tree(home / "results")
    assert sorted(p.name for p in here.iterdir()) == ["a.txt", "again", "package", "results"]


def test_cp_needs_one_pfs_side(live_cli, here):
    fails(live_cli("cp", "a.txt", "b.txt"), 1, "either DEST or every SRC must be a PFS path")
    fails(live_cli("cp", f"{HOME}/x", f"{HOME}/y"), 1, "copying from PFS to PFS is not supported")


# -- big transfers ----------------------------------------------------------------------------

def test_a_large_file_goes_up_in_chunks_and_comes_back(live_cli, here, settings):
    settings.PADDLECLOUD_PFS_CHUNK_SIZE = 3 * MiB
    data = os.urandom(9 * MiB + 123)
    (here / "big.bin").write_bytes(data)
    ok(live_cli("cp", "big.bin", f"{HOME}/"))
    stored = live_cli.portal.home / "big.bin"
    assert hashlib.sha256(stored.read_bytes()).digest() == hashlib.sha256(data).digest()
    from pfs.models import UploadSession

    # Completed: only the record of it is kept (for a client that missed the last answer).
    assert [u.completed_at is not None for u in UploadSession.objects.all()] == [True]
    assert not list(live_cli.portal.home.glob(".pfs-upload-*"))
    ok(live_cli("cp", f"{HOME}/big.bin", "back.bin"))
    assert (here / "back.bin").read_bytes() == data


def test_a_large_directory_goes_up_as_a_chunked_tar(live_cli, here, settings):
    settings.PADDLECLOUD_PFS_CHUNK_SIZE = 4 * MiB
    (here / "package" / "weights.bin").write_bytes(os.urandom(10 * MiB))
    ok(live_cli("cp", "-r", "package", f"{HOME}/"))
    assert tree(live_cli.portal.home / "package") == tree(here / "package")


# -- ls, mkdir, rm ----------------------------------------------------------------------------

def test_ls(live_cli, here):
    home = live_cli.portal.home
    make_tree(home / "pkg")
    (home / "top.txt").write_bytes(b"x" * 5000)
    assert ok(live_cli("ls")).stdout == "pkg/\ntop.txt\n"
    assert ok(live_cli("ls", HOME)).stdout == "pkg/\ntop.txt\n"
    assert ok(live_cli("ls", f"{HOME}/top.txt")).stdout == "top.txt\n"
    assert ok(live_cli("ls", "-R", f"{HOME}/pkg")).stdout == (
        "data/\ndata/empty/\ndata/part-0\ntrain.py\n")
    assert ok(live_cli("ls", "--recursive", f"{HOME}/pkg")).stdout == ok(
        live_cli("ls", "-R", f"{HOME}/pkg")).stdout
    table = ok(live_cli("ls", "-l", HOME)).stdout.splitlines()
    assert table[0].split() == ["TYPE", "SIZE", "MODIFIED", "NAME"]
    cells = re.split(r" {2,}", table[2])
    assert (cells[0], cells[1], cells[3]) == ("file", "4.9K", "top.txt")
    assert cells[2].endswith("ago)")
    wide = ok(live_cli("ls", "-o", "wide", HOME)).stdout
    assert re.search(r" {3}5000 {3}", wide)
    listing = json.loads(ok(live_cli("ls", "-o", "json", HOME)).stdout)
    assert listing["path"] == HOME and listing["type"] == "dir"
    assert {e["name"]: e["size"] for e in listing["entries"]}["top.txt"] == 5000
    assert yaml.safe_load(ok(live_cli("ls", HOME, "-o", "yaml")).stdout) == listing
    two = ok(live_cli("ls", f"{HOME}/pkg", f"{HOME}/pkg/data")).stdout
    assert two == f"{HOME}/pkg:\ndata/\ntrain.py\n\n{HOME}/pkg/data:\nempty/\npart-0\n"
    fails(live_cli("ls", f"{HOME}/missing"), 3, "does not exist")


def test_mkdir(live_cli):
    home = live_cli.portal.home
    assert ok(live_cli("mkdir", f"{HOME}/one")).stdout == ""
    assert (home / "one").is_dir()
    fails(live_cli("mkdir", f"{HOME}/one"), 1, "already exists")
    fails(live_cli("mkdir", f"{HOME}/a/b/c"), 3, "")
    assert ok(live_cli("mkdir", "-p", "-v", f"{HOME}/a/b/c", f"{HOME}/one")).stdout == (
        f"created {HOME}/a/b/c\ncreated {HOME}/one\n")
    ok(live_cli("mkdir", "--parents", f"{HOME}/x/y"))
    ok(live_cli("mkdir", "-parents", f"{HOME}/z/y"))  # the seeds' single dash
    assert all((home / d).is_dir() for d in ("a/b/c", "x/y", "z/y"))
    assert live_cli("mkdir", "/pfs/datacenter1/public/x").returncode == 1


def test_rm(live_cli):
    home = live_cli.portal.home
    make_tree(home / "pkg")
    (home / "f.txt").write_bytes(b"x" * 2048)
    assert ok(live_cli("rm", f"{HOME}/f.txt")).stdout == ""
    assert not (home / "f.txt").exists()
    fails(live_cli("rm", f"{HOME}/pkg"), 1, "")
    assert (home / "pkg").exists()
    result = ok(live_cli("rm", "-r", "-v", f"{HOME}/pkg"))
    assert result.stdout == f"removed {HOME}/pkg (2.9K freed)\n"  # part-0 and train.py: 3015
    assert not (home / "pkg").exists()
    fails(live_cli("rm", f"{HOME}/pkg"), 3, "does not exist")
    fails(live_cli("rm", "-r", HOME), 1, "cannot be replaced or removed")
    assert home.is_dir()


# -- file: the seeds' rules -------------------------------------------------------------------

def test_file_uploads_a_directory_as_a_sub_directory_or_its_contents(live_cli, here):
    home = live_cli.portal.home
    ok(live_cli("file", "package", f"{HOME}/jobs"))
    assert tree(home / "jobs" / "package") == tree(here / "package")
    ok(live_cli("file", "package/", f"{HOME}/flat"))
    assert tree(home / "flat") == tree(here / "package")
    ok(live_cli("file", "a.txt", f"{HOME}/flat"))
    assert (home / "flat" / "a.txt").read_text() == "alpha\n"
    ok(live_cli("file", "./package/data", HOME))
    assert tree(home / "data") == tree(here / "package" / "data")


def test_file_rules_are_checked_before_anything_is_sent(live_cli, here):
    fails(live_cli("file", "../a.txt", HOME), 1, "src must be a child of the current directory")
    fails(live_cli("file", "/etc/hosts", HOME), 1, "src must be a child of the current directory")
    fails(live_cli("file", "package", "/pfs/datacenter1/public/x"), 1,
          f"dest must be inside your home {HOME}")
    fails(live_cli("file", "package", "/pfs/datacenter2/home/alice"), 1,
          f"dest must be inside your home {HOME}")
    assert not any(live_cli.portal.home.iterdir())


# -- progress ---------------------------------------------------------------------------------

def test_a_progress_bar_on_a_terminal_and_not_with_q(live_cli, here):
    import pty

    (here / "mid.bin").write_bytes(os.urandom(2 * MiB))
    for args, shown in ((("cp",), True), (("-q", "cp"), False)):
        controller, terminal = pty.openpty()
        try:
            result = live_cli(*args, "mid.bin", f"{HOME}/", stderr=terminal)
            os.close(terminal)
            output = b""
            while True:
                try:
                    data = os.read(controller, 4096)
                except OSError:
                    break
                if not data:
                    break
                output += data
        finally:
            os.close(controller)
        assert result.returncode == 0
        text = output.decode()
        if shown:
            assert text.startswith("\r  mid.bin  2.0M/2.0M  100%  ")
            assert text.rstrip().endswith("B/s")
        else:
            assert text == ""


def test_links_in_a_downloaded_directory_are_skipped_with_a_warning(live_cli):
    results = make_tree(live_cli.portal.home / "results")
    os.symlink("/etc/passwd", results / "passwd")
    os.symlink("train.py", results / "alias.py")
    result = ok(live_cli("cp", "-r", f"{HOME}/results", "."))
    assert sorted(result.stderr.splitlines()) == ["paddlectl: warning: skipping alias.py: a link",
                                                  "paddlectl: warning: skipping passwd: a link"]
    assert set(tree(live_cli.cwd / "results")) == {"data", "data/empty", "data/part-0",
                                                   "train.py"}
