"""PFS paths: parsing what users write, and mapping it onto the datacenter's disk."""

from __future__ import annotations

import contextlib
import os

import pytest

from kernel.errors import ForbiddenError, NotFoundError, ValidationError
from paddlecloud_core.layout import MAX_COMPONENT, MAX_PATH
from pfs.paths import PfsPath, pfs_area_root, pfs_path_parse
from pfs.services import pfs_target

# ---------------------------------------------------------------------------------------------
# pfs_path_parse: accepted paths


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/pfs/dc1/home/alice/pkg", PfsPath("dc1", "home", "alice", ("pkg",))),
        ("/pfs/dc1/home/alice", PfsPath("dc1", "home", "alice", ())),
        ("/pfs/dc1/home/alice/a/b/train.py",
         PfsPath("dc1", "home", "alice", ("a", "b", "train.py"))),
        ("/pfs/dc1/public/data/x", PfsPath("dc1", "public", None, ("data", "x"))),
        ("/pfs/dc1/public", PfsPath("dc1", "public", None, ())),
        ("/pfs/dc1/home/alice@example.com/pkg",
         PfsPath("dc1", "home", "alice@example.com", ("pkg",))),
        ("/pfs/dc1/home/a.b/v1.2/..x/x..",
         PfsPath("dc1", "home", "a.b", ("v1.2", "..x", "x.."))),
    ],
)
def test_parse_accepts(text, expected):
    parsed = pfs_path_parse(text)
    assert parsed == expected
    assert str(parsed) == text
    assert parsed.public == (expected.area == "public")


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("/pfs/dc1/home/alice/pkg/", "/pfs/dc1/home/alice/pkg"),
        ("/pfs/dc1/home/alice/", "/pfs/dc1/home/alice"),
        ("/pfs/dc1/public/", "/pfs/dc1/public"),
        ("/pfs/dc1/public/data/", "/pfs/dc1/public/data"),
    ],
)
def test_parse_trailing_slash_gives_the_canonical_path(text, canonical):
    parsed = pfs_path_parse(text)
    assert str(parsed) == canonical
    assert pfs_path_parse(canonical) == parsed


def test_parse_round_trips_through_str():
    for text in ("/pfs/datacenter1/home/alice@example.com/jobs/j1/out.log",
                 "/pfs/datacenter1/public/mnist/train-images"):
        assert pfs_path_parse(str(pfs_path_parse(text))) == pfs_path_parse(text)


def test_parse_component_of_max_length_is_fine():
    name = "x" * MAX_COMPONENT
    assert pfs_path_parse(f"/pfs/dc1/home/alice/{name}").parts == (name,)


# ---------------------------------------------------------------------------------------------
# pfs_path_parse: rejected paths

_LONG_COMPONENT = "x" * (MAX_COMPONENT + 1)
# Every component is short, but the whole path is too long.
_LONG_PATH = "/pfs/dc1/home/alice/" + "/".join(["y" * 200] * 21)

REJECTED = [
    pytest.param("", id="empty"),
    pytest.param("pkg", id="relative"),
    pytest.param("pfs/dc1/home/alice/pkg", id="relative-pfs"),
    pytest.param("/data/x", id="not-under-pfs"),
    pytest.param("/pfs", id="bare-pfs"),
    pytest.param("/pfs/", id="pfs-slash"),
    pytest.param("/pfs/dc1", id="datacenter-only"),
    pytest.param("/pfs/dc1/", id="datacenter-slash"),
    pytest.param("/pfs/dc1/other/x", id="unknown-area"),
    pytest.param("/pfs/dc1/homes/alice", id="area-prefix"),
    pytest.param("/pfs/dc1/home", id="home-without-user"),
    pytest.param("/pfs/dc1/home/", id="home-slash-without-user"),
    pytest.param("/pfs/dc1/home/alice/./pkg", id="dot"),
    pytest.param("/pfs/dc1/home/alice/.", id="trailing-dot"),
    pytest.param("/pfs/dc1/home/alice//pkg", id="empty-component"),
    pytest.param("//pfs/dc1/home/alice/pkg", id="leading-double-slash"),
    pytest.param("/pfs//dc1/home/alice/pkg", id="empty-datacenter"),
    pytest.param("/pfs/dc1/home/alice/pk\0g", id="nul"),
    pytest.param(f"/pfs/dc1/home/alice/{_LONG_COMPONENT}", id="long-component"),
    pytest.param(_LONG_PATH, id="long-path"),
]


@pytest.mark.parametrize("text", REJECTED)
def test_parse_rejects_with_the_default_field(text):
    with pytest.raises(ValidationError) as info:
        pfs_path_parse(text)
    error = info.value
    assert error.code == "invalid"
    assert error.status == 400
    assert list(error.fields) == ["path"]
    assert error.fields["path"] and error.fields["path"][0]
    assert error.message.startswith("path: ")


