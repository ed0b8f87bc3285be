"""nginx in front of the portal (paddlecloud.front): downloads sent by nginx once the portal
has authorized them, with the same answers and the same refusals as the portal alone, never
through a link; runportal without nginx serving alone."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import socket
import socketserver
import tempfile
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import requests
import xxhash

from paddlecloud.front import BODY_DIR, FILES_LOCATION, NginxFront
from paddlecloud_client import transfer
from paddlecloud_client.api import ApiClient
from paddlecloud_client.progress import Progress
from paddlecloud_client.tokens import TokenCache
from tests.conftest import PASSWORD

from .test_api import (
    API,
    HOME,
    Pfs,
    bob,  # noqa: F401 - a fixture
    check_error,
    eventually,
    on_disk,
    set_storage_quota,
    temporaries,
)

MiB = 1 << 20


@pytest.fixture
def front(front_portal) -> Pfs:
    """alice's PFS through nginx."""
    pfs = Pfs(front_portal)
    yield pfs
    pfs.http.close()


@pytest.fixture
def direct(live_portal) -> Pfs:
    """alice's PFS through the portal alone (the same portal, its own port)."""
    pfs = Pfs(live_portal)
    yield pfs
    pfs.http.close()


def test_a_download_through_nginx_is_the_files_bytes_sent_by_nginx(front, direct, home):
    data = os.urandom(3 * MiB + 17)
    (home / "data.bin").write_bytes(data)

    got = front.get("data.bin")

    assert got.status_code == 200, got.text
    assert got.content == data
    assert got.headers["Server"] == "nginx"  # nginx sent the bytes, not the portal
    assert "X-Accel-Redirect" not in got.headers
    alone = direct.get("data.bin")
    for header in ("Content-Type", "Content-Disposition", "Content-Security-Policy",
                   "X-Content-Type-Options", "Accept-Ranges"):
        assert got.headers[header] == alone.headers[header], header
    assert int(got.headers["Content-Length"]) == len(data)


def test_ranges_and_head_through_nginx(front, home):
    data = os.urandom(MiB)
    (home / "data.bin").write_bytes(data)

    part = front.get("data.bin", range="bytes=1000-1999")
    tail = front.get("data.bin", range="bytes=-10")
    head = front.get("data.bin", method="HEAD")

    assert (part.status_code, part.content) == (206, data[1000:2000])
    assert part.headers["Content-Range"] == f"bytes 1000-1999/{len(data)}"
    assert (tail.status_code, tail.content) == (206, data[-10:])
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["Content-Length"] == str(len(data))
    # An unsatisfiable range is the portal's refusal, as without nginx.
    check_error(front.get("data.bin", range=f"bytes={len(data)}-"), 416, "range_not_satisfiable",
                "Range")


def test_a_text_file_keeps_the_portals_inert_type(front, home):
    (home / "page.html").write_bytes(b"<script>alert(1)</script>")
    (home / "notes.txt").write_bytes(b"hello")

    assert front.get("page.html").headers["Content-Type"] == "application/octet-stream"
    assert front.get("notes.txt").headers["Content-Type"].startswith("text/plain")


@pytest.mark.usefixtures("bob")
def test_the_front_refuses_what_the_portal_refuses(front, direct, front_portal, home):
    (home / "d").mkdir()
    bob_home = home.parent / "bob"
    bob_home.mkdir()
    (bob_home / "secret").write_bytes(b"bob's")
    anonymous = requests.get(f"{front_portal.url}{API}/content", params={"path": f"{HOME}/x"},
                             timeout=10)
    cases = {
        "anonymous": (anonymous, requests.get(f"{direct.portal.url}{API}/content",
                                              params={"path": f"{HOME}/x"}, timeout=10)),
        "missing": (front.get("nothing"), direct.get("nothing")),
        "another's home": (front.get("/pfs/datacenter1/home/bob/secret"),
                           direct.get("/pfs/datacenter1/home/bob/secret")),
        "bad path": (front.get("/etc/passwd"), direct.get("/etc/passwd")),
    }
    for label, (through_nginx, alone) in cases.items():
        assert through_nginx.status_code == alone.status_code >= 400, label
        assert through_nginx.json() == alone.json(), label
    assert anonymous.status_code == 401


