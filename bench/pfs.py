"""Benchmark: PFS uploads and downloads through the API on the embedded default, beside ``cp``.

    .venv/bin/python bench/pfs.py [--size-mib 1024] [--files 10000] [--keep] [--repeat 3]
                                  [--client auto|paddlectl|requests] [--sync] [--no-prime]
                                  [--phases small,large,commands]

It starts the portal as an administrator would (``manage.py migrate``, ``adddatacenter``,
``adduser``, ``runportal``) in a fresh temporary PADDLECLOUD_VAR_DIR with its PFS root inside,
on the embedded default (SQLite, in-process worker, POSIX storage), and keeps the local data on
the same device. Then, each beside a plain ``cp`` of the same data on the same disk:

- a directory of N files of 4 KiB uploaded and downloaded the way users send a directory, as
  one tar stream (``cp -r``), and, as a secondary figure, 1000 of them uploaded one PUT each;
- one file of S/4 MiB, then one of S MiB, uploaded (resumable, in chunks) and downloaded;
- what users run, as whole processes: ``paddlectl cp`` of one S MiB file up, beside ``cp`` and
  beside nginx's WebDAV PUT of it with ``curl -T`` (a private nginx on 127.0.0.1, stopped at
  the end), and down, beside ``cp``.

Each figure is the best of --repeat rounds of cp and of the API, both reading a source in the
page cache and writing to fresh names. Every transfer is verified (size and SHA-256 of a file;
count, bytes and contents of a tree) before its figure is printed. The server's peak RSS
(VmHWM) is read per phase, to show it does not grow with the file size. The transfers go
through ``paddlecloud_client.transfer`` (what ``paddlectl cp`` runs) when it is importable with
the expected functions, else through ``requests`` directly; the output says which.

Figures go to standard output, progress to standard error. It exits 0 even when a target is
missed (the line says MISSED), 1 if a transfer failed or came out wrong, 130 on Ctrl-C. The
portal is always stopped and the temporary directory removed (unless --keep).
See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # portal.py, when this script is not run as bench/pfs.py
    sys.path.insert(0, str(BENCH))
from portal import (  # noqa: E402
    CONFIG_VARS,
    ROOT,
    BenchError,
    Portal,
    Stopped,
    free_port,
    handle_signals,
    log,
    run_checked,
)

if str(ROOT) not in sys.path:  # paddlecloud_client, when it is not installed
    sys.path.insert(0, str(ROOT))

DATACENTER = "datacenter1"
USERNAME = "bench"
HOME = f"/pfs/{DATACENTER}/home/{USERNAME}"
# Left out of the portal's environment: the benchmark runs the embedded default.
PFS_CONFIG_VARS = (*CONFIG_VARS, "PADDLECLOUD_PFS_MAX_UPLOAD", "PADDLECLOUD_PFS_CHUNK_SIZE")

SMALL_SIZE = 4096  # bytes per small file
FILES_PER_DIR = 100  # the small files are spread over subdirectories of this many
PER_FILE_COUNT = 1000  # files sent one PUT each (the secondary figure)
COMMAND_UP_TARGET = 0.80  # paddlectl cp up, of nginx's WebDAV PUT (curl -T): issue 42
COMMAND_DOWN_TARGET = 0.60  # paddlectl cp down, of cp: issue 42
SMALL_TARGET = 3000.0  # files/s each way, for the small files as a tar stream (issue 21)
MEMORY_GROWTH_MAX = 32 << 20  # bytes: "independent of file size" (the file grows by 768 MiB)
BLOCK = 1 << 20  # bytes read or written at a time by this script
SINGLE_MAX = 8 << 20  # the requests client: larger bodies go up in resumable chunks

CP_TIMEOUT = 1800.0  # one cp
REQUEST_TIMEOUT = 600.0  # one HTTP request of the requests client


def mib_label(mib: int) -> str:
    return f"{mib // 1024} GiB" if mib % 1024 == 0 else f"{mib} MiB"


# --- the portal --------------------------------------------------------------------------------


class PfsPortal(Portal):
    """The portal set up as an administrator would (migrate, ``adddatacenter``, ``adduser``
    with a storage quota), its PFS root inside its var directory; nginx in front
    (``runportal --front on``: paddlecloud/front.py) when nginx is installed."""

    config_vars = PFS_CONFIG_VARS
    serve_args = ("--front", "on") if shutil.which("nginx") else ("--front", "off")

    def __init__(self, port: int, *, keep: bool):
        super().__init__(port, keep=keep, prefix="paddlecloud-bench-pfs-")
        self.pfs_root = self.var / "pfs"
        self.home = self.pfs_root / DATACENTER / "home" / USERNAME  # HOME, on disk
        self.password = hashlib.sha256(os.urandom(32)).hexdigest()[:24]

    def extra_env(self) -> dict[str, str]:
        return {"PADDLECLOUD_PFS_ROOT": str(self.pfs_root), "BENCH_PASSWORD": self.password}

    def setup(self) -> None:
        super().setup()
        self.manage("adddatacenter", DATACENTER, "--description", "bench/pfs.py")
        # The default storage quota (10 GiB) is enough for the defaults; a larger --size-mib
        # is not: room for everything this run stores.
        self.manage("adduser", USERNAME, "--password-env", "BENCH_PASSWORD",
                    "--datacenter", DATACENTER, "--storage", "1Ti")


class PlainPortal(PfsPortal):
    """A second ``runportal`` on the same var directory and database, without nginx
    (``--front off``, no worker): the pure-Python path, measured in the same run."""

    serve_args = ("--front", "off", "--no-worker")

    def __init__(self, port: int, first: PfsPortal):
        Portal.__init__(self, port, keep=False, prefix="paddlecloud-bench-pfs-plain-")
        os.rmdir(self.tmp)
        self.tmp, self.var, self.pfs_root = first.tmp, first.var, first.pfs_root
        self.home, self.password = first.home, first.password
        self.log_path = first.tmp / "portal-plain.log"

    def setup(self) -> None:
        pass  # the first portal's

    def cleanup(self) -> None:
        pass  # the first portal's directory


# --- the server's memory -----------------------------------------------------------------------


class Memory:
    """The server process's resident set, from /proc/<pid>/status.

    VmHWM is the peak RSS. Writing 5 to /proc/<pid>/clear_refs (allowed on our own child)
    resets it to the current RSS, so each phase's peak is its own; where that is refused, the
    peaks are the process's lifetime peaks so far (which still only grow with what it held).
    """

    def __init__(self, pid: int):
        self.pid = pid
        self.per_phase = True

    def field(self, name: str) -> int:
        """A ``Vm…`` line of /proc/<pid>/status, in bytes."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith(f"{name}:"):
                    return int(line.split()[1]) * 1024
        raise BenchError(f"no {name} in /proc/{self.pid}/status")

    def reset_peak(self) -> None:
        if not self.per_phase:
            return
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as clear:
                clear.write("5")
        except OSError as exc:
            log(f"cannot reset the server's VmHWM ({exc}): lifetime peaks from here on")
            self.per_phase = False

    def peak(self) -> int:
        return self.field("VmHWM")


def mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


# --- the clients -------------------------------------------------------------------------------


class Unusable(Exception):
    """paddlecloud_client.transfer is not (yet) there, or not in the shape this script expects."""


class Transfers:
    """Uploads and downloads through the API, the way one client does them."""

    name = ""
    description = ""

    def upload_file(self, local: Path, remote: str) -> None: ...
    def upload_dir(self, local: Path, remote: str) -> None: ...
    def download_file(self, remote: str, dest: Path) -> None: ...
    def download_dir(self, remote: str, dest: Path) -> None: ...
    def mkdir(self, remote: str) -> None: ...
    def remove(self, remote: str) -> None: ...
    def close(self) -> None: ...


EXPECTED = {  # paddlecloud_client.transfer's functions and their leading parameters
    "upload_file": ["client", "local", "remote", "progress"],
    "upload_dir": ["client", "local", "remote", "progress", "warn"],
    "download_file": ["client", "remote", "dest", "progress"],
    "download_dir": ["client", "remote", "dest", "progress", "warn"],
}


class PaddlectlTransfers(Transfers):
    """``paddlecloud_client.transfer`` over a ``paddlecloud_client.api.ApiClient``: what
    ``paddlectl cp`` runs (no progress bar)."""

    name = "paddlectl"

    def __init__(self, base: str, password: str, tmp: Path):
        try:
            from paddlecloud_client import transfer
            from paddlecloud_client.api import ApiClient
            from paddlecloud_client.progress import Progress
            from paddlecloud_client.tokens import TokenCache
        except Exception as exc:  # being written: anything may be missing
            raise Unusable(f"cannot import it ({type(exc).__name__}: {exc})") from None
        for name, params in EXPECTED.items():
            function = getattr(transfer, name, None)
            if not callable(function):
                raise Unusable(f"paddlecloud_client.transfer has no {name}()")
            got = list(inspect.signature(function).parameters)[:len(params)]
            if got != params:
                raise Unusable(f"paddlecloud_client.transfer.{name}{inspect.signature(function)}: "
                               f"expected ({', '.join(params)}, ...)")
        got = list(inspect.signature(ApiClient).parameters)[:5]
        if got != ["endpoint", "datacenter", "username", "password", "token_cache"]:
            raise Unusable(f"paddlecloud_client.api.ApiClient{inspect.signature(ApiClient)}")
        self.transfer = transfer
        self.progress = lambda: Progress(sys.stderr, "bench", None, False)
        self.client = ApiClient(base, DATACENTER, USERNAME, password,
                                TokenCache(tmp / "paddlectl-tokens.json"))
        self.description = ("paddlectl: paddlecloud_client.transfer.upload_file / upload_dir "
                            "/ download_file / download_dir over "
                            "paddlecloud_client.api.ApiClient (requests), as `paddlectl cp` "
                            "runs them")

    def upload_file(self, local, remote):
        self.transfer.upload_file(self.client, local, remote, self.progress())

    def upload_dir(self, local, remote):
        self.transfer.upload_dir(self.client, local, remote, self.progress(), log)

    def download_file(self, remote, dest):
        self.transfer.download_file(self.client, remote, dest, self.progress())

    def download_dir(self, remote, dest):
        self.transfer.download_dir(self.client, remote, dest, self.progress(), log)

    def mkdir(self, remote):
        self.client.call("POST", "/api/v1/pfs/mkdir", json={"path": remote, "parents": True})

    def remove(self, remote):
        self.client.call("DELETE", "/api/v1/pfs/files",
                         params={"path": remote, "recursive": 1})

    def close(self):
        self.client.session.close()


class Window:
    """``length`` bytes of ``file`` from ``start``, as a request body: iterable in 1 MiB
    blocks, with a length (so requests sends Content-Length, not chunks)."""

    def __init__(self, file, start: int, length: int):
        self.file, self.start, self.length = file, start, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[bytes]:
        self.file.seek(self.start)
        left = self.length
        while left:
            block = self.file.read(min(BLOCK, left))
            if not block:
                raise BenchError("the local file shrank while it was sent")
            left -= len(block)
            yield block


