"""The PFS file service over real HTTP, as a user's client sees it.

Everything goes through ``live_portal`` (uvicorn serving the real ASGI app): the byte streams
(``PUT``/``GET /pfs/content``, ``PATCH /pfs/uploads/{id}``) are answered before Django, so
Django's test client cannot reach them. (Only the listing's query count is taken in-process:
what is counted is the test's own connection.) Each test checks what a user would notice: the
status, the error's code and field, the PFS path in the message, and what is on disk
afterwards, above all that nothing partial or hidden is left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import socket
import tarfile
import threading
import time
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db.backends.signals import connection_created

from accounts.models import Quota
from accounts.services import user_upsert
from pfs import services
from pfs.transfer import DATABASE_THREADS
from tests.conftest import BAD_FLAGS, FLAG_SPELLINGS, PASSWORD
from tests.factories import home

API = "/api/v1/pfs"
DC = "datacenter1"
HOME = home("alice", DC)
PUBLIC = f"/pfs/{DC}/public"
TEMP = ".pfs-upload-"
KiB = 1024
MiB = 1024 * KiB


# -- helpers --------------------------------------------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_error(response, status: int, code: str, field: str | None = None, *,
                extra: tuple[str, ...] = ()) -> dict:
    """The API's one error shape: status, JSON with exactly code, message and fields (plus
    ``extra`` keys), the offending field named in both ``fields`` and the message."""
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"code", "message", "fields", *extra}, body
    assert body["code"] == code, body
    assert body["message"], body
    assert "Traceback" not in response.text
    if field is not None:
        assert field in body["fields"], body
        assert field in body["message"], body
    return body


def on_disk(root: Path) -> dict[str, object]:
    """Everything below ``root``, hidden names included: a file's bytes, a link's target, a
    directory as ``"dir"``, anything else as ``"other"``."""
    tree: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                tree[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                tree[rel] = "dir"
            elif path.is_file():
                tree[rel] = path.read_bytes()
            else:
                tree[rel] = "other"
    return tree


def temporaries(root: Path) -> list[str]:
    """The upload temporaries anywhere below ``root``."""
    return [rel for rel in on_disk(root) if rel.rsplit("/", 1)[-1].startswith(TEMP)]


def plant(root: Path, files: dict[str, bytes]) -> None:
    """Files written straight to disk (as a job or an administrator would)."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def eventually(check, timeout: float = 5.0):
    """``check()`` once it is truthy, or its last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := check()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return result


@contextlib.contextmanager
def labelled(label: str):
    """Name the case a failed assertion in a loop of cases belongs to."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"[{label}] {exc}") from None


def tar_member(name: str, data: bytes | None = None, *, type=tarfile.REGTYPE,
               linkname: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = type, linkname
    info.mode = 0o755 if type == tarfile.DIRTYPE else 0o644
    info.size = len(data) if data is not None else 0
    return info, data


def tar_dir(name: str):
    return tar_member(name, type=tarfile.DIRTYPE)


def tar_link(name: str, target: str, type=tarfile.SYMTYPE):
    return tar_member(name, type=type, linkname=target)


def tar_bytes(*members) -> bytes:
    """A tar built in memory from ``tar_member``s, names kept exactly as given."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def tar_contents(data: bytes) -> dict[str, object]:
    """A downloaded tar as ``on_disk`` shows a tree."""
    contents: dict[str, object] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for member in archive:
            if member.isdir():
                contents[member.name] = "dir"
            elif member.issym():
                contents[member.name] = ("link", member.linkname)
            else:
                contents[member.name] = archive.extractfile(member).read()
    return contents


def forget_open_uploads() -> None:
    """Drop the uploads the server keeps open between requests, as another server process
    (or a restart) would not have them."""
    with services._OPEN_LOCK:
        uploads = list(services._OPEN.values())
        services._OPEN.clear()
    for upload in uploads:
        upload.close()


class Pfs:
    """One user's PFS API over HTTP. Names are relative to that user's home unless they
    start with ``/``."""

    def __init__(self, portal, user=None):
        self.portal = portal
        self.http = portal.session(user)
        self.base = portal.url + API
        self.home = f"/pfs/{DC}/home/{(user or portal.user).username}"

    def path(self, name: str) -> str:
        if name.startswith("/"):
            return name
        return f"{self.home}/{name}" if name else self.home

    def ls(self, name: str = "", *, recursive: bool = False):
        return self.http.get(f"{self.base}/files", params={
            "path": self.path(name), "recursive": "1" if recursive else "0"})

    def names(self, name: str = "", *, recursive: bool = False) -> list[str]:
        response = self.ls(name, recursive=recursive)
        assert response.status_code == 200, response.text
        return [entry["name"] for entry in response.json()["entries"]]

    def stat(self, name: str):
        return self.http.get(f"{self.base}/stat", params={"path": self.path(name)})

    def mkdir(self, name: str, *, parents: bool = False):
        return self.http.post(f"{self.base}/mkdir",
                              json={"path": self.path(name), "parents": parents})

    def rm(self, name: str, *, recursive: bool = False):
        return self.http.delete(f"{self.base}/files", params={
            "path": self.path(name), "recursive": "1" if recursive else "0"})

    def usage_response(self):
        return self.http.get(f"{self.base}/usage")

    def usage(self) -> dict:
        response = self.usage_response()
        assert response.status_code == 200, response.text
        return response.json()

    def put(self, name: str, data: bytes, *, checksum: str | None = "auto", tar: bool = False,
            overwrite: bool | None = None, parents: bool | None = None, headers=None):
        """Upload ``data`` in one request (its SHA-256 sent unless ``checksum`` says else)."""
        params = {"path": self.path(name)}
        for flag, value in (("overwrite", overwrite), ("parents", parents)):
            if value is not None:
                params[flag] = "1" if value else "0"
        headers = {"Content-Type": "application/x-tar" if tar else "application/octet-stream",
                   **(headers or {})}
        if checksum is not None:
            headers["X-Checksum-Sha256"] = sha(data) if checksum == "auto" else checksum
        return self.http.put(f"{self.base}/content", params=params, data=data, headers=headers)

    def get(self, name: str, *, range: str | None = None, method: str = "GET"):
        headers = {"Range": range} if range else {}
        return self.http.request(method, f"{self.base}/content",
                                 params={"path": self.path(name)}, headers=headers)

    def start(self, name: str, data: bytes, **spec):
        """Start a resumable upload of ``data`` (its size and SHA-256 unless ``spec`` says)."""
        body = {"path": self.path(name), "size": len(data), "sha256": sha(data), **spec}
        body = {key: value for key, value in body.items() if value is not None}  # None: unsent
        return self.http.post(f"{self.base}/uploads", json=body)

    def started(self, name: str, data: bytes, **spec) -> str:
        response = self.start(name, data, **spec)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def patch(self, upload_id: str, offset: int, data: bytes, *, headers=None):
        return self.http.patch(f"{self.base}/uploads/{upload_id}", data=data,
                               headers={"Upload-Offset": str(offset), **(headers or {})})

    def upload(self, upload_id: str):
        return self.http.get(f"{self.base}/uploads/{upload_id}")

    def offset(self, upload_id: str) -> int:
        response = self.upload(upload_id)
        assert response.status_code == 200, response.text
        return response.json()["offset"]

    def abort(self, upload_id: str):
        return self.http.delete(f"{self.base}/uploads/{upload_id}")

    @contextlib.contextmanager
    def cut_off(self, method: str, target: str, body: bytes, sent: int, headers=None):
        """A request declaring all of ``body`` but sending only its first ``sent`` bytes on a
        raw socket; the connection is dropped when the block ends (a broken upload)."""
        url = urllib.parse.urlsplit(self.portal.url)
        lines = [f"{method} {API}{target} HTTP/1.1", f"Host: {url.netloc}",
                 f"Authorization: {self.http.headers['Authorization']}",
                 f"Content-Length: {len(body)}",
                 *(f"{key}: {value}" for key, value in (headers or {}).items()), "", ""]
        with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
            sock.sendall("\r\n".join(lines).encode("latin-1") + body[:sent])
            # Let the server take in the bytes sent: at a disconnect uvicorn drops the body it
            # has buffered but not yet handed to the app.
            time.sleep(0.3)
            yield


def query(**params) -> str:
    return "?" + urllib.parse.urlencode(params)


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def pfs(live_portal) -> Pfs:
    """alice's PFS over HTTP."""
    pfs = Pfs(live_portal)
    yield pfs
    pfs.http.close()  # no idle connection for the server to wait for when it stops


@pytest.fixture
def bob(live_portal):
    return user_upsert("bob", password=PASSWORD, datacenter_names=[DC])[0]


@pytest.fixture
def public(live_portal) -> Path:
    """The datacenter's public directory on disk."""
    root = live_portal.home.parents[1] / "public"
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture
def pfs_root(live_portal) -> Path:
    """The whole PFS root on disk: every home and the public directory."""
    return live_portal.home.parents[2]


def set_storage_quota(portal, limit: int) -> None:
    Quota.objects.update_or_create(user=portal.user, datacenter=portal.datacenter,
                                   defaults={"storage": limit})


# -- listing and stat -----------------------------------------------------------------------


def test_list_a_directory_sorted_with_types_sizes_and_times(pfs, home):
    plant(home, {"c.txt": b"ccc", "a.txt": b"a", "b/inner.txt": b"xyz", ".profile": b"p",
                 f"{TEMP}leftover": b"half an upload"})
    (home / "link").symlink_to("a.txt")

    response = pfs.ls()

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["path"], body["type"]) == (HOME, "dir")
    entries = {entry["name"]: entry for entry in body["entries"]}
    assert list(entries) == [".profile", "a.txt", "b", "c.txt", "link"]  # no temporary
    assert {name: (e["type"], e["size"]) for name, e in entries.items()} == {
        ".profile": ("file", 1), "a.txt": ("file", 1), "b": ("dir", 0), "c.txt": ("file", 3),
        "link": ("link", 0)}
    assert entries["a.txt"]["path"] == f"{HOME}/a.txt"
    assert (entries["link"]["target"], entries["a.txt"]["target"]) == ("a.txt", None)
    mtime = entries["c.txt"]["mtime"]
    assert mtime.endswith("Z")
    assert datetime.fromisoformat(mtime).tzinfo == UTC
    assert abs(datetime.fromisoformat(mtime).timestamp()
               - (home / "c.txt").stat().st_mtime) < 0.001


