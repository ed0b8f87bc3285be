"""Remote paths on the command line, and the seeds' rules of `paddlectl file SRC DEST`."""

from __future__ import annotations

import os

import pytest

from paddlecloud_client.errors import UsageError
from paddlecloud_client.pfspath import is_inside, require_remote
from paddlectl.commands.files import file_dest, file_source
from tests.factories import HOME


@pytest.mark.parametrize(("path", "hint"), [
    ("data/train", f"e.g. {HOME}/data/train"),
    ("./data", f"e.g. {HOME}/data"),
    ("pfs/datacenter1/home/alice", f"e.g. {HOME}/pfs/datacenter1/home/alice"),
    ("/home/alice/data", f"e.g. {HOME}/..."),
    ("../x", f"e.g. {HOME}/..."),
])
def test_relative_pfs_paths_are_refused_with_an_example(path, hint):
    with pytest.raises(UsageError) as caught:
        require_remote(path, HOME)
    assert caught.value.message.startswith(f"{path!r} is not a PFS path: remote paths are "
                                           "absolute and start with /pfs/")
    assert caught.value.message.endswith(hint)


def test_inside():
    assert is_inside(HOME, HOME) and is_inside(HOME + "/", HOME)
    assert is_inside(HOME + "/a/b", HOME)
    assert not is_inside("/pfs/datacenter1/home/alicex", HOME)
    assert not is_inside(HOME + "/../bob", HOME)
    assert not is_inside("/pfs/datacenter2/home/alice/x", HOME)


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "a.txt").write_text("a")
    (tmp_path / "one.txt").write_text("1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_directory_goes_up_as_itself_or_its_contents(here):
    assert file_source("data", here) == (here / "data", False)
    assert file_source("data/", here) == (here / "data", True)
    assert file_source("./data/sub", here) == (here / "data" / "sub", False)
    assert file_source(str(here / "one.txt"), here) == (here / "one.txt", False)
    assert file_source("./", here) == (here, True)


@pytest.mark.parametrize("src", ["../x", "data/../one.txt", "/etc/passwd", "/tmp", ".", "link"])
def test_src_must_be_a_child_of_the_current_directory(here, src):
    os.symlink("/etc", here / "link")
    with pytest.raises(UsageError, match=r"^src must be a child of the current directory"):
        file_source(src, here)


@pytest.mark.parametrize(("src", "message"), [
    ("nope", "src 'nope' does not exist"),
    ("one.txt/", "src 'one.txt/' ends with / but is not a directory"),
])
def test_src_mistakes(here, src, message):
    with pytest.raises(UsageError, match=message):
        file_source(src, here)


def test_dest_must_be_in_the_users_home():
    assert file_dest(HOME + "/data/", HOME) == HOME + "/data"
    assert file_dest(HOME, HOME) == HOME
    for dest in ("/pfs/datacenter1/home/bob/x", "/pfs/datacenter2/home/alice/x",
                 "/pfs/datacenter1/public/x", HOME + "/../bob"):
        with pytest.raises(UsageError, match=f"^dest must be inside your home {HOME} "):
            file_dest(dest, HOME)
    with pytest.raises(UsageError, match="is not a PFS path"):
        file_dest("data", HOME)