class BlockReader:
    """A readable file over an iterator of blocks (a streamed response, for tarfile)."""

    def __init__(self, blocks: Iterator[bytes]):
        self.blocks, self.pending = blocks, b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.pending) < size:
            block = next(self.blocks, b"")
            if not block:
                break
            self.pending += block
        if size < 0:
            size = len(self.pending)
        data, self.pending = self.pending[:size], self.pending[size:]
        return data


class RequestsTransfers(Transfers):
    """The API straight through ``requests``, streaming: file objects as bodies, uploads over
    8 MiB resumable in the server's chunk size, downloads read with ``iter_content(1 MiB)``."""

    name = "requests"
    description = ("requests: the HTTP API directly (streaming bodies; resumable uploads over "
                   "8 MiB; iter_content(1 MiB))")

    def __init__(self, base: str, password: str):
        import requests

        self.requests = requests
        self.base = base
        self.session = requests.Session()
        response = self.session.post(f"{base}/api/v1/auth/token/", timeout=REQUEST_TIMEOUT,
                                     json={"username": USERNAME, "password": password,
                                           "datacenter": DATACENTER, "name": "bench"})
        self.check(response, "POST /api/v1/auth/token/")
        self.session.headers["Authorization"] = f"Bearer {response.json()['token']}"

    @staticmethod
    def check(response, what: str):
        if not response.ok:
            raise BenchError(f"{what} answered {response.status_code}: {response.text[:500]}")
        return response

    def send(self, file, size: int, digest: str, remote: str, kind: str) -> None:
        if size <= SINGLE_MAX:
            headers = {"X-Checksum-Sha256": digest, "Content-Type":
                       "application/x-tar" if kind == "tar" else "application/octet-stream"}
            self.check(self.session.put(f"{self.base}/api/v1/pfs/content",
                                        params={"path": remote}, headers=headers,
                                        data=Window(file, 0, size), timeout=REQUEST_TIMEOUT),
                       f"PUT {remote}")
            return
        upload = self.check(self.session.post(
            f"{self.base}/api/v1/pfs/uploads", timeout=REQUEST_TIMEOUT,
            json={"path": remote, "size": size, "sha256": digest, "kind": kind,
                  "overwrite": True, "parents": False}), f"POST upload of {remote}").json()
        url = f"{self.base}/api/v1/pfs/uploads/{upload['id']}"
        offset, chunk = upload.get("offset", 0), upload["chunk_size"]
        while True:
            length = min(chunk, size - offset)
            answer = self.check(self.session.patch(
                url, headers={"Upload-Offset": str(offset),
                              "Content-Type": "application/offset+octet-stream"},
                data=Window(file, offset, length), timeout=REQUEST_TIMEOUT),
                f"PATCH {remote} at {offset}")
            result = answer.json()
            if answer.status_code == 201 or result.get("complete"):
                return
            offset = result["offset"]

    def upload_file(self, local, remote):
        with open(local, "rb") as file:
            digest = hashlib.file_digest(file, "sha256").hexdigest()
            self.send(file, file.tell(), digest, remote, "file")

    def upload_dir(self, local, remote):
        with tempfile.SpooledTemporaryFile(64 << 20) as spool:
            with tarfile.open(fileobj=spool, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for folder, dirs, files in os.walk(local):
                    dirs.sort()
                    for name in sorted(dirs) + sorted(files):
                        path = Path(folder, name)
                        tar.add(path, arcname=path.relative_to(local).as_posix(),
                                recursive=False)
            size = spool.tell()
            spool.seek(0)
            digest = hashlib.file_digest(spool, "sha256").hexdigest()
            self.send(spool, size, digest, remote, "tar")

    def get(self, remote: str):
        response = self.session.get(f"{self.base}/api/v1/pfs/content", params={"path": remote},
                                    stream=True, timeout=REQUEST_TIMEOUT)
        return self.check(response, f"GET {remote}")

    def download_file(self, remote, dest):
        temp = dest.with_name(f".{dest.name}.part")
        with self.get(remote) as response, open(temp, "wb") as out:
            for block in response.iter_content(BLOCK):
                out.write(block)
        os.replace(temp, dest)

    def download_dir(self, remote, dest):
        dest.mkdir()
        with self.get(remote) as response, tarfile.open(
                fileobj=BlockReader(response.iter_content(BLOCK)), mode="r|") as tar:
            tar.extractall(dest, filter="data")

    def mkdir(self, remote):
        self.check(self.session.post(f"{self.base}/api/v1/pfs/mkdir", timeout=REQUEST_TIMEOUT,
                                     json={"path": remote, "parents": True}),
                   f"mkdir {remote}")

    def remove(self, remote):
        self.check(self.session.delete(f"{self.base}/api/v1/pfs/files", timeout=REQUEST_TIMEOUT,
                                       params={"path": remote, "recursive": 1}),
                   f"remove {remote}")

    def close(self):
        self.session.close()


def make_transfers(choice: str, base: str, password: str, tmp: Path) -> Transfers:
    if choice in ("auto", "paddlectl"):
        try:
            return PaddlectlTransfers(base, password, tmp)
        except Unusable as exc:
            if choice == "paddlectl":
                raise BenchError("--client paddlectl: paddlecloud_client.transfer is unusable: "
                                 f"{exc}") from None
            log(f"paddlecloud_client.transfer is unusable ({exc}): using requests directly")
    return RequestsTransfers(base, password)


# --- the peers of whole commands: nginx's WebDAV PUT, and paddlectl ------------------------------

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{
            dav_methods PUT;
            client_max_body_size 0;
            client_body_buffer_size 4m;  # as the portal's front: nginx at its best
        }}
    }}
}}
"""


class Nginx:
    """A private nginx on 127.0.0.1 taking WebDAV PUTs into ``root`` (its request bodies
    spooled beside it, then renamed in, as nginx does): the HTTP upload a web server makes of
    the same file on the same disk. A context manager: stopped however the phase ends."""

    def __init__(self, tmp: Path, root: Path):
        self.tmp, self.root = tmp, root
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Nginx:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.access(binary, os.X_OK):
            raise BenchError("nginx is not installed (Debian: apt-get install nginx-light)")
        if not shutil.which("curl"):
            raise BenchError("curl is not installed (Debian: apt-get install curl)")
        self.tmp.mkdir()
        (self.tmp / "body").mkdir()
        self.root.mkdir()
        conf = self.tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=self.tmp, port=self.port, root=self.root))
        self.process = subprocess.Popen(  # noqa: S603 - the system's nginx, our config
            [binary, "-p", str(self.tmp), "-c", str(conf), "-e", str(self.tmp / "nginx.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"nginx exited {self.process.returncode} at start: "
                                 f"{self.process.stderr.read().decode(errors='replace')[:500]}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1):
                log(f"nginx up on 127.0.0.1:{self.port} (pid {self.process.pid})")
                return self
            time.sleep(0.1)
        raise BenchError("nginx did not listen within 10 s")

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None:
            self.process.stderr.close()
            log("nginx stopped")

    def put(self, local: Path, name: str) -> None:
        """``curl -T local`` to ``name``, as a user uploads to a WebDAV server."""
        run_checked(["curl", "-sS", "--fail", "-o", "/dev/null", "-T", str(local),
                     f"http://127.0.0.1:{self.port}/{name}"], timeout=CP_TIMEOUT,
                    name=f"curl -T {local.name}", stderr_max=500)


class Paddlectl:
    """The ``paddlectl`` command as a user runs it, a process of its own, its config (with the
    bench user's password) and token cache in a HOME of its own."""

    def __init__(self, tmp: Path, base: str, password: str, name: str = "cli-home"):
        self.binary = shutil.which("paddlectl", path=str(Path(sys.executable).parent))
        if self.binary is None:
            raise BenchError(f"paddlectl is not installed beside {sys.executable}")
        home = tmp / name
        config = home / ".paddle" / "config"
        config.parent.mkdir(parents=True)
        config.write_text(f"datacenters:\n- name: {DATACENTER}\n  username: {USERNAME}\n"
                          f"  password: {password}\n  endpoint: {base}\n"
                          f"current-datacenter: {DATACENTER}\n")
        config.chmod(0o600)
        self.env = {**{k: v for k, v in os.environ.items() if k not in PFS_CONFIG_VARS},
                    "HOME": str(home), "PADDLE_CONFIG": str(config),
                    "NO_PROXY": "127.0.0.1,localhost"}

    def __call__(self, *args: str) -> None:
        run_checked([self.binary, *args], timeout=CP_TIMEOUT, env=self.env,
                    name=f"paddlectl {' '.join(args[:1])}",
                    full_name=f"paddlectl {' '.join(args)}", separator=" ", stderr_max=1000)


# --- data and checks ---------------------------------------------------------------------------


def write_random_file(path: Path, size: int) -> str:
    """A file of ``size`` random bytes; its SHA-256."""
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        left = size
        while left:
            block = os.urandom(min(BLOCK, left))
            digest.update(block)
            out.write(block)
            left -= len(block)
    return digest.hexdigest()


def small_names(count: int) -> list[str]:
    """Relative names of the small files: unique base names, FILES_PER_DIR per directory."""
    width = len(str(count - 1))
    return [f"d{i // FILES_PER_DIR:03d}/f{i:0{width}d}.bin" for i in range(count)]


def write_small_tree(root: Path, names: list[str]) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(SMALL_SIZE))