def test_list_recursively_names_entries_relative_to_the_directory(pfs, home):
    plant(home, {"proj/a/b.txt": b"b", "proj/a/c/d.txt": b"d", "proj/e.txt": b"e"})

    response = pfs.ls("proj", recursive=True)

    assert response.status_code == 200, response.text
    entries = response.json()["entries"]
    assert [e["name"] for e in entries] == ["a", "a/b.txt", "a/c", "a/c/d.txt", "e.txt"]
    assert [e["path"] for e in entries][:2] == [f"{HOME}/proj/a", f"{HOME}/proj/a/b.txt"]
    assert pfs.names("proj") == ["a", "e.txt"]


def test_a_large_directory_is_listed_a_page_at_a_time_when_asked(pfs, home):
    plant(home, {f"many/f{index}": b"x" for index in range(5)})
    url = f"{pfs.base}/files"

    pages, offset = [], 0
    while offset is not None:
        answer = pfs.http.get(url, params={"path": pfs.path("many"), "limit": 2,
                                           "offset": offset}).json()
        assert answer["count"] == 5
        pages.append([entry["name"] for entry in answer["entries"]])
        offset = answer["next_offset"]

    assert pages == [["f0", "f1"], ["f2", "f3"], ["f4"]]
    whole = pfs.ls("many").json()  # without a limit: all of it, as before
    assert len(whole["entries"]) == 5 and whole["next_offset"] is None
    for params, field in (({"limit": 0}, "limit"), ({"limit": 10_001}, "limit"),
                          ({"limit": "ten"}, "limit"), ({"offset": -1}, "offset")):
        body = check_error(pfs.http.get(url, params={"path": pfs.path("many"), **params}),
                           400, "invalid", field)
        assert "a whole number from" in body["message"], body


def test_a_file_lists_itself_and_stat_shows_one_entry(pfs, home):
    plant(home, {"d/f.bin": b"12345"})

    body = pfs.ls("d/f.bin").json()
    file, directory = pfs.stat("d/f.bin"), pfs.stat("d")

    assert (body["path"], body["type"]) == (f"{HOME}/d/f.bin", "file")
    assert [(e["name"], e["path"], e["type"], e["size"]) for e in body["entries"]] == [
        ("f.bin", f"{HOME}/d/f.bin", "file", 5)]

    assert file.status_code == directory.status_code == 200
    assert set(file.json()) == {"name", "path", "type", "size", "mtime", "target"}
    assert {k: file.json()[k] for k in ("name", "path", "type", "size")} == {
        "name": "f.bin", "path": f"{HOME}/d/f.bin", "type": "file", "size": 5}
    assert (directory.json()["type"], directory.json()["path"]) == ("dir", f"{HOME}/d")


def test_list_or_stat_a_missing_path_is_not_found(pfs):
    for response in (pfs.ls("nope/x"), pfs.stat("nope/x")):
        body = check_error(response, 404, "not_found", "path")
        assert f"{HOME}/nope" in body["message"]


# -- mkdir ----------------------------------------------------------------------------------


def test_mkdir_creates_a_directory_once_and_nothing_else(pfs, home):
    response = pfs.mkdir("new")

    assert response.status_code == 201, response.text
    assert {k: response.json()[k] for k in ("name", "path", "type")} == {
        "name": "new", "path": f"{HOME}/new", "type": "dir"}
    assert (home / "new").is_dir()
    body = check_error(pfs.mkdir("new"), 409, "exists", "path")
    assert f"{HOME}/new" in body["message"]
    plant(home, {"f": b"data"})
    check_error(pfs.mkdir("f"), 409, "exists", "path")
    check_error(pfs.mkdir(""), 403, "area_root", "path")
    assert on_disk(home) == {"new": "dir", "f": b"data"}