def test_a_directory_still_comes_as_a_tar_through_the_front(front, home):
    (home / "d").mkdir()
    (home / "d" / "f").write_bytes(b"inside")

    got = front.get("d")

    assert got.status_code == 200
    assert got.headers["Content-Type"] == "application/x-tar"
    assert b"inside" in got.content


def test_links_in_a_home_are_taken_as_the_portal_takes_them(front, direct, home):
    (home / "real").mkdir()
    (home / "real" / "f").write_bytes(b"mine")
    (home / "alias").symlink_to("real")  # inside the area: followed, by the portal's rules
    bob_home = home.parent / "bob"
    bob_home.mkdir()
    (bob_home / "secret").write_bytes(b"bob's")
    (home / "out").symlink_to(bob_home)  # out of the area: refused
    (home / "leak").symlink_to(bob_home / "secret")

    assert front.get("alias/f").content == b"mine"
    for name in ("out/secret", "leak"):
        through_nginx, alone = front.get(name), direct.get(name)
        assert through_nginx.status_code == alone.status_code >= 400, name
        assert through_nginx.json() == alone.json(), name
        assert b"bob's" not in through_nginx.content


def test_the_internal_location_cannot_be_asked_for(front_portal, home):
    (home / "f").write_bytes(b"mine")

    got = requests.get(f"{front_portal.url}{FILES_LOCATION}datacenter1/home/alice/f",
                       timeout=10)

    assert got.status_code == 404
    assert b"mine" not in got.content