def file_sum(path: Path) -> tuple[int, str]:
    with open(path, "rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
        return file.tell(), digest


@dataclass(frozen=True)
class TreeSum:
    files: int
    size: int
    digest: str  # over the sorted relative names and contents


def tree_sum(root: Path) -> TreeSum:
    """Regular files below ``root`` (hidden temporaries included: there must be none)."""
    paths = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    digest = hashlib.sha256()
    size = 0
    for path in paths:
        data = path.read_bytes()
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(data).digest())
        size += len(data)
    return TreeSum(len(paths), size, digest.hexdigest())


def expect_file(path: Path, size: int, digest: str, what: str) -> None:
    if not path.is_file():
        raise BenchError(f"{what}: {path} is not there")
    got_size, got_digest = file_sum(path)
    if (got_size, got_digest) != (size, digest):
        raise BenchError(f"{what}: {path} has {got_size} bytes, SHA-256 {got_digest}; "
                         f"expected {size} bytes, {digest}")


def expect_tree(root: Path, expected: TreeSum, what: str) -> None:
    got = tree_sum(root)
    if got != expected:
        raise BenchError(f"{what}: {root} holds {got.files} files, {got.size} bytes "
                         f"(contents {'differ' if got.digest != expected.digest else 'match'}); "
                         f"expected {expected.files} files, {expected.size} bytes")


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def run_cp(*args: str) -> None:
    run_checked(["cp", *args], timeout=CP_TIMEOUT, name=f"cp {' '.join(args[:3])} ...",
                separator=" ", stderr_max=500)


# --- one measurement ---------------------------------------------------------------------------