def test_mkdir_needs_the_parent_unless_asked_for_parents(pfs, home):
    body = check_error(pfs.mkdir("x/y/z"), 404, "not_found", "path")
    assert f"{HOME}/x" in body["message"]
    assert not (home / "x").exists()

    assert pfs.mkdir("x/y/z", parents=True).status_code == 201
    assert (home / "x/y/z").is_dir()
    assert pfs.mkdir("x/y/z", parents=True).status_code == 201  # like mkdir -p: fine


# -- rm -------------------------------------------------------------------------------------


def test_rm_a_file_or_an_empty_directory(pfs, home):
    plant(home, {"f.txt": b"12345"})
    (home / "empty").mkdir()

    response = pfs.rm("f.txt")

    assert response.status_code == 200, response.text
    assert response.json() == {"path": f"{HOME}/f.txt", "freed": 5}
    assert pfs.rm("empty").json() == {"path": f"{HOME}/empty", "freed": 0}
    assert on_disk(home) == {}
    check_error(pfs.rm("f.txt"), 404, "not_found", "path")


def test_rm_a_non_empty_directory_only_recursively(pfs, home):
    plant(home, {"d/a.txt": b"123", "d/sub/b.txt": b"4567"})

    body = check_error(pfs.rm("d"), 400, "not_empty", "path")
    assert f"{HOME}/d" in body["message"]
    assert (home / "d/sub/b.txt").read_bytes() == b"4567"

    response = pfs.rm("d", recursive=True)
    assert response.json() == {"path": f"{HOME}/d", "freed": 7}
    assert not (home / "d").exists()


@pytest.mark.parametrize(("value", "recursive"), FLAG_SPELLINGS)
def test_recursive_takes_every_spelling_of_a_boolean(pfs, home, value, recursive):
    plant(home, {"d/a.txt": b"123", "d/sub/b.txt": b"4567"})
    params = {"path": pfs.path("d"), "recursive": value}

    listing = pfs.http.get(f"{pfs.base}/files", params=params)

    assert listing.status_code == 200, listing.text
    assert [e["name"] for e in listing.json()["entries"]] == (
        ["a.txt", "sub", "sub/b.txt"] if recursive else ["a.txt", "sub"])
    removed = pfs.http.delete(f"{pfs.base}/files", params=params)
    if recursive:
        assert removed.json() == {"path": f"{HOME}/d", "freed": 7}
        assert not (home / "d").exists()
    else:
        check_error(removed, 400, "not_empty", "path")
        assert (home / "d/sub/b.txt").read_bytes() == b"4567"


@pytest.mark.parametrize(("value", "flag"), FLAG_SPELLINGS)
def test_put_flags_take_every_spelling_of_a_boolean(pfs, home, value, flag):
    plant(home, {"f.txt": b"old"})
    params = {"path": pfs.path("f.txt"), "overwrite": value}
    headers = {"X-Checksum-Sha256": sha(b"new")}

    replaced = pfs.http.put(f"{pfs.base}/content", params=params, data=b"new", headers=headers)
    made = pfs.http.put(f"{pfs.base}/content", params={"path": pfs.path("a/b/f.txt"),
                                                         "parents": value},
                        data=b"new", headers=headers)

    if flag:
        assert (replaced.status_code, made.status_code) == (201, 201), (replaced.text, made.text)
        assert on_disk(home) == {"f.txt": b"new", "a": "dir", "a/b": "dir", "a/b/f.txt": b"new"}
    else:
        check_error(replaced, 409, "exists", "path")
        check_error(made, 404, "not_found", "path")
        assert on_disk(home) == {"f.txt": b"old"}


@pytest.mark.parametrize("value", BAD_FLAGS)
@pytest.mark.parametrize("flag", ["recursive", "overwrite", "parents"])
def test_a_flag_that_is_not_a_boolean_is_a_400_naming_it(pfs, home, flag, value):
    plant(home, {"d/a.txt": b"123"})
    params = {"path": pfs.path("d/a.txt"), flag: value}
    if flag == "recursive":
        responses = [pfs.http.get(f"{pfs.base}/files", params=params),
                     pfs.http.delete(f"{pfs.base}/files", params=params)]
    else:
        responses = [pfs.http.put(f"{pfs.base}/content", params=params, data=b"new",
                                  headers={"X-Checksum-Sha256": sha(b"new")})]
    for response in responses:
        body = check_error(response, 400, "invalid", flag)
        assert "1, true, yes or on" in body["message"]
    assert on_disk(home) == {"d": "dir", "d/a.txt": b"123"}


def test_rm_a_link_removes_the_link_not_its_target(pfs, home):
    plant(home, {"d/a.txt": b"123"})
    (home / "l").symlink_to("d")

    assert pfs.rm("l", recursive=True).json()["freed"] == 0

    assert not (home / "l").is_symlink()
    assert (home / "d/a.txt").read_bytes() == b"123"


def test_rm_the_home_itself_is_refused(pfs, home):
    plant(home, {"keep.txt": b"k"})

    for recursive in (False, True):
        body = check_error(pfs.rm("", recursive=recursive), 403, "area_root", "path")
        assert HOME in body["message"]

    assert on_disk(home) == {"keep.txt": b"k"}


# -- single-request uploads -----------------------------------------------------------------


def test_put_then_get_roundtrips_the_bytes(pfs, home):
    data = os.urandom(3 * MiB + 123)  # several of the server's 1 MiB pieces

    response = pfs.put("blob.bin", data)

    assert response.status_code == 201, response.text
    entry = response.json()
    assert {k: entry[k] for k in ("name", "path", "type", "size")} == {
        "name": "blob.bin", "path": f"{HOME}/blob.bin", "type": "file", "size": len(data)}
    assert (home / "blob.bin").read_bytes() == data
    download = pfs.get("blob.bin")
    assert download.status_code == 200
    assert download.headers["Content-Length"] == str(len(data))
    assert download.content == data
    assert pfs.put("empty", b"").status_code == 201
    assert pfs.get("empty").content == b""
    assert on_disk(home) == {"blob.bin": data, "empty": b""}  # and no temporary


def test_puts_one_after_another_keep_their_database_connections(pfs, home):
    """One PUT per file pays for its statements, not for a database connection each (an
    SQLite file opened, its WAL checkpointed and removed, every request): the transfers'
    database threads keep their connections from request to request."""
    opened: list[str] = []

    def count(sender, connection, **kwargs):
        opened.append(threading.current_thread().name)

    connection_created.connect(count)
    try:
        for n in range(12):
            assert pfs.put(f"f{n}.txt", b"x" * n).status_code == 201
        assert pfs.get("f5.txt").content == b"xxxxx"
    finally:
        connection_created.disconnect(count)

    assert len(opened) <= DATABASE_THREADS, opened
    assert on_disk(home) == {f"f{n}.txt": b"x" * n for n in range(12)}


