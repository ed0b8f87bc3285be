"""nginx in front of the portal: it serves PFS downloads from disk with ``sendfile`` once the
portal has authorized them, and proxies everything else (pages, API, WebSockets, the
``*.localhost`` origins of interactive/proxy.py) to uvicorn on a private Unix socket.

How a download goes: the portal checks the request as always (token, path, permissions,
links: ``pfs.transfer``) and, instead of the bytes, answers ``X-Accel-Redirect`` to the
``internal`` location ``FILES_LOCATION``, which nginx alone can reach. That location serves
the PFS root with ``disable_symlinks on``: nginx opens every component of the path with
``O_NOFOLLOW`` below the root, so a link a job plants after the portal looked is refused, never
followed. Ranges and HEAD are nginx's.

Who is the client: uvicorn listens only on the socket, in a directory only the portal's user
can enter, so every request on it came through nginx, which sends the peer's address in
``X-PaddleCloud-Client`` (its own value replaces any the client sent). ``FrontApp`` makes that
the request's client before anything else reads it (``kernel.security.ForwardedHeaders``
then judges X-Forwarded-* by the real peer, as without the front).

``runportal`` runs ``NginxFront`` as its child when nginx is installed (PADDLECLOUD_FRONT);
deploy/ runs the same configuration as a sidecar (deploy/README.md).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from kernel.errors import error_body, storage_full
from pfs.front import FRONT_SCOPE, FrontFiles

logger = logging.getLogger(__name__)

FILES_LOCATION = "/_paddlecloud_pfs/"  # internal: only an X-Accel-Redirect of the portal's
CLIENT_HEADER = b"x-paddlecloud-client"
START_TIMEOUT = 10.0  # seconds nginx has to listen
STOP_TIMEOUT = 10.0
SOCKET_NAME = "portal.sock"  # the portal's, in nginx's work directory

# The configuration; {…} are filled by ``nginx_config``. Everything but the files' location
# goes to the portal unbuffered both ways (streamed logs, tar downloads, WebSockets and the
# bodies of uploads stream as they would to uvicorn).
CONFIG = """\
# Made by paddlecloud.front (runportal), or deploy/nginx.conf: the same configuration.
{user}worker_processes 1;
working_directory {work};  # where the portal's socket is (see NginxFront)
pid {work}/nginx.pid;
error_log stderr warn;
daemon off;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    server_tokens off;
    sendfile on;
    tcp_nopush on;
    types {{ }}
    default_type application/octet-stream;
    client_body_temp_path {work}/client_body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    client_max_body_size 0;  # the portal's limits apply (PADDLECLOUD_PFS_MAX_UPLOAD, ...)
    # A WebSocket's upgrade is passed on; any other request's Connection is cleared, so the
    # connection to the portal stays open for the next (keepalive), not one per request.
    map $http_upgrade $connection_upgrade {{ default upgrade; "" ""; }}
    upstream paddlecloud_portal {{ server unix:{socket}; keepalive 32; }}
    server {{
        listen {listen};
        server_name _;
        location / {{
            proxy_pass http://paddlecloud_portal;
            include {work}/portal-headers.conf;
            proxy_request_buffering off;
            proxy_buffering off;
            proxy_read_timeout 1d;
            proxy_send_timeout 1d;
        }}
        # A resumable upload's chunk (PATCH): the portal is asked first, without the body
        # (auth_request: token, upload, offset, checksum), and only then does nginx read the
        # body, into a file on the PFS's file system that the portal moves into place.
        location ~ "^/api/v1/pfs/uploads/[0-9a-fA-F-]{{32,36}}/?$" {{
            error_page 418 = @portal;
            if ($request_method != PATCH) {{ return 418; }}
            auth_request /_paddlecloud_check;
            auth_request_set $paddlecloud_refusal $upstream_http_x_paddlecloud_refusal;
            auth_request_set $paddlecloud_refused $upstream_status;
            error_page 401 403 500 = /_paddlecloud_refused/$paddlecloud_refused;
            client_body_in_file_only clean;
            # Read from the client and written to the file 4 MiB at a time, not 16 KiB: 1 GiB
            # came in at 604 MB/s, now at ~1 GB/s (bench/pfs.py).
            client_body_buffer_size 4m;
            client_body_temp_path {body};
            proxy_pass http://paddlecloud_portal;
            include {work}/portal-headers.conf;
            proxy_set_header X-PaddleCloud-Body-File $request_body_file;
            proxy_set_header X-PaddleCloud-Body-Length $content_length;
            proxy_set_header Content-Length "";
            proxy_pass_request_body off;
            proxy_read_timeout 1d;
        }}
        location = /_paddlecloud_check {{
            internal;
            proxy_pass http://paddlecloud_portal$request_uri;
            include {work}/portal-headers.conf;
            include {work}/check-headers.conf;
        }}
        # The check's refusal, with the API's own answer (its status and JSON body): the body
        # the client sends meanwhile is discarded, never stored.
{refusals}        # Allowed by the check, then nginx could not store the body (500): its file
        # system, the PFS's, is full (nginx's log says so); its partial file is removed.
        location = /_paddlecloud_refused/200 {{
            internal;
            default_type application/json;
            return 507 '{storage_full}';
        }}
        location /_paddlecloud_refused/ {{ internal; return 502; }}
        location @portal {{
            proxy_pass http://paddlecloud_portal;
            include {work}/portal-headers.conf;
            proxy_request_buffering off;
            proxy_buffering off;
        }}
        location {files} {{
            internal;
            alias {pfs_root}/;
            disable_symlinks on from=$document_root;
            sendfile_max_chunk 4m;
            # The portal's answer chose these (pfs.transfer): kept on the file nginx sends
            # (Content-Type, Content-Disposition and Accept-Ranges are kept by nginx itself).
            add_header Content-Security-Policy $upstream_http_content_security_policy always;
            add_header X-Content-Type-Options $upstream_http_x_content_type_options always;
            add_header X-Frame-Options $upstream_http_x_frame_options always;
            add_header Referrer-Policy $upstream_http_referrer_policy always;
            add_header Cross-Origin-Opener-Policy $upstream_http_cross_origin_opener_policy
                always;
            add_header Strict-Transport-Security $upstream_http_strict_transport_security
                always;
        }}
    }}
}}
"""


# What every request passed to the portal carries; the headers only nginx may set are
# cleared (a client's own are never passed on).
PORTAL_HEADERS = """\
proxy_http_version 1.1;
proxy_set_header Host $http_host;
proxy_set_header Upgrade $http_upgrade;
proxy_set_header Connection $connection_upgrade;
proxy_set_header X-PaddleCloud-Client $remote_addr;
proxy_set_header X-PaddleCloud-Check "";
proxy_set_header X-PaddleCloud-Body-File "";
proxy_set_header X-PaddleCloud-Body-Length "";
"""
CHECK_HEADERS = """\
proxy_pass_request_body off;
proxy_set_header Content-Length "";
proxy_set_header X-PaddleCloud-Check 1;
proxy_set_header X-PaddleCloud-Body-Length $content_length;
"""
BODY_DIR = ".paddlecloud-front-body"  # below the PFS root, outside every area
REFUSED = (400, 401, 403, 404, 409, 411, 413, 422, 503)  # what the check may answer
REFUSAL = """\
        location = /_paddlecloud_refused/{status} {{
            internal;
            default_type application/json;
            return {status} $paddlecloud_refusal;
        }}