@dataclass
class Figure:
    direction: str  # upload / download
    what: str  # "1 GiB file", "10000 x 4 KiB"
    unit: str  # "MB/s" or "files/s"
    api: float  # rate through the API
    cp: float  # rate of the peer (cp, unless ``peer`` says otherwise)
    target: str  # "target >= 0.50", "target >= 500 files/s", "secondary: ..."
    ok: bool | None  # None: no target
    peer: str = "cp"  # what the API is compared with: "cp", "nginx PUT"

    def line(self) -> str:
        def rate(value: float) -> str:
            return f"{value:7.1f} MB/s" if self.unit == "MB/s" else f"{value:6.0f} files/s"

        verdict = "" if self.ok is None else ("  OK" if self.ok else "  MISSED")
        return (f"{self.direction:<8} {self.what:<15} {rate(self.api)}   {self.peer} "
                f"{rate(self.cp)}   ratio {self.api / self.cp:.2f}  ({self.target}){verdict}")

    def json_line(self) -> str:
        """The figure as one JSON line: its value, its peer's, the ratio beside its goal."""
        return json.dumps({
            "bench": "pfs", "direction": self.direction, "what": self.what, "unit": self.unit,
            "value": round(self.api, 1), "peer": self.peer, "peer_value": round(self.cp, 1),
            "ratio": round(self.api / self.cp, 3), "goal": self.target,
            "verdict": None if self.ok is None else ("OK" if self.ok else "MISSED")})


def nothing(_round: int) -> None:
    pass


@dataclass
class Side:
    """One side of a comparison: what a round runs (timed), checks and prepares (untimed)."""

    name: str
    run: Callable[[int], None]
    verify: Callable[[int], None] = nothing
    prepare: Callable[[int], None] = nothing