def test_put_replaces_a_file_unless_overwrite_is_off(pfs, home):
    assert pfs.put("f.txt", b"old").status_code == 201
    assert pfs.put("f.txt", b"newer").status_code == 201
    assert (home / "f.txt").read_bytes() == b"newer"

    body = check_error(pfs.put("f.txt", b"newest", overwrite=False), 409, "exists", "path")

    assert f"{HOME}/f.txt" in body["message"]
    assert on_disk(home) == {"f.txt": b"newer"}
    assert pfs.put("g.txt", b"new", overwrite=False).status_code == 201


def test_put_needs_the_parent_unless_asked_for_parents(pfs, home):
    body = check_error(pfs.put("no/such/f.txt", b"x"), 404, "not_found", "path")
    assert f"{HOME}/no/such" in body["message"]
    assert on_disk(home) == {}

    assert pfs.put("no/such/f.txt", b"x", parents=True).status_code == 201
    assert (home / "no/such/f.txt").read_bytes() == b"x"


def test_put_onto_a_directory_or_below_a_file_is_refused(pfs, home):
    plant(home, {"d/keep": b"k"})

    body = check_error(pfs.put("d", b"data"), 400, "is_a_directory", "path")
    assert f"{HOME}/d" in body["message"]
    body = check_error(pfs.put("d/keep/f", b"data"), 400, "not_a_directory", "path")
    assert f"{HOME}/d/keep" in body["message"]

    assert on_disk(home) == {"d": "dir", "d/keep": b"k"}


def test_put_with_a_wrong_checksum_stores_nothing(pfs, home):
    plant(home, {"old.bin": b"the old content"})

    for name in ("new.bin", "old.bin"):
        body = check_error(pfs.put(name, b"what was sent", checksum=sha(b"something else")),
                           422, "checksum_mismatch", "sha256")
        assert sha(b"something else") in body["message"]

    assert on_disk(home) == {"old.bin": b"the old content"}  # no file, no temporary


def test_put_needs_a_well_formed_checksum(pfs, home):
    for checksum in (None, "abc123", "g" * 64):
        with labelled(f"checksum {checksum!r}"):
            check_error(pfs.put("f.bin", b"data", checksum=checksum), 400, "invalid", "sha256")

    assert on_disk(home) == {}
    assert pfs.put("f.bin", b"data", checksum=sha(b"data").upper()).status_code == 201


def test_put_without_a_length_is_refused(pfs, home):
    response = pfs.put("f.bin", iter([b"chunked ", b"body"]), checksum=sha(b"chunked body"))

    check_error(response, 411, "length_required", "Content-Length")
    assert on_disk(home) == {}


def test_put_cut_off_before_the_whole_body_leaves_nothing(pfs, home):
    data = os.urandom(100_000)
    target = "/content" + query(path=f"{HOME}/f.bin")

    with pfs.cut_off("PUT", target, data, 40_000, {"X-Checksum-Sha256": sha(data)}):
        assert eventually(lambda: temporaries(home)), "the server never started receiving"

    assert eventually(lambda: not temporaries(home)), temporaries(home)
    assert on_disk(home) == {}
    assert pfs.names() == []


# -- resumable uploads ----------------------------------------------------------------------


def test_resumable_upload_in_chunks(pfs, home):
    data = os.urandom(300_000)

    response = pfs.start("big.bin", data)

    assert response.status_code == 201, response.text
    upload = response.json()
    assert {k: upload[k] for k in ("path", "kind", "size", "offset")} == {
        "path": f"{HOME}/big.bin", "kind": "file", "size": len(data), "offset": 0}
    assert upload["chunk_size"] > 0
    upload_id = upload["id"]

    response = pfs.patch(upload_id, 0, data[:100_000])
    assert response.status_code == 200, response.text
    assert response.json() == {"id": upload_id, "offset": 100_000}
    assert pfs.offset(upload_id) == 100_000
    assert not (home / "big.bin").exists()
    assert pfs.names() == []  # the bytes so far are hidden

    body = check_error(pfs.patch(upload_id, 50_000, data[50_000:100_000]), 409,
                       "offset_mismatch", "Upload-Offset", extra=("offset",))
    assert body["offset"] == 100_000
    assert "100000" in body["message"]

    assert pfs.patch(upload_id, 100_000, data[100_000:200_000]).json()["offset"] == 200_000
    response = pfs.patch(upload_id, 200_000, data[200_000:])

    assert response.status_code == 201, response.text
    done = response.json()
    assert (done["id"], done["offset"], done["complete"], done["path"]) == (
        upload_id, len(data), True, f"{HOME}/big.bin")
    assert {k: done["entry"][k] for k in ("name", "path", "type", "size")} == {
        "name": "big.bin", "path": f"{HOME}/big.bin", "type": "file", "size": len(data)}
    assert on_disk(home) == {"big.bin": data}
    # A client whose final answer was lost asks again: the upload is complete, and stored.
    again = pfs.upload(upload_id).json()
    assert (again["offset"], again["complete"]) == (len(data), True)
    assert again["result"]["entry"]["size"] == len(data)
    replay = pfs.patch(upload_id, len(data), b"")
    assert replay.status_code == 201 and replay.json()["entry"] == done["entry"]


def test_the_checksum_may_come_with_the_last_chunk(pfs, home):
    """A client hashes a large file as it sends it: no checksum when the upload starts, the
    checksum with the last chunk (required then, and checked)."""
    data = os.urandom(300_000)
    response = pfs.http.post(f"{pfs.base}/uploads", json={"path": pfs.path("late.bin"),
                                                          "size": len(data)})
    assert response.status_code == 201, response.text
    upload_id = response.json()["id"]
    assert pfs.patch(upload_id, 0, data[:100_000]).status_code == 200
    # The last chunk without a checksum: refused before a byte of it is taken.
    check_error(pfs.patch(upload_id, 100_000, data[100_000:]), 400, "invalid",
                "X-Checksum-Sha256")
    assert pfs.offset(upload_id) == 100_000
    done = pfs.patch(upload_id, 100_000, data[100_000:],
                     headers={"X-Checksum-Sha256": sha(data)})
    assert done.status_code == 201, done.text
    assert on_disk(home) == {"late.bin": data}

    # A wrong one: nothing stored, the upload gone.
    response = pfs.http.post(f"{pfs.base}/uploads", json={"path": pfs.path("wrong.bin"),
                                                          "size": len(data)})
    upload_id = response.json()["id"]
    check_error(pfs.patch(upload_id, 0, data, headers={"X-Checksum-Sha256": sha(b"other")}),
                422, "checksum_mismatch", "sha256")
    assert on_disk(home) == {"late.bin": data}
    assert temporaries(home) == []
    # One declared at the start must not be contradicted at the end.
    upload_id = pfs.started("both.bin", data)
    check_error(pfs.patch(upload_id, 0, data, headers={"X-Checksum-Sha256": sha(b"x")}),
                400, "invalid", "X-Checksum-Sha256")