"""


def nginx_binary() -> str | None:
    """The nginx to run, if there is one on PATH (Debian's is /usr/sbin/nginx: root's PATH
    has it, most users' do not)."""
    return shutil.which("nginx")


def nginx_config(*, listen: str, socket_path: str, pfs_root: Path, work: Path) -> str:
    """nginx's configuration: listening on ``listen`` (``host:port``), the portal on
    ``socket_path`` (relative: to ``work``, the worker's directory), the files of ``pfs_root``
    served to the portal's redirects, its own state in ``work``. Run as root, its worker takes
    the portal's user (root: a local portal's homes belong to their users)."""
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
    return CONFIG.format(user=user, work=work, socket=socket_path, listen=listen,
                         files=FILES_LOCATION, pfs_root=str(pfs_root).rstrip("/"),
                         body=Path(pfs_root) / BODY_DIR,
                         refusals="".join(REFUSAL.format(status=status) for status in REFUSED),
                         storage_full=_storage_full_body())


def _storage_full_body() -> str:
    """The API's own answer when the PFS is full (kernel.errors), as nginx returns it."""
    full = storage_full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    body = json.dumps(error_body(full.code, full.message), separators=(",", ":"))
    assert "'" not in body and "$" not in body  # quoted for nginx as it is
    return body


def listen_address(host: str, port: int) -> str:
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    """In nginx's process: receive SIGTERM when the portal dies, whatever kills it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class NginxFront:
    """nginx as the portal's child, in a private work directory (config, socket, temporary
    files), stopped by ``stop`` (and by the kernel if the portal dies first)."""

    def __init__(self, *, host: str, port: int, pfs_root: Path, binary: str | None = None,
                 var_dir: Path | None = None):
        self.host, self.port, self.pfs_root = host, port, Path(pfs_root)
        self.binary = binary or nginx_binary()
        if self.binary is None:
            raise RuntimeError("nginx is not installed (Debian: apt-get install nginx-light)")
        # 0700: ours only. In the var directory, so that a portal killed outright leaves
        # nothing elsewhere (in /tmp without one).
        if var_dir is not None:
            var_dir.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="front-" if var_dir else "paddlecloud-front-",
                                          dir=var_dir))
        # A Unix socket's path has at most 108 bytes, which a var directory's may pass: the
        # portal binds it through a descriptor of the directory (/proc/self/fd/N/…, valid in
        # this process only) and nginx's worker connects to it relative to its
        # working_directory, the same directory.
        self._work_fd = os.open(self.work, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.socket_path = f"/proc/self/fd/{self._work_fd}/{SOCKET_NAME}"
        self.process: subprocess.Popen | None = None
        self._log: threading.Thread | None = None
        self._said: collections.deque[str] = collections.deque(maxlen=20)  # its last lines

    def listen(self) -> socket.socket:
        """The portal's socket, bound and listening before nginx starts: connections nginx
        makes before the portal serves wait in its backlog (no 502 while the portal starts).
        The caller serves on it (uvicorn's ``fd``) and closes it."""
        portal = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            portal.bind(self.socket_path)
            portal.listen(4096)
        except OSError:
            portal.close()
            raise
        return portal

    def start(self) -> None:
        """Start nginx; return once it listens (without ``listen`` first, the portal's socket
        may come later: until then nginx answers 502)."""
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.work / name).mkdir(exist_ok=True)
        (self.pfs_root / BODY_DIR).mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.work / "portal-headers.conf").write_text(PORTAL_HEADERS)
        (self.work / "check-headers.conf").write_text(CHECK_HEADERS)
        config = self.work / "nginx.conf"
        config.write_text(nginx_config(listen=listen_address(self.host, self.port),
                                       socket_path=SOCKET_NAME,
                                       pfs_root=self.pfs_root, work=self.work))
        self.process = subprocess.Popen(  # noqa: S603 - the system's nginx, our config
            [self.binary, "-p", str(self.work), "-c", str(config), "-e", "stderr"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent)
        # Its error log is read as it comes, into the portal's log: a pipe nobody reads fills
        # up (64 KiB: a few hundred refused connections while the portal starts), and nginx
        # then blocks writing to it, serving nothing.
        self._log = threading.Thread(target=self._forward, args=(self.process.stderr,),
                                     name="nginx-error-log", daemon=True)
        self._log.start()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                self._log.join(STOP_TIMEOUT)
                self.process = None
                self.cleanup()
                raise RuntimeError(f"nginx did not start: {' '.join(self._said)[-800:]}")
            with contextlib.suppress(OSError), socket.create_connection(
                    (self.host.strip("[]"), self.port), timeout=1):
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"nginx did not listen on {self.host}:{self.port} within "
                                   f"{START_TIMEOUT:.0f} s")
            time.sleep(0.05)
        logger.info("nginx in front on %s:%s (pid %s)", self.host, self.port, self.process.pid)

    def stop(self) -> None:
        """Stop nginx (and wait for it), remove the work directory."""
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()  # nginx's fast shutdown: its worker goes too
                try:
                    process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            self._log.join(STOP_TIMEOUT)  # its workers went with it: the log's end
        self.cleanup()

    def _forward(self, stream) -> None:
        with stream:
            for raw in stream:
                line = raw.decode(errors="replace").strip()
                if line:
                    self._said.append(line)
                    logger.warning("nginx: %s", line)

    def cleanup(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        if self._work_fd is not None:
            os.close(self._work_fd)
            self._work_fd = None


class FrontApp:
    """The outermost ASGI layer of a portal that only nginx reaches (see the module): the
    client is the one nginx names, and the PFS byte streams may hand files to nginx."""

    def __init__(self, application, *, pfs_root: Path):
        self.application = application
        self.files = FrontFiles(location=FILES_LOCATION, root=Path(pfs_root),
                                body_dir=Path(pfs_root) / BODY_DIR)

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            client = None
            headers = []
            for key, value in scope.get("headers") or []:
                if key == CLIENT_HEADER:
                    client = value.decode("latin-1")
                else:
                    headers.append((key, value))
            scope = {**scope, "headers": headers, FRONT_SCOPE: self.files,
                     "client": (client, 0) if client else scope.get("client")}
        return await self.application(scope, receive, send)