class _Redirecting(BaseHTTPRequestHandler):
    """A stand-in for the portal just after a job swapped a link in: it redirects nginx to
    whatever path the request names, as the portal would have after its check."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("X-Accel-Redirect", FILES_LOCATION + self.path.lstrip("/"))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)


@pytest.fixture
def nginx_before_a_swap(tmp_path):
    """The front's nginx, its portal replaced by ``_Redirecting``; the PFS root, mine's home
    holding d/f and f, and theirs's secret beside."""
    root = tmp_path / "pfs"
    mine, theirs = root / "dc" / "home" / "alice", root / "dc" / "home" / "bob"
    (mine / "d").mkdir(parents=True)
    (mine / "d" / "f").write_bytes(b"mine")
    (mine / "f").write_bytes(b"mine too")
    theirs.mkdir()
    (theirs / "f").write_bytes(b"theirs's")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    front = NginxFront(host="127.0.0.1", port=port, pfs_root=root, var_dir=tmp_path)
    server = _UnixServer(front.socket_path, _Redirecting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        front.start()
        yield f"http://127.0.0.1:{port}", mine, theirs
    finally:
        front.stop()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_nginx_follows_no_link_planted_after_the_portal_looked(nginx_before_a_swap):
    url, mine, theirs = nginx_before_a_swap
    # The stand-in works:
    assert requests.get(f"{url}/dc/home/alice/d/f", timeout=10).content == b"mine"
    (mine / "d").rename(mine / "d.real")
    (mine / "d").symlink_to(theirs)  # a directory on the path swapped for a link
    (mine / "f").unlink()
    (mine / "f").symlink_to(theirs / "f")  # the file itself swapped for a link
    (mine / "abs").symlink_to(theirs / "f")

    for name in ("d/f", "f", "abs"):
        got = requests.get(f"{url}/dc/home/alice/{urllib.parse.quote(name)}", timeout=10)
        assert got.status_code in (403, 404), name
        assert b"theirs's" not in got.content, name


def test_the_portals_root_itself_may_lie_under_a_link(tmp_path):
    """The PFS root is the administrator's (a mount under /mnt, say, reached by a link): only
    what lies below it is checked for links."""
    real = tmp_path / "real"
    (real / "dc").mkdir(parents=True)
    (real / "dc" / "f").write_bytes(b"ok")
    (tmp_path / "linked").symlink_to(real)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    front = NginxFront(host="127.0.0.1", port=port, pfs_root=tmp_path / "linked",
                       var_dir=tmp_path)
    server = _UnixServer(front.socket_path, _Redirecting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        front.start()
        assert requests.get(f"http://127.0.0.1:{port}/dc/f", timeout=10).content == b"ok"
    finally:
        front.stop()
        server.shutdown()
        server.server_close()
        thread.join(5)


# -- uploads through nginx -------------------------------------------------------------------


def body_dir(home: Path) -> Path:
    """Where the front's nginx takes bodies: below the PFS root (home is root/dc/home/alice)."""
    return home.parents[2] / BODY_DIR


def test_a_chunk_through_nginx_is_moved_into_place(front, home):
    data = os.urandom(2 * MiB + 3)
    started = front.start("f.bin", data, sha256=None, algorithm="xxh3-128")
    assert started.status_code == 201, started.text
    assert started.json()["chunk_size"] >= len(data)  # one chunk: nginx's file, renamed

    done = front.patch(started.json()["id"], 0, data, headers={"X-Checksum-Xxh3-128": xxh(data)})

    assert done.status_code == 201, done.text
    assert (home / "f.bin").read_bytes() == data
    assert temporaries(home) == []
    assert list(body_dir(home).iterdir()) == []


def test_a_later_chunk_through_nginx_is_appended(front, direct, home):
    data = os.urandom(300_000)
    upload_id = direct.started("f.bin", data)
    assert direct.patch(upload_id, 0, data[:100_000]).status_code == 200

    done = front.patch(upload_id, 100_000, data[100_000:])

    assert done.status_code == 201, done.text
    assert (home / "f.bin").read_bytes() == data
    assert list(body_dir(home).iterdir()) == []


def test_chunks_after_one_moved_into_place_are_appended(front, home):
    data = os.urandom(3 * MiB)
    upload_id = front.started("f.bin", data)

    first = front.patch(upload_id, 0, data[:2 * MiB])  # renamed into place
    last = front.patch(upload_id, 2 * MiB, data[2 * MiB:])  # written after it

    assert first.status_code == 200, first.text
    assert last.status_code == 201, last.text
    assert (home / "f.bin").read_bytes() == data
    assert list(body_dir(home).iterdir()) == []


def _headers_only(url: str, target: str, headers: dict[str, str]) -> bytes:
    """The answer to a request whose headers declare a body that is never sent."""
    parts = urllib.parse.urlsplit(url)
    lines = [f"PATCH {target} HTTP/1.1", f"Host: {parts.netloc}", "Connection: close",
             *(f"{key}: {value}" for key, value in headers.items()), "", ""]
    with socket.create_connection((parts.hostname, parts.port), timeout=20) as sock:
        sock.sendall("\r\n".join(lines).encode("latin-1"))
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


def test_a_chunk_is_refused_before_its_body_is_read(front, front_portal, home):
    data = os.urandom(100_000)
    upload_id = front.started("f.bin", data)
    target = f"{API}/uploads/{upload_id}"
    declared = {"Content-Length": str(len(data)), "Upload-Offset": "0"}

    anonymous = _headers_only(front_portal.url, target, declared)
    wrong_offset = _headers_only(
        front_portal.url, target,
        {"Content-Length": str(len(data) - 5), "Upload-Offset": "5",
         "Authorization": front.http.headers["Authorization"]})

    # Answered with the API's errors though the body never came: nginx asked the portal first.
    assert anonymous.startswith(b"HTTP/1.1 401"), anonymous[:200]
    assert b'"code": "not_authenticated"' in anonymous or b"authentication" in anonymous
    assert wrong_offset.startswith(b"HTTP/1.1 409"), wrong_offset[:200]
    assert b"offset_mismatch" in wrong_offset
    assert list(body_dir(home).iterdir()) == []
    assert front.offset(upload_id) == 0


def test_refusals_of_a_chunk_are_the_portals_own(front, direct, home):
    data = os.urandom(100_000)
    upload_id = direct.started("f.bin", data)
    gone = "0" * 8 + "-0000-0000-0000-" + "0" * 12

    for label, (through_nginx, alone) in {
        "offset": (front.patch(upload_id, 7, data[7:]), direct.patch(upload_id, 7, data[7:])),
        "too long": (front.patch(upload_id, 0, data + b"x"),
                     direct.patch(upload_id, 0, data + b"x")),
        "gone": (front.patch(gone, 0, data), direct.patch(gone, 0, data)),
    }.items():
        assert through_nginx.status_code == alone.status_code >= 400, label
        assert through_nginx.json() == alone.json(), label
    assert list(body_dir(home).iterdir()) == []


@pytest.mark.parametrize("path", ["front", "direct"])
def test_an_xxh3_mismatch_stores_nothing(path, request, home):
    """Through nginx (its body file goes too) and to the portal alone."""
    client = request.getfixturevalue(path)
    data = os.urandom(500_000)
    upload_id = client.started("f.bin", data, sha256=None, algorithm="xxh3-128")

    done = client.patch(upload_id, 0, data, headers={"X-Checksum-Xxh3-128": xxh(b"other")})

    check_error(done, 422, "checksum_mismatch", "checksum")
    assert on_disk(home) == {}
    assert temporaries(home) == []
    if path == "front":
        assert list(body_dir(home).iterdir()) == []


def test_the_quota_is_kept_through_nginx(front, front_portal, home):
    set_storage_quota(front_portal, 1000)

    refused = front.start("f.bin", os.urandom(5000))

    check_error(refused, 403, "quota_exceeded", "size")
    assert on_disk(home) == {}


# -- the fast digest --------------------------------------------------------------------------


def xxh(data: bytes) -> str:
    return xxhash.xxh3_128(data).hexdigest()


def test_a_resumable_upload_checked_with_xxh3(direct, home):
    data = os.urandom(300_000)
    started = direct.start("f.bin", data, sha256=None, algorithm="xxh3-128")
    assert started.status_code == 201, started.text
    assert started.json()["algorithm"] == "xxh3-128"
    upload_id = started.json()["id"]

    assert direct.patch(upload_id, 0, data[:100_000]).status_code == 200
    done = direct.patch(upload_id, 100_000, data[100_000:],
                        headers={"X-Checksum-Xxh3-128": xxh(data).upper()})

    assert done.status_code == 201, done.text
    assert (home / "f.bin").read_bytes() == data


def test_a_put_checked_with_xxh3(direct, home):
    data = os.urandom(10_000)
    headers = {"X-Checksum-Xxh3-128": xxh(data)}

    assert direct.put("f.bin", data, checksum=None, headers=headers).status_code == 201
    wrong = direct.put("g.bin", data, checksum=None, headers={"X-Checksum-Xxh3-128": "0" * 32})

    assert (home / "f.bin").read_bytes() == data
    check_error(wrong, 422, "checksum_mismatch", "checksum")
    assert "g.bin" not in on_disk(home)


def test_an_unknown_algorithm_or_a_malformed_digest_is_refused(direct, home):
    data = b"data"
    unknown = direct.start("f.bin", data, sha256=None, algorithm="md5")
    short = direct.start("f.bin", data, sha256=None, algorithm="xxh3-128", checksum="abc")
    upload_id = direct.started("f.bin", data, sha256=None, algorithm="xxh3-128")
    missing = direct.patch(upload_id, 0, data)  # the last chunk, and no checksum yet

    check_error(unknown, 400, "invalid", "algorithm")
    check_error(short, 400, "invalid", "checksum")
    check_error(missing, 400, "invalid", "X-Checksum-Xxh3-128")
    assert on_disk(home) == {}


def test_sha256_still_checks_an_upload(direct, home):
    data = os.urandom(50_000)
    upload_id = direct.started("f.bin", data)  # declared SHA-256, as older clients do

    assert direct.patch(upload_id, 0, data).status_code == 201
    assert (home / "f.bin").read_bytes() == data


# -- paddlectl's transfers through the front -----------------------------------------------------


def test_paddlectl_cp_up_and_down_through_nginx(front_portal, home, tmp_path):
    client = ApiClient(front_portal.url, "datacenter1", "alice", PASSWORD,
                       TokenCache(tmp_path / "tokens.json"))
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(20 * MiB + 5))  # over SINGLE_MAX: resumable, in chunks
    back = tmp_path / "back.bin"
    progress = Progress(io.StringIO(), "test", None, False)

    transfer.upload_file(client, source, f"{HOME}/big.bin", progress)
    transfer.download_file(client, f"{HOME}/big.bin", back, progress)

    assert hashlib.sha256((home / "big.bin").read_bytes()).digest() == \
        hashlib.sha256(source.read_bytes()).digest()
    assert back.read_bytes() == source.read_bytes()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".back")] == []
    assert list(body_dir(home).iterdir()) == []