def test_an_interrupted_chunk_keeps_exactly_the_bytes_that_arrived(pfs, home):
    data = os.urandom(400_000)
    upload_id = pfs.started("big.bin", data)
    assert pfs.patch(upload_id, 0, data[:100_000]).status_code == 200

    with pfs.cut_off("PATCH", f"/uploads/{upload_id}", data[100_000:300_000], 70_000,
                     {"Upload-Offset": "100000"}):
        pass

    assert eventually(lambda: pfs.offset(upload_id) != 100_000)
    time.sleep(0.1)
    assert pfs.offset(upload_id) == 170_000  # what arrived, and it stays there
    assert not (home / "big.bin").exists()
    assert pfs.names() == []
    check_error(pfs.patch(upload_id, 300_000, data[300_000:]), 409, "offset_mismatch",
                "Upload-Offset", extra=("offset",))

    response = pfs.patch(upload_id, 170_000, data[170_000:])

    assert response.status_code == 201, response.text
    assert response.json()["complete"] is True
    assert on_disk(home) == {"big.bin": data}


def test_a_resumed_upload_continues_in_another_server_process(pfs, home):
    data = os.urandom(200_000)
    upload_id = pfs.started("big.bin", data)
    assert pfs.patch(upload_id, 0, data[:80_000]).status_code == 200

    forget_open_uploads()  # the next request is served by a process that never saw it

    assert pfs.offset(upload_id) == 80_000
    assert pfs.patch(upload_id, 80_000, data[80_000:]).status_code == 201
    assert on_disk(home) == {"big.bin": data}


def test_a_second_request_to_a_busy_upload_is_refused(pfs, home):
    data = os.urandom(100_000)
    upload_id = pfs.started("f.bin", data)

    with pfs.cut_off("PATCH", f"/uploads/{upload_id}", data, 10_000, {"Upload-Offset": "0"}):
        check_error(pfs.patch(upload_id, 0, data), 409, "upload_busy", "upload")

    assert eventually(lambda: pfs.offset(upload_id) == 10_000)
    assert pfs.patch(upload_id, 10_000, data[10_000:]).status_code == 201
    assert on_disk(home) == {"f.bin": data}


def test_a_resumable_upload_with_a_wrong_checksum_stores_nothing(pfs, home):
    data = os.urandom(50_000)
    upload_id = pfs.started("f.bin", data, sha256=sha(b"other"))
    assert pfs.patch(upload_id, 0, data[:20_000]).status_code == 200

    check_error(pfs.patch(upload_id, 20_000, data[20_000:]), 422, "checksum_mismatch",
                "sha256")

    assert on_disk(home) == {}
    check_error(pfs.upload(upload_id), 404, "not_found", "upload")


def test_aborting_an_upload_throws_its_bytes_away(pfs, home):
    data = os.urandom(50_000)
    upload_id = pfs.started("f.bin", data)
    assert pfs.patch(upload_id, 0, data[:20_000]).status_code == 200
    assert temporaries(home)

    response = pfs.abort(upload_id)

    assert response.status_code == 204, response.text
    assert on_disk(home) == {}
    check_error(pfs.upload(upload_id), 404, "not_found", "upload")
    check_error(pfs.patch(upload_id, 20_000, data[20_000:]), 404, "not_found", "upload")


def test_another_user_cannot_see_or_touch_an_upload(pfs, live_portal, home, bob):
    data = os.urandom(50_000)
    upload_id = pfs.started("f.bin", data)
    assert pfs.patch(upload_id, 0, data[:20_000]).status_code == 200
    other = Pfs(live_portal, bob)

    for response in (other.upload(upload_id), other.patch(upload_id, 20_000, data[20_000:]),
                     other.abort(upload_id)):
        body = check_error(response, 404, "not_found", "upload")
        assert upload_id in body["message"]

    other.http.close()
    assert pfs.offset(upload_id) == 20_000
    assert pfs.patch(upload_id, 20_000, data[20_000:]).status_code == 201
    assert on_disk(home) == {"f.bin": data}


def test_patch_needs_an_offset_and_may_not_go_past_the_size(pfs):
    data = os.urandom(1000)
    upload_id = pfs.started("f.bin", data)

    check_error(pfs.http.patch(f"{pfs.base}/uploads/{upload_id}", data=data), 400, "invalid",
                "Upload-Offset")
    check_error(pfs.patch(upload_id, 0, data + b"more"), 400, "too_long", "body")
    check_error(pfs.patch("0" * 32, 0, data), 404, "not_found", "upload")
    assert pfs.offset(upload_id) == 0


def test_starting_an_upload_checks_it_before_any_byte(pfs, home):
    plant(home, {"d/keep": b"k"})
    cases = [
        ({"sha256": "xyz"}, 400, "invalid", "sha256"),
        ({"size": -1}, 400, "invalid", "size"),
        ({"kind": "zip"}, 400, "invalid", "kind"),
        ({"path": "relative/f.bin"}, 400, "invalid", "path"),
        ({"path": f"{HOME}/no/such/f.bin"}, 404, "not_found", "path"),
        ({"path": f"{HOME}/d"}, 400, "is_a_directory", "path"),
        ({"path": f"{HOME}/d/keep", "overwrite": False}, 409, "exists", "path"),
        ({"path": f"{HOME}/d/keep", "kind": "tar"}, 409, "exists", "path"),
    ]

    for spec, status, code, field in cases:
        with labelled(str(spec)):
            check_error(pfs.start("f.bin", b"data", **spec), status, code, field)

    assert on_disk(home) == {"d": "dir", "d/keep": b"k"}


def test_a_resumable_upload_may_create_parents_or_be_empty(pfs, home):
    with_parents = pfs.started("a/b/f.bin", b"data", parents=True)
    empty = pfs.started("empty", b"")

    assert pfs.patch(with_parents, 0, b"data").status_code == 201
    assert pfs.patch(empty, 0, b"").status_code == 201  # an empty PATCH completes it
    assert on_disk(home) == {"a": "dir", "a/b": "dir", "a/b/f.bin": b"data", "empty": b""}


# -- directories as tar ---------------------------------------------------------------------

TREE_TAR = [
    tar_member("top.txt", b"top"),
    tar_dir("sub"),
    tar_dir("sub/deep"),
    tar_member("sub/deep/f.bin", b"\x00\x01" * 1000),
    tar_member("sub/g.txt", b"g"),
    tar_member("implied/x.txt", b"x"),  # no directory member before it
    tar_link("sub/link", "g.txt"),
    tar_link("sub/deep/up", "../../top.txt"),  # relative, staying inside
]
TREE = {
    "top.txt": b"top", "sub": "dir", "sub/deep": "dir", "sub/deep/f.bin": b"\x00\x01" * 1000,
    "sub/g.txt": b"g", "implied": "dir", "implied/x.txt": b"x", "sub/link": ("link", "g.txt"),
    "sub/deep/up": ("link", "../../top.txt"),
}
TREE_FILES, TREE_BYTES = 4, 2005