class Bench:
    """The measurements. Every round writes to fresh names, and what the rounds wrote is
    removed only at the end of a phase: ext4 skips inodes freed in the last 30 s when it
    allocates new ones (``recently_deleted``), and after removing a tree of 10 000 files,
    creating the next one costs seconds of kernel time, whichever side comes next."""

    def __init__(self, portal: PfsPortal, transfers: Transfers, memory: Memory, local: Path, *,
                 repeat: int, prime: bool, sync: bool):
        self.portal = portal
        self.transfers = transfers
        self.memory = memory
        self.local = local  # the local side: sources and destinations
        self.repeat = repeat
        self.prime = prime
        self.sync = sync
        self.figures: list[Figure] = []
        self.peaks: dict[str, int] = {}
        self.trash: list[Path | str] = []  # local paths, and remote names below HOME
        self.plain: PlainPortal | None = None  # the portal without nginx, beside the front

    def emit(self, figure: Figure) -> None:
        self.figures.append(figure)
        print(figure.line(), flush=True)
        print(figure.json_line(), flush=True)

    def phase(self, name: str, body: Callable[[], None]) -> None:
        self.memory.reset_peak()
        body()
        self.peaks[name] = self.memory.peak()
        log(f"{name}: server peak RSS {mib(self.peaks[name])}")
        self.empty_trash()

    def empty_trash(self) -> None:
        for item in self.trash:
            if isinstance(item, Path):
                remove(item)
            elif (self.portal.home / item).exists():
                self.transfers.remove(f"{HOME}/{item}")
        self.trash.clear()

    def timed(self, step: Callable[[], None], size: int) -> float:
        """Seconds ``step`` takes, moving about ``size`` bytes. It starts with no dirty pages
        left by an earlier step (a sync) and, unless --no-prime, with at least twice ``size``
        of recently freed memory: on a virtual machine whose balloon takes freed memory back
        (free page reporting), writing into memory never touched costs about 3 s per GiB,
        which would go to whichever side allocates first. With --sync, the step's own sync
        (its data on disk) is timed too."""
        os.sync()
        if self.prime:
            scratch = self.local / "prime.scratch"
            zeros = bytes(BLOCK)
            fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                for _ in range(max(2 * size, 64 << 20) // BLOCK):
                    os.write(fd, zeros)
            finally:
                os.close(fd)
                os.unlink(scratch)  # its pages are dropped unwritten, and free for the step
        start = time.perf_counter()
        step()
        if self.sync:
            os.sync()
        return time.perf_counter() - start

    def rounds(self, label: str, size: int, warm: Callable[[], None],
               sides: list[Side]) -> list[float]:
        """The best seconds of each side over ``repeat`` rounds, after ``warm()`` (which puts
        the source in the page cache). In each round the sides run in turn: ``prepare(n)``
        (untimed), ``run(n)`` (timed, see ``timed``), then ``verify(n)`` checks its result."""
        warm()
        times: list[list[float]] = [[] for _ in sides]
        for n in range(1, self.repeat + 1):
            for side, seconds in zip(sides, times, strict=True):
                side.prepare(n)
                seconds.append(self.timed(lambda n=n, side=side: side.run(n), size))
                side.verify(n)
            log(f"{label} #{n}: " + ", ".join(
                f"{side.name} {seconds[-1]:.3f} s" for side, seconds in zip(sides, times,
                                                                          strict=True))
                + " (verified)")
        return [min(seconds) for seconds in times]

    def compare(self, label: str, *, size: int, cp: Callable[[Path], list[str]],
                cp_dest: str, api: Callable[[int], None], verify: Callable[[int], None],
                prepare: Callable[[int], None] = nothing) -> tuple[float, float]:
        """The best (cp seconds, API seconds) of ``repeat`` rounds. A warm-up cp first puts the
        source in the page cache; each round n times cp (arguments ``cp(destination)``) to
        the fresh destination ``cp_dest.n``, then, after ``prepare(n)`` (untimed), the API
        transfer ``api(n)``, whose result ``verify(n)`` checks."""

        def copy(dest: Path) -> None:
            self.trash.append(dest)
            run_cp(*cp(dest))

        cp_s, api_s = self.rounds(
            label, size, lambda: copy(self.local / f"{cp_dest}.warm-up"),
            [Side("cp", lambda n: copy(self.local / f"{cp_dest}.{n}")),
             Side("API", api, verify, prepare)])
        return cp_s, api_s

    def warm_up(self) -> None:
        """One small upload and download: logs in, and imports what the first request would."""
        source = self.local / "warm-up.bin"
        digest = write_random_file(source, 100_000)
        self.transfers.upload_file(source, f"{HOME}/warm-up.bin")
        self.transfers.download_file(f"{HOME}/warm-up.bin", self.local / "warm-up.back")
        expect_file(self.local / "warm-up.back", 100_000, digest, "warm-up download")
        self.peaks["after start"] = self.memory.peak()

    def small_files(self, count: int) -> None:
        names = small_names(count)
        source = self.local / "small"
        self.trash.append(source)
        log(f"writing {count} files of {SMALL_SIZE} bytes")
        write_small_tree(source, names)
        expected = tree_sum(source)
        what = f"{count} x 4 KiB"
        target = f"target >= {SMALL_TARGET:.0f} files/s"

        def upload(n: int) -> None:
            self.trash.append(f"small.{n}")
            self.transfers.upload_dir(source, f"{HOME}/small.{n}")

        cp_s, api_s = self.compare(
            f"upload {what}", size=expected.size, cp=lambda d: ["-r", str(source), str(d)],
            cp_dest="small.cp", api=upload,
            verify=lambda n: expect_tree(self.portal.home / f"small.{n}", expected,
                                         "upload of the small files"))
        rate = count / api_s
        self.emit(Figure("upload", what, "files/s", rate, count / cp_s, target,
                         rate >= SMALL_TARGET))

        def download(n: int) -> None:
            self.trash.append(self.local / f"small.back.{n}")
            self.transfers.download_dir(f"{HOME}/small.1", self.local / f"small.back.{n}")

        cp_s, api_s = self.compare(
            f"download {what}", size=expected.size,
            cp=lambda d: ["-r", str(self.portal.home / "small.1"), str(d)],
            cp_dest="small.back.cp", api=download,
            verify=lambda n: expect_tree(self.local / f"small.back.{n}", expected,
                                         "download of the small files"))
        rate = count / api_s
        self.emit(Figure("download", what, "files/s", rate, count / cp_s, target,
                         rate >= SMALL_TARGET))

        # The secondary figure: PER_FILE_COUNT of them, one PUT each, beside one cp of them.
        chosen = names[:PER_FILE_COUNT]
        paths = [source / name for name in chosen]
        want = sum(path.stat().st_size for path in paths)

        def prepare(n: int) -> None:
            self.trash.append(f"puts.{n}")
            self.transfers.mkdir(f"{HOME}/puts.{n}")

        def put_each(n: int) -> None:
            for path in paths:
                self.transfers.upload_file(path, f"{HOME}/puts.{n}/{path.name}")

        def check(n: int) -> None:
            got = tree_sum(self.portal.home / f"puts.{n}")
            if (got.files, got.size) != (len(chosen), want):
                raise BenchError(f"per-file uploads: {got.files} files, {got.size} bytes "
                                 f"stored; expected {len(chosen)} files, {want} bytes")

        def cp_each(dest: Path) -> list[str]:
            dest.mkdir()
            return ["-t", str(dest), *map(str, paths)]

        cp_s, api_s = self.compare(f"upload {len(chosen)} files one PUT each", size=want,
                                   cp=cp_each, cp_dest="puts.cp", prepare=prepare,
                                   api=put_each, verify=check)
        self.emit(Figure("upload", f"{len(chosen)} x 4 KiB", "files/s", len(chosen) / api_s,
                         len(chosen) / cp_s, "secondary: one PUT per file, no target", None))

    def random_source(self, name: str, size_mib: int,
                      note: str = "") -> tuple[int, str, Path, str]:
        """A file of ``size_mib`` random MiB, ``name.bin`` in the local directory (removed with
        the phase): its size, its label ("1 GiB file"), its path and its SHA-256."""
        size = size_mib << 20
        what = f"{mib_label(size_mib)} file"
        source = self.local / f"{name}.bin"
        self.trash.append(source)
        log(f"writing {what}{note}")
        return size, what, source, write_random_file(source, size)

    def large_file(self, size_mib: int) -> None:
        name = f"large-{size_mib}M"
        size, what, source, digest = self.random_source(name, size_mib)

        def upload(n: int) -> None:
            self.trash.append(f"{name}.{n}.bin")
            self.transfers.upload_file(source, f"{HOME}/{name}.{n}.bin")

        cp_s, api_s = self.compare(
            f"upload {what}", size=size, cp=lambda d: [str(source), str(d)],
            cp_dest=f"{name}.cp", api=upload,
            verify=lambda n: expect_file(self.portal.home / f"{name}.{n}.bin", size, digest,
                                         f"upload of the {what}"))
        self.emit(self.large_figure("upload", what, size, cp_s, api_s))

        def download(n: int) -> None:
            self.trash.append(self.local / f"{name}.back.{n}")
            self.transfers.download_file(f"{HOME}/{name}.1.bin", self.local / f"{name}.back.{n}")

        cp_s, api_s = self.compare(
            f"download {what}", size=size,
            cp=lambda d: [str(self.portal.home / f"{name}.1.bin"), str(d)],
            cp_dest=f"{name}.back.cp", api=download,
            verify=lambda n: expect_file(self.local / f"{name}.back.{n}", size, digest,
                                         f"download of the {what}"))
        self.emit(self.large_figure("download", what, size, cp_s, api_s))

    def commands(self, size_mib: int) -> None:
        """What users run, as whole processes: ``paddlectl cp`` of one file up, beside ``cp``
        and beside nginx's WebDAV PUT with ``curl -T`` (the HTTP upload a web server makes
        here); and down, beside ``cp``. Each includes the command's start, its login from
        the token cache and its own checks. Both of the portal's paths are measured in the
        same rounds: through its nginx front (when nginx is installed) and through the
        portal alone (a second runportal, --front off)."""
        name = f"command-{size_mib}M"
        size, what, source, digest = self.random_source(name, size_mib, " (whole commands)")
        clis = {}
        for label, portal in self.paths():
            clis[label] = Paddlectl(self.portal.tmp, portal.base, self.portal.password,
                                    name=f"cli-home-{label.replace(' ', '-')}")
            clis[label]("ls", HOME)  # logs in: the token is cached, as after a first command
        nginx_root = self.local / "nginx-root"
        self.trash += [self.local / "nginx", nginx_root]

        def copy(source: Path, dest: Path) -> None:
            self.trash.append(dest)
            run_cp(str(source), str(dest))

        def stored(label: str):
            def check(n: int) -> None:
                remote = f"{name}.{label.replace(' ', '-')}.{n}.bin"
                self.trash.append(remote)
                expect_file(self.portal.home / remote, size, digest,
                            f"paddlectl cp of the {what} up ({label})")
            return check

        def up(label: str):
            return lambda n: clis[label]("cp", str(source),
                                         f"{HOME}/{name}.{label.replace(' ', '-')}.{n}.bin")

        with Nginx(self.local / "nginx", nginx_root) as nginx:
            cp_s, nginx_s, *cli_s = self.rounds(
                f"upload {what}, whole commands", size,
                lambda: copy(source, self.local / f"{name}.warm-up"),
                [Side("cp", lambda n: copy(source, self.local / f"{name}.cp.{n}")),
                 Side("nginx PUT", lambda n: nginx.put(source, f"{name}.{n}.bin"),
                      lambda n: expect_file(nginx_root / f"{name}.{n}.bin", size, digest,
                                            f"nginx PUT of the {what}")),
                 *(Side(f"paddlectl cp ({label})", up(label), stored(label))
                   for label in clis)])
        nginx_rate, cp_rate = size / nginx_s / 1e6, size / cp_s / 1e6
        for label, seconds in zip(clis, cli_s, strict=True):
            cli_rate = size / seconds / 1e6
            self.emit(Figure("upload", f"{what}, command, {label}", "MB/s", cli_rate,
                             nginx_rate, f"target >= {COMMAND_UP_TARGET:.2f} of nginx PUT",
                             cli_rate / nginx_rate >= COMMAND_UP_TARGET, peer="nginx PUT"))
            self.emit(Figure("upload", f"{what}, command, {label}", "MB/s", cli_rate, cp_rate,
                             "beside cp: no target", None))

        first = next(iter(clis))
        remote = self.portal.home / f"{name}.{first.replace(' ', '-')}.1.bin"
        back = self.local / f"{name}.back"

        def down(label: str):
            dest = f"{back}.{label.replace(' ', '-')}"
            return Side(f"paddlectl cp ({label})",
                        lambda n: clis[label]("cp", f"{HOME}/{remote.name}", f"{dest}.{n}"),
                        lambda n: expect_file(Path(f"{dest}.{n}"), size, digest,
                                              f"paddlectl cp of the {what} down ({label})"),
                        lambda n: self.trash.append(Path(f"{dest}.{n}")))

        cp_s, *cli_s = self.rounds(
            f"download {what}", size, lambda: copy(remote, self.local / f"{name}.back.warm-up"),
            [Side("cp", lambda n: copy(remote, self.local / f"{name}.back.cp.{n}")),
             *(down(label) for label in clis)])
        cp_rate = size / cp_s / 1e6
        for label, seconds in zip(clis, cli_s, strict=True):
            cli_rate = size / seconds / 1e6
            self.emit(Figure("download", f"{what}, command, {label}", "MB/s", cli_rate, cp_rate,
                             f"target >= {COMMAND_DOWN_TARGET:.2f}",
                             cli_rate / cp_rate >= COMMAND_DOWN_TARGET))

    def paths(self) -> list[tuple[str, PfsPortal]]:
        """The portal's paths measured: through nginx (when it runs in front) and alone."""
        if self.plain is None:
            return [("python", self.portal)]
        return [("nginx front", self.portal), ("python", self.plain)]

    @staticmethod
    def large_figure(direction: str, what: str, size: int, cp_s: float, api_s: float) -> Figure:
        api, cp = size / api_s / 1e6, size / cp_s / 1e6
        # In-process transfers: the second table. Issue 21 replaced their old target (0.50 of
        # cp) with the whole commands' (of nginx's PUT up, of cp down).
        return Figure(direction, what, "MB/s", api, cp,
                      "in process, beside cp: no target (the commands' lines have it)", None)

    def memory_lines(self, small_mib: int, size_mib: int) -> tuple[list[str], bool]:
        """The memory lines, and whether the peak stayed independent of the file size."""
        kind = "per phase" if self.memory.per_phase else "lifetime, so far"
        peaks = "   ".join(f"{name} {mib(value)}" for name, value in self.peaks.items())
        lines = [f"memory   server peak RSS (VmHWM, {kind}):   {peaks}"]
        small_key, large_key = f"{mib_label(small_mib)} file", f"{mib_label(size_mib)} file"
        ok = True
        if small_key in self.peaks and large_key in self.peaks and small_key != large_key:
            growth = self.peaks[large_key] - self.peaks[small_key]
            ok = growth < MEMORY_GROWTH_MAX
            lines.append(
                f"memory   {large_key} vs {small_key}: {growth / (1 << 20):+.1f} MiB "
                f"for {size_mib - small_mib} MiB more data  (target: independent of file "
                f"size, growth < {MEMORY_GROWTH_MAX >> 20} MiB)  {'OK' if ok else 'MISSED'}")
        return lines, ok


# --- the whole run -----------------------------------------------------------------------------


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: 1 or more")
    return value


PHASES = ("small", "large", "commands")


def phase_list(text: str) -> tuple[str, ...]:
    chosen = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in chosen if name not in PHASES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of "
                                         f"{', '.join(PHASES)}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="PFS upload/download through the API on a fresh embedded portal, beside cp.")
    parser.add_argument("--size-mib", type=positive, default=1024,
                        help="the large file's size in MiB (default 1024); a file of a quarter "
                             "of it goes first, to compare the server's peak memory")
    parser.add_argument("--files", type=positive, default=10_000,
                        help="how many 4 KiB files (default 10000)")
    parser.add_argument("--repeat", type=positive, default=3,
                        help="rounds of each measurement; the best is printed (default 3)")
    parser.add_argument("--no-prime", dest="prime", action="store_false",
                        help="do not write and free scratch memory before each timed step")
    parser.add_argument("--sync", action="store_true",
                        help="time each step until its data is on disk (a sync ends it), for "
                             "cp and the API alike")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (var dir, database, portal log; "
                             "the data moved is removed after each phase)")
    parser.add_argument("--client", choices=["auto", "paddlectl", "requests"], default="auto",
                        help="measure through paddlecloud_client.transfer or requests directly "
                             "(default auto: paddlectl when usable)")
    parser.add_argument("--phases", type=phase_list, default=PHASES,
                        help=f"which phases, comma-separated (default {','.join(PHASES)}): "
                             "small files, the two large files in-process, whole commands")
    args = parser.parse_args(argv)
    small_mib = max(1, args.size_mib // 4)

    handle_signals()
    began = time.monotonic()
    portal = PfsPortal(free_port(), keep=args.keep)
    tmp = portal.tmp
    transfers: Transfers | None = None
    bench: Bench | None = None
    plain: PlainPortal | None = None
    code = 0
    try:
        local = tmp / "local"
        local.mkdir()
        portal.pfs_root.mkdir(parents=True)
        if os.stat(local).st_dev != os.stat(portal.pfs_root).st_dev:
            raise BenchError(f"{local} and {portal.pfs_root} are on different devices")
        portal.start()
        if "commands" in args.phases and "--front" in portal.serve_args and \
                portal.serve_args[portal.serve_args.index("--front") + 1] == "on":
            plain = PlainPortal(free_port(), portal)
            plain.start()
        transfers = make_transfers(args.client, portal.base, portal.password, tmp)
        memory = Memory(portal.pid)
        bench = Bench(portal, transfers, memory, local, repeat=args.repeat,
                      prime=args.prime, sync=args.sync)
        bench.plain = plain
        paths = ("nginx in front (runportal --front on), and a second runportal without it "
                 "(--front off) for the commands" if plain else
                 "alone (runportal --front off: no nginx installed)")
        print(f"portal: {paths}", flush=True)
        print(f"client: {transfers.description}", flush=True)
        print(f"disk:   {tmp} (PFS root and local data on one device, st_dev "
              f"{os.stat(local).st_dev:#x})", flush=True)
        rounds = f"{args.repeat} round{'s' if args.repeat != 1 else ''}"
        print(f"each figure: the best of {rounds} of cp and of the API, after a "
              f"warm-up cp (sources in the page cache); each step starts after a sync"
              f"{' and with freed memory to write into (primed)' if args.prime else ''}"
              f"{', and ends when its data is on disk (--sync)' if args.sync else ''}; "
              f"MB = 10^6 bytes", flush=True)
        print(f"small files: {args.files} x 4 KiB in directories of {FILES_PER_DIR}, sent and "
              f"fetched as one tar stream (cp -r)", flush=True)
        bench.warm_up()
        if "small" in args.phases:
            bench.phase("small files", lambda: bench.small_files(args.files))
        if "large" in args.phases:
            for size_mib in dict.fromkeys([small_mib, args.size_mib]):
                bench.phase(f"{mib_label(size_mib)} file",
                            lambda s=size_mib: bench.large_file(s))
        if "commands" in args.phases:
            bench.phase("commands", lambda: bench.commands(args.size_mib))
        lines, memory_ok = bench.memory_lines(small_mib, args.size_mib)
        for line in lines:
            print(line, flush=True)
        missed = sum(1 for figure in bench.figures if figure.ok is False) + (not memory_ok)
        print(f"{'all targets met' if not missed else f'{missed} target(s) MISSED'} "
              f"(client: {transfers.name})", flush=True)
    except BenchError as exc:
        log(f"failed: {exc}")
        log(f"portal log:\n{portal.log_tail()}")
        code = 1
    except (KeyboardInterrupt, Stopped):
        log("interrupted")
        code = 130
    except Exception as exc:  # a client's own error (paddlectl's, requests'): a failed transfer
        log(f"failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        log(f"portal log:\n{portal.log_tail()}")
        code = 1
    finally:
        if plain is not None:
            plain.stop()
        portal.shut_down(transfers.close if transfers is not None else None)
    log(f"run time {time.monotonic() - began:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