# -- runportal --------------------------------------------------------------------------------


def _server(portal) -> str:
    return requests.get(f"http://127.0.0.1:{portal.port}/api/v1/", timeout=10).headers.get(
        "Server", "")


def _nginx_children(pid: int) -> list[int]:
    """The nginx processes started by process ``pid`` (its master, and that one's worker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                command = (entry / "cmdline").read_bytes()
            except (OSError, IndexError, ValueError):
                continue
            if parent == pid and command.startswith(b"nginx"):
                found.append(int(entry.name))
                found += _nginx_children(int(entry.name))
    return found


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if b"nginx" in Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.append(pid)
        except OSError:
            continue
    return alive


def test_runportal_puts_nginx_in_front_and_stops_it(portal_process):
    portal = portal_process()
    assert _server(portal) == "nginx"
    nginx = _nginx_children(portal.process.pid)
    assert len(nginx) == 2  # its master and its worker

    portal.stop()

    assert _alive(nginx) == []


def test_nginx_goes_with_a_portal_killed_outright(portal_process):
    in_tmp = set(Path(tempfile.gettempdir()).glob("paddlecloud-front-*"))
    portal = portal_process()
    nginx = _nginx_children(portal.process.pid)
    assert nginx

    portal.stop(kill=True)

    assert eventually(lambda: _alive(nginx) == [])
    # nginx's files were in the portal's var directory: nothing is left anywhere else
    assert set(Path(tempfile.gettempdir()).glob("paddlecloud-front-*")) == in_tmp


def test_runportal_serves_alone_when_nginx_is_off_or_missing(portal_process):
    without_nginx = ":".join(p for p in os.environ["PATH"].split(":")
                             if not os.access(os.path.join(p, "nginx"), os.X_OK))
    for portal in (portal_process(PADDLECLOUD_FRONT="off"), portal_process(PATH=without_nginx)):
        assert _server(portal) != "nginx"
        assert _nginx_children(portal.process.pid) == []


def _portal_connections(pid: int) -> int:
    """How many connections the portal process ``pid`` holds on its own socket
    (``portal.sock``): its sockets (/proc/PID/fd) that /proc/net/unix lists connected there."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    connected = 0
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        # Num RefCount Protocol Flags Type St Inode Path: St 03, connected
        if len(fields) == 8 and fields[6] in inodes and fields[5] == "03" \
                and fields[7].endswith("/portal.sock"):
            connected += 1
    return connected


def test_nginx_keeps_its_connections_to_the_portal_between_requests(portal_process):
    """nginx reuses its connections to the portal (``keepalive``): requests through it are not
    each a new connection the portal accepts, sets up and closes (the master's trainers make
    hundreds a second). WebSockets still upgrade through it."""
    portal = portal_process()
    url = f"http://127.0.0.1:{portal.port}/api/v1/version/"
    with requests.Session() as session:
        for _ in range(20):
            assert session.get(url, timeout=10).status_code == 200
    assert 1 <= _portal_connections(portal.process.pid) <= 2  # kept open, not one a request

    with socket.create_connection(("127.0.0.1", portal.port), timeout=10) as sock:
        site = f"127.0.0.1:{portal.port}".encode()
        sock.sendall(b"GET /ws/jobs/ HTTP/1.1\r\nHost: " + site + b"\r\nOrigin: http://" + site
                     + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Version: 13\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 101 ")