def test_a_tar_is_unpacked_into_a_new_directory(pfs, home):
    response = pfs.put("unpacked", tar_bytes(*TREE_TAR), tar=True)

    assert response.status_code == 201, response.text
    assert response.json() == {"path": f"{HOME}/unpacked", "files": TREE_FILES,
                               "bytes": TREE_BYTES}
    assert on_disk(home / "unpacked") == TREE
    assert temporaries(home) == []
    assert pfs.names() == ["unpacked"]
    assert pfs.get("unpacked/sub/deep/up").content == b"top"  # the inside link is followed


def test_a_tar_is_merged_into_an_existing_directory(pfs, home):
    plant(home, {"proj/keep.txt": b"keep", "proj/sub/old.txt": b"old", "proj/top.txt": b"v1"})

    response = pfs.put("proj", tar_bytes(*TREE_TAR), tar=True)

    assert response.status_code == 201, response.text
    assert on_disk(home / "proj") == {**TREE, "keep.txt": b"keep", "sub/old.txt": b"old"}
    assert temporaries(home) == []


def test_a_tar_upload_in_chunks(pfs, home):
    data = tar_bytes(*TREE_TAR)
    upload_id = pfs.started("unpacked", data, kind="tar")
    assert pfs.patch(upload_id, 0, data[:3000]).status_code == 200
    assert pfs.names() == []

    response = pfs.patch(upload_id, 3000, data[3000:])

    assert response.status_code == 201, response.text
    assert {k: response.json()[k] for k in ("complete", "path", "files", "bytes")} == {
        "complete": True, "path": f"{HOME}/unpacked", "files": TREE_FILES,
        "bytes": TREE_BYTES}
    assert on_disk(home) == {"unpacked": "dir", **{f"unpacked/{k}": v for k, v in TREE.items()}}


def test_a_tar_onto_a_file_is_a_conflict(pfs, home):
    plant(home, {"f": b"file"})

    check_error(pfs.put("f", tar_bytes(*TREE_TAR), tar=True), 409, "exists", "path")

    assert on_disk(home) == {"f": b"file"}


HOSTILE = {
    "dotdot": tar_member("../escape", b"x"),
    "nested-dotdot": tar_member("sub/../../escape", b"x"),
    "absolute": tar_member("/etc/x", b"x"),
    "link-absolute": tar_link("etc", "/etc"),
    "link-to-bob": tar_link("bob", "../../bob"),
    "nested-link-up": tar_link("sub/up", "../../x"),
    "hard-link": tar_link("hard", "ok.txt", tarfile.LNKTYPE),
    "fifo": tar_member("fifo", type=tarfile.FIFOTYPE),
    "char-device": tar_member("null", type=tarfile.CHRTYPE),
    "block-device": tar_member("sda", type=tarfile.BLKTYPE),
    "reserved-name": tar_member(f"sub/{TEMP}x", b"x"),
}


def test_a_hostile_tar_is_refused_and_creates_nothing(pfs, home, pfs_root):
    plant(pfs_root / DC / "home/bob", {"secret": b"bob's"})

    for into in ("a new directory", "an existing directory"):
        if into == "an existing directory":
            plant(home, {"dest/keep.txt": b"keep"})
        before = on_disk(pfs_root)
        for case, bad in HOSTILE.items():
            data = tar_bytes(tar_member("ok.txt", b"ok"), tar_dir("sub"),
                             tar_member("sub/ok.txt", b"ok"), bad)
            with labelled(f"{case} into {into}"):
                body = check_error(pfs.put("dest", data, tar=True), 400, "unsafe_tar", "tar")
                assert repr(bad[0].name) in body["message"]
                assert on_disk(pfs_root) == before


def test_bytes_that_are_not_a_tar_are_refused(pfs, home):
    cases = {
        "garbage": b"this is not a tar at all" * 100,
        "truncated": tar_bytes(tar_member("big.bin", os.urandom(5000)))[:3000],
    }

    for case, data in cases.items():
        with labelled(case):
            check_error(pfs.put("dest", data, tar=True), 400, "bad_tar", "tar")
            assert on_disk(home) == {}


# -- downloads ------------------------------------------------------------------------------

DIGITS = b"0123456789"


def test_download_byte_ranges(pfs, home):
    plant(home, {"digits.txt": DIGITS})
    cases = [
        ("bytes=2-5", b"2345", "bytes 2-5/10"),
        ("bytes=-3", b"789", "bytes 7-9/10"),
        ("bytes=5-", b"56789", "bytes 5-9/10"),
        ("bytes=0-", DIGITS, "bytes 0-9/10"),
        ("bytes=3-100", b"3456789", "bytes 3-9/10"),
        ("bytes=-100", DIGITS, "bytes 0-9/10"),
    ]

    for range, content, content_range in cases:
        with labelled(range):
            response = pfs.get("digits.txt", range=range)
            assert response.status_code == 206, response.text
            assert response.content == content
            assert response.headers["Content-Range"] == content_range
            assert response.headers["Content-Length"] == str(len(content))


def test_an_unsatisfiable_range_is_refused(pfs, home):
    plant(home, {"digits.txt": DIGITS})

    for range in ("bytes=10-", "bytes=20-30", "bytes=-0", "bytes=5-2"):
        with labelled(range):
            response = pfs.get("digits.txt", range=range)
            check_error(response, 416, "range_not_satisfiable", "Range")
            assert response.headers["Content-Range"] == "bytes */10"


def test_download_a_whole_file_and_head_it(pfs, home):
    plant(home, {"digits.txt": DIGITS})

    response = pfs.get("digits.txt")
    head = pfs.get("digits.txt", method="HEAD")

    assert response.status_code == head.status_code == 200
    assert response.content == DIGITS
    assert head.content == b""
    for headers in (response.headers, head.headers):
        assert headers["Content-Length"] == "10"
        assert headers["Content-Type"] == "text/plain"
        assert headers["Accept-Ranges"] == "bytes"
        assert headers["Content-Disposition"] == "attachment; filename*=UTF-8''digits.txt"
    assert head.headers["ETag"] == response.headers["ETag"]


def test_download_a_directory_as_a_tar(pfs, home):
    plant(home, {"proj/a.txt": b"a", "proj/sub/b.bin": os.urandom(3000), "proj/sub/c/d": b"",
                 f"proj/{TEMP}half": b"hidden"})
    (home / "proj/sub/link").symlink_to("b.bin")
    expected = {rel: value for rel, value in on_disk(home / "proj").items() if TEMP not in rel}

    response = pfs.get("proj")

    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/x-tar"
    assert response.headers["Content-Disposition"] == "attachment; filename*=UTF-8''proj.tar"
    assert tar_contents(response.content) == expected