@pytest.mark.parametrize("text", REJECTED)
def test_parse_rejects_with_a_custom_field(text):
    with pytest.raises(ValidationError) as info:
        pfs_path_parse(text, field="package")
    assert list(info.value.fields) == ["package"]
    assert info.value.message.startswith("package: ")


@pytest.mark.parametrize("value", [None, 42, b"/pfs/dc1/home/alice/pkg", ["/pfs/dc1/home/a"]])
def test_parse_rejects_non_strings(value):
    with pytest.raises(ValidationError) as info:
        pfs_path_parse(value, field="package")
    assert list(info.value.fields) == ["package"]
    assert "required" in info.value.message


@pytest.mark.parametrize(
    "text",
    [
        "/pfs/dc1/home/alice/../bob/pkg",
        "/pfs/dc1/home/alice/..",
        "/pfs/dc1/home/alice/../",
        "/pfs/dc1/home/../bob",
        "/pfs/../etc/passwd",
        "/pfs/dc1/public/../home/bob",
        "/pfs/dc1/home/alice/pkg/../../bob",
    ],
)
def test_parse_rejects_dot_dot_anywhere(text):
    with pytest.raises(ValidationError) as info:
        pfs_path_parse(text)
    assert "'..' is not allowed" in info.value.message
    assert "'..' is not allowed" in info.value.fields["path"][0]


def test_parse_messages_say_what_is_wrong():
    def message(text):
        with pytest.raises(ValidationError) as info:
            pfs_path_parse(text)
        return info.value.message

    assert "/pfs/{datacenter}/home/{user}/" in message("/data/x")
    assert "/pfs/{datacenter}/public/" in message("/pfs/dc1/other/x")
    assert "names no user" in message("/pfs/dc1/home")
    assert "/pfs/dc1/home/{user}/" in message("/pfs/dc1/home")
    assert "NUL" in message("/pfs/dc1/home/alice/a\0b")
    assert str(MAX_COMPONENT) in message(f"/pfs/dc1/home/alice/{_LONG_COMPONENT}")
    assert str(MAX_PATH) in message(_LONG_PATH)
    assert "empty or '.'" in message("/pfs/dc1/home/alice//x")


def test_long_path_fixture_is_really_too_long_with_short_components():
    # Guards the test data above: the over-long path must not be rejected for a long component.
    assert len(_LONG_PATH) > MAX_PATH
    assert all(len(part) <= MAX_COMPONENT for part in _LONG_PATH.split("/"))


# ---------------------------------------------------------------------------------------------
# Where paths are on disk, and who may use them (as the file service and the jobs check them)


@pytest.fixture
def pfs_root(tmp_path, datacenter):
    """datacenter1's PFS on disk: home/alice, home/bob and public/, under tmp_path."""
    root = tmp_path / "pfs"
    for directory in ("home/alice/pkg", "home/bob/secret", "public/data"):
        (root / directory).mkdir(parents=True)
    datacenter.pfs_root = str(root)
    datacenter.save()
    return root


def resolve(user, datacenter, text, *, write=False, field="path"):
    """Where ``text`` is on disk once the caller's access is checked and the storage has
    walked it (refusing links that lead out of the area); it need not exist."""
    target = pfs_target(user, datacenter, text, write=write, field=field)
    with contextlib.suppress(NotFoundError):
        target.storage.stat(target.rel, follow=True)
    return pfs_area_root(datacenter, target.path).joinpath(*target.rel)


def test_resolve_own_home(alice, datacenter, pfs_root):
    assert resolve(alice, datacenter, "/pfs/datacenter1/home/alice/pkg") == (
        pfs_root / "home" / "alice" / "pkg")
    assert resolve(alice, datacenter, "/pfs/datacenter1/home/alice/pkg/train.py",
                   write=True) == pfs_root / "home" / "alice" / "pkg" / "train.py"
    assert resolve(alice, datacenter, "/pfs/datacenter1/home/alice") == (
        pfs_root / "home" / "alice")


def test_resolve_home_of_a_user_with_an_email_name(make_user, datacenter, pfs_root):
    carol = make_user("carol@example.com")
    assert resolve(carol, datacenter, "/pfs/datacenter1/home/carol@example.com/pkg",
                   write=True) == pfs_root / "home" / "carol@example.com" / "pkg"


def test_resolve_uses_the_global_pfs_root_when_the_datacenter_has_none(
        alice, datacenter, settings, tmp_path):
    settings.PADDLECLOUD_PFS_ROOT = tmp_path
    assert datacenter.pfs_root == ""
    assert resolve(alice, datacenter, "/pfs/datacenter1/home/alice/pkg") == (
        tmp_path / "datacenter1" / "home" / "alice" / "pkg")
    assert resolve(alice, datacenter, "/pfs/datacenter1/public/data/x") == (
        tmp_path / "datacenter1" / "public" / "data" / "x")