def test_download_through_links_and_what_is_not_a_file(pfs, home):
    plant(home, {"d/a.txt": b"inside"})
    (home / "inside").symlink_to("d/a.txt")
    (home / "outside").symlink_to("/etc/hostname")
    os.mkfifo(home / "fifo")

    assert pfs.get("inside").content == b"inside"
    for name, status, code in (("outside", 403, "outside_area"), ("nope.txt", 404, "not_found"),
                               ("fifo", 400, "not_a_file")):
        with labelled(name):
            body = check_error(pfs.get(name), status, code, "path")
            assert f"{HOME}/{name}" in body["message"]
            assert pfs.get(name, method="HEAD").status_code == status


def test_a_jobs_output_is_listed_and_downloadable(pfs, home):
    log = b"epoch 1 loss 0.5\nepoch 2 loss 0.25\n"
    plant(home, {"jobs/j1/output/node_0/train.log": log,
                 "jobs/j1/output/.paddlecloud-job": b"its job's uid",
                 "jobs/j1/output/.paddlecloud-ended/0/j1-tr-0.svc": b""})

    # The marker that tells whose output it is is PaddleCloud's, as is what a collective
    # job's trainers on Kubernetes say of each other (run.sh): not listed.
    assert pfs.names("jobs/j1/output", recursive=True) == ["node_0", "node_0/train.log"]
    assert pfs.names("jobs/j1/output") == ["node_0"]
    assert pfs.names("jobs/j1", recursive=True) == [
        "output", "output/node_0", "output/node_0/train.log"]
    assert pfs.get("jobs/j1/output/node_0/train.log").content == log
    assert tar_contents(pfs.get("jobs/j1/output").content) == {
        "node_0": "dir", "node_0/train.log": log}


# -- access ---------------------------------------------------------------------------------


def test_another_users_home_does_not_exist(pfs, home, bob):
    bob_home = home.parent / "bob"
    plant(bob_home, {"secret.txt": b"bob's"})
    calls = {
        "ls": pfs.ls,
        "stat": pfs.stat,
        "get": pfs.get,
        "put": lambda path: pfs.put(path, b"alice's"),
        "put-tar": lambda path: pfs.put(path, tar_bytes(*TREE_TAR), tar=True),
        "mkdir": pfs.mkdir,
        "rm": lambda path: pfs.rm(path, recursive=True),
        "start": lambda path: pfs.start(path, b"alice's"),
    }

    for name, call in calls.items():
        with labelled(name):
            existing = check_error(call(f"/pfs/{DC}/home/bob/secret.txt"), 404, "not_found",
                                   "path")
            missing = check_error(call(f"/pfs/{DC}/home/bob/nothing"), 404, "not_found", "path")
            assert f"/pfs/{DC}/home/bob/secret.txt" in existing["message"]
            # The answers give nothing away about what bob has.
            assert existing["message"].replace("secret.txt", "nothing") == missing["message"]

    assert on_disk(bob_home) == {"secret.txt": b"bob's"}


def test_the_public_directory_is_readable(pfs, public):
    plant(public, {"datasets/mnist/train.bin": b"mnist", "README": b"read me"})

    assert pfs.names(PUBLIC) == ["README", "datasets"]
    assert pfs.names(PUBLIC, recursive=True) == [
        "README", "datasets", "datasets/mnist", "datasets/mnist/train.bin"]
    assert pfs.stat(f"{PUBLIC}/README").json()["size"] == 7
    assert pfs.get(f"{PUBLIC}/datasets/mnist/train.bin").content == b"mnist"
    assert tar_contents(pfs.get(f"{PUBLIC}/datasets").content)["mnist/train.bin"] == b"mnist"


def test_the_public_directory_is_read_only(pfs, public):
    plant(public, {"datasets/mnist/train.bin": b"mnist", "README": b"read me"})
    before = on_disk(public)
    calls = {
        "put-over": lambda: pfs.put(f"{PUBLIC}/README", b"mine"),
        "put-new": lambda: pfs.put(f"{PUBLIC}/new.txt", b"mine"),
        "put-tar": lambda: pfs.put(f"{PUBLIC}/datasets", tar_bytes(*TREE_TAR), tar=True),
        "mkdir": lambda: pfs.mkdir(f"{PUBLIC}/datasets/new"),
        "rm": lambda: pfs.rm(f"{PUBLIC}/README"),
        "rm-recursive": lambda: pfs.rm(f"{PUBLIC}/datasets", recursive=True),
        "rm-root": lambda: pfs.rm(PUBLIC, recursive=True),
        "start": lambda: pfs.start(f"{PUBLIC}/new.txt", b"mine"),
    }

    for name, call in calls.items():
        with labelled(name):
            body = check_error(call(), 403, "read_only", "path")
            assert PUBLIC in body["message"]
            assert on_disk(public) == before


def test_another_datacenter_is_refused(pfs, home):
    path = "/pfs/datacenter2/home/alice/f"

    for response in (pfs.ls(path), pfs.get(path), pfs.put(path, b"data"), pfs.mkdir(path),
                     pfs.start(path, b"data")):
        body = check_error(response, 403, "wrong_datacenter", "path")
        assert "datacenter2" in body["message"]

    assert on_disk(home) == {}


def test_malformed_paths_are_refused(pfs, pfs_root):
    plant(pfs_root / DC / "home/bob", {"secret.txt": b"bob's"})
    before = on_disk(pfs_root)
    cases = [
        (f"{HOME}/../bob/secret.txt", "'..'"),
        (f"{HOME}/a/../../bob", "'..'"),
        ("/home/alice/f", "not a PFS path"),
        (f"/pfs/{DC}/elsewhere/f", "not a PFS path"),
        (f"{HOME}//f", "empty"),
        (f"{HOME}/./f", "'.'"),
    ]

    for path, says in cases:
        for response in (pfs.ls(path), pfs.get(path), pfs.put(path, b"data"), pfs.rm(path),
                         pfs.mkdir(path)):
            with labelled(f"{response.request.method} {path}"):
                body = check_error(response, 400, "invalid", "path")
                assert says in body["message"]

    assert on_disk(pfs_root) == before


def test_a_missing_path_is_asked_for(pfs):
    for method, endpoint in (("GET", "files"), ("DELETE", "files"), ("GET", "content"),
                             ("PUT", "content")):
        response = pfs.http.request(method, f"{pfs.base}/{endpoint}", data=b"x",
                                    headers={"X-Checksum-Sha256": sha(b"x")})
        with labelled(f"{method} {endpoint}"):
            body = check_error(response, 400, "invalid", "path")
            assert "required" in body["message"]


def test_requests_without_a_valid_token_are_refused(pfs, home):
    for authorization, code in ((None, "not_authenticated"),
                                ("Bearer pct_not-a-real-token", "invalid_token")):
        pfs.http.headers.pop("Authorization", None)
        if authorization:
            pfs.http.headers["Authorization"] = authorization
        for response in (pfs.ls(), pfs.get("f"), pfs.put("f", b"data"),
                         pfs.start("f", b"data"), pfs.patch("0" * 32, 0, b"data"),
                         pfs.usage_response()):
            with labelled(f"{code}: {response.request.method} {response.request.url}"):
                check_error(response, 401, code)

    assert on_disk(home) == {}


# -- usage, the storage quota and the size limit ---------------------------------------------


def test_usage_follows_uploads_and_removals(pfs, live_portal, home):
    set_storage_quota(live_portal, 100 * KiB)
    plant(home, {"old.bin": b"x" * 100})

    usage = pfs.usage()
    assert (usage["used"], usage["limit"]) == (100, 100 * KiB)
    assert (usage["used_display"], usage["limit_display"]) == ("100", "100Ki")
    assert usage["measured_at"]

    assert pfs.put("a.bin", b"a" * 300).status_code == 201
    assert pfs.usage()["used"] == 400
    assert pfs.put("a.bin", b"a" * 200).status_code == 201  # replacing: the difference
    assert pfs.usage()["used"] == 300
    upload_id = pfs.started("b.bin", b"b" * 1000)
    assert pfs.patch(upload_id, 0, b"b" * 1000).status_code == 201
    assert pfs.usage()["used"] == 1300
    assert pfs.rm("b.bin").status_code == 200
    assert pfs.usage()["used"] == 300
    assert pfs.put("t", tar_bytes(tar_member("f", b"f" * 50)), tar=True).status_code == 201
    assert pfs.usage()["used"] == 350
    assert pfs.rm("t", recursive=True).status_code == 200
    assert pfs.usage()["used"] == 300


def test_an_upload_over_the_quota_is_refused_before_storing(pfs, live_portal, home):
    set_storage_quota(live_portal, 1000)
    plant(home, {"old.bin": b"x" * 100})

    body = check_error(pfs.put("big.bin", os.urandom(2000)), 403, "quota_exceeded", "size")
    assert "quota" in body["message"]
    check_error(pfs.start("big.bin", os.urandom(2000)), 403, "quota_exceeded", "size")
    check_error(pfs.put("d", tar_bytes(tar_member("f", b"f")), tar=True), 403,
                "quota_exceeded", "size")  # a tar counts at its size (10 KiB here)

    assert on_disk(home) == {"old.bin": b"x" * 100}
    assert pfs.usage()["used"] == 100
    assert pfs.put("small.bin", os.urandom(900)).status_code == 201  # just fits
    check_error(pfs.put("one-more", b"x"), 403, "quota_exceeded", "size")


def test_an_upload_over_the_size_limit_is_refused(pfs, home, settings):
    settings.PADDLECLOUD_PFS_MAX_UPLOAD = 1000

    check_error(pfs.put("big.bin", os.urandom(2000)), 413, "too_large", "size")
    check_error(pfs.start("big.bin", os.urandom(2000)), 413, "too_large", "size")

    assert on_disk(home) == {}
    assert pfs.put("ok.bin", os.urandom(1000)).status_code == 201


# -- bugs found and fixed: each test states what a user should see ----------------------


def test_a_tar_link_through_another_link_may_not_lead_out(pfs, home):
    plant(home, {"victim.txt": b"precious"})
    data = tar_bytes(tar_dir("a"), tar_link("a/up", ".."), tar_link("b", "a/up/.."))

    check_error(pfs.put("dest", data, tar=True), 400, "unsafe_tar", "tar")

    assert on_disk(home) == {"victim.txt": b"precious"}


def test_a_tar_merge_refused_midway_changes_nothing(pfs, home):
    plant(home, {"d/a.txt": b"old", "d/z/keep": b"k"})
    before = on_disk(home)
    data = tar_bytes(tar_member("a.txt", b"new"), tar_member("z", b"a file onto a dir"))

    check_error(pfs.put("d", data, tar=True), 400, "is_a_directory", "path")

    assert on_disk(home) == before


def test_usage_after_a_tar_replaces_a_file(pfs, home):
    plant(home, {"d/a.txt": b"x" * 1000})
    assert pfs.usage()["used"] == 1000

    assert pfs.put("d", tar_bytes(tar_member("a.txt", b"y" * 1000)), tar=True).status_code == 201

    assert pfs.usage()["used"] == 1000


def test_usage_after_removing_a_directory_with_an_upload_in_progress(pfs, home):
    plant(home, {"d/f": b"x" * 100})
    assert pfs.usage()["used"] == 100
    upload_id = pfs.started("d/incoming", b"y" * 1000)
    assert pfs.patch(upload_id, 0, b"y" * 500).status_code == 200

    assert pfs.rm("d", recursive=True).status_code == 200

    assert pfs.usage()["used"] == 0


def test_the_temporaries_prefix_is_reserved(pfs, home):
    for response in (pfs.put(f"{TEMP}mine", b"x" * 100), pfs.mkdir(f"{TEMP}dir"),
                     pfs.start(f"{TEMP}later", b"x")):
        assert response.status_code == 400, response.text
        assert "path" in response.json()["fields"]

    assert on_disk(home) == {}


def test_a_malformed_upload_id_is_not_found(pfs):
    for upload_id in ("a" * 33, "-" * 36):
        with labelled(upload_id):
            check_error(pfs.patch(upload_id, 0, b"x"), 404, "not_found", "upload")


def test_a_malformed_upload_offset_is_refused(pfs):
    upload_id = pfs.started("f", b"abc")

    response = pfs.patch(upload_id, 0, b"abc", headers={"Upload-Offset": "\u00b2"})

    check_error(response, 400, "invalid", "Upload-Offset")


def test_a_resumable_upload_refused_at_completion_leaves_no_temporary(pfs, home):
    data = os.urandom(1000)
    upload_id = pfs.started("f", data, overwrite=False)
    assert pfs.patch(upload_id, 0, data[:500]).status_code == 200
    plant(home, {"f": b"someone else's"})

    check_error(pfs.patch(upload_id, 500, data[500:]), 409, "exists", "path")

    assert on_disk(home) == {"f": b"someone else's"}


def test_a_refused_upload_creates_no_parents(pfs, live_portal, home):
    set_storage_quota(live_portal, 1000)

    check_error(pfs.put("new/deep/f", os.urandom(2000), parents=True), 403, "quota_exceeded",
                "size")

    assert on_disk(home) == {}


def test_an_upload_whose_directory_was_removed_is_answered(pfs, home):
    data = os.urandom(1000)
    (home / "d").mkdir()
    upload_id = pfs.started("d/f", data)
    assert pfs.patch(upload_id, 0, data[:500]).status_code == 200
    assert pfs.rm("d", recursive=True).status_code == 200

    response = pfs.patch(upload_id, 500, data[500:])

    assert response.status_code in (404, 409), response.text
    check_error(response, response.status_code, response.json()["code"], "path")
    assert on_disk(home) == {}


def test_a_range_in_an_unknown_unit_is_ignored(pfs, home):
    plant(home, {"digits.txt": DIGITS})

    response = pfs.get("digits.txt", range="lines=1-2")

    assert (response.status_code, response.content) == (200, DIGITS)