def test_resolve_public(alice, datacenter, pfs_root):
    assert resolve(alice, datacenter, "/pfs/datacenter1/public/data/x") == (
        pfs_root / "public" / "data" / "x")
    assert resolve(alice, datacenter, "/pfs/datacenter1/public") == pfs_root / "public"


def test_resolve_public_in_the_datacenters_public_dir(alice, datacenter, pfs_root, tmp_path):
    shared = tmp_path / "datasets"
    (shared / "mnist").mkdir(parents=True)
    datacenter.public_dir = str(shared)
    datacenter.save()
    assert resolve(alice, datacenter, "/pfs/datacenter1/public/mnist/train") == (
        shared / "mnist" / "train")
    # Home is still under the PFS root.
    assert resolve(alice, datacenter, "/pfs/datacenter1/home/alice/pkg") == (
        pfs_root / "home" / "alice" / "pkg")


def test_resolve_refuses_another_users_home(alice, make_user, datacenter, pfs_root):
    make_user("bob")
    text = "/pfs/datacenter1/home/bob/secret"
    for write in (False, True):
        with pytest.raises(NotFoundError) as info:
            resolve(alice, datacenter, text, write=write)
        error = info.value
        assert error.code == "not_found"
        assert error.status == 404
        assert "does not exist" in error.message
        assert text in error.message
        assert "/pfs/datacenter1/home/alice" in error.message
        assert list(error.fields) == ["path"]


def test_resolve_refuses_a_home_whose_name_only_starts_like_the_users(
        alice, datacenter, pfs_root):
    with pytest.raises(NotFoundError) as info:
        resolve(alice, datacenter, "/pfs/datacenter1/home/alice2/pkg")
    assert info.value.code == "not_found"


def test_resolve_refuses_another_datacenter(alice, datacenter, other_datacenter, pfs_root):
    for text in ("/pfs/datacenter2/home/alice/pkg", "/pfs/datacenter2/public/data"):
        with pytest.raises(ForbiddenError) as info:
            resolve(alice, datacenter, text, field="package")
        error = info.value
        assert error.code == "wrong_datacenter"
        assert text in error.message
        assert "datacenter2" in error.message and "datacenter1" in error.message
        assert list(error.fields) == ["package"]


def test_resolve_public_is_read_only(alice, datacenter, pfs_root):
    text = "/pfs/datacenter1/public/data/x"
    assert resolve(alice, datacenter, text) == pfs_root / "public" / "data" / "x"
    with pytest.raises(ForbiddenError) as info:
        resolve(alice, datacenter, text, write=True)
    error = info.value
    assert error.code == "read_only"
    assert text in error.message
    assert "read-only" in error.message


def test_resolve_refuses_a_symlink_into_another_home(alice, datacenter, pfs_root):
    os.symlink(pfs_root / "home" / "bob", pfs_root / "home" / "alice" / "to-bob")
    for text in ("/pfs/datacenter1/home/alice/to-bob",
                 "/pfs/datacenter1/home/alice/to-bob/secret",
                 "/pfs/datacenter1/home/alice/to-bob/new-file"):
        with pytest.raises(ForbiddenError) as info:
            resolve(alice, datacenter, text)
        error = info.value
        assert error.code == "outside_area"
        assert text in error.message
        assert "symbolic link" in error.message


def test_resolve_refuses_a_relative_symlink_up_and_out(alice, datacenter, pfs_root):
    os.symlink("../bob", pfs_root / "home" / "alice" / "up")
    with pytest.raises(ForbiddenError) as info:
        resolve(alice, datacenter, "/pfs/datacenter1/home/alice/up/secret", write=True)
    assert info.value.code == "outside_area"


def test_resolve_refuses_a_symlink_out_of_public(alice, datacenter, pfs_root):
    os.symlink(pfs_root / "home" / "bob", pfs_root / "public" / "bobs")
    with pytest.raises(ForbiddenError) as info:
        resolve(alice, datacenter, "/pfs/datacenter1/public/bobs/secret")
    assert info.value.code == "outside_area"
    assert "public" in info.value.message


def test_resolve_allows_a_symlink_that_stays_in_the_home(alice, datacenter, pfs_root):
    home = pfs_root / "home" / "alice"
    os.symlink(home / "pkg", home / "latest")
    os.symlink("pkg", home / "relative")
    assert resolve(alice, datacenter, "/pfs/datacenter1/home/alice/latest/train.py",
                   write=True) == home / "latest" / "train.py"
    assert resolve(alice, datacenter, "/pfs/datacenter1/home/alice/relative") == (
        home / "relative")
